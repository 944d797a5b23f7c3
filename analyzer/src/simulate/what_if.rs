//! What-if by capacity, for the report: the recorded settings simulated on
//! devices of a range of sizes around the smallest one that fits, so a
//! reader can pick a capacity and see the reserved peak and the first OOM.
//! A capacity is a device's memory, as `simulate --capacity` takes it: the
//! allocator gets it less the [`Reserve`], so the two agree.

use super::{CAPACITY_STEP, RequestList, Reserve, SimOptions, min_capacity, simulate};
use rayon::prelude::*;
use serde::Serialize;
use vramtrace_allocator::AllocatorConfig;

/// The first OOM of a simulated run, where the page can point at it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WhatIfOom {
    /// The index of the trace event that made the failed request.
    pub event_index: u64,
    /// Its time since the trace start.
    pub time_ns: u64,
    /// The size asked for.
    pub requested_bytes: u64,
    /// Reserved bytes then.
    pub reserved_bytes: u64,
}

/// One capacity simulated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WhatIfPoint {
    /// The device memory simulated (the allocator gets it less the
    /// reserve).
    pub capacity_bytes: u64,
    /// The highest reserved memory (up to the first OOM when there is one).
    pub peak_reserved_bytes: u64,
    /// The highest allocated memory (likewise).
    pub peak_allocated_bytes: u64,
    /// The first OOM, if the run does not fit.
    pub first_oom: Option<WhatIfOom>,
}

/// The recorded settings at a range of capacities.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WhatIf {
    /// The settings simulated, as `PYTORCH_CUDA_ALLOC_CONF` (empty for
    /// PyTorch's defaults).
    pub alloc_conf: String,
    /// Whether those are the recorded settings (otherwise the recorded ones
    /// could not be read, and PyTorch's defaults stand in).
    pub recorded_settings: bool,
    /// The reserved peak on a device that never runs out.
    pub unlimited_peak_reserved_bytes: u64,
    /// The smallest device memory without an OOM, the reserve included (the
    /// allocator's part to [`CAPACITY_STEP`]).
    pub min_capacity_bytes: u64,
    /// What each device keeps off the allocator (the CUDA context's).
    pub reserve: Reserve,
    /// The recorded device's memory, when known.
    pub device_bytes: Option<u64>,
    /// The capacities simulated, smallest first.
    pub points: Vec<WhatIfPoint>,
}

/// Fractions of the allocator's part of the smallest fitting capacity
/// simulated below it.
const BELOW: [f64; 5] = [0.5, 0.6, 0.7, 0.8, 0.9];
/// Steps between the smallest fitting capacity and the unlimited peak.
const BETWEEN: [f64; 3] = [0.25, 0.5, 0.75];

/// The fraction of the smallest fitting device that listed capacities are
/// at least apart: closer ones read the same in the page's table (8.02 and
/// 8.03 GiB are both "8.0 GiB") and run alike.
const APART: u64 = 40;

/// `capacities` with `kept` (the smallest that fits, the recorded device),
/// smallest first, less each other capacity within `spacing` of one listed.
fn apart(capacities: Vec<u64>, kept: [Option<u64>; 2], spacing: u64) -> Vec<u64> {
    let mut listed: Vec<u64> = kept.into_iter().flatten().collect();
    let mut others = capacities;
    others.sort_unstable();
    for c in others {
        if listed.iter().all(|&l| c.abs_diff(l) >= spacing.max(1)) {
            listed.push(c);
        }
    }
    listed.sort_unstable();
    listed.dedup();
    listed
}

/// Simulates `config` on devices from the reserve and half of what the
/// allocator needs up to the unlimited peak (and the recorded device, when
/// known), in parallel. Runs below the smallest fitting capacity stop at
/// their first OOM.
pub fn what_if(
    list: &RequestList,
    config: &AllocatorConfig,
    recorded_settings: bool,
    device_bytes: Option<u64>,
    reserve: Reserve,
) -> WhatIf {
    let unlimited = simulate(list, config, &SimOptions::default());
    let peak = unlimited.peak_reserved_bytes;
    let needs = min_capacity(list, config, peak).bytes;
    let round = |bytes: f64| ((bytes / CAPACITY_STEP as f64).round() as u64) * CAPACITY_STEP;
    // Allocator capacities first; each device has the reserve on top.
    let mut capacities: Vec<u64> = BELOW.iter().map(|f| round(needs as f64 * f)).collect();
    capacities.push(needs);
    capacities.extend(
        BETWEEN
            .iter()
            .map(|f| round(needs as f64 + (peak.saturating_sub(needs)) as f64 * f)),
    );
    capacities.push(peak.max(needs));
    capacities.retain(|&c| c > 0);
    for c in &mut capacities {
        *c = c.saturating_add(reserve.bytes);
    }
    // A device too small to leave the allocator anything is no what-if.
    let device = device_bytes.filter(|&d| d > reserve.bytes);
    let min = needs.saturating_add(reserve.bytes);
    // (A run that needs nothing has no smallest fitting device to list.)
    let capacities = apart(
        capacities,
        [(needs > 0).then_some(min), device],
        min / APART,
    );
    let points = capacities
        .par_iter()
        .map(|&capacity| {
            let r = simulate(
                list,
                config,
                &SimOptions {
                    capacity: Some(capacity - reserve.bytes),
                    stop_at_first_oom: capacity < min,
                    ..SimOptions::default()
                },
            );
            WhatIfPoint {
                capacity_bytes: capacity,
                peak_reserved_bytes: r.peak_reserved_bytes,
                peak_allocated_bytes: r.peak_allocated_bytes,
                first_oom: r.first_oom.map(|o| WhatIfOom {
                    event_index: o.event_index,
                    time_ns: o.time_ns,
                    requested_bytes: o.requested_bytes,
                    reserved_bytes: o.reserved_bytes,
                }),
            }
        })
        .collect();
    WhatIf {
        alloc_conf: config.to_conf_string(),
        recorded_settings,
        unlimited_peak_reserved_bytes: peak,
        min_capacity_bytes: min,
        reserve,
        device_bytes,
        points,
    }
}

#[cfg(test)]
mod tests {
    use super::apart;

    #[test]
    fn capacities_closer_than_the_spacing_give_way_to_the_kept_ones() {
        const MIB: u64 = 1 << 20;
        // GPT-2's: the smallest fit at 8,208 MiB, steps of 3 MiB above it.
        let listed = apart(
            vec![
                4_360 * MIB,
                8_208 * MIB,
                8_211 * MIB,
                8_214 * MIB,
                8_219 * MIB,
            ],
            [Some(8_208 * MIB), None],
            205 * MIB,
        );
        assert_eq!(listed, [4_360 * MIB, 8_208 * MIB]);
        // The recorded device is kept, the step next to it is not.
        let listed = apart(
            vec![1_000 * MIB, 1_020 * MIB, 1_200 * MIB],
            [Some(1_578 * MIB), Some(1_024 * MIB)],
            39 * MIB,
        );
        assert_eq!(listed, [1_024 * MIB, 1_200 * MIB, 1_578 * MIB]);
    }
}
