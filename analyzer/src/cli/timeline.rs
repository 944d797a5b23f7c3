//! `vramtrace timeline`: memory over time as an SVG chart.

use super::analyze::{CommonArgs, print_reports};
use crate::analysis::timeline::{GroupBy, Timeline, TimelineAnalysis, TimelineOptions};
use crate::render::{self, palette::Palette};
use crate::units;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `vramtrace timeline`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Where to write the chart (SVG).
    #[arg(short, long, value_name = "FILE.svg")]
    output: Option<PathBuf>,
    /// What the stacked areas are split by.
    #[arg(long, value_enum, default_value_t = GroupBy::Site)]
    by: GroupBy,
    /// Categories shown by name; the rest are summed as "other".
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=24))]
    top: u32,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    args.common.validate()?;
    if args.output.is_none() && !args.common.json {
        bail!("say where to write the chart with -o FILE.svg, or ask for --json");
    }
    if args.output.is_some() && args.common.traces.len() > 1 {
        bail!("-o takes one trace; draw several traces one at a time");
    }
    let mut timelines = Vec::new();
    for path in &args.common.traces {
        let timeline = compute(&args.common, path, args.by, args.top as usize)?;
        if let Some(output) = &args.output {
            let title = format!("Memory over time: {}", file_name(path));
            let svg = render::timeline::render(&timeline, &title, &mut Palette::new())?;
            write_chart(output, &svg)?;
            if !args.common.json {
                println!(
                    "wrote {} ({}): {} samples, {} categories, peak {}",
                    output.display(),
                    units::bytes(svg.len() as u64),
                    timeline.samples.len(),
                    timeline.categories.len(),
                    timeline
                        .peak
                        .as_ref()
                        .map_or("none".into(), |p| units::bytes(p.bytes))
                );
            }
        }
        timelines.push(timeline);
    }
    if args.common.json {
        print_reports(&timelines)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Replays one trace into a timeline.
pub fn compute(
    common: &CommonArgs,
    path: &Path,
    by: GroupBy,
    top: usize,
) -> anyhow::Result<Timeline> {
    let mut prepared = common.prepare(path)?;
    let mut analysis = TimelineAnalysis::new(TimelineOptions {
        group_by: by,
        top,
        ..TimelineOptions::default()
    });
    prepared.run(&mut [&mut analysis])?;
    Ok(analysis.into_timeline())
}

/// The last component of a path, for chart titles.
pub fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Writes a chart, naming the file in the error.
pub fn write_chart(path: &Path, svg: &str) -> anyhow::Result<()> {
    std::fs::write(path, svg).with_context(|| format!("cannot write {}", path.display()))
}
