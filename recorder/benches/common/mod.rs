//! The workload the recorder benchmarks share: alloc+free pairs on a
//! `SimulatedDevice`, one thread, mixed sizes, a fixed seed.

use vramtrace_recorder::allocator::{AllocatorConfig, CachingAllocator};
use vramtrace_recorder::device::SimulatedDevice;

/// Live tensors: each step frees one of them and allocates its successor.
pub const LIVE: usize = 32;
/// Steps before the workload repeats.
pub const STEPS: usize = 4096;

/// (slot, size) per step: log-uniform sizes from 512 B to 40 MiB.
pub fn workload() -> Vec<(usize, u64)> {
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

/// A fresh allocator on an unlimited simulated device.
pub fn allocator() -> CachingAllocator<SimulatedDevice> {
    CachingAllocator::new(SimulatedDevice::unlimited(), AllocatorConfig::default())
}
