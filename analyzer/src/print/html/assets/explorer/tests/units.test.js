"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const { load, rustFixture } = require("./load.js");

const { units } = load();
const table = rustFixture().units;

test("sizes read as units::bytes writes them", () => {
  for (const [n, text] of table.bytes) assert.equal(units.bytes(n), text, `${n}`);
});

test("durations read as units::duration_ns writes them", () => {
  for (const [n, text] of table.duration_ns) assert.equal(units.duration(n), text, `${n}`);
});

test("counts read as units::count writes them", () => {
  for (const [n, text] of table.count) assert.equal(units.count(n), text, `${n}`);
});

test("ties round to the even digit, as Rust's formatting does", () => {
  assert.equal(units.fixed(1.25, 1), "1.2");
  assert.equal(units.fixed(1.75, 1), "1.8");
  assert.equal(units.fixed(2.5, 0), "2");
  assert.equal(units.fixed(0.125, 2), "0.12");
  // Not a tie in binary: 1.35 is a little above.
  assert.equal(units.fixed(1.35, 1), "1.4");
  assert.equal(units.fixed(3, 2), "3.00");
});

test("fractions and negatives are rounded and clamped first", () => {
  assert.equal(units.bytes(-5), "0 B");
  assert.equal(units.bytes(1023.6), "1.0 KiB");
  assert.equal(units.duration(-1), "0 ns");
  assert.equal(units.count(1234.5), "1,235");
});

test("html is escaped and long names are cut from the left", () => {
  assert.equal(units.escapeHtml(`<a href="x">&</a>`), "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;");
  assert.equal(units.shortLeft("abcdef", 4), "…def");
  assert.equal(units.shortLeft("abc", 4), "abc");
});
