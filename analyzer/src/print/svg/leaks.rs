//! The leak chart: live memory at the end of each repetition of a repeated
//! phase with the fitted growth line, and the growing sites as bars.

use super::palette::{self, Palette};
use super::{ByteScale, ChartError, FONT, HEIGHT, LABEL_PX, Tooltips, WIDTH};
use crate::analysis::leaks::{PhaseGrowth, Trend};
use crate::print::labels::{self, site_label};
use crate::units;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Renders one repeated phase's growth as an SVG document: the growth on
/// the left, the sites that leak on the right.
pub fn render(growth: &PhaseGrowth, palette: &mut Palette) -> Result<String, ChartError> {
    let mut out = String::new();
    let mut tips = Tooltips::default();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(super::draw_error)?;
        let (title_area, body) = root.split_vertically(36);
        title_area
            .titled(&title(growth), (FONT, 20))
            .map_err(super::draw_error)?;
        let (left, right) = body.split_horizontally(WIDTH * 3 / 5);
        draw_growth(&left, growth, &mut tips)?;
        draw_leaking_sites(&right, growth, palette, &mut tips)?;
        root.present().map_err(super::draw_error)?;
    }
    tips.finish(&mut out);
    Ok(out)
}

/// A part of the chart to draw in.
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// The chart's title: the phase, its trend and by how much.
fn title(growth: &PhaseGrowth) -> String {
    match growth.trend {
        Trend::Grows | Trend::Shrinks => format!(
            "{}: {} by {} per repetition over {} repetitions",
            growth.phase,
            growth.trend.word(),
            units::bytes(growth.bytes_per_repetition.unsigned_abs()),
            growth.repetitions
        ),
        // Neither steady nor growing: say between what and what, which a
        // line drawn from 0 may show as flat.
        Trend::Varies => match (
            growth.live_bytes_at_end.iter().min(),
            growth.live_bytes_at_end.iter().max(),
        ) {
            (Some(&low), Some(&high)) => format!(
                "{}: varies between {} and {} at its end over {} repetitions",
                growth.phase,
                units::bytes(low),
                units::bytes(high),
                growth.repetitions
            ),
            _ => format!(
                "{}: varies over {} repetitions",
                growth.phase, growth.repetitions
            ),
        },
        trend => format!(
            "{}: {} over {} repetitions",
            growth.phase,
            trend.word(),
            growth.repetitions
        ),
    }
}

/// Whether the chart draws a fitted line: only for a trend that grows or
/// shrinks (a caption must not speak of one otherwise).
pub fn draws_fit(growth: &PhaseGrowth) -> bool {
    matches!(growth.trend, Trend::Grows | Trend::Shrinks)
}

/// The left panel: live bytes at each repetition's end, and the fitted line.
fn draw_growth(
    left: &Area<'_>,
    growth: &PhaseGrowth,
    tips: &mut Tooltips,
) -> Result<(), ChartError> {
    let reps = &growth.sampled_repetitions;
    let live = &growth.live_bytes_at_end;
    let max = live.iter().copied().max().unwrap_or(0).max(1024);
    let scale = ByteScale::for_max(max as f64);
    let last = reps.last().copied().unwrap_or(1).max(1);
    let x_max = last as f64;
    let mut ctx = ChartBuilder::on(left)
        .margin(12)
        .x_label_area_size(56)
        .y_label_area_size(90)
        .build_cartesian_2d(-0.5..x_max + 0.5, 0.0..scale.scale(max) * 1.2)
        .map_err(super::draw_error)?;
    ctx.configure_mesh()
        .x_desc("repetition")
        .y_desc("allocated at the repetition's end")
        .y_label_formatter(&|v| scale.label(v))
        .x_labels(x_labels(last))
        .x_label_formatter(&repetition_label)
        .label_style((FONT, super::font_size(LABEL_PX)))
        .axis_desc_style((FONT, super::font_size(LABEL_PX)))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(super::draw_error)?;
    let points: Vec<(f64, f64)> = reps
        .iter()
        .zip(live)
        .map(|(&r, &b)| (r as f64, scale.scale(b)))
        .collect();
    ctx.draw_series(LineSeries::new(
        points.clone(),
        RGBColor(0, 114, 178).stroke_width(1),
    ))
    .map_err(super::draw_error)?;
    // The fit: the slope found, through the median of the fitted part.
    let fitted: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|&(r, _)| r >= growth.warmup_repetitions as f64)
        .collect();
    let trending = matches!(growth.trend, Trend::Grows | Trend::Shrinks);
    if let Some(anchor) = median_point(&fitted).filter(|_| trending) {
        let slope = scale.scale(growth.bytes_per_repetition.unsigned_abs())
            * growth.bytes_per_repetition.signum() as f64;
        let x0 = growth.warmup_repetitions as f64;
        let line = [
            (x0, anchor.1 + (x0 - anchor.0) * slope),
            (x_max, anchor.1 + (x_max - anchor.0) * slope),
        ];
        let colour = if growth.trend == Trend::Grows {
            palette::ALERT
        } else {
            RGBColor(120, 120, 120)
        };
        ctx.draw_series(DashedLineSeries::new(line, 8, 4, colour.stroke_width(2)))
            .map_err(super::draw_error)?;
        // Right-aligned at the line's end, on the side away from the
        // line: under a line that rises, over one that falls.
        let (px, py) = ctx.backend_coord(&line[1]);
        let (y, v) = if growth.bytes_per_repetition > 0 {
            (py + 14, VPos::Top)
        } else {
            (py - 14, VPos::Bottom)
        };
        left.draw(&Text::new(
            format!(
                "{} / repetition",
                units::bytes_delta(growth.bytes_per_repetition as i128)
            ),
            (px, y),
            (FONT, super::font_size(LABEL_PX))
                .into_font()
                .color(&colour)
                .pos(Pos::new(HPos::Right, v)),
        ))
        .map_err(super::draw_error)?;
    }
    for (&r, &b) in reps.iter().zip(live) {
        let (px, py) = ctx.backend_coord(&(r as f64, scale.scale(b)));
        let warm = r < growth.warmup_repetitions;
        let cut = growth.cut_short_repetitions.contains(&r);
        tips.circle(
            px,
            py,
            4,
            if warm || cut { "#bbbbbb" } else { "#0072b2" },
            &format!(
                "repetition {r}{}: {} allocated at its end",
                if cut {
                    " (cut short by an out-of-memory error, not fitted)"
                } else if warm {
                    " (warm-up, not fitted)"
                } else {
                    ""
                },
                units::bytes(b)
            ),
        );
    }
    Ok(())
}

/// The right panel: the sites that leak, as bars of bytes per repetition.
fn draw_leaking_sites(
    right: &Area<'_>,
    growth: &PhaseGrowth,
    palette: &mut Palette,
    tips: &mut Tooltips,
) -> Result<(), ChartError> {
    let sites: Vec<_> = growth
        .leaking_sites
        .iter()
        .filter(|s| s.bytes_per_repetition > 0)
        .take(8)
        .collect();
    let bar_max = sites
        .iter()
        .map(|s| s.bytes_per_repetition as u64)
        .max()
        .unwrap_or(1)
        .max(1);
    let bar_scale = ByteScale::for_max(bar_max as f64);
    // At least six slots, so one growing site is a bar, not a wall.
    let n = sites.len().max(6);
    let mut bars = ChartBuilder::on(right)
        .margin(12)
        .x_label_area_size(56)
        .y_label_area_size(10)
        .caption(
            "leaking sites (bytes per repetition)",
            (FONT, super::font_size(LABEL_PX)),
        )
        // Room above the top bar for its label, below the caption.
        .build_cartesian_2d(0.0..bar_scale.scale(bar_max) * 1.15, 0.0..n as f64 + 0.5)
        .map_err(super::draw_error)?;
    if !sites.is_empty() {
        bars.configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_label_formatter(&|v| bar_scale.label(v))
            .x_labels(4)
            .label_style((FONT, super::font_size(LABEL_PX - 2)))
            .light_line_style(RGBColor(240, 240, 240))
            .draw()
            .map_err(super::draw_error)?;
    }
    for (i, site) in sites.iter().enumerate() {
        let y0 = (n - 1 - i) as f64 + 0.15;
        let y1 = y0 + 0.7;
        let colour = palette.colour(&site.site.site);
        let w = bar_scale.scale(site.bytes_per_repetition as u64);
        bars.draw_series([Rectangle::new(
            [(0.0, y0), (w, y1)],
            colour.mix(0.85).filled(),
        )])
        .map_err(super::draw_error)?;
        let (lx, ly) = bars.backend_coord(&(0.0, y1));
        right
            .draw(&Text::new(
                labels::site_within(&site.site.site, 48),
                (
                    lx + 4 - right.get_base_pixel().0,
                    ly - 20 - right.get_base_pixel().1,
                ),
                (FONT, super::font_size(14)).into_font(),
            ))
            .map_err(super::draw_error)?;
        let (x0, py0) = bars.backend_coord(&(0.0, y1));
        let (x1, py1) = bars.backend_coord(&(w, y0));
        tips.rect(
            x0,
            py0,
            x1 - x0,
            py1 - py0,
            &format!(
                "{}\n{} per repetition, {} retained at the last repetition's end\n{}",
                site_label(&site.site.site),
                units::bytes_delta(site.bytes_per_repetition as i128),
                units::bytes(site.retained_bytes),
                site.site
                    .frames
                    .iter()
                    .map(|f| site_label(f))
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        );
    }
    if sites.is_empty() {
        let (w, h) = right.dim_in_pixel();
        right
            .draw(&Text::new(
                "no site leaks",
                (w as i32 / 2 - 50, h as i32 / 2),
                (FONT, 14).into_font(),
            ))
            .map_err(super::draw_error)?;
    }
    Ok(())
}

/// How many labels the repetition axis asks for: at most one per
/// repetition (so that every label is a whole one), and about ten.
fn x_labels(last: u64) -> usize {
    (last as usize + 1).min(11)
}

/// A repetition's label; none between repetitions.
fn repetition_label(v: &f64) -> String {
    if (v - v.round()).abs() < 1e-6 && *v >= 0.0 {
        format!("{}", v.round() as u64)
    } else {
        String::new()
    }
}

fn median_point(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    if points.is_empty() {
        return None;
    }
    let mut xs: Vec<f64> = points.iter().map(|p| p.0).collect();
    let mut ys: Vec<f64> = points.iter().map(|p| p.1).collect();
    xs.sort_by(f64::total_cmp);
    ys.sort_by(f64::total_cmp);
    Some((xs[xs.len() / 2], ys[ys.len() / 2]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repetition_axis_labels_whole_repetitions_only() {
        assert_eq!(x_labels(3), 4);
        assert_eq!(x_labels(40), 11);
        assert_eq!(repetition_label(&2.0), "2");
        assert_eq!(repetition_label(&-0.0), "0");
        assert_eq!(repetition_label(&0.5), "");
        assert_eq!(repetition_label(&-0.5), "");
    }
}
