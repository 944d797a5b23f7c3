// Human units for the explorer's labels and tooltips.
/* exported units */
const units = (() => {
  const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

  // `512 B`, `1.5 KiB`, `23.4 GiB`.
  function bytes(v) {
    let i = 0;
    v = Math.max(0, v);
    while (v >= 1024 && i < BYTE_UNITS.length - 1) { v /= 1024; i++; }
    return i === 0 ? `${Math.round(v)} B` : `${v.toFixed(1)} ${BYTE_UNITS[i]}`;
  }

  // `850 ns`, `12.5 us`, `3.2 ms`, `1.25 s`.
  function duration(ns) {
    const a = Math.abs(ns);
    if (a < 1e3) return `${Math.round(ns)} ns`;
    if (a < 1e6) return `${(ns / 1e3).toFixed(1)} us`;
    if (a < 1e9) return `${(ns / 1e6).toFixed(1)} ms`;
    return `${(ns / 1e9).toFixed(2)} s`;
  }

  // `12,345,678`.
  const count = (n) => Math.round(n).toLocaleString("en-US");

  // Text for HTML: what would be markup is escaped.
  const escapeHtml = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  // A site or frame shortened from the left, keeping its end readable.
  const shortLeft = (s, n) => (s.length <= n ? s : "…" + s.slice(s.length - n + 1));

  return { BYTE_UNITS, bytes, duration, count, escapeHtml, shortLeft };
})();
