//! `vramtrace synth`: write a synthetic training-loop trace (fixtures,
//! demos, benchmarks at any size).

use super::{emit, write_with};
use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace::command::synth::synth;
use vramtrace::print;
use vramtrace::units;
use vramtrace_recorder::allocator::AllocatorConfig;
use vramtrace_recorder::workload::WorkloadConfig;

/// Arguments of `vramtrace synth`.
#[derive(clap::Args)]
pub struct Args {
    /// Training iterations (ignored with --events).
    #[arg(long, default_value_t = 10)]
    iters: u64,
    /// Run until at least this many events are written (e.g. 100M, 1e8).
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
    /// Transformer layers.
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
        ..WorkloadConfig::default()
    };
    let path = &args.output;
    let mut result = None;
    write_with(path, |out| {
        result = Some(synth(&config, out, path).map_err(std::io::Error::other)?);
        Ok(())
    })?;
    let result = result.expect("written");
    if args.json {
        emit(&print::json_sorted(&result))?;
    } else {
        emit(&print::text::synth(&result))?;
    }
    Ok(ExitCode::SUCCESS)
}
