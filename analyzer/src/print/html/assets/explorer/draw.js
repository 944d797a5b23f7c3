// The explorer's canvases: the timeline (memory lines, allocations one by
// one, phases, checkpoints), the allocator's segments at a checkpoint, and
// the fragmentation on the same axis. Each function takes the page's state
// (interact.js's `explorer`); the data's colours come from the Rust
// palette (data.rs), the page's own greys below from its style sheet.
/* global units, axis, layout, describe */
/* exported draw */
const draw = (() => {
  const { bytes, count, duration } = units;
  // The page's text, muted text, grid and frame colours (its CSS's --fg,
  // --muted, and the lines of its charts).
  const INK = "#1d2433", MUTED = "#5b6475", GRID = "#e6e8ec", FRAME = "#9aa3b2";
  // Margins of the charts' plots, in CSS pixels.
  const MARGIN = { left: 84, right: 18, bottom: 50 };
  const CHART_HEIGHT = 470, FRAGMENTATION_HEIGHT = 200, PHASE_ROW = 17, PHASE_ROWS_MAX = 3;

  // `#rrggbb` at `alpha`, as a CSS colour.
  function withAlpha(hex, alpha) {
    const v = parseInt(hex.slice(1), 16);
    return `rgba(${v >> 16},${(v >> 8) & 255},${v & 255},${alpha})`;
  }

  // By site: the sites of the key (most bytes first) each a colour of
  // their own, the rest one grey, so the key says what every colour is.
  function siteColour(explorer, site) {
    return explorer.siteColours.get(site) ?? explorer.data.colours.other_sites;
  }
  // An allocation's colour: its category's, or its site's.
  function allocationColour(explorer, k) {
    return explorer.colourBy === "category" ? describe.categoryOf(explorer, k).colour : siteColour(explorer, explorer.model.allocations.site[k]);
  }

  // Sizes a canvas to its parent's width and `height` CSS pixels, sharp on
  // the screen's pixels: [its context, its width].
  function sizeCanvas(canvas, height) {
    const dpr = window.devicePixelRatio || 1, width = canvas.parentElement.clientWidth;
    canvas.style.width = width + "px";
    canvas.style.height = height + "px";
    if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(height * dpr)) {
      canvas.width = Math.round(width * dpr);
      canvas.height = Math.round(height * dpr);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return [ctx, width];
  }

  const placeOf = (explorer, event) => explorer.axis.placeOf(explorer.view.mode, event);
  const eventAt = (explorer, x) => explorer.axis.eventAt(explorer.view.mode, x);
  // A corner of the layout: at its exact time when known.
  function cornerPlace(explorer, corner) {
    return corner[1] >= 0 ? explorer.axis.placeOfTimed(explorer.view.mode, corner[0], corner[1]) : placeOf(explorer, corner[0]);
  }

  function phaseRows(explorer) {
    let depth = 0;
    for (const p of explorer.model.phases) depth = Math.max(depth, p.depth + 1);
    return Math.min(PHASE_ROWS_MAX, depth);
  }

  // The allocations laid out for events `from` to `to`, or null when the
  // reader turned them off; kept until the window changes.
  function detailFor(explorer, from, to) {
    if (!document.getElementById("vt-detail").checked) return null;
    const key = `${Math.floor(from)}:${Math.ceil(to)}`;
    if (key !== explorer.layoutKey) {
      explorer.layoutKey = key;
      explorer.layoutCache = layout.stack(explorer.model.allocations, from, to, explorer.data.events);
    }
    return explorer.layoutCache;
  }

  // The timeline: memory lines over the chosen axis, allocations one by
  // one when few enough are in view, phases above, checkpoints below.
  function timeline(explorer) {
    const { view, data } = explorer;
    const events = data.events, allocations = explorer.model.allocations;
    const rows = phaseRows(explorer);
    const top = 14 + rows * PHASE_ROW;
    const [ctx, width] = sizeCanvas(explorer.elements.chart, CHART_HEIGHT);
    const px0 = MARGIN.left, px1 = width - MARGIN.right, py0 = top, py1 = CHART_HEIGHT - MARGIN.bottom;
    const sx = (x) => px0 + ((x - view.x0) / (view.x1 - view.x0)) * (px1 - px0);
    const from = Math.max(0, eventAt(explorer, view.x0)), to = Math.min(events, eventAt(explorer, view.x1));
    // The coarsest level with at most about two buckets a pixel.
    const levels = explorer.model.levels;
    const eventsPerPixel = (to - from) / (px1 - px0);
    let level = levels[0];
    for (const l of levels) if (l.bucketEvents <= Math.max(levels[0].bucketEvents, eventsPerPixel / 2)) level = l;
    const b0 = Math.max(0, Math.floor(from / level.bucketEvents) - 1), b1 = Math.min(level.buckets - 1, Math.floor(to / level.bucketEvents) + 1);
    let ymax = 1024;
    for (let b = b0; b <= b1; b++) ymax = Math.max(ymax, level.reserved.max[b], level.allocated.max[b]);
    ymax *= 1.08;
    const sy = (v) => py1 - (v / ymax) * (py1 - py0);
    explorer.geometry = { px0, px1, py0, py1, sx, sy, ymax, from, to, level, top };
    ctx.clearRect(0, 0, width, CHART_HEIGHT);
    ctx.font = "13px sans-serif";
    // Grid and y axis.
    const step = axis.byteStep(ymax), tick = axis.byteTicks(ymax, step);
    ctx.strokeStyle = GRID; ctx.fillStyle = MUTED; ctx.textAlign = "right"; ctx.textBaseline = "middle";
    for (let v = 0; v <= ymax; v += step) {
      const y = Math.round(sy(v)) + 0.5;
      ctx.beginPath(); ctx.moveTo(px0, y); ctx.lineTo(px1, y); ctx.stroke();
      ctx.fillText(tick(v), px0 - 8, y);
    }
    xTicks(explorer, ctx, sx, px0, px1, py1);
    ctx.save();
    ctx.beginPath(); ctx.rect(px0, py0 - 2, px1 - px0, py1 - py0 + 2); ctx.clip();
    // Idle gaps (busy time): a notch on the axis where time was cut.
    explorer.boxes.idle = [];
    if (view.mode === "busy") {
      ctx.strokeStyle = FRAME;
      data.idle.index.forEach((event, k) => {
        if (event < from || event > to) return;
        const x = Math.round(sx(explorer.axis.placeOf("busy", event - 0.5))) + 0.5;
        ctx.beginPath(); ctx.moveTo(x - 3, py1 - 7); ctx.lineTo(x + 3, py1 - 3); ctx.moveTo(x - 3, py1 - 4); ctx.lineTo(x + 3, py1); ctx.stroke();
        explorer.boxes.idle.push([x - 4, x + 4, data.idle.gap[k], event]);
      });
    }
    // Allocations one by one, or the allocated area.
    const colours = data.colours;
    explorer.detail = detailFor(explorer, from, to);
    const shown = explorer.detail && explorer.detail.ok;
    series(explorer, ctx, level, b0, b1, sx, sy, "allocated", { fill: withAlpha(colours.allocated, 0.13) });
    if (shown) allocationsOneByOne(explorer, ctx, sx, sy);
    keyOfDrawn(explorer, shown);
    series(explorer, ctx, level, b0, b1, sx, sy, "cached", { stroke: colours.cached_free, dash: [5, 3] });
    series(explorer, ctx, level, b0, b1, sx, sy, "allocated", { stroke: colours.allocated });
    series(explorer, ctx, level, b0, b1, sx, sy, "reserved", { stroke: colours.reserved });
    // Bytes reserved in private pools (CUDA graphs, MemPools): part of reserved.
    if (level.pools) series(explorer, ctx, level, b0, b1, sx, sy, "pools", { stroke: colours.pools, dash: [2, 3] });
    // A highlighted site: where its kept allocations were made.
    const site = explorer.highlightedSite;
    if (site >= 0 && !shown) {
      ctx.fillStyle = siteColour(explorer, site);
      for (let k = 0; k < allocations.count; k++) {
        if (allocations.site[k] !== site || allocations.allocEvent[k] > to || allocations.freeEvent[k] < from) continue;
        const x = sx(explorer.axis.placeOfTimed(view.mode, allocations.allocEvent[k], allocations.allocTime[k]));
        ctx.fillRect(x - 1, py1 - 9, 2, 9);
      }
    }
    ctx.restore();
    phases(explorer, ctx, sx, px0, px1, rows, from, to);
    checkpointMarks(explorer, ctx, sx, px0, px1, py1, from, to);
    ctx.strokeStyle = FRAME;
    ctx.strokeRect(px0 + 0.5, py0 + 0.5, px1 - px0, py1 - py0);
    document.getElementById("vt-status").textContent = describe.status(explorer);
  }

  // One quantity over buckets b0 to b1 of `level`: a step line (`stroke`,
  // with a band where the bucket's lowest and highest differ), or an area
  // up to its highest (`fill`).
  function series(explorer, ctx, level, b0, b1, sx, sy, quantity, { fill, stroke, dash }) {
    const { min, max, last } = level[quantity];
    const events = explorer.data.events, area = !!fill;
    ctx.beginPath();
    let prev = b0 > 0 ? last[b0 - 1] : min[b0];
    const base = sy(0);
    let started = false;
    for (let b = b0; b <= b1; b++) {
      const first = b * level.bucketEvents, lastEvent = Math.min(events, first + level.bucketEvents) - 1;
      const xs = sx(placeOf(explorer, first)), xe = sx(placeOf(explorer, lastEvent)), xn = sx(placeOf(explorer, lastEvent + 1));
      if (!started) { ctx.moveTo(xs, area ? base : sy(prev)); if (area) ctx.lineTo(xs, sy(prev)); started = true; }
      ctx.lineTo(xs, sy(prev));
      if (area) {
        ctx.lineTo(xs, sy(max[b])); ctx.lineTo(Math.max(xe, xs), sy(max[b])); ctx.lineTo(Math.max(xe, xs), sy(last[b])); ctx.lineTo(xn, sy(last[b]));
      } else if (min[b] !== max[b]) {
        if (xe - xs > 1.5) { ctx.save(); ctx.fillStyle = stroke + "33"; ctx.fillRect(xs, sy(max[b]), xe - xs, sy(min[b]) - sy(max[b])); ctx.restore(); }
        ctx.lineTo(xs, sy(min[b])); ctx.lineTo(xs, sy(max[b])); ctx.lineTo(xs, sy(last[b])); ctx.lineTo(xn, sy(last[b]));
      } else {
        ctx.lineTo(xs, sy(last[b])); ctx.lineTo(xn, sy(last[b]));
      }
      prev = last[b];
    }
    if (area) {
      const xEnd = sx(placeOf(explorer, Math.min(events, (b1 + 1) * level.bucketEvents)));
      ctx.lineTo(xEnd, base); ctx.closePath(); ctx.fillStyle = fill; ctx.fill();
    } else {
      ctx.strokeStyle = stroke; ctx.lineWidth = 1.6; ctx.setLineDash(dash || []); ctx.stroke(); ctx.setLineDash([]); ctx.lineWidth = 1;
    }
  }

  // The x axis's ticks and its description.
  function xTicks(explorer, ctx, sx, px0, px1, py1) {
    const { view, data } = explorer;
    ctx.fillStyle = MUTED; ctx.textAlign = "center"; ctx.textBaseline = "top"; ctx.strokeStyle = FRAME;
    // Ticks fall on round values of what the labels read.
    const offset = view.mode === "events" ? data.first_index : view.mode === "time" ? data.start_ns : 0;
    for (const [place, label] of axis.xTicks(view.mode, view.x0, view.x1, px1 - px0, offset)) {
      const x = Math.round(sx(place)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, py1); ctx.lineTo(x, py1 + 5); ctx.stroke();
      ctx.fillText(label, x, py1 + 16);
    }
    ctx.textAlign = "right";
    ctx.fillText(axis.DESCRIPTIONS[view.mode], px1, py1 + 32);
  }

  // The phases in view, a row per depth, each tinted as the data says.
  function phases(explorer, ctx, sx, px0, px1, rows, from, to) {
    const boxes = (explorer.boxes.phases = []);
    const tints = explorer.data.colours.phase_tints;
    ctx.textBaseline = "middle"; ctx.textAlign = "left"; ctx.font = "12px sans-serif";
    for (const p of explorer.model.phases) {
      if (p.depth >= rows || p.end < from || p.begin > to) continue;
      const a = Math.max(px0, sx(placeOf(explorer, p.begin))), b = Math.min(px1, sx(placeOf(explorer, p.end + 1)));
      if (b - a < 1) continue;
      const y = 6 + p.depth * PHASE_ROW;
      ctx.fillStyle = tints[p.tint];
      ctx.fillRect(a, y, Math.max(1, b - a - 1), 15);
      if (b - a > 30) {
        ctx.fillStyle = INK;
        ctx.save(); ctx.beginPath(); ctx.rect(a, y, b - a - 2, 15); ctx.clip();
        ctx.fillText(p.name, a + 3, y + 8);
        ctx.restore();
      }
      boxes.push([a, b, y, y + 15, p]);
    }
    ctx.font = "13px sans-serif";
  }

  // The checkpoints in view, as marks under the axis; the one shown in
  // the alert colour.
  function checkpointMarks(explorer, ctx, sx, px0, px1, py1, from, to) {
    const boxes = (explorer.boxes.checkpoints = []);
    explorer.model.checkpoints.forEach((c, k) => {
      if (c.event < from - 1 || c.event > to + 1) return;
      const x = sx(placeOf(explorer, c.event + 0.5));
      if (x < px0 - 1 || x > px1 + 1) return;
      ctx.fillStyle = k === explorer.checkpoint ? explorer.data.colours.alert : c.kinds.includes("even") ? FRAME : INK;
      ctx.beginPath(); ctx.moveTo(x, py1 + 1); ctx.lineTo(x - 5, py1 + 9); ctx.lineTo(x + 5, py1 + 9); ctx.closePath(); ctx.fill();
      boxes.push([x - 6, x + 6, k]);
    });
  }

  // The keys under the chart name only the colours drawn: the categories
  // (or sites) of the allocations drawn one by one, and none when none are
  // (a line says why), not a key of seven colours over plain lines.
  function keyOfDrawn(explorer, shown) {
    const drawn = new Set();
    if (shown) for (const k of explorer.detail.picked) if (explorer.detail.vertices.has(k)) drawn.add(allocationColour(explorer, k));
    for (const id of ["vt-categories", "vt-sites"]) {
      const key = document.getElementById(id);
      if (!key) continue;
      let any = false;
      key.querySelectorAll("span[data-colour]").forEach((span) => {
        span.hidden = !drawn.has(span.dataset.colour);
        any = any || !span.hidden;
      });
      const none = key.querySelector(".vt-key-none");
      if (none) none.hidden = any;
    }
  }

  // The allocations laid out (explorer.detail), each a band of its size
  // that drops as the ones below it are freed.
  function allocationsOneByOne(explorer, ctx, sx, sy) {
    const { detail, model, highlightedSite, pinned, hovered } = explorer;
    const colours = explorer.data.colours;
    for (const k of detail.picked) {
      const corners = detail.vertices.get(k);
      if (!corners) continue;
      const size = model.allocations.size[k];
      ctx.beginPath();
      for (let i = 0; i < corners.length - 1; i++) {
        const xa = sx(cornerPlace(explorer, corners[i])), xb = sx(cornerPlace(explorer, corners[i + 1]));
        const y = sy(corners[i][2] + size);
        if (i === 0) ctx.moveTo(xa, y); else ctx.lineTo(xa, y);
        ctx.lineTo(xb, y);
      }
      for (let i = corners.length - 2; i >= 0; i--) {
        const xa = sx(cornerPlace(explorer, corners[i])), xb = sx(cornerPlace(explorer, corners[i + 1]));
        const y = sy(corners[i][2]);
        ctx.lineTo(xb, y); ctx.lineTo(xa, y);
      }
      ctx.closePath();
      const dim = highlightedSite >= 0 && model.allocations.site[k] !== highlightedSite;
      ctx.fillStyle = dim ? colours.dimmed : allocationColour(explorer, k);
      const marked = k === pinned || k === hovered;
      ctx.globalAlpha = marked ? 1 : 0.78;
      ctx.fill();
      if (marked) { ctx.strokeStyle = colours.alert; ctx.lineWidth = 2; ctx.stroke(); ctx.lineWidth = 1; }
      else if (sy(0) - sy(size) > 3) { ctx.strokeStyle = "rgba(255,255,255,0.7)"; ctx.stroke(); }
      ctx.globalAlpha = 1;
    }
  }

  // The allocation under a point of the timeline, if any (-1).
  function allocationAt(explorer, mx, my) {
    const { detail, geometry, view } = explorer;
    if (!detail || !detail.ok || !geometry) return -1;
    const x = view.x0 + ((mx - geometry.px0) / (geometry.px1 - geometry.px0)) * (view.x1 - view.x0);
    let found = -1;
    for (const k of detail.picked) {
      const corners = detail.vertices.get(k);
      for (let i = 0; i < corners.length - 1; i++) {
        const xa = cornerPlace(explorer, corners[i]), xb = cornerPlace(explorer, corners[i + 1]);
        if (x < xa || x >= xb) continue;
        const ya = geometry.sy(corners[i][2] + explorer.model.allocations.size[k]), yb = geometry.sy(corners[i][2]);
        if (my >= ya - 1 && my <= yb + 1) found = k;
      }
    }
    return found;
  }

  // Where an allocation's middle is drawn, in the window's coordinates, or
  // null when it is not drawn one by one.
  function pointOf(explorer, k) {
    const { detail, geometry, view } = explorer;
    if (!detail || !detail.ok || !detail.vertices.has(k)) return null;
    const corners = detail.vertices.get(k), i = Math.floor((corners.length - 1) / 2);
    const box = explorer.elements.chart.getBoundingClientRect();
    const x = (geometry.sx(Math.max(view.x0, cornerPlace(explorer, corners[i]))) + geometry.sx(Math.min(view.x1, cornerPlace(explorer, corners[i + 1])))) / 2;
    const y = geometry.sy(corners[i][2] + explorer.model.allocations.size[k] / 2);
    return [box.left + x, box.top + y];
  }

  // The segments drawn at a checkpoint: the largest few, in address order,
  // the smaller ones summed up in a line until asked for (a run may have
  // hundreds).
  const FEW_SEGMENTS = 24;
  function shownSegments(explorer, c) {
    if (explorer.allSegments || c.segments.length <= FEW_SEGMENTS) return c.segments;
    const cut = c.segments.map((s) => s.size).sort((a, b) => b - a)[FEW_SEGMENTS - 1];
    // The largest, and as many of those as large as the last as there is
    // room for, in address order.
    let room = FEW_SEGMENTS - c.segments.filter((s) => s.size > cut).length;
    return c.segments.filter((s) => s.size > cut || (s.size === cut && room-- > 0));
  }
  function segmentsNote(explorer, c, shown) {
    const note = document.getElementById("vt-seg-more");
    const drawn = new Set(shown);
    const rest = c.segments.filter((s) => !drawn.has(s));
    // Past the page's budget the smallest segments are only summed up.
    const away = c.segments_left_out || 0;
    if (rest.length || away) {
      const sum = (f) => rest.reduce((t, s) => t + f(s), 0);
      const reserved = sum((s) => s.size) + (c.segments_left_out_reserved || 0);
      const used = sum((s) => s.used) + (c.segments_left_out_used || 0);
      const all = away ? `show the ${count(c.segments.length)} largest` : `show all ${count(c.segments.length)}`;
      const back = explorer.allSegments && c.segments.length > FEW_SEGMENTS ? ` <button id="vt-seg-toggle">show the ${FEW_SEGMENTS} largest only</button>` : "";
      note.innerHTML = `${count(rest.length + away)} smaller segments not drawn: ${bytes(reserved)} reserved, ${bytes(used)} in use.${away ? ` The ${count(away)} smallest are summed up only.` : ""}${rest.length ? ` <button id="vt-seg-toggle">${all}</button>` : back}`;
    } else if (explorer.allSegments && c.segments.length > FEW_SEGMENTS) {
      note.innerHTML = `<button id="vt-seg-toggle">show the ${FEW_SEGMENTS} largest only</button>`;
    } else {
      note.innerHTML = "";
    }
    const toggle = document.getElementById("vt-seg-toggle");
    if (toggle) toggle.onclick = () => { explorer.allSegments = !explorer.allSegments; segments(explorer); };
  }

  // The allocator's segments at the checkpoint shown, as bars of their
  // blocks.
  function segments(explorer) {
    if (explorer.checkpoint < 0) return;
    const c = explorer.model.checkpoints[explorer.checkpoint];
    const colours = explorer.data.colours, allocations = explorer.model.allocations;
    const rowHeight = 22, labelWidth = 190, maxRows = 400;
    const shown = shownSegments(explorer, c);
    segmentsNote(explorer, c, shown);
    const rows = shown.slice(0, maxRows);
    const height = Math.max(40, rows.length * rowHeight + 10);
    const [ctx, width] = sizeCanvas(explorer.elements.segments, height);
    ctx.clearRect(0, 0, width, height);
    const boxes = (explorer.boxes.segments = []);
    const maxSize = Math.max(1, ...rows.map((s) => s.size));
    const barWidth = width - labelWidth - 10;
    ctx.font = "12px sans-serif"; ctx.textBaseline = "middle";
    rows.forEach((s, i) => {
      const y = 5 + i * rowHeight;
      const w = Math.max(4, (s.size / maxSize) * barWidth);
      const scale = w / s.size;
      ctx.fillStyle = INK; ctx.textAlign = "left";
      ctx.fillText(`${bytes(s.size)}${s.expandable ? " expandable" : ""} · ${(100 * s.used / s.size).toFixed(0)}% used`, 4, y + rowHeight / 2 - 2);
      ctx.fillStyle = colours.segment_free; ctx.fillRect(labelWidth, y + 2, w, rowHeight - 6);
      for (const block of s.blocks) {
        const x = labelWidth + block.offset * scale, blockWidth = Math.max(1, block.size * scale);
        const site = block.allocation >= 0 ? allocations.site[block.allocation] : -1;
        if (block.pending) ctx.fillStyle = colours.pending_free;
        else if (explorer.highlightedSite >= 0 && site !== explorer.highlightedSite) ctx.fillStyle = colours.dimmed;
        else ctx.fillStyle = block.allocation >= 0 ? allocationColour(explorer, block.allocation) : colours.block_in_use;
        // A hairline between neighbours, where there is room for one.
        ctx.fillRect(x, y + 2, blockWidth > 3 ? blockWidth - 1 : blockWidth, rowHeight - 6);
        if (block.allocation >= 0 && block.allocation === explorer.pinned) {
          ctx.strokeStyle = colours.alert; ctx.lineWidth = 2; ctx.strokeRect(x, y + 2, blockWidth, rowHeight - 6); ctx.lineWidth = 1;
        }
        boxes.push([x, x + blockWidth, y + 2, y + rowHeight - 4, s, block]);
      }
      ctx.strokeStyle = FRAME; ctx.strokeRect(labelWidth + 0.5, y + 2.5, w, rowHeight - 6);
    });
    if (shown.length > maxRows) { ctx.fillStyle = MUTED; ctx.fillText(`… ${shown.length - maxRows} more segments`, 4, height - 6); }
  }

  // Cached free memory (an area) and external fragmentation (a dashed
  // line) over the fragmentation analysis's buckets, on the timeline's axis.
  function fragmentation(explorer) {
    const canvas = explorer.elements.fragmentation, buckets = explorer.data.fragmentation;
    if (!canvas || !buckets) return;
    const { view } = explorer;
    const colours = explorer.data.colours;
    const [ctx, width] = sizeCanvas(canvas, FRAGMENTATION_HEIGHT);
    const px0 = MARGIN.left, px1 = width - MARGIN.right, py0 = 10, py1 = 170;
    ctx.clearRect(0, 0, width, FRAGMENTATION_HEIGHT);
    const sx = (x) => px0 + ((x - view.x0) / (view.x1 - view.x0)) * (px1 - px0);
    const placeOfTime = (t) => (view.mode === "time" ? t : placeOf(explorer, explorer.axis.eventAt("time", t)));
    let ymax = 1024;
    for (let i = 0; i < buckets.start.length; i++) ymax = Math.max(ymax, buckets.cached[i]);
    ymax *= 1.1;
    const sy = (v) => py1 - (v / ymax) * (py1 - py0);
    ctx.font = "12px sans-serif"; ctx.fillStyle = MUTED; ctx.textAlign = "right"; ctx.textBaseline = "middle"; ctx.strokeStyle = GRID;
    const step = axis.byteStep(ymax), tick = axis.byteTicks(ymax, step);
    for (let v = 0; v <= ymax; v += step) { const y = Math.round(sy(v)) + 0.5; ctx.beginPath(); ctx.moveTo(px0, y); ctx.lineTo(px1, y); ctx.stroke(); ctx.fillText(tick(v), px0 - 8, y); }
    ctx.save(); ctx.beginPath(); ctx.rect(px0, py0, px1 - px0, py1 - py0); ctx.clip();
    ctx.beginPath(); ctx.moveTo(sx(placeOfTime(buckets.start[0])), sy(0));
    for (let i = 0; i < buckets.start.length; i++) { ctx.lineTo(sx(placeOfTime(buckets.start[i])), sy(buckets.cached[i])); ctx.lineTo(sx(placeOfTime(buckets.end[i])), sy(buckets.cached[i])); }
    ctx.lineTo(sx(placeOfTime(buckets.end[buckets.end.length - 1])), sy(0)); ctx.closePath();
    ctx.fillStyle = withAlpha(colours.cached_free, 0.35); ctx.fill();
    ctx.beginPath();
    for (let i = 0; i < buckets.start.length; i++) {
      const y = py1 - buckets.external[i] * (py1 - py0);
      if (i === 0) ctx.moveTo(sx(placeOfTime(buckets.start[i])), y); else ctx.lineTo(sx(placeOfTime(buckets.start[i])), y);
      ctx.lineTo(sx(placeOfTime(buckets.end[i])), y);
    }
    ctx.strokeStyle = colours.alert; ctx.setLineDash([5, 3]); ctx.lineWidth = 1.5; ctx.stroke(); ctx.setLineDash([]); ctx.lineWidth = 1;
    ctx.restore();
    ctx.strokeStyle = FRAME; ctx.strokeRect(px0 + 0.5, py0 + 0.5, px1 - px0, py1 - py0);
    ctx.fillStyle = MUTED; ctx.textAlign = "left";
    ctx.fillText("cached free (area, left axis) · external fragmentation (dashed, 0–100% of the height)", px0, py1 + 18);
  }

  // The zoom box while the reader drags across the timeline.
  function dragBox(explorer, x0, x1) {
    const ctx = explorer.elements.chart.getContext("2d"), g = explorer.geometry;
    ctx.fillStyle = withAlpha(explorer.data.colours.allocated, 0.15);
    ctx.fillRect(Math.min(x0, x1), g.py0, Math.abs(x1 - x0), g.py1 - g.py0);
  }

  // The line over the chart: the window shown.
  function range(explorer) {
    const { view, data } = explorer;
    const from = eventAt(explorer, view.x0), to = eventAt(explorer, view.x1), first = data.first_index;
    const events = `events ${count(from + first)} – ${count(to + first)}`;
    return view.mode === "events"
      ? events
      : view.mode === "busy"
        ? `${duration(view.x0)} – ${duration(view.x1)} (busy time), ${events}`
        : `${describe.atTime(explorer, view.x0)} – ${describe.atTime(explorer, view.x1)} (time), ${events}`;
  }

  return { withAlpha, siteColour, allocationColour, timeline, segments, fragmentation, allocationAt, pointOf, dragBox, range };
})();
