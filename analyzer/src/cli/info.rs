//! `vramtrace info`: what a trace holds, without replaying it.

use super::common::{Files, InputArgs, TextArgs, open};
use super::progress::Bars;
use super::warn;
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace::command::info::{Status, info};
use vramtrace::print;

/// Arguments of `vramtrace info`.
#[derive(clap::Args)]
pub struct Args {
    /// The trace to describe.
    trace: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    text: TextArgs,
    #[command(flatten)]
    input: InputArgs,
}

impl Args {
    /// What it reads and writes.
    pub fn files(&self) -> Files<'_> {
        Files::new([self.trace.as_path()], [self.text.output()])
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let input = open(&args.trace, &args.input, &Bars::new())?;
    let result = info(&input)?;
    for d in &result.damage {
        warn(format_args!(
            "{}: {d}; the rest was read",
            args.trace.display()
        ));
    }
    match (&result.truncation, result.status) {
        (Some(t), _) => warn(t),
        (None, Status::Unfinished) => {
            warn("the trace has no footer: the recording process did not close it (killed?)")
        }
        _ => {}
    }
    args.text.print(
        args.json,
        || print::json_sorted(&result),
        || print::text::info(&result),
    )?;
    Ok(ExitCode::SUCCESS)
}
