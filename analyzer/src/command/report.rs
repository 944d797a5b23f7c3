//! `report`: every analysis of a trace, for one self-contained HTML page
//! (see [`print::html`](crate::print::html)), and with a baseline, its
//! comparison. The trace and the baseline are each replayed once, side by
//! side.

use super::compare::measure;
use super::{Replay, ReplayOptions, Warning, file_name};
use crate::Error;
use crate::analysis::Analysis;
use crate::analysis::compare::{CompareOptions, Comparison, RunFigures, compare};
use crate::analysis::fragmentation::{Fragmentation, FragmentationReport};
use crate::analysis::leaks::{Leaks, LeaksReport};
use crate::analysis::phase_totals::PhaseTotals;
use crate::analysis::site_totals::SiteTotals;
use crate::analysis::summary::{Summary, SummaryReport};
use crate::analysis::timeline::{GroupBy, Timeline, TimelineAnalysis, TimelineOptions};
use crate::input::Input;
use crate::progress::Progress;
use serde::Serialize;
use vramtrace_format::Header;

/// Buckets of the fragmentation chart: about one per two pixels.
pub const CHART_BUCKETS: usize = 400;

/// What `report` computes.
#[derive(Clone, Debug, Default)]
pub struct ReportOptions {
    /// The window and site folding.
    pub replay: ReplayOptions,
    /// Sites shown by name in the timeline and the tables.
    pub top: usize,
}

/// Everything the report shows about one trace.
#[derive(Clone, Debug, Serialize)]
pub struct ReportResult {
    /// The trace's path.
    pub path: String,
    /// Its file name, as the report's title shows it.
    pub name: String,
    /// Its header.
    pub header: Header,
    /// The summary.
    pub summary: SummaryReport,
    /// Fragmentation over time, at the chart's resolution.
    pub fragmentation: FragmentationReport,
    /// The leaks.
    pub leaks: LeaksReport,
    /// Memory over time by site.
    pub timeline: Timeline,
    /// The comparison with the baseline, when there is one.
    pub comparison: Option<Comparison>,
    /// The baseline's memory over time, for the comparison's chart.
    #[serde(skip)]
    pub base_timeline: Option<Timeline>,
    /// What the trace's pass found worth a warning.
    #[serde(skip)]
    pub warnings: Vec<Warning>,
    /// What the baseline's pass found worth a warning.
    #[serde(skip)]
    pub baseline_warnings: Vec<Warning>,
}

/// A file a command wrote.
#[derive(Clone, Debug, Serialize)]
pub struct WrittenFile {
    /// Its path, as given.
    pub path: String,
    /// Its size.
    pub bytes: u64,
}

/// What `report` wrote, and everything the report shows: `report --json`.
#[derive(Clone, Debug, Serialize)]
pub struct ReportWritten<'a> {
    /// The page.
    pub wrote: WrittenFile,
    /// The findings.
    #[serde(flatten)]
    pub report: &'a ReportResult,
}

/// Runs every analysis of a trace in one pass, and with a baseline, measures
/// it at the same time and compares the two.
pub fn report(
    input: &Input,
    baseline: Option<&Input>,
    options: &ReportOptions,
    progress: &dyn Progress,
) -> Result<ReportResult, Error> {
    let replay = Replay::new(input, &options.replay, progress)?;
    // A comparison matches every site at the peak, so with a baseline the
    // summary keeps them all and the report's tables take the top ones.
    let mut summary = Summary::new(if baseline.is_some() {
        usize::MAX
    } else {
        options.top
    });
    let mut fragmentation = Fragmentation::new(CHART_BUCKETS);
    let mut leaks = Leaks::new();
    let mut site_totals = SiteTotals::new();
    let mut phase_totals = PhaseTotals::new();
    let mut timeline = TimelineAnalysis::new(TimelineOptions {
        group_by: GroupBy::Site,
        top: options.top,
        ..TimelineOptions::default()
    });
    // The baseline replays on its own thread while this run does.
    let (pass, base) = rayon::join(
        || {
            let mut analyses: Vec<&mut dyn Analysis> =
                vec![&mut summary, &mut fragmentation, &mut leaks, &mut timeline];
            if baseline.is_some() {
                analyses.push(&mut site_totals);
                analyses.push(&mut phase_totals);
            }
            replay.run(&mut analyses)
        },
        || {
            baseline
                .map(|b| measure(b, &options.replay, progress))
                .transpose()
        },
    );
    let (pass, base) = (pass?, base?);
    let mut summary = replay.result(summary.into_report())?;
    let leaks = replay.result(leaks.into_report())?;
    let (comparison, base_timeline, baseline_warnings) = match base {
        Some(base) => {
            let new = RunFigures {
                name: file_name(input.path()),
                summary: summary.clone(),
                leaks: leaks.clone(),
                sites: replay.result(site_totals.into_report())?,
                phases: replay.result(phase_totals.into_report())?,
            };
            let matching = CompareOptions {
                full_stacks: options.replay.full_stacks,
                ..CompareOptions::default()
            };
            let comparison = compare(&base.figures, &new, matching)?;
            summary.top_sites_at_peak.truncate(options.top);
            (Some(comparison), Some(base.timeline), base.warnings)
        }
        None => (None, None, Vec::new()),
    };
    Ok(ReportResult {
        path: input.path().display().to_string(),
        name: file_name(input.path()),
        header: pass.header,
        summary,
        fragmentation: replay.result(fragmentation.into_report())?,
        leaks,
        timeline: replay.result(timeline.into_report())?,
        comparison,
        base_timeline,
        warnings: pass.warnings,
        baseline_warnings,
    })
}
