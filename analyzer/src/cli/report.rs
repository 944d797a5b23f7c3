//! `vramtrace report`: every analysis of a trace in one self-contained HTML
//! page.

use super::analyze::CommonArgs;
use super::analyze::add_free_space;
use super::compare::measure;
use super::timeline::{file_name, write_chart};
use crate::analysis::Analysis;
use crate::analysis::compare::{CompareOptions, RunFigures, compare};
use crate::analysis::fragmentation::Fragmentation;
use crate::analysis::leaks::Leaks;
use crate::analysis::phase_totals::PhaseTotals;
use crate::analysis::site_totals::SiteTotals;
use crate::analysis::summary::Summary;
use crate::analysis::timeline::{GroupBy, TimelineAnalysis, TimelineOptions};
use crate::render::diff::{AlignBy, DiffRun};
use crate::render::palette::Palette;
use crate::render::report::{Charts, ReportInput, Section};
use crate::render::{self};
use crate::units;
use anyhow::bail;
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace_format::EventSource;

/// Arguments of `vramtrace report`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Where to write the report (HTML).
    #[arg(short, long, value_name = "FILE.html")]
    output: PathBuf,
    /// Sites shown by name in the timeline and the tables.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=24))]
    top: u32,
    /// Compare with this baseline run (a trace or a snapshot): adds a
    /// comparison section, as `vramtrace compare` shows it.
    #[arg(long, value_name = "BASE")]
    baseline: Option<PathBuf>,
}

/// Buckets of the fragmentation chart: about one per two pixels.
const CHART_BUCKETS: usize = 400;

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    args.common.validate()?;
    if args.common.traces.len() != 1 {
        bail!("report takes one trace (compare it with another one with --baseline BASE)");
    }
    let path = &args.common.traces[0];
    let mut prepared = args.common.prepare(path)?;
    let header = prepared.input.header().clone();
    // A comparison matches every site at the peak, so with a baseline the
    // summary keeps them all and the report's tables take the top ones.
    let mut summary = Summary::new(if args.baseline.is_some() {
        usize::MAX
    } else {
        args.top as usize
    });
    let mut fragmentation = Fragmentation::new(CHART_BUCKETS);
    let mut leaks = Leaks::new();
    let mut site_totals = SiteTotals::new();
    let mut phase_totals = PhaseTotals::new();
    let mut timeline = TimelineAnalysis::new(TimelineOptions {
        group_by: GroupBy::Site,
        top: args.top as usize,
        ..TimelineOptions::default()
    });
    // The baseline replays on its own thread while this run does.
    let (info, baseline) = rayon::join(
        || {
            let mut analyses: Vec<&mut dyn Analysis> =
                vec![&mut summary, &mut fragmentation, &mut leaks, &mut timeline];
            if args.baseline.is_some() {
                analyses.push(&mut site_totals);
                analyses.push(&mut phase_totals);
            }
            prepared.run(&mut analyses)
        },
        || {
            args.baseline
                .as_ref()
                .map(|b| measure(&args.common, b))
                .transpose()
        },
    );
    let (info, baseline) = (info?, baseline?);
    let mut summary = summary.into_report().unwrap_or_default();
    add_free_space(&mut summary, path)?;
    let fragmentation = fragmentation.into_report().unwrap_or_default();
    let leaks = leaks.into_report().unwrap_or_default();
    let timeline = timeline.into_timeline();
    let mut extra_sections = Vec::new();
    if let Some(base) = baseline {
        let new = RunFigures {
            name: file_name(path),
            summary: summary.clone(),
            leaks: leaks.clone(),
            sites: site_totals.into_report().unwrap_or_default(),
            phases: phase_totals.into_report().unwrap_or_default(),
        };
        let options = CompareOptions {
            full_stacks: args.common.full_stacks,
            ..CompareOptions::default()
        };
        let comparison = compare(&base.figures, &new, options)?;
        let chart = render::diff::render(
            &DiffRun {
                name: &comparison.base.name,
                timeline: &base.timeline,
                iterations: comparison.base.iterations.as_ref(),
            },
            &DiffRun {
                name: &comparison.new.name,
                timeline: &timeline,
                iterations: comparison.new.iterations.as_ref(),
            },
            &comparison,
            AlignBy::Time,
            args.top as usize,
        )?;
        extra_sections.push(Section {
            id: "comparison".into(),
            title: format!("Compared with {}", comparison.base.name),
            html: render::diff::html_section(&comparison, &chart, args.top as usize),
        });
        summary.top_sites_at_peak.truncate(args.top as usize);
    }

    let name = file_name(path);
    // One palette for every chart: a site keeps its colour throughout.
    let mut palette = Palette::new();
    let charts = Charts {
        timeline: render::timeline::render(
            &timeline,
            &format!("Memory over time: {name}"),
            &mut palette,
        )?,
        fragmentation: render::fragmentation::render(
            &fragmentation,
            &format!("Fragmentation: {name}"),
        )?,
        leaks: leaks
            .growth
            .first()
            .or_else(|| leaks.repeated_phases.iter().max_by_key(|p| p.repetitions))
            .map(|phase| render::leaks::render(phase, &mut palette))
            .transpose()?,
    };
    let mut warnings = Vec::new();
    if let Some(t) = &info.truncation {
        warnings.push(format!("This trace was cut short: {t}."));
    } else if !info.complete && !info.stopped_early {
        warnings.push("This trace has no footer: the recording process did not close it, so its last events may be missing.".into());
    }
    let html = render::report::render(&ReportInput {
        name: &name,
        header: &header,
        summary: &summary,
        fragmentation: &fragmentation,
        leaks: &leaks,
        timeline: &timeline,
        charts,
        warnings,
        extra_sections,
    });
    write_chart(&args.output, &html)?;
    println!(
        "wrote {} ({}): peak allocated {}, reserved {}, {} leak(s), {} OOM(s)",
        args.output.display(),
        units::bytes(html.len() as u64),
        units::bytes(summary.peak_allocated_bytes),
        units::bytes(summary.peak_reserved_bytes),
        render::report::distinct_leaks(&leaks).len(),
        summary.oom_count
    );
    Ok(ExitCode::SUCCESS)
}
