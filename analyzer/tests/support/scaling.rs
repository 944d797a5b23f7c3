//! Scaling checks: an analysis given ten times the input must cost about ten
//! times as much, never a hundred.
//!
//! Cost is counted in user-space instructions retired by the measuring
//! thread (Linux `perf_event_open`), which does not move with the machine's
//! load. Where counters are not allowed (some containers and CI runners),
//! the thread's own CPU time stands in, the least of several runs, and a
//! ratio past the bound is measured again (three times at most, the least
//! kept). Either way the check is a ratio between two sizes, never a time
//! limit.
//!
//! The bound is wider in CPU time than in instructions. Ten times the input
//! is ten times the working set: where the small input's state fits in the
//! processor's caches and the large one's does not, each instruction costs
//! more, and linear work measured 12.7x in time on a CI runner (the Perfetto
//! timeline of blocks tagged late). Quadratic work costs about 100x in
//! either unit, far past both bounds.
//!
//! Measure single-threaded code paths: work handed to other threads is not
//! counted. Measurements are taken one at a time (a lock), so tests in the
//! same binary do not disturb each other's CPU time.

#![allow(dead_code)]

use std::sync::Mutex;
use std::time::Duration;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// What a cost was counted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Instructions,
    ThreadCpuNanos,
}

impl Unit {
    /// The largest cost ratio allowed for ten times the input. Linear work
    /// with some n log n parts and fixed costs stays below it, quadratic
    /// work (about 100x) far above. In time, a working set that outgrows
    /// the caches may add half as much again (see the module documentation).
    pub fn max_ratio(self) -> f64 {
        match self {
            Unit::Instructions => 12.0,
            Unit::ThreadCpuNanos => 18.0,
        }
    }
}

/// Checks that `run` on `make(10 * n)` costs at most [`Unit::max_ratio`]
/// times `run` on `make(n)`. Building the input is not counted. Panics with
/// both costs when the check fails.
pub fn assert_linear<I>(what: &str, n: usize, make: impl Fn(usize) -> I, run: impl Fn(&I)) {
    let _guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let small = make(n);
    let large = make(10 * n);
    // Warm up: first-touch page faults and lazy statics count once, not in
    // the ratio.
    run(&small);
    // A ratio past the bound is measured again (up to three times in all),
    // and the least kept: where CPU time stands in for instructions, one
    // measurement disturbed by the machine (a cache flushed, a frequency
    // change) must not fail linear work; quadratic work fails every time.
    let mut best: Option<(Unit, u64, u64)> = None;
    for _ in 0..3 {
        let (unit, small_cost) = cost(|| run(&small));
        let (_, large_cost) = cost_in(unit, || run(&large));
        let ratio = large_cost as f64 / small_cost.max(1) as f64;
        let better = best.is_none_or(|(_, s, l)| ratio < l as f64 / s.max(1) as f64);
        if better {
            best = Some((unit, small_cost, large_cost));
        }
        if ratio <= unit.max_ratio() || unit == Unit::Instructions {
            break;
        }
    }
    let (unit, small_cost, large_cost) = best.expect("measured once at least");
    let ratio = large_cost as f64 / small_cost.max(1) as f64;
    eprintln!(
        "scaling {what}: n={n} {small_cost}, n={} {large_cost} ({unit:?}), ratio {ratio:.2}",
        10 * n
    );
    let max_ratio = unit.max_ratio();
    assert!(
        ratio <= max_ratio,
        "{what}: 10x the input ({} instead of {n}) cost {ratio:.1}x ({small_cost} -> {large_cost} {unit:?}); at most {max_ratio}x is linear",
        10 * n
    );
}

fn cost(run: impl Fn()) -> (Unit, u64) {
    match counter::Instructions::open() {
        Some(counter) => (Unit::Instructions, counter.count(&run)),
        None => (Unit::ThreadCpuNanos, least_cpu_time(&run)),
    }
}

fn cost_in(unit: Unit, run: impl Fn()) -> (Unit, u64) {
    match unit {
        Unit::Instructions => cost(run),
        Unit::ThreadCpuNanos => (unit, least_cpu_time(&run)),
    }
}

/// The least thread CPU time of seven runs: interference (cache misses
/// from other processes, frequency changes) only ever adds.
fn least_cpu_time(run: &impl Fn()) -> u64 {
    (0..7)
        .map(|_| {
            let start = thread_cpu_time();
            run();
            thread_cpu_time().saturating_sub(start).as_nanos() as u64
        })
        .min()
        .unwrap_or(0)
}

fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

mod counter {
    /// A user-space instruction counter on the calling thread.
    pub struct Instructions(i32);

    // The parts of `struct perf_event_attr` this needs; the kernel reads
    // `size` bytes and treats the rest as zero.
    #[repr(C)]
    #[derive(Default)]
    struct PerfEventAttr {
        kind: u32,
        size: u32,
        config: u64,
        sample_period: u64,
        sample_type: u64,
        read_format: u64,
        flags: u64,
        wakeup_events: u32,
        bp_type: u32,
        config1: u64,
    }

    const PERF_TYPE_HARDWARE: u32 = 0;
    const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
    const DISABLED: u64 = 1;
    const EXCLUDE_KERNEL: u64 = 1 << 5;
    const EXCLUDE_HV: u64 = 1 << 6;
    const ENABLE: libc::c_ulong = 0x2400;
    const DISABLE: libc::c_ulong = 0x2401;
    const RESET: libc::c_ulong = 0x2403;

    impl Instructions {
        pub fn open() -> Option<Self> {
            if std::env::var_os("VRAMTRACE_SCALING_CPU_TIME").is_some() {
                return None;
            }
            let attr = PerfEventAttr {
                kind: PERF_TYPE_HARDWARE,
                size: std::mem::size_of::<PerfEventAttr>() as u32,
                config: PERF_COUNT_HW_INSTRUCTIONS,
                flags: DISABLED | EXCLUDE_KERNEL | EXCLUDE_HV,
                ..Default::default()
            };
            // SAFETY: a valid attr for the kernel to read; pid 0 and cpu -1
            // count the calling thread on any CPU.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_perf_event_open,
                    &attr as *const PerfEventAttr,
                    0,
                    -1,
                    -1,
                    0u64,
                )
            };
            if fd < 0 {
                return None;
            }
            let counter = Instructions(fd as i32);
            // A counter that opens but never counts (no PMU in a VM).
            let probe = counter.count(&|| {
                std::hint::black_box((0..1000u64).sum::<u64>());
            });
            (probe > 0).then_some(counter)
        }

        pub fn count(&self, run: &impl Fn()) -> u64 {
            // SAFETY: ioctls and a read on the counter's own descriptor.
            unsafe {
                libc::ioctl(self.0, RESET, 0);
                libc::ioctl(self.0, ENABLE, 0);
                run();
                libc::ioctl(self.0, DISABLE, 0);
                let mut value = 0u64;
                let n = libc::read(self.0, (&mut value as *mut u64).cast(), 8);
                if n == 8 { value } else { 0 }
            }
        }
    }

    impl Drop for Instructions {
        fn drop(&mut self) {
            // SAFETY: the descriptor is this counter's own.
            unsafe { libc::close(self.0) };
        }
    }
}
