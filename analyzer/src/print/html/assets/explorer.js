// vramtrace's memory explorer: hand-written canvas code, no library.
// Reads the JSON in #vt-data and the compressed columns in #vt-bulk (see
// analyzer/src/print/html/data.rs), then draws the timeline, the allocator
// state at checkpoints and the fragmentation, all on one x axis.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const D = JSON.parse($("vt-data").textContent);
  const api = { ready: false, errors: [] };
  window.vtExplorer = api;

  // ---------- formatting ----------
  const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
  function bytes(v) {
    let i = 0;
    v = Math.max(0, v);
    while (v >= 1024 && i < UNITS.length - 1) { v /= 1024; i++; }
    return i === 0 ? `${Math.round(v)} B` : `${v.toFixed(1)} ${UNITS[i]}`;
  }
  function duration(ns) {
    const a = Math.abs(ns);
    if (a < 1e3) return `${Math.round(ns)} ns`;
    if (a < 1e6) return `${(ns / 1e3).toFixed(1)} us`;
    if (a < 1e9) return `${(ns / 1e6).toFixed(1)} ms`;
    return `${(ns / 1e9).toFixed(2)} s`;
  }
  // The ticks of a bytes axis up to `max`, all in the unit of the largest
  // (0.5 GiB, 1 GiB, not 512 MiB, 1 GiB), with the decimals `step` needs.
  function byteTicks(max, step) {
    let i = 0, d = 1;
    while (max / d >= 1024 && i < UNITS.length - 1) { d *= 1024; i++; }
    const u = step / d;
    let decimals = 0;
    while (decimals < 3 && Math.abs(u * 10 ** decimals - Math.round(u * 10 ** decimals)) > 1e-6) decimals++;
    return (v) => (v === 0 ? "0" : `${(v / d).toFixed(decimals)} ${UNITS[i]}`);
  }
  const count = (n) => Math.round(n).toLocaleString("en-US");
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  // A site or frame shortened from the left, keeping its end readable.
  function shortLeft(s, n) { return s.length <= n ? s : "…" + s.slice(s.length - n + 1); }

  // ---------- decoding ----------
  async function inflate(b64) {
    const bin = atob(b64);
    const u8 = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u8[i] = bin.charCodeAt(i);
    const stream = new Blob([u8]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }
  function readColumns(u8, columns) {
    let p = 0;
    const out = {};
    for (const [name, n] of columns) {
      const a = new Float64Array(n);
      for (let i = 0; i < n; i++) {
        let v = 0, mul = 1, b;
        do { b = u8[p++]; v += (b & 127) * mul; mul *= 128; } while (b & 128);
        a[i] = v;
      }
      out[name] = a;
    }
    return out;
  }
  const unzig = (v) => (v % 2 === 0 ? v / 2 : -(v + 1) / 2);

  // ---------- the model ----------
  // Event indices and times are kept from the window's first event; the
  // page shows them from the trace's start (T0: that event's time).
  const N = D.events, first = D.first_index, T0 = D.start_ns;
  const at = (t) => duration(t + T0);
  let S = [], KI, KX = {}, C, A, stacks, checkpoints, phases;

  function build(cols) {
    C = cols;
    const n = C.s_start.length, w = D.bucket_events;
    const L0 = { w, n, start: new Float64Array(n), end: new Float64Array(n) };
    for (const q of ["a", "r", "c"]) { L0[q + "Min"] = new Float64Array(n); L0[q + "Max"] = new Float64Array(n); L0[q + "Last"] = new Float64Array(n); }
    let t = 0, last = { a: 0, r: 0, c: 0 };
    for (let b = 0; b < n; b++) {
      t += unzig(C.s_start[b]);
      L0.start[b] = t;
      L0.end[b] = Math.max(t, t + unzig(C.s_span[b]));
      for (const q of ["a", "r", "c"]) {
        last[q] += unzig(C[q + "_last"][b]);
        L0[q + "Last"][b] = last[q];
        L0[q + "Max"][b] = last[q] + C[q + "_hi"][b];
        L0[q + "Min"][b] = last[q] - C[q + "_lo"][b];
      }
    }
    S = [L0];
    // Coarser levels, four buckets to one, down to a few hundred.
    while (S[S.length - 1].n > 600) {
      const f = S[S.length - 1], m = Math.ceil(f.n / 4);
      const L = { w: f.w * 4, n: m, start: new Float64Array(m), end: new Float64Array(m) };
      for (const q of ["a", "r", "c"]) { L[q + "Min"] = new Float64Array(m); L[q + "Max"] = new Float64Array(m); L[q + "Last"] = new Float64Array(m); }
      for (let b = 0; b < m; b++) {
        const lo = b * 4, hi = Math.min(f.n, lo + 4) - 1;
        L.start[b] = f.start[lo]; L.end[b] = f.end[hi];
        for (const q of ["a", "r", "c"]) {
          let mn = Infinity, mx = -Infinity;
          for (let k = lo; k <= hi; k++) { mn = Math.min(mn, f[q + "Min"][k]); mx = Math.max(mx, f[q + "Max"][k]); }
          L[q + "Min"][b] = mn; L[q + "Max"][b] = mx; L[q + "Last"][b] = f[q + "Last"][hi];
        }
      }
      S.push(L);
    }

    // Knots of the x mappings: each bucket's first and last event.
    const ki = [], kt = [];
    let tmax = 0;
    for (let b = 0; b < n; b++) {
      const fi = b * w, li = Math.min(N, fi + w) - 1;
      tmax = Math.max(tmax, L0.start[b]);
      ki.push(fi); kt.push(tmax);
      if (li > fi) { tmax = Math.max(tmax, L0.end[b]); ki.push(li); kt.push(tmax); }
    }
    const span = Math.max(1, tmax);
    ki.push(N); kt.push(tmax + Math.max(1, span / 2000));
    KI = Float64Array.from(ki);
    KX.events = KI;
    KX.time = Float64Array.from(kt);
    // Busy time: every idle gap shrunk to the threshold.
    const gi = D.idle.index, gg = D.idle.gap, thr = D.idle.threshold;
    const prefix = [];
    let acc = 0;
    for (let k = 0; k < gi.length; k++) { acc += gg[k] - thr; prefix.push(acc); }
    api.collapsed = (r) => {
      let lo = 0, hi = gi.length;
      while (lo < hi) { const mid = (lo + hi) >> 1; if (gi[mid] <= r) lo = mid + 1; else hi = mid; }
      return lo === 0 ? 0 : prefix[lo - 1];
    };
    KX.busy = Float64Array.from(kt, (v, k) => v - api.collapsed(ki[k]));

    // Allocations.
    const m = C.al_size.length;
    A = { n: m, start: new Float64Array(m), end: new Float64Array(m), t0: new Float64Array(m), t1: new Float64Array(m), freed: new Uint8Array(m) };
    let idx = first, at = 0;
    for (let k = 0; k < m; k++) {
      idx += C.al_index[k];
      at += unzig(C.al_time[k]);
      A.start[k] = idx - first;
      A.t0[k] = at;
      const life = C.al_life[k];
      A.freed[k] = life > 0 ? 1 : 0;
      A.end[k] = life > 0 ? idx - first + life - 1 : N;
      A.t1[k] = life > 0 ? at + unzig(C.al_free_time[k]) : KX.time[KX.time.length - 1];
    }
    A.size = C.al_size; A.site = C.al_site; A.stack = C.al_stack; A.phase = C.al_phase; A.initial = C.al_initial;
    A.category = C.al_category;
    A.slack = C.al_slack;
    // Stacks.
    stacks = [];
    let p = 0;
    for (let s = 0; s < C.st_len.length; s++) { const l = C.st_len[s]; stacks.push(C.st_frames.subarray(p, p + l)); p += l; }
    // Checkpoints with their segments and blocks.
    checkpoints = D.checkpoints.map((c) => ({ ...c, r: c.index - first }));
    let sg = 0, bl = 0;
    checkpoints.forEach((c, ci) => {
      c.segments = [];
      for (let k = 0; k < C.cp_segments[ci]; k++, sg++) {
        const seg = { addr: C.sg_addr[sg], size: C.sg_size[sg], expandable: C.sg_flags[sg] & 1, used: C.sg_used[sg], usedBlocks: C.sg_used_blocks[sg], largest: C.sg_largest_free[sg], blocks: [] };
        let end = 0;
        for (let j = 0; j < C.sg_blocks[sg]; j++, bl++) {
          const off = end + unzig(C.bl_gap[bl]);
          const size = C.bl_size[bl];
          seg.blocks.push({ off, size, pending: C.bl_pending[bl], stack: C.bl_stack[bl], alloc: C.bl_alloc[bl] - 1 });
          end = off + size;
        }
        c.segments.push(seg);
      }
    });
    // Phases, with their paths (for the leaks section's links).
    const P = D.phases;
    phases = P.name.map((name, k) => ({ name, depth: P.depth[k], begin: P.begin[k], end: P.end[k] }));
    const open = [];
    for (const ph of phases) {
      while (open.length && (open[open.length - 1].depth >= ph.depth || open[open.length - 1].end < ph.begin)) open.pop();
      ph.path = (open.length ? open[open.length - 1].path + "/" : "") + ph.name;
      open.push(ph);
    }
  }

  // x mappings: event index (continuous) <-> the chosen axis.
  function X(mode, r) {
    const kx = KX[mode];
    if (r <= 0) return kx[0] + (r * (kx[1] - kx[0] || 1)) / ((KI[1] - KI[0]) || 1);
    let lo = 0, hi = KI.length - 1;
    if (r >= KI[hi]) return kx[hi];
    while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (KI[mid] <= r) lo = mid; else hi = mid; }
    const f = (r - KI[lo]) / (KI[hi] - KI[lo] || 1);
    return kx[lo] + f * (kx[hi] - kx[lo]);
  }
  function R(mode, x) {
    const kx = KX[mode];
    let lo = 0, hi = kx.length - 1;
    if (x <= kx[0]) return 0;
    if (x >= kx[hi]) return KI[hi];
    while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (kx[mid] <= x) lo = mid; else hi = mid; }
    const f = (x - kx[lo]) / (kx[hi] - kx[lo] || 1);
    return KI[lo] + f * (KI[hi] - KI[lo]);
  }
  // An event whose exact time is known.
  function Xe(mode, r, t) {
    if (mode === "events") return r;
    if (mode === "time") return t;
    return t - api.collapsed(r);
  }
  // The time of an event (interpolated inside a bucket).
  const T = (r) => X("time", r);

  // ---------- state ----------
  const view = { mode: D.default_axis, x0: 0, x1: 1 };
  let site = -1, pinned = -1, hover = -1, checkpoint = -1, detail = null;
  const DETAIL_MAX = 4000, VERTEX_MAX = 600000;
  const PALETTE = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#7f6d00", "#6a3d9a", "#1b9e77", "#b15928", "#4c72b0", "#8c564b"];
  // By site: the sites of the key (most bytes first) each a colour of
  // their own, the rest one grey, so the key says what every colour is.
  const OTHER_SITES = "#b8bec8";
  const siteKey = new Map(D.site_key.map((k, i) => [k.site, PALETTE[i]]));
  const siteColour = (s) => siteKey.get(s) ?? OTHER_SITES;
  // What an allocation held (category code; +8 when a tag said so), with
  // the colours the Rust side gives each category.
  let colourBy = "category";
  const categoryOf = (k) => D.categories[A.category[k] & 7];
  const colourOf = (k) => (colourBy === "category" ? categoryOf(k).colour : siteColour(A.site[k]));

  function fullRange(mode) { return [X(mode, 0), X(mode, N)]; }
  function setView(x0, x1) {
    const [f0, f1] = fullRange(view.mode);
    const minSpan = view.mode === "events" ? 8 : Math.max(1e-3, (f1 - f0) * 1e-9);
    if (x1 - x0 < minSpan) { const c = (x0 + x1) / 2; x0 = c - minSpan / 2; x1 = c + minSpan / 2; }
    const span = Math.min(x1 - x0, f1 - f0);
    x0 = Math.max(f0, Math.min(x0, f1 - span));
    view.x0 = x0; view.x1 = x0 + span;
    schedule();
  }
  function zoomToEvents(r0, r1) {
    const pad = Math.max(1, (r1 - r0) * 0.04);
    setView(X(view.mode, Math.max(0, r0 - pad)), X(view.mode, Math.min(N, r1 + pad)));
  }
  function setMode(mode) {
    const r0 = R(view.mode, view.x0), r1 = R(view.mode, view.x1);
    view.mode = mode;
    document.querySelectorAll("[data-axis]").forEach((b) => b.classList.toggle("on", b.dataset.axis === mode));
    setView(X(mode, r0), X(mode, r1));
  }

  // ---------- the timeline canvas ----------
  const chart = $("vt-chart"), tip = $("vt-tip");
  const M = { left: 84, right: 18, bottom: 50 };
  let geom = null;
  function phaseRows() { let d = 0; for (const p of phases) d = Math.max(d, p.depth + 1); return Math.min(3, d); }
  function size(canvas, cssH) {
    const dpr = window.devicePixelRatio || 1, w = canvas.parentElement.clientWidth;
    canvas.style.width = w + "px"; canvas.style.height = cssH + "px";
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(cssH * dpr)) { canvas.width = Math.round(w * dpr); canvas.height = Math.round(cssH * dpr); }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    return [ctx, w];
  }
  function niceStep(raw, bases) {
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const b of bases) if (b * p >= raw) return b * p;
    return 10 * p;
  }
  function byteStep(max) {
    const raw = max / 5;
    let u = 1;
    while (raw / u >= 1024) u *= 1024;
    // 1000 of a unit reads better as 1 of the next.
    return Math.min(1024, niceStep(raw / u, [1, 2, 2.5, 5])) * u;
  }

  let queued = false;
  function schedule() { if (!queued) { queued = true; requestAnimationFrame(() => { queued = false; draw(); }); } }

  function draw() {
    drawChart();
    drawFragmentation();
    const r0 = R(view.mode, view.x0), r1 = R(view.mode, view.x1);
    $("vt-range").textContent = view.mode === "events"
      ? `events ${count(r0 + first)} – ${count(r1 + first)}`
      : view.mode === "busy"
        ? `${duration(view.x0)} – ${duration(view.x1)} (busy time), events ${count(r0 + first)} – ${count(r1 + first)}`
        : `${at(view.x0)} – ${at(view.x1)} (time), events ${count(r0 + first)} – ${count(r1 + first)}`;
  }

  function drawChart() {
    const rows = phaseRows();
    const top = 14 + rows * 17;
    const [ctx, w] = size(chart, 470);
    const px0 = M.left, px1 = w - M.right, py0 = top, py1 = 470 - M.bottom;
    const sx = (x) => px0 + ((x - view.x0) / (view.x1 - view.x0)) * (px1 - px0);
    const r0 = Math.max(0, R(view.mode, view.x0)), r1 = Math.min(N, R(view.mode, view.x1));
    // The coarsest level with at most about two buckets a pixel.
    const perPx = (r1 - r0) / (px1 - px0);
    let L = S[0];
    for (const l of S) if (l.w <= Math.max(S[0].w, perPx / 2)) L = l;
    const b0 = Math.max(0, Math.floor(r0 / L.w) - 1), b1 = Math.min(L.n - 1, Math.floor(r1 / L.w) + 1);
    let ymax = 1024;
    for (let b = b0; b <= b1; b++) ymax = Math.max(ymax, L.rMax[b], L.aMax[b]);
    ymax *= 1.08;
    const sy = (v) => py1 - (v / ymax) * (py1 - py0);
    geom = { px0, px1, py0, py1, sx, sy, ymax, r0, r1, L, top };
    ctx.clearRect(0, 0, w, 470);
    ctx.font = "13px sans-serif";
    // Grid and y axis.
    const step = byteStep(ymax), tick = byteTicks(ymax, step);
    ctx.strokeStyle = "#e6e8ec"; ctx.fillStyle = "#5b6475"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
    for (let v = 0; v <= ymax; v += step) {
      const y = Math.round(sy(v)) + 0.5;
      ctx.beginPath(); ctx.moveTo(px0, y); ctx.lineTo(px1, y); ctx.stroke();
      ctx.fillText(tick(v), px0 - 8, y);
    }
    // x axis ticks.
    drawXTicks(ctx, sx, px0, px1, py1);
    ctx.save();
    ctx.beginPath(); ctx.rect(px0, py0 - 2, px1 - px0, py1 - py0 + 2); ctx.clip();
    // Idle gaps (busy time): a notch on the axis where time was cut.
    idleBoxes = [];
    if (view.mode === "busy") {
      ctx.strokeStyle = "#9aa3b2";
      D.idle.index.forEach((gi, k) => {
        if (gi < r0 || gi > r1) return;
        const x = Math.round(sx(X("busy", gi - 0.5))) + 0.5;
        ctx.beginPath(); ctx.moveTo(x - 3, py1 - 7); ctx.lineTo(x + 3, py1 - 3); ctx.moveTo(x - 3, py1 - 4); ctx.lineTo(x + 3, py1); ctx.stroke();
        idleBoxes.push([x - 4, x + 4, D.idle.gap[k], gi]);
      });
    }
    // Allocations one by one, or the allocated area.
    detail = document.getElementById("vt-detail").checked ? layout(r0, r1) : null;
    drawSeries(ctx, L, b0, b1, sx, sy, "a", "rgba(0,114,178,0.13)", null, true);
    if (detail && detail.ok) drawAllocations(ctx, sx, sy);
    drawSeries(ctx, L, b0, b1, sx, sy, "c", null, "#e69f00", false, [5, 3]);
    drawSeries(ctx, L, b0, b1, sx, sy, "a", null, "#0072b2", false);
    drawSeries(ctx, L, b0, b1, sx, sy, "r", null, "#1d2433", false);
    // A highlighted site: where its kept allocations were made.
    if (site >= 0 && !(detail && detail.ok)) {
      ctx.fillStyle = siteColour(site);
      for (let k = 0; k < A.n; k++) {
        if (A.site[k] !== site || A.start[k] > r1 || A.end[k] < r0) continue;
        const x = sx(Xe(view.mode, A.start[k], A.t0[k]));
        ctx.fillRect(x - 1, py1 - 9, 2, 9);
      }
    }
    ctx.restore();
    drawPhases(ctx, sx, px0, px1, rows, r0, r1);
    drawCheckpointMarks(ctx, sx, px0, px1, py1, r0, r1);
    ctx.strokeStyle = "#9aa3b2";
    ctx.strokeRect(px0 + 0.5, py0 + 0.5, px1 - px0, py1 - py0);
    status();
  }

  function drawSeries(ctx, L, b0, b1, sx, sy, q, fill, stroke, area, dash) {
    const mn = L[q + "Min"], mx = L[q + "Max"], last = L[q + "Last"];
    ctx.beginPath();
    let prev = b0 > 0 ? last[b0 - 1] : mn[b0];
    const base = sy(0);
    let started = false;
    for (let b = b0; b <= b1; b++) {
      const fi = b * L.w, li = Math.min(N, fi + L.w) - 1;
      const xs = sx(X(view.mode, fi)), xe = sx(X(view.mode, li)), xn = sx(X(view.mode, li + 1));
      if (!started) { ctx.moveTo(xs, area ? base : sy(prev)); if (area) ctx.lineTo(xs, sy(prev)); started = true; }
      ctx.lineTo(xs, sy(prev));
      if (area) {
        ctx.lineTo(xs, sy(mx[b])); ctx.lineTo(Math.max(xe, xs), sy(mx[b])); ctx.lineTo(Math.max(xe, xs), sy(last[b])); ctx.lineTo(xn, sy(last[b]));
      } else if (mn[b] !== mx[b]) {
        if (xe - xs > 1.5) { ctx.save(); ctx.fillStyle = stroke + "33"; ctx.fillRect(xs, sy(mx[b]), xe - xs, sy(mn[b]) - sy(mx[b])); ctx.restore(); }
        ctx.lineTo(xs, sy(mn[b])); ctx.lineTo(xs, sy(mx[b])); ctx.lineTo(xs, sy(last[b])); ctx.lineTo(xn, sy(last[b]));
      } else {
        ctx.lineTo(xs, sy(last[b])); ctx.lineTo(xn, sy(last[b]));
      }
      prev = last[b];
    }
    if (area) {
      const xEnd = sx(X(view.mode, Math.min(N, (b1 + 1) * L.w)));
      ctx.lineTo(xEnd, base); ctx.closePath(); ctx.fillStyle = fill; ctx.fill();
    } else {
      ctx.strokeStyle = stroke; ctx.lineWidth = 1.6; ctx.setLineDash(dash || []); ctx.stroke(); ctx.setLineDash([]); ctx.lineWidth = 1;
    }
  }

  function drawXTicks(ctx, sx, px0, px1, py1) {
    ctx.fillStyle = "#5b6475"; ctx.textAlign = "center"; ctx.textBaseline = "top"; ctx.strokeStyle = "#9aa3b2";
    const span = view.x1 - view.x0;
    const step = niceStep(span / Math.max(2, (px1 - px0) / 120), [1, 2, 2.5, 5]);
    // Ticks fall on round values of what the labels read.
    const off = view.mode === "events" ? first : view.mode === "time" ? T0 : 0;
    const fmt = view.mode === "events" ? count : (v) => (v === 0 ? "0" : duration(v));
    for (let v = Math.ceil((view.x0 + off) / step) * step; v <= view.x1 + off; v += step) {
      const x = Math.round(sx(v - off)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, py1); ctx.lineTo(x, py1 + 5); ctx.stroke();
      ctx.fillText(fmt(v), x, py1 + 16);
    }
    ctx.textAlign = "right";
    ctx.fillText({ events: "event index", time: "time", busy: "busy time (idle gaps cut)" }[view.mode], px1, py1 + 32);
  }

  let phaseBoxes = [], idleBoxes = [];
  function drawPhases(ctx, sx, px0, px1, rows, r0, r1) {
    phaseBoxes = [];
    ctx.textBaseline = "middle"; ctx.textAlign = "left"; ctx.font = "12px sans-serif";
    for (const p of phases) {
      if (p.depth >= rows || p.end < r0 || p.begin > r1) continue;
      const a = Math.max(px0, sx(X(view.mode, p.begin))), b = Math.min(px1, sx(X(view.mode, p.end + 1)));
      if (b - a < 1) continue;
      const y = 6 + p.depth * 17;
      let h = 0;
      for (let i = 0; i < p.name.length; i++) h = (h * 31 + p.name.charCodeAt(i)) | 0;
      ctx.fillStyle = ["#dbe7f3", "#e3eedb", "#f3e6d6", "#e9def0"][Math.abs(h) % 4];
      ctx.fillRect(a, y, Math.max(1, b - a - 1), 15);
      if (b - a > 30) {
        ctx.fillStyle = "#1d2433";
        ctx.save(); ctx.beginPath(); ctx.rect(a, y, b - a - 2, 15); ctx.clip();
        ctx.fillText(p.name, a + 3, y + 8);
        ctx.restore();
      }
      phaseBoxes.push([a, b, y, y + 15, p]);
    }
    ctx.font = "13px sans-serif";
  }

  let checkpointBoxes = [];
  function drawCheckpointMarks(ctx, sx, px0, px1, py1, r0, r1) {
    checkpointBoxes = [];
    checkpoints.forEach((c, k) => {
      if (c.r < r0 - 1 || c.r > r1 + 1) return;
      const x = sx(X(view.mode, c.r + 0.5));
      if (x < px0 - 1 || x > px1 + 1) return;
      ctx.fillStyle = k === checkpoint ? "#c81e1e" : c.kinds.includes("even") ? "#9aa3b2" : "#1d2433";
      ctx.beginPath(); ctx.moveTo(x, py1 + 1); ctx.lineTo(x - 5, py1 + 9); ctx.lineTo(x + 5, py1 + 9); ctx.closePath(); ctx.fill();
      checkpointBoxes.push([x - 6, x + 6, k]);
    });
  }

  // ---------- allocations one by one ----------
  // PyTorch's layout: live allocations stacked in the order they were made;
  // when one is freed, those above it drop by its size.
  let layoutKey = "";
  let layoutCache = null;
  function layout(r0, r1) {
    const key = `${Math.floor(r0)}:${Math.ceil(r1)}`;
    if (key === layoutKey) return layoutCache;
    layoutKey = key;
    const picked = [];
    for (let k = 0; k < A.n && A.start[k] <= r1; k++) {
      if (A.end[k] > r0) { picked.push(k); if (picked.length > DETAIL_MAX) return (layoutCache = { ok: false, reason: "many" }); }
    }
    // Events inside the window: allocations (+) and frees (-), by index.
    const events = [];
    for (const k of picked) {
      if (A.start[k] > r0) events.push([A.start[k], 1, k]);
      if (A.freed[k] && A.end[k] <= r1) events.push([A.end[k], 0, k]);
    }
    events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    const stack = picked.filter((k) => A.start[k] <= r0);
    const verts = new Map();
    let off = 0;
    const wStart = Math.max(0, r0);
    for (const k of stack) { verts.set(k, [[wStart, -1, off]]); off += A.size[k]; }
    let total = stack.length;
    for (const [r, isAlloc, k] of events) {
      if (isAlloc) {
        verts.set(k, [[r, A.t0[k], off]]); stack.push(k); off += A.size[k]; total++;
      } else {
        const i = stack.indexOf(k);
        if (i < 0) continue;
        verts.get(k).push([r, A.t1[k], -1]);
        stack.splice(i, 1);
        off -= A.size[k];
        let o = 0;
        for (let j = 0; j < i; j++) o += A.size[stack[j]];
        for (let j = i; j < stack.length; j++) {
          verts.get(stack[j]).push([r, A.t1[k], o]);
          o += A.size[stack[j]];
          total++;
        }
        if (total > VERTEX_MAX) return (layoutCache = { ok: false, reason: "busy" });
      }
    }
    for (const k of stack) verts.get(k).push([Math.min(N, r1 + 1), -1, -1]);
    return (layoutCache = { ok: true, picked, verts });
  }
  function vx(v) { return v[1] >= 0 ? Xe(view.mode, v[0], v[1]) : X(view.mode, v[0]); }
  function drawAllocations(ctx, sx, sy) {
    for (const k of detail.picked) {
      const vs = detail.verts.get(k);
      if (!vs) continue;
      const size = A.size[k];
      ctx.beginPath();
      for (let i = 0; i < vs.length - 1; i++) {
        const xa = sx(vx(vs[i])), xb = sx(vx(vs[i + 1]));
        const y = sy(vs[i][2] + size);
        if (i === 0) ctx.moveTo(xa, y); else ctx.lineTo(xa, y);
        ctx.lineTo(xb, y);
      }
      for (let i = vs.length - 2; i >= 0; i--) {
        const xa = sx(vx(vs[i])), xb = sx(vx(vs[i + 1]));
        const y = sy(vs[i][2]);
        ctx.lineTo(xb, y); ctx.lineTo(xa, y);
      }
      ctx.closePath();
      const dim = site >= 0 && A.site[k] !== site;
      ctx.fillStyle = dim ? "#d9dde3" : colourOf(k);
      ctx.globalAlpha = k === pinned || k === hover ? 1 : 0.78;
      ctx.fill();
      if (k === pinned || k === hover) { ctx.strokeStyle = "#c81e1e"; ctx.lineWidth = 2; ctx.stroke(); ctx.lineWidth = 1; }
      else if (sy(0) - sy(size) > 3) { ctx.strokeStyle = "rgba(255,255,255,0.7)"; ctx.stroke(); }
      ctx.globalAlpha = 1;
    }
  }
  // The allocation under a point of the chart, if any.
  function allocationAt(mx, my) {
    if (!detail || !detail.ok || !geom) return -1;
    const x = view.x0 + ((mx - geom.px0) / (geom.px1 - geom.px0)) * (view.x1 - view.x0);
    let found = -1;
    for (const k of detail.picked) {
      const vs = detail.verts.get(k);
      for (let i = 0; i < vs.length - 1; i++) {
        const xa = vx(vs[i]), xb = vx(vs[i + 1]);
        if (x < xa || x >= xb) continue;
        const ya = geom.sy(vs[i][2] + A.size[k]), yb = geom.sy(vs[i][2]);
        if (my >= ya - 1 && my <= yb + 1) found = k;
      }
    }
    return found;
  }
  function stackText(s, limit) {
    const frames = stacks[s] || [];
    const lines = Array.from(frames.slice(0, limit || frames.length), (f) => D.frames[f]);
    if (limit && frames.length > limit) lines.push(`… ${frames.length - limit} more frames (click to pin)`);
    return lines.join("\n");
  }
  function describe(k, full) {
    const phase = A.phase[k] > 0 ? D.phase_paths[A.phase[k] - 1] : "(no phase)";
    const req = A.size[k] - unzig(A.slack[k]);
    const made = A.initial[k] ? "live before the first event" : `${at(A.t0[k])} (event ${count(A.start[k] + first)})`;
    const freed = A.freed[k] ? `freed at ${at(A.t1[k])} (event ${count(A.end[k] + first)}), after ${duration(A.t1[k] - A.t0[k])}` : "never freed (live at the end)";
    return `<b>${bytes(A.size[k])}</b>${req !== A.size[k] ? ` (requested ${bytes(req)})` : ""} · <code>${esc(D.sites[A.site[k]])}</code>
<div>holds <b>${esc(categoryOf(k).label)}</b> (${A.category[k] & 8 ? "exact: tagged by the recorder" : "inferred"})</div><div>phase <code>${esc(phase)}</code></div><div>allocated at ${made}</div><div>${freed}</div>
<pre class="vt-stack">${esc(stackText(A.stack[k], full ? 0 : 14))}</pre>`;
  }

  // ---------- status and legend ----------
  function status() {
    const parts = [];
    const kept = A.n, total = D.allocations_total;
    if (detail && detail.ok) parts.push(`${count(detail.picked.length)} allocations drawn one by one; hover for the stack, click to pin.`);
    else if (detail && detail.reason === "many") parts.push(`Zoom in (drag across the chart, or the mouse wheel) until at most ${count(DETAIL_MAX)} allocations are in view to see each one.`);
    else if (detail) parts.push("Zoom in further to see each allocation.");
    if (kept < total) parts.push(`Allocations of at least ${bytes(D.threshold)} are kept one by one (${count(kept)} of ${count(total)}); smaller ones are in the shaded area.`);
    if (D.bucket_events > 1) parts.push(`Memory lines are exact to ${count(D.bucket_events)} events: a band shows the lowest and highest value inside.`);
    $("vt-status").textContent = parts.join(" ");
  }

  // ---------- interaction ----------
  let drag = null;
  const rel = (e) => { const b = chart.getBoundingClientRect(); return [e.clientX - b.left, e.clientY - b.top]; };
  const xAt = (mx) => view.x0 + ((mx - geom.px0) / (geom.px1 - geom.px0)) * (view.x1 - view.x0);
  chart.addEventListener("mousedown", (e) => {
    const [mx, my] = rel(e);
    drag = { mx, my, x0: view.x0, x1: view.x1, pan: e.shiftKey || e.button === 1, moved: false };
    e.preventDefault();
  });
  window.addEventListener("mousemove", (e) => {
    if (!geom) return;
    const [mx, my] = rel(e);
    if (drag) {
      if (Math.abs(mx - drag.mx) > 3) drag.moved = true;
      if (drag.pan && drag.moved) {
        const dx = ((mx - drag.mx) / (geom.px1 - geom.px0)) * (drag.x1 - drag.x0);
        setView(drag.x0 - dx, drag.x1 - dx);
      } else if (drag.moved) {
        drawChart();
        const ctx = chart.getContext("2d");
        ctx.fillStyle = "rgba(0,114,178,0.15)";
        ctx.fillRect(Math.min(mx, drag.mx), geom.py0, Math.abs(mx - drag.mx), geom.py1 - geom.py0);
      }
      return;
    }
    if (e.target !== chart) { tip.hidden = true; return; }
    onHover(mx, my);
  });
  window.addEventListener("mouseup", (e) => {
    if (!drag) return;
    const [mx, my] = rel(e);
    const d = drag;
    drag = null;
    if (d.moved && !d.pan) {
      const a = xAt(Math.min(mx, d.mx)), b = xAt(Math.max(mx, d.mx));
      setView(a, b);
    } else if (!d.moved) {
      onClick(mx, my);
    }
  });
  chart.addEventListener("wheel", (e) => {
    if (!geom) return;
    e.preventDefault();
    const [mx] = rel(e);
    if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
      const dx = (e.deltaX / (geom.px1 - geom.px0)) * (view.x1 - view.x0);
      setView(view.x0 + dx, view.x1 + dx);
      return;
    }
    const f = Math.exp(Math.max(-1, Math.min(1, e.deltaY / 300)));
    const c = xAt(mx);
    setView(c - (c - view.x0) * f, c + (view.x1 - c) * f);
  }, { passive: false });
  chart.addEventListener("dblclick", () => resetView());
  chart.addEventListener("mouseleave", () => { tip.hidden = true; if (hover >= 0) { hover = -1; schedule(); } });

  function showTip(mx, my, html) {
    tip.innerHTML = html;
    tip.hidden = false;
    const w = chart.clientWidth;
    tip.style.left = Math.min(mx + 14, w - tip.offsetWidth - 4) + "px";
    tip.style.top = Math.max(0, my + 14) + "px";
  }
  function onHover(mx, my) {
    for (const [a, b, y0, y1, p] of phaseBoxes) {
      if (mx >= a && mx <= b && my >= y0 && my <= y1) {
        chart.style.cursor = "pointer";
        return showTip(mx, my, `phase <code>${esc(p.path)}</code>: events ${count(p.begin + first)} – ${count(p.end + first)}, ${duration(T(p.end) - T(p.begin))}. Click to zoom to it.`);
      }
    }
    for (const [a, b, k] of checkpointBoxes) {
      if (mx >= a && mx <= b && my > geom.py1) {
        chart.style.cursor = "pointer";
        return showTip(mx, my, `checkpoint: ${checkpointName(checkpoints[k])}. Click to show the allocator's state.`);
      }
    }
    for (const [a, b, gap, gi] of idleBoxes) {
      if (mx >= a && mx <= b && my >= geom.py1 - 9 && my <= geom.py1) {
        return showTip(mx, my, `idle for ${duration(gap)} before event ${count(gi + first)}: busy time counts it as ${duration(D.idle.threshold)}`);
      }
    }
    chart.style.cursor = "crosshair";
    if (mx < geom.px0 || mx > geom.px1 || my < geom.py0 || my > geom.py1) { tip.hidden = true; return; }
    const k = allocationAt(mx, my);
    if (k !== hover) { hover = k; schedule(); }
    if (k >= 0) return showTip(mx, my, describe(k, false));
    const r = Math.max(0, Math.min(N - 1, Math.floor(R(view.mode, xAt(mx)))));
    const L = geom.L, b = Math.min(L.n - 1, Math.floor(r / L.w));
    const range = (q) => (L[q + "Min"][b] === L[q + "Max"][b] ? bytes(L[q + "Last"][b]) : `${bytes(L[q + "Min"][b])} – ${bytes(L[q + "Max"][b])}`);
    const where = L.w > 1 ? `events ${count(b * L.w + first)} – ${count(Math.min(N, (b + 1) * L.w) - 1 + first)}` : `event ${count(r + first)}`;
    let phase = "";
    for (const p of phases) if (p.begin <= r && p.end >= r) phase = p.path;
    showTip(mx, my, `${where} at ${at(T(r))}${phase ? ` in <code>${esc(phase)}</code>` : ""}
<div><span class="vt-key" style="background:#1d2433"></span>reserved ${range("r")}</div>
<div><span class="vt-key" style="background:#0072b2"></span>allocated ${range("a")}</div>
<div><span class="vt-key" style="background:#e69f00"></span>cached free ${range("c")}</div><div class="muted">Click for the allocator's state here; drag to zoom.</div>`);
  }
  function onClick(mx, my) {
    for (const [a, b, y0, y1, p] of phaseBoxes) {
      if (mx >= a && mx <= b && my >= y0 && my <= y1) return zoomToEvents(p.begin, p.end + 1);
    }
    for (const [a, b, k] of checkpointBoxes) if (mx >= a && mx <= b && my > geom.py1) return showCheckpoint(k);
    if (mx < geom.px0 || mx > geom.px1) return;
    const k = allocationAt(mx, my);
    pin(k);
    showCheckpoint(nearestCheckpoint(R(view.mode, xAt(mx))));
  }
  function pin(k) {
    pinned = k;
    const panel = $("vt-pinned");
    if (k < 0) { panel.hidden = true; schedule(); return; }
    panel.hidden = false;
    panel.innerHTML = `<button class="vt-close" title="unpin">×</button><div class="vt-pin-title">Pinned allocation</div>${describe(k, true)}`;
    panel.querySelector(".vt-close").onclick = () => pin(-1);
    schedule();
  }
  function nearestCheckpoint(r) {
    let best = -1, d = Infinity;
    checkpoints.forEach((c, k) => { const dd = Math.abs(c.r - r); if (dd < d) { d = dd; best = k; } });
    return best;
  }
  function resetView() { const [a, b] = fullRange(view.mode); view.x0 = a; view.x1 = b; schedule(); }

  // ---------- the allocator's state at a checkpoint ----------
  const KIND_NAMES = { allocated_peak: "allocated peak", reserved_peak: "reserved peak", oom: "out of memory", end: "end", even: "evenly spaced" };
  function checkpointName(c) {
    return `${c.kinds.map((k) => KIND_NAMES[k]).join(", ")} at event ${count(c.index)}, ${at(c.time)}`;
  }
  const segCanvas = $("vt-segments"), segTip = $("vt-seg-tip");
  let segBoxes = [];
  function showCheckpoint(k) {
    if (k < 0) return;
    checkpoint = k;
    $("vt-checkpoint").value = String(k);
    const c = checkpoints[k];
    $("vt-cp-info").innerHTML = `Showing the checkpoint nearest the moment chosen: <b>${esc(checkpointName(c))}</b>. ${count(c.segments.length)} segments, ${bytes(c.reserved)} reserved: ${bytes(c.allocated)} allocated, ${bytes(c.pending)} freed but waiting for other streams, ${bytes(c.free)} cached free; largest free block ${bytes(c.largest_free)}, external fragmentation ${(100 * c.fragmentation).toFixed(1)}%.${c.left_out ? ` The ${count(c.left_out)} smallest blocks are counted in their segments' figures but not drawn.` : ""}`;
    drawSegments();
    schedule();
  }
  // The segments drawn: the largest few, in address order, the smaller
  // ones summarized in a line until asked for (a run may have hundreds).
  const FEW_SEGMENTS = 24;
  let allSegments = false;
  function shownSegments(c) {
    if (allSegments || c.segments.length <= FEW_SEGMENTS) return c.segments;
    const cut = c.segments.map((s) => s.size).sort((a, b) => b - a)[FEW_SEGMENTS - 1];
    // The largest, and as many of those as large as the last as there is
    // room for, in address order.
    let room = FEW_SEGMENTS - c.segments.filter((s) => s.size > cut).length;
    return c.segments.filter((s) => s.size > cut || (s.size === cut && room-- > 0));
  }
  function segmentsNote(c, shown) {
    const note = $("vt-seg-more");
    const drawn = new Set(shown);
    const rest = c.segments.filter((s) => !drawn.has(s));
    if (rest.length) {
      const sum = (f) => rest.reduce((t, s) => t + f(s), 0);
      note.innerHTML = `${count(rest.length)} smaller segments not drawn: ${bytes(sum((s) => s.size))} reserved, ${bytes(sum((s) => s.used))} in use. <button id="vt-seg-toggle">show all ${count(c.segments.length)}</button>`;
    } else if (allSegments && c.segments.length > FEW_SEGMENTS) {
      note.innerHTML = `<button id="vt-seg-toggle">show the ${FEW_SEGMENTS} largest only</button>`;
    } else {
      note.innerHTML = "";
    }
    const toggle = $("vt-seg-toggle");
    if (toggle) toggle.onclick = () => { allSegments = !allSegments; drawSegments(); };
  }
  function drawSegments() {
    if (checkpoint < 0) return;
    const c = checkpoints[checkpoint];
    const rowH = 22, labelW = 190, maxRows = 400;
    const shown = shownSegments(c);
    segmentsNote(c, shown);
    const segs = shown.slice(0, maxRows);
    const h = Math.max(40, segs.length * rowH + 10);
    const [ctx, w] = size(segCanvas, h);
    ctx.clearRect(0, 0, w, h);
    segBoxes = [];
    const maxSize = Math.max(1, ...segs.map((s) => s.size));
    const barW = w - labelW - 10;
    ctx.font = "12px sans-serif"; ctx.textBaseline = "middle";
    segs.forEach((s, i) => {
      const y = 5 + i * rowH;
      const bw = Math.max(4, (s.size / maxSize) * barW);
      const scale = bw / s.size;
      ctx.fillStyle = "#1d2433"; ctx.textAlign = "left";
      ctx.fillText(`${bytes(s.size)}${s.expandable ? " expandable" : ""} · ${(100 * s.used / s.size).toFixed(0)}% used`, 4, y + rowH / 2 - 2);
      ctx.fillStyle = "#eef0f3"; ctx.fillRect(labelW, y + 2, bw, rowH - 6);
      for (const b of s.blocks) {
        const x = labelW + b.off * scale, bwid = Math.max(1, b.size * scale);
        const siteOf = b.alloc >= 0 ? A.site[b.alloc] : -1;
        if (b.pending) ctx.fillStyle = "#f0a35e";
        else if (site >= 0 && siteOf !== site) ctx.fillStyle = "#c9ced6";
        else ctx.fillStyle = b.alloc >= 0 ? colourOf(b.alloc) : "#4a78a8";
        // A hairline between neighbours, where there is room for one.
        ctx.fillRect(x, y + 2, bwid > 3 ? bwid - 1 : bwid, rowH - 6);
        if (b.alloc >= 0 && b.alloc === pinned) { ctx.strokeStyle = "#c81e1e"; ctx.lineWidth = 2; ctx.strokeRect(x, y + 2, bwid, rowH - 6); ctx.lineWidth = 1; }
        segBoxes.push([x, x + bwid, y + 2, y + rowH - 4, s, b]);
      }
      ctx.strokeStyle = "#9aa3b2"; ctx.strokeRect(labelW + 0.5, y + 2.5, bw, rowH - 6);
    });
    if (shown.length > maxRows) { ctx.fillStyle = "#5b6475"; ctx.fillText(`… ${shown.length - maxRows} more segments`, 4, h - 6); }
  }
  segCanvas.addEventListener("mousemove", (e) => {
    const b = segCanvas.getBoundingClientRect(), mx = e.clientX - b.left, my = e.clientY - b.top;
    for (const [x0, x1, y0, y1, s, blk] of segBoxes) {
      if (mx >= x0 && mx <= x1 && my >= y0 && my <= y1) {
        const state = blk.pending ? "freed, waiting for another stream (inactive)" : "allocated";
        const body = blk.alloc >= 0 ? describe(blk.alloc, false) : `<b>${bytes(blk.size)}</b><pre class="vt-stack">${esc(stackText(blk.stack, 14))}</pre>`;
        segTip.innerHTML = `block at +${bytes(blk.off)} of a ${bytes(s.size)} segment (${bytes(s.used)} in use in ${count(s.usedBlocks)} blocks, largest free range ${bytes(s.largest)}): ${state}<div>${body}</div>`;
        segTip.hidden = false;
        segTip.style.left = Math.min(mx + 14, segCanvas.clientWidth - segTip.offsetWidth - 4) + "px";
        segTip.style.top = my + 14 + "px";
        return;
      }
    }
    segTip.hidden = true;
  });
  segCanvas.addEventListener("mouseleave", () => { segTip.hidden = true; });
  segCanvas.addEventListener("click", (e) => {
    const b = segCanvas.getBoundingClientRect(), mx = e.clientX - b.left, my = e.clientY - b.top;
    for (const [x0, x1, y0, y1, , blk] of segBoxes) if (mx >= x0 && mx <= x1 && my >= y0 && my <= y1 && blk.alloc >= 0) { pin(blk.alloc); drawSegments(); return; }
  });

  // ---------- fragmentation on the same axis ----------
  const fragCanvas = $("vt-frag");
  function drawFragmentation() {
    if (!fragCanvas || !D.fragmentation) return;
    const F = D.fragmentation;
    const [ctx, w] = size(fragCanvas, 200);
    const px0 = M.left, px1 = w - M.right, py0 = 10, py1 = 170;
    ctx.clearRect(0, 0, w, 200);
    const sx = (x) => px0 + ((x - view.x0) / (view.x1 - view.x0)) * (px1 - px0);
    const xOfTime = (t) => (view.mode === "time" ? t : X(view.mode, Rtime(t)));
    let ymax = 1024;
    for (let i = 0; i < F.start.length; i++) ymax = Math.max(ymax, F.cached[i]);
    ymax *= 1.1;
    const sy = (v) => py1 - (v / ymax) * (py1 - py0);
    ctx.font = "12px sans-serif"; ctx.fillStyle = "#5b6475"; ctx.textAlign = "right"; ctx.textBaseline = "middle"; ctx.strokeStyle = "#e6e8ec";
    const step = byteStep(ymax), tick = byteTicks(ymax, step);
    for (let v = 0; v <= ymax; v += step) { const y = Math.round(sy(v)) + 0.5; ctx.beginPath(); ctx.moveTo(px0, y); ctx.lineTo(px1, y); ctx.stroke(); ctx.fillText(tick(v), px0 - 8, y); }
    ctx.save(); ctx.beginPath(); ctx.rect(px0, py0, px1 - px0, py1 - py0); ctx.clip();
    ctx.beginPath(); ctx.moveTo(sx(xOfTime(F.start[0])), sy(0));
    for (let i = 0; i < F.start.length; i++) { ctx.lineTo(sx(xOfTime(F.start[i])), sy(F.cached[i])); ctx.lineTo(sx(xOfTime(F.end[i])), sy(F.cached[i])); }
    ctx.lineTo(sx(xOfTime(F.end[F.end.length - 1])), sy(0)); ctx.closePath();
    ctx.fillStyle = "rgba(230,159,0,0.35)"; ctx.fill();
    ctx.beginPath();
    for (let i = 0; i < F.start.length; i++) {
      const y = py1 - F.external[i] * (py1 - py0);
      if (i === 0) ctx.moveTo(sx(xOfTime(F.start[i])), y); else ctx.lineTo(sx(xOfTime(F.start[i])), y);
      ctx.lineTo(sx(xOfTime(F.end[i])), y);
    }
    ctx.strokeStyle = "#c81e1e"; ctx.setLineDash([5, 3]); ctx.lineWidth = 1.5; ctx.stroke(); ctx.setLineDash([]); ctx.lineWidth = 1;
    ctx.restore();
    ctx.strokeStyle = "#9aa3b2"; ctx.strokeRect(px0 + 0.5, py0 + 0.5, px1 - px0, py1 - py0);
    ctx.fillStyle = "#5b6475"; ctx.textAlign = "left";
    ctx.fillText("cached free (area, left axis) · external fragmentation (dashed, 0–100% of the height)", px0, py1 + 18);
  }
  function Rtime(t) { return R("time", t); }

  // ---------- wiring ----------
  function wire() {
    document.querySelectorAll("[data-axis]").forEach((b) => { b.onclick = () => setMode(b.dataset.axis); });
    // Colour by category or by site, each with its key.
    const legend = $("vt-categories"), key = $("vt-sites");
    legend.innerHTML = D.categories.map((c) => `<span><i style="background:${c.colour}"></i>${esc(c.label)}</span>`).join("");
    key.innerHTML = D.site_key.map((k, i) => `<span title="${esc(D.sites[k.site])}"><i style="background:${PALETTE[i]}"></i>${esc(k.label)}</span>`).join("") +
      `<span><i style="background:${OTHER_SITES}"></i>${D.site_key.length ? "other sites" : "every site"}</span>`;
    const colourWith = (by) => {
      colourBy = by;
      document.querySelectorAll("[data-colour]").forEach((b) => b.classList.toggle("on", b.dataset.colour === by));
      legend.hidden = by !== "category";
      key.hidden = by !== "site";
      schedule(); drawSegments();
    };
    document.querySelectorAll("[data-colour]").forEach((b) => { b.onclick = () => colourWith(b.dataset.colour); });
    colourWith(colourBy);
    $("vt-reset").onclick = resetView;
    $("vt-detail").onchange = () => { layoutKey = ""; schedule(); };
    const select = $("vt-checkpoint");
    checkpoints.forEach((c, k) => { const o = document.createElement("option"); o.value = String(k); o.textContent = checkpointName(c); select.appendChild(o); });
    select.onchange = () => showCheckpoint(Number(select.value));
    // Top sites: a click highlights the site's allocations.
    document.querySelectorAll("tr[data-site]").forEach((tr) => {
      tr.classList.add("vt-link");
      tr.title = "Click to highlight this site's allocations in the explorer";
      tr.addEventListener("click", (e) => {
        if (e.target.closest("summary, details[open] pre")) return;
        const s = D.sites.indexOf(tr.dataset.site);
        site = site === s || s < 0 ? -1 : s;
        document.querySelectorAll("tr[data-site]").forEach((t) => t.classList.toggle("vt-on", site >= 0 && t.dataset.site === tr.dataset.site));
        $("vt-site").textContent = site >= 0 ? `Highlighting ${shortLeft(D.sites[site], 70)} (click the row again to clear).` : "";
        layoutKey = ""; schedule(); drawSegments();
        if (site >= 0) $("explorer").scrollIntoView({ behavior: "smooth" });
      });
    });
    // Repetitions of a phase: a link zooms to each.
    document.querySelectorAll("[data-phase-reps]").forEach((el) => {
      const want = el.dataset.phaseReps;
      const norm = (s) => s.replace(/[0-9]+/g, "#");
      const reps = phases.filter((p) => norm(p.path) === want);
      if (!reps.length) return;
      el.append("Zoom the explorer to a repetition: ");
      reps.slice(0, 60).forEach((p, i) => {
        const a = document.createElement("button");
        a.className = "vt-chip"; a.textContent = p.name;
        a.onclick = () => { zoomToEvents(p.begin, p.end + 1); $("explorer").scrollIntoView({ behavior: "smooth" }); };
        el.append(a);
        if (i === 59 && reps.length > 60) el.append(` … ${reps.length - 60} more`);
      });
    });
    // Moments elsewhere in the page (OOMs, what-if failures): a link zooms there.
    document.addEventListener("click", (e) => {
      const a = e.target.closest("[data-event]");
      if (!a) return;
      e.preventDefault();
      const r = Number(a.dataset.event) - first;
      zoomToEvents(Math.max(0, r - 500), Math.min(N, r + 500));
      showCheckpoint(nearestCheckpoint(r));
      $("explorer").scrollIntoView({ behavior: "smooth" });
    });
    window.addEventListener("resize", () => { schedule(); drawSegments(); });
  }

  // What the browser test and a curious reader can call.
  Object.assign(api, {
    first, view, setView, setMode, resetView, zoomToEvents, showCheckpoint, pin,
    X: (r) => X(view.mode, r), R: (x) => R(view.mode, x),
    geometry: () => geom, detail: () => detail,
    allocations: () => A, largest: () => { let best = -1; for (let k = 0; k < (A ? A.n : 0); k++) if (best < 0 || A.size[k] > A.size[best]) best = k; return best; },
    stackOf: (k) => stackText(A.stack[k]),
    siteOf: (k) => D.sites[A.site[k]],
    // Where an allocation's middle is drawn, in the window's coordinates.
    pointOf: (k) => {
      if (!detail || !detail.ok || !detail.verts.has(k)) return null;
      const vs = detail.verts.get(k), i = Math.floor((vs.length - 1) / 2), b = chart.getBoundingClientRect();
      const x = (geom.sx(Math.max(view.x0, vx(vs[i]))) + geom.sx(Math.min(view.x1, vx(vs[i + 1])))) / 2;
      const y = geom.sy(vs[i][2] + A.size[k] / 2);
      return [b.left + x, b.top + y];
    },
    checkpoint: () => checkpoint,
  });

  inflate($("vt-bulk").textContent.trim())
    .then((u8) => {
      if (N === 0) {
        $("vt-loading").textContent = "No event lies inside the window: nothing to draw.";
        api.ready = true;
        return;
      }
      build(readColumns(u8, D.columns));
      wire();
      setMode(view.mode);
      resetView();
      // The allocator's state at the first OOM when there is one, else at
      // the allocated peak.
      const oom = checkpoints.findIndex((c) => c.kinds.includes("oom"));
      const peak = checkpoints.findIndex((c) => c.kinds.includes("allocated_peak"));
      showCheckpoint(oom >= 0 ? oom : peak >= 0 ? peak : checkpoints.length - 1);
      draw();
      $("vt-loading").style.display = "none";
      api.ready = true;
    })
    .catch((e) => {
      api.errors.push(String(e && e.stack || e));
      $("vt-loading").textContent = `The explorer could not load its data: ${e}`;
      throw e;
    });
})();
