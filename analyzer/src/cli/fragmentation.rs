//! `vramtrace fragmentation`: cached and fragmented memory over time.

use super::common::{CommonArgs, Files, TextArgs, XArg, file_name, for_each_trace, shown, x_axis};
use super::{warn_inputs, write_file};
use std::process::ExitCode;
use vramtrace::command::fragmentation::{FragmentationOptions, fragmentation};
use vramtrace::print;

/// Arguments of `vramtrace fragmentation`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    text: TextArgs,
    /// How many buckets to show (of time with a window bounded by phases:
    /// between this and twice it).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    buckets: u32,
    /// Also draw reserved, allocated, free memory and fragmentation over
    /// time as an SVG chart (with finer buckets than the table); one trace.
    #[arg(short, long, value_name = "FILE.svg")]
    output: Option<std::path::PathBuf>,
    /// What the table's buckets divide evenly and the chart's x axis
    /// measures: time, the event index, or busy time (idle gaps cut short).
    /// Default: busy time for a PyTorch snapshot (its history reaches back
    /// across long pauses), time for a trace.
    #[arg(long = "x", value_enum)]
    x: Option<XArg>,
}

/// Buckets of the chart: about one per two pixels of its width.
const CHART_BUCKETS: usize = 400;

impl Args {
    /// What it reads and writes.
    pub fn files(&self) -> Files<'_> {
        self.common
            .files([self.output.as_deref(), self.text.output()])
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let replay = args.common.replay.options()?;
    args.common.check_one_chart(args.output.as_deref())?;
    super::common::check_svg_name(args.output.as_deref())?;
    for_each_trace(
        &args.common,
        &args.text,
        &args.common.traces,
        |input, progress| {
            let axis = x_axis(args.x, input);
            let options = FragmentationOptions {
                replay: replay.clone(),
                buckets: args.buckets as usize,
                axis,
                chart_buckets: args.output.is_some().then_some(CHART_BUCKETS),
            };
            let result = fragmentation(input, &options, progress)?;
            warn_inputs(&result.warnings);
            let (drawn, device) = match &args.output {
                Some(_) => shown(input.path(), &result)?,
                None => (&result.devices[0].result, String::new()),
            };
            if let (Some(svg_path), Some(chart)) = (&args.output, &drawn.chart) {
                let title = format!("Fragmentation: {}{device}", file_name(input.path()));
                let svg = print::svg::fragmentation::render(chart, &title, axis)?;
                write_file(svg_path, svg.as_bytes())?;
            }
            Ok(result)
        },
        |result| print::text::by_device(result, print::text::fragmentation),
    )?;
    Ok(ExitCode::SUCCESS)
}
