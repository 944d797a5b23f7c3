//! The memory timeline: allocated bytes stacked by category over time,
//! reserved bytes as a line over them, phases as bands, the peak and OOMs
//! marked.

use super::axis::{XScale, steps};
use super::palette::{self, Palette};
use super::{
    ChartError, FONT, HEIGHT, LABEL_PX, LEGEND_CHARS, LEGEND_WIDTH, LegendEntry, Mark, Tooltips,
    WIDTH,
};
use crate::analysis::pauses::XAxis;
use crate::print::labels;

use crate::analysis::timeline::{GroupBy, Timeline, TimelinePoint, TimelineSample};
use crate::units;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Bands narrower than this many pixels are not drawn: they would be
/// invisible, and a long run has hundreds of thousands of them.
const MIN_BAND_PX: i32 = 2;
const BAND_HEIGHTS: [i32; 3] = [18, 12, 8];
/// The band of memory outside the allocator.
const OUTSIDE: RGBColor = RGBColor(150, 120, 170);

/// Renders a timeline as an SVG document titled `title`, along `axis`.
pub fn render(
    chart: &Timeline,
    title: &str,
    palette: &mut Palette,
    axis: XAxis,
) -> Result<String, ChartError> {
    let xs = XScale::new(
        axis,
        chart.samples.iter().map(|s| (s.index, s.time_ns)),
        &chart.idle,
    );
    let mut out = String::new();
    let mut tips = Tooltips::default();
    {
        let full =
            SVGBackend::with_string(&mut out, (WIDTH + LEGEND_WIDTH, HEIGHT)).into_drawing_area();
        full.fill(&WHITE).map_err(super::draw_error)?;
        let (root, legend_area) = full.split_horizontally(WIDTH);
        let (t0, t1) = x_range(chart, &xs);
        // A run that ran out of memory is drawn with the device's memory.
        let capacity = chart.capacity_bytes.filter(|_| !chart.ooms.is_empty());
        let max_bytes = chart
            .samples
            .iter()
            .map(|s| {
                (s.allocated.max(s.reserved)).max(s.reserved.saturating_add(s.outside.unwrap_or(0)))
            })
            .chain(chart.peak.iter().map(|p| p.bytes))
            .chain(capacity)
            .max()
            .unwrap_or(0)
            .max(1024);
        let scale = super::ByteScale::for_max(max_bytes as f64);
        // Headroom above the data for the phase strip, the legend and the
        // peak label.
        let top = scale.scale(max_bytes) * if chart.phases.is_empty() { 1.15 } else { 1.3 };
        let mut ctx = ChartBuilder::on(&root)
            .caption(title, (FONT, super::font_size(20)))
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(90)
            .build_cartesian_2d(t0..t1, 0.0..top)
            .map_err(super::draw_error)?;
        super::draw_time_bytes_mesh(&mut ctx, scale, &xs)?;

        let strip_bottom = draw_phase_bands(&root, &ctx, chart, top, &xs)?;

        // One sample per pixel column, the highest: a step one event wide
        // stays a pixel wide instead of vanishing between its neighbours.
        let (plot_x, _) = ctx.plotting_area().get_pixel_range();
        let shown = envelope(
            &chart.samples,
            &xs,
            (t0, t1),
            (plot_x.end - plot_x.start).max(1),
        );
        let plot = Plot {
            chart,
            shown: &shown,
            scale,
        };
        // In legend order, top entry first; a label may run over two lines.
        let mut legend = plot.draw_categories(&mut ctx, palette)?;
        if let Some(entry) = plot.draw_outside(&mut ctx)? {
            legend.insert(0, entry);
        }
        legend.insert(0, plot.draw_reserved(&mut ctx)?);
        if let Some(entry) = plot.draw_pools(&mut ctx)? {
            legend.insert(1, entry);
        }
        if let Some(c) = capacity {
            draw_capacity(&root, &mut ctx, chart, c, scale.scale(c), (t0, t1))?;
        }
        draw_ooms(&root, &mut ctx, chart, &xs, top, &mut tips)?;
        if let Some(peak) = &chart.peak {
            plot.draw_peak(&root, &ctx, peak, &xs, &mut tips)?;
        }

        let (_, plot_y) = ctx.plotting_area().get_pixel_range();
        super::draw_legend_column(&legend_area, plot_y.start + strip_bottom, &legend)?;

        add_sample_tooltips(&mut tips, &ctx, chart, top, &xs);
        root.present().map_err(super::draw_error)?;
    }
    tips.finish(&mut out);
    Ok(out)
}

type Root<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

/// What the series are drawn from: the timeline, the samples shown (one a
/// pixel column) and the byte scale of the y axis.
struct Plot<'c> {
    chart: &'c Timeline,
    shown: &'c [(f64, &'c TimelineSample)],
    scale: super::ByteScale,
}

impl Plot<'_> {
    /// The categories' stacked areas, each cumulative sum from the top
    /// category down, so lower categories paint over the upper ones'
    /// bases; returns their legend entries, top first, with labels that
    /// would read alike numbered apart.
    fn draw_categories(
        &self,
        ctx: &mut Ctx<'_, '_>,
        palette: &mut Palette,
    ) -> Result<Vec<LegendEntry>, ChartError> {
        let chart = self.chart;
        let mut legend = Vec::new();
        for k in (0..chart.categories.len()).rev() {
            let colour = palette.colour(&chart.categories[k]);
            let points = steps(self.shown.iter().map(|&(x, s)| {
                let cumulative: u64 = s.values.iter().take(k + 1).sum();
                (x, self.scale.scale(cumulative))
            }));
            ctx.draw_series(AreaSeries::new(points, 0.0, colour.mix(0.85)))
                .map_err(super::draw_error)?;
            legend.push(LegendEntry {
                label: legend_label(chart, &chart.categories[k]),
                colour,
                mark: Mark::Area,
            });
        }
        let mut names: Vec<String> = legend.iter().map(|e| e.label.clone()).collect();
        labels::number_alike(&mut names, LEGEND_CHARS);
        for (entry, numbered) in legend.iter_mut().zip(names) {
            entry.label = numbered;
        }
        Ok(legend)
    }

    /// Memory outside the allocator, measured at the device-memory
    /// samples: a band over reserved memory (together, the card's used
    /// memory), a step from each sample to the next. Nothing without such
    /// samples.
    fn draw_outside(&self, ctx: &mut Ctx<'_, '_>) -> Result<Option<LegendEntry>, ChartError> {
        if !self.chart.samples.iter().any(|s| s.outside.is_some()) {
            return Ok(None);
        }
        let scale = self.scale;
        let upper: Vec<(f64, f64)> = steps(self.shown.iter().map(|&(x, s)| {
            (
                x,
                scale.scale(s.reserved.saturating_add(s.outside.unwrap_or(0))),
            )
        }));
        let lower: Vec<(f64, f64)> = steps(
            self.shown
                .iter()
                .map(|&(x, s)| (x, scale.scale(s.reserved))),
        );
        let band: Vec<(f64, f64)> = upper.into_iter().chain(lower.into_iter().rev()).collect();
        ctx.draw_series(std::iter::once(Polygon::new(
            band,
            OUTSIDE.mix(0.45).filled(),
        )))
        .map_err(super::draw_error)?;
        Ok(Some(LegendEntry::new(
            "outside the allocator\n(measured at samples)",
            OUTSIDE,
            Mark::Area,
        )))
    }

    /// Reserved memory, a line over the stacked areas.
    fn draw_reserved(&self, ctx: &mut Ctx<'_, '_>) -> Result<LegendEntry, ChartError> {
        let reserved = steps(
            self.shown
                .iter()
                .map(|&(x, s)| (x, self.scale.scale(s.reserved))),
        );
        ctx.draw_series(LineSeries::new(reserved, palette::RESERVED.stroke_width(2)))
            .map_err(super::draw_error)?;
        Ok(LegendEntry::new("reserved", palette::RESERVED, Mark::Line))
    }

    /// The part of reserved memory in private pools: a dashed line under
    /// the reserved one, drawn only for a trace that has pools.
    fn draw_pools(&self, ctx: &mut Ctx<'_, '_>) -> Result<Option<LegendEntry>, ChartError> {
        if !self
            .shown
            .iter()
            .any(|(_, s)| s.pools.is_some_and(|p| p > 0))
        {
            return Ok(None);
        }
        let pools = steps(
            self.shown
                .iter()
                .map(|&(x, s)| (x, self.scale.scale(s.pools.unwrap_or(0)))),
        );
        ctx.draw_series(DashedLineSeries::new(
            pools,
            6,
            4,
            palette::POOLS.stroke_width(2),
        ))
        .map_err(super::draw_error)?;
        Ok(Some(LegendEntry::new(
            "reserved in private pools\n(CUDA graphs, MemPool)",
            palette::POOLS,
            Mark::Line,
        )))
    }

    /// The peak: a marker, and its label beside it with the largest
    /// category there, on the side with more room.
    fn draw_peak(
        &self,
        root: &Root<'_>,
        ctx: &Ctx<'_, '_>,
        peak: &TimelinePoint,
        xs: &XScale,
        tips: &mut Tooltips,
    ) -> Result<(), ChartError> {
        let chart = self.chart;
        let scale = self.scale;
        let (px, py) = ctx.backend_coord(&(xs.x(peak.time_ns), scale.scale(peak.bytes)));
        root.draw(&Circle::new((px, py), 5, palette::ALERT.filled()))
            .map_err(super::draw_error)?;
        let text = format!("peak {}", units::bytes(peak.bytes));
        // The label goes beside the point on the side with more room (to
        // its left when the peak sits in the right half), its site
        // shortened to that room: about 8 px a character at 14 px.
        let (plot_x, _) = ctx.plotting_area().get_pixel_range();
        let left_side = px > (plot_x.start + plot_x.end) / 2;
        let room = if left_side {
            px - 10 - plot_x.start
        } else {
            plot_x.end - px - 10
        };
        let detail = if peak.category.is_empty() {
            String::new()
        } else {
            let bytes = units::bytes(peak.category_bytes);
            let fit = (room / 8).max(0) as usize;
            let fit = fit.saturating_sub("largest:  ()".len() + bytes.len());
            format!(
                "largest: {} ({bytes})",
                label_within(chart, &peak.category, fit.max(12))
            )
        };
        // The label ends (or begins) 10 px from the marker, the text
        // anchored there: a width guessed from its characters placed
        // it far from a marker on its right. It sits above the
        // reserved line at the peak too, on a white ground, so no line
        // strikes it through.
        let reserved_y = reserved_near(chart, peak.time_ns)
            .map(|r| ctx.backend_coord(&(xs.x(peak.time_ns), scale.scale(r))).1)
            .unwrap_or(py);
        let base = py.min(reserved_y) - 6;
        let width = 7 * text.chars().count().max(detail.chars().count()) as i32;
        let (anchor, lx, ground_x) = if left_side {
            (HPos::Right, px - 10, px - 10 - width)
        } else {
            (HPos::Left, px + 10, px + 10)
        };
        root.draw(&Rectangle::new(
            [(ground_x - 4, base - 40), (ground_x + width + 4, base)],
            WHITE.mix(0.85).filled(),
        ))
        .map_err(super::draw_error)?;
        let at = Pos::new(anchor, VPos::Top);
        let style = (FONT, super::font_size(LABEL_PX))
            .into_font()
            .color(&palette::ALERT)
            .pos(at);
        root.draw(&Text::new(text.clone(), (lx, base - 38), style))
            .map_err(super::draw_error)?;
        root.draw(&Text::new(
            detail,
            (lx, base - 20),
            (FONT, super::font_size(LABEL_PX - 2))
                .into_font()
                .color(&BLACK)
                .pos(at),
        ))
        .map_err(super::draw_error)?;
        tips.circle(
            px,
            py,
            6,
            &palette::hex(palette::ALERT),
            &format!(
                "{text} at {}\nlargest: {} ({})",
                units::duration_ns(peak.time_ns),
                labels::site_label(&peak.category),
                units::bytes(peak.category_bytes)
            ),
        );
        Ok(())
    }
}

/// The device's capacity: a line across the plot at `y`, labelled.
fn draw_capacity(
    root: &Root<'_>,
    ctx: &mut Ctx<'_, '_>,
    chart: &Timeline,
    capacity: u64,
    y: f64,
    (t0, t1): (f64, f64),
) -> Result<(), ChartError> {
    super::draw_capacity_line(ctx, (t0, t1), y)?;
    let (px, py) = ctx.backend_coord(&(t0, y));
    root.draw(&Text::new(
        (chart.capacity_label.clone())
            .unwrap_or_else(|| format!("device memory {}", units::bytes(capacity))),
        (px + 6, py - 20),
        (FONT, super::font_size(LABEL_PX - 2))
            .into_font()
            .color(&palette::ALERT),
    ))
    .map_err(super::draw_error)?;
    Ok(())
}

/// Each out-of-memory event: a line from the axis to the top, labelled,
/// with a tooltip saying what was asked and where.
fn draw_ooms(
    root: &Root<'_>,
    ctx: &mut Ctx<'_, '_>,
    chart: &Timeline,
    xs: &XScale,
    top: f64,
    tips: &mut Tooltips,
) -> Result<(), ChartError> {
    let (plot_x, _) = ctx.plotting_area().get_pixel_range();
    for oom in &chart.ooms {
        let x = xs.x(oom.time_ns);
        ctx.draw_series(LineSeries::new(
            [(x, 0.0), (x, top)],
            palette::ALERT.stroke_width(2),
        ))
        .map_err(super::draw_error)?;
        let (px, py) = ctx.backend_coord(&(x, top * 0.97));
        super::draw_oom_label(root, (px, py), plot_x.clone(), palette::ALERT)?;
        let (_, py0) = ctx.backend_coord(&(x, 0.0));
        let text = format!(
            "out of memory at {}: {} requested\n{}",
            units::duration_ns(oom.time_ns),
            units::bytes(oom.bytes),
            labels::site_label(&oom.category)
        );
        tips.rect(px - 3, py, 7, py0 - py, &text);
    }
    Ok(())
}

type Ctx<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// The samples drawn: in each of `columns` pixel columns, the one with the
/// most allocated memory, from where the column's first sample is.
fn envelope<'a>(
    samples: &'a [TimelineSample],
    xs: &XScale,
    (x0, x1): (f64, f64),
    columns: i32,
) -> Vec<(f64, &'a TimelineSample)> {
    let mut out: Vec<(i64, f64, &TimelineSample)> = Vec::new();
    for s in samples {
        let x = xs.x(s.time_ns);
        let column = ((x - x0) / (x1 - x0) * columns as f64).floor() as i64;
        match out.last_mut() {
            Some(last) if last.0 == column => {
                if s.allocated > last.2.allocated {
                    last.2 = s;
                }
            }
            _ => out.push((column, x, s)),
        }
    }
    // The last sample holds to the end of the axis.
    if let (Some(&(_, _, last)), Some(s)) = (out.last(), samples.last())
        && !std::ptr::eq(last, s)
    {
        out.push((i64::MAX, xs.x(s.time_ns), s));
    }
    out.into_iter().map(|(_, x, s)| (x, s)).collect()
}

/// The axis spans the samples: the window's events (phases are cut to it).
fn x_range(chart: &Timeline, xs: &XScale) -> (f64, f64) {
    let first = chart.samples.first().map_or(0, |s| s.time_ns);
    let last = chart.samples.last().map_or(0, |s| s.time_ns);
    let (a, b) = (xs.x(first), xs.x(last));
    if b > a { (a, b) } else { (a, a + 1.0) }
}

/// A category's name within `max` characters on one line: a site's with
/// the user's own line first (see [`labels::site_within`]), others cut from
/// the left.
/// Reserved memory at the sample nearest `time_ns` (the peak's), if any.
fn reserved_near(chart: &Timeline, time_ns: u64) -> Option<u64> {
    let i = chart.samples.partition_point(|s| s.time_ns < time_ns);
    let around = [i.checked_sub(1), Some(i)];
    around
        .into_iter()
        .flatten()
        .filter_map(|k| chart.samples.get(k))
        .map(|s| s.reserved)
        .max()
}

fn label_within(chart: &Timeline, category: &str, max: usize) -> String {
    match chart.grouped_by {
        GroupBy::Site => labels::site_within(category, max),
        _ => labels::cut_left(category, max),
    }
}

/// A category's name in the legend: a site's user line, then the library
/// frame `via` on a second line when both do not fit on one.
fn legend_label(chart: &Timeline, category: &str) -> String {
    match chart.grouped_by {
        GroupBy::Site => labels::site_lines_within(category, LEGEND_CHARS).join("\n"),
        _ => labels::cut_left(category, LEGEND_CHARS),
    }
}

/// Draws the phase strip at the top of the plot; returns its bottom edge,
/// relative to the plotting area.
fn draw_phase_bands(
    root: &Root<'_>,
    ctx: &Ctx<'_, '_>,
    chart: &Timeline,
    top: f64,
    xs: &XScale,
) -> Result<i32, ChartError> {
    let area = ctx.plotting_area();
    let (_, y_range) = area.get_pixel_range();
    let mut labels: Vec<(String, (i32, i32))> = Vec::new();
    let mut band_top = y_range.start;
    let max_depth = chart
        .phases
        .iter()
        .map(|p| p.depth)
        .max()
        .unwrap_or(0)
        .min(BAND_HEIGHTS.len() - 1);
    let mut depth_tops = Vec::new();
    for height in &BAND_HEIGHTS[..=max_depth] {
        depth_tops.push(band_top);
        band_top += height + 1;
    }
    for (i, phase) in chart.phases.iter().enumerate() {
        if phase.depth > max_depth {
            continue;
        }
        let (x0, _) = ctx.backend_coord(&(xs.x(phase.start_ns), top));
        let (x1, _) = ctx.backend_coord(&(xs.x(phase.end_ns), top));
        if x1 - x0 < MIN_BAND_PX {
            continue;
        }
        let colour = palette::BANDS[i % 2];
        let y0 = depth_tops[phase.depth];
        let h = BAND_HEIGHTS[phase.depth];
        if phase.depth == 0 {
            // Top-level phases also shade the plot faintly, so the eye can
            // follow them down to the areas.
            root.draw(&Rectangle::new(
                [(x0, y_range.start), (x1, y_range.end)],
                colour.mix(0.45).filled(),
            ))
            .map_err(super::draw_error)?;
        }
        root.draw(&Rectangle::new(
            [(x0, y0), (x1, y0 + h)],
            colour
                .mix(if phase.depth == 0 { 1.0 } else { 0.9 })
                .filled(),
        ))
        .map_err(super::draw_error)?;
        root.draw(&Rectangle::new(
            [(x0, y0), (x1, y0 + h)],
            RGBColor(170, 170, 170).stroke_width(1),
        ))
        .map_err(super::draw_error)?;
        let width_px = x1 - x0;
        let text = labels::cut_left(&phase.name, 40);
        if width_px > 8 * text.len() as i32 + 6 && h >= 12 {
            labels.push((text, (x0 + 3, y0 + h - 4)));
        }
    }
    for (text, pos) in labels {
        root.draw(&Text::new(
            text,
            pos,
            (FONT, super::font_size(12)).into_font(),
        ))
        .map_err(super::draw_error)?;
    }
    Ok(if chart.phases.is_empty() {
        0
    } else {
        band_top - y_range.start
    })
}

fn add_sample_tooltips(
    tips: &mut Tooltips,
    ctx: &Ctx<'_, '_>,
    chart: &Timeline,
    top: f64,
    xs: &XScale,
) {
    let (_, y_range) = ctx.plotting_area().get_pixel_range();
    // One hover column per few pixels: finer would bloat the file and no
    // pointer is that precise.
    const COLUMN_PX: i32 = 4;
    let mut last_x = i32::MIN;
    for (i, s) in chart.samples.iter().enumerate() {
        let (x, _) = ctx.backend_coord(&(xs.x(s.time_ns), top));
        if x < last_x + COLUMN_PX {
            continue;
        }
        last_x = x;
        let total = s.allocated;
        let mut text = format!(
            "{} (event {})\nallocated {}\nreserved {}",
            units::duration_ns(s.time_ns),
            units::count(s.index),
            units::bytes(total),
            units::bytes(s.reserved)
        );
        let mut parts: Vec<(usize, u64)> = s
            .values
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, v)| v > 0)
            .collect();
        parts.sort_by_key(|&(_, v)| std::cmp::Reverse(v));
        for (k, v) in parts.into_iter().take(5) {
            text.push_str(&format!(
                "\n  {}: {}",
                label_within(chart, &chart.categories[k], 60),
                units::bytes(v)
            ));
        }
        let next_x = chart
            .samples
            .get(i + 1)
            .map(|n| ctx.backend_coord(&(xs.x(n.time_ns), top)).0)
            .unwrap_or(x + COLUMN_PX);
        tips.rect(
            x,
            y_range.start,
            (next_x - x).clamp(1, COLUMN_PX * 4),
            y_range.end - y_range.start,
            &text,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::analysis::timeline::{PhaseSpan, TimelinePoint, TimelineSample};

    fn chart() -> Timeline {
        let samples = (0..200u64)
            .map(|i| {
                let values = vec![
                    (i % 50) << 20,
                    10 << 20,
                    if i == 120 { 300 << 20 } else { 0 },
                ];
                TimelineSample {
                    time_ns: i * 1_000_000,
                    index: i,
                    allocated: values.iter().sum(),
                    reserved: 400 << 20,
                    values,
                    outside: None,
                    pools: None,
                }
            })
            .collect();
        let span = |name: &str, start_ns, end_ns, depth| PhaseSpan {
            name: name.into(),
            start_ns,
            end_ns,
            depth,
        };
        Timeline {
            grouped_by: GroupBy::Site,
            categories: vec![
                "forward (model.py:41)".into(),
                "step (optim.py:9)".into(),
                "other".into(),
            ],
            samples,
            phases: vec![
                span("iter0", 0, 100_000_000, 0),
                span("forward", 0, 40_000_000, 1),
                span("iter1", 100_000_000, 199_000_000, 0),
            ],
            peak: Some(TimelinePoint {
                time_ns: 120_000_000,
                bytes: 330 << 20,
                category: "leak (train.py:120)".into(),
                category_bytes: 300 << 20,
            }),
            ooms: vec![TimelinePoint {
                time_ns: 150_000_000,
                bytes: 2 << 30,
                category: "grow (train.py:7)".into(),
                category_bytes: 0,
            }],
            idle: Default::default(),
            capacity_bytes: None,
            capacity_label: None,
        }
    }

    #[test]
    fn the_svg_holds_labels_peak_phases_and_tooltips() {
        let svg = render(
            &chart(),
            "memory over time",
            &mut Palette::new(),
            XAxis::Time,
        )
        .unwrap();
        crate::print::svg::dump_for_review("timeline-unit.svg", &svg);
        assert!(svg.starts_with("<svg"));
        for expected in [
            "memory over time",
            "peak 330.0 MiB",
            "iter0",
            "iter1",
            "forward (model.py:41)",
            "reserved",
            "OOM",
            "<title>",
        ] {
            assert!(svg.contains(expected), "missing {expected}");
        }
    }

    /// The attribute `name` of the first element `tag` whose text (or tag)
    /// holds `holding`.
    fn attribute(svg: &str, tag: &str, holding: &str, name: &str) -> String {
        let at = svg.find(holding).unwrap_or_else(|| panic!("no {holding}"));
        let start = svg[..at].rfind(&format!("<{tag}")).unwrap();
        let element = &svg[start..at];
        let value = element.split(&format!(" {name}=\"")).nth(1).unwrap();
        value[..value.find('"').unwrap()].to_string()
    }

    /// The peak's label sits just beside its marker, ending 10 px before it
    /// when it is on the marker's left (it began 0.5 s of axis away, from a
    /// width guessed too wide), on a white ground that no line strikes
    /// through.
    #[test]
    fn the_peak_label_sits_beside_its_marker_on_a_clear_ground() {
        let svg = render(&chart(), "t", &mut Palette::new(), XAxis::Time).unwrap();
        let marker: f64 = attribute(&svg, "circle", "r=\"5\"", "cx").parse().unwrap();
        let x: f64 = attribute(&svg, "text", "\npeak 330.0 MiB\n", "x")
            .parse()
            .unwrap();
        assert_eq!(
            attribute(&svg, "text", "\npeak 330.0 MiB\n", "text-anchor"),
            "end"
        );
        assert!(
            (marker - 12.0..=marker - 8.0).contains(&x),
            "label at {x}, marker at {marker}"
        );
        // The ground: a white box just before the label.
        let label = svg.find("\npeak 330.0 MiB\n").unwrap();
        let ground = svg[..label].rfind("<rect").unwrap();
        assert!(
            svg[ground..label].contains("fill=\"#FFFFFF\""),
            "no ground under the label"
        );
        assert!(
            !svg[ground..label].contains("<polyline"),
            "a line over the ground"
        );
    }

    #[test]
    fn private_pools_are_a_dashed_line_only_when_the_trace_has_them() {
        let plain = render(&chart(), "t", &mut Palette::new(), XAxis::Time).unwrap();
        assert!(!plain.contains("private pools"));
        let mut pooled = chart();
        for (i, s) in pooled.samples.iter_mut().enumerate() {
            s.pools = Some(if i >= 10 { s.reserved / 2 } else { 0 });
        }
        let svg = render(&pooled, "t", &mut Palette::new(), XAxis::Time).unwrap();
        assert!(svg.contains("reserved in private pools"), "legend entry");
        // The line itself, in its colour.
        assert!(svg.to_ascii_uppercase().contains("#008080"), "no line");
        // A trace whose pools hold nothing draws none.
        let mut empty = chart();
        for s in &mut empty.samples {
            s.pools = Some(0);
        }
        let svg = render(&empty, "t", &mut Palette::new(), XAxis::Time).unwrap();
        assert!(!svg.contains("private pools"));
    }

    #[test]
    fn memory_outside_the_allocator_is_a_band_only_when_sampled() {
        let plain = render(&chart(), "t", &mut Palette::new(), XAxis::Time).unwrap();
        assert!(!plain.contains("outside the allocator"));
        let mut sampled = chart();
        for (i, s) in sampled.samples.iter_mut().enumerate() {
            s.outside = (i >= 10).then_some(600 << 20);
        }
        let svg = render(&sampled, "t", &mut Palette::new(), XAxis::Time).unwrap();
        assert!(svg.contains("outside the allocator"));
        assert!(svg.contains("(measured at samples)"));
        // The band itself, in its colour, filled.
        assert!(svg.to_ascii_uppercase().contains("#9678AA"), "no band");
    }
}
