// The explorer's page: its state, the reader's input (zoom, pan, hover,
// click, the toolbar and the links elsewhere in the report), and the start:
// decode the data, build the model, wire the page, draw.
/* global units, decode, model, axis, describe, draw */
(() => {
  const { bytes, duration, count, escapeHtml, shortLeft } = units;
  const byId = (id) => document.getElementById(id);
  const data = JSON.parse(byId("vt-data").textContent);
  const first = data.first_index, events = data.events;
  // What the browser test and a curious reader can call (filled in below).
  const api = { ready: false, errors: [] };
  window.vtExplorer = api;

  // Everything the page shows and the drawing reads.
  const explorer = {
    data,
    model: null,
    axis: null,
    siteColours: new Map(data.site_key.map((k) => [k.site, k.colour])),
    view: { mode: data.default_axis, x0: 0, x1: 1 },
    // The site highlighted from the top sites' table, the allocation pinned
    // and the one under the mouse, the checkpoint shown (-1: none).
    highlightedSite: -1,
    pinned: -1,
    hovered: -1,
    checkpoint: -1,
    colourBy: "category",
    allSegments: false,
    // The allocations laid out for the window shown, and its key.
    detail: null,
    layoutKey: "",
    layoutCache: null,
    // The timeline's plot and scales as last drawn, and where its marks are.
    geometry: null,
    boxes: { phases: [], checkpoints: [], idle: [], segments: [] },
    elements: { chart: byId("vt-chart"), tip: byId("vt-tip"), segments: byId("vt-segments"), segmentTip: byId("vt-seg-tip"), fragmentation: byId("vt-frag") },
  };
  const { view, elements } = explorer;
  const placeOf = (mode, event) => explorer.axis.placeOf(mode, event);
  const eventAt = (mode, x) => explorer.axis.eventAt(mode, x);

  // ---------- the window shown ----------
  let queued = false;
  function schedule() {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; redraw(); });
  }
  function redraw() {
    draw.timeline(explorer);
    draw.fragmentation(explorer);
    byId("vt-range").textContent = draw.range(explorer);
  }
  // Forgets the allocations laid out, for a redraw that changes them.
  const relayout = () => { explorer.layoutKey = ""; };

  function fullRange(mode) { return [placeOf(mode, 0), placeOf(mode, events)]; }
  function setView(x0, x1) {
    const [f0, f1] = fullRange(view.mode);
    const minSpan = view.mode === "events" ? 8 : Math.max(1e-3, (f1 - f0) * 1e-9);
    if (x1 - x0 < minSpan) { const c = (x0 + x1) / 2; x0 = c - minSpan / 2; x1 = c + minSpan / 2; }
    const span = Math.min(x1 - x0, f1 - f0);
    x0 = Math.max(f0, Math.min(x0, f1 - span));
    view.x0 = x0; view.x1 = x0 + span;
    schedule();
  }
  function zoomToEvents(from, to) {
    const pad = Math.max(1, (to - from) * 0.04);
    setView(placeOf(view.mode, Math.max(0, from - pad)), placeOf(view.mode, Math.min(events, to + pad)));
  }
  function setMode(mode) {
    const from = eventAt(view.mode, view.x0), to = eventAt(view.mode, view.x1);
    view.mode = mode;
    document.querySelectorAll("[data-axis]").forEach((b) => b.classList.toggle("on", b.dataset.axis === mode));
    setView(placeOf(mode, from), placeOf(mode, to));
  }
  function resetView() { const [a, b] = fullRange(view.mode); view.x0 = a; view.x1 = b; schedule(); }

  // ---------- the allocator's state at a checkpoint ----------
  function showCheckpoint(k) {
    if (k < 0) return;
    explorer.checkpoint = k;
    byId("vt-checkpoint").value = String(k);
    const c = explorer.model.checkpoints[k];
    byId("vt-cp-info").innerHTML = `Showing the checkpoint nearest the moment chosen: <b>${escapeHtml(describe.checkpointName(explorer, c))}</b>. ${count(c.segments.length + (c.segments_left_out || 0))} segments, ${bytes(c.reserved)} reserved: ${bytes(c.allocated)} allocated, ${bytes(c.pending)} freed but waiting for other streams, ${bytes(c.free)} cached free; largest free block ${bytes(c.largest_free)}, external fragmentation ${(100 * c.fragmentation).toFixed(1)}%.${c.left_out ? ` The ${count(c.left_out)} smallest blocks are counted in their segments' figures but not drawn.` : ""}`;
    draw.segments(explorer);
    schedule();
  }
  function nearestCheckpoint(event) {
    let best = -1, distance = Infinity;
    explorer.model.checkpoints.forEach((c, k) => { const d = Math.abs(c.event - event); if (d < distance) { distance = d; best = k; } });
    return best;
  }

  function pin(k) {
    explorer.pinned = k;
    const panel = byId("vt-pinned");
    if (k < 0) { panel.hidden = true; schedule(); return; }
    panel.hidden = false;
    panel.innerHTML = `<button class="vt-close" title="unpin">×</button><div class="vt-pin-title">Pinned allocation</div>${describe.allocation(explorer, k, true)}`;
    panel.querySelector(".vt-close").onclick = () => pin(-1);
    schedule();
  }

  // ---------- the timeline: zoom, pan, hover, click ----------
  let drag = null;
  const chart = elements.chart, tip = elements.tip;
  const pointer = (e) => { const b = chart.getBoundingClientRect(); return [e.clientX - b.left, e.clientY - b.top]; };
  const placeAtPixel = (mx) => view.x0 + ((mx - explorer.geometry.px0) / (explorer.geometry.px1 - explorer.geometry.px0)) * (view.x1 - view.x0);
  function wireTimeline() {
    chart.addEventListener("mousedown", (e) => {
      const [mx, my] = pointer(e);
      drag = { mx, my, x0: view.x0, x1: view.x1, pan: e.shiftKey || e.button === 1, moved: false };
      e.preventDefault();
    });
    window.addEventListener("mousemove", (e) => {
      const g = explorer.geometry;
      if (!g) return;
      const [mx, my] = pointer(e);
      if (drag) {
        if (Math.abs(mx - drag.mx) > 3) drag.moved = true;
        if (drag.pan && drag.moved) {
          const dx = ((mx - drag.mx) / (g.px1 - g.px0)) * (drag.x1 - drag.x0);
          setView(drag.x0 - dx, drag.x1 - dx);
        } else if (drag.moved) {
          draw.timeline(explorer);
          draw.dragBox(explorer, drag.mx, mx);
        }
        return;
      }
      if (e.target !== chart) { tip.hidden = true; return; }
      hover(mx, my);
    });
    window.addEventListener("mouseup", (e) => {
      if (!drag) return;
      const [mx, my] = pointer(e);
      const d = drag;
      drag = null;
      if (d.moved && !d.pan) setView(placeAtPixel(Math.min(mx, d.mx)), placeAtPixel(Math.max(mx, d.mx)));
      else if (!d.moved) click(mx, my);
    });
    chart.addEventListener("wheel", (e) => {
      const g = explorer.geometry;
      if (!g) return;
      e.preventDefault();
      const [mx] = pointer(e);
      if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
        const dx = (e.deltaX / (g.px1 - g.px0)) * (view.x1 - view.x0);
        setView(view.x0 + dx, view.x1 + dx);
        return;
      }
      const factor = Math.exp(Math.max(-1, Math.min(1, e.deltaY / 300)));
      const c = placeAtPixel(mx);
      setView(c - (c - view.x0) * factor, c + (view.x1 - c) * factor);
    }, { passive: false });
    chart.addEventListener("dblclick", () => resetView());
    chart.addEventListener("mouseleave", () => { tip.hidden = true; if (explorer.hovered >= 0) { explorer.hovered = -1; schedule(); } });
  }

  function showTip(mx, my, html) {
    tip.innerHTML = html;
    tip.hidden = false;
    tip.style.left = Math.min(mx + 14, chart.clientWidth - tip.offsetWidth - 4) + "px";
    tip.style.top = Math.max(0, my + 14) + "px";
  }
  const timeOf = (event) => placeOf("time", event);
  function hover(mx, my) {
    const g = explorer.geometry, boxes = explorer.boxes;
    for (const [a, b, y0, y1, p] of boxes.phases) {
      if (mx >= a && mx <= b && my >= y0 && my <= y1) {
        chart.style.cursor = "pointer";
        return showTip(mx, my, `phase <code>${escapeHtml(p.path)}</code>: events ${count(p.begin + first)} – ${count(p.end + first)}, ${duration(timeOf(p.end) - timeOf(p.begin))}. Click to zoom to it.`);
      }
    }
    for (const [a, b, k] of boxes.checkpoints) {
      if (mx >= a && mx <= b && my > g.py1) {
        chart.style.cursor = "pointer";
        return showTip(mx, my, `checkpoint: ${describe.checkpointName(explorer, explorer.model.checkpoints[k])}. Click to show the allocator's state.`);
      }
    }
    for (const [a, b, gap, event] of boxes.idle) {
      if (mx >= a && mx <= b && my >= g.py1 - 9 && my <= g.py1) {
        return showTip(mx, my, `idle for ${duration(gap)} before event ${count(event + first)}: busy time counts it as ${duration(data.idle.threshold)}`);
      }
    }
    chart.style.cursor = "crosshair";
    if (mx < g.px0 || mx > g.px1 || my < g.py0 || my > g.py1) { tip.hidden = true; return; }
    const k = draw.allocationAt(explorer, mx, my);
    if (k !== explorer.hovered) { explorer.hovered = k; schedule(); }
    if (k >= 0) return showTip(mx, my, describe.allocation(explorer, k, false));
    const event = Math.max(0, Math.min(events - 1, Math.floor(eventAt(view.mode, placeAtPixel(mx)))));
    const level = g.level, b = Math.min(level.buckets - 1, Math.floor(event / level.bucketEvents));
    const range = (q) => (level[q].min[b] === level[q].max[b] ? bytes(level[q].last[b]) : `${bytes(level[q].min[b])} – ${bytes(level[q].max[b])}`);
    const where = level.bucketEvents > 1 ? `events ${count(b * level.bucketEvents + first)} – ${count(Math.min(events, (b + 1) * level.bucketEvents) - 1 + first)}` : `event ${count(event + first)}`;
    let phase = "";
    for (const p of explorer.model.phases) if (p.begin <= event && p.end >= event) phase = p.path;
    const colours = data.colours;
    showTip(mx, my, `${where} at ${describe.atTime(explorer, timeOf(event))}${phase ? ` in <code>${escapeHtml(phase)}</code>` : ""}
<div><span class="vt-key" style="background:${colours.reserved}"></span>reserved ${range("reserved")}</div>
<div><span class="vt-key" style="background:${colours.allocated}"></span>allocated ${range("allocated")}</div>
<div><span class="vt-key" style="background:${colours.cached_free}"></span>cached free ${range("cached")}</div>${level.pools ? `
<div><span class="vt-key" style="background:${colours.pools}"></span>in private pools (CUDA graphs, MemPool) ${range("pools")}</div>` : ""}<div class="muted">Click for the allocator's state here; drag to zoom.</div>`);
  }
  function click(mx, my) {
    const g = explorer.geometry, boxes = explorer.boxes;
    for (const [a, b, y0, y1, p] of boxes.phases) {
      if (mx >= a && mx <= b && my >= y0 && my <= y1) return zoomToEvents(p.begin, p.end + 1);
    }
    for (const [a, b, k] of boxes.checkpoints) if (mx >= a && mx <= b && my > g.py1) return showCheckpoint(k);
    if (mx < g.px0 || mx > g.px1) return;
    pin(draw.allocationAt(explorer, mx, my));
    showCheckpoint(nearestCheckpoint(eventAt(view.mode, placeAtPixel(mx))));
  }

  // ---------- the segments: hover, click ----------
  function wireSegments() {
    const canvas = elements.segments, segmentTip = elements.segmentTip;
    const at = (e) => { const b = canvas.getBoundingClientRect(); return [e.clientX - b.left, e.clientY - b.top]; };
    canvas.addEventListener("mousemove", (e) => {
      const [mx, my] = at(e);
      for (const [x0, x1, y0, y1, s, block] of explorer.boxes.segments) {
        if (mx >= x0 && mx <= x1 && my >= y0 && my <= y1) {
          const state = block.pending ? "freed, waiting for another stream (inactive)" : "allocated";
          const body = block.allocation >= 0 ? describe.allocation(explorer, block.allocation, false) : `<b>${bytes(block.size)}</b><pre class="vt-stack">${escapeHtml(describe.stackText(explorer, block.stack, 14))}</pre>`;
          segmentTip.innerHTML = `block at +${bytes(block.offset)} of a ${bytes(s.size)} segment (${bytes(s.used)} in use in ${count(s.usedBlocks)} blocks, largest free range ${bytes(s.largestFree)}): ${state}<div>${body}</div>`;
          segmentTip.hidden = false;
          segmentTip.style.left = Math.min(mx + 14, canvas.clientWidth - segmentTip.offsetWidth - 4) + "px";
          segmentTip.style.top = my + 14 + "px";
          return;
        }
      }
      segmentTip.hidden = true;
    });
    canvas.addEventListener("mouseleave", () => { segmentTip.hidden = true; });
    canvas.addEventListener("click", (e) => {
      const [mx, my] = at(e);
      for (const [x0, x1, y0, y1, , block] of explorer.boxes.segments) {
        if (mx >= x0 && mx <= x1 && my >= y0 && my <= y1 && block.allocation >= 0) { pin(block.allocation); draw.segments(explorer); return; }
      }
    });
  }

  // ---------- the toolbar and the links elsewhere in the report ----------
  function wirePage() {
    document.querySelectorAll("[data-axis]").forEach((b) => { b.onclick = () => setMode(b.dataset.axis); });
    // Colour by category or by site, each with its key.
    const legend = byId("vt-categories"), key = byId("vt-sites");
    // Each colour's span says its colour (data-colour): the timeline shows
    // only those it draws (draw.js's keyOfDrawn).
    const none = `<span class="vt-key-none muted">No allocation is drawn one by one here, so no colour of theirs is shown.</span>`;
    legend.innerHTML = data.categories.map((c) => `<span data-colour="${c.colour}"><i style="background:${c.colour}"></i>${escapeHtml(c.label)}</span>`).join("") + none;
    key.innerHTML = data.site_key.map((k) => `<span data-colour="${k.colour}" title="${escapeHtml(data.sites[k.site])}"><i style="background:${k.colour}"></i>${escapeHtml(k.label)}</span>`).join("") +
      `<span data-colour="${data.colours.other_sites}"><i style="background:${data.colours.other_sites}"></i>${data.site_key.length ? "other sites" : "every site"}</span>` + none;
    const colourWith = (by) => {
      explorer.colourBy = by;
      document.querySelectorAll("[data-colour]").forEach((b) => b.classList.toggle("on", b.dataset.colour === by));
      legend.hidden = by !== "category";
      key.hidden = by !== "site";
      schedule(); draw.segments(explorer);
    };
    document.querySelectorAll("[data-colour]").forEach((b) => { b.onclick = () => colourWith(b.dataset.colour); });
    colourWith(explorer.colourBy);
    byId("vt-reset").onclick = resetView;
    byId("vt-detail").onchange = () => { relayout(); schedule(); };
    const select = byId("vt-checkpoint");
    explorer.model.checkpoints.forEach((c, k) => {
      const option = document.createElement("option");
      option.value = String(k);
      option.textContent = describe.checkpointName(explorer, c);
      select.appendChild(option);
    });
    select.onchange = () => showCheckpoint(Number(select.value));
    // Top sites: a click highlights the site's allocations.
    document.querySelectorAll("tr[data-site]").forEach((tr) => {
      tr.classList.add("vt-link");
      tr.title = "Click to highlight this site's allocations in the explorer";
      tr.addEventListener("click", (e) => {
        if (e.target.closest("summary, details[open] pre")) return;
        const s = data.sites.indexOf(tr.dataset.site);
        const site = (explorer.highlightedSite = explorer.highlightedSite === s || s < 0 ? -1 : s);
        document.querySelectorAll("tr[data-site]").forEach((t) => t.classList.toggle("vt-on", site >= 0 && t.dataset.site === tr.dataset.site));
        byId("vt-site").textContent = site >= 0 ? `Highlighting ${shortLeft(data.sites[site], 70)} (click the row again to clear).` : "";
        relayout(); schedule(); draw.segments(explorer);
        if (site >= 0) byId("explorer").scrollIntoView({ behavior: "smooth" });
      });
    });
    // Repetitions of a phase: a link zooms to each.
    document.querySelectorAll("[data-phase-reps]").forEach((el) => {
      const chips = model.repetitionChips(explorer.model.phases, el.dataset.phaseReps);
      if (!chips.length) return;
      el.append("Zoom the explorer to a repetition: ");
      chips.slice(0, 60).forEach((p, i) => {
        const button = document.createElement("button");
        button.className = "vt-chip"; button.textContent = p.label;
        button.onclick = () => { zoomToEvents(p.begin, p.end + 1); byId("explorer").scrollIntoView({ behavior: "smooth" }); };
        el.append(button);
        if (i === 59 && chips.length > 60) el.append(` … ${chips.length - 60} more`);
      });
    });
    // Moments elsewhere in the page (OOMs, what-if failures): a link zooms there.
    document.addEventListener("click", (e) => {
      const link = e.target.closest("[data-event]");
      if (!link) return;
      e.preventDefault();
      const event = Number(link.dataset.event) - first;
      zoomToEvents(Math.max(0, event - 500), Math.min(events, event + 500));
      showCheckpoint(nearestCheckpoint(event));
      byId("explorer").scrollIntoView({ behavior: "smooth" });
    });
    window.addEventListener("resize", () => { schedule(); draw.segments(explorer); });
  }

  Object.assign(api, {
    first, view, setView, setMode, resetView, zoomToEvents, showCheckpoint, pin,
    X: (event) => placeOf(view.mode, event), R: (x) => eventAt(view.mode, x),
    geometry: () => explorer.geometry, detail: () => explorer.detail,
    allocations: () => explorer.model && explorer.model.allocations,
    largest: () => {
      const a = explorer.model && explorer.model.allocations;
      let best = -1;
      for (let k = 0; k < (a ? a.count : 0); k++) if (best < 0 || a.size[k] > a.size[best]) best = k;
      return best;
    },
    stackOf: (k) => describe.stackText(explorer, explorer.model.allocations.stack[k]),
    siteOf: (k) => data.sites[explorer.model.allocations.site[k]],
    pointOf: (k) => draw.pointOf(explorer, k),
    checkpoint: () => explorer.checkpoint,
  });

  decode.columns(byId("vt-bulk").textContent, data.columns)
    .then((columns) => {
      if (events === 0) {
        byId("vt-loading").textContent = "No event lies inside the window: nothing to draw.";
        api.ready = true;
        return;
      }
      explorer.model = model.build(data, columns);
      explorer.axis = axis.mapping(explorer.model.knots, data.idle);
      wireTimeline();
      wireSegments();
      wirePage();
      setMode(view.mode);
      resetView();
      // The allocator's state at the first OOM when there is one, else at
      // the allocated peak.
      const checkpoints = explorer.model.checkpoints;
      const oom = checkpoints.findIndex((c) => c.kinds.includes("oom"));
      const peak = checkpoints.findIndex((c) => c.kinds.includes("allocated_peak"));
      showCheckpoint(oom >= 0 ? oom : peak >= 0 ? peak : checkpoints.length - 1);
      redraw();
      byId("vt-loading").style.display = "none";
      api.ready = true;
    })
    .catch((e) => {
      api.errors.push(String((e && e.stack) || e));
      byId("vt-loading").textContent = `The explorer could not load its data: ${e}`;
      throw e;
    });
})();
