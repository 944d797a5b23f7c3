//! `vramtrace simulate`: a trace's requests replayed under another GPU size
//! or allocator setting.

use super::common::{Files, InputArgs, TextArgs, file_name, open, shown};
use super::progress::Bars;
use super::{warn_about, write_file};
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace::Error;
use vramtrace::command::Warning;
use vramtrace::command::simulate::{Device, SimulateOptions, simulate};
use vramtrace::print::{self, svg::simulate::Series};
use vramtrace::simulate::SimulateError;
use vramtrace::simulate::gpus::{self, GpuPreset};
use vramtrace::units;
use vramtrace_allocator::AllocatorConfig;

/// Arguments of `vramtrace simulate`.
#[derive(clap::Args)]
pub struct Args {
    /// The trace (or PyTorch snapshot) whose requests to replay.
    #[arg(value_name = "TRACE")]
    trace: PathBuf,
    #[command(flatten)]
    input: InputArgs,
    /// The device's memory, with its unit: GiB binary (24GiB), GB decimal
    /// (80GB = 74.5 GiB); unlimited if neither this nor --gpu is given.
    #[arg(long, value_name = "SIZE", value_parser = units::parse_bytes, conflicts_with = "gpu")]
    capacity: Option<u64>,
    /// A GPU, by name, whose memory to simulate: h100, h200, a100-80gb,
    /// a100-40gb, l40s, a30, a10, l4, rtx4090, rtx3090, v100-32gb, t4
    /// (docs/simulate.md says where each figure comes from).
    #[arg(long, value_name = "NAME", value_parser = parse_gpu)]
    gpu: Option<&'static GpuPreset>,
    /// Memory kept off the allocator for the CUDA context (and NCCL): the
    /// device's memory less this is what the simulated allocator gets.
    /// Default: an estimate, 512MiB, and 1GiB more when the trace shows NCCL.
    #[arg(long, value_name = "SIZE", value_parser = units::parse_bytes)]
    reserve: Option<u64>,
    /// Allocator settings to simulate, in PYTORCH_CUDA_ALLOC_CONF syntax
    /// (`expandable_segments:True,max_split_size_mb:128`); repeatable, one
    /// policy each. Default: the trace's recorded settings.
    #[arg(long = "alloc-conf", value_name = "CONF")]
    alloc_conf: Vec<String>,
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

/// A `--gpu` name: a preset, or an error listing them (or the presets an
/// ambiguous name matches).
pub(super) fn parse_gpu(name: &str) -> Result<&'static GpuPreset, String> {
    gpus::lookup(name).map_err(|e| e.to_string())
}

/// Parses the `--alloc-conf` values: a bad one is a usage error naming it.
pub(super) fn parse_confs(confs: &[String]) -> anyhow::Result<Vec<AllocatorConfig>> {
    confs
        .iter()
        .map(|c| {
            AllocatorConfig::parse(c)
                .map_err(|e| anyhow::anyhow!("invalid --alloc-conf '{c}': {e}"))
        })
        .collect()
}

/// The device `--gpu` or `--capacity` names, if either does.
pub(super) fn device_of(gpu: Option<&GpuPreset>, capacity: Option<u64>) -> Option<Device> {
    match (gpu, capacity) {
        (Some(gpu), _) => Some(Device::preset(gpu)),
        (None, Some(bytes)) => Some(Device::of_size(bytes)),
        (None, None) => None,
    }
}

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
    let device = device_of(args.gpu, args.capacity);
    let options = SimulateOptions {
        device,
        reserve: args.reserve,
        settings: parse_confs(&args.alloc_conf)?,
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
        let series: Vec<_> = result
            .policies
            .iter()
            .map(|p| Series {
                name: &p.scenario.policy,
                samples: &p.scenario.result.samples,
                oom: p.oom.as_ref().map(|o| {
                    (
                        o.time_ns,
                        format!(
                            "{}: out of memory at {} requesting {}",
                            p.scenario.policy,
                            units::duration_ns(o.time_ns),
                            units::bytes(o.requested_bytes)
                        ),
                    )
                }),
            })
            .collect();
        let on = result
            .device
            .as_ref()
            .map_or_else(|| "a device without limit".into(), |d| d.name.clone());
        let title = format!("What-if: {}{device} on {on}", file_name(&args.trace));
        // A cap inferred from an OOM is the capacity simulated at its low
        // end: its line says it is a range, not a recorded figure.
        let label = result
            .limit
            .filter(|l| {
                l.source == vramtrace::analysis::limits::LimitSource::InferredCap
                    && Some(l.bytes) == result.capacity_bytes
            })
            .map(|l| l.chart_label());
        let svg = print::svg::simulate::render_labelled(
            &series,
            result.capacity_bytes,
            label.as_deref(),
            &title,
        )?;
        write_file(svg_path, svg.as_bytes())?;
    }
    args.text.print(
        args.json,
        || print::json_sorted(&results),
        || print::text::by_device(&results, print::text::simulate),
    )?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_alloc_conf_names_its_key() {
        let e = parse_confs(&["expandable_segments:True,bogus_key:3".into()]).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("bogus_key"), "{text}");
        assert!(!text.contains('\n'));
        assert_eq!(
            parse_confs(&["max_split_size_mb:128".into()])
                .unwrap()
                .len(),
            1
        );
    }
}
