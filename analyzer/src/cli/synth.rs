//! `vramtrace synth`: write a synthetic training-loop trace (fixtures,
//! demos, benchmarks at any size).

use super::progress::Bars;
use super::{emit, write_with};
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use vramtrace::command::synth::{SynthResult, synth};
use vramtrace::print;
use vramtrace::progress::NoProgress;
use vramtrace::units;
use vramtrace_allocator::AllocatorConfig;
use vramtrace_allocator::workload::{WorkloadConfig, WorkloadError};

/// Arguments of `vramtrace synth`.
#[derive(clap::Args)]
pub struct Args {
    /// Training iterations (ignored with --events). A run that would write
    /// more than 2^33 events is refused after its first iteration.
    #[arg(long, default_value_t = 10)]
    iters: u64,
    /// Run until at least this many events are written (e.g. 100M, 1e8;
    /// at most 2^33).
    #[arg(long, value_parser = units::parse_count)]
    events: Option<u64>,
    /// Bytes leaked every iteration from their own call site (e.g. 1MiB).
    #[arg(long, value_parser = units::parse_bytes, default_value = "0")]
    leak_bytes: u64,
    /// Seed of every random choice: the same arguments give the same bytes.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Simulated device memory (e.g. 2GiB); unlimited when absent.
    #[arg(long, value_parser = units::parse_bytes)]
    capacity: Option<u64>,
    /// Call empty_cache() after every K iterations.
    #[arg(long, value_name = "K")]
    empty_cache_every: Option<u64>,
    /// 2 adds a data-loading stream whose tensors are freed across streams.
    #[arg(long, default_value_t = 1)]
    streams: u32,
    /// Allocator settings in PYTORCH_CUDA_ALLOC_CONF syntax.
    #[arg(long, value_name = "STR", default_value = "")]
    alloc_conf: String,
    /// Transformer layers (1 to 4096).
    #[arg(long, default_value_t = 4)]
    layers: u32,
    /// Hidden size.
    #[arg(long, default_value_t = 512)]
    hidden: u64,
    /// Batch size, or a range MIN:MAX drawn per iteration.
    #[arg(long, value_parser = units::parse_range, default_value = "8")]
    batch: (u64, u64),
    /// Sequence length, or a range MIN:MAX drawn per iteration (wide ranges
    /// fragment the cache).
    #[arg(long, value_parser = units::parse_range, default_value = "256")]
    seq_len: (u64, u64),
    /// Devices the process drives (1 to 64), each with its own allocator;
    /// each iteration runs on every device in turn, longer sequences on
    /// later devices.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    devices: u32,
    /// The rank of a distributed run (recorded in the header): it varies the
    /// load (longer sequences for rank mod 8, its own random choices). With
    /// --world-size N and `%r` in --output, writes one trace per rank.
    #[arg(long, conflicts_with = "world_size")]
    rank: Option<u32>,
    /// Write one trace per rank 0..N, `%r` in --output standing for the rank
    /// (`-o 'run-%r.vtrace'`), in parallel.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    world_size: Option<u32>,
    /// Leave out the tags of parameters, gradients and optimizer state (and
    /// the header's `categories = tags`), as an older recorder's trace: the
    /// analyzer then infers every category.
    #[arg(long)]
    no_tags: bool,
    /// Note the batch size and the sequence length (when fixed) at the
    /// start, as a program's `vramtrace.annotate("batch", 8)` does: what
    /// `plan` reads each run's value from.
    #[arg(long)]
    annotate: bool,
    /// The trace to write.
    #[arg(short, long)]
    output: PathBuf,
    /// Print one JSON object instead of a paragraph.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let allocator = AllocatorConfig::parse(&args.alloc_conf)
        .with_context(|| format!("invalid --alloc-conf '{}'", args.alloc_conf))?;
    let config = WorkloadConfig {
        seed: args.seed,
        iters: args.iters,
        events: args.events,
        layers: args.layers,
        hidden: args.hidden,
        batch: args.batch,
        seq_len: args.seq_len,
        leak_bytes: args.leak_bytes,
        empty_cache_every: args.empty_cache_every,
        streams: args.streams,
        capacity: args.capacity,
        allocator,
        devices: args.devices,
        rank: args.rank,
        tags: !args.no_tags,
        annotate: args.annotate,
        ..WorkloadConfig::default()
    };
    if let Some(world) = args.world_size {
        return ranks(&config, world, &args.output, args.json);
    }
    let result = write_synth(&config, &args.output, &Bars::new())?;
    if args.json {
        emit(&print::json_sorted(&result))?;
    } else {
        emit(&print::text::synth(&result))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes one synthetic trace to `path`. A workload refused (its settings,
/// or its length once its first iteration is known) is reported as such,
/// not as a failure to write.
fn write_synth(
    config: &WorkloadConfig,
    path: &Path,
    progress: &dyn vramtrace::progress::Progress,
) -> anyhow::Result<SynthResult> {
    let mut result = None;
    let mut invalid = None;
    let written = write_with(path, |out| match synth(config, out, path, progress) {
        Ok(r) => {
            result = Some(r);
            Ok(())
        }
        Err(e @ WorkloadError::Invalid(_)) => {
            let message = e.to_string();
            invalid = Some(e);
            Err(std::io::Error::other(message))
        }
        Err(e) => Err(std::io::Error::other(e)),
    });
    if let Some(e) = invalid {
        return Err(e.into());
    }
    written?;
    result.ok_or_else(|| anyhow::anyhow!("{}: nothing written", path.display()))
}

/// Writes one trace per rank, `%r` in the path standing for the rank, on
/// every core.
fn ranks(
    config: &WorkloadConfig,
    world: u32,
    output: &Path,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use rayon::prelude::*;
    let pattern = output.to_string_lossy();
    if !pattern.contains("%r") {
        anyhow::bail!("--world-size writes one trace per rank: put %r in --output for the rank");
    }
    let results = (0..world)
        .into_par_iter()
        .map(|rank| {
            let path = PathBuf::from(pattern.replace("%r", &rank.to_string()));
            let config = WorkloadConfig {
                rank: Some(rank),
                world_size: Some(world),
                ..config.clone()
            };
            // Ranks run side by side: no bar each.
            write_synth(&config, &path, &NoProgress)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if json {
        emit(&print::json_sorted(&results))?;
    } else {
        let bytes: u64 = results.iter().map(|r| r.bytes).sum();
        let events: u64 = results.iter().map(|r| r.events).sum();
        emit(&format!(
            "wrote {} traces ({}, {} events): {}\n",
            results.len(),
            units::bytes(bytes),
            units::count(events),
            pattern
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}
