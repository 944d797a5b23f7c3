//! The fragmentation section: reserved against allocated memory over time,
//! the allocator's state at the allocated peak, and when the most memory
//! was cached but free.

use super::ReportInput;
use crate::units;
use askama::Template;

/// The section's content.
#[derive(Template)]
#[template(path = "fragmentation.html", config = "src/print/html/askama.toml")]
pub struct Fragmentation<'a> {
    /// The chart over time (SVG).
    chart: &'a str,
    segments: String,
    reserved: String,
    cached_free: String,
    /// The largest free block and the external fragmentation it makes,
    /// when any memory was free.
    largest_free_block: Option<(String, String)>,
    internal: String,
    /// The most memory cached but free, and when.
    worst: Option<(String, String)>,
}

impl<'a> Fragmentation<'a> {
    /// The section of one report.
    pub fn new(input: &'a ReportInput<'a>) -> Fragmentation<'a> {
        let at_peak = &input.report.summary.at_peak;
        let f = &input.report.fragmentation;
        Fragmentation {
            chart: &input.charts.fragmentation,
            segments: units::count(at_peak.segments),
            reserved: units::bytes(at_peak.reserved_bytes),
            cached_free: units::bytes(at_peak.cached_free_bytes),
            largest_free_block: at_peak.largest_free_block.map(|b| {
                (
                    units::bytes(b),
                    units::percent(at_peak.external_fragmentation.unwrap_or(0.0)),
                )
            }),
            internal: units::bytes(at_peak.internal_fragmentation_bytes),
            worst: f.worst_cached_free.and_then(|i| f.buckets.get(i)).map(|b| {
                (
                    units::bytes(b.cached_free_bytes),
                    units::duration_ns(b.start_ns),
                )
            }),
        }
    }
}
