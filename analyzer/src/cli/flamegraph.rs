//! `vramtrace flamegraph`: memory live at one moment, by stack.

use super::common::{CommonArgs, Files, file_name, open, print_json, shown};
use super::progress::Bars;
use super::{warn_inputs, write_file};
use anyhow::bail;
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace::analysis::window::BoundSpec;
use vramtrace::command::flamegraph::{Moment, flamegraph};
use vramtrace::print;
use vramtrace::units;

/// Arguments of `vramtrace flamegraph`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Where to write the flame graph (SVG, click a frame to zoom) of the
    /// one trace given; with --folded, the folded stacks (text).
    #[arg(short, long, value_name = "FILE.svg")]
    output: Option<PathBuf>,
    /// The moment: `peak` (the allocated peak), `oom` (the first
    /// out-of-memory error) or a time since the trace's start (1.5s, 300ms).
    #[arg(long, default_value = "peak", value_parser = parse_moment)]
    at: Moment,
    /// Write the stacks in the folded format (`frame;frame;frame bytes`, one
    /// per line) that flame graph tools and speedscope read, instead of SVG.
    #[arg(long)]
    folded: bool,
}

fn parse_moment(text: &str) -> Result<Moment, String> {
    match text {
        "peak" => Ok(Moment::AllocatedPeak),
        "oom" => Ok(Moment::FirstOom),
        _ => match BoundSpec::parse(text) {
            Ok(BoundSpec::Time(t)) => Ok(Moment::Time(t)),
            _ => Err(format!(
                "{text:?} is not a moment: write peak, oom, or a time such as 1.5s or 300ms"
            )),
        },
    }
}

impl Args {
    /// What it reads and writes.
    pub fn files(&self) -> Files<'_> {
        self.common.files([self.output.as_deref()])
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = args.common.replay.options()?;
    if args.output.is_none() && !args.common.json && !args.folded {
        bail!("say where to write the flame graph with -o FILE.svg, or ask for --folded or --json");
    }
    args.common.check_one_chart(args.output.as_deref())?;
    if !args.folded {
        super::common::check_svg_name(args.output.as_deref())?;
    }
    let progress = Bars::new();
    let mut results = Vec::new();
    for path in &args.common.traces {
        let input = open(path, &args.common.input, &progress)?;
        let result = flamegraph(&input, &options, args.at, &progress)?;
        warn_inputs(&result.warnings);
        let (graph, device) = shown(path, &result)?;
        if args.folded {
            let mut text = graph.stacks.folded_lines().join("\n");
            text.push('\n');
            match &args.output {
                // Names from the input shown as escapes, as on stdout: the
                // file is text a terminal shows (`cat`).
                Some(output) => write_file(output, print::printable(&text).as_bytes())?,
                None if !args.common.json => print!("{}", print::printable(&text)),
                None => {}
            }
        } else if let Some(output) = &args.output {
            let title = format!("GPU memory by stack: {}{device}", file_name(path));
            let svg = print::svg::flame::render(graph, &title)?;
            write_file(output, svg.as_bytes())?;
            if !args.common.json {
                println!(
                    "wrote {} ({}): {} stacks, {}",
                    output.display(),
                    units::bytes(svg.len() as u64),
                    units::count(graph.stacks.stacks.len() as u64),
                    print::svg::flame::moment_line(graph)
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
