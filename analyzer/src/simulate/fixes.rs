//! Fixes that were tried: where a run runs out of memory, the run is
//! replayed with each candidate fix applied, and only the fixes whose
//! replay gets past the failing request are offered.
//!
//! The candidates, each a change to the program or its settings:
//! - **allocator settings** (`expandable_segments`, `max_split_size_mb`,
//!   `garbage_collection_threshold`): replayed exactly, as `simulate` does;
//! - **`torch.cuda.empty_cache()`** where the phase before the failure
//!   ended (and where the iteration before it ended): exact;
//! - **freeing one site's kept blocks** before the failing request (blocks
//!   still live that were made before the failure's iteration or phase, of
//!   no model category): exact for the program that frees them, which the
//!   user has to write;
//! - **remedies by category**, as bounds or estimates: activation
//!   checkpointing at best keeps none of the iteration's saved activations
//!   (a bound: the replay drops them all), and an 8-bit optimizer keeps a
//!   quarter of 32-bit optimizer state (an estimate).
//!
//! A fix passes when its replay runs from the start through the failing
//! request, and on to the next out-of-memory error the recording had (or
//! its end), without running out of memory. Fixes that pass are ranked,
//! those replayed exactly before bounds and estimates, by the memory they
//! free at the failing request: the memory the allocator would have held
//! with the request granted (what it held at the failure plus the segment
//! it asked for) less what it holds with the fix. Where none passes, the
//! answer is how much more memory the run needs.

use super::{
    Edits, Insert, OomAt, Op, RequestList, SimOptions, simulate, simulate_edited, smallest_capacity,
};
use crate::replay::{PhaseId, ReplayState};
use crate::sites::SiteId;
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use serde::Serialize;
use vramtrace_allocator::{AllocatorConfig, MIB, allocation_size};
use vramtrace_format::{Category, PoolId, SymbolTable};

/// The pool every graph's own pool is merged into by the fix that shares
/// one: an id no program makes (PyTorch counts handles up from 1).
const SHARED_GRAPH_POOL: PoolId = PoolId(0, u64::MAX);

/// Sites whose kept blocks are tried, largest first.
const KEPT_SITES: usize = 3;

/// What kind of change a fix is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FixKind {
    /// Other `PYTORCH_CUDA_ALLOC_CONF` settings.
    AllocatorSetting,
    /// A `torch.cuda.empty_cache()` call added.
    EmptyCache,
    /// One site's kept blocks freed before the failing request.
    FreeKept,
    /// A remedy for one category of memory (activation checkpointing, an
    /// 8-bit optimizer).
    Category,
    /// A change to how CUDA graphs are captured: one pool shared by every
    /// graph, fewer graphs captured.
    Graphs,
    /// A smaller KV cache (an inference server's).
    KvCache,
}

/// How far a fix's replay can be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// The replay is the program with the fix, request for request.
    Exact,
    /// The replay is the most the fix could do: the real fix does less.
    Bound,
    /// The replay assumes sizes the trace does not give (such as 32-bit
    /// optimizer state): an estimate.
    Estimate,
    /// The replay is the program with the fix, request for request, but
    /// only as far as the recording goes: the recording ends in the
    /// failure's iteration (the program stopped at its error), so what the
    /// program would do after that, with the fix, was never recorded and
    /// may run out of memory later.
    ExactToRecordingEnd,
}

impl TriedFix {
    /// [`change`](Self::change) with its site's name as `shorten` gives it.
    pub fn change_with(&self, shorten: impl Fn(&str) -> String) -> String {
        match &self.site {
            Some(site) => self.change.replace(site.as_str(), &shorten(site)),
            None => self.change.clone(),
        }
    }
}

impl Basis {
    /// The word shown beside the fix's figures.
    pub fn word(self) -> &'static str {
        match self {
            Basis::Exact => "exact",
            Basis::Bound => "bound",
            Basis::Estimate => "estimate",
            Basis::ExactToRecordingEnd => "exact to the recording's end",
        }
    }
}

/// One fix tried.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TriedFix {
    /// The kind of change.
    pub kind: FixKind,
    /// What to change, as a user would do it (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`).
    pub change: String,
    /// Why it can help, or what the replay assumed.
    pub detail: String,
    /// The site whose blocks the fix frees, in full, as `change` names it
    /// (printers show it shortened).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
    /// How far the replay can be trusted.
    pub basis: Basis,
    /// Whether the replay got past the failing request (and on, to the next
    /// recorded failure or the end) without running out of memory.
    pub passed: bool,
    /// Memory it frees at the failing request (see the module's docs);
    /// `None` when it did not get there.
    pub frees_bytes: Option<u64>,
    /// Free memory under the limit right after the failing request was
    /// granted, with the fix.
    pub headroom_bytes: Option<u64>,
    /// Where the replay with the fix ran out of memory instead (its trace
    /// event index), when it did not pass.
    pub fails_at_event: Option<u64>,
    /// How far the replay that passed could check the fix: to the next
    /// recorded failure or the program's end, or only to where the
    /// recording ends, in the failure's own iteration.
    pub holds_to: HoldsTo,
}

/// How far a fix's replay reaches past the failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldsTo {
    /// To the next failure the recording had, or to the end of a
    /// recording that went on past the failure's iteration.
    End,
    /// To the end of a recording that stopped in the failure's iteration:
    /// later iterations, with the fix, are not known.
    RecordingEnd,
}

/// The fixes tried for a run's first out-of-memory error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FixesTried {
    /// The memory the allocator had: the limit every replay ran under.
    pub limit_bytes: u64,
    /// The failing request's trace event index.
    pub event_index: u64,
    /// The fixes that passed, the one freeing the most first.
    pub passed: Vec<TriedFix>,
    /// The fixes tried that did not pass.
    pub failed: Vec<TriedFix>,
    /// When none passed: how much more memory the run needs with its own
    /// settings (its smallest fitting limit less the limit it had).
    pub needs_more_bytes: Option<u64>,
}

/// How the run under test ran out of memory, and under what.
#[derive(Clone, Debug)]
pub struct FixTarget<'a> {
    /// The recorded settings.
    pub config: &'a AllocatorConfig,
    /// The capacity and cap every replay runs under.
    pub options: SimOptions,
    /// The first out-of-memory error of the run without a fix.
    pub oom: &'a OomAt,
    /// The run's smallest fitting capacity with its own settings, when the
    /// caller has found it already (else found here, if needed).
    pub smallest: Option<u64>,
}

/// Each allocation's place in the request list.
struct Lifetimes {
    /// The position of each allocation's request (`usize::MAX`: never made).
    made: Vec<usize>,
    /// The position of its free (`usize::MAX`: never freed).
    freed: Vec<usize>,
}

impl Lifetimes {
    fn of(list: &RequestList) -> Lifetimes {
        let mut made = vec![usize::MAX; list.allocs.len()];
        let mut freed = vec![usize::MAX; list.allocs.len()];
        for (i, r) in list.requests.iter().enumerate() {
            let id = r.id as usize;
            match r.op {
                Op::Alloc => made[id] = i,
                Op::Free | Op::FreeRequest => freed[id] = freed[id].min(i),
                _ => {}
            }
        }
        // Blocks live when recording began were made before everything.
        for &id in list.initial_ids.values() {
            made[id as usize] = 0;
        }
        Lifetimes { made, freed }
    }

    /// Whether allocation `id` is held by the program at request `at`.
    fn live_at(&self, id: usize, at: usize) -> bool {
        self.made[id] != usize::MAX && self.made[id] < at && self.freed[id] > at
    }
}

/// A candidate: the change and how to replay it.
struct Candidate {
    kind: FixKind,
    change: String,
    detail: String,
    site: Option<String>,
    basis: Basis,
    config: AllocatorConfig,
    edit: Edit,
}

/// A fix's edits of the program, as a simulation applies them.
#[derive(Default)]
struct Edit {
    at: usize,
    insert: Option<Insert>,
    dropped: Vec<bool>,
    quartered: Vec<bool>,
    /// One allocation resized: (id, bytes).
    resized: Option<(usize, u64)>,
    /// Every pool a capture made for its graph replayed as one shared pool.
    shared_graph_pools: bool,
    // What the replay saw.
    target: usize,
    check_until: usize,
    first_oom: Option<usize>,
    reserved_after_target: Option<u64>,
}

impl Edits for Edit {
    fn before(&self, i: usize) -> Option<&Insert> {
        if i == self.at {
            self.insert.as_ref()
        } else {
            None
        }
    }
    fn dropped(&self, id: usize) -> bool {
        self.dropped.get(id).copied().unwrap_or(false)
    }
    fn size(&self, id: usize, requested: u64) -> u64 {
        if let Some((resized, bytes)) = self.resized
            && resized == id
        {
            return bytes;
        }
        if self.quartered.get(id).copied().unwrap_or(false) {
            requested.div_ceil(4)
        } else {
            requested
        }
    }
    fn pool(&self, list: &RequestList, index: usize) -> PoolId {
        let pool = list.pools[index - 1];
        if self.shared_graph_pools && pool.made_by_capture() {
            SHARED_GRAPH_POOL
        } else {
            pool
        }
    }
    fn after(&mut self, i: usize, oom: bool, reserved: u64, _allocated: u64) {
        if oom && self.first_oom.is_none() && i < self.check_until {
            self.first_oom = Some(i);
        }
        if i == self.target && !oom {
            self.reserved_after_target = Some(reserved);
        }
    }
}

/// Replays the run with every candidate fix for `target.oom`, in parallel,
/// and ranks those that pass. `state` and `symbols` name sites and phases.
pub fn try_fixes(
    list: &RequestList,
    target: &FixTarget<'_>,
    state: &ReplayState,
    symbols: &SymbolTable,
) -> FixesTried {
    let oom = target.oom;
    let at = oom.request;
    let limit = target
        .options
        .cap
        .or(target.options.capacity)
        .unwrap_or(u64::MAX);
    // The next failure the recording itself had, after this one: what the
    // program did past it depended on that failure, so a fix is judged up
    // to there.
    let check_until = list.requests[at + 1..]
        .iter()
        .position(|r| {
            r.op == Op::FailedAlloc && !list.survivable.get(r.id as usize).copied().unwrap_or(false)
        })
        .map_or(list.requests.len(), |p| at + 1 + p);
    let holds_to =
        if check_until == list.requests.len() && recording_stops_in_iteration(list, at, state) {
            HoldsTo::RecordingEnd
        } else {
            HoldsTo::End
        };
    let lifetimes = Lifetimes::of(list);
    let mut candidates = setting_candidates(target.config, target.options.cap.is_some());
    candidates.extend(empty_cache_candidates(
        list,
        at,
        state,
        symbols,
        target.config,
    ));
    let boundary = iteration_start(list, at, state);
    candidates.extend(kept_candidates(
        list,
        &lifetimes,
        at,
        boundary,
        state,
        symbols,
        target.config,
    ));
    candidates.extend(category_candidates(
        list,
        &lifetimes,
        at,
        boundary,
        target.config,
    ));
    candidates.extend(graph_candidates(list, at, target.config));
    candidates.extend(kv_candidate(list, &lifetimes, at, target));
    let options = SimOptions {
        stop_at_first_oom: false,
        segments: false,
        samples: 0,
        ..target.options.clone()
    };
    let needed_segment = allocation_size(target.config.round_size(oom.requested_bytes));
    let without_fix = oom.reserved_bytes.saturating_add(needed_segment);
    let results: Vec<TriedFix> = candidates
        .into_par_iter()
        .map(|mut c| {
            c.edit.target = at;
            c.edit.check_until = check_until;
            let sim = simulate_edited(list, &c.config, &options, &mut c.edit);
            let passed = c.edit.first_oom.is_none() && c.edit.reserved_after_target.is_some();
            let fails_at_event = c.edit.first_oom.map(|i| event_index(list, i));
            drop(sim);
            let basis = match c.basis {
                Basis::Exact if holds_to == HoldsTo::RecordingEnd => Basis::ExactToRecordingEnd,
                basis => basis,
            };
            let detail = if holds_to == HoldsTo::RecordingEnd && passed {
                format!(
                    "{} (replayed only to the recording's end, in the failure's iteration: later iterations with the fix were not recorded)",
                    c.detail
                )
            } else {
                c.detail
            };
            TriedFix {
                kind: c.kind,
                change: c.change,
                detail,
                site: c.site,
                basis,
                holds_to,
                passed,
                frees_bytes: c
                    .edit
                    .reserved_after_target
                    .map(|r| without_fix.saturating_sub(r)),
                headroom_bytes: c
                    .edit
                    .reserved_after_target
                    .map(|r| limit.saturating_sub(r)),
                fails_at_event,
            }
        })
        .collect();
    let (mut passed, failed): (Vec<_>, Vec<_>) = results.into_iter().partition(|f| f.passed);
    // Fixes whose replay reaches the program's end (or next failure) first,
    // then those replayed exactly, then bounds and estimates; within each,
    // the most memory freed first, and at a tie the smaller change
    // (settings, then empty_cache, then code).
    passed.sort_by_key(|f| {
        (
            f.holds_to != HoldsTo::End,
            !matches!(f.basis, Basis::Exact | Basis::ExactToRecordingEnd),
            std::cmp::Reverse(f.frees_bytes),
            f.kind as u8,
        )
    });
    let needs_more_bytes = (passed.is_empty() && limit != u64::MAX).then(|| {
        target
            .smallest
            .unwrap_or_else(|| smallest_capacity(list, target.config, None).bytes)
            .saturating_sub(limit)
    });
    FixesTried {
        limit_bytes: limit,
        event_index: oom.event_index,
        passed,
        failed,
        needs_more_bytes,
    }
}

/// The fixes tried for the first out-of-memory error of the run with its
/// own settings (`config`) under `options`' capacity or cap: the recorded
/// run's failure, when those are the recorded device's and limit. `None`
/// when that run does not run out of memory.
pub fn for_first_oom(
    list: &RequestList,
    config: &AllocatorConfig,
    options: &SimOptions,
    state: &ReplayState,
    symbols: &SymbolTable,
) -> Option<FixesTried> {
    let run = simulate(
        list,
        config,
        &SimOptions {
            stop_at_first_oom: true,
            segments: false,
            samples: 0,
            ..options.clone()
        },
    );
    let oom = run.first_oom?;
    let target = FixTarget {
        config,
        options: options.clone(),
        oom: &oom,
        smallest: None,
    };
    Some(try_fixes(list, &target, state, symbols))
}

/// The CUDA-graph fixes: when graphs were captured each into a pool of its
/// own, all of them into one (`torch.cuda.graph(g, pool=handle)` with one
/// `handle = torch.cuda.graph_pool_handle()`), exact; when the failure is
/// inside a capture, capturing no graph from that one on, an estimate (the
/// eager warm-up runs before those captures stay in the replay, so the real
/// change frees at least as much).
fn graph_candidates(list: &RequestList, at: usize, config: &AllocatorConfig) -> Vec<Candidate> {
    let mut out = Vec::new();
    let own_pools = list.pools.iter().filter(|p| p.made_by_capture()).count();
    if own_pools > 1 {
        out.push(Candidate {
            kind: FixKind::Graphs,
            change: format!(
                "capture the {own_pools} graphs into one pool: torch.cuda.graph(g, pool=handle) with one handle = torch.cuda.graph_pool_handle()"
            ),
            detail: "graphs in one pool reuse each other's free memory: the pool needs the largest working set, not their sum".into(),
            site: None,
            basis: Basis::Exact,
            config: config.clone(),
            edit: Edit {
                shared_graph_pools: true,
                ..Edit::default()
            },
        });
    }
    // The capture the failure is in, and each capture's allocations.
    let (in_capture, captures) = super::kv::captures(list);
    let failing_capture = list
        .requests
        .get(at)
        .filter(|r| matches!(r.op, Op::Alloc | Op::FailedAlloc))
        .and_then(|r| in_capture.get(r.id as usize).copied())
        .filter(|&c| c != usize::MAX);
    if let Some(k) = failing_capture {
        let dropped: Vec<bool> = in_capture
            .iter()
            .map(|&c| c != usize::MAX && c >= k)
            .collect();
        out.push(Candidate {
            kind: FixKind::Graphs,
            change: format!(
                "capture {k} of the {captures} graphs: stop before the capture that runs out (capture {}), with fewer batch sizes",
                k + 1
            ),
            detail: "the graphs not captured allocate nothing in their pool; their eager warm-ups stay in this replay, so leaving them out too frees more".into(),
            site: None,
            basis: Basis::Estimate,
            config: config.clone(),
            edit: Edit {
                dropped,
                ..Edit::default()
            },
        });
    }
    out
}

/// A smaller KV cache: where the largest allocation made outside the
/// captures and private pools (an inference server's KV cache) is held at
/// the failure, the largest size that lets the run through, in MiB,
/// exact.
fn kv_candidate(
    list: &RequestList,
    lifetimes: &Lifetimes,
    at: usize,
    target: &FixTarget<'_>,
) -> Option<Candidate> {
    if list.pools.is_empty() {
        return None;
    }
    let kv = super::kv::find_kv_cache(list, None)?;
    if !lifetimes.live_at(kv.id as usize, at) {
        return None;
    }
    let fit = super::kv::largest_kv_cache(list, target.config, &target.options, &kv, MIB);
    let bytes = fit.largest_bytes.filter(|&b| b < kv.recorded_bytes)?;
    Some(Candidate {
        kind: FixKind::KvCache,
        change: format!(
            "a KV cache {} smaller ({} bytes instead of {}; vramtrace plan --kv-cache gives it in blocks)",
            crate::units::bytes(kv.recorded_bytes - bytes),
            crate::units::count(bytes),
            crate::units::count(kv.recorded_bytes)
        ),
        detail: "the largest KV cache with which the run, its graphs replayed in their pools, fits"
            .into(),
        site: None,
        basis: Basis::Exact,
        config: target.config.clone(),
        edit: Edit {
            resized: Some((kv.id as usize, bytes)),
            ..Edit::default()
        },
    })
}

/// The trace event index of request `i`.
fn event_index(list: &RequestList, i: usize) -> u64 {
    list.requests[..=i]
        .iter()
        .fold(0u64, |n, r| n.saturating_add(r.delta as u64))
}

/// The allocator settings tried: those of the standard policies the run
/// does not use, and `garbage_collection_threshold` (which a cap arms).
fn setting_candidates(recorded: &AllocatorConfig, capped: bool) -> Vec<Candidate> {
    let settings = [
        (
            AllocatorConfig {
                expandable_segments: true,
                ..recorded.clone()
            },
            "segments grow in place, so freed memory is not stranded in split segments",
        ),
        (
            AllocatorConfig {
                max_split_size: 128 * MIB,
                ..recorded.clone()
            },
            "blocks over 128 MiB are never split, so large free blocks stay whole",
        ),
        (
            AllocatorConfig {
                garbage_collection_threshold: 0.6,
                ..recorded.clone()
            },
            "cached blocks are returned before the limit is reached, oldest first (under a per-process cap)",
        ),
    ];
    settings
        .into_iter()
        .filter(|(config, _)| config != recorded)
        // The threshold acts only under a per-process cap, as in PyTorch.
        .filter(|(config, _)| {
            capped || config.garbage_collection_threshold == recorded.garbage_collection_threshold
        })
        .map(|(config, why)| Candidate {
            kind: FixKind::AllocatorSetting,
            change: format!("PYTORCH_CUDA_ALLOC_CONF={}", config.to_conf_string()),
            detail: why.to_string(),
            site: None,
            basis: Basis::Exact,
            config,
            edit: Edit::default(),
        })
        .collect()
}

/// `empty_cache()` where the last phase before the failure ended, and where
/// the last outermost phase (the iteration before) ended, when those differ.
fn empty_cache_candidates(
    list: &RequestList,
    at: usize,
    state: &ReplayState,
    symbols: &SymbolTable,
    config: &AllocatorConfig,
) -> Vec<Candidate> {
    let ends: Vec<&(usize, PhaseId)> = list.phase_ends.iter().filter(|(p, _)| *p <= at).collect();
    let last = ends.last().copied();
    let outer = ends
        .iter()
        .rev()
        .find(|(_, id)| state.phase(*id).is_some_and(|p| p.parent == PhaseId::NONE))
        .copied();
    let mut points: Vec<&(usize, PhaseId)> = last.into_iter().chain(outer).collect();
    points.dedup_by_key(|(p, _)| *p);
    points
        .into_iter()
        .map(|&(position, phase)| Candidate {
            kind: FixKind::EmptyCache,
            change: format!(
                "torch.cuda.empty_cache() after {} ends",
                state.phase_path(phase, symbols)
            ),
            detail: "returns the wholly free cached segments to the device there, so later requests are laid out afresh".into(),
            site: None,
            basis: Basis::Exact,
            config: config.clone(),
            edit: Edit {
                at: position,
                insert: Some(Insert::EmptyCache),
                ..Edit::default()
            },
        })
        .collect()
}

/// Where the failure's iteration (its outermost phase) began: the end of
/// the last outermost phase before it, else the start.
/// Whether the recording stops in the failure's iteration: no top-level
/// phase ends after the failing request (in a run with phases), or nothing
/// is allocated after it (in a run without).
fn recording_stops_in_iteration(list: &RequestList, at: usize, state: &ReplayState) -> bool {
    let top_level = |id| state.phase(id).is_some_and(|p| p.parent == PhaseId::NONE);
    if list.phase_ends.iter().any(|&(_, id)| top_level(id)) {
        !list
            .phase_ends
            .iter()
            .any(|&(p, id)| p > at && top_level(id))
    } else {
        !list.requests[at + 1..].iter().any(|r| r.op == Op::Alloc)
    }
}

fn iteration_start(list: &RequestList, at: usize, state: &ReplayState) -> usize {
    list.phase_ends
        .iter()
        .filter(|(p, id)| *p <= at && state.phase(*id).is_some_and(|p| p.parent == PhaseId::NONE))
        .map(|(p, _)| *p)
        .next_back()
        .unwrap_or(0)
}

/// Whether a category is the model's own (never "kept" by mistake).
fn model_state(category: Category) -> bool {
    matches!(
        category,
        Category::Parameter | Category::Buffer | Category::Gradient | Category::OptimizerState
    )
}

/// Freeing, before the failing request, the blocks of one site that are
/// live there and were made before the failure's iteration began (or, in a
/// run without phases, at any time before), for the sites holding most.
fn kept_candidates(
    list: &RequestList,
    lifetimes: &Lifetimes,
    at: usize,
    boundary: usize,
    state: &ReplayState,
    symbols: &SymbolTable,
    config: &AllocatorConfig,
) -> Vec<Candidate> {
    let before = if boundary == 0 { at } else { boundary };
    let mut by_site: FxHashMap<SiteId, (Vec<u32>, u64)> = FxHashMap::default();
    for (id, info) in list.allocs.iter().enumerate() {
        let made = lifetimes.made[id];
        if made == usize::MAX || made >= before || !lifetimes.live_at(id, at) {
            continue;
        }
        if model_state(list.classes[id].category) {
            continue;
        }
        let e = by_site.entry(info.site).or_default();
        e.0.push(id as u32);
        // Sizes are the trace's word: a hostile one must not overflow.
        e.1 = e.1.saturating_add(info.requested);
    }
    let mut sites: Vec<(SiteId, (Vec<u32>, u64))> = by_site.into_iter().collect();
    sites.sort_by_key(|(site, (_, bytes))| (std::cmp::Reverse(*bytes), site.0));
    sites
        .into_iter()
        .take(KEPT_SITES)
        .map(|(site, (ids, bytes))| {
            let name = state.sites().name(site, symbols);
            Candidate {
                kind: FixKind::FreeKept,
                change: format!(
                    "free the {} blocks from {name} still held ({}) before the failing request",
                    ids.len(),
                    crate::units::bytes(bytes)
                ),
                site: Some(name),
                detail: if boundary == 0 {
                    "made earlier and still held when the request came".into()
                } else {
                    "made before this iteration and still held: kept from an earlier one".into()
                },
                basis: Basis::Exact,
                config: config.clone(),
                edit: Edit {
                    at,
                    insert: Some(Insert::Free(ids)),
                    ..Edit::default()
                },
            }
        })
        .collect()
}

/// The sites most of whose freed bytes are activations: a block's
/// activation is known at its free, so blocks never freed do not vote.
fn activation_sites(list: &RequestList, lifetimes: &Lifetimes) -> rustc_hash::FxHashSet<SiteId> {
    let mut bytes: FxHashMap<SiteId, (u64, u64)> = FxHashMap::default();
    for (id, (info, class)) in list.allocs.iter().zip(&list.classes).enumerate() {
        if lifetimes.freed[id] == usize::MAX {
            continue;
        }
        let e = bytes.entry(info.site).or_default();
        e.1 = e.1.saturating_add(info.requested);
        if class.category == Category::Activation {
            e.0 = e.0.saturating_add(info.requested);
        }
    }
    bytes
        .into_iter()
        .filter(|(_, (act, all))| u128::from(*act) * 2 > u128::from(*all))
        .map(|(site, _)| site)
        .collect()
}

/// Remedies by category: activation checkpointing (a bound) when the
/// failure's iteration holds saved activations, and an 8-bit optimizer (an
/// estimate) when the run holds optimizer state.
fn category_candidates(
    list: &RequestList,
    lifetimes: &Lifetimes,
    at: usize,
    boundary: usize,
    config: &AllocatorConfig,
) -> Vec<Candidate> {
    let n = list.allocs.len();
    let mut out = Vec::new();
    let mut dropped = vec![false; n];
    let mut saved = (0u64, 0u64);
    let activation_sites = activation_sites(list, lifetimes);
    for (id, drop) in dropped.iter_mut().enumerate() {
        let made = lifetimes.made[id];
        let class = list.classes[id];
        // A run that ends at its failure never frees the activations it
        // saved, so they are not known as such: a block inferred as other
        // counts as one when its site's blocks are mostly activations.
        let activation = class.category == Category::Activation
            || (!class.exact
                && class.category == Category::Other
                && activation_sites.contains(&list.allocs[id].site));
        if activation && made != usize::MAX && made >= boundary && lifetimes.live_at(id, at) {
            *drop = true;
            saved.0 += 1;
            saved.1 = saved.1.saturating_add(list.allocs[id].requested);
        }
    }
    if saved.0 > 0 {
        out.push(Candidate {
            kind: FixKind::Category,
            change: "activation checkpointing (torch.utils.checkpoint) on the layers that save activations".into(),
            detail: format!(
                "at most frees the {} saved activations live at the failure ({} as requested; summary counts their blocks, rounded up): the replay drops them all, checkpointing keeps some",
                saved.0,
                crate::units::bytes(saved.1)
            ),
            site: None,
            basis: Basis::Bound,
            config: config.clone(),
            edit: Edit {
                dropped,
                ..Edit::default()
            },
        });
    }
    let quartered: Vec<bool> = (0..n)
        .map(|id| list.classes[id].category == Category::OptimizerState)
        .collect();
    let state_bytes: u64 = (0..n)
        .filter(|&id| quartered[id] && lifetimes.live_at(id, at))
        .fold(0u64, |n, id| n.saturating_add(list.allocs[id].requested));
    if state_bytes > 0 {
        out.push(Candidate {
            kind: FixKind::Category,
            change: "an 8-bit optimizer (bitsandbytes' AdamW8bit) for the optimizer state".into(),
            detail: format!(
                "optimizer state is {} at the failure (as requested; summary counts its blocks, rounded up); the replay keeps a quarter of every optimizer-state block, as 8-bit state does of 32-bit",
                crate::units::bytes(state_bytes)
            ),
            site: None,
            basis: Basis::Estimate,
            config: config.clone(),
            edit: Edit {
                quartered,
                ..Edit::default()
            },
        });
    }
    out
}

#[cfg(test)]
mod tests;
