//! Leak reports: memory retained by phases, growth across repetitions of a
//! phase, and allocations never freed.
//!
//! 1. **Retained by a phase instance**: the bytes allocated while the
//!    instance (or a phase nested in it) was open and still live when it
//!    ended, by site. Kept per open phase with per-site counters, so the cost
//!    is a few hash updates per event.
//! 2. **Growth of a repeated phase**: instances are grouped by their path
//!    with numbers normalized (`train/iter12` → `train/iter#`). At the end of
//!    each repetition the analysis records the allocated bytes and the live
//!    bytes of every site. The growth per repetition is a robust slope (see
//!    [`robust_slope`]) over the repetitions after the warm-up ones (the
//!    first fifth, at least one: optimizer state and caches appear there).
//!    The sites whose live bytes grow the same way are the leaks.
//! 3. **Never freed**: blocks still live at the window's end, by site.

use super::{Analysis, AnalysisError, Flow, Step};
use crate::replay::{Applied, LiveAlloc, PathId, PhaseId, ReplayState, SiteLive};
use crate::sites::{SiteDescription, SiteId};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeMap;
use vramtrace_format::SymbolTable;

/// Phase instances kept with their per-site detail: the ones retaining the
/// most bytes (a long trace has more instances than anyone reads).
pub const KEPT_INSTANCES: usize = 1000;

/// Repetitions of a group kept as samples; beyond, every other one is
/// dropped and only every second later repetition is sampled.
pub const MAX_SAMPLES: usize = 1024;

/// A robust slope of `y` over `x`: the median of the slopes between points
/// half the series apart (a Theil–Sen estimator restricted to one
/// separation, linear in the number of points). `None` with fewer than two
/// points.
pub fn robust_slope(x: &[f64], y: &[f64]) -> Option<f64> {
    let m = x.len().min(y.len());
    if m < 2 {
        return None;
    }
    let h = (m / 2).max(1);
    let mut slopes: Vec<f64> = (0..m - h)
        .filter(|&i| x[i + h] != x[i])
        .map(|i| (y[i + h] - y[i]) / (x[i + h] - x[i]))
        .collect();
    median(&mut slopes)
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The share of consecutive differences within 10% (and at least 1 KiB) of
/// `slope`: 1 for a series growing by the same amount every time.
pub fn steadiness(x: &[f64], y: &[f64], slope: f64) -> f64 {
    let tolerance = (slope.abs() * 0.1).max(1024.0);
    let diffs: Vec<f64> = (1..x.len().min(y.len()))
        .filter(|&i| x[i] != x[i - 1])
        .map(|i| (y[i] - y[i - 1]) / (x[i] - x[i - 1]))
        .collect();
    if diffs.is_empty() {
        return 0.0;
    }
    diffs
        .iter()
        .filter(|d| (*d - slope).abs() <= tolerance)
        .count() as f64
        / diffs.len() as f64
}

/// How many leading repetitions are warm-up: a fifth, at least one once
/// there are three.
pub fn warmup(repetitions: usize) -> usize {
    if repetitions < 3 {
        0
    } else {
        (repetitions / 5).max(1)
    }
}

/// Bytes of a site.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteBytes {
    /// The site.
    #[serde(flatten)]
    pub site: SiteDescription,
    /// Bytes.
    pub bytes: u64,
    /// Blocks.
    pub count: u64,
}

/// What a phase instance left live at its end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PhaseRetention {
    /// The instance's path.
    pub phase: String,
    /// Its begin time.
    pub begin_ns: u64,
    /// Its end time.
    pub end_ns: u64,
    /// Bytes allocated inside it and live at its end.
    pub retained_bytes: u64,
    /// Blocks allocated inside it and live at its end.
    pub retained_blocks: u64,
    /// The same, by site, most bytes first.
    pub sites: Vec<SiteBytes>,
}

/// A site's growth per repetition.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteGrowth {
    /// The site.
    #[serde(flatten)]
    pub site: SiteDescription,
    /// The robust growth of the site's live bytes per repetition.
    pub bytes_per_repetition: i64,
    /// How steady that growth is (see [`steadiness`]).
    pub steadiness: f64,
    /// The site's live bytes at the last repetition's end.
    pub live_bytes_at_last_end: u64,
}

/// The growth of a repeated phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseGrowth {
    /// The normalized phase path (`train/iter#`).
    pub phase: String,
    /// The number of repetitions.
    pub repetitions: u64,
    /// Leading repetitions left out of the fit.
    pub warmup_repetitions: u64,
    /// The robust growth of allocated bytes per repetition.
    pub bytes_per_repetition: i64,
    /// The share of repetitions that grew by about that much.
    pub steadiness: f64,
    /// Whether this is a leak: positive growth, steady or driven by a
    /// steadily growing site.
    pub growing: bool,
    /// The repetitions sampled (all, unless there were more than [`MAX_SAMPLES`]).
    pub sampled_repetitions: Vec<u64>,
    /// Allocated bytes at the end of each sampled repetition.
    pub live_bytes_at_end: Vec<u64>,
    /// The end time of each sampled repetition.
    pub end_ns: Vec<u64>,
    /// Sites whose live bytes grow per repetition, fastest first.
    pub sites: Vec<SiteGrowth>,
}

/// The leak report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LeaksReport {
    /// Repeated phases that grow steadily: the leaks.
    pub growth: Vec<PhaseGrowth>,
    /// Every repeated phase (three repetitions or more), growing or not.
    pub repeated_phases: Vec<PhaseGrowth>,
    /// Phase instances that left memory live at their end, most first
    /// (at most [`KEPT_INSTANCES`]).
    pub retained_by_phase: Vec<PhaseRetention>,
    /// The number of phase instances that ended in the window.
    pub phase_instances: u64,
    /// Blocks live at the end, by site, most bytes first.
    pub never_freed: Vec<SiteBytes>,
    /// Their total bytes.
    pub never_freed_bytes: u64,
    /// Their number.
    pub never_freed_blocks: u64,
}

impl LeaksReport {
    /// The phase a chart of growth shows: the fastest-growing leak, else the
    /// most repeated phase; `None` when no phase repeats.
    pub fn chart_phase(&self) -> Option<&PhaseGrowth> {
        self.growth
            .first()
            .or_else(|| self.repeated_phases.iter().max_by_key(|p| p.repetitions))
    }

    /// The leaking phases, leaving out a phase nested in a leaking phase listed
    /// before it when both grow by the same site: `iter#/forward` repeats what
    /// `iter#` already says.
    pub fn distinct_leaks(&self) -> Vec<&PhaseGrowth> {
        let top_site = |g: &PhaseGrowth| g.sites.first().map(|s| s.site.site.clone());
        let mut kept: Vec<&PhaseGrowth> = Vec::new();
        for g in &self.growth {
            let nested_repeat = kept.iter().any(|k| {
                g.phase.starts_with(&format!("{}/", k.phase)) && top_site(k) == top_site(g)
            });
            if !nested_repeat {
                kept.push(g);
            }
        }
        kept
    }
}

#[derive(Clone, Debug, Default)]
struct Sample {
    repetition: u64,
    end_ns: u64,
    allocated: u64,
    sites: Vec<(SiteId, u64)>,
}

#[derive(Clone, Debug, Default)]
struct Group {
    repetitions: u64,
    stride: u64,
    samples: Vec<Sample>,
}

#[derive(Clone, Debug)]
struct Instance {
    phase: PhaseId,
    retained_bytes: u64,
    retained_blocks: u64,
    sites: Vec<(SiteId, SiteLive)>,
}

/// Computes a [`LeaksReport`].
#[derive(Clone, Debug, Default)]
pub struct Leaks {
    // Per open phase (by depth): live bytes allocated inside it, by site.
    open: Vec<(PhaseId, FxHashMap<SiteId, SiteLive>)>,
    groups: BTreeMap<PathId, Group>,
    instances: Vec<Instance>,
    instance_count: u64,
    window_start_ns: Option<u64>,
    report: Option<LeaksReport>,
}

impl Leaks {
    /// A leak analysis.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the report, once the pass is over: an error if it did not finish.
    pub fn into_report(self) -> Result<LeaksReport, AnalysisError> {
        self.report.ok_or(AnalysisError::NoResult("leaks"))
    }

    fn phase_ended(&mut self, id: PhaseId, state: &ReplayState) {
        let Some(inst) = state.phase(id) else { return };
        let end_ns = inst.end_ns.unwrap_or(state.time_ns());
        // Phases begun before the window are not tracked; nested ones left
        // open by a mismatched end are closed with it.
        if let Some(pos) = self.open.iter().rposition(|(p, _)| *p == id) {
            let (_, sites) = self.open.swap_remove(pos);
            self.open.truncate(pos);
            self.instance_count += 1;
            let mut sites: Vec<(SiteId, SiteLive)> =
                sites.into_iter().filter(|(_, s)| s.blocks > 0).collect();
            if !sites.is_empty() {
                sites.sort_unstable_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
                self.instances.push(Instance {
                    phase: id,
                    retained_bytes: sites.iter().map(|s| s.1.bytes).sum(),
                    retained_blocks: sites.iter().map(|s| s.1.blocks).sum(),
                    sites,
                });
                if self.instances.len() > 2 * KEPT_INSTANCES {
                    self.prune_instances();
                }
            }
        }
        let group = self.groups.entry(inst.path).or_insert_with(|| Group {
            stride: 1,
            ..Default::default()
        });
        let repetition = group.repetitions;
        group.repetitions += 1;
        if !repetition.is_multiple_of(group.stride) {
            return;
        }
        group.samples.push(Sample {
            repetition,
            end_ns,
            allocated: state.totals().allocated,
            sites: state
                .site_live()
                .iter()
                .enumerate()
                .filter(|(_, s)| s.blocks > 0)
                .map(|(i, s)| (SiteId(i as u32), s.bytes))
                .collect(),
        });
        if group.samples.len() >= MAX_SAMPLES {
            let mut keep = 0;
            group.samples.retain(|_| {
                keep += 1;
                keep % 2 == 1
            });
            group.stride *= 2;
        }
    }

    /// A block left the live set: the open phases that hold it drop it.
    fn released(&mut self, a: &LiveAlloc, state: &ReplayState) {
        if self.open.is_empty() || a.phase.is_none() {
            return;
        }
        // The open phases holding the block are the open ancestors of the
        // phase it was allocated in: a prefix of the stack.
        let mut p = a.phase;
        let mut depth = None;
        while let Some(inst) = state.phase(p) {
            if inst.end_ns.is_none() {
                depth = Some(inst.depth as usize);
                break;
            }
            p = inst.parent;
        }
        let Some(depth) = depth else { return };
        for (open_id, sites) in self.open.iter_mut() {
            if state
                .phase(*open_id)
                .is_none_or(|i| i.depth as usize > depth)
            {
                break;
            }
            if let Some(s) = sites.get_mut(&a.site) {
                s.bytes = s.bytes.saturating_sub(a.size);
                s.blocks = s.blocks.saturating_sub(1);
            }
        }
    }

    fn prune_instances(&mut self) {
        self.instances.sort_by(|a, b| {
            b.retained_bytes
                .cmp(&a.retained_bytes)
                .then(a.phase.cmp(&b.phase))
        });
        self.instances.truncate(KEPT_INSTANCES);
    }

    fn growth(
        group_name: &str,
        g: &Group,
        state: &ReplayState,
        symbols: &SymbolTable,
    ) -> PhaseGrowth {
        let w = warmup(g.samples.len());
        let fit: &[Sample] = &g.samples[w..];
        let x: Vec<f64> = fit.iter().map(|s| s.repetition as f64).collect();
        let y: Vec<f64> = fit.iter().map(|s| s.allocated as f64).collect();
        let slope = robust_slope(&x, &y).unwrap_or(0.0);
        let steady = steadiness(&x, &y, slope);
        let mut site_ids: Vec<SiteId> = fit
            .iter()
            .flat_map(|s| s.sites.iter().map(|(id, _)| *id))
            .collect();
        site_ids.sort_unstable();
        site_ids.dedup();
        let mut sites: Vec<SiteGrowth> = site_ids
            .into_iter()
            .filter_map(|site| {
                let ys: Vec<f64> = fit
                    .iter()
                    .map(|s| {
                        s.sites
                            .binary_search_by_key(&site, |(id, _)| *id)
                            .map_or(0.0, |i| s.sites[i].1 as f64)
                    })
                    .collect();
                let slope = robust_slope(&x, &ys)?;
                let steady = steadiness(&x, &ys, slope);
                (slope.round() > 0.0 && steady >= 0.5).then(|| SiteGrowth {
                    site: state.sites().describe(site, symbols),
                    bytes_per_repetition: slope.round() as i64,
                    steadiness: steady,
                    live_bytes_at_last_end: ys.last().copied().unwrap_or(0.0) as u64,
                })
            })
            .collect();
        sites.sort_by(|a, b| {
            b.bytes_per_repetition
                .cmp(&a.bytes_per_repetition)
                .then_with(|| a.site.site.cmp(&b.site.site))
        });
        let bytes_per_repetition = slope.round() as i64;
        // Noise in what a repetition keeps (sequence lengths, caches) can
        // make the total unsteady while one site grows like clockwork.
        let growing = bytes_per_repetition > 0 && (steady >= 0.5 || !sites.is_empty());
        PhaseGrowth {
            phase: group_name.to_string(),
            repetitions: g.repetitions,
            warmup_repetitions: g.samples.get(w).map_or(0, |s| s.repetition),
            bytes_per_repetition,
            steadiness: steady,
            growing,
            sampled_repetitions: g.samples.iter().map(|s| s.repetition).collect(),
            live_bytes_at_end: g.samples.iter().map(|s| s.allocated).collect(),
            end_ns: g.samples.iter().map(|s| s.end_ns).collect(),
            sites,
        }
    }
}

impl Analysis for Leaks {
    fn begin(&mut self, state: &ReplayState, _symbols: &SymbolTable) {
        // From the trace's start, blocks of the initial state count as never
        // freed too; from a later start, only blocks allocated since.
        self.window_start_ns = (state.events_applied() > 0).then(|| state.time_ns());
    }

    #[inline]
    fn event(&mut self, step: &Step<'_>, state: &ReplayState) -> Result<Flow, AnalysisError> {
        match step.applied {
            Applied::Alloc(a) => {
                if let Some(old) = state.replaced_by(step.index) {
                    self.released(old, state);
                }
                for (_, sites) in &mut self.open {
                    let s = sites.entry(a.site).or_default();
                    s.bytes += a.size;
                    s.blocks += 1;
                }
            }
            Applied::FreeRequested(a) | Applied::FreeCompleted(a)
                if step.applied.released().is_some() =>
            {
                self.released(&a, state)
            }
            Applied::PhaseBegin(id) => {
                self.open.push((id, FxHashMap::default()));
            }
            Applied::PhaseEnd(id) => self.phase_ended(id, state),
            _ => {}
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self, state: &ReplayState, symbols: &SymbolTable) -> Result<(), AnalysisError> {
        self.prune_instances();
        let retained_by_phase = self
            .instances
            .iter()
            .map(|i| {
                let inst = state.phase(i.phase);
                PhaseRetention {
                    phase: state.phase_path(i.phase, symbols),
                    begin_ns: inst.map_or(0, |p| p.begin_ns),
                    end_ns: inst.and_then(|p| p.end_ns).unwrap_or(0),
                    retained_bytes: i.retained_bytes,
                    retained_blocks: i.retained_blocks,
                    sites: i
                        .sites
                        .iter()
                        .take(10)
                        .map(|(site, live)| SiteBytes {
                            site: state.sites().describe(*site, symbols),
                            bytes: live.bytes,
                            count: live.blocks,
                        })
                        .collect(),
                }
            })
            .collect();
        let mut repeated_phases: Vec<PhaseGrowth> = self
            .groups
            .iter()
            .filter(|(_, g)| g.repetitions >= 3)
            .map(|(path, g)| Self::growth(&state.path_name(*path), g, state, symbols))
            .collect();
        repeated_phases.sort_by(|a, b| a.phase.cmp(&b.phase));
        let mut growth: Vec<PhaseGrowth> = repeated_phases
            .iter()
            .filter(|g| g.growing)
            .cloned()
            .collect();
        growth.sort_by_key(|g| std::cmp::Reverse(g.bytes_per_repetition));
        let mut never: FxHashMap<SiteId, SiteLive> = FxHashMap::default();
        for a in state.live() {
            if self.window_start_ns.is_none_or(|start| a.time_ns > start) {
                let s = never.entry(a.site).or_default();
                s.bytes += a.size;
                s.blocks += 1;
            }
        }
        let mut never: Vec<(SiteId, SiteLive)> = never.into_iter().collect();
        never.sort_unstable_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
        self.report = Some(LeaksReport {
            growth,
            repeated_phases,
            retained_by_phase,
            phase_instances: self.instance_count,
            never_freed_bytes: never.iter().map(|s| s.1.bytes).sum(),
            never_freed_blocks: never.iter().map(|s| s.1.blocks).sum(),
            never_freed: never
                .into_iter()
                .map(|(site, live)| SiteBytes {
                    site: state.sites().describe(site, symbols),
                    bytes: live.bytes,
                    count: live.blocks,
                })
                .collect(),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests;
