//! `vramtrace summary`: the first thing to run on a trace.

use super::common::{CommonArgs, for_each_trace};
use super::warn_about;
use std::process::ExitCode;
use vramtrace::command::summary::{SummaryOptions, summary};
use vramtrace::print;

/// Arguments of `vramtrace summary`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// How many sites to list at the peak.
    #[arg(long, default_value_t = 10)]
    top: usize,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = SummaryOptions {
        replay: args.common.replay.options()?,
        top: args.top,
    };
    let full = options.replay.full_stacks;
    for_each_trace(
        &args.common,
        |input, progress| {
            let result = summary(input, &options, progress)?;
            warn_about(input.path(), &result.warnings);
            Ok(result)
        },
        |result| print::text::summary(result, full),
    )?;
    Ok(ExitCode::SUCCESS)
}
