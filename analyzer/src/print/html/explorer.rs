//! The report's explorer: a canvas timeline to zoom, pan and hover, the
//! allocator's state at checkpoints, and the fragmentation on the same axis.
//! The drawing is hand-written canvas code (`assets/explorer/`): the
//! layout of allocations one by one, three x axes mapped through the same
//! knots, and min/max bands are what a charting library would have to be
//! bent into, and the page must load nothing.
//!
//! The script is plain ES2020 in one file per job, put together here with
//! no build step: [`SCRIPT_PARTS`], in that order, inside one function.
//! Each part but the last is one `const` namespace object made by an
//! immediately invoked function (`const axis = (() => { ...; return {...};
//! })();`), which names the parts it uses in a `/* global */` line; the
//! last, `interact.js`, runs the page. Not ES modules: a module script
//! cannot import from a page opened as a file without a server or a
//! bundler, and the page must be one file that loads nothing. The outer
//! function keeps the names off the page's global scope (the flame graph
//! has a script of its own). The pure parts (units, decode, axis, model,
//! layout) run in Node too: `assets/explorer/tests` loads them the same
//! way and tests them with `node --test`.
//!
//! What the script draws in colour comes from the charts' palette
//! ([`palette`]) through the data, so a site or a category has the same
//! colour here as in the static charts; the knots of the x axes are
//! computed on this side too ([`data`]).

use super::data;
use crate::analysis::pauses::XAxis;
use crate::command::report::ReportResult;
use crate::print::svg::palette::{self, Palette};
use serde_json::json;
use std::fmt::Write as _;

/// The explorer's script, part by part, each after those it uses.
const SCRIPT_PARTS: [(&str, &str); 8] = [
    ("units.js", include_str!("assets/explorer/units.js")),
    ("decode.js", include_str!("assets/explorer/decode.js")),
    ("axis.js", include_str!("assets/explorer/axis.js")),
    ("model.js", include_str!("assets/explorer/model.js")),
    ("layout.js", include_str!("assets/explorer/layout.js")),
    ("describe.js", include_str!("assets/explorer/describe.js")),
    ("draw.js", include_str!("assets/explorer/draw.js")),
    ("interact.js", include_str!("assets/explorer/interact.js")),
];

/// The explorer's styles, added to the page's.
pub const STYLE: &str = include_str!("assets/explorer.css");

/// The script of the page: the parts in order, in one function.
fn script() -> String {
    let mut script = String::from("(() => {\n\"use strict\";\n");
    for (name, part) in SCRIPT_PARTS {
        let _ = writeln!(script, "// ---- {name} ----\n{part}");
    }
    script.push_str("})();");
    script
}

/// JSON inside a `<script>` element: `</` would end it. Its strings (names
/// from the input) show their control characters as escapes, as the rest
/// of the page does ([`printable`](crate::print::printable)).
fn script_json(value: &serde_json::Value) -> String {
    fn shown(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::String(s) => {
                if let std::borrow::Cow::Owned(t) = crate::print::printable(s) {
                    *s = t;
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(shown),
            serde_json::Value::Object(fields) => fields.values_mut().for_each(shown),
            _ => {}
        }
    }
    let mut value = value.clone();
    shown(&mut value);
    value.to_string().replace("</", "<\\/")
}

/// The explorer section's HTML, with its data and script; its sites take
/// their colours from `palette`, as the page's charts left it, so a site keeps
/// its colour between the charts and the explorer.
pub fn section(r: &ReportResult, palette: &mut Palette) -> String {
    let (mut meta, bulk) = data::encode(&r.explorer, palette);
    let start = r.explorer.start_ns;
    let buckets = &r.fragmentation.buckets;
    meta["default_axis"] = json!(r.default_axis);
    meta["fragmentation"] = json!({
        "start": buckets.iter().map(|b| b.start_ns.saturating_sub(start)).collect::<Vec<_>>(),
        "end": buckets.iter().map(|b| b.end_ns.saturating_sub(start)).collect::<Vec<_>>(),
        "cached": buckets.iter().map(|b| b.cached_free_bytes).collect::<Vec<_>>(),
        "external": buckets.iter().map(|b| (b.external_fragmentation * 1000.0).round() / 1000.0).collect::<Vec<_>>(),
    });
    let axis_button = |axis: XAxis, label: &str| {
        let name = match axis {
            XAxis::Time => "time",
            XAxis::Events => "events",
            XAxis::Busy => "busy",
        };
        format!(
            "<button data-axis=\"{name}\"{}>{label}</button>",
            if axis == r.default_axis {
                " class=\"on\""
            } else {
                ""
            }
        )
    };
    let mut html = String::new();
    let _ = write!(
        html,
        "<div class=\"vt-toolbar\"><span class=\"muted\">x axis</span> {}{}{} <button id=\"vt-reset\">reset zoom</button> <label><input type=\"checkbox\" id=\"vt-detail\" checked> allocations one by one</label> <span class=\"muted\">colour by</span> <button data-colour=\"category\" class=\"on\">what it holds</button><button data-colour=\"site\">site</button> <span id=\"vt-range\" class=\"muted\"></span></div>",
        axis_button(XAxis::Busy, "busy time"),
        axis_button(XAxis::Time, "time"),
        axis_button(XAxis::Events, "events"),
    );
    html.push_str(
        "<div class=\"vt-wrap\"><canvas id=\"vt-chart\" tabindex=\"0\"></canvas><div id=\"vt-tip\" class=\"vt-tip\" hidden></div><div id=\"vt-loading\" class=\"vt-loading\">Loading the explorer…</div></div>",
    );
    let hex = palette::hex;
    let allocated = palette::ALLOCATED;
    let _ = write!(
        html,
        "<div class=\"vt-legend\"><span><i style=\"background:{}\"></i>reserved</span><span><i style=\"background:{}\"></i>allocated</span><span><i class=\"dash\" style=\"border-color:{}\"></i>cached free (reserved, in no block in use)</span><span><i style=\"background:rgba({},{},{},0.2)\"></i>allocated, not drawn one by one</span><span class=\"muted\">Drag to zoom, wheel to zoom at the cursor, shift-drag to pan, double-click to reset. Click a phase to zoom to it, a moment for the allocator's state.</span></div>",
        hex(palette::RESERVED),
        hex(allocated),
        hex(palette::CACHED_FREE),
        allocated.0,
        allocated.1,
        allocated.2,
    );
    html.push_str("<div id=\"vt-categories\" class=\"vt-legend\"></div><div id=\"vt-sites\" class=\"vt-legend\" hidden></div>");
    html.push_str("<p id=\"vt-site\" class=\"vt-site\"></p><p id=\"vt-status\" class=\"muted\"></p><div id=\"vt-pinned\" class=\"vt-pinned\" hidden></div>");
    html.push_str("<h3>The allocator's state</h3><div class=\"vt-toolbar\"><select id=\"vt-checkpoint\" aria-label=\"checkpoint\"></select></div><p id=\"vt-cp-info\"></p>");
    let _ = write!(
        html,
        "<div class=\"vt-legend\"><span><i style=\"background:{}\"></i>allocated (coloured as the explorer is)</span><span><i style=\"background:{}\"></i>freed, waiting for another stream (inactive)</span><span><i style=\"background:{};border:1px solid #9aa3b2\"></i>cached free</span></div>",
        hex(palette::BLOCK_IN_USE),
        hex(palette::PENDING_FREE),
        hex(palette::SEGMENT_FREE),
    );
    html.push_str("<div class=\"vt-wrap\"><canvas id=\"vt-segments\"></canvas><div id=\"vt-seg-tip\" class=\"vt-tip\" hidden></div></div><p id=\"vt-seg-more\" class=\"muted\"></p>");
    html.push_str("<h3>Fragmentation on the same axis</h3><div class=\"vt-wrap\"><canvas id=\"vt-frag\"></canvas></div>");
    html.push_str("<noscript><p class=\"warning\">The explorer needs JavaScript; the static charts below do not.</p></noscript>");
    let _ = write!(
        html,
        "<script type=\"application/json\" id=\"vt-data\">{}</script>\n<script type=\"text/plain\" id=\"vt-bulk\">{bulk}</script>\n<script>{}</script>",
        script_json(&meta),
        script()
    );
    html
}
