//! Overhead of recording: an alloc+free pair on a `SimulatedDevice`, one
//! thread, mixed sizes (512 B .. 40 MiB), 32 live tensors, fixed seed:
//!
//! - `raw`: the caching allocator alone, event log off;
//! - `record_no_stacks`: through a `Recorder` without stacks;
//! - `record_native_stacks`: through a `Recorder` capturing native stacks of
//!   up to 32 frames (the pair runs 40 calls deep).
//!
//! The recorder writes to `io::sink()`, so the writer thread's encoding runs
//! (on another core) but no disk is involved.
//!
//! `cargo bench -p vramtrace-recorder --bench recorder`

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use vramtrace_recorder::allocator::{AllocatorConfig, CachingAllocator};
use vramtrace_recorder::device::SimulatedDevice;
use vramtrace_recorder::recorder::{Recorder, RecorderOptions, StackMode};

const LIVE: usize = 32;
const STEPS: usize = 4096;

/// (slot, size) per step: log-uniform sizes from 512 B to 40 MiB.
fn workload() -> Vec<(usize, u64)> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (lo, hi) = ((512f64).ln(), ((40u64 << 20) as f64).ln());
    (0..STEPS)
        .map(|_| {
            let slot = (next() % LIVE as u64) as usize;
            let u = (next() >> 11) as f64 / (1u64 << 53) as f64;
            (slot, (lo + u * (hi - lo)).exp() as u64)
        })
        .collect()
}

fn allocator() -> CachingAllocator<SimulatedDevice> {
    CachingAllocator::new(SimulatedDevice::unlimited(), AllocatorConfig::default())
}

/// Runs `f` `depth` calls deeper than the caller, so stacks have frames to walk.
#[inline(never)]
fn deep(depth: u32, f: &mut dyn FnMut()) -> u32 {
    if depth == 0 {
        f();
        0
    } else {
        // Work after the call keeps it from becoming a tail call.
        black_box(deep(black_box(depth - 1), f)) + 1
    }
}

fn bench(c: &mut Criterion) {
    let steps = workload();
    let mut group = c.benchmark_group("alloc_free_pair");

    group.bench_function("raw", |b| {
        let mut a = allocator();
        a.set_event_log(false);
        let mut live: Vec<u64> = (0..LIVE).map(|_| a.malloc(512, 0).unwrap().addr).collect();
        let mut i = 0;
        b.iter(|| {
            let (slot, size) = steps[i % STEPS];
            i += 1;
            a.free(live[slot]).unwrap();
            live[slot] = a.malloc(size, 0).unwrap().addr;
        });
    });

    for (name, stacks) in [
        ("record_no_stacks", StackMode::None),
        ("record_native_stacks", StackMode::Native),
    ] {
        group.bench_function(name, |b| {
            let options = RecorderOptions {
                stacks,
                max_stack_depth: 32,
                ..RecorderOptions::default()
            };
            let r = Recorder::new(allocator(), std::io::sink(), options).unwrap();
            let mut live: Vec<u64> = (0..LIVE).map(|_| r.malloc(512, 0).unwrap().addr).collect();
            let mut i = 0;
            deep(40, &mut || {
                b.iter(|| {
                    let (slot, size) = steps[i % STEPS];
                    i += 1;
                    r.free(live[slot]).unwrap();
                    live[slot] = r.malloc(size, 0).unwrap().addr;
                })
            });
            r.finish().unwrap();
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
