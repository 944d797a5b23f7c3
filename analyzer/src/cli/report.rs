//! `vramtrace report`: every analysis of a trace in one self-contained HTML
//! page.

use super::common::{CommonArgs, check_outputs, open};
use super::progress::Bars;
use super::{emit, warn_about, write_file};
use anyhow::bail;
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace::command::report::{ReportOptions, report};
use vramtrace::print;
use vramtrace::units;

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

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = ReportOptions {
        replay: args.common.replay.options()?,
        top: args.top as usize,
    };
    if args.common.traces.len() != 1 {
        bail!("report takes one trace (compare it with another one with --baseline BASE)");
    }
    check_outputs(
        [args.output.as_path()],
        args.common
            .traces
            .iter()
            .chain(args.baseline.as_ref())
            .map(PathBuf::as_path),
    )?;
    let progress = Bars::new();
    // Snapshots are parsed side by side, as the passes then run.
    let (input, baseline) = rayon::join(
        || open(&args.common.traces[0], &args.common.input, &progress),
        || {
            args.baseline
                .as_ref()
                .map(|b| open(b, &args.common.input, &progress))
                .transpose()
        },
    );
    let (input, baseline) = (input?, baseline?);
    let result = report(&input, baseline.as_ref(), &options, &progress)?;
    warn_about(input.path(), &result.warnings);
    if let Some(b) = &baseline {
        warn_about(b.path(), &result.baseline_warnings);
    }
    let html = print::html::report(&result, options.top)?;
    write_file(&args.output, html.as_bytes())?;
    if args.common.json {
        emit(&print::json(&result))?;
    } else {
        println!(
            "wrote {} ({}): peak allocated {}, reserved {}, {} leak(s), {} OOM(s)",
            args.output.display(),
            units::bytes(html.len() as u64),
            units::bytes(result.summary.peak_allocated_bytes),
            units::bytes(result.summary.peak_reserved_bytes),
            result.leaks.distinct_leaks().len(),
            result.summary.oom_count
        );
    }
    Ok(ExitCode::SUCCESS)
}
