//! The device capacity a what-if runs at: the reserve kept off the device
//! for the CUDA context (and NCCL), the capacity the recording gives, the
//! decision between a device named and the recorded cap ([`Target`]), and
//! the search for the smallest capacity at which a run fits.

use super::{RequestList, SimOptions, SimulateError, simulate};
use crate::analysis::limits::Limit;
use serde::Serialize;
use vramtrace_allocator::device::{DeviceMemory, SimulatedDevice};
use vramtrace_allocator::{AllocatorConfig, MIB};

/// The precision of [`min_capacity`]: 2 MiB, the granularity of every
/// segment the allocator reserves.
pub const CAPACITY_STEP: u64 = 2 * MIB;

/// What a CUDA context takes of a device before the caching allocator has
/// any: about 500 MiB with CUDA's lazy loading. PyTorch's out-of-memory
/// messages show it as the memory a process has in use beyond what PyTorch
/// reserved: 0.49 GiB on an RTX 4090, an L40 and an A100
/// (github.com/3DTopia/Phidias-Diffusion/issues/8,
/// github.com/QwenLM/Qwen3-VL/issues/2097,
/// github.com/TianheWu/CoSeR/issues/10). An estimate: measure yours and
/// state it (`--reserve`).
pub const CUDA_CONTEXT_BYTES: u64 = 512 * MIB;

/// What NCCL's communication buffers take, when a trace shows NCCL: an
/// estimate, since they grow with channels and peers (and NVLink SHARP);
/// measure yours (`nvidia-smi` after `init_process_group`) and state it.
pub const NCCL_BYTES: u64 = 1024 * MIB;

/// Memory a what-if keeps off the caching allocator's device: what the CUDA
/// context (and NCCL) take at run time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Reserve {
    /// Bytes in all.
    pub bytes: u64,
    /// Whether they were stated (`--reserve`) rather than estimated.
    pub stated: bool,
    /// Whether the trace shows NCCL (a distributed run).
    pub nccl: bool,
    /// What they cover, in words.
    pub covers: String,
    /// Where the figure comes from: `stated`, `estimated`, or `measured`
    /// (the most memory outside the allocator the trace's device-memory
    /// samples saw).
    pub source: ReserveSource,
}

/// Where a [`Reserve`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReserveSource {
    /// Stated by the user.
    Stated,
    /// The estimate of [`Reserve::estimate`].
    Estimated,
    /// Measured by the recording: the most memory outside the allocator at
    /// any device-memory sample.
    Measured,
}

impl Reserve {
    /// The reserve stated, else the estimate.
    pub fn stated_or_estimated(stated: Option<u64>, nccl: bool) -> Reserve {
        match stated {
            Some(bytes) => Reserve::stated(bytes, nccl),
            None => Reserve::estimate(nccl),
        }
    }

    /// The reserve stated, else the one measured (the most memory outside
    /// the allocator that the trace's device-memory samples saw), else the
    /// estimate.
    pub fn stated_measured_or_estimated(
        stated: Option<u64>,
        measured: Option<u64>,
        nccl: bool,
    ) -> Reserve {
        match (stated, measured) {
            (Some(bytes), _) => Reserve::stated(bytes, nccl),
            (None, Some(bytes)) => Reserve::measured(bytes, nccl),
            (None, None) => Reserve::estimate(nccl),
        }
    }

    /// [`stated_measured_or_estimated`](Self::stated_measured_or_estimated)
    /// for a device of `device_bytes`: a measured reserve as large as that
    /// device (a sample no card of its size could give: a hostile trace's,
    /// or a far larger card's) gives way to the estimate, with why.
    pub fn for_device(
        stated: Option<u64>,
        measured: Option<u64>,
        nccl: bool,
        device_bytes: u64,
    ) -> (Reserve, Option<String>) {
        let reserve = Reserve::stated_measured_or_estimated(stated, measured, nccl);
        if reserve.source != ReserveSource::Measured || reserve.bytes < device_bytes {
            return (reserve, None);
        }
        let estimate = Reserve::estimate(nccl);
        let why = format!(
            "the memory measured outside the allocator ({}) is as much as the device's {}: the estimate ({}) is the reserve instead",
            crate::units::capacity(reserve.bytes),
            crate::units::capacity(device_bytes),
            crate::units::capacity(estimate.bytes)
        );
        (estimate, Some(why))
    }

    /// A reserve measured by the recording: the most memory outside the
    /// allocator at any device-memory sample.
    pub fn measured(bytes: u64, nccl: bool) -> Reserve {
        Reserve {
            bytes,
            stated: false,
            nccl,
            covers: "for memory outside the allocator (measured: the most the recording's device-memory samples saw)".into(),
            source: ReserveSource::Measured,
        }
    }

    /// The estimate: [`CUDA_CONTEXT_BYTES`], and [`NCCL_BYTES`] when the
    /// trace shows NCCL.
    pub fn estimate(nccl: bool) -> Reserve {
        Reserve {
            bytes: CUDA_CONTEXT_BYTES + if nccl { NCCL_BYTES } else { 0 },
            stated: false,
            nccl,
            covers: if nccl {
                "for the CUDA context and NCCL's buffers (estimated)".into()
            } else {
                "for the CUDA context (estimated)".into()
            },
            source: ReserveSource::Estimated,
        }
    }

    /// A reserve of `bytes`, as stated.
    pub fn stated(bytes: u64, nccl: bool) -> Reserve {
        Reserve {
            bytes,
            stated: true,
            nccl,
            covers: "(stated)".into(),
            source: ReserveSource::Stated,
        }
    }
}

/// Whether a trace shows NCCL: a launcher's `WORLD_SIZE` above 1, or a frame
/// of NCCL or `torch.distributed`.
pub fn shows_nccl(
    header: &vramtrace_format::Header,
    symbols: &vramtrace_format::SymbolTable,
) -> bool {
    if header.process.world_size.is_some_and(|n| n > 1) {
        return true;
    }
    (0..symbols.string_count() as u32)
        .filter_map(|i| symbols.string(vramtrace_format::StringId(i)))
        .any(|s| {
            s.contains("nccl")
                || s.contains("NCCL")
                || s.contains("torch/distributed/")
                || s.contains("c10d::")
        })
}

/// The smallest capacity that runs without an OOM, to [`CAPACITY_STEP`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MinCapacity {
    /// The smallest multiple of [`CAPACITY_STEP`] at which the run fits
    /// (`CAPACITY_STEP` less does not, unless this is 0).
    pub bytes: u64,
    /// Simulations the bisection ran.
    pub runs: u32,
}

/// Finds the smallest capacity at which the requests run without an OOM,
/// by bisection over multiples of [`CAPACITY_STEP`]. `unlimited_peak` is
/// the peak reserved bytes without a limit (at that capacity the run
/// behaves as without one, so it fits).
pub fn min_capacity(
    list: &RequestList,
    config: &AllocatorConfig,
    unlimited_peak: u64,
) -> MinCapacity {
    let fits = |capacity: u64| {
        let options = SimOptions {
            capacity: Some(capacity),
            stop_at_first_oom: true,
            ..Default::default()
        };
        simulate(list, config, &options).ooms == 0
    };
    // In units of CAPACITY_STEP: `hi` fits, `lo` does not (0 never fits a
    // run with an allocation; a run without one fits in 0).
    let mut hi = unlimited_peak.div_ceil(CAPACITY_STEP);
    let mut lo = 0u64;
    let mut runs = 0;
    if hi == 0 {
        return MinCapacity { bytes: 0, runs };
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        runs += 1;
        if fits(mid * CAPACITY_STEP) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    MinCapacity {
        bytes: hi * CAPACITY_STEP,
        runs,
    }
}

/// [`min_capacity`], running the requests without a limit first unless
/// their peak reserved without one is known.
pub fn smallest_capacity(
    list: &RequestList,
    config: &AllocatorConfig,
    unlimited_peak: Option<u64>,
) -> MinCapacity {
    let peak = unlimited_peak
        .unwrap_or_else(|| simulate(list, config, &SimOptions::default()).peak_reserved_bytes);
    min_capacity(list, config, peak)
}

/// The capacity a fidelity run simulates: the recorded device's, when the
/// header gives one that a simulation can use.
pub fn recorded_capacity(total_memory: u64) -> Option<u64> {
    (total_memory > 0 && total_memory < SimulatedDevice::unlimited().total_memory())
        .then_some(total_memory)
}

/// What a simulation gives the allocator: a device's memory less the
/// reserve, else the recorded (or inferred) cap, else no bound.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Target {
    /// The memory the allocator gets (`None`: unlimited).
    pub capacity: Option<u64>,
    /// The cap simulated, when no device is named: it bounds what the
    /// allocator reserves, so no reserve comes off it.
    pub cap: Option<Limit>,
}

impl Target {
    /// Decides the capacity: with a device of `device_bytes` named, its
    /// memory less the reserve (an error when the reserve takes it all);
    /// without one, the `recorded_cap`, if any.
    pub fn resolve(
        device_bytes: Option<u64>,
        reserve: &Reserve,
        recorded_cap: Option<Limit>,
    ) -> Result<Target, SimulateError> {
        match device_bytes {
            Some(device) if device <= reserve.bytes => Err(SimulateError::ReserveExceedsDevice {
                reserve: reserve.bytes,
                device,
            }),
            Some(device) => Ok(Target {
                capacity: Some(device - reserve.bytes),
                cap: None,
            }),
            None => Ok(Target {
                capacity: recorded_cap.map(|c| c.bytes),
                cap: recorded_cap,
            }),
        }
    }

    /// The simulation's options at this target, with `samples` chart
    /// buckets. Under the cap, the allocator is capped too (as PyTorch's is:
    /// that arms `garbage_collection_threshold`), on a device of the cap's
    /// size (what the verdict counts as unreserved).
    pub fn options(&self, samples: usize) -> SimOptions {
        SimOptions {
            capacity: self.capacity,
            cap: self.cap.map(|c| c.bytes),
            samples,
            ..Default::default()
        }
    }
}

/// The capacity of `device` as the header's list of devices records it
/// (the one listed when it lists one), when a simulation can use it.
pub fn device_capacity(devices: &[vramtrace_format::DeviceInfo], device: u32) -> Option<u64> {
    let info = match devices {
        [one] => Some(one),
        all => all.iter().find(|d| d.index == device),
    };
    info.and_then(|d| recorded_capacity(d.total_memory))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{load, recorded};
    use super::*;
    use crate::simulate::{SimOptions, simulate};

    #[test]
    fn a_device_named_wins_over_the_cap_and_its_reserve_comes_off() {
        let cap = Limit::of_event(&vramtrace_format::LimitEvent {
            device: 0,
            thread: 0,
            limit_bytes: 20 << 30,
            total_bytes: 80 << 30,
        })
        .unwrap();
        let reserve = Reserve::stated(1 << 30, false);
        let on_device = Target::resolve(Some(24 << 30), &reserve, Some(cap)).unwrap();
        assert_eq!(on_device.capacity, Some(23 << 30));
        assert_eq!(on_device.cap, None);
        assert_eq!(on_device.options(0).cap, None);
        // Without a device, the cap is the capacity, with no reserve off it.
        let capped = Target::resolve(None, &reserve, Some(cap)).unwrap();
        assert_eq!(capped.capacity, Some(20 << 30));
        assert_eq!(capped.options(7).cap, Some(20 << 30));
        assert_eq!(capped.options(7).samples, 7);
        assert_eq!(
            Target::resolve(None, &reserve, None).unwrap().capacity,
            None
        );
        assert_eq!(
            Target::resolve(Some(1 << 30), &reserve, None),
            Err(SimulateError::ReserveExceedsDevice {
                reserve: 1 << 30,
                device: 1 << 30
            })
        );
    }

    #[test]
    fn min_capacity_fits_and_one_step_less_does_not() {
        let e = load("oom.vtrace");
        let config = recorded(&e);
        let peak = simulate(&e.list, &config, &SimOptions::default()).peak_reserved_bytes;
        let min = min_capacity(&e.list, &config, peak);
        let run = |c| {
            simulate(
                &e.list,
                &config,
                &SimOptions {
                    capacity: Some(c),
                    ..Default::default()
                },
            )
            .ooms
        };
        assert_eq!(run(min.bytes), 0);
        assert!(run(min.bytes - CAPACITY_STEP) > 0);
        assert!(min.bytes > 1 << 30 && min.bytes <= peak.next_multiple_of(CAPACITY_STEP));
    }

    #[test]
    fn nccl_adds_to_the_reserve_where_a_trace_shows_it() {
        use vramtrace_format::Header;
        let mut header = Header::default();
        let plain = crate::testing::TraceBuilder::new().finish_symbols().1;
        assert!(!shows_nccl(&header, &plain));
        header.process.world_size = Some(8);
        assert!(shows_nccl(&header, &plain));
        let mut b = crate::testing::TraceBuilder::new();
        b.stack(&[(
            "allreduce",
            "/opt/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py",
            2501,
        )]);
        let (_, symbols) = b.finish_symbols();
        assert!(shows_nccl(&Header::default(), &symbols));
        assert_eq!(Reserve::estimate(false).bytes, CUDA_CONTEXT_BYTES);
        assert_eq!(
            Reserve::estimate(true).bytes,
            CUDA_CONTEXT_BYTES + NCCL_BYTES
        );
        let stated = Reserve::stated(0, true);
        assert!(stated.stated && stated.nccl);
    }
}
