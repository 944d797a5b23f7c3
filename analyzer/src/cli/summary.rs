//! `vramtrace summary`: the first thing to run on a trace, or the rank
//! table of a distributed run's traces.

use super::common::{
    CommonArgs, Files, RankArgs, TextArgs, for_each_trace, open, rank_traces, warn_about_set,
};
use super::progress::Bars;
use super::{emit, warn_inputs, write_file};
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
    let resolved = rank_traces(&args.common.traces, &args.ranks, &args.common.input)?;
    if !resolved.jobs.is_empty() {
        return jobs(&args, &options, &resolved);
    }
    let (traces, set) = (resolved.paths, resolved.rank_set);
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

/// One document of a folder of several runs: a job's rank table, or a
/// trace of no job.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Document<'a> {
    Job(&'a ranks::set::SetRun<ranks::RankTable>),
    Alone(&'a vramtrace::command::ByDevice<vramtrace::command::summary::SummaryResult>),
}

/// Traces of several runs, some of them distributed jobs: each job's ranks
/// in a table of their own (a line before it says which job), then each
/// trace of no job on its own; as JSON, an array of those documents.
fn jobs(
    args: &Args,
    options: &SummaryOptions,
    traces: &ranks::set::Traces,
) -> anyhow::Result<ExitCode> {
    let progress = Bars::new();
    let set_options = args.ranks.set_options(&args.common.input);
    let mut tables = Vec::new();
    for job in &traces.jobs {
        let run = ranks::set::summary(&job.paths, &set_options, &options.replay, &progress)?;
        warn_about_set(&run.warnings);
        tables.push(run);
    }
    let mut alone = Vec::new();
    for path in traces.alone() {
        let input = open(path, &args.common.input, &progress)?;
        let result = summary(&input, options, &progress)?;
        warn_inputs(&result.warnings);
        alone.push(result);
    }
    let full = options.replay.full_stacks;
    let text = || {
        let mut parts: Vec<String> = (traces.jobs.iter().zip(&tables).enumerate())
            .map(|(i, (job, run))| {
                format!(
                    "{}\n{}",
                    print::text::job_line(i, traces.jobs.len(), job),
                    print::text::ranks(&run.result)
                )
            })
            .collect();
        parts.extend(
            (alone.iter()).map(|r| print::text::by_device(r, |r| print::text::summary(r, full))),
        );
        parts.join("\n")
    };
    if !args.common.json {
        emit(&text())?;
        return Ok(ExitCode::SUCCESS);
    }
    let documents: Vec<Document> = (tables.iter().map(Document::Job))
        .chain(alone.iter().map(Document::Alone))
        .collect();
    emit(&print::json_each(&documents))?;
    if let Some(path) = args.text.output() {
        write_file(path, text().as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}
