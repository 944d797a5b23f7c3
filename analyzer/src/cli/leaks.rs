//! `vramtrace leaks`: memory retained by phases, growth across repetitions,
//! and blocks never freed.

use super::common::{
    CommonArgs, Files, RankArgs, TextArgs, for_each_trace, rank_inputs, shown, warn_about_set,
};
use super::progress::Bars;
use super::{warn, warn_inputs, write_file};
use std::process::ExitCode;
use vramtrace::command::leaks::leaks;
use vramtrace::command::ranks;
use vramtrace::print::{self, ChartError, svg::palette::Palette};

/// Arguments of `vramtrace leaks`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    text: TextArgs,
    /// How many rows each table shows.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Also draw, as an SVG chart, the repeated phase of the fastest leak
    /// (or else the fastest-growing or most repeated phase); one trace.
    #[arg(short, long, value_name = "FILE.svg")]
    output: Option<std::path::PathBuf>,
    #[command(flatten)]
    ranks: RankArgs,
}

impl Args {
    /// What it reads and writes.
    pub fn files(&self) -> Files<'_> {
        self.common
            .files([self.output.as_deref(), self.text.output()])
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = args.common.replay.options()?;
    args.common.check_one_chart(args.output.as_deref())?;
    super::common::check_svg_name(args.output.as_deref())?;
    let (traces, set) = rank_inputs(&args.common.traces, &args.ranks, &args.common.input)?;
    if set {
        if args.output.is_some() {
            anyhow::bail!("-o takes one trace; draw a rank's leaks from its own trace");
        }
        // Each rank's leaks, read a few traces at a time.
        let progress = Bars::new();
        let set_options = args.ranks.set_options(&args.common.input);
        let run = ranks::set::leaks(&traces, &set_options, &options, &progress)?;
        warn_about_set(&run.warnings);
        args.text.print(
            args.common.json,
            || print::json(&run),
            || print::text::rank_leaks(&run.result),
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    for_each_trace(
        &args.common,
        &args.text,
        &traces,
        |input, progress| {
            let result = leaks(input, &options, progress)?;
            warn_inputs(&result.warnings);
            if let Some(svg_path) = &args.output {
                let (shown, _) = shown(input.path(), &result)?;
                // The report stands without a chart: say why there is none.
                match shown.report.chart_phase() {
                    Some(phase) => {
                        let svg = print::svg::leaks::render(phase, &mut Palette::new())?;
                        write_file(svg_path, svg.as_bytes())?;
                    }
                    None => warn(format_args!(
                        "{}: no chart written to {}: {}",
                        input.path().display(),
                        svg_path.display(),
                        ChartError::NoRepeatedPhase
                    )),
                }
            }
            Ok(result)
        },
        |result| {
            print::text::by_device(result, |r| {
                print::text::leaks(r, args.top, options.full_stacks)
            })
        },
    )?;
    Ok(ExitCode::SUCCESS)
}
