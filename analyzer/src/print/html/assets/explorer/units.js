// Human units as the rest of the report writes them: each function mirrors
// its namesake in analyzer/src/units.rs exactly (the tests compare them on
// a table the Rust side wrote), so a size or a duration reads alike in the
// explorer and in the page around it.
/* exported units */
const units = (() => {
  const BYTE_UNITS = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

  // `x` with `digits` decimals, rounded as Rust's `{:.N}` rounds: to the
  // nearest, ties (exact in binary, as 1.25 is) to the even digit, where
  // JavaScript's toFixed rounds them up.
  function fixed(x, digits) {
    const rounded = x.toFixed(digits);
    if (x < 0 || !Number.isFinite(x)) return rounded;
    // toFixed writes up to 100 decimals of the exact binary value: enough
    // to tell a tie from a near one for every value the page formats.
    const exact = x.toFixed(Math.min(100, digits + 60));
    const point = exact.indexOf(".");
    const tail = point < 0 ? "" : exact.slice(point + 1 + digits);
    if (!/^50*$/.test(tail)) return rounded;
    const kept = digits === 0 ? exact.slice(0, point) : exact.slice(0, point + 1 + digits);
    const last = kept.charCodeAt(kept.length - 1) - 48;
    return last % 2 === 0 ? kept : rounded;
  }

  // units::bytes: `512 B`, `1.5 KiB`, `23.4 GiB` (a fraction of a byte,
  // or less than none, is rounded to a whole byte first).
  function bytes(n) {
    n = Math.max(0, Math.round(n));
    if (n < 1024) return `${n} B`;
    let value = n / 1024, unit = 0;
    while (value >= 1024 && unit + 1 < BYTE_UNITS.length) { value /= 1024; unit++; }
    return `${fixed(value, 1)} ${BYTE_UNITS[unit]}`;
  }

  // units::duration_ns: `850 ns`, `12.5 us`, `3.20 ms`, `1.25 s`, `2m 05s`.
  function duration(ns) {
    ns = Math.max(0, Math.round(ns));
    if (ns < 1e3) return `${ns} ns`;
    if (ns < 1e6) return `${fixed(ns / 1e3, 1)} us`;
    if (ns < 1e9) return `${fixed(ns / 1e6, 2)} ms`;
    if (ns < 60e9) return `${fixed(ns / 1e9, 2)} s`;
    const s = Math.floor(ns / 1e9);
    const two = (v) => String(v).padStart(2, "0");
    return s < 3600 ? `${Math.floor(s / 60)}m ${two(s % 60)}s` : `${Math.floor(s / 3600)}h ${two(Math.floor((s % 3600) / 60))}m`;
  }

  // units::count: `12,345,678` (rounded to a whole number first).
  function count(n) {
    const digits = String(Math.max(0, Math.round(n)));
    let out = "";
    for (let i = 0; i < digits.length; i++) {
      if (i > 0 && (digits.length - i) % 3 === 0) out += ",";
      out += digits[i];
    }
    return out;
  }

  // Text for HTML: what would be markup is escaped.
  const escapeHtml = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  // A site or frame shortened from the left, keeping its end readable.
  const shortLeft = (s, n) => (s.length <= n ? s : "…" + s.slice(s.length - n + 1));

  return { fixed, bytes, duration, count, escapeHtml, shortLeft };
})();
