//! A program recorded onto a slow disk (issue #32): allocations at a steady
//! rate, observed, written to a [`SlowDisk`]. Prints the rate the program
//! kept, the longest a call blocked it, the events dropped, and what a
//! SIGKILL at given moments would have lost: the bytes on the disk at that
//! moment are what a killed process leaves, read back as a cut trace.
//!
//! ```sh
//! cargo run --release -p vramtrace-recorder --example slow_disk -- \
//!     [bytes/s=200000] [events/s=30000] [seconds=17] [unbounded | age=MS]
//! ```
//!
//! `unbounded` records as before issue #32 (64 batches queued, the program
//! waits as long as it takes, nothing dropped); `age=MS` sets
//! `max_queue_age` (0: none).

use std::time::{Duration, Instant};
use vramtrace_recorder::format::{EventData, EventKind, TraceReader};
use vramtrace_recorder::workload::SlowDisk;
use vramtrace_recorder::{ObservedEvent, Observer, ObserverSetup, RecorderOptions, Trace};

/// The moments a kill is looked at, in seconds from the start.
const KILLS: [u64; 2] = [8, 16];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (rate, events_per_s, seconds) = (num(0, 200_000), num(1, 30_000), num(2, 17));
    let unbounded = args.iter().any(|a| a == "unbounded");
    let age = args
        .iter()
        .find_map(|a| a.strip_prefix("age=")?.parse::<u64>().ok());
    let options = if unbounded {
        RecorderOptions {
            queue_batches: 64,
            max_wait: None,
            max_queue_age: None,
            ..RecorderOptions::default()
        }
    } else {
        RecorderOptions {
            max_queue_age: age.map_or(RecorderOptions::default().max_queue_age, |ms| {
                (ms > 0).then(|| Duration::from_millis(ms))
            }),
            ..RecorderOptions::default()
        }
    };
    let disk = SlowDisk::new(rate);
    let setup = ObserverSetup::device(0, "observed", 1 << 40);
    let options_age = options.max_queue_age;
    let obs = Observer::new(disk.clone(), setup, options).unwrap();
    let ev = |kind, addr, size| ObservedEvent {
        kind,
        addr,
        size,
        stream: 0,
        counter: 0,
    };
    obs.record(ev(EventKind::SegmentAlloc, 0, 1 << 40), None);
    // The program's work: a millisecond's worth of events, then the rest of
    // the millisecond; time lost blocked is not made up.
    let per_ms = (events_per_s / 1000).max(1);
    let start = Instant::now();
    let mut produced = 1u64;
    let mut longest = Duration::ZERO;
    let mut snapshots = Vec::new();
    let mut next = start;
    let mut i = 0u64;
    while start.elapsed() < Duration::from_secs(seconds) {
        for _ in 0..per_ms {
            let addr = (i % 4093) << 20;
            let size = 512 << (i % 11);
            let kind = match i % 3 {
                0 => EventKind::Alloc,
                1 => EventKind::FreeRequested,
                _ => EventKind::FreeCompleted,
            };
            let t = Instant::now();
            obs.record(ev(kind, addr, size), None);
            longest = longest.max(t.elapsed());
            produced += 1;
            i += 1;
        }
        if let Some(&k) = KILLS.get(snapshots.len())
            && start.elapsed() >= Duration::from_secs(k)
        {
            snapshots.push((start.elapsed(), produced, disk.bytes()));
        }
        next = (next + Duration::from_millis(1)).max(Instant::now());
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let elapsed = start.elapsed();
    let stats = obs.queue_stats();
    println!(
        "{} (queue age bound {:?}): disk {} B/s, program {} events/s asked, {:.0} kept ({:.0}%), longest call {:?}, longest wait {:?}, {} events dropped in {} gaps",
        if unbounded {
            "unbounded (before)"
        } else {
            "bounded (after)"
        },
        options_age,
        rate,
        events_per_s,
        produced as f64 / elapsed.as_secs_f64(),
        100.0 * produced as f64 / elapsed.as_secs_f64() / events_per_s as f64,
        longest,
        stats.longest_wait,
        stats.dropped_events,
        stats.drops,
    );
    for (at, produced, bytes) in snapshots {
        let mut reader = TraceReader::new(&bytes[..]).unwrap();
        let (mut kept, mut dropped, mut last) = (0u64, 0u64, 0u64);
        for e in reader.events().map_while(Result::ok) {
            last = e.time_ns;
            match e.data {
                EventData::EventsDropped(d) => dropped += d.count,
                _ => kept += 1,
            }
        }
        let lost_ns = (at.as_nanos() as u64).saturating_sub(last);
        println!(
            "  killed at {:.1} s: {} of {} events on disk, {} marked dropped, {} lost: the last {:.2} s of events",
            at.as_secs_f64(),
            kept,
            produced,
            dropped,
            produced.saturating_sub(kept + dropped),
            lost_ns as f64 / 1e9,
        );
    }
    disk.unthrottle();
    obs.finish().unwrap();
}
