//! The SVG printers: charts of the analyses' reports, drawn with plotters.
//! They take plain data and never read traces.
//!
//! This module holds what every chart shares: size, fonts, axis labels in
//! human units, and the hover tooltips plotters cannot draw.

pub mod axis;
pub mod diff;
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

/// Escapes text for SVG and HTML.
pub fn escape(text: &str) -> String {
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

    /// Inserts the tooltips as the last group of an SVG document, so they
    /// lie above everything plotters drew.
    pub fn insert_into(self, svg: &mut String) {
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
    ctx.configure_mesh()
        .x_label_formatter(&|v| x.label(v))
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

/// Draws a chart's series legend in the upper left, in the style every
/// chart shares.
pub fn draw_legend<'a, DB, CT>(
    ctx: &mut plotters::chart::ChartContext<'a, DB, CT>,
) -> Result<(), ChartError>
where
    DB: plotters::backend::DrawingBackend + 'a,
    DB::ErrorType: 'static,
    CT: plotters::coord::CoordTranslate,
{
    use plotters::chart::SeriesLabelPosition;
    use plotters::style::{Color, RGBColor, WHITE};
    ctx.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, font_size(LABEL_PX - 1)))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(200, 200, 200))
        .draw()
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
    fn tooltips_go_before_the_closing_tag_and_are_escaped() {
        let mut svg = String::from("<svg></svg>");
        let mut t = Tooltips::default();
        t.rect(1, 2, 3, 4, "a < b & c");
        t.insert_into(&mut svg);
        assert!(svg.ends_with("</g></svg>"));
        assert!(svg.contains("<title>a &lt; b &amp; c</title>"));
    }
}
