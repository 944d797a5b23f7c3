//! The trace consistency section: whether the trace contradicts itself
//! (frees of no allocation, overlapping segments), by kind, with the first
//! examples.

use crate::analysis::summary::SummaryReport;
use crate::units;
use askama::Template;

/// The examples the section lists at most.
const EXAMPLES: usize = 20;

/// The section's content.
#[derive(Template)]
#[template(path = "consistency.html", config = "src/print/html/askama.toml")]
pub struct Consistency {
    /// How many contradictions, when there are any.
    total: Option<String>,
    /// Each kind, and how many of it.
    kinds: Vec<(&'static str, String)>,
    examples: Vec<Example>,
}

/// A contradiction: which event, when, what, at which address.
struct Example {
    event: String,
    at: String,
    kind: &'static str,
    address: String,
}

impl Consistency {
    /// The section of a summary.
    pub fn new(s: &SummaryReport) -> Consistency {
        let i = &s.inconsistencies;
        Consistency {
            total: (i.total > 0).then(|| units::count(i.total)),
            kinds: i
                .by_kind
                .iter()
                .map(|k| (k.description, units::count(k.count)))
                .collect(),
            examples: i
                .examples
                .iter()
                .take(EXAMPLES)
                .map(|e| Example {
                    event: units::count(e.index),
                    at: units::duration_ns(e.time_ns),
                    kind: e.kind.describe(),
                    address: format!("{:#x}", e.addr),
                })
                .collect(),
        }
    }
}
