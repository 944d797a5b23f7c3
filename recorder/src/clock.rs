//! The recorder's clock: nanoseconds since recording started, read once per
//! recorded call, under the recorder's lock.
//!
//! Reading `CLOCK_MONOTONIC` through the vDSO costs 20–25 ns, two of them
//! per alloc+free pair: a large part of the recording budget. Where the
//! kernel itself keeps time with the CPU's time-stamp counter (Linux on
//! x86_64 with the `tsc` clocksource, which the kernel selects only after
//! checking that the counter runs at a constant rate and agrees across CPUs),
//! the clock reads the counter instead (a few ns) and converts cycles to
//! nanoseconds with a line fitted to `CLOCK_MONOTONIC`:
//!
//! - until the fit has a baseline of `tsc::MIN_BASELINE_CYCLES`, every read is
//!   a `CLOCK_MONOTONIC` read (the first few ms of a recording);
//! - then the rate is the counter's over the whole recording so far, and the
//!   line is anchored to `CLOCK_MONOTONIC` again every `tsc::REFIT_CYCLES`
//!   (about every 10 ms, or on the first read after a longer pause), so
//!   times stay within a small fraction of a microsecond of the real clock
//!   and never drift.
//!
//! Elsewhere (other systems, other clocksources, other architectures) every
//! read is a `CLOCK_MONOTONIC` read.
//!
//! Either way readings are monotonic: a re-anchored line may start a little
//! before the last reading of the old one, so a reading never goes below the
//! last one (the clock is read under the recorder's lock, so this is
//! monotonic in trace order).

#[cfg(not(unix))]
use std::time::Instant;

/// Nanoseconds since the clock started. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Clock {
    #[cfg(unix)]
    origin_ns: u64,
    #[cfg(not(unix))]
    origin: Instant,
    /// The last reading: readings never go below it.
    last_ns: u64,
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    tsc: Option<tsc::Fit>,
}

impl Clock {
    /// A clock starting now, on the TSC where it can be trusted.
    pub fn start() -> Self {
        let mut clock = Self::monotonic();
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        if tsc::trusted() {
            clock.tsc = Some(tsc::Fit::default());
        }
        clock
    }

    /// A clock starting now that reads `CLOCK_MONOTONIC` every time.
    pub fn monotonic() -> Self {
        Clock {
            #[cfg(unix)]
            origin_ns: monotonic_ns(),
            #[cfg(not(unix))]
            origin: Instant::now(),
            last_ns: 0,
            #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
            tsc: None,
        }
    }

    /// Nanoseconds since the start, at least the previous reading.
    #[inline]
    pub fn now_ns(&mut self) -> u64 {
        let t = self.read();
        if t > self.last_ns {
            self.last_ns = t;
        }
        self.last_ns
    }

    /// Nanoseconds since the start at the moment the CPU's time-stamp
    /// counter read `counter` (a reading someone else took moments ago, so
    /// that this recording need not read the clock again), at least the
    /// previous reading. Where the clock does not run on the counter, or
    /// `counter` is far from its last anchoring (not a reading of this
    /// counter at all), it reads the clock now instead.
    #[inline]
    pub fn counter_ns(&mut self, counter: u64) -> u64 {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        if let Some(fit) = &mut self.tsc {
            let t = fit.convert(counter, self.origin_ns);
            if t > self.last_ns {
                self.last_ns = t;
            }
            return self.last_ns;
        }
        let _ = counter;
        self.now_ns()
    }

    #[inline]
    fn read(&mut self) -> u64 {
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        if let Some(fit) = &mut self.tsc {
            return fit.read(self.origin_ns);
        }
        self.read_monotonic()
    }

    #[inline]
    fn read_monotonic(&self) -> u64 {
        #[cfg(unix)]
        return monotonic_ns().saturating_sub(self.origin_ns);
        #[cfg(not(unix))]
        return self.origin.elapsed().as_nanos() as u64;
    }
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod tsc {
    use super::monotonic_ns;
    use std::sync::OnceLock;

    /// Baseline the rate is measured over before the counter is used: about
    /// 1.4 ms at 3 GHz. A pair of readings is known to within about 100
    /// cycles, so the first rate is within about 1e-4 of the true one, and
    /// better as the baseline grows (it is the whole recording so far).
    const MIN_BASELINE_CYCLES: u64 = 1 << 22;
    /// Cycles between re-anchorings of the line: about 11 ms at 3 GHz.
    const REFIT_CYCLES: u64 = 1 << 25;
    /// A pair of readings (counter, `CLOCK_MONOTONIC`, counter) further apart
    /// than this (about 1.4 µs at 3 GHz; a vDSO read takes 100 to 300 cycles)
    /// was interrupted (preempted, or moved to another CPU) and is not
    /// trusted for the fit. A trusted pair is known to within half of this,
    /// so a rate over `MIN_BASELINE_CYCLES` is within 1/1024 of the truth,
    /// and a rate that moves by more than 1/256 means the clocks parted.
    const MAX_PAIR_CYCLES: u64 = 1 << 12;

    /// Whether the kernel keeps time with the TSC. The kernel picks the `tsc`
    /// clocksource only once it has found the counter invariant (constant
    /// rate through frequency changes and idle states) and synchronized
    /// across CPUs; under a hypervisor that does not promise as much it picks
    /// another. Read once per process.
    pub fn trusted() -> bool {
        static TRUSTED: OnceLock<bool> = OnceLock::new();
        *TRUSTED.get_or_init(|| {
            std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .is_ok_and(|s| s.trim() == "tsc")
        })
    }

    #[inline(always)]
    fn rdtsc() -> u64 {
        // SAFETY: RDTSC is part of x86_64 (every x86_64 CPU has the TSC) and
        // only reads the counter; Linux leaves it enabled in user mode (it is
        // what the vDSO's clock_gettime reads).
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    /// Cycles to nanoseconds: `anchor_ns + (cycles - anchor_cycles) * rate`.
    #[derive(Debug, Default)]
    pub struct Fit {
        /// Reads less than this many cycles after the anchor are converted;
        /// others (and all of them before the rate is known: it starts at 0)
        /// take [`refit`](Self::refit). Also catches a counter behind the
        /// anchor: the difference wraps to a huge number.
        span: u64,
        anchor_cycles: u64,
        anchor_ns: u64,
        /// Nanoseconds per cycle, in 32.32 fixed point.
        rate: u64,
        /// The first trusted pair of readings (cycles, ns): where the rate
        /// is measured from.
        first: Option<(u64, u64)>,
    }

    impl Fit {
        #[inline(always)]
        pub fn read(&mut self, origin_ns: u64) -> u64 {
            self.convert(rdtsc(), origin_ns)
        }

        /// Converts a counter reading; one outside the span of the line (or
        /// any, before the rate is known) takes [`refit`](Self::refit), which
        /// reads the clock now.
        #[inline(always)]
        pub fn convert(&mut self, counter: u64, origin_ns: u64) -> u64 {
            let elapsed = counter.wrapping_sub(self.anchor_cycles);
            if elapsed < self.span {
                // elapsed < 2^25 and rate < 2^36 (below 16 ns per cycle):
                // the product fits in 64 bits.
                self.anchor_ns + ((elapsed * self.rate) >> 32)
            } else {
                self.refit(origin_ns)
            }
        }

        /// Reads `CLOCK_MONOTONIC` and, if the reading pairs cleanly with the
        /// counter, re-anchors the line there (measuring the rate first, once
        /// the baseline is long enough). Returns the `CLOCK_MONOTONIC` reading.
        #[cold]
        #[inline(never)]
        fn refit(&mut self, origin_ns: u64) -> u64 {
            let before = rdtsc();
            let ns = monotonic_ns().saturating_sub(origin_ns);
            let after = rdtsc();
            let gap = after.wrapping_sub(before);
            if gap > MAX_PAIR_CYCLES {
                // Untrusted: keep the old line; the next read tries again.
                return ns;
            }
            // The clock was read somewhere between the two counter readings.
            let cycles = before + gap / 2;
            let Some((first_cycles, first_ns)) = self.first else {
                self.first = Some((cycles, ns));
                return ns;
            };
            match cycles.checked_sub(first_cycles) {
                Some(baseline) if baseline >= MIN_BASELINE_CYCLES => {
                    let rate = (u128::from(ns - first_ns.min(ns)) << 32) / u128::from(baseline);
                    let rate = u64::try_from(rate).unwrap_or(u64::MAX);
                    if self.rate != 0 && rate.abs_diff(self.rate) > self.rate / 256 {
                        // The rate moved: the two clocks parted (a suspend
                        // the counter ran through, a clocksource change).
                        // Measure again from here, reading the clock meanwhile.
                        *self = Fit {
                            first: Some((cycles, ns)),
                            ..Fit::default()
                        };
                    } else if rate < 1 << 36 {
                        // (A rate of 16 ns per cycle or more, a counter below
                        // 62.5 MHz, is no TSC: keep reading the clock.)
                        self.rate = rate;
                        self.anchor_cycles = cycles;
                        self.anchor_ns = ns;
                        self.span = REFIT_CYCLES;
                    }
                }
                Some(_) => {}
                // The counter went back past the first pair (it should
                // not): measure from here.
                None => self.first = Some((cycles, ns)),
            }
            ns
        }
    }
}

#[cfg(unix)]
#[inline]
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out-pointer; CLOCK_MONOTONIC
    // cannot fail on a supported system, and a zero reading would only
    // stamp an event at the start.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Reads both clocks for `dur`; the readings are monotonic, and the TSC
    /// clock stays close to `CLOCK_MONOTONIC` once calibrated.
    #[test]
    fn readings_are_monotonic_and_close_to_the_monotonic_clock() {
        let mut clock = Clock::start();
        let mut last = clock.origin_ns;
        let mut worst = 0u64;
        let end = std::time::Instant::now() + Duration::from_millis(60);
        let mut i = 0u64;
        while std::time::Instant::now() < end {
            let before = monotonic_ns();
            let t = clock.now_ns() + clock.origin_ns;
            let after = monotonic_ns();
            assert!(t >= last, "went back from {last} to {t}");
            last = t;
            // Only judge reads that were not interrupted.
            if after - before < 5_000 {
                let off = if t < before {
                    before - t
                } else {
                    t.saturating_sub(after)
                };
                worst = worst.max(off);
            }
            i += 1;
            if i.is_multiple_of(64) {
                std::thread::yield_now();
            }
        }
        // Generous for a loaded test machine; typically tens of ns.
        assert!(worst < 200_000, "{worst} ns from CLOCK_MONOTONIC");
    }

    #[test]
    fn counter_readings_taken_elsewhere_convert_like_the_clocks_own() {
        let mut clock = Clock::start();
        let end = std::time::Instant::now() + Duration::from_millis(30);
        while std::time::Instant::now() < end {
            let _ = clock.now_ns();
        }
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        // SAFETY: reads the counter, as the clock does.
        let counter = unsafe { core::arch::x86_64::_rdtsc() };
        #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
        let counter = 0;
        let own = clock.now_ns();
        let given = clock.counter_ns(counter);
        // Never below the last reading; close to it (it was read just before).
        assert!(given >= own);
        assert!(given - own < 5_000_000, "{given} vs {own}");
        // Not a counter reading at all: the clock is read instead.
        let later = clock.counter_ns(u64::MAX / 3);
        assert!(later >= given && later - given < 1_000_000_000);
    }

    #[test]
    fn the_monotonic_clock_starts_near_zero() {
        let mut clock = Clock::monotonic();
        assert!(clock.now_ns() < 1_000_000_000);
    }
}
