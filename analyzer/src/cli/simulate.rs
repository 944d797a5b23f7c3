//! `vramtrace simulate`: a trace's requests replayed under another GPU size
//! or allocator setting.

use super::common::{Files, InputArgs, TextArgs, file_name, open, shown};
use super::device::DeviceArgs;
use super::progress::Bars;
use super::{warn_about, write_file};
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace::Error;
use vramtrace::command::Warning;
use vramtrace::command::simulate::{SimulateOptions, simulate};
use vramtrace::print;
use vramtrace::simulate::SimulateError;

/// Arguments of `vramtrace simulate`.
#[derive(clap::Args)]
pub struct Args {
    /// The trace (or PyTorch snapshot) whose requests to replay.
    #[arg(value_name = "TRACE")]
    trace: PathBuf,
    #[command(flatten)]
    input: InputArgs,
    #[command(flatten)]
    device_args: DeviceArgs,
    /// Compare the recorded settings with PyTorch's default, expandable
    /// segments, and max_split_size_mb 128 and 512.
    #[arg(long)]
    compare_policies: bool,
    /// Also find each policy's smallest capacity without an OOM (bisection,
    /// to 2 MiB).
    #[arg(long)]
    min_capacity: bool,
    /// Simulate only this device of the trace (its index). Without it, each
    /// device is simulated on its own GPU of the given size, in turn; a
    /// chart shows the one with the highest allocated peak.
    #[arg(long, value_name = "N")]
    device: Option<u32>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    text: TextArgs,
    /// Draw reserved and allocated memory over time for each policy as an
    /// SVG chart.
    #[arg(short, long, value_name = "FILE.svg")]
    output: Option<PathBuf>,
    /// Print how long reading and simulating took on stderr (for
    /// docs/performance-history.md).
    #[arg(long, hide = true)]
    timing: bool,
}

/// Time buckets of the chart: about one per two pixels of its width.
const CHART_BUCKETS: usize = 500;

impl Args {
    /// What it reads and writes.
    pub fn files(&self) -> Files<'_> {
        Files::new(
            [self.trace.as_path()],
            [self.output.as_deref(), self.text.output()],
        )
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let device = args.device_args.device();
    let options = SimulateOptions {
        device,
        reserve: args.device_args.reserve,
        settings: args.device_args.settings()?,
        standard_policies: args.compare_policies,
        min_capacity: args.min_capacity,
        chart_buckets: if args.output.is_some() {
            CHART_BUCKETS
        } else {
            0
        },
        recorded_device: args.device,
    };
    super::common::check_svg_name(args.output.as_deref())?;
    let progress = Bars::new();
    let input = open(&args.trace, &args.input, &progress)?;
    let results = simulate(&input, &options, &progress).inspect_err(|e| {
        if let Error::Simulate {
            source: SimulateError::NoSettings(why),
            ..
        } = e
        {
            // Why the recorded settings are no use, as for any simulation.
            warn_about(input.path(), &[Warning::UnreadableSettings(why.clone())]);
        }
    })?;
    let mut warnings: Vec<Warning> = Vec::new();
    for d in &results.devices {
        for w in &d.result.warnings {
            if !warnings.contains(w) {
                warnings.push(w.clone());
            }
        }
    }
    warn_about(input.path(), &warnings);
    for result in results
        .devices
        .iter()
        .map(|d| &d.result)
        .filter(|_| args.timing)
    {
        let t = &result.timing;
        let threads = rayon::current_num_threads();
        // Without --min-capacity: one simulation per policy, plus the fidelity run.
        eprintln!(
            "timing: read {} events into {} requests ({} bytes) in {:.3} s; {} simulations in {:.3} s on {threads} threads: {:.2} M events/s per simulation and thread",
            result.events,
            result.requests,
            t.list_bytes,
            t.read_s,
            t.runs,
            t.simulate_s,
            result.events as f64 * t.runs as f64 / t.simulate_s / threads.min(t.runs) as f64 / 1e6
        );
    }
    if let Some(svg_path) = &args.output {
        let (result, device) = shown(&args.trace, &results)?;
        let on = result
            .device
            .as_ref()
            .map_or_else(|| "a device without limit".into(), |d| d.name.clone());
        let title = format!("What-if: {}{device} on {on}", file_name(&args.trace));
        let svg = print::svg::simulate::chart(result, &title)?;
        write_file(svg_path, svg.as_bytes())?;
    }
    args.text.print(
        args.json,
        || print::json_sorted(&results),
        || print::text::by_device(&results, print::text::simulate),
    )?;
    Ok(ExitCode::SUCCESS)
}
