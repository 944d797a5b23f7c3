"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const { load } = require("./load.js");

const { layout } = load();

// Allocations as the model keeps them: made and freed at these events (a
// free event of the window's length: never freed), times ten times those.
function allocations(list) {
  const count = list.length;
  const a = { count, allocEvent: new Float64Array(count), freeEvent: new Float64Array(count), allocTime: new Float64Array(count), freeTime: new Float64Array(count), freed: new Uint8Array(count), size: new Float64Array(count) };
  list.forEach(([made, freed, size], k) => {
    a.allocEvent[k] = made; a.freeEvent[k] = freed ?? 100; a.freed[k] = freed === null ? 0 : 1;
    a.allocTime[k] = made * 10; a.freeTime[k] = (freed ?? 100) * 10; a.size[k] = size;
  });
  return a;
}

test("live allocations stack in the order made and drop when one below is freed", () => {
  const a = allocations([[0, 50, 4], [10, null, 2], [20, 30, 8]]);
  const { ok, picked, vertices } = layout.stack(a, 5, 60, 100);
  assert.ok(ok);
  assert.deepEqual(picked, [0, 1, 2]);
  // Live before the window: from its start, at the bottom.
  assert.deepEqual(vertices.get(0), [[5, -1, 0], [50, 500, -1]]);
  // Made at 10 on top of the first; drops to the bottom when it is freed.
  assert.deepEqual(vertices.get(1), [[10, 100, 4], [50, 500, 0], [61, -1, -1]]);
  assert.deepEqual(vertices.get(2), [[20, 200, 6], [30, 300, -1]]);
});

test("too many allocations in view are not laid out", () => {
  const many = allocations(Array.from({ length: layout.DETAIL_MAX + 1 }, (_, k) => [k, null, 1]));
  assert.deepEqual(layout.stack(many, 0, 1e9, 1e9), { ok: false, reason: "many" });
  const few = allocations([[0, null, 1]]);
  assert.equal(layout.stack(few, 10, 20, 100).ok, true);
});
