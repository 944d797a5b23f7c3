//! `fragmentation`: cached and fragmented memory over time.

use super::{ByDevice, Replay, ReplayOptions, Warning};
use crate::Error;
use crate::analysis::fragmentation::{Fragmentation, FragmentationReport};
use crate::analysis::pauses::XAxis;
use crate::input::Input;
use crate::progress::Progress;
use serde::Serialize;

/// What `fragmentation` computes.
#[derive(Clone, Debug, Default)]
pub struct FragmentationOptions {
    /// The window and site folding.
    pub replay: ReplayOptions,
    /// Buckets of the series (of time, with a window bounded by phases
    /// between this and twice it).
    pub buckets: usize,
    /// What the series' buckets divide evenly: time, busy time or events.
    pub axis: XAxis,
    /// Also a finer series for a chart, of this many buckets.
    pub chart_buckets: Option<usize>,
}

/// How many times finer the series of time is that is regrouped into
/// buckets of busy time or events.
const FINER: usize = 64;
/// The most buckets of such a finer series (each costs a sweep of the free
/// space), unless more buckets are asked for.
const MAX_FINER_BUCKETS: usize = 16_384;

/// The fragmentation series of one input.
#[derive(Clone, Debug, Serialize)]
pub struct FragmentationResult {
    /// The input's path.
    pub path: String,
    /// The series.
    #[serde(flatten)]
    pub report: FragmentationReport,
    /// The finer series for a chart, when asked for.
    #[serde(skip)]
    pub chart: Option<FragmentationReport>,
    /// What the pass found worth a warning.
    #[serde(skip)]
    pub warnings: Vec<Warning>,
}

/// Computes each device's fragmentation series (and the chart's, from the
/// same pass).
pub fn fragmentation(
    input: &Input,
    options: &FragmentationOptions,
    progress: &dyn Progress,
) -> Result<ByDevice<FragmentationResult>, Error> {
    let replay = Replay::new(input, &options.replay, progress)?.without_categories();
    // Exactly N buckets need the window's time span before the pass: the
    // chunks' times, read without decoding. A window bounded by phases has
    // times known only once replayed; its buckets adapt instead.
    let span = super::known_span(input, replay.window())?;
    let make = |n: usize| match span {
        Some((start, end)) => Fragmentation::with_span(n, start, end),
        None => Fragmentation::new(n),
    };
    // On another axis than time, a finer series of time is regrouped.
    let series_buckets = match options.axis {
        XAxis::Time => options.buckets,
        _ => (options.buckets * FINER).min(options.buckets.max(MAX_FINER_BUCKETS)),
    };
    replay.by_device(
        |_| (make(series_buckets), options.chart_buckets.map(make)),
        |(series, chart), _| {
            let series = replay.result(series.into_report())?;
            Ok(FragmentationResult {
                path: input.path().display().to_string(),
                report: series.regrouped(options.buckets, options.axis),
                chart: chart.map(|c| replay.result(c.into_report())).transpose()?,
                warnings: Vec::new(),
            })
        },
    )
}
