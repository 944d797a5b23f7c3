//! `vramtrace compare BASE NEW`: did a change make memory worse, where, and
//! by how much; a CI gate with `--fail-on`.

use super::common::{
    Files, InputArgs, ReplayArgs, TextArgs, XArg, chart_x_axis, open, shown, warn_about_set,
};
use super::progress::Bars;
use super::{warn_inputs, write_file};
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace::analysis::compare::{MatchOptions, Threshold, ThresholdError, parse_thresholds};
use vramtrace::analysis::pauses::XAxis;
use vramtrace::command::compare::{CompareCommandOptions, compare};
use vramtrace::command::ranks::{self, IN_FLIGHT, set::SetOptions};
use vramtrace::input::folders::expand_folders;
use vramtrace::print::{self, svg::diff::AlignBy};
use vramtrace::units;

/// Exit code when a `--fail-on` threshold is crossed.
pub const EXIT_GATE: u8 = 1;

/// Arguments of `vramtrace compare`.
#[derive(clap::Args)]
pub struct Args {
    /// The baseline run: a trace or a PyTorch snapshot, or a folder of a
    /// distributed run's traces (one per rank).
    #[arg(value_name = "BASE")]
    base: PathBuf,
    /// The run to check against it: a trace or a PyTorch snapshot, or a
    /// folder of rank traces (rank i against rank i of BASE).
    #[arg(value_name = "NEW")]
    new: PathBuf,
    #[command(flatten)]
    input: InputArgs,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    text: TextArgs,
    /// Fail (exit code 1) when a figure changed this much:
    /// METRIC:+CHANGE or METRIC:-CHANGE, comma-separated or repeated.
    /// CHANGE is a percentage or an amount (100MiB, 2s, 1, 5pp); metrics:
    /// peak_allocated, peak_reserved, peak_requested, cached_free,
    /// fragmentation, leak, ooms, duration, events. See docs/compare.md.
    #[arg(long, value_name = "METRIC:CHANGE,...", value_parser = parse_gate)]
    fail_on: Vec<Thresholds>,
    /// Match sites by function and file, not line, so that an edit moving
    /// code does not break the matching.
    #[arg(long)]
    ignore_lines: bool,
    /// Compare duration, events, allocations and retained bytes per
    /// repetition of each run's most repeated phase (runs of different
    /// lengths).
    #[arg(long)]
    per_iteration: bool,
    /// Write the comparison chart (SVG): both timelines, and the sites that
    /// changed most.
    #[arg(short, long, value_name = "FILE.svg")]
    output: Option<PathBuf>,
    /// The chart's horizontal axis.
    #[arg(long, value_enum, default_value_t, requires = "output")]
    align: Align,
    /// What the chart's x axis measures when it is aligned by time: time,
    /// the event index, or busy time (idle gaps cut short). Default: busy
    /// time when either run is a PyTorch snapshot or a trace whose idle
    /// gaps (start-up, pauses) take a quarter of its span or more; else
    /// time. `--x time` draws the wall-clock axis.
    #[arg(long = "x", value_enum, requires = "output")]
    x: Option<XArg>,
    /// Sites and phases listed (and drawn).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..=1000))]
    top: u32,
    #[command(flatten)]
    replay: ReplayArgs,
}

/// The chart's horizontal axis.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
enum Align {
    /// Time since each run's first event.
    #[default]
    Time,
    /// Repetitions of each run's most repeated phase, so runs at different
    /// speeds line up iteration by iteration.
    Repetition,
}

/// One `--fail-on` value: a comma-separated list of thresholds.
#[derive(Clone, Debug)]
struct Thresholds(Vec<Threshold>);

fn parse_gate(text: &str) -> Result<Thresholds, ThresholdError> {
    parse_thresholds(text).map(Thresholds)
}

impl Args {
    /// What it reads (two runs, each a trace or a folder) and writes.
    pub fn files(&self) -> Files<'_> {
        Files::new(
            [self.base.as_path(), self.new.as_path()],
            [self.output.as_deref(), self.text.output()],
        )
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = CompareCommandOptions {
        replay: args.replay.options()?,
        matching: MatchOptions {
            ignore_lines: args.ignore_lines,
            per_iteration: args.per_iteration,
            full_stacks: args.replay.full_stacks,
        },
        thresholds: args.fail_on.iter().flat_map(|t| t.0.clone()).collect(),
    };
    super::common::check_svg_name(args.output.as_deref())?;
    if args.base.is_dir() || args.new.is_dir() {
        return rank_sets(&args, &options);
    }
    let progress = Bars::new();
    // Snapshots are parsed side by side, as the passes then run.
    let (base, new) = rayon::join(
        || open(&args.base, &args.input, &progress),
        || open(&args.new, &args.input, &progress),
    );
    let (base, new) = (base?, new?);
    let results = compare(&base, &new, &options, &progress)?;
    warn_inputs(&results.warnings);
    if let Some(output) = &args.output {
        let (result, _) = shown(&args.new, &results)?;
        let align = match args.align {
            Align::Time => AlignBy::Time,
            Align::Repetition => AlignBy::Repetition,
        };
        let svg = print::svg::diff::chart(
            result,
            align,
            // Busy time when either run's chart would open on it.
            match chart_x_axis(args.x, &base, &result.base_timeline) {
                XAxis::Busy => XAxis::Busy,
                _ => chart_x_axis(args.x, &new, &result.new_timeline),
            },
            args.top as usize,
        )?;
        write_file(output, svg.as_bytes())?;
        if !args.json {
            println!(
                "wrote {} ({})\n",
                output.display(),
                units::bytes(svg.len() as u64)
            );
        }
    }
    args.text.print(
        args.json,
        || print::json(&results),
        || {
            print::text::by_device(&results, |result| {
                print::text::compare(result, args.top as usize, args.replay.full_stacks)
            })
        },
    )?;
    if args.json {
        // Whoever reads the JSON may not show it: say why the exit code is 1.
        for d in &results.devices {
            for failed in &d.result.gate.failed {
                eprintln!(
                    "threshold crossed: {}",
                    vramtrace::print::printable(&failed.to_string())
                );
            }
        }
    }
    Ok(if results.devices.iter().all(|d| d.result.gate.passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_GATE)
    })
}

/// Two rank sets (folders): rank i of NEW against rank i of BASE, a few
/// pairs at a time; the gate fails when it fails on any rank.
fn rank_sets(args: &Args, options: &CompareCommandOptions) -> anyhow::Result<ExitCode> {
    if args.output.is_some() {
        anyhow::bail!("-o draws two traces: compare one rank's traces to draw it");
    }
    let base = expand_folders(std::slice::from_ref(&args.base))?;
    let new = expand_folders(std::slice::from_ref(&args.new))?;
    let progress = Bars::new();
    let set_options = SetOptions {
        input: args.input.options(),
        in_flight: IN_FLIGHT,
    };
    let run = ranks::set::compare(&base, &new, &set_options, options, &progress)?;
    warn_about_set(&run.warnings);
    args.text.print(
        args.json,
        || print::json(&run),
        || print::text::rank_compare(&run.result),
    )?;
    Ok(if run.result.rows.iter().all(|r| r.result.gate.passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_GATE)
    })
}
