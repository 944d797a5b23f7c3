//! Leak reports: sites whose memory grows across repetitions of a phase,
//! the trend of each repeated phase, memory retained by phase instances, and
//! allocations never freed.
//!
//! 1. **Leaking sites.** Instances of a phase are grouped by their path with
//!    numbers normalized (`train/iter12` → `train/iter#`). At the end of each
//!    repetition the analysis records the allocated bytes, the live bytes of
//!    every site, and the bytes of every site that the repetition itself
//!    allocated and left live. A site *leaks* when its live bytes at the end
//!    of successive repetitions grow consistently: a robust (Theil–Sen) slope
//!    of at least one byte per repetition, over three repetitions or more, that
//!    explains at least 90% of the series' variation ([`Fit`]). Repetitions
//!    cut short by an out-of-memory error did not reach their end, and are
//!    left out. A site leaking in several nested phases is reported once,
//!    under the phase that best explains it: the innermost one whose
//!    repetitions themselves allocate what the site keeps. Growth must still
//!    be going on: a phase whose repetitions all end in the first half of the
//!    window's events (setup, such as DDP's three parameter broadcasts, each
//!    keeping a bucket) may grow, but none of its sites is a leak.
//! 2. **Trends of repeated phases.** A phase's allocated bytes at the end of
//!    its repetitions are *steady* (the same, within 1% or 1 MiB), *grow* or
//!    *shrink* (consistently, as for a site), or *vary* (neither: batch or
//!    sequence sizes that change from one repetition to the next). A varying
//!    phase is never a leak; a leak is a site.
//! 3. **Retained by a phase instance**: the bytes allocated while the
//!    instance (or a phase nested in it) was open and still live when it
//!    ended, by site. Kept per open phase with per-site counters, so the cost
//!    is a few hash updates per event.
//! 4. **Never freed**: blocks still live at the window's end, by site.
//!
//! A fit first takes every repetition, then leaves the first fifth out as a
//! warm-up (optimizer state and caches appear in the first repetitions), and
//! keeps the first of the two that shows consistent growth.

mod fit;

use fit::median;
pub use fit::{Fit, robust_slope, steadiness, warmup};

use super::open_instances::{Figures, OpenInstances};
use super::{Analysis, AnalysisError, Flow, Step};
use crate::replay::categories::{Category, dominant};
use crate::replay::{Applied, DroppedReport, LiveAlloc, PathId, PhaseId, ReplayState, SiteLive};
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

/// The least share of a series' variation a steady growth explains.
pub const MIN_STEADINESS: f64 = 0.9;

/// The fewest repetitions a growth is measured over.
pub const MIN_REPETITIONS: usize = 3;

/// How a repeated phase's allocated bytes at its ends change.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trend {
    /// The same at every end, within 1% or 1 MiB (after the warm-up).
    Steady,
    /// Growing consistently (see [`Fit::is_consistent`]).
    Grows,
    /// Falling consistently.
    Shrinks,
    /// Neither: the bytes differ from one repetition to the next without a
    /// steady direction (batch or sequence sizes that change).
    Varies,
}

impl Trend {
    /// The word tables print.
    pub fn word(self) -> &'static str {
        match self {
            Trend::Steady => "steady",
            Trend::Grows => "grows",
            Trend::Shrinks => "shrinks",
            Trend::Varies => "varies",
        }
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

/// A site's growth across the repetitions of a phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteGrowth {
    /// The site.
    #[serde(flatten)]
    pub site: SiteDescription,
    /// The robust growth of the site's live bytes per repetition.
    pub bytes_per_repetition: i64,
    /// How steady that growth is: the share of the variation it explains.
    pub steadiness: f64,
    /// Repetitions the growth was measured over (after the warm-up, without
    /// those cut short).
    pub repetitions: u64,
    /// The site's live bytes at the end of the last repetition measured:
    /// what it retains.
    pub retained_bytes: u64,
    /// What most of the site's bytes still allocated at the end are (what
    /// grows).
    pub category: Option<Category>,
}

/// A leaking site, under the repeated phase that best explains it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteLeak {
    /// The normalized phase path (`train/iter#`).
    pub phase: String,
    /// The growth.
    #[serde(flatten)]
    pub growth: SiteGrowth,
}

/// A repeated phase: its allocated bytes at the end of each repetition, and
/// how they change.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhaseGrowth {
    /// The normalized phase path (`train/iter#`).
    pub phase: String,
    /// The number of repetitions.
    pub repetitions: u64,
    /// Leading repetitions left out of the fit as warm-up.
    pub warmup_repetitions: u64,
    /// Repetitions cut short by an out-of-memory error (left out of every
    /// fit), by number.
    pub cut_short_repetitions: Vec<u64>,
    /// The robust growth of allocated bytes per repetition (meaningful when
    /// the trend is `grows` or `shrinks`).
    pub bytes_per_repetition: i64,
    /// The share of the variation that growth explains.
    pub steadiness: f64,
    /// How the allocated bytes at the ends change.
    pub trend: Trend,
    /// The repetitions sampled (all, unless there were more than [`MAX_SAMPLES`]).
    pub sampled_repetitions: Vec<u64>,
    /// Allocated bytes at the end of each sampled repetition.
    pub live_bytes_at_end: Vec<u64>,
    /// The end time of each sampled repetition.
    pub end_ns: Vec<u64>,
    /// The leaking sites this phase best explains, fastest first.
    pub leaking_sites: Vec<SiteGrowth>,
}

/// The leak report.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LeaksReport {
    /// The leaking sites, each once, fastest first.
    pub leaks: Vec<SiteLeak>,
    /// Every repeated phase (three repetitions or more), with its trend.
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
    /// Blocks live at the end that were live at a gap of dropped events:
    /// their free may have been dropped, so they are not counted as never
    /// freed (bytes).
    pub in_doubt_bytes: u64,
    /// Their number.
    pub in_doubt_blocks: u64,
    /// The events the recorder dropped, when the trace marks any: site
    /// growth counts only the bytes of blocks in no doubt (a lower bound).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped_events: Option<DroppedReport>,
}

impl LeaksReport {
    /// The phase a chart of growth shows: the one of the fastest leak, else
    /// the fastest-growing phase, else the most repeated one; `None` when no
    /// phase repeats.
    pub fn chart_phase(&self) -> Option<&PhaseGrowth> {
        let named = |name: &str| self.repeated_phases.iter().find(|p| p.phase == name);
        self.leaks
            .first()
            .and_then(|l| named(&l.phase))
            .or_else(|| {
                self.repeated_phases
                    .iter()
                    .filter(|p| p.trend == Trend::Grows)
                    .max_by_key(|p| p.bytes_per_repetition)
            })
            .or_else(|| {
                // The most repeated; the first of them on a tie.
                self.repeated_phases
                    .iter()
                    .rev()
                    .max_by_key(|p| p.repetitions)
            })
    }

    /// The fastest leak's growth per repetition (0 without a leak).
    pub fn fastest_leak(&self) -> i64 {
        self.leaks
            .first()
            .map_or(0, |l| l.growth.bytes_per_repetition)
    }
}

/// How a repetition of a phase is named in a sentence: `iteration` for a
/// phase named like one (`iter#`, `step#`, `batch#`, `epoch#`), else
/// `repetition of PHASE`.
pub fn repetition_noun(phase: &str) -> String {
    let last = phase
        .rsplit('/')
        .next()
        .unwrap_or(phase)
        .to_ascii_lowercase();
    let word = last.trim_end_matches('#').trim_end_matches(['_', '-', '.']);
    match word {
        "iter" | "iteration" | "it" => "iteration".into(),
        "step" | "train_step" => "step".into(),
        "batch" => "batch".into(),
        "epoch" => "epoch".into(),
        _ => format!("repetition of {phase}"),
    }
}

#[derive(Clone, Debug, Default)]
struct Sample {
    repetition: u64,
    end_ns: u64,
    /// Events applied when the repetition ended.
    end_index: u64,
    allocated: u64,
    /// An out-of-memory error happened in the repetition.
    cut_short: bool,
    /// Live bytes by site, in site order.
    sites: Vec<(SiteId, u64)>,
    /// Bytes the repetition allocated and left live, by site, in site order.
    retained: Vec<(SiteId, u64)>,
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

/// An open phase instance's figures (see [`OpenInstances`]): the live bytes
/// allocated inside it, by site, and whether an allocation failed in it.
#[derive(Clone, Debug, Default)]
struct Open {
    /// By site: bytes and blocks allocated while it was innermost (or in
    /// the instances that ended inside it), less those released while it
    /// was the innermost open one holding them. What it retains is the sum
    /// over itself and the instances open inside it. Signed: a release may
    /// come while an inner instance holds the allocation.
    sites: FxHashMap<SiteId, (i128, i64)>,
    oom: bool,
}

impl Open {
    /// The sites it retains blocks of, with their live bytes and blocks.
    fn retained_sites(&self) -> Vec<(SiteId, SiteLive)> {
        self.sites
            .iter()
            .filter(|(_, s)| s.1 > 0)
            .map(|(&site, &(bytes, blocks))| {
                let live = SiteLive {
                    bytes: u64::try_from(bytes.max(0)).unwrap_or(u64::MAX),
                    blocks: blocks as u64,
                };
                (site, live)
            })
            .collect()
    }
}

impl Figures for Open {
    /// Takes in the figures of an instance that ended inside it (the
    /// smaller map into the larger).
    fn absorb(&mut self, mut inner: Open) {
        self.oom |= inner.oom;
        if inner.sites.len() > self.sites.len() {
            std::mem::swap(&mut inner.sites, &mut self.sites);
        }
        for (site, (bytes, blocks)) in inner.sites {
            let s = self.sites.entry(site).or_default();
            s.0 += bytes;
            s.1 += blocks;
        }
    }
}

/// A site growing across the repetitions of one group, before attribution.
struct Candidate {
    site: SiteId,
    group: usize,
    growth: SiteGrowth,
    /// Whether the group's repetitions themselves allocated what the site
    /// keeps: a typical repetition left at least half the growth live.
    allocated_there: bool,
}

/// Computes a [`LeaksReport`].
#[derive(Clone, Debug, Default)]
pub struct Leaks {
    // Per open phase, outermost first.
    open: OpenInstances<Open>,
    groups: BTreeMap<PathId, Group>,
    instances: Vec<Instance>,
    instance_count: u64,
    window_start_ns: Option<u64>,
    /// The index of the window's first event.
    first_index: u64,
    report: Option<LeaksReport>,
}

fn by_site(v: &[(SiteId, u64)], site: SiteId) -> u64 {
    v.binary_search_by_key(&site, |(id, _)| *id)
        .map_or(0, |i| v[i].1)
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
        let mut retained = Vec::new();
        let mut cut_short = false;
        if let Some(pos) = self.open.ending(id, inst.depth) {
            // Instances left open inside it end with it, their figures in
            // its own.
            while self.open.len() > pos + 1 {
                self.open.end_innermost(|_, _| ());
            }
            self.instance_count += 1;
            let (mut sites, oom) = self
                .open
                .end_innermost(|_, open| (open.retained_sites(), open.oom))
                .unwrap_or_default();
            cut_short = oom;
            retained = sites
                .iter()
                .map(|(site, live)| (*site, live.bytes))
                .collect();
            retained.sort_unstable();
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
            end_index: state.events_applied(),
            allocated: state.totals().allocated,
            cut_short,
            // Blocks whose free may have been dropped are not counted: a
            // slow disk dropping now and then would otherwise grow every
            // site in steps.
            sites: state
                .site_live()
                .iter()
                .enumerate()
                .filter(|(_, s)| s.blocks > 0)
                .map(|(i, s)| {
                    let site = SiteId(i as u32);
                    (site, s.bytes.saturating_sub(state.site_doubt(site)))
                })
                .collect(),
            retained,
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
        if let Some(holder) = self.open.holder(a, state) {
            let s = holder.sites.entry(a.site).or_default();
            s.0 -= i128::from(a.size);
            s.1 -= 1;
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

    /// A group's trend, and the sites growing across its repetitions.
    fn growth(
        &self,
        group_name: &str,
        g: &Group,
        index: usize,
        state: &ReplayState,
        symbols: &SymbolTable,
    ) -> (PhaseGrowth, Vec<Candidate>) {
        let complete: Vec<&Sample> = g.samples.iter().filter(|s| !s.cut_short).collect();
        // Growth that stopped in the first half of the window was setup.
        let half = self.first_index + (state.events_applied() - self.first_index) / 2;
        let still_repeating = complete.last().is_some_and(|s| s.end_index >= half);
        let x: Vec<f64> = complete.iter().map(|s| s.repetition as f64).collect();
        let y: Vec<f64> = complete.iter().map(|s| s.allocated as f64).collect();
        let (trend, fit) = if let Some(f) = Fit::consistent(&x, &y, true) {
            (Trend::Grows, f)
        } else if let Some(f) = Fit::consistent(&x, &y, false) {
            (Trend::Shrinks, f)
        } else {
            let f = Fit::of(&x, &y, warmup(x.len()));
            let after = &y[f.skipped.min(y.len())..];
            let (lo, hi) = after
                .iter()
                .fold((f64::MAX, 0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
            let tolerance = (hi * 0.01).max(MIB);
            let steady = after.is_empty() || hi - lo <= tolerance;
            (if steady { Trend::Steady } else { Trend::Varies }, f)
        };

        let mut site_ids: Vec<SiteId> = complete
            .iter()
            .flat_map(|s| s.sites.iter().map(|(id, _)| *id))
            .collect();
        site_ids.sort_unstable();
        site_ids.dedup();
        let candidates = site_ids
            .into_iter()
            .filter(|_| still_repeating)
            .filter_map(|site| {
                let ys: Vec<f64> = complete
                    .iter()
                    .map(|s| by_site(&s.sites, site) as f64)
                    .collect();
                // A site can only grow if it ends above where it began.
                let last = *ys.last()?;
                if ys.iter().all(|&v| v >= last) {
                    return None;
                }
                let f = Fit::consistent(&x, &ys, true)?;
                let mut kept: Vec<f64> = complete[f.skipped..]
                    .iter()
                    .map(|s| by_site(&s.retained, site) as f64)
                    .collect();
                let typical = median(&mut kept).unwrap_or(0.0);
                Some(Candidate {
                    site,
                    group: index,
                    allocated_there: typical >= f.slope / 2.0,
                    growth: SiteGrowth {
                        site: state.sites().describe(site, symbols),
                        bytes_per_repetition: f.slope.round() as i64,
                        steadiness: f.steadiness,
                        repetitions: f.points as u64,
                        retained_bytes: last as u64,
                        category: site_category(state, site),
                    },
                })
            })
            .collect();
        let growth = PhaseGrowth {
            phase: group_name.to_string(),
            repetitions: g.repetitions,
            warmup_repetitions: complete.get(fit.skipped).map_or(0, |s| s.repetition),
            cut_short_repetitions: g
                .samples
                .iter()
                .filter(|s| s.cut_short)
                .map(|s| s.repetition)
                .collect(),
            bytes_per_repetition: fit.slope.round() as i64,
            steadiness: fit.steadiness,
            trend,
            sampled_repetitions: g.samples.iter().map(|s| s.repetition).collect(),
            live_bytes_at_end: g.samples.iter().map(|s| s.allocated).collect(),
            end_ns: g.samples.iter().map(|s| s.end_ns).collect(),
            leaking_sites: Vec::new(),
        };
        (growth, candidates)
    }

    /// Reports each growing site once, under the phase that best explains it:
    /// the innermost one whose repetitions allocated what it keeps; else
    /// (allocated outside every repeated phase) the outermost one, the most
    /// repeated first.
    fn attribute(phases: &mut [PhaseGrowth], candidates: Vec<Candidate>) -> Vec<SiteLeak> {
        let depths: Vec<usize> = phases
            .iter()
            .map(|p| p.phase.matches('/').count())
            .collect();
        let reps: Vec<u64> = phases.iter().map(|p| p.repetitions).collect();
        let depth = |c: &Candidate| depths[c.group];
        let mut by_site: BTreeMap<SiteId, Vec<Candidate>> = BTreeMap::new();
        for c in candidates {
            by_site.entry(c.site).or_default().push(c);
        }
        let mut leaks = Vec::new();
        for (_, mut cs) in by_site {
            let steadier =
                |a: &Candidate, b: &Candidate| a.growth.steadiness.total_cmp(&b.growth.steadiness);
            let best = if cs.iter().any(|c| c.allocated_there) {
                cs.retain(|c| c.allocated_there);
                cs.iter()
                    .enumerate()
                    .max_by(|(_, a), (_, b)| depth(a).cmp(&depth(b)).then(steadier(a, b)))
            } else {
                cs.iter().enumerate().max_by(|(_, a), (_, b)| {
                    depth(b)
                        .cmp(&depth(a))
                        .then(reps[a.group].cmp(&reps[b.group]))
                        .then(steadier(a, b))
                })
            }
            .map(|(i, _)| i);
            let Some(best) = best else { continue };
            let c = cs.swap_remove(best);
            phases[c.group].leaking_sites.push(c.growth.clone());
            leaks.push(SiteLeak {
                phase: phases[c.group].phase.clone(),
                growth: c.growth,
            });
        }
        let fastest = |a: &SiteGrowth, b: &SiteGrowth| {
            b.bytes_per_repetition
                .cmp(&a.bytes_per_repetition)
                .then_with(|| a.site.site.cmp(&b.site.site))
        };
        for p in phases.iter_mut() {
            p.leaking_sites.sort_by(fastest);
        }
        leaks.sort_by(|a, b| fastest(&a.growth, &b.growth));
        leaks
    }
}

const MIB: f64 = 1024.0 * 1024.0;

impl Analysis for Leaks {
    fn begin(&mut self, state: &ReplayState, _symbols: &SymbolTable) {
        // From the trace's start, blocks of the initial state count as never
        // freed too; from a later start, only blocks allocated since.
        self.window_start_ns = (state.events_applied() > 0).then(|| state.time_ns());
        self.first_index = state.events_applied();
    }

    #[inline]
    fn event(&mut self, step: &Step<'_>, state: &ReplayState) -> Result<Flow, AnalysisError> {
        // By reference: the block is not copied out of the step.
        match step.applied {
            Applied::Alloc(a) => {
                if let Some(old) = state.replaced_by(step.index) {
                    self.released(old, state);
                }
                if let Some(open) = self.open.innermost() {
                    let s = open.sites.entry(a.site).or_default();
                    s.0 += i128::from(a.size);
                    s.1 += 1;
                }
            }
            Applied::FreeRequested(a) | Applied::FreeCompleted(a)
                if step.applied.released().is_some() =>
            {
                self.released(a, state)
            }
            Applied::PhaseBegin(id) => {
                self.open.begin(*id, state, Open::default());
            }
            Applied::PhaseEnd(id) => self.phase_ended(*id, state),
            Applied::Oom(_) => {
                if let Some(open) = self.open.innermost() {
                    open.oom = true;
                }
            }
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
        let mut repeated_phases = Vec::new();
        let mut candidates = Vec::new();
        // Repeated phases in the order of their paths' names.
        let mut groups: Vec<(String, &Group)> = self
            .groups
            .iter()
            .filter(|(_, g)| g.repetitions >= 3)
            .map(|(path, g)| (state.path_name(*path), g))
            .collect();
        groups.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, g) in &groups {
            let (growth, mut found) = self.growth(name, g, repeated_phases.len(), state, symbols);
            repeated_phases.push(growth);
            candidates.append(&mut found);
        }
        let leaks = Self::attribute(&mut repeated_phases, candidates);
        let mut never: FxHashMap<SiteId, SiteLive> = FxHashMap::default();
        let mut in_doubt = SiteLive::default();
        for a in state.live() {
            if self.window_start_ns.is_none_or(|start| a.time_ns > start) {
                if state.in_doubt(a) {
                    in_doubt.bytes += a.size;
                    in_doubt.blocks += 1;
                    continue;
                }
                let s = never.entry(a.site).or_default();
                s.bytes = s.bytes.saturating_add(a.size);
                s.blocks += 1;
            }
        }
        let mut never: Vec<(SiteId, SiteLive)> = never.into_iter().collect();
        never.sort_unstable_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
        self.report = Some(LeaksReport {
            leaks,
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
            in_doubt_bytes: in_doubt.bytes,
            in_doubt_blocks: in_doubt.blocks,
            dropped_events: state.dropped().any().then(|| state.dropped().clone()),
        });
        Ok(())
    }
}

/// What most of a site's bytes allocated now are (the classes are settled
/// when the pass finishes).
fn site_category(state: &ReplayState, site: SiteId) -> Option<Category> {
    dominant(state.site_categories().get(site.0 as usize)?)
}

#[cfg(test)]
mod tests;
