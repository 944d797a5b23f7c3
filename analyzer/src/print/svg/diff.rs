//! The comparison chart: two panels in one SVG. Above, both runs' allocated
//! and reserved memory on one axis (time since each run's start, or
//! repetitions of each run's loop); below, the sites whose memory changed
//! most, as bars diverging from zero (growth to the right, in red).

use super::axis::{XScale, steps};
use super::palette;
use super::{
    ByteScale, ChartError, FONT, HEIGHT, LABEL_PX, LEGEND_WIDTH, LegendEntry, Mark, Tooltips, WIDTH,
};
use crate::analysis::compare::{Change, Comparison, Iterations, Presence, SiteDelta};
use crate::analysis::pauses::XAxis;
use crate::analysis::phases::normalize_name;
use crate::analysis::timeline::Timeline;
use crate::command::compare::CompareResult;
use crate::print::labels;
use crate::units;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The baseline's colour (blue) and the new run's (vermillion): the
/// Okabe–Ito pair that stays apart for colour-blind readers.
const BASE: RGBColor = RGBColor(0, 114, 178);
const NEW: RGBColor = RGBColor(213, 94, 0);
/// Bars of sites that shrank.
const BETTER: RGBColor = RGBColor(0, 158, 115);
/// Height of one bar's row, and the room for the site labels left of the bars.
const ROW_PX: u32 = 26;
const BAR_LABELS_PX: u32 = 380;

/// How the two timelines share the horizontal axis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AlignBy {
    /// Time since each run's first event.
    #[default]
    Time,
    /// Repetitions of each run's most repeated phase, so runs at different
    /// speeds line up iteration by iteration.
    Repetition,
}

/// One run as the chart draws it.
pub struct DiffRun<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its timeline (the samples' allocated and reserved bytes are drawn).
    pub timeline: &'a Timeline,
    /// Its iterations, for [`AlignBy::Repetition`].
    pub iterations: Option<&'a Iterations>,
}

/// A comparison's chart: both runs' timelines, drawn along `x` (aligned by
/// `align`), and the `top` sites that changed most.
pub fn chart(
    result: &CompareResult,
    align: AlignBy,
    x: XAxis,
    top: usize,
) -> Result<String, ChartError> {
    let comparison = &result.comparison;
    let base = DiffRun {
        name: &comparison.base.name,
        timeline: &result.base_timeline,
        iterations: comparison.base.iterations.as_ref(),
    };
    let new = DiffRun {
        name: &comparison.new.name,
        timeline: &result.new_timeline,
        iterations: comparison.new.iterations.as_ref(),
    };
    render(&base, &new, comparison, align, x, top)
}

/// Renders the comparison of two runs as an SVG document, with the `top`
/// sites that changed most. Aligned by time, each run is drawn along `x`
/// from its own first event.
pub fn render(
    base: &DiffRun<'_>,
    new: &DiffRun<'_>,
    comparison: &Comparison,
    align: AlignBy,
    x: XAxis,
    top: usize,
) -> Result<String, ChartError> {
    let sites: Vec<&SiteDelta> = comparison
        .sites
        .iter()
        .filter(|s| s.changed() && s.rank_delta() != 0.0)
        .take(top)
        .collect();
    let bars_height = 90 + ROW_PX * sites.len().max(2) as u32;
    let axes = [base, new]
        .map(|run| Axis::new(run, align, x))
        .into_iter()
        .collect::<Result<Vec<Axis>, ChartError>>()?;
    let mut out = String::new();
    let mut tips = Tooltips::default();
    {
        let full = SVGBackend::with_string(&mut out, (WIDTH + LEGEND_WIDTH, HEIGHT + bars_height))
            .into_drawing_area();
        full.fill(&WHITE).map_err(super::draw_error)?;
        let (upper, lower) = full.split_vertically(HEIGHT);
        let (plot, legend) = upper.split_horizontally(WIDTH);
        let title = format!(
            "Memory over time: {} (baseline) vs {}",
            labels::cut_left(base.name, 40),
            labels::cut_left(new.name, 40)
        );
        draw_timelines(&plot, &legend, &title, [base, new], &axes, &mut tips)?;
        let (bars, _) = lower.split_horizontally(WIDTH + LEGEND_WIDTH - 40);
        draw_bars(&full, &bars, &sites, &mut tips)?;
        full.present().map_err(super::draw_error)?;
    }
    tips.finish(&mut out);
    Ok(out)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// Maps a run's times to the shared horizontal axis.
struct Axis {
    origin_ns: u64,
    end_ns: u64,
    // Where a moment goes without repetitions.
    scale: XScale,
    // Repetition spans (begin, end), in time order; empty for time.
    spans: Vec<(u64, u64)>,
}

impl Axis {
    fn new(run: &DiffRun<'_>, align: AlignBy, x: XAxis) -> Result<Self, ChartError> {
        let t = run.timeline;
        let scale = XScale::new(x, t.samples.iter().map(|s| (s.index, s.time_ns)), &t.idle);
        let origin_ns = t.samples.first().map_or(0, |s| s.time_ns);
        let end_ns = t.samples.last().map_or(origin_ns, |s| s.time_ns);
        let mut spans = Vec::new();
        if align == AlignBy::Repetition {
            let Some(iterations) = run.iterations else {
                return Err(ChartError::NoRepetitions(run.name.to_string()));
            };
            let depth = iterations.phase.matches('/').count();
            let leaf = iterations.phase.rsplit('/').next().unwrap_or("");
            spans = t
                .phases
                .iter()
                .filter(|p| p.depth == depth && normalize_name(&p.name) == leaf)
                .map(|p| (p.start_ns, p.end_ns))
                .collect();
            spans.sort_unstable();
        }
        Ok(Axis {
            origin_ns,
            end_ns,
            scale,
            spans,
        })
    }

    /// The position of a moment: nanoseconds since the run's start, or the
    /// repetition it falls in plus the fraction of it elapsed. Time before
    /// the first repetition (loading a model) and after the last is squeezed
    /// into half a repetition on either side.
    fn x(&self, time_ns: u64) -> f64 {
        let Some(&(first, _)) = self.spans.first() else {
            return self.scale.x(time_ns) - self.scale.x(self.origin_ns);
        };
        let last_end = self.spans.last().map_or(first, |s| s.1);
        let n = self.spans.len() as f64;
        if time_ns < first {
            let lead = first.saturating_sub(self.origin_ns).max(1) as f64;
            return -0.5 * (first - time_ns) as f64 / lead;
        }
        if time_ns >= last_end {
            let tail = self.end_ns.saturating_sub(last_end).max(1) as f64;
            return n + 0.5 * ((time_ns - last_end) as f64 / tail).min(1.0);
        }
        let i = self.spans.partition_point(|s| s.0 <= time_ns) - 1;
        let (start, end) = self.spans[i];
        if time_ns >= end {
            // Between two repetitions.
            (i + 1) as f64
        } else {
            i as f64 + (time_ns - start) as f64 / (end - start).max(1) as f64
        }
    }

    fn range(&self) -> (f64, f64) {
        if self.spans.is_empty() {
            (0.0, self.x(self.end_ns).max(1.0))
        } else {
            (self.x(self.origin_ns), self.x(self.end_ns))
        }
    }
}

fn draw_timelines(
    plot: &Area<'_>,
    legend: &Area<'_>,
    title: &str,
    runs: [&DiffRun<'_>; 2],
    axes: &[Axis],
    tips: &mut Tooltips,
) -> Result<(), ChartError> {
    let repetitions = !axes[0].spans.is_empty();
    let (x0, x1) = axes
        .iter()
        .map(Axis::range)
        .fold((0f64, 1f64), |acc, r| (acc.0.min(r.0), acc.1.max(r.1)));
    let max_bytes = runs
        .iter()
        .flat_map(|r| {
            r.timeline
                .samples
                .iter()
                .map(|s| s.allocated.max(s.reserved))
        })
        .max()
        .unwrap_or(0)
        .max(1024);
    let scale = ByteScale::for_max(max_bytes as f64);
    let top = scale.scale(max_bytes) * 1.15;
    let mut ctx = ChartBuilder::on(plot)
        .caption(title, (FONT, 20))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(90)
        .build_cartesian_2d(x0..x1, 0.0..top)
        .map_err(super::draw_error)?;
    let x_desc = match runs[0].iterations {
        Some(it) if repetitions => format!("repetition of {}", it.phase),
        _ => format!("{} since the run's start", axes[0].scale.description()),
    };
    let range = ctx.x_range();
    let along = axes[0].scale.ticks(range.start, range.end);
    // Repetitions are counted whole: a tick between two is left unlabelled
    // (rounded, 0.5 and 0.4 would both read `0`, and -0.2 `-0`).
    let rep_label = |v: &f64| {
        if (v - v.round()).abs() < 1e-9 {
            format!("{}", v.round().abs() as u64)
        } else {
            String::new()
        }
    };
    let x_label: &dyn Fn(&f64) -> String = if repetitions { &rep_label } else { &along };
    ctx.configure_mesh()
        .x_label_formatter(x_label)
        .y_label_formatter(&|v| scale.label(v))
        .x_desc(x_desc)
        .y_desc("memory")
        .x_labels(8)
        .label_style((FONT, super::font_size(LABEL_PX)))
        .axis_desc_style((FONT, super::font_size(LABEL_PX)))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(super::draw_error)?;

    let mut entries: Vec<LegendEntry> = Vec::new();
    let (plot_x, _) = ctx.plotting_area().get_pixel_range();
    for (k, (run, axis)) in runs.iter().zip(axes).enumerate() {
        let colour = if k == 0 { BASE } else { NEW };
        let role = if k == 0 { "baseline" } else { "new" };
        let samples = &run.timeline.samples;
        let reserved = steps(
            samples
                .iter()
                .map(|s| (axis.x(s.time_ns), scale.scale(s.reserved))),
        );
        ctx.draw_series(DashedLineSeries::new(
            reserved,
            6,
            4,
            colour.mix(0.8).stroke_width(1),
        ))
        .map_err(super::draw_error)?;
        let allocated = steps(
            samples
                .iter()
                .map(|s| (axis.x(s.time_ns), scale.scale(s.allocated))),
        );
        ctx.draw_series(LineSeries::new(allocated, colour.stroke_width(2)))
            .map_err(super::draw_error)?;
        entries.push(LegendEntry::new(
            &format!("{role}: {}", labels::cut_left(run.name, 30)),
            colour,
            Mark::Line,
        ));
        entries.push(LegendEntry::new(
            &format!("{role} reserved"),
            colour,
            Mark::Dashed,
        ));
        if let Some(peak) = &run.timeline.peak {
            let (px, py) = ctx.backend_coord(&(axis.x(peak.time_ns), scale.scale(peak.bytes)));
            plot.draw(&Circle::new((px, py), 5, colour.filled()))
                .map_err(super::draw_error)?;
            tips.circle(
                px,
                py,
                6,
                &palette::hex(colour),
                &format!(
                    "{}: peak {} at {}",
                    run.name,
                    units::bytes(peak.bytes),
                    units::duration_ns(peak.time_ns.saturating_sub(axis.origin_ns))
                ),
            );
        }
        for oom in &run.timeline.ooms {
            let x = axis.x(oom.time_ns);
            ctx.draw_series(LineSeries::new(
                [(x, 0.0), (x, top)],
                colour.stroke_width(2),
            ))
            .map_err(super::draw_error)?;
            let at = ctx.backend_coord(&(x, top * 0.97));
            super::draw_oom_label(plot, at, plot_x.clone(), colour)?;
        }
    }
    let (_, plot_y) = ctx.plotting_area().get_pixel_range();
    super::draw_legend_column(legend, plot_y.start, &entries)
}

/// What a bar's label says of a site only one run has.
fn marker(site: &SiteDelta) -> &'static str {
    match site.presence {
        Presence::New => " [new]",
        Presence::Gone => " [gone]",
        Presence::Both => "",
    }
}

/// Draws the bars in `area`; labels go on `root` at the pixel positions the
/// chart reports (they are absolute).
fn draw_bars(
    root: &Area<'_>,
    area: &Area<'_>,
    sites: &[&SiteDelta],
    tips: &mut Tooltips,
) -> Result<(), ChartError> {
    let caption = "Sites that changed most (bytes live at the peak, or retained at the end if that moved more)";
    if sites.is_empty() {
        area.draw(&Text::new(
            caption,
            (20, 20),
            (FONT, super::font_size(18)).into_font(),
        ))
        .map_err(super::draw_error)?;
        area.draw(&Text::new(
            "No site's memory changed.",
            (20, 56),
            (FONT, super::font_size(14)).into_font(),
        ))
        .map_err(super::draw_error)?;
        return Ok(());
    }
    let max = sites
        .iter()
        .map(|s| s.rank_delta().abs())
        .fold(0.0, f64::max)
        .max(1.0);
    let scale = ByteScale::for_max(max);
    let reach = scale.scale(max as u64) * 1.25;
    let rows = sites.len() as f64;
    let mut ctx = ChartBuilder::on(area)
        .caption(caption, (FONT, super::font_size(18)))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(BAR_LABELS_PX)
        .build_cartesian_2d(-reach..reach, rows..0.0)
        .map_err(super::draw_error)?;
    ctx.configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_label_formatter(&|v| {
            let label = scale.label(&v.abs());
            if *v > 0.0 {
                format!("+{label}")
            } else if *v < 0.0 {
                format!("-{label}")
            } else {
                label
            }
        })
        .x_desc("change from the baseline")
        .label_style((FONT, super::font_size(LABEL_PX - 1)))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(super::draw_error)?;
    ctx.draw_series(LineSeries::new(
        [(0.0, 0.0), (0.0, rows)],
        RGBColor(90, 90, 90).stroke_width(1),
    ))
    .map_err(super::draw_error)?;
    let (plot_x, _) = ctx.plotting_area().get_pixel_range();
    // Names shortened to fit the label column at 14 px with their marker,
    // numbered where two meet.
    let column = (BAR_LABELS_PX as usize - 20) * 100 / (14 * 55);
    let mut names: Vec<String> = sites
        .iter()
        .map(|site| labels::site_within(&site.site, column - marker(site).len()))
        .collect();
    labels::number_alike(&mut names, column - " [gone]".len());
    for (i, (site, name)) in sites.iter().zip(names).enumerate() {
        let delta = site.rank_delta();
        let value = delta.signum() * scale.scale(delta.abs() as u64);
        let colour = if delta > 0.0 { palette::ALERT } else { BETTER };
        let y = i as f64;
        ctx.draw_series(std::iter::once(Rectangle::new(
            [(0.0, y + 0.2), (value, y + 0.8)],
            colour.mix(0.85).filled(),
        )))
        .map_err(super::draw_error)?;
        let (bx, by) = ctx.backend_coord(&(value, y + 0.5));
        let (zx, _) = ctx.backend_coord(&(0.0, y + 0.5));
        let text = units::bytes_delta(delta as i128);
        let (tx, h) = if delta > 0.0 {
            (bx + 6, HPos::Left)
        } else {
            (bx - 6, HPos::Right)
        };
        let style = TextStyle::from((FONT, super::font_size(LABEL_PX - 2)).into_font())
            .pos(Pos::new(h, VPos::Center));
        root.draw(&Text::new(text, (tx, by), style))
            .map_err(super::draw_error)?;
        let label = format!("{name}{}", marker(site));
        // Right-aligned against the plot, so each label sits by its bar.
        root.draw(&Text::new(
            label,
            (plot_x.start - 10, by),
            (FONT, super::font_size(14))
                .into_font()
                .color(&RGBColor(30, 30, 30))
                .pos(Pos::new(HPos::Right, VPos::Center)),
        ))
        .map_err(super::draw_error)?;
        let (left, right) = (bx.min(zx), bx.max(zx));
        tips.rect(
            left,
            by - (ROW_PX as i32) / 2 + 2,
            (right - left).max(4),
            ROW_PX as i32 - 4,
            &site_tooltip(site),
        );
    }
    Ok(())
}

fn site_tooltip(site: &SiteDelta) -> String {
    let line = |what: &str, c: &Change| {
        format!(
            "\n{what}: {} → {} ({})",
            units::bytes(c.base.max(0.0) as u64),
            units::bytes(c.new.max(0.0) as u64),
            units::bytes_delta(c.delta as i128)
        )
    };
    let frames: Vec<String> = site.frames.iter().map(|f| labels::frame_label(f)).collect();
    let mut text = frames.join("\n  <- ");
    text.push_str(&line("at the peak", &site.at_peak));
    text.push_str(&line("retained at the end", &site.retained));
    text.push_str(&format!(
        "\nallocations: {} → {}",
        units::count(site.allocations.base.round() as u64),
        units::count(site.allocations.new.round() as u64)
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::timeline::PhaseSpan;

    #[test]
    fn times_map_to_repetitions() {
        let span = |start_ns, end_ns| PhaseSpan {
            name: format!("iter{start_ns}"),
            start_ns,
            end_ns,
            depth: 0,
        };
        let timeline = Timeline {
            samples: [0u64, 400]
                .map(|time_ns| crate::analysis::timeline::TimelineSample {
                    time_ns,
                    index: time_ns / 100,
                    allocated: 0,
                    reserved: 0,
                    values: vec![],
                    outside: None,
                    pools: None,
                })
                .to_vec(),
            phases: vec![span(100, 200), span(250, 350)],
            ..Timeline::default()
        };
        let iterations = Iterations {
            phase: "iter#".into(),
            count: 2,
        };
        let run = DiffRun {
            name: "a",
            timeline: &timeline,
            iterations: Some(&iterations),
        };
        let axis = Axis::new(&run, AlignBy::Repetition, XAxis::Time).unwrap();
        assert_eq!(axis.x(150), 0.5);
        assert_eq!(axis.x(225), 1.0, "between repetitions");
        assert_eq!(axis.x(300), 1.5);
        assert_eq!(axis.x(0), -0.5, "the lead-in is half a repetition");
        assert_eq!(axis.x(400), 2.5);
        let by_time = Axis::new(&run, AlignBy::Time, XAxis::Time).unwrap();
        assert_eq!(by_time.x(150), 150.0);
    }
}
