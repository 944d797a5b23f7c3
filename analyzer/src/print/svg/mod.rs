//! The SVG printers: charts of the analyses' reports, drawn with plotters.
//! They take plain data and never read traces.
//!
//! This module holds what every chart shares: size, fonts, axis labels in
//! human units, and the hover tooltips plotters cannot draw.

pub mod axis;
pub mod diff;
pub mod flame;
pub mod fragmentation;
pub mod leaks;
pub mod palette;
pub mod ranks;
pub mod simulate;
pub mod timeline;

use super::ChartError;
use crate::units;
use std::fmt::Write as _;

/// Chart width in pixels: wide enough for a slide, readable at 100% zoom.
pub const WIDTH: u32 = 1100;
/// Tick labels and legends, in pixels: readable when a chart is shown 1400
/// px wide (a chart with its legend column is that wide).
pub const LABEL_PX: u32 = 16;

/// The size to ask plotters for to get a font `px` pixels high: its SVG
/// backend writes a font of size `s` as `s / 1.24` px.
pub fn font_size(px: u32) -> f64 {
    px as f64 * 1.24
}
/// Chart height in pixels.
pub const HEIGHT: u32 = 520;
/// The font family of every label; SVG viewers fall back to their sans-serif.
pub const FONT: &str = "sans-serif";

/// Labels a time axis: `0`, `250.0 us`, `1.50 s`.
pub fn time_label(ns: &f64) -> String {
    let ns = ns.max(0.0).round() as u64;
    if ns == 0 {
        "0".into()
    } else {
        units::duration_ns(ns)
    }
}

/// The labels of the ticks of a time axis from 0 to about `max_ns`, its
/// shown part `span_ns` wide: all in one unit, the one [`time_label`] gives
/// the largest, with as many decimals as keep neighbouring ticks apart
/// (`1.100 s`, `1.105 s`, never `1.10 s` twice).
pub fn time_ticks(max_ns: f64, span_ns: f64) -> impl Fn(&f64) -> String {
    let (divisor, unit, least) = match max_ns.max(0.0) as u64 {
        0..1_000 => (1.0, "ns", 0),
        1_000..1_000_000 => (1e3, "us", 1),
        1_000_000..1_000_000_000 => (1e6, "ms", 2),
        1_000_000_000..60_000_000_000 => (1e9, "s", 2),
        // Minutes and hours: whole seconds tell ticks apart.
        _ => (0.0, "", 0),
    };
    // Plotters puts ticks at least a twentieth of the span apart when asked
    // for eight (a round step no less than span / 8 / 2.5).
    let step = span_ns / 20.0 / divisor;
    let decimals = if step > 0.0 && step < 1.0 {
        ((-step.log10()).ceil() as usize).clamp(least, 6)
    } else {
        least
    };
    move |ns: &f64| {
        if ns.round() <= 0.0 {
            "0".into()
        } else if divisor == 0.0 {
            time_label(ns)
        } else {
            format!("{:.*} {unit}", decimals, ns / divisor)
        }
    }
}

/// The binary unit a bytes axis is drawn in, chosen so its ticks fall on
/// round numbers of that unit (50 MiB, not 47.7 MiB).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ByteScale {
    /// Bytes per axis unit.
    pub divisor: f64,
    /// The unit's name.
    pub unit: &'static str,
}

impl ByteScale {
    /// The largest unit in which `max_bytes` is at least 1.
    pub fn for_max(max_bytes: f64) -> Self {
        let units = [
            ("B", 1.0),
            ("KiB", 1024.0),
            ("MiB", 1048576.0),
            ("GiB", 1073741824.0),
            ("TiB", 1099511627776.0),
        ];
        let (unit, divisor) = units
            .iter()
            .rev()
            .find(|(_, d)| max_bytes >= *d)
            .copied()
            .unwrap_or(units[0]);
        ByteScale { divisor, unit }
    }

    /// Bytes in axis units.
    pub fn scale(&self, bytes: u64) -> f64 {
        bytes as f64 / self.divisor
    }

    /// An axis label: `50 MiB`, `1.5 GiB`.
    pub fn label(&self, v: &f64) -> String {
        if *v == 0.0 {
            return "0".into();
        }
        let text = format!("{v:.2}");
        let text = text.trim_end_matches('0').trim_end_matches('.');
        format!("{text} {}", self.unit)
    }
}

/// Escapes text for SVG and HTML; control characters and bidirectional
/// overrides become visible escapes ([`printable`](super::printable)).
pub fn escape(text: &str) -> String {
    let text = super::printable(text);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// Invisible hover areas with `<title>` tooltips, added after plotters has
/// drawn the chart (plotters has no way to attach titles to its elements).
#[derive(Default)]
pub struct Tooltips {
    elements: String,
}

impl Tooltips {
    /// A transparent rectangle at pixel coordinates showing `text` on hover.
    pub fn rect(&mut self, x: i32, y: i32, w: i32, h: i32, text: &str) {
        let _ = write!(
            self.elements,
            r#"<rect x="{x}" y="{y}" width="{}" height="{}" fill="transparent"><title>{}</title></rect>"#,
            w.max(1),
            h.max(1),
            escape(text)
        );
    }

    /// A visible circle with a tooltip, for point markers.
    pub fn circle(&mut self, x: i32, y: i32, r: i32, colour: &str, text: &str) {
        let _ = write!(
            self.elements,
            r#"<circle cx="{x}" cy="{y}" r="{r}" fill="{colour}" stroke="white"><title>{}</title></circle>"#,
            escape(text)
        );
    }

    /// Finishes an SVG document: inserts the tooltips as its last group, so
    /// they lie above everything plotters drew, and shows the control
    /// characters of every name in it as escapes (plotters writes labels'
    /// text as given; the document's own markup has none).
    pub fn finish(self, svg: &mut String) {
        if let std::borrow::Cow::Owned(shown) = super::printable(svg) {
            *svg = shown;
        }
        if self.elements.is_empty() {
            return;
        }
        let group = format!(r#"<g class="tooltips">{}</g>"#, self.elements);
        match svg.rfind("</svg>") {
            Some(end) => svg.insert_str(end, &group),
            None => svg.push_str(&group),
        }
    }
}

/// A chart whose x axis is time (ns) and y axis is memory in `ByteScale` units.
pub type TimeBytesChart<'a, 'b> = plotters::chart::ChartContext<
    'a,
    plotters::backend::SVGBackend<'b>,
    plotters::coord::cartesian::Cartesian2d<
        plotters::coord::types::RangedCoordf64,
        plotters::coord::types::RangedCoordf64,
    >,
>;

/// Draws the grid and both axes of a chart of memory along `x` (time, event
/// index or busy time), labelled in human units, in the style every chart
/// shares.
pub fn draw_time_bytes_mesh(
    ctx: &mut TimeBytesChart<'_, '_>,
    scale: ByteScale,
    x: &axis::XScale,
) -> Result<(), ChartError> {
    use plotters::style::RGBColor;
    let range = ctx.x_range();
    let ticks = x.ticks(range.start, range.end);
    ctx.configure_mesh()
        .x_label_formatter(&ticks)
        .y_label_formatter(&|v| scale.label(v))
        .x_desc(x.description())
        .y_desc("memory")
        .x_labels(8)
        .label_style((FONT, font_size(LABEL_PX)))
        .axis_desc_style((FONT, font_size(LABEL_PX)))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(draw_error)
}

/// The width of a legend column beside a chart: a legend inside the plot
/// would hide the data under it, and a site's line needs the room.
pub const LEGEND_WIDTH: u32 = 400;

/// Characters of a legend's line that fit beside its mark, at about 0.55 em
/// each.
pub const LEGEND_CHARS: usize = ((LEGEND_WIDTH - 30) * 100 / (LABEL_PX * 55)) as usize;

/// How a legend entry marks its series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mark {
    /// A filled swatch: an area.
    Area,
    /// A line.
    Line,
    /// A dashed line.
    Dashed,
}

/// One entry of a legend column.
#[derive(Clone, Debug)]
pub struct LegendEntry {
    /// Its label: a line, or several separated by `\n`, each already
    /// within [`LEGEND_CHARS`].
    pub label: String,
    /// The series' colour.
    pub colour: plotters::style::RGBColor,
    /// How the series is drawn.
    pub mark: Mark,
}

impl LegendEntry {
    /// An entry of `label`, each of its lines cut from the left to fit.
    pub fn new(label: &str, colour: plotters::style::RGBColor, mark: Mark) -> LegendEntry {
        let lines: Vec<String> = label
            .lines()
            .map(|line| crate::print::labels::cut_left(line, LEGEND_CHARS))
            .collect();
        LegendEntry {
            label: lines.join("\n"),
            colour,
            mark,
        }
    }
}

/// Draws a legend in its own column `area` (beside the plot), from `top`
/// down: each entry's mark and label, a label's second and later lines in
/// grey under its first.
pub fn draw_legend_column(
    area: &plotters::drawing::DrawingArea<
        plotters::backend::SVGBackend<'_>,
        plotters::coord::Shift,
    >,
    top: i32,
    entries: &[LegendEntry],
) -> Result<(), ChartError> {
    use plotters::element::{PathElement, Rectangle, Text};
    use plotters::style::{BLACK, Color, IntoFont, RGBColor};
    // A line's height, and the gap between entries.
    const LINE: i32 = 19;
    const GAP: i32 = 3;
    let mut y = top + 6;
    for entry in entries {
        let colour = entry.colour;
        match entry.mark {
            Mark::Area => area.draw(&Rectangle::new(
                [(4, y), (18, y + 12)],
                colour.mix(0.85).filled(),
            )),
            Mark::Line => area.draw(&PathElement::new(
                [(4, y + 6), (18, y + 6)],
                colour.stroke_width(2),
            )),
            Mark::Dashed => [4, 12].into_iter().try_for_each(|x| {
                area.draw(&PathElement::new(
                    [(x, y + 6), (x + 5, y + 6)],
                    colour.stroke_width(1),
                ))
            }),
        }
        .map_err(draw_error)?;
        for (i, text) in entry.label.lines().enumerate() {
            let colour = if i == 0 { BLACK } else { RGBColor(90, 90, 90) };
            area.draw(&Text::new(
                text.to_string(),
                (24, y - 1),
                (FONT, font_size(LABEL_PX - 1)).into_font().color(&colour),
            ))
            .map_err(draw_error)?;
            y += LINE;
        }
        y += GAP;
    }
    Ok(())
}

/// Draws a device's memory (or the allocator's limit) at `y`, in memory
/// units, across the chart from `t0` to `t1`: a dashed red line.
pub fn draw_capacity_line(
    ctx: &mut TimeBytesChart<'_, '_>,
    (t0, t1): (f64, f64),
    y: f64,
) -> Result<(), ChartError> {
    use plotters::series::DashedLineSeries;
    use plotters::style::Color;
    ctx.draw_series(DashedLineSeries::new(
        [(t0, y), (t1, y)],
        8,
        4,
        palette::ALERT.stroke_width(1),
    ))
    .map(|_| ())
    .map_err(draw_error)
}

/// Writes `OOM` beside an out-of-memory line at `(px, py)`, on the side
/// that keeps it inside the plot (`plot_x`, its pixel range).
pub fn draw_oom_label(
    area: &plotters::drawing::DrawingArea<
        plotters::backend::SVGBackend<'_>,
        plotters::coord::Shift,
    >,
    (px, py): (i32, i32),
    plot_x: std::ops::Range<i32>,
    colour: plotters::style::RGBColor,
) -> Result<(), ChartError> {
    use plotters::element::Text;
    use plotters::style::IntoFont;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    let (x, h) = if px > (plot_x.start + plot_x.end) / 2 {
        (px - 4, HPos::Right)
    } else {
        (px + 4, HPos::Left)
    };
    let style = (FONT, font_size(LABEL_PX))
        .into_font()
        .color(&colour)
        .pos(Pos::new(h, VPos::Top));
    area.draw(&Text::new(
        "OOM",
        (x - area.get_base_pixel().0, py - area.get_base_pixel().1),
        style,
    ))
    .map_err(draw_error)
}

/// Turns a plotters error into a message (they carry backend types).
pub fn draw_error<E: std::fmt::Debug>(e: E) -> ChartError {
    ChartError::Draw(format!("{e:?}"))
}

/// Writes a rendered chart into `$VRAMTRACE_REVIEW_DIR` when it is set, so
/// a developer can look at what the tests drew.
#[cfg(test)]
pub fn dump_for_review(name: &str, svg: &str) {
    if let Some(dir) = std::env::var_os("VRAMTRACE_REVIEW_DIR") {
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(std::path::Path::new(&dir).join(name), svg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_of_a_short_span_late_in_a_run_are_told_apart() {
        // 1.100 s to 1.120 s: ticks a millisecond apart.
        let tick = time_ticks(1.12e9, 0.02e9);
        assert_eq!(tick(&1.100e9), "1.100 s");
        assert_eq!(tick(&1.105e9), "1.105 s");
        assert_eq!(tick(&0.0), "0");
        let tick = time_ticks(2.0e9, 2.0e9);
        assert_eq!(tick(&0.5e9), "0.50 s");
        assert_eq!(time_ticks(600e9, 600e9)(&90e9), "1m 30s");
    }

    #[test]
    fn tooltips_go_before_the_closing_tag_and_are_escaped() {
        let mut svg = String::from("<svg></svg>");
        let mut t = Tooltips::default();
        t.rect(1, 2, 3, 4, "a < b & c");
        t.finish(&mut svg);
        assert!(svg.ends_with("</g></svg>"));
        assert!(svg.contains("<title>a &lt; b &amp; c</title>"));
    }
}
