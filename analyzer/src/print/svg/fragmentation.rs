//! The fragmentation chart: reserved against allocated memory, the cached
//! free memory and its largest block, and external fragmentation on a
//! second axis.
//!
//! Allocated and reserved memory are drawn at each bucket's most, as the
//! timeline draws them, so the chart reaches the peaks that the summary
//! states; the free memory and fragmentation are each bucket's end state
//! (a sweep of the free ranges, taken once a bucket closes).

use super::axis::XScale;
use super::palette;
use super::{
    ByteScale, ChartError, FONT, HEIGHT, LABEL_PX, LEGEND_WIDTH, LegendEntry, Mark, TimeBytesChart,
    Tooltips, WIDTH,
};
use crate::analysis::fragmentation::{FragmentationBucket, FragmentationReport};
use crate::analysis::pauses::XAxis;
use crate::units;
use plotters::prelude::*;

/// Renders the report's buckets as an SVG document, along `axis`.
pub fn render(
    report: &FragmentationReport,
    title: &str,
    axis: XAxis,
) -> Result<String, ChartError> {
    let buckets = &report.buckets;
    let xs = x_scale(report, axis);
    let mut out = String::new();
    let mut tips = Tooltips::default();
    {
        let full =
            SVGBackend::with_string(&mut out, (WIDTH + LEGEND_WIDTH, HEIGHT)).into_drawing_area();
        full.fill(&WHITE).map_err(super::draw_error)?;
        let (root, legend_area) = full.split_horizontally(WIDTH);
        let t0 = xs.x(buckets.first().map_or(0, |b| b.start_ns));
        let t1 = xs.x(buckets.last().map_or(1, |b| b.end_ns)).max(t0 + 1.0);
        let max = buckets
            .iter()
            .map(|b| b.max_reserved_bytes.max(b.reserved_bytes))
            .max()
            .unwrap_or(0)
            .max(1024);
        let scale = ByteScale::for_max(max as f64);
        let top = scale.scale(max) * 1.25;
        let mut ctx = ChartBuilder::on(&root)
            .caption(title, (FONT, super::font_size(20)))
            .margin(12)
            .x_label_area_size(48)
            .y_label_area_size(90)
            .right_y_label_area_size(70)
            .build_cartesian_2d(t0..t1, 0.0..top)
            .map_err(super::draw_error)?
            .set_secondary_coord(t0..t1, 0.0..1.05);
        super::draw_time_bytes_mesh(&mut ctx, scale, &xs)?;
        ctx.configure_secondary_axes()
            .y_desc("external fragmentation")
            .y_label_formatter(&|v| format!("{:.0}%", v * 100.0))
            .label_style((FONT, super::font_size(LABEL_PX)))
            .axis_desc_style((FONT, super::font_size(LABEL_PX)))
            .draw()
            .map_err(super::draw_error)?;

        // Each bucket's value is drawn as a step over its span.
        let steps = |value: &dyn Fn(&FragmentationBucket) -> f64| {
            buckets
                .iter()
                .flat_map(|b| [(xs.x(b.start_ns), value(b)), (xs.x(b.end_ns), value(b))])
                .collect::<Vec<_>>()
        };
        // A bucket's end state would miss every peak that falls between
        // two bucket ends: its most is drawn instead.
        let reserved = steps(&|b| scale.scale(b.max_reserved_bytes.max(b.reserved_bytes)));
        let allocated = steps(&|b| scale.scale(b.max_allocated_bytes.max(b.allocated_bytes)));
        let free = steps(&|b| scale.scale(b.cached_free_bytes));
        let largest = steps(&|b| scale.scale(b.largest_free_block));
        let ratio = steps(&|b| b.external_fragmentation);

        ctx.draw_series(AreaSeries::new(
            allocated.clone(),
            0.0,
            ALLOCATED_COLOUR.mix(0.35),
        ))
        .map_err(super::draw_error)?;
        ctx.draw_series(LineSeries::new(reserved, palette::RESERVED.stroke_width(2)))
            .map_err(super::draw_error)?;
        ctx.draw_series(LineSeries::new(free, FREE_COLOUR.stroke_width(2)))
            .map_err(super::draw_error)?;
        ctx.draw_series(LineSeries::new(largest, LARGEST_COLOUR.stroke_width(2)))
            .map_err(super::draw_error)?;
        ctx.draw_secondary_series(DashedLineSeries::new(
            ratio,
            6,
            4,
            palette::ALERT.stroke_width(1),
        ))
        .map_err(super::draw_error)?;
        let (_, plot_y) = ctx.plotting_area().get_pixel_range();
        super::draw_legend_column(&legend_area, plot_y.start, &legend())?;

        bucket_tooltips(&ctx, buckets, &xs, &mut tips);
        root.present().map_err(super::draw_error)?;
    }
    tips.finish(&mut out);
    Ok(out)
}

/// The allocated area's colour.
const ALLOCATED_COLOUR: RGBColor = RGBColor(0, 114, 178);
/// The cached free line's colour.
const FREE_COLOUR: RGBColor = RGBColor(230, 159, 0);
/// The largest free block's line's colour.
const LARGEST_COLOUR: RGBColor = RGBColor(0, 158, 115);

/// The x scale along `axis`: each bucket starts at the event after the
/// ones before it.
fn x_scale(report: &FragmentationReport, axis: XAxis) -> XScale {
    let mut index = report.first_index;
    let knots: Vec<(u64, u64)> = report
        .buckets
        .iter()
        .flat_map(|b| {
            let start = (index, b.start_ns);
            index += b.events;
            [start, (index, b.end_ns)]
        })
        .collect();
    XScale::new(axis, knots, &report.idle)
}

/// The legend's entries, one per series.
fn legend() -> [LegendEntry; 5] {
    [
        LegendEntry::new(
            "allocated (most in each bucket)",
            palette::on_white(ALLOCATED_COLOUR, 0.35),
            Mark::Area,
        ),
        LegendEntry::new(
            "reserved (most in each bucket)",
            palette::RESERVED,
            Mark::Line,
        ),
        LegendEntry::new(
            "cached free at each bucket's end\n(reserved - allocated)",
            FREE_COLOUR,
            Mark::Line,
        ),
        LegendEntry::new("largest free block (at end)", LARGEST_COLOUR, Mark::Line),
        LegendEntry::new(
            "external fragmentation\n(at end, right axis)",
            palette::ALERT,
            Mark::Dashed,
        ),
    ]
}

/// A tooltip over each bucket (those narrower than 3 pixels after the last
/// one left out) with its figures.
fn bucket_tooltips(
    ctx: &TimeBytesChart<'_, '_>,
    buckets: &[FragmentationBucket],
    xs: &XScale,
    tips: &mut Tooltips,
) {
    let (_, y_range) = ctx.plotting_area().get_pixel_range();
    let mut last_x = i32::MIN;
    for b in buckets {
        let (x0, _) = ctx.backend_coord(&(xs.x(b.start_ns), 0.0));
        let (x1, _) = ctx.backend_coord(&(xs.x(b.end_ns), 0.0));
        if x1 < last_x + 3 {
            continue;
        }
        last_x = x1;
        tips.rect(
            x0,
            y_range.start,
            (x1 - x0).max(3),
            y_range.end - y_range.start,
            &format!(
                "{} – {}\nreserved: most {}, at end {}\nallocated: most {}, at end {}\nat end:\ncached free {}\nlargest free block {}\nexternal fragmentation {}\ninternal fragmentation {}\nsegments {}",
                units::duration_ns(b.start_ns),
                units::duration_ns(b.end_ns),
                units::bytes(b.max_reserved_bytes.max(b.reserved_bytes)),
                units::bytes(b.reserved_bytes),
                units::bytes(b.max_allocated_bytes.max(b.allocated_bytes)),
                units::bytes(b.allocated_bytes),
                units::bytes(b.cached_free_bytes),
                units::bytes(b.largest_free_block),
                units::percent(b.external_fragmentation),
                units::bytes(b.internal_fragmentation_bytes),
                b.segments
            ),
        );
    }
}
