#!/usr/bin/env node
// An independent reader and writer of TensorBoard event files, the oracle of
// tests/io/tfevents_test.cc and tests/rl/tensorboard_log_test.cc. Nothing here shares code with
// src/io/tfevents.cc:
//   * TFRecord framing and CRCs: @roboflow/tfrecords (its crc32c, maskCrc and readInt64 helpers,
//     and TFRecordsBuilder.buildTFRecords to write);
//   * protocol buffers: protobufjs, on the subset of tensorboard/compat/proto/event.proto and
//     summary.proto below (field numbers as published there).
// Installed by scripts/setup.sh (npm install --prefix tools/oracles).
//
//   node tools/oracles/tfevents_check.js read FILE OUT.json
//     Checks every record's length and data CRC and decodes every Event; writes
//     {"file_version": "...", "records": N, "scalars": [{"step", "wall_time", "tag", "value",
//     "bits"}]} where bits is the float32 simple_value's bit pattern ("0x3f800000").
//   node tools/oracles/tfevents_check.js write FILE
//     Writes an event file of the scalars listed by `expected_written()` below, for our reader.
"use strict";

const fs = require("fs");
const protobuf = require("protobufjs");
const { crc32c, maskCrc, readInt64 } = require("@roboflow/tfrecords/src/tensorFlowHelpers");
const { TFRecordsBuilder } = require("@roboflow/tfrecords/src/tensorFlowBuilder");

const kProto = `
syntax = "proto3";
package tensorboard;
message Event {
  double wall_time = 1;
  int64 step = 2;
  oneof what {
    string file_version = 3;
    bytes graph_def = 4;
    Summary summary = 5;
    bytes meta_graph_def = 9;
  }
}
message Summary {
  message Value {
    string node_name = 7;
    string tag = 1;
    oneof value {
      float simple_value = 2;
      bytes obsolete_old_style_histogram = 3;
    }
  }
  repeated Value value = 1;
}
`;
const Event = protobuf.parse(kProto).root.lookupType("tensorboard.Event");

function fail(message) {
  process.stderr.write(`tfevents_check: ${message}\n`);
  process.exit(1);
}

function floatBits(value) {
  const b = Buffer.alloc(4);
  b.writeFloatLE(value);
  return "0x" + b.readUInt32LE().toString(16).padStart(8, "0");
}

function readRecords(path) {
  const data = fs.readFileSync(path);
  const records = [];
  let pos = 0;
  while (pos < data.length) {
    if (data.length - pos < 12) fail(`${path}: record ${records.length} at byte ${pos}: truncated header`);
    const lengthBytes = data.subarray(pos, pos + 8);
    const length = readInt64(Buffer.from(lengthBytes));
    if (maskCrc(crc32c(lengthBytes)) !== data.readUInt32LE(pos + 8))
      fail(`${path}: record ${records.length} at byte ${pos}: length CRC mismatch`);
    if (data.length - pos - 12 < length + 4) fail(`${path}: record ${records.length} at byte ${pos}: truncated data`);
    const payload = data.subarray(pos + 12, pos + 12 + length);
    if (maskCrc(crc32c(payload)) !== data.readUInt32LE(pos + 12 + length))
      fail(`${path}: record ${records.length} at byte ${pos}: data CRC mismatch`);
    records.push(payload);
    pos += 12 + length + 4;
  }
  return records;
}

function read(path, out) {
  const records = readRecords(path);
  if (records.length === 0) fail(`${path}: no records`);
  const events = records.map((r) => Event.toObject(Event.decode(r), { longs: String, oneofs: true }));
  if (events[0].what !== "fileVersion") fail(`${path}: the first event holds ${events[0].what}, not file_version`);
  const scalars = [];
  for (const e of events.slice(1)) {
    if (e.what !== "summary") fail(`${path}: an event holds ${e.what}, not a summary`);
    for (const v of e.summary.value || []) {
      if (v.value !== "simpleValue") fail(`${path}: value '${v.tag}' holds ${v.value}, not simple_value`);
      scalars.push({ step: Number(e.step || 0), wall_time: e.wallTime, tag: v.tag, value: v.simpleValue,
                     bits: floatBits(v.simpleValue) });
    }
  }
  fs.writeFileSync(out, JSON.stringify({ file_version: events[0].fileVersion, records: records.length, scalars }));
}

// What `write` puts in its file: a few steps (one of them large) with awkward float32 values.
function expected_written() {
  return [
    { step: 1, tag: "reward_mean", value: 0.1 },
    { step: 1, tag: "timing/total", value: 2.5 },
    { step: 2, tag: "reward_mean", value: -3.4028234663852886e38 },
    { step: 2, tag: "val_accuracy", value: 1.401298464324817e-45 },
    { step: 5000000000, tag: "sft/loss", value: 0 },
  ];
}

function write(path) {
  const byStep = new Map();
  for (const s of expected_written()) {
    if (!byStep.has(s.step)) byStep.set(s.step, []);
    byStep.get(s.step).push({ tag: s.tag, simpleValue: s.value });
  }
  const events = [Event.create({ wallTime: 1700000000.25, fileVersion: "brain.Event:2" })];
  for (const [step, value] of byStep)
    events.push(Event.create({ wallTime: 1700000000.5 + step, step, summary: { value } }));
  const records = events.map((e) => Buffer.from(Event.encode(e).finish()));
  fs.writeFileSync(path, TFRecordsBuilder.buildTFRecords(records));
}

// The third-party CRC must itself be right before it judges ours (RFC 3720 B.4 check value).
if (crc32c(Buffer.from("123456789")) !== 0xe3069283) fail("@roboflow/tfrecords crc32c fails its check value");

const [mode, file, out] = process.argv.slice(2);
if (mode === "read" && file && out) read(file, out);
else if (mode === "write" && file) write(file);
else fail("usage: tfevents_check.js read FILE OUT.json | write FILE");
