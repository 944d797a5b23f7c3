//! The fixes-tried section: where the recorded run ran out of memory, the
//! fixes whose replay got past the failure, ranked, and those that did not.

use super::escape;
use crate::print::labels::site_label;
use crate::simulate::fixes::FixesTried;
use crate::units;
use std::fmt::Write as _;

/// The section's HTML.
pub fn section(f: &FixesTried) -> String {
    let mut html = format!(
        "<p>The run was replayed through PyTorch's caching allocator policy under its {} limit, once per candidate fix, from its start to the failure at <a href=\"#explorer\" data-event=\"{}\">event {}</a> and on. Only fixes whose replay got past it are offered. <i>exact</i>: the replay is the program with the fix; <i>bound</i>: the most the fix could do; <i>estimate</i>: the replay assumes sizes the trace does not give.</p>",
        units::capacity(f.limit_bytes),
        f.event_index,
        units::count(f.event_index)
    );
    if f.passed.is_empty() {
        let more = f.needs_more_bytes.map_or_else(String::new, |b| {
            format!(
                ": it needs <b>{}</b> more (exact, by replay)",
                units::bytes(b)
            )
        });
        let _ = write!(html, "<p><b>Nothing tried gets past it</b>{more}.</p>");
    } else {
        html.push_str("<table><tr><th class=\"num\">#</th><th>fix</th><th class=\"num\">frees</th><th class=\"num\">left free</th><th>basis</th><th>why</th></tr>");
        for (i, fix) in f.passed.iter().enumerate() {
            let _ = write!(
                html,
                "<tr><td class=\"num\">{}</td><td><code>{}</code></td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
                i + 1,
                escape(&fix.change_with(site_label)),
                fix.frees_bytes.map_or_else(|| "-".into(), units::bytes),
                fix.headroom_bytes.map_or_else(|| "-".into(), units::bytes),
                fix.basis.word(),
                escape(&fix.detail)
            );
        }
        html.push_str("</table><p class=\"muted\">frees: the memory the allocator holds less, at the failing request, than it would have held with the request granted; left free: free memory under the limit right after it.</p>");
    }
    if !f.failed.is_empty() {
        html.push_str("<p class=\"muted\">Tried, and still out of memory: ");
        let names: Vec<String> = f
            .failed
            .iter()
            .map(|x| format!("<code>{}</code>", escape(&x.change_with(site_label))))
            .collect();
        html.push_str(&names.join("; "));
        html.push_str(".</p>");
    }
    html
}
