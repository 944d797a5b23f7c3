//! `vramtrace timeline`: memory over time as an SVG chart.

use super::common::{CommonArgs, Files, XArg, chart_x_axis, file_name, open, print_json, shown};
use super::progress::Bars;
use super::{warn_inputs, write_file};
use anyhow::bail;
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace::analysis::timeline::GroupBy;
use vramtrace::command::timeline::{TimelineCommandOptions, timeline};
use vramtrace::print::{self, svg::palette::Palette};
use vramtrace::units;

/// Arguments of `vramtrace timeline`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Where to write the chart (SVG) of the one trace given; without it,
    /// --json prints the samples.
    #[arg(short, long, value_name = "FILE.svg")]
    output: Option<PathBuf>,
    /// What the stacked areas are split by.
    #[arg(long, value_enum, default_value_t = By::Site)]
    by: By,
    /// Groups (sites, phases) shown by name; the rest are summed as "other".
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=24))]
    top: u32,
    /// What the chart's x axis measures: time, the event index, or busy
    /// time (idle gaps cut short). Default: busy time for a PyTorch
    /// snapshot, and for a trace whose idle gaps (start-up, pauses) take a
    /// quarter of its span or more, so its steps fill the width; else time.
    /// `--x time` draws the wall-clock axis.
    #[arg(long = "x", value_enum)]
    x: Option<XArg>,
}

/// What the stacked areas are split by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum By {
    /// Allocation sites (the most telling frame of the allocating stack).
    Site,
    /// The phase the allocation was made in, numbers normalized (`iter#/forward`).
    Phase,
    /// What the blocks hold: parameters, gradients, optimizer state,
    /// activations, temporaries, other (tagged by the recorder or inferred).
    Category,
    /// No split: one area of allocated memory.
    None,
}

impl From<By> for GroupBy {
    fn from(by: By) -> GroupBy {
        match by {
            By::Site => GroupBy::Site,
            By::Phase => GroupBy::Phase,
            By::Category => GroupBy::Category,
            By::None => GroupBy::None,
        }
    }
}

impl Args {
    /// What it reads and writes.
    pub fn files(&self) -> Files<'_> {
        self.common.files([self.output.as_deref()])
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = TimelineCommandOptions {
        replay: args.common.replay.options()?,
        group_by: args.by.into(),
        top: args.top as usize,
    };
    if args.output.is_none() && !args.common.json {
        bail!("say where to write the chart with -o FILE.svg, or ask for --json");
    }
    args.common.check_one_chart(args.output.as_deref())?;
    super::common::check_svg_name(args.output.as_deref())?;
    let progress = Bars::new();
    let mut results = Vec::new();
    for path in &args.common.traces {
        let input = open(path, &args.common.input, &progress)?;
        let result = timeline(&input, &options, &progress)?;
        warn_inputs(&result.warnings);
        if let Some(output) = &args.output {
            let (drawn, device) = shown(path, &result)?;
            let title = format!("Memory over time: {}{device}", file_name(path));
            let svg = print::svg::timeline::render(
                &drawn.timeline,
                &title,
                &mut Palette::new(),
                chart_x_axis(args.x, &input, &drawn.timeline),
            )?;
            write_file(output, svg.as_bytes())?;
            if !args.common.json {
                let t = &drawn.timeline;
                println!(
                    "wrote {} ({}): {} samples, {} {}, peak {}",
                    output.display(),
                    units::bytes(svg.len() as u64),
                    t.samples.len(),
                    t.categories.len(),
                    match t.grouped_by {
                        GroupBy::Site => "sites",
                        GroupBy::Phase => "phases",
                        GroupBy::Category => "categories",
                        GroupBy::None => "areas",
                    },
                    t.peak
                        .as_ref()
                        .map_or("none".into(), |p| units::bytes(p.bytes))
                );
            }
        }
        results.push(result);
    }
    if args.common.json {
        print_json(&results)?;
    }
    Ok(ExitCode::SUCCESS)
}
