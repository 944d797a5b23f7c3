//! `vramtrace import`: convert a PyTorch memory snapshot into a trace once,
//! so later analyses skip the pickle.

use super::{print_json, warn};
use crate::input::{self, Compression};
use crate::{progress, snapshot, units};
use anyhow::Context;
use serde_json::json;
use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use vramtrace_format::{EventKind, MAGIC};

/// Arguments of `vramtrace import`.
#[derive(clap::Args)]
pub struct Args {
    /// The snapshot: a pickle from `torch.cuda.memory._dump_snapshot()`,
    /// plain or compressed with gzip, xz or zstd.
    snapshot: PathBuf,
    /// Where to write the trace.
    #[arg(short, long)]
    output: PathBuf,
    /// Print one JSON object instead of a summary.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let path = &args.snapshot;
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let size = file.metadata().map(|m| m.len()).ok();
    let (mut stream, compression) =
        input::decompress(file).with_context(|| format!("cannot read {}", path.display()))?;
    let mut start = [0u8; 1];
    let got = stream.read(&mut start)?;
    let rest = std::io::Cursor::new(start[..got].to_vec()).chain(stream);
    if got == 1 && start[0] == MAGIC[0] {
        anyhow::bail!(
            "{} is already a vramtrace trace (or not a snapshot): nothing to import",
            path.display()
        );
    }
    let bar = progress::bytes_bar(
        size.filter(|_| compression == Compression::None),
        "importing",
    );
    let imported = snapshot::import(rest, &|bytes| bar.set_position(bytes))
        .with_context(|| format!("cannot import {}", path.display()))?;
    bar.finish_and_clear();
    let report = &imported.report;
    std::fs::write(&args.output, &imported.trace)
        .with_context(|| format!("cannot write {}", args.output.display()))?;
    for warning in &report.warnings {
        warn(format_args!("{}: {warning}", path.display()));
    }
    let events = report.event_counts.total();
    if args.json {
        let counts: serde_json::Map<String, serde_json::Value> = report
            .event_counts
            .nonzero()
            .map(|(k, n)| (k.name().to_string(), json!(n)))
            .collect();
        print_json(&json!({
            "snapshot": path.display().to_string(),
            "output": args.output.display().to_string(),
            "compression": format!("{compression:?}").to_lowercase(),
            "pickle_protocol": report.pickle_protocol,
            "pickle_bytes": report.pickle_bytes,
            "trace_bytes": imported.trace.len(),
            "events": events,
            "counts": counts,
            "actions": report.counts_by_action,
            "devices": report.entries_per_device.len(),
            "frames": report.frames,
            "stacks": report.stacks,
            "phase_events": report.phase_events,
            "initial_segments": report.initial_segments,
            "initial_blocks": report.initial_blocks,
            "end_state_matches": report.end_state_matches,
            "warnings": report.warnings,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "imported {} events from {} ({} of pickle, protocol {}) into {} ({}, {:.1} bytes per event)",
        units::count(events),
        path.display(),
        units::bytes(report.pickle_bytes),
        report.pickle_protocol,
        args.output.display(),
        units::bytes(imported.trace.len() as u64),
        imported.trace.len() as f64 / events.max(1) as f64,
    );
    for kind in EventKind::ALL {
        let n = report.event_counts.get(kind);
        if n > 0 {
            println!("  {:<15}{:>14}", kind.name(), units::count(n));
        }
    }
    println!(
        "  {} distinct frames, {} stacks, {} phase events",
        units::count(report.frames as u64),
        units::count(report.stacks as u64),
        units::count(report.phase_events as u64)
    );
    if report.initial_segments > 0 {
        println!(
            "  the snapshot's ring buffer began mid-run: {} segments and {} live blocks existed before its first entry",
            report.initial_segments, report.initial_blocks
        );
    }
    println!(
        "  end state {}",
        if report.end_state_matches {
            "matches the snapshot's segments"
        } else {
            "differs from the snapshot's segments (see the warnings)"
        }
    );
    Ok(ExitCode::SUCCESS)
}
