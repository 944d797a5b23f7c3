//! The "Top sites at the peak" section: the sites holding the most memory
//! at the allocated peak, each row highlighting its allocations in the
//! explorer when clicked.

use super::Stack;
use crate::analysis::summary::SummaryReport;
use crate::print::labels;
use crate::units;
use askama::Template;

/// The section's content.
#[derive(Template)]
#[template(path = "sites.html", config = "src/print/html/askama.toml")]
pub struct Sites {
    rows: Vec<Row>,
    /// Why a site shown has no stack, when one has none.
    no_stack_note: Option<&'static str>,
}

/// A site and what it holds at the peak.
struct Row {
    /// The site's name, as the explorer knows it.
    key: String,
    bytes: String,
    blocks: String,
    share: String,
    /// What its memory holds, when known.
    holds: &'static str,
    stack: Stack,
}

impl Sites {
    /// The section of a summary.
    pub fn new(s: &SummaryReport) -> Sites {
        Sites {
            rows: s
                .top_sites_at_peak
                .iter()
                .map(|site| Row {
                    key: site.site.site.clone(),
                    bytes: units::bytes(site.bytes),
                    blocks: units::count(site.count),
                    share: units::percent(site.share),
                    holds: site.category.map_or("", |c| c.label()),
                    stack: Stack::new(&site.site.site, &site.site.frames),
                })
                .collect(),
            no_stack_note: labels::lists_no_stack(
                s.top_sites_at_peak.iter().map(|s| s.site.site.as_str()),
            )
            .then_some(labels::NO_STACK_NOTE),
        }
    }
}
