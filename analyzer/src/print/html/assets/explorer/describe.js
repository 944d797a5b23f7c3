// What the explorer says in words: an allocation's tooltip, a checkpoint's
// name, a stack, the status line under the chart. Each takes the page's
// state (interact.js's `explorer`).
/* global units, decode, layout */
/* exported describe */
const describe = (() => {
  const { bytes, duration, count, escapeHtml } = units;
  // A time from the window's first event, shown from the trace's start.
  const atTime = (explorer, t) => duration(t + explorer.data.start_ns);

  const KIND_NAMES = { allocated_peak: "allocated peak", reserved_peak: "reserved peak", oom: "out of memory", end: "end", even: "evenly spaced" };
  function checkpointName(explorer, c) {
    return `${c.kinds.map((k) => KIND_NAMES[k]).join(", ")} at event ${count(c.index)}, ${atTime(explorer, c.time)}`;
  }

  // A stack's frames, one a line; past `limit` (when given), a line says
  // how many more there are.
  function stackText(explorer, stack, limit) {
    const frames = explorer.model.stacks[stack] || [];
    const lines = Array.from(frames.slice(0, limit || frames.length), (f) => explorer.data.frames[f]);
    if (limit && frames.length > limit) lines.push(`… ${frames.length - limit} more frames (click to pin)`);
    return lines.join("\n");
  }

  // What the category code of allocation `k` names, with its colour.
  const categoryOf = (explorer, k) => explorer.data.categories[explorer.model.allocations.category[k] & 7];

  // An allocation: its size, site, what it holds, its phase, when it was
  // made and freed, and its stack (`full`: every frame).
  function allocation(explorer, k, full) {
    const a = explorer.model.allocations, data = explorer.data, first = data.first_index;
    const phase = a.phase[k] > 0 ? data.phase_paths[a.phase[k] - 1] : "(no phase)";
    const requested = a.size[k] - decode.unzigzag(a.slack[k]);
    const made = a.initial[k] ? "live before the first event" : `${atTime(explorer, a.allocTime[k])} (event ${count(a.allocEvent[k] + first)})`;
    const freed = a.freed[k] ? `freed at ${atTime(explorer, a.freeTime[k])} (event ${count(a.freeEvent[k] + first)}), after ${duration(a.freeTime[k] - a.allocTime[k])}` : "never freed (live at the end)";
    return `<b>${bytes(a.size[k])}</b>${requested !== a.size[k] ? ` (requested ${bytes(requested)})` : ""} · <code>${escapeHtml(data.sites[a.site[k]])}</code>
<div>holds <b>${escapeHtml(categoryOf(explorer, k).label)}</b> (${a.category[k] & 8 ? "exact: tagged by the recorder" : "inferred"})</div><div>phase <code>${escapeHtml(phase)}</code></div><div>allocated at ${made}</div><div>${freed}</div>
<pre class="vt-stack">${escapeHtml(stackText(explorer, a.stack[k], full ? 0 : 14))}</pre>`;
  }

  // The line under the chart: what is drawn one by one, what is not.
  function status(explorer) {
    const parts = [];
    const data = explorer.data, detail = explorer.detail;
    const kept = explorer.model.allocations.count, total = data.allocations_total;
    if (detail && detail.ok) parts.push(`${count(detail.picked.length)} allocations drawn one by one; hover for the stack, click to pin.`);
    else if (detail && detail.reason === "many") parts.push(`Zoom in (drag across the chart, or the mouse wheel) until at most ${count(layout.DETAIL_MAX)} allocations are in view to see each one.`);
    else if (detail) parts.push("Zoom in further to see each allocation.");
    if (kept < total) parts.push(`Allocations of at least ${bytes(data.threshold)} are kept one by one (${count(kept)} of ${count(total)}); smaller ones are in the shaded area.`);
    if (data.bucket_events > 1) parts.push(`Memory lines are exact to ${count(data.bucket_events)} events: a band shows the lowest and highest value inside.`);
    return parts.join(" ");
  }

  return { atTime, checkpointName, stackText, categoryOf, allocation, status };
})();
