//! Scenarios: the allocator settings a what-if sets side by side (the
//! recorded ones, those named, the standard policies), and the sweep that
//! simulates them all in parallel.

use super::{
    MinCapacity, RequestList, SimOptions, SimResult, SimulateError, simulate, smallest_capacity,
};
use rayon::prelude::*;
use serde::Serialize;
use vramtrace_allocator::{AllocatorConfig, ConfigError};

/// A policy and capacity to simulate.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// The name shown in tables and legends.
    pub name: String,
    /// The allocator's settings.
    pub config: AllocatorConfig,
}

impl Scenario {
    /// A scenario named after its settings (`default` for PyTorch's).
    pub fn new(config: AllocatorConfig) -> Self {
        let conf = config.to_conf_string();
        Scenario {
            name: if conf.is_empty() {
                "default".into()
            } else {
                conf
            },
            config,
        }
    }

    /// The standard policies set side by side: PyTorch's default,
    /// expandable segments, and two `max_split_size_mb` limits.
    pub fn standard() -> Vec<Scenario> {
        [
            "",
            "expandable_segments:True",
            "max_split_size_mb:128",
            "max_split_size_mb:512",
        ]
        .iter()
        .map(|s| Scenario::new(AllocatorConfig::parse(s).expect("built-in settings parse")))
        .collect()
    }
}

/// The scenarios a simulation runs, in order, each settings once: the
/// recorded settings (when no others are named, or beside the standard
/// ones), the named ones, then with `standard`, [`Scenario::standard`].
pub fn scenarios(
    recorded: &Result<AllocatorConfig, ConfigError>,
    named: Vec<AllocatorConfig>,
    standard: bool,
) -> Result<Vec<Scenario>, SimulateError> {
    let mut scenarios = Vec::new();
    if named.is_empty() || standard {
        match recorded {
            Ok(config) => {
                let mut s = Scenario::new(config.clone());
                s.name = format!("recorded ({})", s.name);
                scenarios.push(s);
            }
            Err(e) if named.is_empty() && !standard => {
                return Err(SimulateError::NoSettings(e.to_string()));
            }
            Err(_) => {}
        }
    }
    let extra = named.into_iter().map(Scenario::new).chain(if standard {
        Scenario::standard()
    } else {
        Vec::new()
    });
    for s in extra {
        if !scenarios.iter().any(|x| x.config == s.config) {
            scenarios.push(s);
        }
    }
    Ok(scenarios)
}

/// One scenario's outcome in a [`sweep`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScenarioResult {
    /// The scenario's name.
    pub policy: String,
    /// Its settings as `PYTORCH_CUDA_ALLOC_CONF`.
    pub alloc_conf: String,
    /// The run at the requested capacity.
    #[serde(flatten)]
    pub result: SimResult,
    /// The smallest capacity that fits, when asked for.
    pub min_capacity: Option<MinCapacity>,
}

/// Simulates every scenario at `options`' capacity, in parallel, and finds
/// each one's smallest fitting capacity when `find_min` says so.
pub fn sweep(
    list: &RequestList,
    scenarios: &[Scenario],
    options: &SimOptions,
    find_min: bool,
) -> Vec<ScenarioResult> {
    scenarios
        .par_iter()
        .map(|s| {
            let result = simulate(list, &s.config, options);
            let min_capacity = find_min.then(|| {
                let unlimited_peak = options
                    .capacity
                    .is_none()
                    .then_some(result.peak_reserved_bytes);
                smallest_capacity(list, &s.config, unlimited_peak)
            });
            ScenarioResult {
                policy: s.name.clone(),
                alloc_conf: s.config.to_conf_string(),
                result,
                min_capacity,
            }
        })
        .collect()
}
