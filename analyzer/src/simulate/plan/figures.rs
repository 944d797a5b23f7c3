//! The plan's figures, made from the model and the values simulated: each
//! value's point, the allocations of each law, the sites that follow none,
//! where the plan is for, and its notes (as facts;
//! [`print::words::plan`](crate::print::words::plan) words them).

use super::law::LawKind;
use super::result::{LawRow, NoLawSite, Note, Place, Point};
use super::{Evaluated, Model, Varied};
use crate::analysis::limits::Limit;
use crate::replay::categories::is_step_phase;
use crate::simulate::verdict::{Device, describe};
use crate::simulate::{Extracted, Op, RequestList};
use std::path::Path;

/// The sites listed as following no simple law.
const NO_LAW_SITES: usize = 10;

/// Where the plan is for, as its sentences name it: the device, else the
/// recorded cap, else a cap named, else the memory simulated.
pub fn place_of(
    capacity: u64,
    cap: Option<u64>,
    limit: Option<Limit>,
    device: Option<&Device>,
) -> Place {
    match (device, limit, cap) {
        (Some(d), _, _) => Place::Device(d.name.clone()),
        (None, Some(l), _) => Place::Limit(l),
        (None, None, Some(c)) => Place::Cap(c),
        (None, None, None) => Place::Capacity(capacity),
    }
}

/// The plan's notes: how far the laws hold, the runs' unmatched
/// allocations (`paths` are the runs', in order), the workspaces left out
/// of `reference` (the replayed run's requests), a replay from mid-run.
pub fn notes(model: &Model, paths: &[&Path], reference: &RequestList, varied: Varied) -> Vec<Note> {
    let mut notes = Vec::new();
    if model.is_assumed() {
        notes.push(Note::OneRun(varied));
    } else if model.values.len() == 2 {
        notes.push(Note::TwoRuns(varied));
    }
    for (path, l) in paths.iter().zip(&model.line_ups) {
        if l.unmatched > 0 || l.reference_unmatched > 0 {
            notes.push(Note::Unmatched {
                path: path.display().to_string(),
                unmatched: l.unmatched,
                reference_unmatched: l.reference_unmatched,
            });
        }
    }
    let workspaces = reference.survivable.iter().filter(|&&s| s).count();
    if workspaces > 0 {
        notes.push(Note::Workspaces(workspaces));
    }
    if !reference.initial_segments.is_empty() {
        notes.push(Note::MidRun);
    }
    notes
}

/// A value simulated in full, as the plan shows it.
pub fn point(
    e: &Evaluated,
    model: &Model,
    capacity: u64,
    state: &crate::replay::ReplayState,
    symbols: &vramtrace_format::SymbolTable,
) -> Point {
    Point {
        value: e.value,
        spare_bytes: capacity.saturating_sub(e.sim.peak_reserved_bytes),
        fits: e.sim.ooms == 0,
        range: model.range(e.value),
        peak_reserved_bytes: e.sim.peak_reserved_bytes,
        peak_allocated_bytes: e.sim.peak_allocated_bytes,
        cached_at_peak_bytes: e.sim.cached_at_peak_bytes,
        fragmentation: e.sim.fragmentation,
        oom: e
            .sim
            .first_oom
            .as_ref()
            .map(|o| describe(o, state, symbols)),
        survived_failures: e.sim.survived_failures,
    }
}

/// The allocations of each law, set-up and steady state apart, with the
/// bytes each holds at `peak`'s peak of allocated memory.
pub fn law_rows(
    model: &Model,
    reference: &Extracted,
    symbols: &vramtrace_format::SymbolTable,
    peak: Option<&Evaluated>,
) -> Vec<LawRow> {
    let list = &reference.list;
    let setup_end = setup_allocations(reference, symbols);
    let mut rows: Vec<LawRow> = Vec::new();
    for id in 0..list.allocs.len() {
        let law = model.law(id).kind;
        let row = match rows.iter_mut().find(|r| r.law == law) {
            Some(r) => r,
            None => {
                rows.push(LawRow {
                    law,
                    words: law.words(),
                    setup_allocations: 0,
                    steady_allocations: 0,
                    bytes: 0,
                });
                rows.last_mut().expect("just pushed")
            }
        };
        if id < setup_end {
            row.setup_allocations += 1;
        } else {
            row.steady_allocations += 1;
        }
    }
    if let Some(e) = peak {
        for &(law, bytes) in &e.by_law {
            if let Some(r) = rows.iter_mut().find(|r| r.law == law) {
                r.bytes = bytes;
            }
        }
    }
    rows.sort_by_key(|r| r.law);
    rows
}

/// How many of the reference's allocations (alloc ids from 0) come before
/// the end of its first optimizer step: the set-up (model, optimizer state,
/// the first iteration's warm-up). Without a step, none.
pub fn setup_allocations(e: &Extracted, symbols: &vramtrace_format::SymbolTable) -> usize {
    let list = &e.list;
    // `phase_ends` lists where each phase instance ended.
    let Some(&(end, _)) = list.phase_ends.iter().find(|(_, id)| {
        e.state
            .phase(*id)
            .is_some_and(|p| is_step_phase(symbols.string_or_unknown(p.name)))
    }) else {
        return 0;
    };
    list.initial_ids.len()
        + list.requests[..end.min(list.requests.len())]
            .iter()
            .filter(|r| matches!(r.op, Op::Alloc | Op::FailedAlloc))
            .count()
}

/// Allocations whose sizes follow no law, or that have no partner in every
/// run, and all allocations: `(loose, total)`.
pub fn loose_allocations(laws: &[LawRow]) -> (usize, usize) {
    let count = |l: &LawRow| l.setup_allocations + l.steady_allocations;
    let loose = (laws.iter())
        .filter(|l| matches!(l.law, LawKind::NoLaw | LawKind::Unmatched))
        .map(count)
        .sum();
    (loose, laws.iter().map(count).sum())
}

/// The sites with allocations that follow no simple law, most first.
pub fn no_law_sites(
    model: &Model,
    list: &RequestList,
    state: &crate::replay::ReplayState,
    symbols: &vramtrace_format::SymbolTable,
) -> Vec<NoLawSite> {
    let mut by_site: rustc_hash::FxHashMap<crate::sites::SiteId, (usize, usize)> =
        Default::default();
    for id in 0..list.allocs.len() {
        if model.law(id).kind == LawKind::NoLaw {
            let e = by_site.entry(list.allocs[id].site).or_insert((0, id));
            e.0 += 1;
        }
    }
    let mut sites: Vec<NoLawSite> = by_site
        .into_iter()
        .map(|(site, (allocations, first))| {
            let mut sizes: Vec<(u64, u64)> = model
                .values
                .iter()
                .map(|&v| (v, model.law(first).at(v)))
                .collect();
            sizes.sort_unstable();
            NoLawSite {
                site: state.sites().name(site, symbols),
                allocations,
                sizes,
            }
        })
        .collect();
    sites.sort_by(|a, b| b.allocations.cmp(&a.allocations).then(a.site.cmp(&b.site)));
    sites.truncate(NO_LAW_SITES);
    sites
}
