//! The fit planner: the largest batch size (or sequence length) that fits,
//! from runs of one program recorded at two or more values.
//!
//! The runs' allocations are lined up ([`mod@align`]): the same sites, in the
//! same phases, in the same order. Each allocation's size is fitted as a
//! function of the varied value ([`law`]): constant, linear, quadratic, or
//! a sum of those, exactly through every run. A [`Model`] then gives the
//! size of every allocation of the run recorded at the largest value (the
//! *reference*: its requests, frees and streams) at any other value, and
//! the allocator simulator replays those requests ([`fits`],
//! [`evaluate`]); [`largest_fitting`] bisects on the value. From one run
//! only, activations and temporaries are assumed proportional to the value
//! and the rest constant ([`Model::assumed`]): an estimate. See
//! `docs/plan.md`.

pub mod align;
pub mod checks;
mod error;
pub mod figures;
pub mod law;
pub mod result;

use super::{Edits, Insert, SimOptions, SimResult, simulate_edited};
use crate::replay::categories::{Category, CategoryBytes, Class};
use crate::replay::{PhaseId, ReplayState};
use crate::sites::SiteId;
use align::align;
use law::{Law, LawKind};
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use serde::Serialize;
use vramtrace_allocator::AllocatorConfig;
use vramtrace_format::SymbolTable;

pub use super::requests::RequestList;
pub use error::PlanError;

/// What the runs vary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Varied {
    /// The batch size.
    Batch,
    /// The sequence length.
    Seq,
}

impl Varied {
    /// The laws a size may follow in this value, from `runs` runs,
    /// simplest first. A sequence's attention brings squares, alone or
    /// with a linear part. A batch's samples are independent, so a size
    /// grows with it by a constant and a proportional part; a square (a
    /// batch-by-batch similarity) is believed when it fits alone, and a
    /// square with a linear part only from more runs than it has terms: a
    /// law of as many terms as runs passes through any sizes (a cuDNN
    /// workspace's, say).
    pub fn laws(self, runs: usize) -> Vec<LawKind> {
        match self {
            Varied::Seq => law::FITTED.to_vec(),
            Varied::Batch => law::FITTED
                .into_iter()
                .filter(|&k| match k {
                    LawKind::LinearQuadratic => runs > 2,
                    LawKind::FullQuadratic => runs > 3,
                    _ => true,
                })
                .collect(),
        }
    }

    /// Its name in sentences: `batch`, `sequence length`.
    pub fn words(self) -> &'static str {
        match self {
            Varied::Batch => "batch",
            Varied::Seq => "sequence length",
        }
    }
}

/// Where a value lies against the recorded ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Range {
    /// Between the smallest and the largest recorded value: interpolated.
    Within,
    /// Above the largest: extrapolated.
    Beyond,
    /// Below the smallest: extrapolated.
    Below,
}

/// The largest size an allocation is asked for at any value: 1 PiB, more
/// than any device holds, so a law that grows past it runs out of memory
/// rather than overflowing the allocator's arithmetic.
pub const LARGEST_SIZE: u64 = 1 << 50;

/// The largest value searched: past it the answer is "at least".
pub const LARGEST_VALUE: u64 = 1 << 32;

/// One recorded run given to [`Model::fit`].
pub struct RunInput<'a> {
    /// The value it was recorded at.
    pub value: u64,
    /// Its requests.
    pub list: &'a RequestList,
    /// A key per allocation, by alloc id (its site and phase, interned
    /// alike across the runs): what lines the runs up.
    pub keys: Vec<u32>,
}

/// How a run lined up with the reference.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LineUp {
    /// Its allocations.
    pub allocations: usize,
    /// Those without a partner in the reference.
    pub unmatched: usize,
    /// The reference's allocations without a partner in it.
    pub reference_unmatched: usize,
    /// The reference's allocations.
    pub reference_allocations: usize,
    /// The first allocation of the reference where they differ (an alloc
    /// id), if any.
    #[serde(skip)]
    pub first_difference: Option<usize>,
}

/// Why runs cannot be planned from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelError {
    /// Two runs were recorded at the same value.
    SameValue(u64),
    /// Run `run` (an index) does not line up with the reference: more than
    /// [`MAX_UNMATCHED_SHARE`] of either's allocations have no partner.
    NotLinedUp {
        /// The run.
        run: usize,
        /// How they lined up.
        line_up: LineUp,
    },
}

/// The share of a run's allocations that may lack a partner in the
/// reference: above it the runs took different code paths.
pub const MAX_UNMATCHED_SHARE: f64 = 0.05;

/// Every allocation of the reference run, as a function of the value.
#[derive(Clone, Debug)]
pub struct Model {
    /// The runs' values, in the order given.
    pub values: Vec<u64>,
    /// The run whose requests are replayed (the largest value).
    pub reference: usize,
    /// How each run lined up with the reference (the reference's own is
    /// empty).
    pub line_ups: Vec<LineUp>,
    laws: Vec<Law>,
    /// The law of each of the reference's allocations, by alloc id.
    law_of: Vec<u32>,
    /// The reference's allocations another run does not make, with the
    /// largest value of such a run: the code path that makes them is taken
    /// only above it (an embedding's backward sorts its indices past some
    /// number of them), so they are left out at that value and below.
    absent_up_to: Vec<(u32, u64)>,
}

impl Model {
    /// Lines the runs up with the one of the largest value and fits each
    /// allocation's size through every run, among the laws `varied`
    /// allows ([`Varied::laws`]).
    pub fn fit(runs: &[RunInput<'_>], varied: Varied) -> Result<Model, ModelError> {
        let values: Vec<u64> = runs.iter().map(|r| r.value).collect();
        let mut sorted = values.clone();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(ModelError::SameValue(w[0]));
        }
        let reference = (0..runs.len()).max_by_key(|&i| values[i]).unwrap_or(0);
        let base = &runs[reference];
        let n = base.keys.len();
        // partners[k][id]: run k's alloc id paired with the reference's `id`.
        let mut partners: Vec<Option<Vec<Option<u32>>>> = Vec::with_capacity(runs.len());
        let mut line_ups = Vec::with_capacity(runs.len());
        for (k, run) in runs.iter().enumerate() {
            if k == reference {
                partners.push(None);
                line_ups.push(LineUp {
                    allocations: n,
                    reference_allocations: n,
                    ..LineUp::default()
                });
                continue;
            }
            let most = n.max(run.keys.len());
            let allowed = (most as f64 * MAX_UNMATCHED_SHARE) as usize;
            let (va, vb) = (base.value as u128, run.value as u128);
            let agree = |x: usize, y: usize| {
                let sa = base.list.allocs[x].requested as u128;
                let sb = run.list.allocs[y].requested as u128;
                // Products of two 64-bit numbers fit in 128 bits; of three,
                // not always (values and sizes near 2^64), so those are
                // compared whole.
                sa == sb || sa * vb == sb * va || mul_wide(sa * vb, vb) == mul_wide(sb * va, va)
            };
            let a = align(&base.keys, &run.keys, allowed, agree);
            let line_up = LineUp {
                allocations: run.keys.len(),
                unmatched: a.unmatched_second,
                reference_unmatched: a.unmatched_first,
                reference_allocations: n,
                first_difference: a.first_difference,
            };
            if a.gave_up || a.unmatched_first.max(a.unmatched_second) > allowed {
                return Err(ModelError::NotLinedUp { run: k, line_up });
            }
            partners.push(Some(a.partner));
            line_ups.push(line_up);
        }
        // Laws are shared by the allocations with the same sizes in every
        // run: thousands of laws for a million allocations.
        let mut laws: Vec<Law> = Vec::new();
        let mut by_sizes: FxHashMap<Vec<u64>, u32> = FxHashMap::default();
        let mut unmatched: FxHashMap<(bool, u64), u32> = FxHashMap::default();
        let kinds = varied.laws(runs.len());
        let mut law_of = Vec::with_capacity(n);
        let mut absent_up_to = Vec::new();
        let mut sizes = Vec::with_capacity(runs.len());
        for id in 0..n {
            let own = base.list.allocs[id].requested;
            sizes.clear();
            let mut all = true;
            let mut absent = 0;
            for (k, run) in runs.iter().enumerate() {
                let size = match &partners[k] {
                    None => Some(own),
                    Some(p) => p[id].map(|j| run.list.allocs[j as usize].requested),
                };
                match size {
                    Some(s) => sizes.push(s),
                    None => {
                        all = false;
                        absent = absent.max(run.value);
                    }
                }
            }
            if !all {
                absent_up_to.push((id as u32, absent));
            }
            let law = if all {
                match by_sizes.get(&sizes) {
                    Some(&l) => l,
                    None => {
                        let points: Vec<(u64, u64)> =
                            values.iter().copied().zip(sizes.iter().copied()).collect();
                        laws.push(Law::fit_among(&points, &kinds));
                        let l = laws.len() as u32 - 1;
                        by_sizes.insert(sizes.clone(), l);
                        l
                    }
                }
            } else {
                // Made by the reference alone: assumed to scale as one run's
                // allocations are (activations and temporaries with the
                // value, the rest constant).
                let scales = base.list.classes.get(id).is_some_and(|c| {
                    matches!(c.category, Category::Activation | Category::Temporary)
                });
                *unmatched.entry((scales, own)).or_insert_with(|| {
                    laws.push(if scales {
                        Law::proportional(LawKind::Unmatched, base.value, own)
                    } else {
                        Law::constant(LawKind::Unmatched, own)
                    });
                    laws.len() as u32 - 1
                })
            };
            law_of.push(law);
        }
        Ok(Model {
            values,
            reference,
            line_ups,
            laws,
            law_of,
            absent_up_to,
        })
    }

    /// From one run recorded at `value`: activations and temporaries
    /// assumed proportional to the value, everything else constant. An
    /// estimate: nothing was fitted.
    pub fn assumed(value: u64, list: &RequestList) -> Model {
        let mut laws = Vec::new();
        let mut by: FxHashMap<(bool, u64), u32> = FxHashMap::default();
        let law_of = (list.allocs.iter().zip(&list.classes))
            .map(|(a, c)| {
                let scales = matches!(c.category, Category::Activation | Category::Temporary);
                *by.entry((scales, a.requested)).or_insert_with(|| {
                    laws.push(if scales {
                        Law::proportional(LawKind::Assumed, value, a.requested)
                    } else {
                        Law::constant(LawKind::Constant, a.requested)
                    });
                    laws.len() as u32 - 1
                })
            })
            .collect();
        Model {
            values: vec![value],
            reference: 0,
            line_ups: vec![LineUp {
                allocations: list.allocs.len(),
                ..LineUp::default()
            }],
            laws,
            law_of,
            absent_up_to: Vec::new(),
        }
    }

    /// Whether `runs` came from one run (an estimate).
    pub fn is_assumed(&self) -> bool {
        self.values.len() == 1
    }

    /// The reference run's value.
    pub fn reference_value(&self) -> u64 {
        self.values[self.reference]
    }

    /// Where `value` lies against the recorded values.
    pub fn range(&self, value: u64) -> Range {
        let lo = self.values.iter().copied().min().unwrap_or(0);
        let hi = self.values.iter().copied().max().unwrap_or(0);
        if value < lo {
            Range::Below
        } else if value > hi {
            Range::Beyond
        } else {
            Range::Within
        }
    }

    /// The law of allocation `id` of the reference.
    pub fn law(&self, id: usize) -> &Law {
        &self.laws[self.law_of[id] as usize]
    }

    /// Whether any allocation grows with the value.
    pub fn grows(&self) -> bool {
        self.laws.iter().any(|l| {
            !matches!(l.kind, LawKind::Constant | LawKind::Unmatched) && l.at(1) != l.at(1 << 20)
        })
    }

    /// The allocations left out at `value`, by alloc id (empty for none):
    /// those a run at `value` or above does not make, and with
    /// `without_workspaces`, the ones the program survives failing
    /// (`list`'s, the reference's).
    pub fn left_out_at(
        &self,
        value: u64,
        list: &RequestList,
        without_workspaces: bool,
    ) -> Vec<bool> {
        let absent = self.absent_up_to.iter().filter(|&&(_, v)| value <= v);
        if !without_workspaces && absent.clone().next().is_none() {
            return Vec::new();
        }
        let mut out = if without_workspaces && !list.survivable.is_empty() {
            list.survivable.clone()
        } else {
            vec![false; self.law_of.len()]
        };
        for &(id, _) in absent {
            out[id as usize] = true;
        }
        out
    }

    /// Every allocation's size at `value`, by alloc id, at most
    /// [`LARGEST_SIZE`].
    pub fn sizes_at(&self, value: u64) -> Vec<u64> {
        let at: Vec<u64> = self
            .laws
            .iter()
            .map(|l| l.at(value).min(LARGEST_SIZE))
            .collect();
        self.law_of.iter().map(|&l| at[l as usize]).collect()
    }
}

/// Keys of allocations (their site's name and their phase's path),
/// interned alike across runs: what [`Model::fit`] lines runs up by.
#[derive(Debug, Default)]
pub struct Keys {
    ids: FxHashMap<(String, String), u32>,
}

impl Keys {
    /// The key of each allocation of `list`, by alloc id; `state` (after
    /// the pass that made the list) names its sites and phases.
    pub fn of(
        &mut self,
        list: &RequestList,
        state: &ReplayState,
        symbols: &SymbolTable,
    ) -> Vec<u32> {
        let mut known: FxHashMap<(SiteId, PhaseId), u32> = FxHashMap::default();
        list.allocs
            .iter()
            .map(|a| {
                *known.entry((a.site, a.phase)).or_insert_with(|| {
                    // By file name, not path: runs recorded from other
                    // folders line up.
                    let key = (
                        state.sites().portable_name(a.site, symbols),
                        state.phase_path(a.phase, symbols),
                    );
                    let next = self.ids.len() as u32;
                    *self.ids.entry(key).or_insert(next)
                })
            })
            .collect()
    }
}

/// What a plan simulates against: the allocator's settings, its device and
/// cap, and the granularity of the value.
#[derive(Clone, Debug)]
pub struct Target {
    /// The allocator's settings.
    pub config: AllocatorConfig,
    /// The device's capacity and the allocator's cap.
    pub options: SimOptions,
    /// Values are searched in multiples of this (at least 1).
    pub step: u64,
    /// Whether the allocations the program survives failing (cuDNN's
    /// workspaces, [`RequestList::survivable`]) are left out: as when
    /// cuDNN falls back, for every convolution, to an algorithm that needs
    /// no workspace. Kept, they are asked for at their fitted sizes and a
    /// failure is survived.
    pub without_workspaces: bool,
}

/// The reference's requests at the sizes of a value.
struct Resized<'a> {
    sizes: &'a [u64],
    /// The allocations left out ([`Model::left_out_at`]), by id; empty
    /// for none.
    left_out: &'a [bool],
    /// The request at which allocated memory peaked, and that peak.
    peak: Option<(usize, u64)>,
    /// The segment addresses to lay out, when not the reference's.
    addresses: Option<&'a [(u64, u64)]>,
}

impl Edits for Resized<'_> {
    #[inline(always)]
    fn before(&self, _: usize) -> Option<&Insert> {
        None
    }
    #[inline(always)]
    fn dropped(&self, id: usize) -> bool {
        self.left_out.get(id).copied().unwrap_or(false)
    }
    #[inline(always)]
    fn size(&self, id: usize, _: u64) -> u64 {
        self.sizes[id]
    }
    #[inline(always)]
    fn after(&mut self, i: usize, _: bool, _: u64, allocated: u64) {
        if self.peak.is_none_or(|(_, p)| allocated > p) {
            self.peak = Some((i, allocated));
        }
    }
    fn addresses<'b>(&'b self, list: &'b RequestList) -> &'b [(u64, u64)] {
        self.addresses.unwrap_or(&list.recorded_allocations)
    }
}

/// Whether the reference's requests at `value` run without an OOM.
pub fn fits(model: &Model, list: &RequestList, target: &Target, value: u64) -> bool {
    let sizes = model.sizes_at(value);
    let left_out = model.left_out_at(value, list, target.without_workspaces);
    let options = SimOptions {
        stop_at_first_oom: true,
        segments: false,
        samples: 0,
        ..target.options.clone()
    };
    let mut edits = Resized {
        sizes: &sizes,
        left_out: &left_out,
        peak: None,
        addresses: None,
    };
    simulate_edited(list, &target.config, &options, &mut edits).ooms == 0
}

/// The answer of a search.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Found {
    /// The largest multiple of the step that fits (`None`: not even the
    /// step does, or memory does not grow).
    pub largest: Option<u64>,
    /// Memory does not grow with the value: every value fits as well as
    /// any (when `largest` is `None` and the step fits).
    pub unbounded: bool,
    /// The search stopped at [`LARGEST_VALUE`] with the value still fitting.
    pub at_ceiling: bool,
    /// Simulations run.
    pub simulations: u32,
}

/// The largest multiple of `target.step` at which the reference's requests
/// run without an OOM: doubling from the largest recorded value until one
/// does not fit, then a bisection that tries as many values at once as
/// there are threads. It assumes that a larger value never needs less
/// memory; the caller checks the answer and the next value in full.
pub fn largest_fitting(model: &Model, list: &RequestList, target: &Target) -> Found {
    let step = target.step.max(1);
    let mut simulations = 0;
    let mut try_units = |units: &[u64]| -> Vec<bool> {
        simulations += units.len() as u32;
        units
            .par_iter()
            .map(|&u| fits(model, list, target, u * step))
            .collect()
    };
    let mut found = Found {
        largest: None,
        unbounded: false,
        at_ceiling: false,
        simulations: 0,
    };
    if !try_units(&[1])[0] {
        found.simulations = simulations;
        return found;
    }
    if !model.grows() {
        found.unbounded = true;
        found.simulations = simulations;
        return found;
    }
    let ceiling = LARGEST_VALUE / step;
    // lo fits, hi does not (in units of the step).
    let mut lo = 1u64;
    let mut hi = (model.reference_value() / step).clamp(2, ceiling.max(2));
    loop {
        if hi > ceiling {
            found.largest = Some(lo * step);
            found.at_ceiling = true;
            found.simulations = simulations;
            return found;
        }
        if try_units(&[hi])[0] {
            lo = hi;
            hi = hi.saturating_mul(2);
        } else {
            break;
        }
    }
    let threads = rayon::current_num_threads().max(1) as u64;
    while hi - lo > 1 {
        let gap = hi - lo;
        let k = threads.min(gap - 1);
        let points: Vec<u64> = (1..=k).map(|i| lo + gap * i / (k + 1)).collect();
        let ok = try_units(&points);
        match ok.iter().position(|&f| !f) {
            Some(0) => hi = points[0],
            Some(p) => {
                lo = points[p - 1];
                hi = points[p];
            }
            None => lo = points[points.len() - 1],
        }
    }
    found.largest = Some(lo * step);
    found.simulations = simulations;
    found
}

/// A value simulated in full.
#[derive(Clone, Debug)]
pub struct Evaluated {
    /// The value.
    pub value: u64,
    /// The simulated run.
    pub sim: SimResult,
    /// What the live allocations held at the peak of allocated memory, by
    /// category (their sizes rounded as the allocator rounds them).
    pub categories: CategoryBytes,
    /// The live bytes of each law at that peak.
    pub by_law: Vec<(LawKind, u64)>,
}

/// Simulates the reference's requests at `value` to the end (or the first
/// OOM when `stop_at_first_oom`), with what the peak held. `addresses`:
/// the segment addresses to lay out, when not the reference's (a recorded
/// run's at its own value: its requests are the ones made, so its layout
/// is, to the byte).
pub fn evaluate(
    model: &Model,
    list: &RequestList,
    target: &Target,
    value: u64,
    stop_at_first_oom: bool,
    addresses: Option<&[(u64, u64)]>,
) -> Evaluated {
    let sizes = model.sizes_at(value);
    let left_out = model.left_out_at(value, list, target.without_workspaces);
    let options = SimOptions {
        stop_at_first_oom,
        ..target.options.clone()
    };
    let mut edits = Resized {
        sizes: &sizes,
        left_out: &left_out,
        peak: None,
        addresses,
    };
    let sim = simulate_edited(list, &target.config, &options, &mut edits);
    let (categories, by_law) = match edits.peak {
        Some((at, _)) => held_at(model, list, target, &sizes, &left_out, at),
        None => (CategoryBytes::default(), Vec::new()),
    };
    Evaluated {
        value,
        sim,
        categories,
        by_law,
    }
}

/// What the allocations live after request `at` held, by category and by
/// law: a walk of the requests to that point (a block freed across
/// streams stays live until its free completes).
fn held_at(
    model: &Model,
    list: &RequestList,
    target: &Target,
    sizes: &[u64],
    left_out: &[bool],
    at: usize,
) -> (CategoryBytes, Vec<(LawKind, u64)>) {
    use super::Op;
    let config = &target.config;
    let mut live = vec![false; sizes.len()];
    for &id in list.initial_ids.values() {
        live[id as usize] = true;
    }
    for r in &list.requests[..=at.min(list.requests.len().saturating_sub(1))] {
        let id = r.id as usize;
        match r.op {
            Op::Alloc if left_out.get(id).copied().unwrap_or(false) => {}
            Op::Alloc => live[id] = true,
            Op::Free | Op::FreeComplete => live[id] = false,
            _ => {}
        }
    }
    let mut categories = CategoryBytes::default();
    let mut by_law: FxHashMap<LawKind, u64> = FxHashMap::default();
    for (id, _) in live.iter().enumerate().filter(|(_, l)| **l) {
        let bytes = config.round_size(sizes[id]);
        let class = list.classes.get(id).copied().unwrap_or_else(Class::default);
        categories.add(class, bytes);
        *by_law.entry(model.law(id).kind).or_default() += bytes;
    }
    let mut by_law: Vec<(LawKind, u64)> = by_law.into_iter().collect();
    by_law.sort_unstable();
    (categories, by_law)
}

/// `x * y` exactly, for `y` below 2^64, as its high and low 128 bits.
fn mul_wide(x: u128, y: u128) -> (u128, u128) {
    debug_assert!(y <= u64::MAX as u128);
    let (x_high, x_low) = (x >> 64, x & u64::MAX as u128);
    // x * y = high_part * 2^64 + low_part, each part below 2^128.
    let (high_part, low_part) = (x_high * y, x_low * y);
    let (low, carry) = low_part.overflowing_add(high_part << 64);
    ((high_part >> 64) + carry as u128, low)
}

#[cfg(test)]
mod tests;
