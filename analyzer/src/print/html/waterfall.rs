//! Waterfalls as HTML: where every byte under the limit was at a moment,
//! as a table with a bar per term and how each figure is known.

use crate::analysis::summary::OomReport;
use crate::analysis::waterfall::{SumsTo, Waterfall};
use crate::print::labels::site_label;
use crate::print::svg::escape;
use crate::units;
use std::fmt::Write as _;

/// A waterfall as a table: each term, its bytes, how it is known, and a bar
/// of its share of the total; the parts of allocated memory under it; the
/// sum; what lies beside it; the notes.
pub fn table(w: &Waterfall) -> String {
    let mut html = String::new();
    let limit = if w.limit_source == "unknown" {
        "unknown".to_string()
    } else {
        format!(
            "{} ({})",
            escape(&w.limit_line),
            w.limit_known.map_or("", |k| k.word())
        )
    };
    let _ = write!(
        html,
        "<p>Limit: {limit}</p><table class=\"vt-waterfall\"><tr><th>where</th><th class=\"num\">bytes</th><th>known</th><th>share</th><th></th></tr>"
    );
    let total = w.total_bytes.max(1) as f64;
    let mut offset = 0.0;
    for term in &w.terms {
        let share = term.bytes as f64 / total * 100.0;
        let detail = match term.name {
            "cached_in_used_segments" => format!(
                "in {} of the {} segments holding live blocks; largest free block {}{}",
                units::count(w.fragmentation.segments_with_free),
                units::count(w.fragmentation.segments_in_use),
                units::bytes(w.fragmentation.largest_free_block),
                w.fragmentation
                    .requested_bytes
                    .map(|r| format!("; asked for {}", units::bytes(r)))
                    .unwrap_or_default()
            ),
            _ => String::new(),
        };
        let _ = write!(
            html,
            "<tr><td>{}</td><td class=\"num\">{}</td><td>{}</td><td style=\"width:30%\"><div style=\"margin-left:{offset:.2}%;width:{share:.2}%;min-width:1px;height:10px;background:#5b7db1\"></div></td><td>{}</td></tr>",
            escape(term.label()),
            units::bytes(term.bytes),
            term.known.word(),
            escape(&detail)
        );
        offset += share;
        for part in &term.categories {
            let _ = write!(
                html,
                "<tr><td>&nbsp;&nbsp;{}</td><td class=\"num\">{}</td><td>{}</td><td></td><td></td></tr>",
                escape(&part.name.replace('_', " ")),
                units::bytes(part.bytes),
                part.known.word()
            );
        }
        for part in &term.sites {
            let _ = write!(
                html,
                "<tr><td>&nbsp;&nbsp;at <code>{}</code></td><td class=\"num\">{}</td><td>{}</td><td></td><td></td></tr>",
                escape(&site_label(&part.name)),
                units::bytes(part.bytes),
                part.known.word()
            );
        }
    }
    let sum = match w.sums_to {
        SumsTo::Limit => "= the limit",
        SumsTo::CardTotal => "= the card's total",
        SumsTo::Reserved => "= reserved (the limit is unknown)",
    };
    let _ = write!(
        html,
        "<tr><th>{sum}</th><th class=\"num\">{}</th><th></th><th></th><th>{} bytes</th></tr>",
        // At the precision the limit is named with (`5.37 GiB cap`).
        units::capacity(w.total_bytes),
        units::count(w.total_bytes)
    );
    for term in &w.beside {
        let _ = write!(
            html,
            "<tr><td>beside: {}</td><td class=\"num\">{}</td><td>{}</td><td></td><td>not counted by the cap: it bounds reserved memory only</td></tr>",
            escape(term.label()),
            units::bytes(term.bytes),
            term.known.word()
        );
    }
    html.push_str("</table>");
    for note in &w.notes {
        let _ = write!(html, "<p class=\"note\">{}</p>", escape(note));
    }
    html
}

/// An OOM in words, as the findings tell it: under which limit (the card's
/// free memory only where the card itself was the limit).
pub fn oom_words(o: &OomReport) -> String {
    let w = &o.waterfall;
    match w.limit_source {
        "cap" | "inferred_cap" => format!("under the {}", escape(&w.limit_line)),
        "card" => format!(
            "on {}, with {} free on the device (measured)",
            escape(&w.limit_line),
            units::bytes(o.device_free_bytes)
        ),
        _ => "(the limit is unknown)".to_string(),
    }
}
