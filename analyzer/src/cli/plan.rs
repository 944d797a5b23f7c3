//! `vramtrace plan`: the largest batch size (or sequence length) that fits,
//! from runs recorded at two or more values.

use super::common::{Files, InputArgs, TextArgs, open};
use super::device::DeviceArgs;
use super::progress::Bars;
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace::command::plan::{KvPlanOptions, PlanOptions, kv_cache, plan};
use vramtrace::print;
use vramtrace::simulate::plan::Varied;
use vramtrace::units;

/// Arguments of `vramtrace plan`.
#[derive(clap::Args)]
pub struct Args {
    /// Two or more traces (or PyTorch snapshots) of one program, each at
    /// another batch size or sequence length; one gives an estimate.
    #[arg(value_name = "TRACE", required = true)]
    traces: Vec<PathBuf>,
    #[command(flatten)]
    input: InputArgs,
    /// Each trace's batch size, in the traces' order (4,8), when the traces
    /// do not say it (`vramtrace.annotate("batch", 8)`, or `python -m
    /// vramtrace run --annotate batch=8`).
    #[arg(long, value_name = "N,N,...", value_delimiter = ',', value_parser = units::parse_count, conflicts_with = "seq")]
    batch: Vec<u64>,
    /// Each trace's sequence length, in the traces' order (512,1024), when
    /// the traces do not say it (an annotation `seq`).
    #[arg(long, value_name = "N,N,...", value_delimiter = ',', value_parser = units::parse_count)]
    seq: Vec<u64>,
    #[command(flatten)]
    device_args: DeviceArgs,
    /// Plan under a cap on the allocator (set_per_process_memory_fraction
    /// times the device's memory), e.g. 20GiB; no reserve comes off it.
    /// Default, without --gpu or --capacity: the cap the runs recorded.
    #[arg(long, value_name = "SIZE", value_parser = units::parse_bytes, conflicts_with_all = ["capacity", "gpu", "reserve"])]
    cap: Option<u64>,
    /// Values searched are multiples of this (64 for sequence lengths, say).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = units::parse_count)]
    step: u64,
    /// Also simulate this value in full: peaks, fragmentation, categories.
    #[arg(long, value_name = "N", value_parser = units::parse_count)]
    at: Option<u64>,
    /// Plan for this device of each trace (its index), for traces of several.
    #[arg(long, value_name = "N")]
    device: Option<u32>,
    /// Plan an inference server's KV cache instead: the largest that fits,
    /// from one recorded run, its CUDA graphs replayed in their pools.
    #[arg(long, conflicts_with_all = ["batch", "seq", "at"])]
    kv_cache: bool,
    /// With --kv-cache: a part of the KV cache's site (serve.py:31), when
    /// the largest allocation made outside the captures and private pools
    /// is not it.
    #[arg(long, value_name = "SITE", requires = "kv_cache")]
    kv_site: Option<String>,
    /// With --kv-cache: a KV block's bytes, with the unit (1MiB): the answer
    /// is a whole number of blocks.
    #[arg(long, value_name = "SIZE", value_parser = units::parse_bytes, requires = "kv_cache")]
    kv_block: Option<u64>,
    /// With --kv-cache: the inverse question, for a KV cache of this size
    /// (with its unit, 30GiB): how many of the recorded CUDA graphs fit
    /// beside it, the smallest batches kept.
    #[arg(long, value_name = "SIZE", value_parser = units::parse_bytes, requires = "kv_cache")]
    kv_size: Option<u64>,
    /// With --kv-size: the batch size of each recorded capture, in capture
    /// order (256,128,...,1), to answer with the largest batch size to
    /// capture.
    #[arg(long, value_name = "N,N,...", value_delimiter = ',', value_parser = units::parse_count, requires = "kv_size")]
    captured_batches: Option<Vec<u64>>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    text: TextArgs,
    /// Print how long reading, fitting and simulating took on stderr (for
    /// docs/performance-history.md).
    #[arg(long, hide = true)]
    timing: bool,
}

impl Args {
    /// What it reads and writes.
    pub fn files(&self) -> Files<'_> {
        Files::new(
            self.traces.iter().map(PathBuf::as_path),
            [self.text.output()],
        )
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let values = match (args.batch.is_empty(), args.seq.is_empty()) {
        (false, _) => Some((Varied::Batch, args.batch.clone())),
        (true, false) => Some((Varied::Seq, args.seq.clone())),
        (true, true) => None,
    };
    if let Some((varied, v)) = &values
        && v.len() != args.traces.len()
    {
        anyhow::bail!(
            "--{} gives {} values for {} traces: give one per trace, in their order",
            if *varied == Varied::Batch {
                "batch"
            } else {
                "seq"
            },
            v.len(),
            args.traces.len()
        );
    }
    let device = args.device_args.device();
    let options = PlanOptions {
        values,
        device,
        cap: args.cap,
        reserve: args.device_args.reserve,
        settings: args.device_args.settings()?,
        step: args.step,
        at: args.at,
        recorded_device: args.device,
    };
    let progress = Bars::new();
    if args.kv_cache {
        let [trace] = args.traces.as_slice() else {
            anyhow::bail!(
                "--kv-cache plans from one recorded run of the server: give one trace, not {}",
                args.traces.len()
            );
        };
        let input = open(trace, &args.input, &progress)?;
        let options = KvPlanOptions {
            plan: options,
            site: args.kv_site.clone(),
            block_bytes: args.kv_block,
            kv_bytes: args.kv_size,
            captured_batches: args.captured_batches.clone(),
        };
        let result = kv_cache(&input, &options, &progress)?;
        args.text.print(
            args.json,
            || print::json(&result),
            || print::text::plan_kv(&result),
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let inputs = args
        .traces
        .iter()
        .map(|t| open(t, &args.input, &progress))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let inputs: Vec<&vramtrace::input::Input> = inputs.iter().collect();
    let result = plan(&inputs, &options, &progress)?;
    if args.timing {
        let t = &result.timing;
        eprintln!(
            "timing: read {} runs in {:.3} s; lined up and fitted in {:.3} s; {} search simulations and {} full ones in {:.3} s on {} threads",
            result.runs.len(),
            t.read_s,
            t.fit_s,
            result.answer.simulations,
            result.points.len() + result.runs.len(),
            t.simulate_s,
            rayon::current_num_threads()
        );
    }
    args.text.print(
        args.json,
        || print::json(&result),
        || print::text::plan(&result),
    )?;
    Ok(ExitCode::SUCCESS)
}
