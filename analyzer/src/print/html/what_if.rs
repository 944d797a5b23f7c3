//! The what-if section: the recorded settings simulated at a range of
//! capacities, a slider to pick one, and a table of them all.

use crate::simulate::what_if::WhatIf as Simulated;
use crate::units;
use askama::Template;

/// The section's content.
#[derive(Template)]
#[template(path = "what_if.html", config = "src/print/html/askama.toml")]
pub struct WhatIf<'a> {
    /// The allocator settings simulated (empty: PyTorch's defaults).
    alloc_conf: &'a str,
    /// Whether they are the recorded ones (else they could not be read).
    recorded_settings: bool,
    /// What each device keeps off the allocator, and for what.
    reserve: String,
    reserve_covers: &'a str,
    /// The smallest device that fits, and the reserved peak on one that
    /// never runs out.
    min_capacity: String,
    unlimited_peak_reserved: String,
    /// The slider's last position, and where it starts (the smallest fit).
    last: usize,
    start: usize,
    points: Vec<Point>,
}

/// A device size simulated, and how the run went on it.
struct Point {
    capacity: String,
    smallest_that_fits: bool,
    recorded_device: bool,
    peak_reserved: String,
    peak_allocated: String,
    /// Where it first ran out of memory, when it did.
    first_oom: Option<Oom>,
}

/// The first out-of-memory error on a device simulated.
struct Oom {
    event: u64,
    at: String,
    requested: String,
    reserved: String,
}

impl<'a> WhatIf<'a> {
    /// The section of a what-if simulation.
    pub fn new(w: &'a Simulated) -> WhatIf<'a> {
        WhatIf {
            alloc_conf: &w.alloc_conf,
            recorded_settings: w.recorded_settings,
            reserve: units::bytes(w.reserve.bytes),
            reserve_covers: &w.reserve.covers,
            min_capacity: units::bytes(w.min_capacity_bytes),
            unlimited_peak_reserved: units::bytes(w.unlimited_peak_reserved_bytes),
            last: w.points.len().saturating_sub(1),
            start: w
                .points
                .iter()
                .position(|p| p.capacity_bytes == w.min_capacity_bytes)
                .unwrap_or(0),
            points: w
                .points
                .iter()
                .map(|p| Point {
                    capacity: units::bytes(p.capacity_bytes),
                    smallest_that_fits: p.capacity_bytes == w.min_capacity_bytes,
                    recorded_device: Some(p.capacity_bytes) == w.device_bytes,
                    peak_reserved: units::bytes(p.peak_reserved_bytes),
                    peak_allocated: units::bytes(p.peak_allocated_bytes),
                    first_oom: p.first_oom.as_ref().map(|o| Oom {
                        event: o.event_index,
                        at: units::duration_ns(o.time_ns),
                        requested: units::bytes(o.requested_bytes),
                        reserved: units::bytes(o.reserved_bytes),
                    }),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::WhatIf;
    use crate::simulate::what_if::{WhatIf as Simulated, WhatIfOom, WhatIfPoint};
    use crate::simulate::{Reserve, ReserveSource};
    use askama::Template;

    const GIB: u64 = 1 << 30;

    fn simulated(alloc_conf: &str) -> Simulated {
        let point = |capacity_bytes, first_oom| WhatIfPoint {
            capacity_bytes,
            peak_reserved_bytes: GIB,
            peak_allocated_bytes: GIB / 2,
            first_oom,
        };
        Simulated {
            alloc_conf: alloc_conf.to_string(),
            recorded_settings: true,
            unlimited_peak_reserved_bytes: GIB,
            min_capacity_bytes: 2 * GIB,
            reserve: Reserve {
                bytes: GIB / 2,
                stated: false,
                nccl: false,
                covers: "for the CUDA context".to_string(),
                source: ReserveSource::Estimated,
            },
            device_bytes: Some(4 * GIB),
            points: vec![
                point(
                    GIB,
                    Some(WhatIfOom {
                        event_index: 42,
                        time_ns: 1_000_000,
                        requested_bytes: GIB,
                        reserved_bytes: GIB / 2,
                    }),
                ),
                point(2 * GIB, None),
                point(4 * GIB, None),
            ],
        }
    }

    #[test]
    fn the_settings_are_escaped_and_the_slider_starts_at_the_smallest_fit() {
        let w = simulated("max_split_size_mb:<128>&x");
        let html = WhatIf::new(&w).render().unwrap();
        assert!(
            html.contains("with <code>max_split_size_mb:&lt;128&gt;&amp;x</code> (as recorded)")
        );
        assert!(html.contains(r#"min="0" max="2" value="1""#), "{html}");
        assert!(html.contains("2.0 GiB (smallest that fits)</td>"), "{html}");
        assert!(
            html.contains("4.0 GiB (the recorded device)</td>"),
            "{html}"
        );
        assert!(html.contains(r##"at <a href="#explorer" data-event="42">"##));
        assert_eq!(html.matches("<td>fits</td>").count(), 2);
    }

    #[test]
    fn default_settings_are_named() {
        let w = simulated("");
        let html = WhatIf::new(&w).render().unwrap();
        assert!(html.contains("with PyTorch's default settings (as recorded) on devices"));
    }
}
