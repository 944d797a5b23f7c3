//! Waterfalls as HTML: where every byte under the limit was at a moment,
//! as a table with a bar per term and how each figure is known.

use crate::analysis::summary::OomReport;
use crate::analysis::waterfall::{SumsTo, Waterfall};
use crate::print::labels::site_label;
use crate::print::words::waterfall::limit_line;
use crate::units;
use askama::Template;

/// A waterfall as a table: each term, its bytes, how it is known, and a bar
/// of its share of the total; the parts of allocated memory under it; the
/// sum; what lies beside it; the notes.
#[derive(Template)]
#[template(path = "waterfall.html", config = "src/print/html/askama.toml")]
pub struct Table {
    /// The limit and how it is known, or `unknown`.
    limit: String,
    terms: Vec<Term>,
    /// What the terms add up to.
    sums_to: SumsTo,
    /// The total at the precision the limit is named with (`5.37 GiB cap`).
    total: String,
    /// The total in bytes.
    total_bytes: String,
    /// Terms beside the sum (not counted by the cap).
    beside: Vec<Row>,
    notes: Vec<String>,
}

/// A term of the sum, with its bar and the parts it holds.
struct Term {
    row: Row,
    /// Where its bar starts and how wide it is, in percent of the total.
    offset: String,
    share: String,
    /// More about the term (where cached free memory lies).
    detail: String,
    /// The categories of memory under it.
    categories: Vec<Row>,
    /// The sites under it.
    sites: Vec<Row>,
}

/// A line of the table: what, how many bytes, how known.
struct Row {
    name: String,
    bytes: String,
    known: &'static str,
}

impl Table {
    /// The table of `w`.
    pub fn new(w: &Waterfall) -> Table {
        let total = w.total_bytes.max(1) as f64;
        let mut offset = 0.0;
        let terms = w
            .terms
            .iter()
            .map(|term| {
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
                let shown = Term {
                    row: Row {
                        name: term.label().to_string(),
                        bytes: units::bytes(term.bytes),
                        known: term.known.word(),
                    },
                    offset: format!("{offset:.2}"),
                    share: format!("{share:.2}"),
                    detail,
                    categories: term
                        .categories
                        .iter()
                        .map(|part| Row {
                            name: part.name.replace('_', " "),
                            bytes: units::bytes(part.bytes),
                            known: part.known.word(),
                        })
                        .collect(),
                    sites: term
                        .sites
                        .iter()
                        .map(|part| Row {
                            name: site_label(&part.name),
                            bytes: units::bytes(part.bytes),
                            known: part.known.word(),
                        })
                        .collect(),
                };
                offset += share;
                shown
            })
            .collect();
        Table {
            limit: if w.limit_source == "unknown" {
                "unknown".to_string()
            } else {
                crate::print::labels::limit_with_known(
                    &limit_line(w),
                    w.limit_source,
                    w.limit_known.map_or("", |k| k.word()),
                )
            },
            terms,
            sums_to: w.sums_to,
            total: units::capacity(w.total_bytes),
            total_bytes: units::count(w.total_bytes),
            beside: w
                .beside
                .iter()
                .map(|term| Row {
                    name: term.label().to_string(),
                    bytes: units::bytes(term.bytes),
                    known: term.known.word(),
                })
                .collect(),
            notes: crate::print::words::waterfall::notes(w),
        }
    }
}

/// An OOM in words, as the findings tell it: under which limit (the card's
/// free memory only where the card itself was the limit).
pub fn oom_words(o: &OomReport) -> String {
    crate::print::words::waterfall::under_limit(o, "measured")
}
