//! The summary's peaks: each total's highest value ([`PeakTrack`]), and the
//! allocated peak's state, sites and free space, found without a copy per
//! peak (see [`super`] for how the log since the peak is undone).

use super::{SiteShare, Summary, open_phase};
use crate::analysis::Step;
use crate::analysis::categories::CategoryTable;
use crate::analysis::limits::Limit;
use crate::analysis::waterfall::{Moment, TOP_SITES, Waterfall};
use crate::replay::categories::{CATEGORIES, Class, Recategorized, dominant};
use crate::replay::{
    Applied, FreeSpace, LiveAlloc, Occupancy, PhaseId, ReplayState, Segment, SegmentUndo, SiteLive,
};
use crate::sites::SiteId;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeMap;
use vramtrace_format::{Event, EventData, SymbolTable};

/// Where the summary finds the free space at the allocated peak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PeakSpace {
    /// In the replay state: nothing has changed blocks or segments since.
    Live,
    /// In the replay state with `Summary::since_peak` undone.
    Logged,
    /// In `Summary::peak_copy`.
    Copied,
}

/// The blocks and segments changed since the allocated peak, to undo.
#[derive(Clone, Debug, Default)]
pub(super) struct SincePeak {
    /// Blocks added to (`true`) or removed from the segments, in order:
    /// `(address, size, added)`.
    pub(super) blocks: Vec<(u64, u64, bool)>,
    /// What each segment event since changed, as it was before.
    pub(super) segments: Vec<SegmentUndo>,
    /// Reserved bytes at the peak, saved before their first change after it.
    pub(super) reserved: Option<u64>,
}

impl SincePeak {
    pub(super) fn clear(&mut self) {
        self.blocks.clear();
        self.segments.clear();
        self.reserved = None;
    }

    fn len(&self) -> usize {
        self.blocks.len() + self.segments.len()
    }

    /// The blocks and segments at the peak: `state`'s, with the log undone.
    fn undo(&self, state: &ReplayState) -> PeakCopy {
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
        PeakCopy {
            reserved,
            segments,
            blocks,
        }
    }
}

/// The blocks and segments at the allocated peak, as the log since it
/// undone leaves them: in no order, sorted into an [`Occupancy`] only when
/// the free space at the peak is asked for, at the end. A newer peak makes
/// a copy moot, and a peak that creeps up (a slow leak, a snapshot's)
/// makes several: their sorts were a third of their cost (issue #47).
#[derive(Clone, Debug, Default)]
pub(super) struct PeakCopy {
    reserved: u64,
    segments: Vec<Segment>,
    /// Live blocks, `address -> size`.
    blocks: FxHashMap<u64, u64>,
}

impl PeakCopy {
    fn occupancy(self) -> Occupancy {
        Occupancy::of_blocks(self.reserved, self.segments, self.blocks)
    }
}

/// The sites live at the allocated peak, with their bytes by category: the
/// replay's per-site tables as they were then, indexed by site. A site is
/// in the table when it has blocks; the entries of the others mean nothing.
///
/// Copied whole (two copies of memory), not filtered site by site: on the
/// 400k snapshot, whose peak creeps up, the table of 3,000 sites was copied
/// after each of 306 new peaks, and the filter and the search of a site in
/// the list (also at every change of category) cost 8 M instructions
/// (issue #47).
#[derive(Clone, Debug, Default)]
pub(super) struct SitesAtPeak {
    live: Vec<SiteLive>,
    categories: Vec<[u64; CATEGORIES]>,
}

impl SitesAtPeak {
    /// The entry of `site`, made (without blocks) if the table is too short.
    fn site_mut(&mut self, site: SiteId) -> (&mut SiteLive, &mut [u64; CATEGORIES]) {
        let i = site.0 as usize;
        if i >= self.live.len() {
            self.live.resize(i + 1, SiteLive::default());
        }
        if i >= self.categories.len() {
            self.categories.resize(i + 1, [0; CATEGORIES]);
        }
        (&mut self.live[i], &mut self.categories[i])
    }

    /// The bytes by category of `site`, if it is in the table.
    fn categories_mut(&mut self, site: SiteId) -> Option<&mut [u64; CATEGORIES]> {
        let i = site.0 as usize;
        match self.live.get(i) {
            Some(live) if live.blocks > 0 => self.categories.get_mut(i),
            _ => None,
        }
    }

    /// Whether no copy was made into the table.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Moves the bytes of a block whose category changed, if its site is
    /// in the table.
    fn follow(&mut self, change: &Recategorized) {
        if let Some(categories) = self.categories_mut(change.site) {
            let (from, to) = (change.from.category as usize, change.to.category as usize);
            categories[from] = categories[from].saturating_sub(change.size);
            categories[to] = categories[to].saturating_add(change.size);
        }
    }

    /// The sites in the table, by site.
    fn into_list(self) -> Vec<SiteAtPeak> {
        self.live
            .into_iter()
            .zip(self.categories)
            .enumerate()
            .filter(|(_, (live, _))| live.blocks > 0)
            .map(|(i, (live, categories))| (SiteId(i as u32), live, categories))
            .collect()
    }
}

/// Where the sites at the allocated peak are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SitesDue {
    /// In the summary's copy ([`SitesAtPeak`]), which follows the changes
    /// of category since.
    Copied,
    /// In the replay's per-site tables: nothing was released since the
    /// peak.
    Pending,
    /// Due, but put off ([`DeferredSites`]).
    Deferred,
}

/// The fewest entries the log of a copy put off holds before the copy is
/// made (see [`DeferredSites`]).
const DEFERRED_MIN: usize = 64;

/// What one event did to a row of the replay's per-site tables (see
/// [`DeferredSites`]), to take off again.
#[derive(Clone, Copy, Debug)]
enum SiteDelta {
    /// A block of this size and category was counted in the site.
    In(SiteId, u64, u8),
    /// A block of this size and category stopped counting.
    Out(SiteId, u64, u8),
    /// Bytes of the site moved from one category to another.
    Move(SiteId, u64, u8, u8),
}

/// The sites at the allocated peak while their copy is put off: the
/// replay's per-site tables as they are now with `deltas` (what the events
/// since the copy was due did to them) taken off are the tables then; the
/// copy is those, with `freed` and `added` as
/// [`Summary::snapshot_sites`] takes them, and `follows` (the changes of
/// category since, of blocks born by the peak) followed.
///
/// The copy was due at the first release after each new peak, and a newer
/// peak makes it moot: on the 400k-entry snapshot, whose peak creeps up,
/// 320 copies of the table of 3,000 sites were made, and the next peak came
/// a median of 3 events after (nine in ten within 112): 8 M instructions of
/// copies, nearly all wasted (issue #47). The log is kept up to a quarter
/// of the table's rows (a row's copy costs about as many instructions as
/// an entry's logging and undoing), then the copy is made.
#[derive(Clone, Debug, Default)]
pub(super) struct DeferredSites {
    /// The entries past which the copy is made.
    limit: usize,
    /// The rows of the tables when the copy was due (the sites seen since
    /// are in none of its rows).
    rows: usize,
    freed: Option<LiveAlloc>,
    added: Option<LiveAlloc>,
    deltas: Vec<SiteDelta>,
    follows: Vec<Recategorized>,
}

impl DeferredSites {
    pub(super) fn clear(&mut self) {
        self.freed = None;
        self.added = None;
        self.deltas.clear();
        self.follows.clear();
    }

    fn len(&self) -> usize {
        self.deltas.len() + self.follows.len()
    }

    /// Logs what a block event did to the tables: an allocation (`a`,
    /// replacing `replaced`), or a release of `a` counted as `counted`.
    fn block(&mut self, applied: &Applied, replaced: Option<&LiveAlloc>, counted: Option<Class>) {
        match *applied {
            Applied::Alloc(a) => {
                // The replaced block leaves the counts as the class it had,
                // unless the caller had given it up already.
                if let Some(old) = replaced.filter(|old| !old.free_requested) {
                    self.deltas
                        .push(SiteDelta::Out(old.site, old.size, old.class.category as u8));
                }
                self.deltas
                    .push(SiteDelta::In(a.site, a.size, a.class.category as u8));
            }
            _ => {
                if let (Some(a), Some(counted)) = (applied.released(), counted) {
                    self.deltas
                        .push(SiteDelta::Out(a.site, a.size, counted.category as u8));
                }
            }
        }
    }

    /// Logs an event's changes of category: that they moved the counts,
    /// if they did (`counted`), and (unless `followed` elsewhere) those of
    /// blocks born by `peak`, to follow in the copy.
    fn changes(&mut self, changes: &[Recategorized], peak: u64, counted: bool, followed: bool) {
        for c in changes {
            if counted {
                self.deltas.push(SiteDelta::Move(
                    c.site,
                    c.size,
                    c.from.category as u8,
                    c.to.category as u8,
                ));
            }
            if !followed && c.born <= peak {
                self.follows.push(*c);
            }
        }
    }
}

/// A site live at the allocated peak: its live blocks and their bytes by
/// category.
pub(super) type SiteAtPeak = (SiteId, SiteLive, [u64; CATEGORIES]);

/// The highest value of one total so far, and when it was reached.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PeakTrack {
    pub(super) bytes: u64,
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

impl Summary {
    pub(super) fn capture_peak_state(&mut self, state: &ReplayState) {
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

    /// The per-site tables at the allocated peak are due: the state's now,
    /// with the block freed since the peak added back and the block
    /// allocated since taken off. Their copy is put off (see
    /// [`DeferredSites`]).
    pub(super) fn snapshot_sites(
        &mut self,
        state: &ReplayState,
        freed: Option<&LiveAlloc>,
        added: Option<&LiveAlloc>,
    ) {
        self.sites_due = SitesDue::Deferred;
        let rows = state.site_live().len();
        let deferred = &mut self.deferred_sites;
        deferred.clear();
        deferred.rows = rows;
        deferred.limit = self
            .sites_log_max
            .unwrap_or_else(|| DEFERRED_MIN.max(rows / 4));
        deferred.freed = freed.copied();
        deferred.added = added.copied();
        self.check_deferred(state);
    }

    /// Makes the copy put off once its log has grown past its limit.
    #[inline]
    pub(super) fn check_deferred(&mut self, state: &ReplayState) {
        if self.deferred_sites.len() >= self.deferred_sites.limit {
            self.copy_sites(state);
        }
    }

    /// Logs what a block event did to the per-site tables while their copy
    /// is put off, `replaced` the block an allocation replaced.
    #[inline(never)]
    pub(super) fn defer_block(&mut self, step: &Step<'_>, state: &ReplayState) {
        let applied = step.applied;
        // The class a released block was counted as: the one it had before
        // this event settled it, if it did (that change moved no counts).
        let counted = applied.released().map(|a| {
            state
                .recategorized()
                .iter()
                .find(|c| c.addr == a.addr && c.born == a.born)
                .map_or(a.class, |c| c.from)
        });
        let replaced = match applied {
            Applied::Alloc(_) => state.replaced_by(step.index),
            _ => None,
        };
        self.deferred_sites.block(applied, replaced, counted);
        self.check_deferred(state);
    }

    /// Logs an event's changes of category while the copy of the sites at
    /// the peak is put off.
    pub(super) fn defer_changes(&mut self, step: &Step<'_>, state: &ReplayState) {
        let peak = self.allocated.replayed;
        // The changes listed at a block's release settle it as it leaves
        // the counts (it leaves them as what it was counted as: the
        // release's entry says so); every other change moves the counts,
        // being of a block the caller holds (a block given up was settled
        // at its release, and is changed no more).
        let release = matches!(
            step.applied,
            Applied::FreeRequested(_) | Applied::FreeCompleted(_)
        );
        self.deferred_sites
            .changes(state.recategorized(), peak, !release, false);
        // A block event's own part is logged after this, and the log's
        // limit checked then: the log must hold all of an event.
        if !release && !matches!(step.applied, Applied::Alloc(_)) {
            self.check_deferred(state);
        }
    }

    /// Copies the per-site tables at the allocated peak, as the log put off
    /// says they were (see [`DeferredSites`]).
    #[inline(never)]
    pub(super) fn copy_sites(&mut self, state: &ReplayState) {
        let deferred = std::mem::take(&mut self.deferred_sites);
        let at_peak = &mut self.sites_at_peak;
        at_peak.live.clear();
        at_peak.live.extend_from_slice(state.site_live());
        at_peak.categories.clear();
        at_peak
            .categories
            .extend_from_slice(state.site_categories());
        // The replay's counts wrap (as `+=` and `-=` do in a release
        // build): taken off so, the rows are exactly what they were.
        for delta in &deferred.deltas {
            match *delta {
                SiteDelta::In(site, size, c) | SiteDelta::Out(site, size, c) => {
                    let sign = matches!(delta, SiteDelta::In(..));
                    let i = site.0 as usize;
                    let (live, categories) = (&mut at_peak.live[i], &mut at_peak.categories[i]);
                    let c = c as usize;
                    if sign {
                        live.bytes = live.bytes.wrapping_sub(size);
                        live.blocks = live.blocks.wrapping_sub(1);
                        categories[c] = categories[c].wrapping_sub(size);
                    } else {
                        live.bytes = live.bytes.wrapping_add(size);
                        live.blocks = live.blocks.wrapping_add(1);
                        categories[c] = categories[c].wrapping_add(size);
                    }
                }
                SiteDelta::Move(site, size, from, to) => {
                    let categories = &mut at_peak.categories[site.0 as usize];
                    categories[from as usize] = categories[from as usize].wrapping_add(size);
                    categories[to as usize] = categories[to as usize].wrapping_sub(size);
                }
            }
        }
        at_peak.live.truncate(deferred.rows);
        at_peak.categories.truncate(deferred.rows);
        if let Some(a) = &deferred.freed {
            let (live, categories) = at_peak.site_mut(a.site);
            let c = a.class.category as usize;
            if live.blocks > 0 {
                live.bytes = live.bytes.saturating_add(a.size);
                live.blocks += 1;
                categories[c] = categories[c].saturating_add(a.size);
            } else {
                // A site without blocks is not in the table: it starts afresh.
                *categories = [0; CATEGORIES];
                categories[c] = a.size;
                *live = SiteLive {
                    bytes: a.size,
                    blocks: 1,
                };
            }
        }
        if let Some(a) = &deferred.added {
            let (live, categories) = at_peak.site_mut(a.site);
            if live.blocks > 0 {
                let c = a.class.category as usize;
                live.bytes = live.bytes.saturating_sub(a.size);
                live.blocks = live.blocks.saturating_sub(1);
                categories[c] = categories[c].saturating_sub(a.size);
            }
        }
        for change in &deferred.follows {
            self.sites_at_peak.follow(change);
        }
        // The buffers, emptied, serve the next copy put off.
        self.deferred_sites = deferred;
        self.deferred_sites.clear();
        self.sites_due = SitesDue::Copied;
    }

    /// Moves the bytes of blocks live at the allocated peak whose category
    /// changed to their new category in the peak's per-site table.
    pub(super) fn follow_sites(&mut self, state: &ReplayState) {
        let peak = self.allocated.replayed;
        for change in state.recategorized().iter().filter(|c| c.born <= peak) {
            self.sites_at_peak.follow(change);
        }
    }

    /// Logs what a replayed event did to the blocks since the peak, and undoes
    /// the log into a copy once it has grown past its budget.
    pub(super) fn log_since_peak(&mut self, step: &Step<'_>, state: &ReplayState) {
        let log = &mut self.since_peak.blocks;
        match *step.applied {
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

    /// Undoes the log into a copy once it has grown past what a copy costs
    /// (`undo_at`).
    // Inlined: asked at each entry of the log, and nearly always answered
    // no; the undo is out of line.
    #[inline(always)]
    pub(super) fn check_undo_budget(&mut self, state: &ReplayState) {
        if self.since_peak.len() > self.undo_at {
            self.undo_into_copy(state);
        }
    }

    #[cold]
    #[inline(never)]
    fn undo_into_copy(&mut self, state: &ReplayState) {
        self.peak_copy = self.since_peak.undo(state);
        self.since_peak.clear();
        self.peak_space = PeakSpace::Copied;
    }

    /// Whether `event` can change the free space and so ends the state of a
    /// pending peak. An allocation that will raise allocated bytes above the
    /// peak does not: it makes a new peak instead, and sweeping before each
    /// allocation of a growing run would cost a sweep per event.
    pub(super) fn ends_peak_state(&self, event: &Event, state: &ReplayState) -> bool {
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

    // The peak's parts of `finish`.

    /// Settles the sites and categories at the peaks once the pass is over:
    /// the blocks still open at the end were settled, and the peaks hear it.
    pub(super) fn settle_peaks(&mut self, state: &ReplayState) {
        match self.sites_due {
            SitesDue::Pending => {
                self.snapshot_sites(state, None, None);
                if self.sites_due == SitesDue::Deferred {
                    self.copy_sites(state);
                }
            }
            SitesDue::Deferred => {
                // The end's changes (blocks still held, settled) moved the
                // counts too; they are followed below, once copied.
                let peak = self.allocated.replayed;
                self.deferred_sites
                    .changes(state.recategorized(), peak, true, true);
                self.copy_sites(state);
                self.follow_sites(state);
            }
            SitesDue::Copied => self.follow_sites(state),
        }
        self.categories_at_allocated.follow(state);
        self.categories_at_reserved.follow(state);
    }

    /// Takes the sites live at the allocated peak, most bytes first.
    pub(super) fn take_sites_at_peak(&mut self) -> Vec<SiteAtPeak> {
        let mut sites = std::mem::take(&mut self.sites_at_peak).into_list();
        sites.sort_unstable_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
        sites
    }

    /// Where every byte under the limit was at the allocated peak (`None`
    /// without an allocation: there is no peak to describe), with the free
    /// space at the peak set in its state. `sites` are the peak's, most bytes
    /// first; `limit` is the one in force at the end, for a peak before any.
    pub(super) fn waterfall_at_peak(
        &mut self,
        state: &ReplayState,
        symbols: &SymbolTable,
        sites: &[SiteAtPeak],
        categories: &CategoryTable,
        limit: Option<Limit>,
    ) -> Option<Waterfall> {
        if self.allocated.bytes == 0 {
            return None;
        }
        let (space, segments) = self.free_space_at_peak(state);
        self.at_peak.set_free_space(space);
        let moment = Moment {
            allocated: self.at_peak.allocated_bytes,
            active: self.peak_active,
            reserved: self.at_peak.reserved_bytes,
            segments,
            largest_free_block: space.largest_free_block,
            categories: categories.clone(),
            sites: (sites.iter().take(TOP_SITES))
                .map(|(site, live, _)| (state.sites().describe(*site, symbols).site, live.bytes))
                .collect(),
            request: None,
            device_memory: self.peak_device,
            outside: self.peak_outside,
            limit: self.peak_limit.or(limit),
        };
        Some(Waterfall::of(&moment))
    }

    /// The free space and the segments at the allocated peak, from where
    /// [`PeakSpace`] says they are.
    fn free_space_at_peak(&mut self, state: &ReplayState) -> (FreeSpace, Vec<Segment>) {
        match self.peak_space {
            PeakSpace::Live => (state.free_space(), state.segments().copied().collect()),
            PeakSpace::Logged => {
                let mut occupancy = self.since_peak.undo(state).occupancy();
                (occupancy.free_space(), occupancy.segments().to_vec())
            }
            PeakSpace::Copied => {
                let mut occupancy = std::mem::take(&mut self.peak_copy).occupancy();
                (occupancy.free_space(), occupancy.segments().to_vec())
            }
        }
    }

    /// The first `self.top` of `sites` (the peak's, most bytes first), each
    /// with its share of the allocated peak.
    pub(super) fn top_sites(
        &self,
        sites: &[SiteAtPeak],
        state: &ReplayState,
        symbols: &SymbolTable,
    ) -> Vec<SiteShare> {
        let peak = self.allocated.bytes;
        sites
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
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sites_at_the_peak_are_those_with_blocks() {
        let mut table = SitesAtPeak::default();
        // Past the end, the table grows.
        let (live, categories) = table.site_mut(SiteId(3));
        *live = SiteLive {
            bytes: 10,
            blocks: 1,
        };
        categories[0] = 10;
        // An entry without blocks is not a site at the peak, whatever it holds.
        let (live, categories) = table.site_mut(SiteId(1));
        live.bytes = 5;
        categories[1] = 5;
        assert!(table.categories_mut(SiteId(1)).is_none());
        assert!(table.categories_mut(SiteId(9)).is_none());
        table.categories_mut(SiteId(3)).unwrap()[2] = 4;
        let list = table.into_list();
        assert_eq!(list.len(), 1);
        assert_eq!((list[0].0, list[0].1.bytes), (SiteId(3), 10));
        assert_eq!(list[0].2[..3], [10, 0, 4]);
    }
}
