//! Small multiples of a rank set: each rank's memory over time in a grid of
//! small charts sharing one time axis and one memory scale, so that a rank
//! out of step with the others shows at a glance.

use super::{FONT, WIDTH, escape, time_label};
use crate::command::ranks::RankTimeline;
use crate::units;
use std::fmt::Write as _;

const ALLOCATED: &str = "#0072b2";
const RESERVED: &str = "#9ab8d1";

/// The grid of small charts, one per rank and device (rank order), on one
/// axis: time since each trace's start, 0 to the longest; bytes, 0 to the
/// highest reserved peak.
pub fn render(timelines: &[RankTimeline]) -> String {
    let n = timelines.len().max(1);
    let columns = (n as f64).sqrt().ceil().clamp(1.0, 16.0) as usize;
    let columns = columns.max(n.div_ceil(64)).min(n);
    let rows = n.div_ceil(columns);
    let (margin, gap, title) = (8.0, 6.0, 14.0);
    let cell_w = (WIDTH as f64 - 2.0 * margin - gap * (columns - 1) as f64) / columns as f64;
    let plot_h = (cell_w * 0.45).clamp(28.0, 120.0);
    let cell_h = plot_h + title;
    let legend = 22.0;
    let height = margin * 2.0 + legend + rows as f64 * (cell_h + gap);
    let t_max = (timelines.iter())
        .filter_map(|t| t.timeline.samples.last().map(|s| s.time_ns))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let y_max = (timelines.iter())
        .flat_map(|t| {
            t.timeline
                .samples
                .iter()
                .map(|s| s.reserved.max(s.allocated))
        })
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let font = if cell_w < 90.0 { 9 } else { 11 };
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height:.0}\" viewBox=\"0 0 {WIDTH} {height:.0}\" font-family=\"{FONT}\" font-size=\"{font}\">\n<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n"
    );
    let _ = writeln!(
        svg,
        "<text x=\"{margin}\" y=\"{:.0}\" font-size=\"12\"><tspan fill=\"{ALLOCATED}\">■ allocated</tspan> <tspan fill=\"{RESERVED}\">■ reserved</tspan>; every chart: time 0 to {} since its trace's start, memory 0 to {}</text>",
        margin + 12.0,
        escape(&time_label(&t_max)),
        escape(&units::bytes(y_max as u64)),
    );
    for (i, t) in timelines.iter().enumerate() {
        let x0 = margin + (i % columns) as f64 * (cell_w + gap);
        let y0 = margin + legend + (i / columns) as f64 * (cell_h + gap);
        let base = y0 + cell_h;
        let point = |time: u64, bytes: u64| {
            (
                x0 + time as f64 / t_max * cell_w,
                base - bytes as f64 / y_max * plot_h,
            )
        };
        let line = |value: &dyn Fn(&crate::analysis::timeline::TimelineSample) -> u64| {
            let mut points = String::new();
            for s in &t.timeline.samples {
                let (x, y) = point(s.time_ns, value(s));
                let _ = write!(points, "{x:.1},{y:.1} ");
            }
            points
        };
        let peak = t.timeline.peak.as_ref().map_or(0, |p| p.bytes);
        let label = format!(
            "rank {} · dev {} · {}",
            t.rank,
            t.device,
            units::bytes(peak)
        );
        let _ = writeln!(
            svg,
            "<g><title>{}</title><rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{cell_w:.1}\" height=\"{plot_h:.1}\" fill=\"#f6f7f9\" stroke=\"#dde1e8\"/><text x=\"{x0:.1}\" y=\"{:.1}\">{}</text><polyline fill=\"none\" stroke=\"{RESERVED}\" stroke-width=\"1\" points=\"{}\"/><polyline fill=\"none\" stroke=\"{ALLOCATED}\" stroke-width=\"1.2\" points=\"{}\"/></g>",
            escape(&label),
            base - plot_h,
            base - plot_h - 3.0,
            escape(&label),
            line(&|s| s.reserved),
            line(&|s| s.allocated),
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::timeline::{Timeline, TimelineSample};

    fn rank(rank: u32, points: &[(u64, u64)]) -> RankTimeline {
        RankTimeline {
            rank,
            device: rank,
            timeline: Timeline {
                samples: points
                    .iter()
                    .map(|&(time_ns, allocated)| TimelineSample {
                        time_ns,
                        index: 0,
                        allocated,
                        reserved: allocated * 2,
                        values: Vec::new(),
                        outside: None,
                        pools: None,
                    })
                    .collect(),
                ..Timeline::default()
            },
        }
    }

    #[test]
    fn every_rank_gets_a_chart_on_one_scale() {
        let svg = render(&[
            rank(0, &[(0, 10), (100, 50)]),
            rank(1, &[(0, 10), (50, 100)]),
        ]);
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert!(svg.contains("rank 1 · dev 1"));
        // Rank 1's reserved peak (200 bytes) is the top of every chart: its
        // line reaches the top of its plot, rank 0's stops at half.
        assert!(svg.contains("memory 0 to 200 B"), "{svg}");
        let many: Vec<RankTimeline> = (0..512).map(|r| rank(r, &[(0, 1), (9, 2)])).collect();
        let svg = render(&many);
        assert_eq!(svg.matches("<g>").count(), 512);
        assert!(svg.len() < 1 << 20, "{}", svg.len());
    }
}
