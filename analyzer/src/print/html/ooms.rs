//! The out-of-memory section: every failed allocation, and where the limit
//! went at the first fatal ones.

use super::{Stack, waterfall};
use crate::analysis::summary::SummaryReport;
use crate::units;
use askama::Template;

/// The OOMs whose waterfall the page shows (the summary's JSON has all).
const OOM_WATERFALLS: usize = 4;

/// The section's content.
#[derive(Template)]
#[template(path = "ooms.html", config = "src/print/html/askama.toml")]
pub struct Ooms {
    ooms: Vec<Oom>,
    /// The first fatal OOMs: when, what was asked, where the limit went.
    waterfalls: Vec<(String, String, waterfall::Table)>,
}

/// A failed allocation.
struct Oom {
    /// Its event, for the explorer to open at.
    event: u64,
    at: String,
    requested: String,
    /// Under which limit it failed, or how the program survived it.
    limit: String,
    allocated: String,
    reserved: String,
    phase: String,
    stack: Stack,
}

impl Ooms {
    /// The section of a summary.
    pub fn new(s: &SummaryReport) -> Ooms {
        Ooms {
            ooms: s
                .ooms
                .iter()
                .map(|o| Oom {
                    event: o.index,
                    at: units::duration_ns(o.time_ns),
                    requested: units::bytes(o.requested_bytes),
                    limit: if o.survived {
                        "survived: a cuDNN workspace; PyTorch tried the next algorithm".to_string()
                    } else {
                        waterfall::oom_words(o)
                    },
                    allocated: units::bytes(o.allocated_bytes),
                    reserved: units::bytes(o.reserved_bytes),
                    phase: super::phase_or_none(&o.phase).to_string(),
                    stack: Stack::new(&o.site.site, &o.site.frames),
                })
                .collect(),
            waterfalls: s
                .fatal_ooms()
                .take(OOM_WATERFALLS)
                .map(|o| {
                    (
                        units::duration_ns(o.time_ns),
                        units::bytes(o.requested_bytes),
                        waterfall::Table::new(&o.waterfall),
                    )
                })
                .collect(),
        }
    }
}
