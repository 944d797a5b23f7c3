//! The summary: what a user wants to know first about a trace.
//!
//! Peaks are tracked per event in O(1). The sites live at the allocated peak
//! come from per-site live counters kept by the replay: when a new peak is
//! reached the analysis only marks it, and copies the (small) per-site table
//! at the first decrease after it, adding back the block whose free ended
//! the increasing run; so one copy is made per increasing run, not per event.
//!
//! The free space at the peak needs a sweep over the blocks and segments of
//! that moment, sorted, and is computed once, at the end, in the same pass.
//! Nothing is copied at the peak: from the first event after it that changes
//! blocks or segments (not an allocation that makes a newer peak), the
//! summary logs each block added or removed, and each segment event's
//! segments as they were before it ([`SegmentUndo`]). At the end, the blocks
//! and segments of the peak are the final ones with the log undone. A newer
//! peak clears the log, so a trace whose peak keeps moving (a leak, or
//! segments reserved one by one) costs a push per event, not a copy per
//! peak; a log grown past [`UNDO_BUDGET`] times the blocks and segments of
//! the peak is undone then, once, into a copy, which bounds its memory by
//! the state's.

use super::categories::{Category, CategoryMoment, CategoryReport, CategoryTable, UserCategoryRow};
use super::limits::{Limit, LimitWatch, OutsideReport};
use super::pools::PoolsReport;
use super::waterfall::{Moment, TOP_SITES, Waterfall, moment_now};
use super::{Analysis, AnalysisError, Flow, Step};
use crate::replay::categories::{CATEGORIES, dominant, is_convolution_stack};
use crate::replay::user_categories::UserMoment;
use crate::replay::{
    Applied, DroppedReport, FreeSpace, Inconsistency, InconsistencyKind, LiveAlloc, Occupancy,
    PhaseId, PoolTally, ReplayState, Segment, SegmentUndo, SiteLive, Totals,
};
use crate::sites::{SiteDescription, SiteId};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeMap;
use vramtrace_format::{Event, EventData, KindCounts, StackId, SymbolTable};

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
    pending: bool,
    // The sites live at the allocated peak, with their bytes by category.
    sites_at_peak: Vec<(SiteId, SiteLive, [u64; CATEGORIES])>,
    // Where the blocks and segments at the allocated peak are.
    peak_space: PeakSpace,
    // What changed them since the peak, when `peak_space` is `Logged`.
    since_peak: SincePeak,
    // Their copy, when `peak_space` is `Copied`.
    peak_occupancy: Occupancy,
    // The shortest log undone into a copy ([`UNDO_MIN`]; less in tests).
    undo_min: usize,
    // The segments at the allocated peak, once it is logged.
    peak_segments: usize,
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

/// Where the summary finds the free space at the allocated peak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PeakSpace {
    /// In the replay state: nothing has changed blocks or segments since.
    Live,
    /// In the replay state with `Summary::since_peak` undone.
    Logged,
    /// In `Summary::peak_occupancy`.
    Copied,
}

/// The blocks and segments changed since the allocated peak, to undo.
#[derive(Clone, Debug, Default)]
struct SincePeak {
    /// Blocks added to (`true`) or removed from the segments, in order:
    /// `(address, size, added)`.
    blocks: Vec<(u64, u64, bool)>,
    /// What each segment event since changed, as it was before.
    segments: Vec<SegmentUndo>,
    /// Reserved bytes at the peak, saved before their first change after it.
    reserved: Option<u64>,
}

impl SincePeak {
    fn clear(&mut self) {
        self.blocks.clear();
        self.segments.clear();
        self.reserved = None;
    }

    fn len(&self) -> usize {
        self.blocks.len() + self.segments.len()
    }

    /// The blocks and segments at the peak: `state`'s, with the log undone.
    fn undo(&self, state: &ReplayState) -> Occupancy {
        let mut blocks: FxHashMap<u64, u64> = state.live().map(|a| (a.addr, a.size)).collect();
        for &(addr, size, added) in self.blocks.iter().rev() {
            if added {
                blocks.remove(&addr);
            } else {
                blocks.insert(addr, size);
            }
        }
        let segments = if self.segments.is_empty() {
            state.segments().copied().collect()
        } else {
            let mut segments: BTreeMap<u64, Segment> =
                state.segments().map(|s| (s.start, *s)).collect();
            for undo in self.segments.iter().rev() {
                undo.undo(&mut segments);
            }
            segments.into_values().collect()
        };
        let reserved = self.reserved.unwrap_or(state.totals().reserved);
        Occupancy::of_blocks(reserved, segments, blocks)
    }
}

/// The highest value of one total so far, and when it was reached.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PeakTrack {
    bytes: u64,
    time_ns: u64,
    // Events replayed when the peak was reached.
    replayed: u64,
    phase: PhaseId,
}

impl PeakTrack {
    /// The state's current value as the starting candidate.
    pub(crate) fn start(bytes: u64, state: &ReplayState) -> Self {
        PeakTrack {
            bytes,
            time_ns: state.time_ns(),
            replayed: state.events_applied(),
            phase: state.current_phase(),
        }
    }

    #[inline]
    pub(crate) fn update(&mut self, bytes: u64, step: &Step<'_>, state: &ReplayState) -> bool {
        if bytes > self.bytes {
            *self = PeakTrack {
                bytes,
                time_ns: step.event.time_ns,
                replayed: step.index + 1,
                phase: state.current_phase(),
            };
            true
        } else {
            false
        }
    }

    pub(crate) fn report(&self, state: &ReplayState, symbols: &SymbolTable) -> Peak {
        Peak {
            bytes: self.bytes,
            time_ns: self.time_ns,
            index: self.replayed.saturating_sub(1),
            replayed_events: self.replayed,
            phase: state.phase_path(self.phase, symbols),
        }
    }
}

/// A peak of one total.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Peak {
    /// The peak value.
    pub bytes: u64,
    /// When it was first reached.
    pub time_ns: u64,
    /// The index of the event that reached it (of the last event before the
    /// window when the peak is the window's starting state).
    pub index: u64,
    /// The number of events replayed when the peak was reached (0 for the
    /// trace's initial state).
    pub replayed_events: u64,
    /// The phase path open then (empty outside phases; JSON `null`).
    #[serde(with = "open_phase")]
    pub phase: String,
}

/// The allocator's state at the allocated peak.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PeakState {
    /// Reserved segments.
    pub segments: u64,
    /// Live blocks.
    pub live_blocks: u64,
    /// Reserved bytes.
    pub reserved_bytes: u64,
    /// Allocated bytes.
    pub allocated_bytes: u64,
    /// Reserved bytes not allocated: cached by the allocator.
    pub cached_free_bytes: u64,
    /// Internal fragmentation: block sizes minus requested sizes of live blocks.
    pub internal_fragmentation_bytes: u64,
    /// The largest free range: `None` without allocations.
    pub largest_free_block: Option<u64>,
    /// `1 - largest free block / free bytes` (when the largest free range is known).
    pub external_fragmentation: Option<f64>,
}

impl PeakState {
    fn set_free_space(&mut self, space: FreeSpace) {
        self.largest_free_block = Some(space.largest_free_block);
        self.external_fragmentation = Some(space.external_fragmentation());
    }
}

/// A site's share of the allocated peak.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteShare {
    /// The site.
    #[serde(flatten)]
    pub site: SiteDescription,
    /// Bytes live from the site at the peak.
    pub bytes: u64,
    /// Blocks live from the site at the peak.
    pub count: u64,
    /// `bytes` over the peak's allocated bytes.
    pub share: f64,
    /// What most of the site's bytes at the peak are.
    pub category: Option<Category>,
}

/// An out-of-memory event with its context.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OomReport {
    /// When it happened.
    pub time_ns: u64,
    /// Its event index.
    pub index: u64,
    /// The failed request.
    pub requested_bytes: u64,
    /// Free device memory according to the driver.
    pub device_free_bytes: u64,
    /// Allocated bytes then.
    pub allocated_bytes: u64,
    /// Reserved bytes then.
    pub reserved_bytes: u64,
    /// The open phase path (empty outside phases; JSON `null`).
    #[serde(with = "open_phase")]
    pub phase: String,
    /// The requesting site.
    #[serde(flatten)]
    pub site: SiteDescription,
    /// Where every byte under the limit was then (see
    /// [`super::waterfall`]); its `limit_line` says what the limit was.
    pub waterfall: Waterfall,
    /// Whether the program survived it: a request under a convolution
    /// after which the program allocated again (PyTorch's cuDNN code
    /// catches the failure of an algorithm's workspace and tries the next
    /// algorithm, which needs less).
    pub survived: bool,
}

/// How many inconsistencies of one kind were found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InconsistencyCount {
    /// The kind.
    pub kind: InconsistencyKind,
    /// What it means.
    pub description: &'static str,
    /// How many.
    pub count: u64,
}

/// The inconsistencies of a replay.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct InconsistencyReport {
    /// All of them.
    pub total: u64,
    /// Counts of the kinds found.
    pub by_kind: Vec<InconsistencyCount>,
    /// The first few of each kind, with their event index.
    pub examples: Vec<Inconsistency>,
}

impl InconsistencyReport {
    /// The report of a replay's inconsistencies.
    pub fn of(state: &ReplayState) -> Self {
        InconsistencyReport {
            total: state.inconsistency_total(),
            by_kind: InconsistencyKind::ALL
                .iter()
                .map(|&kind| InconsistencyCount {
                    kind,
                    description: kind.describe(),
                    count: state.inconsistency_count(kind),
                })
                .filter(|c| c.count > 0)
                .collect(),
            examples: state.inconsistencies().to_vec(),
        }
    }
}

/// The summary of a trace (or of a window of it).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SummaryReport {
    /// Events in the window.
    pub events: u64,
    /// Events by kind name.
    pub counts: BTreeMap<String, u64>,
    /// Time from the first to the last event.
    pub duration_ns: u64,
    /// Time of the first event.
    pub first_time_ns: u64,
    /// Time of the last event.
    pub last_time_ns: u64,
    /// Peak allocated bytes.
    pub peak_allocated_bytes: u64,
    /// Peak reserved bytes.
    pub peak_reserved_bytes: u64,
    /// Peak requested bytes.
    pub peak_requested_bytes: u64,
    /// Peak active bytes (blocks the caller had not freed).
    pub peak_active_bytes: u64,
    /// When allocated bytes peaked.
    pub peak_time_ns: u64,
    /// The phase path at the allocated peak (empty outside phases; JSON
    /// `null`).
    #[serde(with = "open_phase")]
    pub peak_phase: String,
    /// Each peak with its time, event and phase.
    pub peak_allocated: Peak,
    /// See [`Peak`].
    pub peak_reserved: Peak,
    /// See [`Peak`].
    pub peak_requested: Peak,
    /// The state at the allocated peak.
    pub at_peak: PeakState,
    /// The sites with the most bytes live at the allocated peak.
    pub top_sites_at_peak: Vec<SiteShare>,
    /// Out-of-memory events (the first [`MAX_OOMS`]).
    pub ooms: Vec<OomReport>,
    /// All out-of-memory events.
    pub oom_count: u64,
    /// Those the program survived (cuDNN workspaces, see
    /// [`OomReport::survived`]).
    pub survived_oom_count: u64,
    /// The state at the end of the window (in JSON, its byte totals are
    /// named `*_bytes`, as at the peak).
    #[serde(serialize_with = "end_state")]
    pub end: Totals,
    /// Contradictions found while replaying.
    pub inconsistencies: InconsistencyReport,
    /// Allocated memory by category at the peaks and at the end.
    pub categories: CategoryReport,
    /// The allocator's limit analyses take as the recorded capacity
    /// (recorded, or a cap inferred from an OOM), when known.
    pub limit: Option<Limit>,
    /// Memory outside the allocator (the device's used memory less
    /// reserved, at each device-memory sample: measured), when sampled.
    pub outside_allocator: Option<OutsideReport>,
    /// Where every byte under the limit was at the allocated peak.
    pub waterfall_at_peak: Option<Waterfall>,
    /// Memory by private pool (CUDA graphs, `MemPool`s; format 1.6), when
    /// the trace has any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pools: Option<PoolsReport>,
    /// Bad limit or device-memory events left out, and a limit that changed.
    #[serde(skip)]
    pub limit_warnings: Vec<String>,
    /// The events the recorder dropped (its output could not keep up), when
    /// the trace marks any: figures over their span are a lower bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped_events: Option<DroppedReport>,
    /// Whether the window holds no event (one past the trace's end): then
    /// no peak was reached inside it, and the peaks, the state at the peak
    /// and the sites at the peak are empty ([`SummaryReport::of_empty_window`]).
    pub empty_window: bool,
}

impl SummaryReport {
    /// The kept out-of-memory events the program did not survive.
    pub fn fatal_ooms(&self) -> impl Iterator<Item = &OomReport> {
        self.ooms.iter().filter(|o| !o.survived)
    }

    /// The summary of a window that holds no event. Its peaks would be the
    /// state carried in from before it (at the time of an event outside
    /// it), so none is reported: the peaks are zero, and so are the state
    /// at the peak, its sites and categories. The state at the window's
    /// end, its inconsistencies and its event counts stay.
    pub fn of_empty_window(self) -> SummaryReport {
        SummaryReport {
            events: self.events,
            counts: self.counts,
            end: self.end,
            inconsistencies: self.inconsistencies,
            dropped_events: self.dropped_events,
            categories: CategoryReport {
                source: self.categories.source,
                at_end: self.categories.at_end,
                ..CategoryReport::default()
            },
            empty_window: true,
            ..SummaryReport::default()
        }
    }
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
            pending: false,
            sites_at_peak: Vec::new(),
            peak_space: PeakSpace::Live,
            since_peak: SincePeak::default(),
            peak_occupancy: Occupancy::default(),
            undo_min: UNDO_MIN,
            peak_segments: 0,
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

    fn capture_peak_state(&mut self, state: &ReplayState) {
        let t = state.totals();
        self.at_peak = PeakState {
            segments: t.segments,
            live_blocks: t.live_blocks,
            reserved_bytes: t.reserved,
            allocated_bytes: t.allocated,
            cached_free_bytes: t.reserved.saturating_sub(t.allocated),
            internal_fragmentation_bytes: t.allocated.saturating_sub(t.requested),
            largest_free_block: None,
            external_fragmentation: None,
        };
        self.peak_active = t.active;
        self.peak_limit = self.limits.in_force();
        self.peak_device = self.limits.last_sample();
        self.peak_outside = self.limits.outside_now();
        if state.has_pools() {
            self.pools_at_peak.clear();
            self.pools_at_peak.extend_from_slice(state.pools());
        }
    }

    /// Copies the per-site tables at the allocated peak: the state's now,
    /// with the block freed since the peak added back and the block
    /// allocated since taken off.
    fn snapshot_sites(
        &mut self,
        state: &ReplayState,
        freed: Option<&LiveAlloc>,
        added: Option<&LiveAlloc>,
    ) {
        let by_category = state.site_categories();
        self.sites_at_peak.clear();
        self.sites_at_peak.extend(
            state
                .site_live()
                .iter()
                .enumerate()
                .filter(|(_, s)| s.blocks > 0)
                .map(|(i, s)| (SiteId(i as u32), *s, by_category[i])),
        );
        if let Some(a) = freed {
            let c = a.class.category as usize;
            match self.sites_at_peak.iter_mut().find(|(s, ..)| *s == a.site) {
                Some((_, live, categories)) => {
                    live.bytes = live.bytes.saturating_add(a.size);
                    live.blocks += 1;
                    categories[c] = categories[c].saturating_add(a.size);
                }
                None => {
                    let mut categories = [0; CATEGORIES];
                    categories[c] = a.size;
                    let live = SiteLive {
                        bytes: a.size,
                        blocks: 1,
                    };
                    self.sites_at_peak.push((a.site, live, categories));
                }
            }
        }
        if let Some(a) = added {
            let c = a.class.category as usize;
            if let Some((_, live, categories)) =
                self.sites_at_peak.iter_mut().find(|(s, ..)| *s == a.site)
            {
                live.bytes = live.bytes.saturating_sub(a.size);
                live.blocks = live.blocks.saturating_sub(1);
                categories[c] = categories[c].saturating_sub(a.size);
            }
            self.sites_at_peak.retain(|(_, live, _)| live.blocks > 0);
        }
        self.pending = false;
    }

    /// Moves the bytes of blocks live at the allocated peak whose category
    /// changed to their new category in the peak's per-site table.
    fn follow_sites(&mut self, state: &ReplayState) {
        let peak = self.allocated.replayed;
        for change in state.recategorized().iter().filter(|c| c.born <= peak) {
            if let Some((.., categories)) = self
                .sites_at_peak
                .iter_mut()
                .find(|(s, ..)| *s == change.site)
            {
                let (from, to) = (change.from.category as usize, change.to.category as usize);
                categories[from] = categories[from].saturating_sub(change.size);
                categories[to] = categories[to].saturating_add(change.size);
            }
        }
    }

    // The rarer parts of `event`, out of line: an event that needs none
    // of them (nearly all) then costs a smaller function's prologue.

    /// Blocks changed category with this event: the moments and the sites
    /// kept follow them.
    #[inline(never)]
    fn follow_recategorized(&mut self, state: &ReplayState) {
        self.categories_at_allocated.follow(state);
        self.categories_at_reserved.follow(state);
        for (_, categories) in &mut self.oom_moments {
            categories.follow(state);
        }
        // While the sites at the peak are the state's (pending), the
        // state follows their categories; once copied, the copy follows.
        if !self.pending {
            self.follow_sites(state);
        }
    }

    /// An allocation after failures under a convolution: the program went
    /// on past them.
    #[cold]
    #[inline(never)]
    fn survived(&mut self) {
        for i in self.awaiting.drain(..) {
            self.ooms[i].survived = true;
        }
        self.survived_count += std::mem::take(&mut self.awaiting_count);
    }

    /// An out-of-memory event, from `site`.
    #[cold]
    #[inline(never)]
    fn oom(&mut self, step: &Step<'_>, state: &ReplayState, site: SiteId) {
        let t = state.totals();
        self.oom_count += 1;
        let (requested, free, stack) = match step.event.data {
            EventData::Oom(o) => (o.requested, o.free_bytes, o.stack),
            _ => (0, 0, StackId::NONE),
        };
        let convolution = is_convolution_stack(stack, step.symbols);
        if convolution {
            self.awaiting_count += 1;
            if self.ooms.len() < MAX_OOMS {
                self.awaiting.push(self.ooms.len());
            }
        }
        if self.ooms.len() < MAX_OOMS {
            let limit = self.limits.limit_at_oom(requested, free, t.reserved);
            let moment = moment_now(
                state,
                step.symbols,
                limit,
                Some(requested),
                self.limits.outside_now(),
            );
            // Filled in at the end, when the categories are settled.
            let waterfall = Waterfall::of(&moment);
            self.oom_moments.push((moment, CategoryMoment::now(state)));
            self.ooms.push(OomReport {
                time_ns: step.event.time_ns,
                index: step.index,
                requested_bytes: requested,
                device_free_bytes: free,
                allocated_bytes: t.allocated,
                reserved_bytes: t.reserved,
                phase: state.phase_path(state.current_phase(), step.symbols),
                site: state.sites().describe(site, step.symbols),
                waterfall,
                survived: false,
            });
        }
    }

    /// Logs what a replayed event did to the blocks since the peak, and undoes
    /// the log into a copy once it has grown past its budget.
    fn log_since_peak(&mut self, step: &Step<'_>, state: &ReplayState) {
        let log = &mut self.since_peak.blocks;
        match step.applied {
            Applied::Alloc(a) => {
                if let Some(old) = state.replaced_by(step.index) {
                    log.push((old.addr, old.size, false));
                }
                log.push((a.addr, a.size, true));
            }
            Applied::FreeCompleted(a) => log.push((a.addr, a.size, false)),
            _ => return,
        }
        self.check_undo_budget(state);
    }

    /// Undoes the log into a copy once it has grown past what a copy costs.
    fn check_undo_budget(&mut self, state: &ReplayState) {
        let at_peak = self.at_peak.live_blocks as usize + self.peak_segments;
        let budget = (UNDO_BUDGET * at_peak).max(self.undo_min);
        if self.since_peak.len() > budget {
            self.peak_occupancy = self.since_peak.undo(state);
            self.since_peak.clear();
            self.peak_space = PeakSpace::Copied;
        }
    }

    /// Whether `event` can change the free space and so ends the state of a
    /// pending peak. An allocation that will raise allocated bytes above the
    /// peak does not: it makes a new peak instead, and sweeping before each
    /// allocation of a growing run would cost a sweep per event.
    fn ends_peak_state(&self, event: &Event, state: &ReplayState) -> bool {
        match &event.data {
            EventData::Alloc(b) => {
                state.live_at(b.addr).is_some()
                    || state.totals().allocated.saturating_add(b.size) <= self.allocated.bytes
            }
            EventData::FreeCompleted(_)
            | EventData::SegmentAlloc(_)
            | EventData::SegmentFree(_)
            | EventData::SegmentMap(_)
            | EventData::SegmentUnmap(_) => true,
            // A block freed by the caller stays in its segment until its
            // free completes; phases, annotations and tags touch no memory.
            EventData::FreeRequested(_)
            | EventData::PhaseBegin { .. }
            | EventData::PhaseEnd { .. }
            | EventData::Oom(_)
            | EventData::EmptyCache(_)
            | EventData::Annotation { .. }
            | EventData::Tag(_)
            | EventData::Limit(_)
            | EventData::DeviceMemory(_)
            | EventData::EventsDropped(_)
            | EventData::Pool(_)
            | EventData::SegmentPool(_) => false,
            // A kind this version does not know may change the free space:
            // end the pending state, which is always right.
            _ => true,
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
        self.pending = true;
        self.peak_space = PeakSpace::Live;
        self.categories_at_allocated = CategoryMoment::now(state);
        self.categories_at_reserved = CategoryMoment::now(state);
    }

    fn wants_before(&self) -> bool {
        true
    }

    #[inline]
    fn before(&mut self, _index: u64, event: &Event, state: &ReplayState) {
        if self.peak_space == PeakSpace::Live && self.ends_peak_state(event, state) {
            self.since_peak.clear();
            self.peak_segments = state.totals().segments as usize;
            self.peak_space = PeakSpace::Logged;
        }
        if self.peak_space == PeakSpace::Logged
            && let EventData::SegmentAlloc(s)
            | EventData::SegmentFree(s)
            | EventData::SegmentMap(s)
            | EventData::SegmentUnmap(s) = &event.data
        {
            self.since_peak
                .reserved
                .get_or_insert(state.totals().reserved);
            self.since_peak.segments.push(state.segment_undo(s));
            self.check_undo_budget(state);
        }
    }

    #[inline]
    fn event(&mut self, step: &Step<'_>, state: &ReplayState) -> Result<Flow, AnalysisError> {
        self.limits.event(step, state)?;
        self.counts.add(step.event.kind());
        self.first_time_ns.get_or_insert(step.event.time_ns);
        self.last_time_ns = step.event.time_ns;
        if self.peak_space == PeakSpace::Logged {
            self.log_since_peak(step, state);
        }
        if !state.recategorized().is_empty() {
            self.follow_recategorized(state);
        }
        let t = state.totals();
        if self.awaiting_count > 0 && matches!(step.applied, Applied::Alloc(_)) {
            self.survived();
        }
        match step.applied {
            Applied::Alloc(a) => {
                if self.allocated.update(t.allocated, step, state) {
                    self.pending = true;
                    self.capture_peak_state(state);
                    self.peak_space = PeakSpace::Live;
                    self.categories_at_allocated = CategoryMoment::now(state);
                } else if self.pending {
                    // Allocated bytes can also fall when a block replaces a
                    // larger live one (an inconsistent trace): undo both.
                    if let Some(old) = state.replaced_by(step.index) {
                        self.snapshot_sites(state, Some(old), Some(&a));
                    }
                }
                self.requested.update(t.requested, step, state);
                self.active_peak = self.active_peak.max(t.active);
            }
            Applied::FreeRequested(_) | Applied::FreeCompleted(_) if self.pending => {
                if let Some(a) = step.applied.released() {
                    self.snapshot_sites(state, Some(&a), None);
                }
            }
            Applied::Segment if self.reserved.update(t.reserved, step, state) => {
                self.categories_at_reserved = CategoryMoment::now(state);
            }
            Applied::Oom(site) => self.oom(step, state, site),
            _ => {}
        }
        Ok(Flow::Continue)
    }

    fn finish(&mut self, state: &ReplayState, symbols: &SymbolTable) -> Result<(), AnalysisError> {
        // The blocks still open at the end were settled: the peaks hear it.
        if self.pending {
            self.snapshot_sites(state, None, None);
        } else {
            self.follow_sites(state);
        }
        self.categories_at_allocated.follow(state);
        self.categories_at_reserved.follow(state);
        self.limits.finish(state, symbols)?;
        let limits = self.limits.report_now();
        for ((moment, categories), oom) in self.oom_moments.iter_mut().zip(&mut self.ooms) {
            categories.follow(state);
            moment.categories = categories.table();
            oom.waterfall = Waterfall::of(moment);
        }
        let at_allocated_peak = self.categories_at_allocated.table();
        let mut sites = std::mem::take(&mut self.sites_at_peak);
        sites.sort_unstable_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
        // Without an allocation there is no peak to describe.
        let mut waterfall_at_peak = None;
        if self.allocated.bytes > 0 {
            let (space, segments) = match self.peak_space {
                PeakSpace::Live => (state.free_space(), state.segments().copied().collect()),
                PeakSpace::Logged => {
                    let mut occupancy = self.since_peak.undo(state);
                    (occupancy.free_space(), occupancy.segments().to_vec())
                }
                PeakSpace::Copied => (
                    self.peak_occupancy.free_space(),
                    self.peak_occupancy.segments().to_vec(),
                ),
            };
            self.at_peak.set_free_space(space);
            let moment = Moment {
                allocated: self.at_peak.allocated_bytes,
                active: self.peak_active,
                reserved: self.at_peak.reserved_bytes,
                segments,
                largest_free_block: space.largest_free_block,
                categories: at_allocated_peak.clone(),
                sites: (sites.iter().take(TOP_SITES))
                    .map(|(site, live, _)| {
                        (state.sites().describe(*site, symbols).site, live.bytes)
                    })
                    .collect(),
                request: None,
                device_memory: self.peak_device,
                outside: self.peak_outside,
                limit: self.peak_limit.or(limits.limit),
            };
            waterfall_at_peak = Some(Waterfall::of(&moment));
        }
        let outside_allocator = limits.outside.map(|o| OutsideReport {
            at_peak_bytes: self.peak_outside,
            ..o
        });
        let peak = self.allocated.bytes;
        let top_sites_at_peak = sites
            .iter()
            .take(self.top)
            .map(|(site, live, categories)| SiteShare {
                site: state.sites().describe(*site, symbols),
                bytes: live.bytes,
                count: live.blocks,
                share: if peak == 0 {
                    0.0
                } else {
                    live.bytes as f64 / peak as f64
                },
                category: dominant(categories),
            })
            .collect();
        let first = self.first_time_ns.unwrap_or(0);
        // A peak of the starting state (a trace that starts mid-run, such as
        // a bounded recording's window) is had when the trace starts.
        let at_start = |mut p: Peak| {
            if p.replayed_events == 0 {
                p.time_ns = p.time_ns.max(first);
            }
            p
        };
        let allocated = at_start(self.allocated.report(state, symbols));
        self.report = Some(SummaryReport {
            events: self.counts.total(),
            counts: self
                .counts
                .nonzero()
                .map(|(k, n)| (k.name().to_string(), n))
                .collect(),
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
            peak_reserved: at_start(self.reserved.report(state, symbols)),
            peak_requested: at_start(self.requested.report(state, symbols)),
            at_peak: self.at_peak.clone(),
            top_sites_at_peak,
            ooms: std::mem::take(&mut self.ooms),
            oom_count: self.oom_count,
            survived_oom_count: self.survived_count,
            end: *state.totals(),
            inconsistencies: InconsistencyReport::of(state),
            categories: CategoryReport {
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
            },
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

/// A phase path in JSON: `null` outside phases (the empty path), as a
/// reader tests for "no phase" without knowing the text's convention.
pub mod open_phase {
    use serde::{Deserialize, Deserializer, Serializer};

    /// The empty path as `null`, any other as itself.
    pub fn serialize<S: Serializer>(phase: &str, serializer: S) -> Result<S::Ok, S::Error> {
        if phase.is_empty() {
            serializer.serialize_none()
        } else {
            serializer.serialize_some(phase)
        }
    }

    /// `null` (or an empty string, as JSON before version 2 had it) as the
    /// empty path.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
        Ok(Option::<String>::deserialize(deserializer)?.unwrap_or_default())
    }
}

/// The state at the end in JSON: byte totals named as the state at the peak
/// names them (`allocated_bytes`, ...), then the counts.
fn end_state<S: serde::Serializer>(end: &Totals, serializer: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeStruct;
    let mut s = serializer.serialize_struct("End", 6)?;
    s.serialize_field("allocated_bytes", &end.allocated)?;
    s.serialize_field("requested_bytes", &end.requested)?;
    s.serialize_field("active_bytes", &end.active)?;
    s.serialize_field("reserved_bytes", &end.reserved)?;
    s.serialize_field("live_blocks", &end.live_blocks)?;
    s.serialize_field("segments", &end.segments)?;
    s.end()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::analysis::run_pass;
    use crate::analysis::window::Window;
    use crate::progress::NoProgress;
    use crate::testing::{TraceBuilder, replay_trace};
    use vramtrace_format::{EventSource, TraceReader};

    /// Replays the first `events` events of a trace (after its initial state)
    /// and returns the free space of its segments then: what the summary
    /// finds at the peak in its own pass, found the slow way.
    pub(super) fn free_space_at<S: EventSource>(reader: &mut S, events: u64) -> FreeSpace {
        let mut state = ReplayState::default();
        if events == 0 {
            if let Some(initial) = reader.initial_state() {
                state.load_initial(initial, reader.symbols());
            }
        } else {
            let window = Window {
                to_index: Some(events - 1),
                ..Window::ALL
            };
            run_pass(reader, &mut state, &mut [], &window, &NoProgress).unwrap();
        }
        state.free_space()
    }

    /// The free space at the peak, the slow way: a replay up to it.
    fn replayed_free_space(bytes: &[u8], r: &SummaryReport) -> FreeSpace {
        let mut reader = TraceReader::new(bytes).unwrap();
        free_space_at(&mut reader, r.peak_allocated.replayed_events)
    }

    pub(crate) fn summarize(bytes: &[u8], window: Window) -> SummaryReport {
        summarize_with(bytes, window, UNDO_MIN)
    }

    /// A summary whose log since the peak is undone into a copy once it is
    /// longer than `undo_min` entries (and twice the peak's blocks).
    pub(super) fn summarize_with(bytes: &[u8], window: Window, undo_min: usize) -> SummaryReport {
        let mut summary = Summary::new(10);
        summary.undo_min = undo_min;
        replay_trace(bytes, &mut [&mut summary], &window);
        summary.into_report().unwrap()
    }

    #[test]
    fn user_categories_at_each_moment_reach_back_to_the_allocation() {
        let mut b = TraceBuilder::tagged();
        let site = b.site("serve", "server.py", 7);
        b.segment(0, 1 << 30);
        b.alloc(0, 1 << 20, 1 << 20, site)
            .tag(0, Category::Parameter);
        // The KV cache makes the peak, and is tagged only after it.
        b.alloc(1 << 20, 64 << 20, 64 << 20, site);
        b.tag_user(1 << 20, "kv_cache");
        b.alloc(65 << 20, 2 << 20, 2 << 20, site)
            .tag_user(65 << 20, "draft_kv");
        b.free(65 << 20, 2 << 20);
        // A built-in tag after the user's leaves the user's category.
        b.tag(1 << 20, Category::Activation);
        // A name the trace never defined: counted once, read as other.
        b.alloc(70 << 20, 4096, 4096, site);
        b.event(EventData::UserTag(vramtrace_format::UserTagEvent {
            addr: 70 << 20,
            device: 0,
            thread: 0,
            name: vramtrace_format::StringId(999_999),
        }));
        let r = summarize(&b.finish(), Window::default());
        let user = &r.categories.user;
        assert_eq!(user.len(), 2, "{user:?}");
        assert_eq!(user[0].name, "kv_cache");
        assert_eq!(user[0].at_allocated_peak, 64 << 20);
        assert_eq!(user[0].at_end, 64 << 20);
        assert_eq!(user[0].blocks_at_allocated_peak, 1);
        assert_eq!(user[1].name, "draft_kv");
        assert_eq!(user[1].at_allocated_peak, 2 << 20);
        assert_eq!(user[1].at_end, 0);
        // The tagged blocks are "other", exact, in the built-in tables.
        let other = r.categories.at_allocated_peak.get(Category::Other);
        assert_eq!(other.exact_bytes, 66 << 20);
        assert_eq!(r.categories.at_end.get(Category::Activation).bytes, 0);
        assert_eq!(r.inconsistencies.total, 1, "{:?}", r.inconsistencies);
        let json = serde_json::to_value(&r.categories).unwrap();
        assert_eq!(json["user"][0]["name"], "kv_cache");
        // Without user tags the JSON has no `user` key (the shape is kept).
        let mut plain = TraceBuilder::new();
        plain.segment(0, 1 << 20).alloc(0, 512, 512, StackId::NONE);
        let r = summarize(&plain.finish(), Window::default());
        let json = serde_json::to_value(&r.categories).unwrap();
        assert!(json.get("user").is_none());
    }

    #[test]
    fn peaks_and_sites_at_peak() {
        let mut b = TraceBuilder::new();
        let weights = b.site("load", "model.py", 10);
        let acts = b.site("forward", "model.py", 41);
        b.segment(0, 1000).begin("train");
        b.alloc(0, 100, 90, weights);
        b.begin("iter0");
        b.alloc(100, 300, 300, acts).alloc(400, 200, 150, acts);
        b.free(100, 300).free(400, 200);
        b.end("iter0");
        b.begin("iter1")
            .alloc(100, 50, 50, acts)
            .free(100, 50)
            .end("iter1");
        b.end("train");
        let r = summarize(&b.finish(), Window::ALL);
        assert_eq!(r.peak_allocated_bytes, 600);
        assert_eq!(r.peak_requested_bytes, 540);
        assert_eq!(r.peak_reserved_bytes, 1000);
        assert_eq!(r.peak_phase, "train/iter0");
        assert_eq!(r.peak_allocated.index, 5);
        assert_eq!(r.at_peak.internal_fragmentation_bytes, 60);
        assert_eq!(r.at_peak.cached_free_bytes, 400);
        assert_eq!(r.top_sites_at_peak.len(), 2);
        assert_eq!(r.top_sites_at_peak[0].site.site, "forward (model.py:41)");
        assert_eq!(r.top_sites_at_peak[0].bytes, 500);
        assert_eq!(r.top_sites_at_peak[0].count, 2);
        assert_eq!(r.top_sites_at_peak[1].bytes, 100);
        assert_eq!(r.end.allocated, 100);
        assert_eq!(r.counts["alloc"], 4);
        assert_eq!(r.inconsistencies.total, 0);
    }

    #[test]
    fn free_space_at_the_peak() {
        let mut b = TraceBuilder::new();
        let s = b.site("f", "a.py", 1);
        b.segment(0, 1000)
            .alloc(0, 100, 100, s)
            .alloc(300, 100, 100, s);
        b.free(300, 100).free(0, 100);
        let bytes = b.finish();
        let r = summarize(&bytes, Window::ALL);
        let space = replayed_free_space(&bytes, &r);
        assert_eq!(space.free_bytes, 800);
        assert_eq!(space.largest_free_block, 600);
        assert_eq!(space.free_ranges, 2);
    }

    #[test]
    fn free_space_at_the_peak_in_the_pass() {
        let mut b = TraceBuilder::new();
        let s = b.site("f", "a.py", 1);
        b.segment(0, 1000)
            .alloc(0, 100, 100, s)
            .alloc(300, 100, 100, s);
        // Freed by the caller, the block still holds its range.
        b.free_requested(300, 100).alloc(600, 50, 50, s);
        b.free_completed(300, 100).free(0, 100);
        let r = summarize(&b.finish(), Window::ALL);
        assert_eq!(r.peak_allocated.index, 2);
        assert_eq!(r.at_peak.largest_free_block, Some(600));
        assert_eq!(r.at_peak.external_fragmentation, Some(0.25));
    }

    #[test]
    fn a_peak_that_keeps_moving_costs_no_copy_and_no_second_replay() {
        // Each step makes a new peak and then frees a block: a copy of all
        // 10,000 live blocks per step would cost 10,000 times the events.
        let mut b = TraceBuilder::new();
        let s = b.site("f", "a.py", 1);
        b.segment(0, 1 << 30);
        for i in 1..=10_000 {
            b.alloc(4096 * i, 16, 16, s);
        }
        for i in 0..50 {
            b.alloc(0, 1024 + i, 1024 + i, s).free(0, 1024 + i);
        }
        let bytes = b.finish();
        let r = summarize(&bytes, Window::ALL);
        assert_eq!(r.peak_allocated_bytes, 10_000 * 16 + 1024 + 49);
        let largest = (1 << 30) - 10_000 * 4096 - 16;
        assert_eq!(r.at_peak.largest_free_block, Some(largest));
        assert_eq!(replayed_free_space(&bytes, &r).largest_free_block, largest);
        // Undone into a copy once the log outgrows its budget: the same.
        let copied = summarize_with(&bytes, Window::ALL, 0);
        assert_eq!(copied.at_peak, r.at_peak);
    }

    #[test]
    fn a_log_since_the_peak_undoes_segment_changes() {
        let mut b = TraceBuilder::new();
        let s = b.site("f", "a.py", 1);
        b.segment(0, 1000)
            .alloc(0, 100, 100, s)
            .alloc(500, 100, 100, s);
        // After the peak: a block freed, a segment added, the first one's
        // blocks gone and the segment returned, a new one mapped.
        b.free(500, 100)
            .segment(4096, 300)
            .free(0, 100)
            .segment_free(0, 1000);
        b.map(8192, 2048).alloc(8192, 50, 50, s);
        let bytes = b.finish();
        for undo_min in [0, 1, 3, UNDO_MIN] {
            let r = summarize_with(&bytes, Window::ALL, undo_min);
            assert_eq!(r.peak_allocated.index, 2);
            assert_eq!(r.at_peak.largest_free_block, Some(400), "{undo_min}");
            assert_eq!(r.at_peak.external_fragmentation, Some(0.5));
            assert_eq!(replayed_free_space(&bytes, &r).largest_free_block, 400);
        }
    }

    #[test]
    fn a_convolutions_failure_the_program_goes_on_from_is_survived() {
        let mut b = TraceBuilder::new();
        let conv = b.stack(&[
            ("_conv_forward", "torch/nn/modules/conv.py", 549),
            ("forward", "model.py", 12),
        ]);
        let other = b.site("forward", "model.py", 14);
        b.segment(0, 1 << 20).alloc(0, 1000, 1000, conv);
        // A workspace refused, then the next algorithm's, then the layer
        // after: both survived.
        b.oom(1 << 30, conv)
            .oom(1 << 29, conv)
            .alloc(4096, 1000, 1000, other);
        // A failure elsewhere is not; nor is one under a convolution that
        // the run ends at.
        b.oom(1 << 30, other).alloc(8192, 1000, 1000, other);
        b.oom(1 << 30, conv);
        let r = summarize(&b.finish(), Window::ALL);
        let survived: Vec<bool> = r.ooms.iter().map(|o| o.survived).collect();
        assert_eq!(survived, [true, true, false, false]);
        assert_eq!((r.oom_count, r.survived_oom_count), (4, 2));
        assert_eq!(r.fatal_ooms().count(), 2);
    }

    #[test]
    fn oom_and_windows() {
        let mut b = TraceBuilder::new();
        let s = b.site("f", "a.py", 1);
        b.at(1_000).segment(0, 1 << 20).alloc(0, 1000, 1000, s);
        b.at(2_000).alloc(1000, 5000, 5000, s).free(1000, 5000);
        b.at(3_000).oom(1 << 30, s).alloc(1000, 2000, 2000, s);
        let bytes = b.finish();
        let all = summarize(&bytes, Window::ALL);
        assert_eq!(all.peak_allocated_bytes, 6000);
        assert_eq!(all.oom_count, 1);
        assert_eq!(all.ooms[0].requested_bytes, 1 << 30);
        assert_eq!(all.ooms[0].allocated_bytes, 1000);
        assert_eq!(all.ooms[0].site.site, "f (a.py:1)");
        let late = summarize(
            &bytes,
            Window {
                from_ns: Some(3_000),
                ..Window::ALL
            },
        );
        // The window starts with 1000 bytes live; the earlier 6000 is outside.
        assert_eq!(late.peak_allocated_bytes, 3000);
        assert_eq!(late.events, 2);
        assert_eq!(late.first_time_ns, 3_000);
        let early = summarize(
            &bytes,
            Window {
                to_ns: Some(1_500),
                ..Window::ALL
            },
        );
        assert_eq!(early.peak_allocated_bytes, 1000);
        assert_eq!(early.oom_count, 0);
    }
}

#[cfg(test)]
mod random {
    use super::tests::{free_space_at, summarize, summarize_with};

    /// The block size of the allocation replayed as event `born - 1`.
    fn block_size(events: &[Event], born: u64) -> u64 {
        match events[born as usize - 1].data {
            EventData::Alloc(b) => b.size,
            _ => 0,
        }
    }
    use super::*;
    use crate::analysis::window::Window;
    use crate::testing::TraceBuilder;
    use proptest::prelude::*;
    use vramtrace_format::{Event, TraceReader};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// The lazily copied per-site table is the one at the peak's event.
        #[test]
        fn sites_at_peak_match_a_brute_force_replay(
            ops in proptest::collection::vec((any::<bool>(), 0u64..12, 1u64..5000, 0usize..3), 1..150),
        ) {
            let mut b = TraceBuilder::new();
            let stacks = [b.site("a", "a.py", 1), b.site("b", "b.py", 2), b.site("c", "c.py", 3)];
            b.segment(0, 1 << 30);
            for (alloc, slot, size, site) in ops {
                if alloc {
                    b.alloc(slot << 20, size, size, stacks[site]);
                } else {
                    b.free(slot << 20, 0);
                }
            }
            let bytes = b.finish();
            let r = summarize(&bytes, Window::ALL);

            let mut reader = TraceReader::new(&bytes[..]).unwrap();
            let events: Vec<Event> = reader.events().collect::<Result<_, _>>().unwrap();
            let mut state = ReplayState::default();
            let mut best = (0u64, Vec::new());
            for (i, e) in events.iter().enumerate() {
                state.apply(i as u64, e, reader.symbols());
                if state.totals().allocated > best.0 {
                    let mut sites: Vec<(String, u64)> = state
                        .site_live()
                        .iter()
                        .enumerate()
                        .filter(|(_, s)| s.blocks > 0)
                        .map(|(i, s)| (state.sites().name(SiteId(i as u32), reader.symbols()), s.bytes))
                        .collect();
                    sites.sort();
                    best = (state.totals().allocated, sites);
                }
            }
            prop_assert_eq!(r.peak_allocated_bytes, best.0);
            let mut got: Vec<(String, u64)> = r
                .top_sites_at_peak
                .iter()
                .map(|s| (s.site.site.clone(), s.bytes))
                .collect();
            got.sort();
            prop_assert_eq!(got, best.1);
        }

        /// The categories at the allocated and reserved peaks (and each top
        /// site's) are those of the blocks live then, as the whole pass
        /// settles them: tags and frees after a peak reach back to it.
        #[test]
        fn categories_at_peaks_match_a_brute_force_replay(
            ops in proptest::collection::vec((0u8..12, 0u64..10, 1u64..5000, 0usize..4), 1..160),
            tagged in any::<bool>(),
        ) {
            use crate::replay::categories::{Category, CategoryOptions, Class};
            let mut b = if tagged { TraceBuilder::tagged() } else { TraceBuilder::new() };
            let stacks = [
                b.site("forward", "model.py", 1),
                b.stack(&[("MmBackward0", "", 0)]),
                b.stack(&[("step", "/site-packages/torch/optim/adam.py", 9), ("main", "t.py", 3)]),
                b.stack(&[("_apply", "/site-packages/torch/nn/modules/module.py", 9)]),
            ];
            let mut in_step = false;
            for (op, slot, size, which) in ops {
                let addr = slot << 20;
                b.on_thread(u32::from(which == 1));
                match op {
                    0..=3 => { b.alloc(addr, size, size, stacks[which]); }
                    4 | 5 => { b.free(addr, 0); }
                    6 => { b.free_requested(addr, 0); }
                    7 => { b.segment((64 + slot) << 30, size << 20); }
                    8 | 9 => {
                        let name = "Optimizer.step#Adam.step";
                        if in_step { b.end(name); } else { b.begin(name); }
                        in_step = !in_step;
                    }
                    _ => { b.tag(addr, Category::ALL[which + slot as usize % 3]); }
                }
            }
            b.on_thread(0);
            let bytes = b.finish();
            let r = summarize(&bytes, Window::ALL);

            let mut reader = TraceReader::new(&bytes[..]).unwrap();
            let options = CategoryOptions::of_header(reader.header());
            let events: Vec<Event> = reader.events().collect::<Result<_, _>>().unwrap();
            let mut state = ReplayState::default().with_categories(options);
            // Each block's life (born, released) and site; its final class.
            let mut lives: Vec<(u64, u64, SiteId)> = Vec::new();
            let mut class: FxHashMap<u64, Class> = FxHashMap::default();
            let (mut peak, mut peak_at) = (0u64, 0u64);
            let (mut reserved, mut reserved_at) = (0u64, 0u64);
            for (i, e) in events.iter().enumerate() {
                match state.apply(i as u64, e, reader.symbols()) {
                    Applied::Alloc(_) if state.totals().allocated > peak => {
                        (peak, peak_at) = (state.totals().allocated, i as u64 + 1);
                    }
                    Applied::Segment if state.totals().reserved > reserved => {
                        (reserved, reserved_at) = (state.totals().reserved, i as u64 + 1);
                    }
                    applied => {
                        if let Some(a) = applied.released() {
                            lives.push((a.born, i as u64 + 1, a.site));
                            class.insert(a.born, a.class);
                        }
                    }
                }
                if let Some(old) = state.replaced_by(i as u64)
                    && !old.free_requested
                {
                    lives.push((old.born, i as u64 + 1, old.site));
                    class.insert(old.born, old.class);
                }
            }
            state.settle_at_end();
            for a in state.live().filter(|a| !a.free_requested) {
                lives.push((a.born, u64::MAX, a.site));
                class.insert(a.born, a.class);
            }
            let at = |moment: u64| {
                let mut bytes = [0u64; Category::COUNT];
                for &(born, released, _) in &lives {
                    if born <= moment && moment < released {
                        let c = class[&born];
                        bytes[c.category as usize] += block_size(&events, born);
                    }
                }
                bytes
            };
            let got = |t: &crate::analysis::categories::CategoryTable| {
                let mut bytes = [0u64; Category::COUNT];
                for s in &t.0 {
                    bytes[s.category as usize] = s.bytes;
                }
                bytes
            };
            prop_assert_eq!(r.peak_allocated_bytes, peak);
            prop_assert_eq!(got(&r.categories.at_allocated_peak), at(peak_at));
            prop_assert_eq!(got(&r.categories.at_reserved_peak), at(reserved_at));
            // Each top site's category: the one of most of its bytes then.
            for site in &r.top_sites_at_peak {
                let mut bytes = [0u64; Category::COUNT];
                for &(born, released, s) in &lives {
                    if born <= peak_at && peak_at < released
                        && state.sites().name(s, reader.symbols()) == site.site.site
                    {
                        bytes[class[&born].category as usize] += block_size(&events, born);
                    }
                }
                prop_assert_eq!(site.category, dominant(&bytes));
            }
        }

        /// The free space swept in the pass is the one a replay up to the
        /// peak finds, whatever blocks and segments change after the peak,
        /// and however soon the log since the peak is undone into a copy.
        #[test]
        fn free_space_at_peak_matches_a_replay(
            ops in proptest::collection::vec((0u8..10, 0u64..12, 0u64..5000), 1..150),
            from in 0u64..20,
            undo_min in 0usize..12,
        ) {
            let mut b = TraceBuilder::new();
            let s = b.site("a", "a.py", 1);
            b.segment(0, 1 << 30);
            for (op, slot, size) in ops {
                let addr = slot << 20;
                match op {
                    0 | 1 => b.alloc(addr, size, size, s),
                    2 => b.free_requested(addr, 0),
                    3 => b.free_completed(addr, 0),
                    4 => b.segment((64 + slot) << 30, size << 20),
                    5 => b.segment_free((64 + slot) << 30, size << 20),
                    // Segments holding blocks: returned with their blocks
                    // live (inconsistent), reserved again, mapped and unmapped.
                    6 => b.segment_free(0, 1 << 30),
                    7 => b.segment(0, 1 << 30),
                    8 => b.map(slot << 20, 1 << 20),
                    _ => b.unmap(slot << 20, 1 << 20),
                };
            }
            let bytes = b.finish();
            let window = Window { from_index: Some(from), ..Window::ALL };
            let r = summarize_with(&bytes, window, undo_min);
            if r.peak_allocated_bytes == 0 {
                prop_assert_eq!(r.at_peak.largest_free_block, None);
            } else if let Some(largest) = r.at_peak.largest_free_block {
                let mut reader = TraceReader::new(&bytes[..]).unwrap();
                let space = free_space_at(&mut reader, r.peak_allocated.replayed_events);
                prop_assert_eq!(largest, space.largest_free_block);
                prop_assert_eq!(
                    r.at_peak.external_fragmentation,
                    Some(space.external_fragmentation())
                );
            }
        }
    }
}
