// Allocations one by one, laid out as PyTorch's memory viz does: live
// allocations stacked in the order they were made; when one is freed,
// those above it drop by its size.
/* exported layout */
const layout = (() => {
  // More allocations in view than this, or more vertices than VERTEX_MAX,
  // and the chart shows the allocated area instead.
  const DETAIL_MAX = 4000, VERTEX_MAX = 600000;

  // The layout of the allocations live between events `from` and `to` of a
  // window of `events`: { ok, picked, vertices }, `vertices` giving each
  // picked allocation's corners as [event, time or -1, offset or -1]
  // (a time when the event's is known exactly, an offset until the next
  // corner); or { ok: false, reason } where there are too many.
  function stack(allocations, from, to, events) {
    const a = allocations;
    const picked = [];
    for (let k = 0; k < a.count && a.allocEvent[k] <= to; k++) {
      if (a.freeEvent[k] > from) {
        picked.push(k);
        if (picked.length > DETAIL_MAX) return { ok: false, reason: "many" };
      }
    }
    // Events inside the window: allocations (1) and frees (0), by index.
    const changes = [];
    for (const k of picked) {
      if (a.allocEvent[k] > from) changes.push([a.allocEvent[k], 1, k]);
      if (a.freed[k] && a.freeEvent[k] <= to) changes.push([a.freeEvent[k], 0, k]);
    }
    changes.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
    const live = picked.filter((k) => a.allocEvent[k] <= from);
    const vertices = new Map();
    let top = 0;
    const windowStart = Math.max(0, from);
    for (const k of live) { vertices.set(k, [[windowStart, -1, top]]); top += a.size[k]; }
    let total = live.length;
    for (const [event, isAlloc, k] of changes) {
      if (isAlloc) {
        vertices.set(k, [[event, a.allocTime[k], top]]);
        live.push(k);
        top += a.size[k];
        total++;
      } else {
        const i = live.indexOf(k);
        if (i < 0) continue;
        vertices.get(k).push([event, a.freeTime[k], -1]);
        live.splice(i, 1);
        top -= a.size[k];
        let offset = 0;
        for (let j = 0; j < i; j++) offset += a.size[live[j]];
        for (let j = i; j < live.length; j++) {
          vertices.get(live[j]).push([event, a.freeTime[k], offset]);
          offset += a.size[live[j]];
          total++;
        }
        if (total > VERTEX_MAX) return { ok: false, reason: "busy" };
      }
    }
    for (const k of live) vertices.get(k).push([Math.min(events, to + 1), -1, -1]);
    return { ok: true, picked, vertices };
  }

  return { stack, DETAIL_MAX, VERTEX_MAX };
})();
