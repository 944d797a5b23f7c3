//! `vramtrace summary`: the first thing to run on a trace, or the rank
//! table of a distributed run's traces.

use super::common::{
    CommonArgs, Files, RankArgs, TextArgs, for_each_trace, rank_inputs, warn_about_set,
};
use super::progress::Bars;
use super::warn_inputs;
use std::process::ExitCode;
use vramtrace::command::ranks;
use vramtrace::command::summary::{SummaryOptions, summary};
use vramtrace::print;

/// Arguments of `vramtrace summary`.
#[derive(clap::Args)]
#[command(
    after_help = "Iterations (phases iter0, iter1, ... of traces recorded from PyTorch, \
    grouped as iter#) count as the training loop does: iter0 begins when recording begins \
    if an optimizer exists by then, else when the first optimizer is made; the N-th step \
    of the first optimizer to step ends iter<N-1> and begins iter<N>; the last ends at the \
    stop. So loop index i of `for i in range(n): ...; opt.step()` is iter<i>, and a \
    program without an optimizer gets no iteration."
)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    text: TextArgs,
    /// How many sites to list at the peak.
    #[arg(long, default_value_t = 10)]
    top: usize,
    #[command(flatten)]
    ranks: RankArgs,
}

impl Args {
    /// What it reads and writes.
    pub fn files(&self) -> Files<'_> {
        self.common.files([self.text.output()])
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = SummaryOptions {
        replay: args.common.replay.options()?,
        top: args.top,
    };
    let (traces, set) = rank_inputs(&args.common.traces, &args.ranks, &args.common.input)?;
    if set {
        let progress = Bars::new();
        let set_options = args.ranks.set_options(&args.common.input);
        let run = ranks::set::summary(&traces, &set_options, &options.replay, &progress)?;
        warn_about_set(&run.warnings);
        args.text.print(
            args.common.json,
            || print::json(&run),
            || print::text::ranks(&run.result),
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let full = options.replay.full_stacks;
    for_each_trace(
        &args.common,
        &args.text,
        &traces,
        |input, progress| {
            let result = summary(input, &options, progress)?;
            warn_inputs(&result.warnings);
            Ok(result)
        },
        |result| print::text::by_device(result, |r| print::text::summary(r, full)),
    )?;
    Ok(ExitCode::SUCCESS)
}
