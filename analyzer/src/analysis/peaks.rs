//! The peaks of one device: what the table of devices (and of ranks) shows
//! for each. Every device of a pass gets one, beside the command's analyses.

use super::categories::{CategoryMoment, CategoryTable};
use super::summary::{Peak, PeakTrack};
use super::{Analysis, AnalysisError, Flow, Step};
use crate::replay::{Applied, ReplayState};
use serde::{Deserialize, Serialize};
use vramtrace_format::SymbolTable;

/// Tracks the allocated and reserved peaks of one device.
#[derive(Clone, Debug, Default)]
pub struct Peaks {
    allocated: PeakTrack,
    reserved: PeakTrack,
    categories: CategoryMoment,
    report: Option<DevicePeaks>,
}

/// A device's peaks, with when and in which phase each was reached.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevicePeaks {
    /// The device index.
    pub device: u32,
    /// The peak of allocated bytes (what `torch.cuda.max_memory_allocated()` reports).
    pub peak_allocated: Peak,
    /// The peak of reserved bytes (`torch.cuda.max_memory_reserved()`).
    pub peak_reserved: Peak,
    /// Allocated bytes at the end: what stays live (in a training run, the
    /// parameters and optimizer state, which sharding divides).
    #[serde(default, rename = "end_allocated_bytes", alias = "end_allocated")]
    pub end_allocated: u64,
    /// Allocated memory by category at the allocated peak.
    #[serde(default)]
    pub categories_at_peak: CategoryTable,
}

impl Peaks {
    /// Peaks of nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Follows one replayed event: the pass calls this for every device's
    /// event, so it is kept to a branch on what the event did.
    #[inline(always)]
    pub fn observe(&mut self, step: &Step<'_>, state: &ReplayState) {
        if !state.recategorized().is_empty() {
            self.categories.follow(state);
        }
        match *step.applied {
            Applied::Alloc(_) if self.allocated.update(state.totals().allocated, step, state) => {
                self.categories = CategoryMoment::now(state);
            }
            Applied::Segment => {
                self.reserved.update(state.totals().reserved, step, state);
            }
            _ => {}
        }
    }

    /// The peaks of `device`, once the pass is over: an error if it did not finish.
    pub fn into_report(self, device: u32) -> Result<DevicePeaks, AnalysisError> {
        let mut report = self.report.ok_or(AnalysisError::NoResult("peaks"))?;
        report.device = device;
        Ok(report)
    }
}

impl Analysis for Peaks {
    fn begin(&mut self, state: &ReplayState, _symbols: &SymbolTable) {
        let t = state.totals();
        self.allocated = PeakTrack::start(t.allocated, state);
        self.reserved = PeakTrack::start(t.reserved, state);
        self.categories = CategoryMoment::now(state);
    }

    #[inline]
    fn event(&mut self, step: &Step<'_>, state: &ReplayState) -> Result<Flow, AnalysisError> {
        self.observe(step, state);
        Ok(Flow::Continue)
    }

    fn finish(&mut self, state: &ReplayState, symbols: &SymbolTable) -> Result<(), AnalysisError> {
        self.categories.follow(state);
        self.report = Some(DevicePeaks {
            device: 0,
            peak_allocated: self.allocated.report(state, symbols),
            peak_reserved: self.reserved.report(state, symbols),
            end_allocated: state.totals().allocated,
            // None when the pass did not tell categories apart.
            categories_at_peak: if state.category_options().infer {
                self.categories.table()
            } else {
                CategoryTable::default()
            },
        });
        Ok(())
    }
}
