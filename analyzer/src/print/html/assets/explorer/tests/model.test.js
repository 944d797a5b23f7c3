"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const { load, rustFixture } = require("./load.js");

const { decode, model } = load();

async function built() {
  const { data, bulk, expect } = rustFixture().explorer;
  const columns = await decode.columns(bulk, data.columns);
  return { data, expect, built: model.build(data, columns) };
}

test("the model of the Rust encoder's data is the explorer analysis's", async () => {
  const { data, expect, built: m } = await built();
  const a = m.allocations;
  assert.equal(a.count, expect.allocations.size.length);
  assert.deepEqual(Array.from(a.allocEvent), expect.allocations.allocEvent);
  assert.deepEqual(Array.from(a.allocTime), expect.allocations.allocTime);
  assert.deepEqual(Array.from(a.freeEvent), expect.allocations.freeEvent);
  assert.deepEqual(Array.from(a.size), expect.allocations.size);
  assert.deepEqual(Array.from(a.site), expect.allocations.site);
  const end = m.knots.time[m.knots.time.length - 1];
  assert.deepEqual(Array.from(a.freeTime), expect.allocations.freeTime.map((t) => (t === null ? end : t)));
  assert.deepEqual(Array.from(a.size, (size, k) => size - decode.unzigzag(a.slack[k])), expect.allocations.requested);
  assert.deepEqual(m.stacks.map((s) => Array.from(s)), expect.stacks);
  assert.deepEqual(Array.from(m.levels[0].allocated.last), expect.allocated_last);
  assert.deepEqual(Array.from(m.knots.index).slice(0, -1), expect.knots.index);
  assert.deepEqual(Array.from(m.knots.time).slice(0, -1), expect.knots.time);
  assert.deepEqual(Array.from(m.knots.busy).slice(0, -1), expect.knots.busy);
  assert.equal(m.knots.index[m.knots.index.length - 1], data.events);
  assert.deepEqual(
    m.checkpoints.map((c) => ({ event: c.event, segments: c.segments.map((s) => ({ addr: s.addr, size: s.size, blocks: s.blocks.map((b) => [b.offset, b.size, b.allocation]) })) })),
    expect.checkpoints,
  );
  assert.deepEqual(m.phases.map((p) => p.path), expect.phases);
});

test("coarser levels merge four buckets and keep their extremes", () => {
  const values = [1, 9, 2, 3, 7, 0, 4];
  const zig = (v) => (v >= 0 ? 2 * v : -2 * v - 1);
  const n = 700 * 4 + 3;
  const col = (f) => Float64Array.from({ length: n }, (_, b) => f(b));
  const last = (b) => values[b % values.length];
  const columns = {
    a_last: col((b) => zig(last(b) - (b ? last(b - 1) : 0))), a_hi: col(() => 1), a_lo: col(() => 0),
    r_last: col(() => 0), r_hi: col(() => 0), r_lo: col(() => 0),
    c_last: col(() => 0), c_hi: col(() => 0), c_lo: col(() => 0),
  };
  const levels = model.levels({ bucket_events: 2 }, columns);
  assert.deepEqual(levels.map((l) => l.buckets), [n, 701, 176]);
  assert.deepEqual(levels.map((l) => l.bucketEvents), [2, 8, 32]);
  const coarse = levels[1];
  assert.deepEqual([coarse.allocated.min[0], coarse.allocated.max[0], coarse.allocated.last[0]], [1, 10, 3]);
  // The last, partial, bucket: three of the finest.
  assert.equal(coarse.allocated.last[700], levels[0].allocated.last[n - 1]);
  assert.equal(coarse.allocated.max[700], Math.max(...levels[0].allocated.max.slice(n - 3)));
  // No pool columns: no pools quantity, at any level.
  assert.equal(levels[0].pools, undefined);
  assert.equal(coarse.pools, undefined);
});

test("bytes in private pools are a quantity of every level when the data has them", () => {
  const n = 9;
  const col = (f) => Float64Array.from({ length: n }, (_, b) => f(b));
  const zig = (v) => (v >= 0 ? 2 * v : -2 * v - 1);
  const pools = [0, 0, 4, 4, 6, 2, 2, 8, 8];
  const columns = {
    a_last: col(() => 0), a_hi: col(() => 0), a_lo: col(() => 0),
    r_last: col(() => 0), r_hi: col(() => 0), r_lo: col(() => 0),
    c_last: col(() => 0), c_hi: col(() => 0), c_lo: col(() => 0),
    p_last: col((b) => zig(pools[b] - (b ? pools[b - 1] : 0))), p_hi: col(() => 0), p_lo: col(() => 0),
  };
  const levels = model.levels({ bucket_events: 1 }, columns);
  assert.deepEqual(Array.from(levels[0].pools.last), pools);
});

test("a repeated phase's buttons are told apart, alike ones as one", () => {
  const phase = (path, begin) => ({ path, name: path.split("/").pop(), begin, end: begin + 5 });
  // Iterations: one button each, named by its path.
  const iterations = [phase("iter0", 0), phase("iter0/forward", 1), phase("iter1", 10), phase("iter1/forward", 11)];
  assert.deepEqual(model.repetitionChips(iterations, "iter#/forward").map((c) => c.label), ["iter0/forward", "iter1/forward"]);
  // The same path 29 times: one button, "×29", spanning them all.
  const same = Array.from({ length: 29 }, (_, k) => phase("forward", 10 * k));
  const chips = model.repetitionChips(same, "forward");
  assert.equal(chips.length, 1);
  assert.equal(chips[0].label, "forward ×29");
  assert.equal(chips[0].begin, 0);
  assert.equal(chips[0].end, 285);
});
