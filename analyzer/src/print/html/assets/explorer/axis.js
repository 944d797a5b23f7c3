// The x axis: where an event goes on the chosen axis (time, event index or
// busy time), through the knots the Rust side computed (data.rs), and the
// round steps and labels of the axes' ticks.
/* global units */
/* exported axis */
const axis = (() => {
  // The mapping between events (a continuous index from the window's first
  // event) and places on each axis. `knots` holds, for each knot, its event
  // `index` and its place on every axis (`time`, `busy`), in order;
  // `idle` is the data's idle gaps, which busy time shrinks to their
  // threshold.
  function mapping(knots, idle) {
    const index = knots.index;
    const places = { events: index, time: knots.time, busy: knots.busy };
    // What busy time cut from the idle gaps up to an event.
    const cutBefore = [];
    let cut = 0;
    for (let k = 0; k < idle.index.length; k++) { cut += idle.gap[k] - idle.threshold; cutBefore.push(cut); }
    function collapsed(event) {
      let lo = 0, hi = idle.index.length;
      while (lo < hi) { const mid = (lo + hi) >> 1; if (idle.index[mid] <= event) lo = mid + 1; else hi = mid; }
      return lo === 0 ? 0 : cutBefore[lo - 1];
    }
    // The place of an event, in proportion between the knots around it;
    // before the first, on the first stretch's slope.
    function placeOf(mode, event) {
      const place = places[mode];
      if (event <= 0) return place[0] + (event * (place[1] - place[0] || 1)) / ((index[1] - index[0]) || 1);
      let lo = 0, hi = index.length - 1;
      if (event >= index[hi]) return place[hi];
      while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (index[mid] <= event) lo = mid; else hi = mid; }
      const f = (event - index[lo]) / (index[hi] - index[lo] || 1);
      return place[lo] + f * (place[hi] - place[lo]);
    }
    // The event at a place: the inverse of placeOf.
    function eventAt(mode, x) {
      const place = places[mode];
      let lo = 0, hi = place.length - 1;
      if (x <= place[0]) return 0;
      if (x >= place[hi]) return index[hi];
      while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (place[mid] <= x) lo = mid; else hi = mid; }
      const f = (x - place[lo]) / (place[hi] - place[lo] || 1);
      return index[lo] + f * (index[hi] - index[lo]);
    }
    // The place of an event whose exact time is known.
    function placeOfTimed(mode, event, time) {
      if (mode === "events") return event;
      if (mode === "time") return time;
      return time - collapsed(event);
    }
    return { collapsed, placeOf, eventAt, placeOfTimed, events: index[index.length - 1] };
  }

  // The smallest of `bases` times a power of ten that is at least `raw`.
  function niceStep(raw, bases) {
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const b of bases) if (b * p >= raw) return b * p;
    return 10 * p;
  }

  // The step of a bytes axis up to `max`: about five ticks, round in the
  // unit the labels show (byteTicks': the largest unit of `max`), so a
  // 1.6 GiB axis reads 0.5, 1.0, 1.5 GiB, not 1000 MiB steps shown as
  // 0.977, 1.953 GiB.
  function byteStep(max) {
    const raw = max / 5;
    let unit = 1;
    while (max / unit >= 1024 && unit < 1024 ** 4) unit *= 1024;
    return niceStep(raw / unit, [1, 2, 2.5, 5]) * unit;
  }

  // The units of a bytes axis, as the static charts' (svg::ByteScale).
  const AXIS_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

  // The labels of a bytes axis up to `max`, all in the unit of the largest
  // (0.5 GiB, 1 GiB, not 512 MiB, 1 GiB), with the decimals `step` needs.
  function byteTicks(max, step) {
    const names = AXIS_UNITS;
    let i = 0, divisor = 1;
    while (max / divisor >= 1024 && i < names.length - 1) { divisor *= 1024; i++; }
    const inUnit = step / divisor;
    let decimals = 0;
    while (decimals < 3 && Math.abs(inUnit * 10 ** decimals - Math.round(inUnit * 10 ** decimals)) > 1e-6) decimals++;
    return (v) => (v === 0 ? "0" : `${(v / divisor).toFixed(decimals)} ${names[i]}`);
  }

  // The x axis's ticks between `x0` and `x1` (places on `mode`'s axis),
  // about one every 120 pixels of `width`, on round values of what the
  // labels read: `offset` is added to a place to get that value (the
  // window's first event, or the trace's start time). Each tick is
  // [place, label].
  function xTicks(mode, x0, x1, width, offset) {
    const step = niceStep((x1 - x0) / Math.max(2, width / 120), [1, 2, 2.5, 5]);
    const label = mode === "events" ? units.count : (v) => (v === 0 ? "0" : units.duration(v));
    const ticks = [];
    for (let v = Math.ceil((x0 + offset) / step) * step; v <= x1 + offset; v += step) ticks.push([v - offset, label(v)]);
    return ticks;
  }

  // What each axis measures.
  const DESCRIPTIONS = { events: "event index", time: "time", busy: "busy time (idle gaps cut)" };

  return { mapping, niceStep, byteStep, byteTicks, xTicks, DESCRIPTIONS };
})();
