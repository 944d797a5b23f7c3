//! `vramtrace import`: convert a PyTorch snapshot into a trace once, so
//! later analyses skip the pickle.

use super::common::{Files, InputArgs, open};
use super::progress::Bars;
use super::{emit, write_file};
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace::command::import::import;
use vramtrace::print;

/// Arguments of `vramtrace import`.
#[derive(clap::Args)]
pub struct Args {
    /// The snapshot: a pickle from `torch.cuda.memory._dump_snapshot()`,
    /// plain or compressed with gzip, xz or zstd.
    snapshot: PathBuf,
    /// Where to write the trace.
    #[arg(short, long)]
    output: PathBuf,
    #[command(flatten)]
    input: InputArgs,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// What it reads and writes.
    pub fn files(&self) -> Files<'_> {
        Files::new([self.snapshot.as_path()], [Some(self.output.as_path())])
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let input = open(&args.snapshot, &args.input, &Bars::new())?;
    let result = import(&input, &args.output)?;
    write_file(&args.output, &result.trace)?;
    if args.json {
        emit(&print::json_sorted(&result))?;
    } else {
        emit(&print::text::import(&result))?;
    }
    Ok(ExitCode::SUCCESS)
}
