//! `report`: every analysis of a trace, for one self-contained HTML page
//! (see [`print::html`](crate::print::html)), and with a baseline, its
//! comparison. The trace and the baseline are each replayed once, side by
//! side.

use super::compare::{Measured, measure};
use super::flamegraph::FlameGraph;
use super::{ByDevice, Pass, Replay, ReplayOptions, Warning, file_name};
use crate::Error;
use crate::analysis::compare::{Comparison, MatchOptions, RunFigures, compare};
use crate::analysis::explorer::{Explorer, ExplorerAnalysis, ExplorerOptions};
use crate::analysis::fragmentation::{Fragmentation, FragmentationReport};
use crate::analysis::leaks::{Leaks, LeaksReport};
use crate::analysis::pauses::XAxis;
use crate::analysis::peaks::DevicePeaks;
use crate::analysis::phase_totals::PhaseTotals;
use crate::analysis::site_totals::SiteTotals;
use crate::analysis::summary::{Summary, SummaryReport};
use crate::analysis::timeline::{GroupBy, Timeline, TimelineAnalysis, TimelineOptions};
use crate::analysis::{AnalysisSet, DevicePass};
use crate::input::Input;
use crate::progress::Progress;
use crate::simulate::Reserve;
use crate::simulate::fixes::FixesTried;
use crate::simulate::requests::RequestList;
use crate::simulate::what_if::{WhatIf, what_if};
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
    /// What the explorer keeps (its bounds on the page's size).
    pub explorer: ExplorerOptions,
    /// Simulate the recorded settings at a range of capacities.
    pub what_if: bool,
    /// Memory each simulated device keeps off the allocator for the CUDA
    /// context (and NCCL), as `simulate` takes it: estimated when `None`.
    pub reserve: Option<u64>,
}

pub use crate::simulate::bounded::{BoundedRequests, WHAT_IF_MAX_EVENTS};

/// Everything the report shows about one trace.
#[derive(Clone, Debug, Serialize)]
pub struct ReportResult {
    /// The trace's path.
    pub path: String,
    /// Its file name, as the report's title shows it.
    pub name: String,
    /// Its header.
    pub header: Header,
    /// The device shown.
    pub device: u32,
    /// The rank set the trace belongs to, when the report is of one (the
    /// page shows the rank whose peak is highest).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<super::ranks::RanksSection>,
    /// The peaks of every device, when there are several (the page shows
    /// one: see [`ReportOptions`]'s replay options for choosing it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DevicePeaks>,
    /// The summary.
    pub summary: SummaryReport,
    /// Fragmentation over time, at the chart's resolution.
    pub fragmentation: FragmentationReport,
    /// The leaks.
    pub leaks: LeaksReport,
    /// Memory over time by site.
    pub timeline: Timeline,
    /// Allocated memory over time by what it holds.
    pub category_timeline: Timeline,
    /// What the page's explorer draws (too large for JSON).
    #[serde(skip)]
    pub explorer: Explorer,
    /// The memory live at the allocated peak, by stack (in JSON from
    /// `flamegraph --json`).
    #[serde(skip)]
    pub flame: Option<FlameGraph>,
    /// The x axis the page opens with: busy time for a snapshot (whose
    /// history holds long pauses), time for a trace.
    pub default_axis: XAxis,
    /// The recorded settings at a range of capacities (not for a window).
    pub what_if: Option<WhatIf>,
    /// Why there is no what-if section, when one was asked for (a
    /// sentence in JSON).
    pub what_if_left_out: Option<LeftOut>,
    /// Where the recorded run ran out of memory: the fixes tried, each
    /// replayed under the recorded limit (not for a window).
    pub fixes: Option<FixesTried>,
    /// The comparison with the baseline, when there is one.
    pub comparison: Option<Comparison>,
    /// With a baseline at another batch size (or sequence length), both
    /// noted by the runs: the largest that fits, planned from the two.
    pub fits_up_to: Option<super::plan::FitsUpTo>,
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

/// Why a report has no what-if section, worded by
/// [`print::words::report::left_out`](crate::print::words::report::left_out)
/// (and so in JSON: its `Serialize` is there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeftOut {
    /// The report is of a window: the simulation replays the whole run.
    Window,
    /// The trace has more than [`WHAT_IF_MAX_EVENTS`] events.
    TooManyEvents,
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
    // The request extractor needs the recorded device's size before the
    // pass, which the header read at opening gives.
    let header = input.header().clone();
    let header_devices = header.devices.clone();
    let recorded_config =
        vramtrace_allocator::AllocatorConfig::from_settings(&header.allocator_settings)
            .ok()
            .map(|(config, _)| config);
    // What-if runs the whole trace's requests: not for a window.
    let what_if_runs = options.what_if && replay.window().is_all();
    // Exactly the chart's buckets when the span is known: an adaptive
    // series sweeps the free space once per bucket of every width it
    // passes through (400,000 live segments made that n log² n).
    let span = super::known_span(input, replay.window())?;
    let make = |device: u32| {
        let recorded_capacity = crate::simulate::device_capacity(&header_devices, device);
        let requests =
            what_if_runs.then(|| BoundedRequests::new(recorded_capacity, recorded_config.clone()));
        ReportAnalyses::new(options, baseline.is_some(), span, requests)
    };
    // The baseline replays on its own thread while this run does.
    let (passes, base) = rayon::join(
        || replay.run(make),
        || {
            baseline
                .map(|b| measure(b, &options.replay, progress))
                .transpose()
        },
    );
    let ((passes, pass), base) = (passes?, base?);
    let (devices, shown) = shown_device(&replay, passes)?;
    let Some((shown_peaks, analyses)) = shown else {
        return Err(Error::NoSuchDevice {
            path: input.path().to_owned(),
            device: options.replay.device.unwrap_or(0),
            seen: Vec::new(),
        });
    };
    let ReportAnalyses {
        summary,
        fragmentation,
        leaks,
        timeline,
        category_timeline,
        explorer,
        requests,
        site_totals,
        phase_totals,
    } = analyses;
    let recorded_capacity = crate::simulate::device_capacity(&header_devices, shown_peaks.device);
    let what_if_left_out = what_if_left_out(options, &replay, requests.as_ref());
    let (list, fixes) = match requests.filter(|r| !r.over()) {
        Some(mut r) => {
            let fixes = r.take_fixes();
            (Some(replay.result(r.into_list())?), fixes)
        }
        None => (None, None),
    };
    let mut summary = super::summary::of_window(replay.result(summary.into_report())?, &pass);
    let limit_warnings = summary.limit_warnings.clone();
    // The reserve the recording measured (the most memory outside the
    // allocator at any device-memory sample), unless one is stated.
    let measured_reserve = summary.outside_allocator.map(|o| o.max_bytes);
    let what_if = list.map(|list| {
        what_if_of(
            &list,
            &pass,
            options.reserve,
            measured_reserve,
            recorded_capacity,
        )
    });
    let leaks = replay.result(leaks.into_report())?;
    let (comparison, base_timeline, baseline_warnings) = match (base, site_totals, phase_totals) {
        (Some(base), Some(site_totals), Some(phase_totals)) => {
            let new = RunFigures {
                name: file_name(input.path()),
                summary: summary.clone(),
                leaks: leaks.clone(),
                sites: replay.result(site_totals.into_report())?,
                phases: replay.result(phase_totals.into_report())?,
            };
            let (comparison, base_timeline, warnings) =
                against_baseline(base, shown_peaks.device, &new, options)?;
            // The comparison matched every site; the tables show the top.
            summary.top_sites_at_peak.truncate(options.top);
            (Some(comparison), Some(base_timeline), warnings)
        }
        _ => (None, None, Vec::new()),
    };
    let fits_up_to = baseline.and_then(|b| {
        super::plan::fits_up_to(input, b, options.reserve, options.replay.device, progress)
    });
    let timeline = drawn(
        replay.result(timeline.into_report())?,
        &summary,
        recorded_capacity,
    );
    let category_timeline = drawn(
        replay.result(category_timeline.into_report())?,
        &summary,
        recorded_capacity,
    );
    let flame = flame_at_peak(input, options, &shown_peaks, progress)?;
    let default_axis = super::chart_axis(input, &timeline);
    Ok(ReportResult {
        flame,
        path: input.path().display().to_string(),
        name: file_name(input.path()),
        header: pass.header,
        device: shown_peaks.device,
        devices: if devices.len() > 1 {
            devices
        } else {
            Vec::new()
        },
        ranks: None,
        summary,
        fragmentation: replay.result(fragmentation.into_report())?,
        leaks,
        timeline,
        category_timeline,
        explorer: replay.result(explorer.into_report())?,
        default_axis,
        what_if,
        what_if_left_out,
        fixes,
        comparison,
        fits_up_to,
        base_timeline,
        warnings: (pass.warnings.into_iter())
            .chain(limit_warnings.into_iter().map(Warning::Memory))
            .collect(),
        baseline_warnings,
    })
}

/// Every device's peaks, and the device a page shows with its analyses:
/// the one asked for, else the one whose allocated peak is highest (the
/// first of equals); the others are listed in the page's table of devices.
fn shown_device(
    replay: &Replay<'_>,
    passes: Vec<DevicePass<ReportAnalyses>>,
) -> Result<(Vec<DevicePeaks>, Option<Shown>), Error> {
    let mut devices = Vec::with_capacity(passes.len());
    let mut shown = None;
    for p in passes {
        let peaks = replay.result(p.peaks.into_report(p.device))?;
        if shown
            .as_ref()
            .is_none_or(|(s, _): &Shown| peaks.peak_allocated.bytes > s.peak_allocated.bytes)
        {
            shown = Some((peaks.clone(), p.analyses));
        }
        devices.push(peaks);
    }
    Ok((devices, shown))
}

/// The device a page shows: its peaks and its analyses.
type Shown = (DevicePeaks, ReportAnalyses);

/// This run compared with the baseline's measure of the device shown (its
/// first device when it has no such device); with the baseline's timeline
/// and its warnings.
fn against_baseline(
    base: ByDevice<Measured>,
    device: u32,
    new: &RunFigures,
    options: &ReportOptions,
) -> Result<(Comparison, Timeline, Vec<Warning>), Error> {
    let index = base.devices.iter().position(|d| d.peaks.device == device);
    let warnings: Vec<Warning> = base.warnings.into_iter().map(|w| w.warning).collect();
    let mut devices = base.devices;
    let measured = devices.swap_remove(index.unwrap_or(0)).result;
    let matching = MatchOptions {
        full_stacks: options.replay.full_stacks,
        ..MatchOptions::default()
    };
    let comparison = compare(&measured.figures, new, matching)?;
    Ok((comparison, measured.timeline, warnings))
}

/// Why the what-if section was left out, when it was asked for and could
/// not be run: a window, or a trace with more events than it replays.
fn what_if_left_out(
    options: &ReportOptions,
    replay: &Replay<'_>,
    requests: Option<&BoundedRequests>,
) -> Option<LeftOut> {
    if !options.what_if {
        None
    } else if !replay.window().is_all() {
        Some(LeftOut::Window)
    } else if requests.is_some_and(BoundedRequests::over) {
        Some(LeftOut::TooManyEvents)
    } else {
        None
    }
}

/// The what-if section: the run's requests replayed under the recorded
/// settings (the defaults when they cannot be read), on the recorded
/// device less the reserve stated, measured or estimated.
fn what_if_of(
    list: &RequestList,
    pass: &Pass,
    stated_reserve: Option<u64>,
    measured_reserve: Option<u64>,
    recorded_capacity: Option<u64>,
) -> WhatIf {
    let recorded =
        vramtrace_allocator::AllocatorConfig::from_settings(&pass.header.allocator_settings);
    let (config, recorded_settings) = match recorded {
        Ok((config, _)) => (config, true),
        Err(_) => (Default::default(), false),
    };
    let reserve =
        Reserve::stated_measured_or_estimated(stated_reserve, measured_reserve, pass.shows_nccl);
    what_if(list, &config, recorded_settings, recorded_capacity, reserve)
}

/// The live memory at the allocated peak by stack: a second pass, up to
/// the peak, of the device shown.
fn flame_at_peak(
    input: &Input,
    options: &ReportOptions,
    shown: &DevicePeaks,
    progress: &dyn Progress,
) -> Result<Option<FlameGraph>, Error> {
    Ok(super::flamegraph::fold(
        input,
        &options.replay,
        crate::analysis::Devices::Only(shown.device),
        |_| super::flamegraph::fold_at_peak(&shown.peak_allocated),
        super::flamegraph::Moment::AllocatedPeak,
        progress,
    )?
    .devices
    .pop()
    .map(|d| d.result))
}

/// A timeline as the report draws it: with the limit that bounded the run
/// (its cap, when one is known, else the card's memory) and only the OOMs
/// the program did not survive (a cuDNN workspace's failure is not one).
fn drawn(mut t: Timeline, summary: &SummaryReport, card: Option<u64>) -> Timeline {
    match summary.limit.as_ref().filter(|l| l.is_cap()) {
        Some(cap) => {
            t.capacity_bytes = Some(cap.bytes);
            t.capacity_label = Some(cap.chart_label());
        }
        None => t.capacity_bytes = card,
    }
    t.ooms.retain(|p| {
        !summary
            .ooms
            .iter()
            .any(|o| o.survived && o.time_ns == p.time_ns && o.requested_bytes == p.bytes)
    });
    t
}

/// The analyses of a report's one pass over a device.
struct ReportAnalyses {
    summary: Summary,
    fragmentation: Fragmentation,
    leaks: Leaks,
    /// Memory over time by site, and by category.
    timeline: TimelineAnalysis,
    category_timeline: TimelineAnalysis,
    explorer: ExplorerAnalysis,
    /// The what-if section's requests (none for a window, or without it).
    requests: Option<BoundedRequests>,
    /// With a baseline, the totals a comparison matches sites and phases by.
    site_totals: Option<SiteTotals>,
    phase_totals: Option<PhaseTotals>,
}

impl ReportAnalyses {
    /// The analyses of one device. A comparison matches every site at the
    /// peak, so with a baseline the summary keeps them all and the report's
    /// tables take the top ones.
    fn new(
        options: &ReportOptions,
        with_baseline: bool,
        span: Option<(u64, u64)>,
        requests: Option<BoundedRequests>,
    ) -> Self {
        ReportAnalyses {
            summary: Summary::new(if with_baseline {
                usize::MAX
            } else {
                options.top
            }),
            fragmentation: match span {
                Some((start, end)) => Fragmentation::with_span(CHART_BUCKETS, start, end),
                None => Fragmentation::new(CHART_BUCKETS),
            },
            leaks: Leaks::new(),
            timeline: TimelineAnalysis::new(TimelineOptions {
                group_by: GroupBy::Site,
                top: options.top,
                ..TimelineOptions::default()
            }),
            category_timeline: TimelineAnalysis::new(TimelineOptions {
                group_by: GroupBy::Category,
                ..TimelineOptions::default()
            }),
            explorer: ExplorerAnalysis::new(options.explorer),
            requests,
            site_totals: with_baseline.then(SiteTotals::new),
            phase_totals: with_baseline.then(PhaseTotals::new),
        }
    }
}

impl AnalysisSet for ReportAnalyses {
    crate::analysis::analysis_set_members!(
        summary 0,
        fragmentation 1,
        leaks 2,
        timeline 3,
        category_timeline 4,
        explorer 5,
        requests 6,
        site_totals 7,
        phase_totals 8
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::limits::Limit;
    use crate::units;

    /// A cap inferred from an OOM is a range, not a fact: the chart's line
    /// says so (issue #44: "cap 9.34 GiB" was drawn for a 12 GiB cap).
    #[test]
    fn an_inferred_cap_is_drawn_as_inferred() {
        let summary = SummaryReport {
            limit: Some(Limit::inferred(9 << 30, (12 << 30) - 1)),
            ..SummaryReport::default()
        };
        let t = drawn(Timeline::default(), &summary, Some(140 << 30));
        assert_eq!(t.capacity_bytes, Some(9 << 30));
        let label = t.capacity_label.unwrap();
        assert!(label.contains("inferred"), "{label}");
        assert!(
            label.contains(&units::capacity(9 << 30))
                && label.contains(&units::capacity((12 << 30) - 1)),
            "{label}"
        );
    }

    #[test]
    fn a_recorded_cap_is_drawn_as_recorded() {
        let event = vramtrace_format::LimitEvent {
            limit_bytes: 12 << 30,
            total_bytes: 140 << 30,
            ..Default::default()
        };
        let summary = SummaryReport {
            limit: Some(Limit::of_event(&event).unwrap()),
            ..SummaryReport::default()
        };
        let t = drawn(Timeline::default(), &summary, Some(140 << 30));
        assert_eq!(
            t.capacity_label.unwrap(),
            format!("cap {}", units::capacity(12 << 30))
        );
    }
}
