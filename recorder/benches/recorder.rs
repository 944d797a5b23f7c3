//! Overhead of recording: an alloc+free pair on a `SimulatedDevice`, one
//! thread, mixed sizes (512 B .. 40 MiB), 32 live tensors, fixed seed:
//!
//! - `raw`: the caching allocator alone, event log off;
//! - `raw_locked`: the same behind a `Mutex`, as a thread-safe program
//!   (and the recorder) uses it;
//! - `record_no_stacks`: through a `Recorder` without stacks;
//! - `record_native_stacks`: through a `Recorder` capturing native stacks of
//!   up to 32 frames (the pair runs 40 calls deep);
//! - `record_to_file` and `record_keep_last`: without stacks, to a file in
//!   the temporary folder, whole or bounded (`--keep-last 64MiB`: the
//!   writer thread also follows the allocator's state and ends a part at
//!   each 8 MiB). A loop allocating flat out outruns the writer thread, so
//!   these measure what the writer thread gets through.
//!
//! The first recorders write to `io::sink()`, so the writer thread's encoding runs
//! (on another core) but no disk is involved.
//!
//! Each is measured twice: `alloc_free_pair` in wall time, and
//! `alloc_free_pair_thread_cpu` in the calling thread's CPU time, which a
//! loaded machine inflates far less (time spent waiting for a core is not
//! counted; the writer thread's work is not counted either).
//!
//! `cargo bench -p vramtrace-recorder --bench recorder`

mod common;

use common::{LIVE, STEPS, allocator, workload};
use criterion::measurement::{Measurement, ValueFormatter};
use criterion::{Bencher, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use vramtrace_recorder::device::SimulatedDevice;
use vramtrace_recorder::{KeepLast, Recorder, RecorderOptions, StackMode};

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

/// The calling thread's CPU time, in ns.
struct ThreadCpu;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Measurement for ThreadCpu {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns() - start
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &CpuFormatter
    }
}

struct CpuFormatter;

impl ValueFormatter for CpuFormatter {
    fn scale_values(&self, typical: f64, values: &mut [f64]) -> &'static str {
        let (div, unit) = if typical < 1e3 {
            (1.0, "ns cpu")
        } else if typical < 1e6 {
            (1e3, "µs cpu")
        } else {
            (1e6, "ms cpu")
        };
        values.iter_mut().for_each(|v| *v /= div);
        unit
    }
    fn scale_throughputs(&self, _typical: f64, t: &Throughput, values: &mut [f64]) -> &'static str {
        let n = match t {
            Throughput::Elements(n) | Throughput::Bytes(n) | Throughput::BytesDecimal(n) => *n,
            _ => 1,
        } as f64;
        values.iter_mut().for_each(|v| *v = n * 1e9 / *v);
        "/s cpu"
    }
    fn scale_for_machines(&self, _values: &mut [f64]) -> &'static str {
        "ns"
    }
}

fn wall(c: &mut Criterion) {
    pairs(c, "alloc_free_pair");
}

fn cpu(c: &mut Criterion<ThreadCpu>) {
    pairs(c, "alloc_free_pair_thread_cpu");
}

fn pairs<M: Measurement>(c: &mut Criterion<M>, name: &str) {
    let steps = workload();
    let mut group = c.benchmark_group(name);

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

    // What any thread-safe use of the allocator pays without recording:
    // the lock the recorder takes per call, the clock and the log aside.
    group.bench_function("raw_locked", |b| {
        let mut a = allocator();
        a.set_event_log(false);
        let a = std::sync::Mutex::new(a);
        let mut live: Vec<u64> = (0..LIVE)
            .map(|_| a.lock().unwrap().malloc(512, 0).unwrap().addr)
            .collect();
        let mut i = 0;
        b.iter(|| {
            let (slot, size) = steps[i % STEPS];
            i += 1;
            a.lock().unwrap().free(live[slot]).unwrap();
            live[slot] = a.lock().unwrap().malloc(size, 0).unwrap().addr;
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
                // A loop allocating flat out may outrun the writer thread:
                // waiting for it keeps its work in the figure (a dropped
                // buffer would make recording look cheaper than it is).
                max_wait: None,
                max_queue_age: None,
                ..RecorderOptions::default()
            };
            let r = Recorder::new(allocator(), std::io::sink(), options).unwrap();
            deep(40, &mut || recorded_pairs(b, &r, &steps));
            r.finish().unwrap();
        });
    }

    for (name, keep_last) in [
        ("record_to_file", None),
        ("record_keep_last", Some(KeepLast::Bytes(64 << 20))),
    ] {
        group.bench_function(name, |b| {
            let dir = std::env::temp_dir().join(format!("vramtrace-bench-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join(format!("{name}.vtrace"));
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_dir_all(dir.join(format!("{name}.vtrace.ring")));
            let options = RecorderOptions {
                keep_last,
                max_wait: None,
                max_queue_age: None,
                ..RecorderOptions::default()
            };
            let r = Recorder::create(&path, allocator(), options).unwrap();
            recorded_pairs(b, &r, &steps);
            r.finish().unwrap();
            let _ = std::fs::remove_dir_all(&dir);
        });
    }
    group.finish();
}

/// Times alloc+free pairs through `r`: each of `steps` in turn frees one of
/// 32 live blocks and allocates its replacement.
fn recorded_pairs<M: Measurement>(
    b: &mut Bencher<'_, M>,
    r: &Recorder<SimulatedDevice>,
    steps: &[(usize, u64)],
) {
    let mut live: Vec<u64> = (0..LIVE).map(|_| r.malloc(512, 0).unwrap().addr).collect();
    let mut i = 0;
    b.iter(|| {
        let (slot, size) = steps[i % STEPS];
        i += 1;
        r.free(live[slot]).unwrap();
        live[slot] = r.malloc(size, 0).unwrap().addr;
    });
}

criterion_group!(wall_time, wall);
criterion_group! {
    name = thread_cpu_time;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = cpu
}
criterion_main!(wall_time, thread_cpu_time);
