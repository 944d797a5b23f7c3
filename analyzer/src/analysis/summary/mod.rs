//! The summary: what a user wants to know first about a trace.
//!
//! Peaks are tracked per event in O(1). The sites live at the allocated peak
//! come from per-site live counters kept by the replay: when a new peak is
//! reached the analysis only marks it, and copies the (small) per-site table
//! at the first decrease after it, adding back the block whose free ended
//! the increasing run; so one copy is made per increasing run, not per event.
//! Even that copy is put off: what the events after it do to the table is
//! logged instead, and a newer peak drops the log; the copy is made only
//! once the log outgrows a quarter of the table, or at the end, from the
//! table then with the log undone (see `DeferredSites`).
//!
//! The free space at the peak needs a sweep over the blocks and segments of
//! that moment, sorted, and is computed once, at the end, in the same pass.
//! Nothing is copied at the peak: from the first event after it that changes
//! blocks or segments (not an allocation that makes a newer peak), the
//! summary logs each block added or removed, and each segment event's
//! segments as they were before it
//! ([`SegmentUndo`](crate::replay::SegmentUndo)). At the end, the blocks
//! and segments of the peak are the final ones with the log undone. A newer
//! peak clears the log, so a trace whose peak keeps moving (a leak, or
//! segments reserved one by one) costs a push per event, not a copy per
//! peak; a log grown past [`UNDO_BUDGET`] times the blocks and segments of
//! the peak is undone then, once, into a copy, which bounds its memory by
//! the state's.

mod oom;
mod peak;
#[cfg(test)]
mod random;
mod report;
#[cfg(test)]
pub(crate) mod tests;

pub(crate) use peak::PeakTrack;
use peak::{DeferredSites, PeakCopy, PeakSpace, SincePeak, SitesAtPeak, SitesDue};
pub use peak::{Peak, PeakState};
pub use report::{
    InconsistencyCount, InconsistencyReport, OomReport, SiteShare, SummaryReport, open_phase,
};

use super::categories::{CategoryMoment, CategoryReport, CategoryTable, UserCategoryRow};
use super::limits::{Limit, LimitWatch, OutsideReport};
use super::pools::PoolsReport;
use super::waterfall::Moment;
use super::{Analysis, AnalysisError, Flow, Step};
use crate::replay::user_categories::UserMoment;
use crate::replay::{Applied, PoolTally, ReplayState};
use std::collections::BTreeMap;
use vramtrace_format::{Event, EventData, KindCounts, SymbolTable};

/// The most OOM events kept with their context.
pub const MAX_OOMS: usize = 100;

/// How long the log of changes since the allocated peak may grow, in blocks
/// live and segments at the peak (but at least [`UNDO_MIN`]), before it is undone into a
/// copy of the peak's blocks: the copy costs what the log's entries did.
pub const UNDO_BUDGET: usize = 2;

/// The shortest log of changes since the peak that is undone into a copy.
pub const UNDO_MIN: usize = 4096;

/// Computes a [`SummaryReport`].
#[derive(Clone, Debug)]
pub struct Summary {
    top: usize,
    counts: KindCounts,
    first_time_ns: Option<u64>,
    last_time_ns: u64,
    allocated: PeakTrack,
    reserved: PeakTrack,
    requested: PeakTrack,
    active_peak: u64,
    at_peak: PeakState,
    // Where the sites at the allocated peak are.
    sites_due: SitesDue,
    // The sites live at the allocated peak, with their bytes by category.
    sites_at_peak: SitesAtPeak,
    // Their copy, while it is put off.
    deferred_sites: DeferredSites,
    // The entries of the log of a copy put off past which it is made
    // (`None`: as `DeferredSites` says; tests set it).
    sites_log_max: Option<usize>,
    // Where the blocks and segments at the allocated peak are.
    peak_space: PeakSpace,
    // What changed them since the peak, when `peak_space` is `Logged`.
    since_peak: SincePeak,
    // Their copy, when `peak_space` is `Copied`.
    peak_copy: PeakCopy,
    // The shortest log undone into a copy ([`UNDO_MIN`]; less in tests).
    undo_min: usize,
    // The log's length past which it is undone into a copy: [`UNDO_BUDGET`]
    // times the blocks and segments at the allocated peak (at least
    // `undo_min`), worked out once when the log starts, since they stay
    // what they were while it grows (worked out at each entry, out of
    // line, it cost 1 M instructions of the 400k-entry snapshot's summary,
    // issue #47).
    undo_at: usize,
    ooms: Vec<OomReport>,
    oom_count: u64,
    // OOMs under a convolution (kept ones by index, and a count of all)
    // not yet followed by an allocation: survived once one follows.
    awaiting: Vec<usize>,
    awaiting_count: u64,
    survived_count: u64,
    // Each kept OOM's moment, and its categories as later events tell them.
    oom_moments: Vec<(Moment, CategoryMoment)>,
    // The limit, the device's samples and the memory outside the allocator.
    limits: LimitWatch,
    // At the allocated peak: active bytes, the limit in force, the last
    // device-memory sample and the memory outside the allocator then.
    peak_active: u64,
    peak_limit: Option<Limit>,
    peak_device: Option<vramtrace_format::DeviceMemoryEvent>,
    peak_outside: Option<u64>,
    // Allocated bytes by category at the allocated and reserved peaks.
    categories_at_allocated: CategoryMoment,
    categories_at_reserved: CategoryMoment,
    /// Each private pool's tally at the allocated peak.
    pools_at_peak: Vec<PoolTally>,
    report: Option<SummaryReport>,
}

impl Summary {
    /// A summary listing the `top` sites at the peak.
    pub fn new(top: usize) -> Self {
        Summary {
            top,
            counts: KindCounts::default(),
            first_time_ns: None,
            last_time_ns: 0,
            allocated: PeakTrack::default(),
            reserved: PeakTrack::default(),
            requested: PeakTrack::default(),
            active_peak: 0,
            at_peak: PeakState::default(),
            sites_due: SitesDue::Copied,
            sites_at_peak: SitesAtPeak::default(),
            deferred_sites: DeferredSites::default(),
            sites_log_max: None,
            peak_space: PeakSpace::Live,
            since_peak: SincePeak::default(),
            peak_copy: PeakCopy::default(),
            undo_min: UNDO_MIN,
            undo_at: 0,
            ooms: Vec::new(),
            oom_count: 0,
            awaiting: Vec::new(),
            awaiting_count: 0,
            survived_count: 0,
            oom_moments: Vec::new(),
            limits: LimitWatch::new(),
            peak_active: 0,
            peak_limit: None,
            peak_device: None,
            peak_outside: None,
            categories_at_allocated: CategoryMoment::default(),
            categories_at_reserved: CategoryMoment::default(),
            pools_at_peak: Vec::new(),
            report: None,
        }
    }

    /// Takes the report, once the pass is over: an error if it did not finish.
    pub fn into_report(self) -> Result<SummaryReport, AnalysisError> {
        self.report.ok_or(AnalysisError::NoResult("summary"))
    }

    // The rarer parts of `event`, out of line: an event that needs none
    // of them (nearly all) then costs a smaller function's prologue.

    /// Blocks changed category with this event: the moments and the sites
    /// kept follow them.
    #[inline(never)]
    fn follow_recategorized(&mut self, step: &Step<'_>, state: &ReplayState) {
        CategoryMoment::follow_pair(
            &mut self.categories_at_allocated,
            &mut self.categories_at_reserved,
            state,
        );
        for (_, categories) in &mut self.oom_moments {
            categories.follow(state);
        }
        // While the sites at the peak are the state's (pending), the
        // state follows their categories; once copied, the copy follows;
        // while the copy is put off, its log does.
        match self.sites_due {
            SitesDue::Copied => self.follow_sites(state),
            SitesDue::Deferred => self.defer_changes(step, state),
            SitesDue::Pending => {}
        }
    }

    /// The allocated peak's blocks and segments start to change: from now
    /// on, what changes them is logged (see the module docs).
    #[inline(never)]
    fn start_log(&mut self, state: &ReplayState) {
        self.since_peak.clear();
        let at_peak = self.at_peak.live_blocks as usize + state.totals().segments as usize;
        self.undo_at = UNDO_BUDGET.saturating_mul(at_peak).max(self.undo_min);
        self.peak_space = PeakSpace::Logged;
    }

    /// Logs the segments a segment event is about to change.
    #[inline(never)]
    fn log_segment(&mut self, s: &vramtrace_format::SegmentEvent, state: &ReplayState) {
        self.since_peak
            .reserved
            .get_or_insert(state.totals().reserved);
        self.since_peak.segments.push(state.segment_undo(s));
        self.check_undo_budget(state);
    }

    // The report's parts of `finish`.

    /// The allocated, reserved and requested peaks. A peak of the starting
    /// state (a trace that starts mid-run, such as a bounded recording's
    /// window) is had when the trace starts, at `first`.
    fn peaks(&self, state: &ReplayState, symbols: &SymbolTable, first: u64) -> [Peak; 3] {
        [&self.allocated, &self.reserved, &self.requested].map(|track| {
            let mut peak = track.report(state, symbols);
            if peak.replayed_events == 0 {
                peak.time_ns = peak.time_ns.max(first);
            }
            peak
        })
    }

    /// The events counted by kind name, kinds never seen left out.
    fn counts_by_name(&self) -> BTreeMap<String, u64> {
        self.counts
            .nonzero()
            .map(|(k, n)| (k.name().to_string(), n))
            .collect()
    }

    /// Allocated memory by category at the peaks and at the end, built-in and
    /// user categories.
    fn category_report(
        &self,
        state: &ReplayState,
        at_allocated_peak: CategoryTable,
    ) -> CategoryReport {
        CategoryReport {
            source: state.category_options().source,
            dominant: at_allocated_peak.dominant(),
            at_allocated_peak,
            at_reserved_peak: self.categories_at_reserved.table(),
            at_end: CategoryTable::of(state.categories()),
            user: UserCategoryRow::rows(
                state.user_categories(),
                self.categories_at_allocated.user(),
                self.categories_at_reserved.user(),
                &UserMoment::now(state.events_applied(), state.user_categories()),
            ),
        }
    }
}

impl Analysis for Summary {
    fn begin(&mut self, state: &ReplayState, symbols: &SymbolTable) {
        self.limits.begin(state, symbols);
        // The window's starting state is its first candidate for each peak.
        let t = *state.totals();
        let start = |bytes| PeakTrack::start(bytes, state);
        self.allocated = start(t.allocated);
        self.reserved = start(t.reserved);
        self.requested = start(t.requested);
        self.active_peak = t.active;
        self.capture_peak_state(state);
        self.sites_due = SitesDue::Pending;
        self.deferred_sites.clear();
        self.peak_space = PeakSpace::Live;
        self.categories_at_allocated = CategoryMoment::now(state);
        self.categories_at_reserved = CategoryMoment::now(state);
    }

    fn wants_before(&self) -> bool {
        true
    }

    // Always inlined into the pass's loop, as `event` is, with its rare
    // parts (the log's start, a segment event's entry) out of line: once
    // they grew, the compiler left the whole out of line, and its call cost
    // 6 M instructions of the 400k-entry snapshot's summary (issue #47).
    #[inline(always)]
    fn before(&mut self, _index: u64, event: &Event, state: &ReplayState) {
        if self.peak_space == PeakSpace::Live && self.ends_peak_state(event, state) {
            self.start_log(state);
        }
        if self.peak_space == PeakSpace::Logged
            && let EventData::SegmentAlloc(s)
            | EventData::SegmentFree(s)
            | EventData::SegmentMap(s)
            | EventData::SegmentUnmap(s) = &event.data
        {
            self.log_segment(s, state);
        }
    }

    // Always inlined into the pass's loop (a tuple of analyses calls it
    // directly): called once an event, and out of line its prologue, the
    // copy of its result and the check of that cost about 30 instructions
    // an event (callgrind, issue #47). Its rare parts are out of line.
    #[inline(always)]
    fn event(&mut self, step: &Step<'_>, state: &ReplayState) -> Result<Flow, AnalysisError> {
        self.limits.event(step, state)?;
        self.counts.add(step.event.kind());
        self.first_time_ns.get_or_insert(step.event.time_ns);
        self.last_time_ns = step.event.time_ns;
        if self.peak_space == PeakSpace::Logged {
            self.log_since_peak(step, state);
        }
        if !state.recategorized().is_empty() {
            self.follow_recategorized(step, state);
        }
        let t = state.totals();
        if self.awaiting_count > 0 && matches!(*step.applied, Applied::Alloc(_)) {
            self.survived();
        }
        match step.applied {
            Applied::Alloc(a) => {
                if self.allocated.update(t.allocated, step, state) {
                    // A copy put off is moot.
                    if self.sites_due == SitesDue::Deferred {
                        self.deferred_sites.clear();
                    }
                    self.sites_due = SitesDue::Pending;
                    self.capture_peak_state(state);
                    self.peak_space = PeakSpace::Live;
                    self.categories_at_allocated = CategoryMoment::now(state);
                } else if self.sites_due != SitesDue::Copied {
                    if self.sites_due == SitesDue::Deferred {
                        self.defer_block(step, state);
                    } else if let Some(old) = state.replaced_by(step.index) {
                        // Allocated bytes can also fall when a block
                        // replaces a larger live one (an inconsistent
                        // trace): undo both.
                        self.snapshot_sites(state, Some(old), Some(a));
                    }
                }
                self.requested.update(t.requested, step, state);
                self.active_peak = self.active_peak.max(t.active);
            }
            Applied::FreeRequested(_) | Applied::FreeCompleted(_)
                if self.sites_due != SitesDue::Copied =>
            {
                if self.sites_due == SitesDue::Deferred {
                    self.defer_block(step, state);
                } else if let Some(a) = step.applied.released() {
                    self.snapshot_sites(state, Some(&a), None);
                }
            }
            Applied::Segment if self.reserved.update(t.reserved, step, state) => {
                self.categories_at_reserved = CategoryMoment::now(state);
            }
            Applied::Oom(site) => self.oom(step, state, *site),
            _ => {}
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self, state: &ReplayState, symbols: &SymbolTable) -> Result<(), AnalysisError> {
        self.settle_peaks(state);
        self.limits.finish(state, symbols)?;
        let limits = self.limits.report_now();
        self.finish_ooms(state);
        let at_allocated_peak = self.categories_at_allocated.table();
        let sites = self.take_sites_at_peak();
        let waterfall_at_peak =
            self.waterfall_at_peak(state, symbols, &sites, &at_allocated_peak, limits.limit);
        let outside_allocator = limits.outside.map(|o| OutsideReport {
            at_peak_bytes: self.peak_outside,
            ..o
        });
        let first = self.first_time_ns.unwrap_or(0);
        let [allocated, reserved, requested] = self.peaks(state, symbols, first);
        self.report = Some(SummaryReport {
            events: self.counts.total(),
            counts: self.counts_by_name(),
            duration_ns: self.last_time_ns.saturating_sub(first),
            first_time_ns: first,
            last_time_ns: self.last_time_ns,
            peak_allocated_bytes: self.allocated.bytes,
            peak_reserved_bytes: self.reserved.bytes,
            peak_requested_bytes: self.requested.bytes,
            peak_active_bytes: self.active_peak,
            peak_time_ns: allocated.time_ns,
            peak_phase: allocated.phase.clone(),
            peak_allocated: allocated,
            peak_reserved: reserved,
            peak_requested: requested,
            at_peak: self.at_peak.clone(),
            top_sites_at_peak: self.top_sites(&sites, state, symbols),
            ooms: std::mem::take(&mut self.ooms),
            oom_count: self.oom_count,
            survived_oom_count: self.survived_count,
            end: *state.totals(),
            inconsistencies: InconsistencyReport::of(state),
            categories: self.category_report(state, at_allocated_peak),
            limit: limits.limit,
            outside_allocator,
            waterfall_at_peak,
            pools: PoolsReport::of(&self.pools_at_peak, state.pools()),
            limit_warnings: limits.warnings,
            dropped_events: state.dropped().any().then(|| state.dropped().clone()),
            empty_window: false,
        });
        Ok(())
    }
}
