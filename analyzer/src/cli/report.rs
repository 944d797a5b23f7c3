//! `vramtrace report`: every analysis of a trace in one self-contained HTML
//! page.

use super::analyze::CommonArgs;
use super::timeline::{file_name, write_chart};
use crate::analysis::fragmentation::Fragmentation;
use crate::analysis::leaks::Leaks;
use crate::analysis::summary::{Summary, free_space_at};
use crate::analysis::timeline::{GroupBy, TimelineAnalysis, TimelineOptions};
use crate::render::palette::Palette;
use crate::render::report::{Charts, ReportInput};
use crate::render::{self};
use crate::replay::ReplayState;
use crate::units;
use anyhow::bail;
use std::path::PathBuf;
use std::process::ExitCode;

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
}

/// Buckets of the fragmentation chart: about one per two pixels.
const CHART_BUCKETS: usize = 400;

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    args.common.validate()?;
    if args.common.traces.len() != 1 {
        bail!("report takes one trace (compare two runs with --baseline once available)");
    }
    let path = &args.common.traces[0];
    let mut prepared = args.common.prepare(path)?;
    let header = prepared.input.header().clone();
    let mut summary = Summary::new(args.top as usize);
    let mut fragmentation = Fragmentation::new(CHART_BUCKETS);
    let mut leaks = Leaks::new();
    let mut timeline = TimelineAnalysis::new(TimelineOptions {
        group_by: GroupBy::Site,
        top: args.top as usize,
        ..TimelineOptions::default()
    });
    let info = prepared.run(&mut [&mut summary, &mut fragmentation, &mut leaks, &mut timeline])?;
    let mut summary = summary.into_report().unwrap_or_default();
    if summary.peak_allocated_bytes > 0 {
        let mut input = super::open_input(path)?;
        let space = free_space_at(
            &mut input,
            ReplayState::default(),
            summary.peak_allocated.replayed_events,
        )?;
        summary.set_free_space_at_peak(space);
    }
    let fragmentation = fragmentation.into_report().unwrap_or_default();
    let leaks = leaks.into_report().unwrap_or_default();
    let timeline = timeline.into_timeline();

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
        extra_sections: Vec::new(),
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
