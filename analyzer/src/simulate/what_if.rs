//! What-ifs on one device:
//!
//! - [`run`], for `simulate`: every policy asked for swept at one target
//!   (beside the recorded settings' fidelity), the standard policies tried
//!   where the first runs out, what the first needs when none fits, and
//!   the fixes tried at its OOM;
//! - [`what_if`], for the report: the recorded settings simulated on
//!   devices of a range of sizes around the smallest one that fits, so a
//!   reader can pick a capacity and see the reserved peak and the first
//!   OOM. A capacity is a device's memory, as `simulate --capacity` takes
//!   it: the allocator gets it less the [`Reserve`], so the two agree.

use super::fixes::{FixTarget, FixesTried};
use super::{
    CAPACITY_STEP, Extracted, Fidelity, OomAt, RequestList, Reserve, Scenario, ScenarioResult,
    SimOptions, SimulateError, Target, fidelity_under, min_capacity, scenarios, simulate,
    smallest_capacity, sweep,
};
use crate::analysis::warning::Warning;
use rayon::prelude::*;
use serde::Serialize;
use vramtrace_allocator::AllocatorConfig;
use vramtrace_format::SymbolTable;

/// What `simulate` asks of one device's requests.
#[derive(Clone, Copy, Debug)]
pub struct Asked<'a> {
    /// The policies, the first the one answered for.
    pub scenarios: &'a [Scenario],
    /// The recorded settings, when readable: their fidelity is checked.
    pub recorded: Option<&'a AllocatorConfig>,
    /// Where the memory goes: the capacity, or the cap.
    pub target: Target,
    /// The memory kept off the device.
    pub reserve: &'a Reserve,
    /// Chart buckets to sample (0: none).
    pub samples: usize,
    /// Whether the standard policies are among `scenarios` already.
    pub standard_policies: bool,
    /// Whether each policy's smallest capacity is searched for.
    pub min_capacity: bool,
}

/// What [`run`] found.
#[derive(Clone, Debug)]
pub struct Runs {
    /// Each policy asked for, in order.
    pub results: Vec<ScenarioResult>,
    /// How exactly the recorded settings replay the recording.
    pub fidelity: Option<Fidelity>,
    /// The standard policies not asked for, tried at the same capacity
    /// where the first policy runs out, for the verdict to name one that
    /// fits.
    pub others: Vec<ScenarioResult>,
    /// Where no policy fits: the device memory the first needs, the
    /// reserve included.
    pub needed: Option<u64>,
    /// Under a cap, where the first runs out: the smallest cap that fits.
    pub cap_needs: Option<u64>,
    /// The fixes tried at the first policy's OOM (or the recorded one's).
    pub fixes: Option<FixesTried>,
    /// The simulations run (without the bisections of the smallest
    /// capacity), and the seconds they took.
    pub runs: usize,
    /// Seconds simulating the policies.
    pub simulate_s: f64,
}

/// Sweeps the policies asked for at the target, in parallel with the
/// recorded settings' fidelity; tries the standard policies not asked for
/// where the first runs out; works out what the first needs when nothing
/// fits, and the fixes at its first OOM.
pub fn run(extracted: &Extracted, symbols: &SymbolTable, asked: &Asked<'_>) -> Runs {
    let list = &extracted.list;
    let scenarios = asked.scenarios;
    let sim = asked.target.options(asked.samples);
    let recorded_cap = (extracted.limits.cap())
        .map(|c| c.bytes)
        .filter(|&c| Some(c) == extracted.recorded_capacity);
    let started = std::time::Instant::now();
    let (results, fidelity) = rayon::join(
        || sweep(list, scenarios, &sim, asked.min_capacity),
        || {
            asked
                .recorded
                .map(|c| fidelity_under(list, c, extracted.recorded_capacity, recorded_cap))
        },
    );
    let others = if results[0].result.ooms > 0 && !asked.standard_policies {
        let untried: Vec<Scenario> = Scenario::standard()
            .into_iter()
            .filter(|s| !scenarios.iter().any(|x| x.config == s.config))
            .collect();
        let plain = SimOptions {
            capacity: asked.target.capacity,
            ..Default::default()
        };
        sweep(list, &untried, &plain, false)
    } else {
        Vec::new()
    };
    let simulate_s = started.elapsed().as_secs_f64();
    let runs = scenarios.len() + others.len() + usize::from(fidelity.is_some());
    // The first policy's smallest fitting capacity: a bisection of a dozen
    // runs, made once, only where an answer needs it.
    let smallest = std::cell::OnceCell::new();
    let smallest_bytes = || {
        *smallest.get_or_init(|| {
            results[0].min_capacity.map_or_else(
                || smallest_capacity(list, &scenarios[0].config, None).bytes,
                |m| m.bytes,
            )
        })
    };
    // Where no policy fits either, how much the first would need.
    let needed = (results[0].result.ooms > 0
        && results[0].min_capacity.is_none()
        && !results.iter().chain(&others).any(|r| r.result.ooms == 0))
    .then(|| smallest_bytes().saturating_add(asked.reserve.bytes));
    // Under a cap, what the run needs is the smallest cap that fits.
    let cap_needs = (asked.target.cap.is_some() && results[0].result.ooms > 0).then(smallest_bytes);
    let fixes = fixes_for_first_oom(
        &scenarios[0].config,
        &sim,
        results[0].result.first_oom.as_ref(),
        asked.recorded,
        extracted,
        symbols,
        smallest.get().copied(),
    );
    Runs {
        results,
        fidelity,
        others,
        needed,
        cap_needs,
        fixes,
        runs,
        simulate_s,
    }
}

/// The fixes tried where the first policy runs out of memory on the device
/// asked for; without one, where the recorded run ran out of memory, replayed
/// with its own settings under its own limit.
fn fixes_for_first_oom(
    config: &AllocatorConfig,
    sim: &SimOptions,
    first_oom: Option<&OomAt>,
    recorded: Option<&AllocatorConfig>,
    extracted: &Extracted,
    symbols: &SymbolTable,
    smallest: Option<u64>,
) -> Option<FixesTried> {
    let list = &extracted.list;
    if let Some(oom) = first_oom {
        let target = FixTarget {
            config,
            options: sim.clone(),
            oom,
            smallest,
        };
        return Some(super::fixes::try_fixes(
            list,
            &target,
            &extracted.state,
            symbols,
        ));
    }
    if sim.capacity.is_some() || sim.cap.is_some() || list.recorded_ooms == 0 {
        return None;
    }
    let options = SimOptions {
        capacity: Some(extracted.recorded_capacity?),
        ..SimOptions::default()
    };
    super::fixes::for_first_oom(list, recorded?, &options, &extracted.state, symbols)
}

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

/// The policies `simulate` runs (the settings named, the standard ones
/// when asked), and the recorded settings when readable (a
/// warning says why not).
pub fn policies(
    extracted: &Extracted,
    settings: &[AllocatorConfig],
    standard_policies: bool,
    warnings: &mut Vec<Warning>,
) -> Result<(Vec<Scenario>, Option<AllocatorConfig>), SimulateError> {
    let recorded = match &extracted.recorded_config {
        Ok((config, _)) => Ok(config.clone()),
        Err(e) => Err(e.clone()),
    };
    let scenarios = scenarios(&recorded, settings.to_vec(), standard_policies)?;
    if let Err(e) = &recorded {
        warnings.push(Warning::UnreadableSettings(e.to_string()));
    }
    Ok((scenarios, recorded.ok()))
}

/// What reading one device's requests found worth a warning.
pub fn read_warnings(extracted: &Extracted) -> Vec<Warning> {
    let mut warnings = Vec::new();
    if let Some(t) = extracted.info.truncation {
        warnings.push(Warning::Truncated(t));
    }
    if extracted.info.skipped_devices > 0 {
        warnings.push(Warning::TooManyDevices {
            devices: extracted.info.skipped_devices,
            events: extracted.info.skipped_events,
        });
    }
    warnings
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
