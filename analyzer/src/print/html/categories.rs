//! The "What fills the GPU" section: allocated memory by category at the
//! peaks and at the end, what dominates the peak, the chart of categories
//! over time, and where the limit went at the allocated peak.

use super::ReportInput;
use super::waterfall;
use crate::analysis::categories::Category;
use crate::print::labels;
use crate::print::printable::printable_cut;
use crate::print::svg::palette;
use crate::units;
use askama::Template;

/// The section's content.
#[derive(Template)]
#[template(path = "categories.html", config = "src/print/html/askama.toml")]
pub struct Categories<'a> {
    /// How the categories are known.
    source: &'static str,
    rows: Vec<Row>,
    /// What dominates the allocated peak, and what lowers it.
    dominant: Option<String>,
    /// The chart of categories over time (SVG).
    chart: &'a str,
    /// Where the limit went at the allocated peak.
    waterfall: Option<waterfall::Table>,
    /// Memory outside the allocator, when the trace samples the device.
    outside: Option<Outside>,
    /// Memory by private pool (CUDA graphs, `MemPool`s), when there are any.
    pools: Option<Pools>,
}

/// The private pools: a line, and a row each.
struct Pools {
    line: String,
    rows: Vec<PoolRow>,
}

/// One private pool's figures (exact).
struct PoolRow {
    id: String,
    made_by: &'static str,
    graphs: String,
    at_peak: String,
    in_use: String,
    free: String,
    own_peak: String,
    at_end: String,
}

/// A category's bytes at the allocated peak, the reserved peak and the end.
struct Row {
    /// Its colour in the charts.
    colour: String,
    label: String,
    bytes: Vec<String>,
    /// How its figures are known.
    basis: &'static str,
}

/// The memory outside the allocator over the run (measured).
struct Outside {
    samples: String,
    at_start: String,
    at_peak: String,
    max: String,
    at_end: String,
}

impl<'a> Categories<'a> {
    /// The section of one report.
    pub fn new(input: &'a ReportInput<'a>) -> Categories<'a> {
        let s = &input.report.summary;
        let c = &s.categories;
        let columns = [&c.at_allocated_peak, &c.at_reserved_peak, &c.at_end];
        // The program's own categories subdivide "other": rows of their
        // own just before it, and "other" keeps the rest.
        let named = |i: usize| -> u64 {
            (c.user.iter())
                .map(|u| [u.at_allocated_peak, u.at_reserved_peak, u.at_end][i])
                .sum()
        };
        let mut rows = Vec::new();
        for category in Category::ALL {
            if category == Category::Other {
                rows.extend(c.user.iter().map(|u| {
                    Row {
                        colour: palette::hex(palette::of_category(Category::Other)),
                        label: format!("{} (your tag)", printable_cut(&u.name, 40)),
                        bytes: [u.at_allocated_peak, u.at_reserved_peak, u.at_end]
                            .map(units::bytes)
                            .to_vec(),
                        basis: "exact",
                    }
                }));
            }
            let shares: Vec<_> = (columns.iter().enumerate())
                .map(|(i, t)| {
                    let mut share = t.get(category);
                    if category == Category::Other {
                        share.bytes = share.bytes.saturating_sub(named(i));
                        share.exact_bytes = share.exact_bytes.saturating_sub(named(i));
                    }
                    share
                })
                .collect();
            if shares.iter().all(|s| s.bytes == 0) {
                continue;
            }
            let bases: Vec<_> = shares
                .iter()
                .filter(|s| s.bytes > 0)
                .map(|s| s.basis())
                .collect();
            rows.push(Row {
                colour: palette::hex(palette::of_category(category)),
                label: category.label().to_string(),
                bytes: shares.iter().map(|s| units::bytes(s.bytes)).collect(),
                basis: labels::category_row_basis(&bases),
            });
        }
        Categories {
            source: labels::category_source(c.source),
            rows,
            dominant: labels::peak_dominant_line(c, s.peak_allocated_bytes),
            chart: &input.charts.categories,
            waterfall: s.waterfall_at_peak.as_ref().map(waterfall::Table::new),
            outside: s.outside_allocator.as_ref().map(|o| Outside {
                samples: units::count(o.samples),
                at_start: units::bytes(o.at_start_bytes),
                at_peak: o.at_peak_bytes.map_or("unknown".to_string(), units::bytes),
                max: units::bytes(o.max_bytes),
                at_end: units::bytes(o.at_end_bytes),
            }),
            pools: s.pools.as_ref().map(|p| Pools {
                line: labels::pools_line(p),
                rows: p
                    .pools
                    .iter()
                    .map(|pool| PoolRow {
                        id: format!("({}, {})", pool.id.0, pool.id.1),
                        made_by: labels::pool_kind(pool.kind),
                        graphs: if pool.followed {
                            units::count(pool.captures as u64)
                        } else {
                            "not recorded".to_string()
                        },
                        at_peak: units::bytes(pool.reserved_at_peak_bytes),
                        in_use: units::bytes(pool.live_at_peak_bytes),
                        free: units::bytes(pool.free_at_peak_bytes()),
                        own_peak: units::bytes(pool.peak_reserved_bytes),
                        at_end: units::bytes(pool.reserved_at_end_bytes),
                    })
                    .collect(),
            }),
        }
    }
}
