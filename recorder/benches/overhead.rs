//! What recording adds to an alloc+free pair, measured so that a busy
//! machine cannot hide it: the same workload as the `recorder` benchmark
//! (one thread, mixed sizes, 32 live tensors, fixed seed) run as `raw` (the
//! allocator alone, event log off), `raw_locked` (behind a `std::sync::Mutex`)
//! and `record_no_stacks` (through a `Recorder` writing to `io::sink()`),
//! interleaved within each round so that a slow spell of the machine hits
//! all three, over many rounds. It reports each case's fastest round, first
//! quartile and median, what recording adds at each, and the same statistics
//! of the difference within each round (`record_no_stacks` minus `raw`).
//!
//! Criterion's `recorder` benchmark times each case in one block of a few
//! seconds; on a shared machine the blocks' conditions differ by more than
//! the difference being measured.
//!
//! `cargo bench -p vramtrace-recorder --bench overhead [-- --rounds N --pairs N]`

mod common;

use common::{LIVE, STEPS, allocator, workload};
use std::hint::black_box;
use std::sync::Mutex;
use std::time::Instant;
use vramtrace_recorder::{Recorder, RecorderOptions};

/// Nanoseconds per pair over `pairs` pairs, after a quarter as many to warm
/// up (caches, the recorder's buffers, the lock's bias). `pair(old, size)`
/// frees `old` (if any) and returns the address of a new block of `size`.
fn time_pairs(
    mut pair: impl FnMut(Option<u64>, u64) -> u64,
    steps: &[(usize, u64)],
    pairs: usize,
) -> f64 {
    let mut live: Vec<u64> = (0..LIVE).map(|_| pair(None, 512)).collect();
    let mut run = |n: usize| {
        for i in 0..n {
            let (slot, size) = steps[i % STEPS];
            live[slot] = pair(Some(live[slot]), size);
        }
    };
    run(pairs / 4);
    let start = Instant::now();
    run(pairs);
    let ns = start.elapsed().as_nanos() as f64 / pairs as f64;
    black_box(&live);
    ns
}

fn main() {
    let mut rounds = 21usize;
    let mut pairs = 400_000usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => rounds = args.next().and_then(|v| v.parse().ok()).unwrap_or(rounds),
            "--pairs" => pairs = args.next().and_then(|v| v.parse().ok()).unwrap_or(pairs),
            // `cargo bench` passes `--bench`; filters do not apply here.
            _ => {}
        }
    }
    let rounds = rounds.max(1);
    let pairs = pairs.max(1);
    let steps = workload();
    let names = ["raw", "raw_locked", "record_no_stacks"];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..rounds {
        let mut a = allocator();
        a.set_event_log(false);
        let raw = |old: Option<u64>, size| {
            if let Some(addr) = old {
                a.free(addr).unwrap();
            }
            a.malloc(size, 0).unwrap().addr
        };
        times[0].push(time_pairs(raw, &steps, pairs));
        let mut a = allocator();
        a.set_event_log(false);
        let a = Mutex::new(a);
        let locked = |old: Option<u64>, size| {
            if let Some(addr) = old {
                a.lock().unwrap().free(addr).unwrap();
            }
            a.lock().unwrap().malloc(size, 0).unwrap().addr
        };
        times[1].push(time_pairs(locked, &steps, pairs));
        // Waiting for the writer thread rather than dropping keeps its work
        // in the figure, however fast the loop allocates.
        let options = RecorderOptions {
            max_wait: None,
            max_queue_age: None,
            ..RecorderOptions::default()
        };
        let r = Recorder::new(allocator(), std::io::sink(), options).unwrap();
        let recording = |old: Option<u64>, size| {
            if let Some(addr) = old {
                r.free(addr).unwrap();
            }
            r.malloc(size, 0).unwrap().addr
        };
        times[2].push(time_pairs(recording, &steps, pairs));
        r.finish().unwrap();
    }
    // Within a round the cases ran a fraction of a second apart: their
    // difference is less exposed to the machine's slow spells than the
    // cases' own spreads.
    let mut paired: Vec<f64> = times[2].iter().zip(&times[0]).map(|(r, a)| r - a).collect();
    paired.sort_by(f64::total_cmp);
    let stats: Vec<[f64; 3]> = times
        .iter_mut()
        .map(|v| {
            v.sort_by(f64::total_cmp);
            [v[0], v[v.len() / 4], v[v.len() / 2]]
        })
        .collect();
    println!("{rounds} rounds of {pairs} alloc+free pairs, ns per pair");
    println!("{:<24} {:>8} {:>8} {:>8}", "case", "min", "p25", "median");
    for (name, s) in names.iter().zip(&stats) {
        println!("{name:<24} {:>8.1} {:>8.1} {:>8.1}", s[0], s[1], s[2]);
    }
    let added: Vec<f64> = (0..3).map(|i| stats[2][i] - stats[0][i]).collect();
    println!(
        "{:<24} {:>+8.1} {:>+8.1} {:>+8.1}",
        "added by recording", added[0], added[1], added[2]
    );
    println!(
        "{:<24} {:>+8.1} {:>+8.1} {:>+8.1}",
        "  the same, per round",
        paired[0],
        paired[paired.len() / 4],
        paired[paired.len() / 2]
    );
}
