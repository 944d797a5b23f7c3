//! Imports a snapshot (or opens a trace) and prints what it took: a benchmark of the
//! import path. `cargo run --release -p vramtrace --example import_snapshot -- FILE`

use std::time::Instant;
use vramtrace_format::EventSource;

fn peak_rss_mib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

fn main() -> anyhow::Result<()> {
    let path = std::env::args()
        .nth(1)
        .expect("usage: import_snapshot FILE");
    let started = Instant::now();
    let opened = vramtrace::input::Input::open(&path, &vramtrace::progress::NoProgress)?;
    let opened_in = started.elapsed();
    let mut events = 0u64;
    opened
        .events()?
        .for_each_batch(|batch, _| events += batch.len() as u64)?;
    let total = started.elapsed();
    if let Some(r) = opened.import_report() {
        println!("pickle bytes: {}", r.pickle_bytes);
        println!("actions: {:?}", r.counts_by_action);
        println!("frames: {}, stacks: {}", r.frames, r.stacks);
        println!(
            "initial state: {} segments, {} blocks; end state matches: {}",
            r.initial_segments, r.initial_blocks, r.end_state_matches
        );
        for w in &r.warnings {
            println!("warning: {w}");
        }
    }
    println!("events: {events}");
    println!(
        "open+import: {:.3} s, with reading all events: {:.3} s",
        opened_in.as_secs_f64(),
        total.as_secs_f64()
    );
    if let Some(m) = peak_rss_mib() {
        println!("peak RSS: {m} MiB");
    }
    Ok(())
}
