//! `vramtrace synth`: write a synthetic training-loop trace (fixtures,
//! demos, benchmarks at any size).

use super::print_json;
use crate::units;
use anyhow::Context;
use serde_json::json;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace_recorder::allocator::AllocatorConfig;
use vramtrace_recorder::workload::{self, WorkloadConfig};

/// Arguments of `vramtrace synth`.
#[derive(clap::Args)]
pub struct Args {
    /// Training iterations (ignored with --events).
    #[arg(long, default_value_t = 10)]
    iters: u64,
    /// Run until at least this many events are written (e.g. 100M, 1e8).
    #[arg(long, value_parser = parse_count)]
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
    #[arg(long, value_parser = parse_range, default_value = "8")]
    batch: (u64, u64),
    /// Sequence length, or a range MIN:MAX drawn per iteration (wide ranges
    /// fragment the cache).
    #[arg(long, value_parser = parse_range, default_value = "256")]
    seq_len: (u64, u64),
    /// The trace to write.
    #[arg(short, long)]
    output: PathBuf,
    /// Print one JSON object instead of a paragraph.
    #[arg(long)]
    json: bool,
}

/// A count with an optional decimal suffix: `5000`, `100k`, `100M`, `2G`, `1e8`.
fn parse_count(text: &str) -> Result<u64, String> {
    let t = text.trim().replace('_', "");
    let (number, scale) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1e3),
        Some((i, 'M')) => (&t[..i], 1e6),
        Some((i, 'G' | 'B')) => (&t[..i], 1e9),
        _ => (t.as_str(), 1.0),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a count (examples: 5000, 100M, 1e8)"))?;
    let value = value * scale;
    if !value.is_finite() || value < 1.0 || value > u64::MAX as f64 {
        return Err(format!("count '{text}' is out of range"));
    }
    Ok(value.round() as u64)
}

/// `N` or `MIN:MAX`.
fn parse_range(text: &str) -> Result<(u64, u64), String> {
    let number = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|_| format!("'{text}' is not a number or a range MIN:MAX"))
    };
    let (lo, hi) = match text.split_once(':') {
        Some((a, b)) => (number(a)?, number(b)?),
        None => {
            let n = number(text)?;
            (n, n)
        }
    };
    if lo == 0 || lo > hi {
        return Err(format!(
            "'{text}': the range must be positive with MIN <= MAX"
        ));
    }
    Ok((lo, hi))
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
    let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut out = BufWriter::with_capacity(4 << 20, file);
    let report = workload::generate(&config, &mut out)
        .with_context(|| format!("cannot write {}", path.display()))?;
    out.flush()
        .with_context(|| format!("cannot write {}", path.display()))?;
    let secs = report.elapsed.as_secs_f64();
    let rate = if secs > 0.0 {
        report.events as f64 / secs
    } else {
        0.0
    };

    if args.json {
        let counts: serde_json::Map<String, serde_json::Value> = report
            .counts
            .nonzero()
            .map(|(k, n)| (k.name().to_string(), json!(n)))
            .collect();
        print_json(&json!({
            "path": path.display().to_string(),
            "seed": config.seed,
            "iterations": report.iterations,
            "events": report.events,
            "counts": counts,
            "bytes": report.bytes,
            "duration_ns": report.duration_ns,
            "capacity": config.capacity,
            "oom": report.oom.map(|o| json!({
                "iteration": o.iteration,
                "requested": o.requested,
                "free_bytes": o.free_bytes,
            })),
            "leaked_bytes": report.leaked_bytes,
            "parameter_bytes": report.parameter_bytes,
            "optimizer_state_bytes": report.optimizer_state_bytes,
            "peak_allocated": report.peak_allocated,
            "peak_reserved": report.peak_reserved,
            "final_allocated": report.final_allocated,
            "final_reserved": report.final_reserved,
            "elapsed_s": secs,
            "events_per_second": rate,
        }));
        return Ok(ExitCode::SUCCESS);
    }

    let range = |(lo, hi): (u64, u64)| {
        if lo == hi {
            lo.to_string()
        } else {
            format!("{lo} to {hi}")
        }
    };
    let mut text = format!(
        "Wrote {}: {} iterations of a {}-layer synthetic transformer (hidden {}, batch {}, \
         sequence length {}, {} stream{}, seed {}) on a simulated device with {}: {} events \
         in {} ({:.1} bytes per event), spanning {} of simulated time. Parameters take {}, \
         optimizer state {} (from the first step); peak allocated {}, peak reserved {}; \
         at the end {} allocated and {} reserved.",
        path.display(),
        units::count(report.iterations),
        config.layers,
        config.hidden,
        range(config.batch),
        range(config.seq_len),
        config.streams,
        if config.streams == 1 { "" } else { "s" },
        config.seed,
        config
            .capacity
            .map_or("unlimited memory".to_string(), units::bytes),
        units::count(report.events),
        units::bytes(report.bytes),
        report.bytes as f64 / report.events.max(1) as f64,
        units::duration_ns(report.duration_ns),
        units::bytes(report.parameter_bytes),
        units::bytes(report.optimizer_state_bytes),
        units::bytes(report.peak_allocated),
        units::bytes(report.peak_reserved),
        units::bytes(report.final_allocated),
        units::bytes(report.final_reserved),
    );
    if report.leaked_bytes > 0 {
        text.push_str(&format!(
            " A leak at log_metrics (train.py:120) retained {} ({} per iteration).",
            units::bytes(report.leaked_bytes),
            units::bytes(config.leak_bytes)
        ));
    }
    if let Some(k) = config.empty_cache_every {
        text.push_str(&format!(" empty_cache() ran every {k} iterations."));
    }
    if let Some(oom) = report.oom {
        text.push_str(&format!(
            " The device ran out of memory in iteration {} (a request of {} with {} free); \
             the run ended there.",
            oom.iteration,
            units::bytes(oom.requested),
            units::bytes(oom.free_bytes)
        ));
    }
    text.push_str(&format!(
        " Generated in {:.2} s ({} events/s).",
        secs,
        units::count(rate as u64)
    ));
    println!("{text}");
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_ranges_parse() {
        assert_eq!(parse_count("100M"), Ok(100_000_000));
        assert_eq!(parse_count("1e8"), Ok(100_000_000));
        assert_eq!(parse_count("5_000"), Ok(5000));
        assert!(parse_count("lots").is_err());
        assert_eq!(parse_range("256"), Ok((256, 256)));
        assert_eq!(parse_range("64:1024"), Ok((64, 1024)));
        assert!(parse_range("9:3").is_err());
        assert!(parse_range("0").is_err());
    }
}
