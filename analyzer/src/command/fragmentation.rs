//! `fragmentation`: cached and fragmented memory over time.

use super::{ByDevice, Replay, ReplayOptions, Warning};
use crate::Error;
use crate::analysis::fragmentation::{Fragmentation, FragmentationReport};
use crate::input::Input;
use crate::progress::Progress;
use serde::Serialize;

/// What `fragmentation` computes.
#[derive(Clone, Debug, Default)]
pub struct FragmentationOptions {
    /// The window and site folding.
    pub replay: ReplayOptions,
    /// Time buckets of the series (with a window bounded by phases, between
    /// this and twice it).
    pub buckets: usize,
    /// Also a finer series for a chart, of this many buckets.
    pub chart_buckets: Option<usize>,
}

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
    let window = replay.window();
    let span = if window.from_index.is_some() || window.to_index.is_some() {
        None
    } else {
        input.scan()?.times.and_then(|(first, last)| {
            let start = first.max(window.from_ns.unwrap_or(0));
            let end = last.min(window.to_ns.unwrap_or(u64::MAX));
            (start <= end).then_some((start, end))
        })
    };
    let make = |n: usize| match span {
        Some((start, end)) => Fragmentation::with_span(n, start, end),
        None => Fragmentation::new(n),
    };
    replay.by_device(
        |_| (make(options.buckets), options.chart_buckets.map(make)),
        |(series, chart), _| {
            Ok(FragmentationResult {
                path: input.path().display().to_string(),
                report: replay.result(series.into_report())?,
                chart: chart.map(|c| replay.result(c.into_report())).transpose()?,
                warnings: Vec::new(),
            })
        },
    )
}
