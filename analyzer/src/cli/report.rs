//! `vramtrace report`: every analysis of a trace in one self-contained HTML
//! page.

use super::common::{Files, InputArgs, RankArgs, ReplayArgs, open, rank_inputs, warn_about_set};
use super::progress::Bars;
use super::{emit, warn_about, write_file};
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace::command::ranks;
use vramtrace::command::report::{ReportOptions, ReportWritten, WrittenFile, report};
use vramtrace::{print, units};

/// Arguments of `vramtrace report`.
#[derive(clap::Args)]
pub struct Args {
    /// The trace (or PyTorch snapshot) to report on; compare it with
    /// another run with --baseline. Several traces, or a folder, of a
    /// distributed run's ranks (see --ranks): the page is that of the rank
    /// whose peak is highest, with a section on every rank.
    #[arg(value_name = "TRACE", required = true)]
    traces: Vec<PathBuf>,
    #[command(flatten)]
    ranks: RankArgs,
    /// Where to write the report (HTML).
    #[arg(short, long, value_name = "FILE.html")]
    output: PathBuf,
    /// Print what was written and the findings as JSON instead of a line
    /// of text.
    #[arg(long)]
    json: bool,
    /// Sites shown by name in the timeline and the tables.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=24))]
    top: u32,
    /// Compare with this baseline run (a trace or a snapshot): adds a
    /// comparison section, as `vramtrace compare` shows it.
    #[arg(long, value_name = "BASE")]
    baseline: Option<PathBuf>,
    /// Leave out the what-if section (the recorded settings simulated at a
    /// range of capacities), which costs a few simulations of the trace.
    #[arg(long)]
    no_what_if: bool,
    /// Memory each device of the what-if keeps off the allocator for the
    /// CUDA context (and NCCL), as `simulate --reserve` takes it. Default:
    /// an estimate, 512MiB, and 1GiB more when the trace shows NCCL.
    #[arg(long, value_name = "SIZE", value_parser = units::parse_bytes)]
    reserve: Option<u64>,
    #[command(flatten)]
    replay: ReplayArgs,
    #[command(flatten)]
    input: InputArgs,
}

impl Args {
    /// What it reads (the traces or folders, and the baseline) and writes.
    pub fn files(&self) -> Files<'_> {
        Files::new(
            (self.traces.iter())
                .chain(self.baseline.as_ref())
                .map(PathBuf::as_path),
            [Some(self.output.as_path())],
        )
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = ReportOptions {
        replay: args.replay.options()?,
        top: args.top as usize,
        explorer: Default::default(),
        what_if: !args.no_what_if,
        reserve: args.reserve,
    };
    let progress = Bars::new();
    let (traces, set) = rank_inputs(&args.traces, &args.ranks, &args.input)?;
    if !set && traces.len() > 1 {
        anyhow::bail!(
            "a report is of one trace, or of the ranks of one run: these {} traces' headers do not say they are (--ranks reads them as ranks)",
            traces.len()
        );
    }
    let (input, baseline, result) = if set {
        if args.baseline.is_some() {
            anyhow::bail!("--baseline compares one trace: report one rank's trace to compare it");
        }
        let set_options = args.ranks.set_options(&args.input);
        let run = ranks::set::report_section(&traces, &set_options, &options.replay, &progress)?;
        warn_about_set(&run.warnings);
        let ((section, highest), warnings) = (run.result, run.warnings);
        let input = open(&highest, &args.input, &progress)?;
        let section = ranks::set::SetRun {
            result: section,
            warnings,
        };
        // Each rank's warnings are told once, by the rank pass: the
        // result's are the others.
        let result = ranks::set::report(&input, section, &options, &progress)?;
        (input, None, result)
    } else {
        // Snapshots are parsed side by side, as the passes then run.
        let (input, baseline) = rayon::join(
            || open(&traces[0], &args.input, &progress),
            || {
                args.baseline
                    .as_ref()
                    .map(|b| open(b, &args.input, &progress))
                    .transpose()
            },
        );
        let (input, baseline) = (input?, baseline?);
        let result = report(&input, baseline.as_ref(), &options, &progress)?;
        (input, baseline, result)
    };
    warn_about(input.path(), &result.warnings);
    if !result.devices.is_empty() {
        let others: Vec<String> = (result.devices.iter())
            .filter(|d| d.device != result.device)
            .map(|d| d.device.to_string())
            .collect();
        super::warn(format_args!(
            "{}: the report shows device {}, whose allocated peak is highest; --device N shows another ({})",
            input.path().display(),
            result.device,
            others.join(", ")
        ));
    }
    if let Some(b) = &baseline {
        warn_about(b.path(), &result.baseline_warnings);
    }
    let html = print::html::report(&result, options.top)?;
    write_file(&args.output, html.as_bytes())?;
    let written = ReportWritten {
        wrote: WrittenFile {
            path: args.output.display().to_string(),
            bytes: html.len() as u64,
        },
        report: &result,
    };
    if args.json {
        emit(&print::json(&written))?;
    } else {
        emit(&print::text::report_written(&written))?;
    }
    Ok(ExitCode::SUCCESS)
}
