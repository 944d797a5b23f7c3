//! `vramtrace export`: a trace as a Perfetto trace or a pprof profile.

use super::common::{CommonArgs, Files, open, print_json};
use super::progress::Bars;
use super::{warn_about, write_file};
use anyhow::bail;
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace::command::export::{perfetto, pprof};
use vramtrace::print::perfetto::{ProfilerTrace, join_profiler_trace};
use vramtrace::{print, units};

/// Arguments of `vramtrace export`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// The format written.
    #[arg(long, value_enum)]
    format: Format,
    /// Where to write it.
    #[arg(short, long, value_name = "FILE", required = true)]
    output: PathBuf,
    /// With perfetto: a torch.profiler trace of the same run
    /// (`prof.export_chrome_trace(...)`); the output is that trace with the
    /// memory tracks added, on its clock.
    #[arg(long, value_name = "TORCH_TRACE.json")]
    beside: Option<PathBuf>,
}

/// What `export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// Chrome trace-event JSON for Perfetto's UI (ui.perfetto.dev) and
    /// chrome://tracing: memory counters, phases as slices, OOMs and
    /// empty_cache() as instants, on Unix time beside a torch.profiler trace.
    Perfetto,
    /// A pprof profile (gzip-compressed profile.proto) of the memory live at
    /// the allocated peak by stack, for `go tool pprof` and speedscope.
    Pprof,
}

/// What was written, for --json.
#[derive(serde::Serialize)]
struct Written {
    path: String,
    format: &'static str,
    output: String,
    bytes: u64,
    /// Perfetto: counter samples; pprof: stacks.
    samples: usize,
}

impl Args {
    /// What it reads (the trace, and the profiler's trace it joins) and
    /// writes.
    pub fn files(&self) -> Files<'_> {
        let mut files = self.common.files([Some(self.output.as_path())]);
        files.inputs.extend(self.beside.as_deref());
        files
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = args.common.replay.options()?;
    if args.beside.is_some() && args.format != Format::Perfetto {
        bail!("--beside joins a torch.profiler trace: it goes with --format perfetto");
    }
    if args.common.traces.len() > 1 {
        bail!("export takes one trace; export several one at a time");
    }
    args.common.check_one_chart(Some(&args.output))?;
    let progress = Bars::new();
    let path = &args.common.traces[0];
    let input = open(path, &args.common.input, &progress)?;
    let (bytes, samples, what) = match args.format {
        Format::Perfetto => {
            let profiler = match &args.beside {
                Some(path) => {
                    let bytes = std::fs::read(path)
                        .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
                    let trace = ProfilerTrace::read(bytes)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                    Some(trace)
                }
                None => None,
            };
            let base = profiler.as_ref().map_or(0, |t| t.base_unix_ns);
            let export = perfetto(&input, &options, base, &progress)?;
            warn_about(input.path(), &export.warnings);
            let (samples, slices) = (export.samples, export.slices);
            let document = match profiler {
                Some(trace) => {
                    let joined = join_profiler_trace(trace, export)?;
                    if let Some(apart) = &joined.apart {
                        super::warn(format_args!("{}: {apart}", input.path().display()));
                    }
                    joined.bytes
                }
                None => serde_json::to_vec(&export.document)?,
            };
            (
                document,
                samples,
                format!(
                    "{} counter samples, {} phase slices{}",
                    units::count(samples as u64),
                    units::count(slices as u64),
                    if args.beside.is_some() {
                        ", in the torch.profiler trace"
                    } else {
                        ""
                    }
                ),
            )
        }
        Format::Pprof => {
            let export = pprof(&input, &options, &progress)?;
            warn_about(input.path(), &export.warnings);
            let profile = print::pprof::profile(&export.graphs, export.start_unix_ns);
            let stacks = profile.sample.len();
            (
                print::pprof::encode(&profile)?,
                stacks,
                format!(
                    "{} stacks live at the allocated peak",
                    units::count(stacks as u64)
                ),
            )
        }
    };
    write_file(&args.output, &bytes)?;
    if args.common.json {
        print_json(&[Written {
            path: path.display().to_string(),
            format: match args.format {
                Format::Perfetto => "perfetto",
                Format::Pprof => "pprof",
            },
            output: args.output.display().to_string(),
            bytes: bytes.len() as u64,
            samples,
        }])?;
    } else {
        println!(
            "wrote {} ({}): {what}",
            args.output.display(),
            units::bytes(bytes.len() as u64)
        );
    }
    Ok(ExitCode::SUCCESS)
}
