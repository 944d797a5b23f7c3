//! Per-site totals over the whole window: how many blocks each site
//! allocated and how many bytes. The summary says what a site holds at the
//! peak; these say how much it churns, which is what changes when a
//! regression adds a temporary copy that never reaches the peak.

use super::{Analysis, AnalysisError, Flow, Step};
use crate::replay::{Applied, ReplayState};
use crate::sites::{SiteDescription, SiteId};
use serde::Serialize;
use vramtrace_format::SymbolTable;

/// A site's allocations over the window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SiteTotal {
    /// The site.
    #[serde(flatten)]
    pub site: SiteDescription,
    /// Blocks allocated.
    pub allocations: u64,
    /// Bytes of those blocks (block sizes).
    pub allocated_bytes: u64,
}

/// Every site that allocated in the window, most bytes first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SiteTotalsReport {
    /// The sites.
    pub sites: Vec<SiteTotal>,
}

/// Computes a [`SiteTotalsReport`]: one array update per allocation.
#[derive(Clone, Debug, Default)]
pub struct SiteTotals {
    // (allocations, bytes) by site id.
    totals: Vec<(u64, u64)>,
    report: Option<SiteTotalsReport>,
}

impl SiteTotals {
    /// An empty analysis.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the report, once the pass is over: an error if it did not finish.
    pub fn into_report(self) -> Result<SiteTotalsReport, AnalysisError> {
        self.report.ok_or(AnalysisError::NoResult("site totals"))
    }
}

impl Analysis for SiteTotals {
    #[inline]
    fn event(&mut self, step: &Step<'_>, _state: &ReplayState) -> Result<Flow, AnalysisError> {
        if let Applied::Alloc(a) = *step.applied {
            let i = a.site.0 as usize;
            if self.totals.len() <= i {
                self.totals.resize(i + 1, (0, 0));
            }
            self.totals[i].0 += 1;
            // A sum over the whole run (bytes ever allocated): saturates
            // rather than wraps on absurd sizes.
            self.totals[i].1 = self.totals[i].1.saturating_add(a.size);
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self, state: &ReplayState, symbols: &SymbolTable) -> Result<(), AnalysisError> {
        let mut sites: Vec<SiteTotal> = self
            .totals
            .iter()
            .enumerate()
            .filter(|(_, t)| t.0 > 0)
            .map(|(i, &(allocations, allocated_bytes))| SiteTotal {
                site: state.sites().describe(SiteId(i as u32), symbols),
                allocations,
                allocated_bytes,
            })
            .collect();
        sites.sort_by(|a, b| {
            b.allocated_bytes
                .cmp(&a.allocated_bytes)
                .then_with(|| a.site.site.cmp(&b.site.site))
        });
        self.report = Some(SiteTotalsReport { sites });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::analysis::window::Window;
    use crate::testing::{TraceBuilder, replay_trace};

    #[test]
    fn counts_every_allocation_of_each_site() {
        let mut b = TraceBuilder::new();
        let a = b.site("a", "a.py", 1);
        let c = b.site("c", "c.py", 3);
        b.segment(0, 1 << 20);
        b.alloc(0, 100, 90, a).free(0, 100).alloc(0, 200, 200, a);
        b.alloc(1000, 50, 50, c);
        let bytes = b.finish();
        let mut totals = SiteTotals::new();
        replay_trace(&bytes, &mut [&mut totals], &Window::ALL);
        let r = totals.into_report().unwrap();
        assert_eq!(r.sites.len(), 2);
        assert_eq!(r.sites[0].site.site, "a (a.py:1)");
        assert_eq!(
            (r.sites[0].allocations, r.sites[0].allocated_bytes),
            (2, 300)
        );
        assert_eq!(
            (r.sites[1].allocations, r.sites[1].allocated_bytes),
            (1, 50)
        );
    }
}
