//! The page around the sections: its head and styles, the header line, the
//! navigation, the warnings, every section in its place, the footer.

use super::{
    ReportInput, categories, compare, consistency, explorer, findings, fixes, flame, fragmentation,
    leaks, ooms, ranks, sites, what_if,
};
use crate::analysis::summary::SummaryReport;
use crate::units;
use askama::Template;
use vramtrace_format::Header;

/// The report's own styles (the explorer's follow them).
const STYLE: &str = include_str!("assets/report.css");

/// The whole page.
#[derive(Template)]
#[template(path = "page.html", config = "src/print/html/askama.toml")]
pub struct Page<'a> {
    /// The trace's file name.
    name: &'a str,
    /// When, where and by what the trace was recorded, and its span.
    meta: String,
    style: &'static str,
    explorer_style: &'static str,
    /// Warnings met while reading, above every section.
    warnings: &'a [String],
    comparison: Option<compare::Comparison<'a>>,
    ranks: Option<ranks::Ranks<'a>>,
    devices: Option<ranks::Devices>,
    findings: findings::Findings,
    categories: categories::Categories<'a>,
    /// The explorer, as HTML with its data and script.
    explorer: &'a str,
    /// The static chart of memory by site (SVG), under the explorer.
    timeline: &'a str,
    sites: sites::Sites,
    flame: flame::Flame,
    leaks: leaks::Leaks<'a>,
    fragmentation: fragmentation::Fragmentation<'a>,
    what_if: Option<what_if::WhatIf<'a>>,
    /// Why there is no what-if section, when one was asked for.
    what_if_left_out: Option<String>,
    ooms: Option<ooms::Ooms>,
    fixes: Option<fixes::Fixes<'a>>,
    consistency: consistency::Consistency,
    /// The version of vramtrace that made the page.
    version: &'static str,
}

impl<'a> Page<'a> {
    /// The page of one report.
    pub fn new(input: &'a ReportInput<'a>) -> Page<'a> {
        let r = input.report;
        let s = &r.summary;
        Page {
            name: &r.name,
            meta: header_line(&r.header, s),
            style: STYLE,
            explorer_style: explorer::STYLE,
            warnings: &input.warnings,
            comparison: r
                .comparison
                .as_ref()
                .zip(input.charts.comparison.as_deref())
                .map(|(comparison, chart)| {
                    compare::Comparison::new(comparison, chart, input.top, r.fits_up_to.as_ref())
                }),
            ranks: r.ranks.as_ref().map(|ranks| ranks::Ranks::new(r, ranks)),
            devices: (!r.devices.is_empty()).then(|| ranks::Devices::new(r)),
            findings: findings::Findings::new(input),
            categories: categories::Categories::new(input),
            explorer: &input.explorer,
            timeline: &input.charts.timeline,
            sites: sites::Sites::new(s),
            flame: flame::Flame::new(input),
            leaks: leaks::Leaks::new(input),
            fragmentation: fragmentation::Fragmentation::new(input),
            what_if: r.what_if.as_ref().map(what_if::WhatIf::new),
            what_if_left_out: r
                .what_if_left_out
                .map(|l| crate::print::words::report::left_out(&l)),
            ooms: (s.oom_count > 0).then(|| ooms::Ooms::new(s)),
            fixes: r.fixes.as_ref().map(fixes::Fixes::new),
            consistency: consistency::Consistency::new(s),
            version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// The header's line: when and on what the trace was recorded, by which
/// process, how many events over how long, and by what.
fn header_line(header: &Header, s: &SummaryReport) -> String {
    let mut parts = Vec::new();
    if header.start_unix_ns > 0 {
        parts.push(units::utc_datetime(header.start_unix_ns));
    }
    for d in &header.devices {
        if d.total_memory > 0 {
            parts.push(format!("{} ({})", d.name, units::bytes(d.total_memory)));
        } else {
            parts.push(d.name.clone());
        }
    }
    if !header.process.hostname.is_empty() {
        parts.push(format!(
            "{} pid {}",
            header.process.hostname, header.process.pid
        ));
    }
    parts.push(format!(
        "{} events over {}",
        units::count(s.events),
        units::duration_ns(s.duration_ns)
    ));
    parts.push(if header.producer == crate::snapshot::IMPORTED_BY {
        // No process of ours recorded it: PyTorch did.
        format!(
            "a PyTorch memory snapshot, read by vramtrace {}",
            header.producer_version
        )
    } else {
        format!(
            "recorded by {} {}",
            header.producer, header.producer_version
        )
    });
    parts.join(" · ")
}
