//! Per-phase figures, instances grouped by their normalized path
//! (`iter12/forward` → `iter#/forward`): the highest allocated memory while
//! an instance was open, and the bytes each instance left behind. These are
//! what a comparison of two runs matches phase by phase; the leak analysis
//! keeps only the instances retaining the most, so it cannot give totals.

use super::open_instances::{Figures, OpenInstances};
use super::{Analysis, AnalysisError, Flow, Step};
use crate::replay::{Applied, LiveAlloc, PathId, ReplayState};
use serde::Serialize;
use std::collections::BTreeMap;
use vramtrace_format::SymbolTable;

/// The figures of one phase, over all its instances.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PhaseTotal {
    /// The normalized phase path (`iter#/forward`).
    pub phase: String,
    /// Instances that ended inside the window.
    pub instances: u64,
    /// The most allocated bytes while any instance was open.
    pub peak_allocated_bytes: u64,
    /// Bytes allocated inside an instance and still allocated at its end,
    /// summed over the instances.
    pub retained_bytes: u64,
    /// The most bytes one instance retained.
    pub max_retained_bytes: u64,
}

/// Every phase with an instance that ended in the window, by path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PhaseTotalsReport {
    /// The phases, in path order.
    pub phases: Vec<PhaseTotal>,
}

/// An open instance's figures (see [`OpenInstances`]).
#[derive(Clone, Copy, Debug)]
struct Open {
    /// The most allocated bytes while it was innermost (and in the instances
    /// that ended inside it).
    peak: u64,
    /// Bytes allocated while it was innermost (or in the instances that
    /// ended inside it), less those released while it was the innermost
    /// open one holding them: its retained bytes are the sum of this over
    /// itself and the instances open inside it. Wider than the bytes so a
    /// difference never wraps.
    own: i128,
}

impl Figures for Open {
    fn absorb(&mut self, inner: Open) {
        self.own += inner.own;
        self.peak = self.peak.max(inner.peak);
    }
}

/// Computes a [`PhaseTotalsReport`]; costs O(1) per allocation and phase
/// end, O(log nesting depth) per free.
#[derive(Clone, Debug, Default)]
pub struct PhaseTotals {
    // The open instances begun inside the window, outermost first.
    open: OpenInstances<Open>,
    groups: BTreeMap<PathId, PhaseTotal>,
    report: Option<PhaseTotalsReport>,
}

impl PhaseTotals {
    /// An empty analysis.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the report, once the pass is over: an error if it did not finish.
    pub fn into_report(self) -> Result<PhaseTotalsReport, AnalysisError> {
        self.report.ok_or(AnalysisError::NoResult("phase totals"))
    }

    /// A block stopped counting as allocated: the open instances it was
    /// allocated in no longer retain it.
    fn released(&mut self, a: &LiveAlloc, state: &ReplayState) {
        if let Some(holder) = self.open.holder(a, state) {
            holder.own -= i128::from(a.size);
        }
    }

    /// Ends the innermost instance: its figures go to its group, and to the
    /// instance around it.
    fn end_innermost(&mut self, state: &ReplayState) {
        let Some((id, open)) = self.open.end_innermost(|id, open| (id, *open)) else {
            return;
        };
        let retained = u64::try_from(open.own.max(0)).unwrap_or(u64::MAX);
        let path = state.phase(id).map_or(PathId::NONE, |p| p.path);
        let group = self.groups.entry(path).or_insert_with(|| PhaseTotal {
            phase: state.path_name(path),
            ..PhaseTotal::default()
        });
        group.instances += 1;
        group.peak_allocated_bytes = group.peak_allocated_bytes.max(open.peak);
        group.retained_bytes = group.retained_bytes.saturating_add(retained);
        group.max_retained_bytes = group.max_retained_bytes.max(retained);
    }
}

impl Analysis for PhaseTotals {
    #[inline]
    fn event(&mut self, step: &Step<'_>, state: &ReplayState) -> Result<Flow, AnalysisError> {
        match *step.applied {
            Applied::Alloc(a) => {
                if let Some(old) = state.replaced_by(step.index) {
                    let old = *old;
                    self.released(&old, state);
                }
                if let Some(open) = self.open.innermost() {
                    open.own += i128::from(a.size);
                    open.peak = open.peak.max(state.totals().allocated);
                }
            }
            Applied::FreeRequested(a) | Applied::FreeCompleted(a)
                if step.applied.released().is_some() =>
            {
                self.released(&a, state)
            }
            Applied::PhaseBegin(id) => {
                let open = Open {
                    peak: state.totals().allocated,
                    own: 0,
                };
                self.open.begin(id, state, open);
            }
            Applied::PhaseEnd(id) => {
                // A mismatched end closes the phases nested in it too, each
                // reported; one begun before the window is not (nor are
                // those followed inside it).
                let depth = state.phase(id).map_or(0, |p| p.depth);
                if let Some(pos) = self.open.ending(id, depth) {
                    while self.open.len() > pos {
                        self.end_innermost(state);
                    }
                }
            }
            _ => {}
        }
        Ok(Flow::Continue)
    }

    fn finish(
        &mut self,
        _state: &ReplayState,
        _symbols: &SymbolTable,
    ) -> Result<(), AnalysisError> {
        let mut phases: Vec<PhaseTotal> = std::mem::take(&mut self.groups).into_values().collect();
        phases.sort_by(|a, b| a.phase.cmp(&b.phase));
        self.report = Some(PhaseTotalsReport { phases });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::analysis::window::Window;
    use crate::testing::{TraceBuilder, replay_trace};

    #[test]
    fn peaks_and_retention_per_normalized_phase() {
        let mut b = TraceBuilder::new();
        let s = b.site("f", "a.py", 1);
        b.segment(0, 1 << 20).alloc(0, 1000, 1000, s);
        for i in 0..3u64 {
            let base = 10_000 * (i + 1);
            b.begin(&format!("iter{i}"));
            b.begin("forward").alloc(base, 500, 500, s).end("forward");
            // Each repetition keeps 100 bytes; the 500 are freed in it.
            b.alloc(base + 1000, 100, 100, s).free(base, 500);
            b.end(&format!("iter{i}"));
        }
        let bytes = b.finish();
        let mut totals = PhaseTotals::new();
        replay_trace(&bytes, &mut [&mut totals], &Window::ALL);
        let r = totals.into_report().unwrap();
        let names: Vec<&str> = r.phases.iter().map(|p| p.phase.as_str()).collect();
        assert_eq!(names, ["iter#", "iter#/forward"]);
        let iter = &r.phases[0];
        assert_eq!(iter.instances, 3);
        assert_eq!(iter.retained_bytes, 300);
        assert_eq!(iter.max_retained_bytes, 100);
        // The third repetition starts with 1200 live and adds 600.
        assert_eq!(iter.peak_allocated_bytes, 1800);
        let forward = &r.phases[1];
        assert_eq!(forward.retained_bytes, 1500, "forward's block outlives it");
        assert_eq!(forward.peak_allocated_bytes, 1700);
    }
}
