//! `vramtrace join`: a bounded recording's parts into one trace.

use super::common::Files;
use super::{emit, write_with};
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace::command::join::{join, parts_of};
use vramtrace::print;

/// Arguments of `vramtrace join`.
#[derive(clap::Args)]
pub struct Args {
    /// The ring folder a bounded recording left (`TRACE.ring`), or its
    /// parts, oldest first.
    #[arg(required = true, value_name = "RING|PART")]
    inputs: Vec<PathBuf>,
    /// Where to write the trace.
    #[arg(short, long)]
    output: PathBuf,
    /// Print one JSON object instead of a line.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// What it reads (a ring folder stands for its parts) and writes.
    pub fn files(&self) -> Files<'_> {
        Files::new(
            self.inputs.iter().map(PathBuf::as_path),
            [Some(self.output.as_path())],
        )
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let parts = parts_of(&args.inputs)?;
    let mut result = None;
    let mut failed = None;
    write_with(&args.output, |out| {
        match join(&parts, out, &args.output) {
            Ok(r) => result = Some(r),
            Err(e) => {
                let message = e.to_string();
                failed = Some(e);
                return Err(std::io::Error::other(message));
            }
        }
        Ok(())
    })
    .map_err(|e| match failed.take() {
        Some(f) => anyhow::Error::new(f),
        None => e,
    })?;
    let result = result.expect("joined");
    for l in &result.left_out {
        super::warn(format_args!("{}: left out of the join: {}", l.part, l.why));
    }
    if args.json {
        emit(&print::json_sorted(&result))?;
    } else {
        emit(&print::text::join(&result))?;
    }
    Ok(ExitCode::SUCCESS)
}
