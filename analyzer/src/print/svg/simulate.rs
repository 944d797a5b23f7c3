//! The what-if chart: reserved and allocated memory over time for each
//! simulated policy on one chart, with the device's capacity and each
//! policy's first OOM.

use super::palette::{self, Palette};
use super::{
    ByteScale, ChartError, FONT, HEIGHT, LABEL_PX, LEGEND_WIDTH, LegendEntry, Mark, Tooltips, WIDTH,
};
use crate::analysis::limits::LimitSource;
use crate::command::simulate::SimulateResult;
use crate::simulate::Sample;
use crate::units;
use plotters::prelude::*;

/// One policy's curves.
pub struct Series<'a> {
    /// The policy's name, for the legend.
    pub name: &'a str,
    /// Memory over time, in time buckets.
    pub samples: &'a [Sample],
    /// The first OOM: its time, and a description for the tooltip.
    pub oom: Option<(u64, String)>,
}

/// A simulation's chart: each policy's curves with its first OOM, and the
/// memory simulated as a line (an inferred cap, simulated at its low end,
/// labelled as the range it is, not a recorded figure).
pub fn chart(result: &SimulateResult, title: &str) -> Result<String, ChartError> {
    let series: Vec<_> = (result.policies.iter())
        .map(|p| Series {
            name: &p.scenario.policy,
            samples: &p.scenario.result.samples,
            oom: p.oom.as_ref().map(|o| {
                (
                    o.time_ns,
                    format!(
                        "{}: out of memory at {} requesting {}",
                        p.scenario.policy,
                        units::duration_ns(o.time_ns),
                        units::bytes(o.requested_bytes)
                    ),
                )
            }),
        })
        .collect();
    let label = (result.limit)
        .filter(|l| l.source == LimitSource::InferredCap && Some(l.bytes) == result.capacity_bytes)
        .map(|l| l.chart_label());
    render_labelled(&series, result.capacity_bytes, label.as_deref(), title)
}

/// Renders the policies' curves as an SVG document; `capacity` draws the
/// simulated device's size as a line.
pub fn render(
    series: &[Series<'_>],
    capacity: Option<u64>,
    title: &str,
) -> Result<String, ChartError> {
    render_labelled(series, capacity, None, title)
}

/// [`render`], the capacity's line labelled `capacity_label` when given (an
/// inferred cap is a range, not a figure: [`crate::analysis::limits::Limit::chart_label`]).
pub fn render_labelled(
    series: &[Series<'_>],
    capacity: Option<u64>,
    capacity_label: Option<&str>,
    title: &str,
) -> Result<String, ChartError> {
    let mut out = String::new();
    let mut tips = Tooltips::default();
    {
        let full =
            SVGBackend::with_string(&mut out, (WIDTH + LEGEND_WIDTH, HEIGHT)).into_drawing_area();
        full.fill(&WHITE).map_err(super::draw_error)?;
        let (root, legend_area) = full.split_horizontally(WIDTH);
        let mut legend: Vec<LegendEntry> = Vec::new();
        let samples = series.iter().flat_map(|s| s.samples.iter());
        let t0 = samples.clone().map(|b| b.start_ns).min().unwrap_or(0) as f64;
        let t1 = (samples.clone().map(|b| b.end_ns).max().unwrap_or(1) as f64).max(t0 + 1.0);
        let max = samples
            .map(|b| b.reserved_bytes.max(b.allocated_bytes))
            .chain(capacity)
            .max()
            .unwrap_or(0)
            .max(1024);
        let scale = ByteScale::for_max(max as f64);
        let top = scale.scale(max) * 1.15;
        let mut ctx = ChartBuilder::on(&root)
            .caption(title, (FONT, 20))
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(90)
            .build_cartesian_2d(t0..t1, 0.0..top)
            .map_err(super::draw_error)?;
        ctx.configure_mesh()
            .x_label_formatter(&super::time_ticks(t1, t1 - t0))
            .y_label_formatter(&|v| scale.label(v))
            .x_desc("time")
            .y_desc("memory")
            .label_style((FONT, super::font_size(LABEL_PX)))
            .axis_desc_style((FONT, super::font_size(LABEL_PX)))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(super::draw_error)?;

        if let Some(c) = capacity {
            super::draw_capacity_line(&mut ctx, (t0, t1), scale.scale(c))?;
            legend.push(LegendEntry::new(
                &capacity_label.map_or_else(
                    || format!("allocator's limit {}", units::bytes(c)),
                    str::to_string,
                ),
                palette::ALERT,
                Mark::Dashed,
            ));
        }

        let policies = Policies { series, scale };
        let (entries, markers) = policies.draw(&mut ctx)?;
        legend.extend(entries);
        let (_, plot_y) = ctx.plotting_area().get_pixel_range();
        super::draw_legend_column(&legend_area, plot_y.start, &legend)?;

        policies.add_tooltips(&mut tips, &ctx);
        for (x, y, text) in markers {
            tips.circle(x, y, 6, &palette::hex(palette::ALERT), &text);
        }
        root.present().map_err(super::draw_error)?;
    }
    tips.finish(&mut out);
    Ok(out)
}

type Ctx<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The policies' curves, on the chart's byte scale.
struct Policies<'s, 'a> {
    series: &'s [Series<'a>],
    scale: ByteScale,
}

impl Policies<'_, '_> {
    /// A value of each time bucket as a step: flat over the bucket.
    fn steps(&self, samples: &[Sample], value: impl Fn(&Sample) -> u64) -> Vec<(f64, f64)> {
        samples
            .iter()
            .flat_map(|b| {
                let v = self.scale.scale(value(b));
                [(b.start_ns as f64, v), (b.end_ns as f64, v)]
            })
            .collect()
    }

    /// Whether every policy allocated the same at every bucket: allocated
    /// memory is the program's, the same under every policy until one
    /// runs out of memory.
    fn same_allocated(&self) -> bool {
        self.series.windows(2).all(|w| {
            w[0].samples.len() == w[1].samples.len()
                && w[0]
                    .samples
                    .iter()
                    .zip(w[1].samples)
                    .all(|(a, b)| a.allocated_bytes == b.allocated_bytes)
        })
    }

    /// Draws allocated memory (one area when it is the same under every
    /// policy, a dashed line each otherwise), each policy's reserved
    /// memory; returns the legend's entries and where each first OOM is,
    /// with its description.
    fn draw(&self, ctx: &mut Ctx<'_, '_>) -> Result<(Vec<LegendEntry>, Markers), ChartError> {
        let series = self.series;
        let mut legend = Vec::new();
        let mut colours = Palette::new();
        let colour_of: Vec<RGBColor> = series.iter().map(|s| colours.colour(s.name)).collect();
        let mut markers = Vec::new();
        let same_allocated = self.same_allocated();
        if same_allocated && let Some(first) = series.first() {
            let grey = RGBColor(150, 150, 150);
            ctx.draw_series(AreaSeries::new(
                self.steps(first.samples, |b| b.allocated_bytes),
                0.0,
                grey.mix(0.3),
            ))
            .map_err(super::draw_error)?;
            legend.push(LegendEntry::new(
                "allocated (every policy)",
                grey,
                Mark::Area,
            ));
        }
        // Each policy is drawn narrower than the one before, on top of it,
        // so that policies whose curves coincide all stay visible.
        for (i, s) in series.iter().enumerate() {
            let colour = colour_of[i];
            let width = 2 + 2 * (series.len() - 1 - i) as u32;
            if !same_allocated {
                ctx.draw_series(DashedLineSeries::new(
                    self.steps(s.samples, |b| b.allocated_bytes),
                    5,
                    3,
                    colour.stroke_width(1),
                ))
                .map_err(super::draw_error)?;
                legend.push(LegendEntry::new(
                    &format!("{}\nallocated", s.name),
                    colour,
                    Mark::Dashed,
                ));
            }
            ctx.draw_series(LineSeries::new(
                self.steps(s.samples, |b| b.reserved_bytes),
                colour.mix(0.85).stroke_width(width),
            ))
            .map_err(super::draw_error)?;
            legend.push(LegendEntry::new(
                &format!("{}\nreserved", s.name),
                colour,
                Mark::Line,
            ));
            if let Some((time, text)) = &s.oom {
                let at = s
                    .samples
                    .iter()
                    .find(|b| b.end_ns >= *time)
                    .or(s.samples.last())
                    .map_or(0, |b| b.reserved_bytes);
                let (x, y) = ctx.backend_coord(&(*time as f64, self.scale.scale(at)));
                markers.push((x, y, text.clone()));
            }
        }
        Ok((legend, markers))
    }

    /// Tooltips with every policy's values, one per few pixels.
    fn add_tooltips(&self, tips: &mut Tooltips, ctx: &Ctx<'_, '_>) {
        let Some(first) = self.series.first() else {
            return;
        };
        let (_, y_range) = ctx.plotting_area().get_pixel_range();
        let mut last_x = i32::MIN;
        for (i, b) in first.samples.iter().enumerate() {
            let (x0, _) = ctx.backend_coord(&(b.start_ns as f64, 0.0));
            let (x1, _) = ctx.backend_coord(&(b.end_ns as f64, 0.0));
            if x1 < last_x + 3 {
                continue;
            }
            last_x = x1;
            let mut text = format!(
                "{} – {}",
                units::duration_ns(b.start_ns),
                units::duration_ns(b.end_ns)
            );
            for s in self.series {
                if let Some(b) = s.samples.get(i) {
                    text.push_str(&format!(
                        "\n{}: reserved {}, allocated {}",
                        s.name,
                        units::bytes(b.reserved_bytes),
                        units::bytes(b.allocated_bytes)
                    ));
                }
            }
            tips.rect(
                x0,
                y_range.start,
                (x1 - x0).max(3),
                y_range.end - y_range.start,
                &text,
            );
        }
    }
}

/// Each first OOM's marker: where it is drawn, and its description. The
/// markers' tooltips go in after the hover areas, so they stay hoverable.
type Markers = Vec<(i32, i32, String)>;

#[cfg(test)]
mod tests {
    use super::*;

    /// An inferred cap's line is labelled as the range it is (issue #44),
    /// a capacity without a label as the figure it is.
    #[test]
    fn the_capacity_line_says_how_it_is_known() {
        let samples = [
            Sample {
                start_ns: 0,
                end_ns: 10,
                reserved_bytes: 1 << 30,
                allocated_bytes: 1 << 29,
            },
            Sample {
                start_ns: 10,
                end_ns: 20,
                reserved_bytes: 2 << 30,
                allocated_bytes: 1 << 30,
            },
        ];
        let series = [Series {
            name: "recorded",
            samples: &samples,
            oom: None,
        }];
        let label = crate::analysis::limits::Limit::inferred(2 << 30, (3 << 30) - 1).chart_label();
        let svg = render_labelled(&series, Some(2 << 30), Some(&label), "t").unwrap();
        assert!(svg.contains(&crate::print::svg::escape(&label)), "{svg}");
        let plain = render(&series, Some(2 << 30), "t").unwrap();
        assert!(!plain.contains("inferred"));
    }
}
