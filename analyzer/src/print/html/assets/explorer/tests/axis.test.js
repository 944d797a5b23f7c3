"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const { load, rustFixture } = require("./load.js");

const { axis, decode, model } = load();

// Events 0-9 over 100 ns each, then a pause of 10 µs before event 10 that
// busy time cuts to 1 µs, then ten more.
function mapping() {
  const index = [0, 9, 10, 19, 20], time = [0, 900, 10_900, 11_800, 11_806];
  const busy = time.map((t, k) => (index[k] >= 10 ? t - 9_000 : t));
  const idle = { index: [10], gap: [10_000], threshold: 1_000 };
  return axis.mapping({ index: Float64Array.from(index), time: Float64Array.from(time), busy: Float64Array.from(busy) }, idle);
}

test("events go between their knots in proportion, and back", () => {
  const m = mapping();
  assert.equal(m.placeOf("events", 4.5), 4.5);
  assert.equal(m.placeOf("time", 4.5), 450);
  assert.equal(m.placeOf("busy", 10), 1_900);
  assert.equal(m.placeOf("time", 9.5), 5_900);
  assert.equal(m.placeOf("time", 25), 11_806);
  // Before the first event: on the first stretch's slope.
  assert.equal(m.placeOf("time", -1), -100);
  for (const mode of ["events", "time", "busy"]) {
    for (const event of [0, 3.25, 9, 9.5, 10, 15, 20]) assert.ok(Math.abs(m.eventAt(mode, m.placeOf(mode, event)) - event) < 1e-9, `${mode} ${event}`);
  }
  assert.equal(m.eventAt("time", -5), 0);
  assert.equal(m.eventAt("time", 1e9), 20);
});

test("busy time cuts each idle gap to its threshold", () => {
  const m = mapping();
  assert.equal(m.collapsed(9), 0);
  assert.equal(m.collapsed(10), 9_000);
  assert.equal(m.placeOfTimed("busy", 12, 11_100), 2_100);
  assert.equal(m.placeOfTimed("time", 12, 11_100), 11_100);
  assert.equal(m.placeOfTimed("events", 12, 11_100), 12);
});

test("the Rust encoder's busy knots are time less the idle gaps cut", async () => {
  const { data, bulk } = rustFixture().explorer;
  const m = model.build(data, await decode.columns(bulk, data.columns));
  const mapped = axis.mapping(m.knots, data.idle);
  m.knots.index.forEach((event, k) => assert.equal(m.knots.busy[k], m.knots.time[k] - mapped.collapsed(event), `knot ${k}`));
});

test("steps are round and bytes ticks read in one unit", () => {
  assert.equal(axis.niceStep(0.3, [1, 2, 2.5, 5]), 0.5);
  assert.equal(axis.niceStep(7, [1, 2, 2.5, 5]), 10);
  assert.equal(axis.niceStep(2.1, [1, 2, 2.5, 5]), 2.5);
  assert.equal(axis.byteStep(5 * 1024), 1024);
  assert.equal(axis.byteStep(6 * 2 ** 30), 2 ** 30 * 2);
  // Round in the unit the labels show: 1 GiB, not 1000 MiB (0.977 GiB).
  assert.equal(axis.byteStep(5 * 1_010 * 2 ** 20), 1024 * 2 ** 20);
  assert.equal(axis.byteStep(4_500 * 2 ** 20), 1024 * 2 ** 20);
  const gib = 2 ** 30;
  const ticks = axis.byteTicks(1.5 * gib, 0.25 * gib);
  assert.deepEqual([0, 0.25 * gib, gib].map(ticks), ["0", "0.25 GiB", "1.00 GiB"]);
  assert.equal(axis.byteTicks(900, 200)(400), "400 B");
});

test("x ticks fall on round values of what the labels read", () => {
  const ticks = axis.xTicks("events", 0, 1000, 1200, 100);
  assert.deepEqual(ticks.slice(0, 3), [[0, "100"], [100, "200"], [200, "300"]]);
  const time = axis.xTicks("time", 250, 2_000_250, 600, 1_000_000);
  assert.deepEqual(time.map(([, label]) => label), ["1.50 ms", "2.00 ms", "2.50 ms", "3.00 ms"]);
  assert.equal(time[0][0], 500_000);
  assert.deepEqual(axis.xTicks("busy", 0, 10, 240, 0)[0], [0, "0"]);
});

test("a bytes axis steps round in the unit its labels show", () => {
  const G = 2 ** 30, M = 2 ** 20;
  // 1.6 GiB stepped 1000 MiB / 2 read 0.488, 0.977, 1.465 GiB.
  for (const [max, want] of [
    [1.6 * G, ["0", "0.5 GiB", "1.0 GiB", "1.5 GiB"]],
    [2.5 * G, ["0", "0.5 GiB", "1.0 GiB", "1.5 GiB", "2.0 GiB", "2.5 GiB"]],
    [1.2 * G, ["0", "0.25 GiB", "0.50 GiB", "0.75 GiB", "1.00 GiB"]],
    [900 * M, ["0", "200 MiB", "400 MiB", "600 MiB", "800 MiB"]],
    [7.3 * G, ["0", "2 GiB", "4 GiB", "6 GiB"]],
  ]) {
    const step = axis.byteStep(max), label = axis.byteTicks(max, step);
    const got = [];
    for (let v = 0; v <= max; v += step) got.push(label(v));
    assert.deepEqual(got, want, `${max / G} GiB`);
  }
});
