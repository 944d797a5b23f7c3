"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const zlib = require("node:zlib");
const { load, rustFixture } = require("./load.js");

const { decode } = load();

test("varints and zigzag", () => {
  const bytes = Uint8Array.from([0xac, 0x02, 0, 1, 2, 3, 0xff, 0xff, 0xff, 0xff, 0x0f]);
  const columns = decode.readColumns(bytes, [["u", 1], ["s", 4], ["big", 1]]);
  assert.deepEqual(Array.from(columns.u), [300]);
  assert.deepEqual(Array.from(columns.s, decode.unzigzag), [0, -1, 1, -2]);
  assert.deepEqual(Array.from(columns.big), [2 ** 32 - 1]);
});

test("base64 and zlib, as the page reads its bulk", async () => {
  const text = zlib.deflateSync(Buffer.from([5, 0x80, 0x01])).toString("base64");
  const columns = await decode.columns(` ${text}\n`, [["a", 2]]);
  assert.deepEqual(Array.from(columns.a), [5, 128]);
});

test("the Rust encoder's columns decode to their listed lengths", async () => {
  const { data, bulk } = rustFixture().explorer;
  const columns = await decode.columns(bulk, data.columns);
  for (const [name, length] of data.columns) assert.equal(columns[name].length, length, name);
  // Every byte is read: the last column ends where the data does.
  const bytes = await decode.inflate(decode.base64Bytes(bulk));
  let varints = 0;
  for (const b of bytes) if (b < 128) varints++;
  assert.equal(varints, data.columns.reduce((n, [, length]) => n + length, 0));
});
