//! The report's explorer: a canvas timeline to zoom, pan and hover, the
//! allocator's state at checkpoints, and the fragmentation on the same axis.
//! The drawing is hand-written canvas code (`assets/explorer.js`): the
//! layout of allocations one by one, three x axes mapped through the same
//! knots, and min/max bands are what a charting library would have to be
//! bent into, and the page must load nothing.

use super::data;
use crate::analysis::pauses::XAxis;
use crate::command::report::ReportResult;
use serde_json::json;
use std::fmt::Write as _;

const SCRIPT: &str = include_str!("assets/explorer.js");
/// The explorer's styles, added to the page's.
pub const STYLE: &str = include_str!("assets/explorer.css");

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

/// The explorer section's HTML, with its data and script.
pub fn section(r: &ReportResult) -> String {
    let (mut meta, bulk) = data::encode(&r.explorer);
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
    html.push_str("<div class=\"vt-legend\"><span><i style=\"background:#1d2433\"></i>reserved</span><span><i style=\"background:#0072b2\"></i>allocated</span><span><i class=\"dash\" style=\"border-color:#e69f00\"></i>cached free (reserved, in no block in use)</span><span><i style=\"background:rgba(0,114,178,0.2)\"></i>allocated, not drawn one by one</span><span class=\"muted\">Drag to zoom, wheel to zoom at the cursor, shift-drag to pan, double-click to reset. Click a phase to zoom to it, a moment for the allocator's state.</span></div>");
    html.push_str("<div id=\"vt-categories\" class=\"vt-legend\"></div><div id=\"vt-sites\" class=\"vt-legend\" hidden></div>");
    html.push_str("<p id=\"vt-site\" class=\"vt-site\"></p><p id=\"vt-status\" class=\"muted\"></p><div id=\"vt-pinned\" class=\"vt-pinned\" hidden></div>");
    html.push_str("<h3>The allocator's state</h3><div class=\"vt-toolbar\"><select id=\"vt-checkpoint\" aria-label=\"checkpoint\"></select></div><p id=\"vt-cp-info\"></p>");
    html.push_str("<div class=\"vt-legend\"><span><i style=\"background:#4a78a8\"></i>allocated (coloured as the explorer is)</span><span><i style=\"background:#f0a35e\"></i>freed, waiting for another stream (inactive)</span><span><i style=\"background:#eef0f3;border:1px solid #9aa3b2\"></i>cached free</span></div>");
    html.push_str("<div class=\"vt-wrap\"><canvas id=\"vt-segments\"></canvas><div id=\"vt-seg-tip\" class=\"vt-tip\" hidden></div></div><p id=\"vt-seg-more\" class=\"muted\"></p>");
    html.push_str("<h3>Fragmentation on the same axis</h3><div class=\"vt-wrap\"><canvas id=\"vt-frag\"></canvas></div>");
    html.push_str("<noscript><p class=\"warning\">The explorer needs JavaScript; the static charts below do not.</p></noscript>");
    let _ = write!(
        html,
        "<script type=\"application/json\" id=\"vt-data\">{}</script>\n<script type=\"text/plain\" id=\"vt-bulk\">{bulk}</script>\n<script>{SCRIPT}</script>",
        script_json(&meta)
    );
    html
}
