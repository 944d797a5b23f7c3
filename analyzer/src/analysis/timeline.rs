//! Memory over time, downsampled for a chart: per pixel column, the moments
//! of least and most allocated memory, each with its breakdown by category
//! (site or phase), so a spike one event wide survives any zoom level.
//!
//! The column width is unknown until the trace ends, so columns start narrow
//! and pairs of them merge (keeping the lower minimum and the higher maximum)
//! whenever the trace outgrows them: one pass, memory independent of length.
//! Only columns that an event fell in are held, so a device with a few
//! events costs a few columns, not the chart's width (issue #46: a trace of
//! 255 devices with one tag each once took 4.9 GB in a Perfetto export).

use super::pauses::{GAP_BUDGET, IdleGaps, PauseTracker};
use super::{Analysis, AnalysisError, Flow, Step};
use crate::replay::categories::{CATEGORIES, Category};
use crate::replay::{Applied, LiveAlloc, ReplayState};
use serde::Serialize;
use std::collections::BTreeMap;
use vramtrace_format::{EventData, SymbolTable};

/// What the stacked areas are split by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// Allocation sites (the most telling frame of the allocating stack).
    #[default]
    Site,
    /// The phase the allocation was made in, numbers normalized (`iter#/forward`).
    Phase,
    /// What the blocks hold: parameters, gradients, activations, ...
    /// (see [`crate::replay::categories`]), in that order.
    Category,
    /// No split: one area of allocated memory.
    None,
}

/// Options of the timeline.
#[derive(Clone, Copy, Debug)]
pub struct TimelineOptions {
    /// Columns to keep (about the chart's width in pixels).
    pub columns: usize,
    /// The split of the stacked areas.
    pub group_by: GroupBy,
    /// Groups (sites, phases) shown by name; the rest are summed as `other`.
    pub top: usize,
}

impl Default for TimelineOptions {
    fn default() -> Self {
        TimelineOptions {
            columns: 1000,
            group_by: GroupBy::Site,
            top: 8,
        }
    }
}

/// One moment of the downsampled timeline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TimelineSample {
    /// Time since the trace start.
    pub time_ns: u64,
    /// The index of the event after which it was taken.
    pub index: u64,
    /// Allocated bytes (block sizes of live blocks).
    pub allocated: u64,
    /// Reserved bytes (the column's extreme on the same side: the maximum
    /// with the allocated maximum, the minimum with the minimum).
    pub reserved: u64,
    /// Allocated bytes per category, in [`Timeline::categories`] order.
    pub values: Vec<u64>,
    /// Memory outside the allocator (the device's used memory less reserved
    /// memory, measured at the last device-memory sample, a step until the
    /// next): the most in force during the sample's column; `None` before
    /// the first sample, or in a trace without samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outside: Option<u64>,
    /// Bytes reserved in private pools (CUDA graphs, `MemPool`s; part of
    /// `reserved`), taken as `reserved` is: `None` in a trace without them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pools: Option<u64>,
}

/// A phase instance, for bands along the time axis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PhaseSpan {
    /// The phase's own name.
    pub name: String,
    /// When it began.
    pub start_ns: u64,
    /// When it ended (the trace's end if it never did).
    pub end_ns: u64,
    /// Nesting depth, 0 for top-level phases.
    pub depth: usize,
}

/// A point worth marking: the peak, an OOM.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TimelinePoint {
    /// When.
    pub time_ns: u64,
    /// The memory level: allocated bytes at the peak, requested bytes of an OOM.
    pub bytes: u64,
    /// The largest category at the peak; the site of an OOM.
    pub category: String,
    /// The bytes of that category at the peak (0 for an OOM).
    pub category_bytes: u64,
}

/// The downsampled timeline of a trace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Timeline {
    /// What the areas are split by.
    pub grouped_by: GroupBy,
    /// Category names, bottom of the stack first; `other` last when present.
    pub categories: Vec<String>,
    /// Samples in time order, at most two per column.
    pub samples: Vec<TimelineSample>,
    /// Phase instances.
    pub phases: Vec<PhaseSpan>,
    /// The allocated peak.
    pub peak: Option<TimelinePoint>,
    /// Out-of-memory events.
    pub ooms: Vec<TimelinePoint>,
    /// The pauses, for an axis of busy time.
    pub idle: IdleGaps,
    /// The device's memory, when the trace's header gives it (set by the
    /// command, which reads the header: a chart of a run that ran out of
    /// memory draws it).
    pub capacity_bytes: Option<u64>,
    /// What that line is, when not the device's memory (the allocator's
    /// cap, named as the limit analysis names it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_label: Option<String>,
}

/// Categories whose bytes each sample keeps by name; more would cost more
/// per sample, fewer would miss sites that matter at some moment.
const TRACKED: usize = 12;

/// Adds each `(category, bytes)` to a sample's count of that category, if
/// it keeps one (saturating: a hostile trace's sizes may not sum).
fn shift(sample: &mut Sample, changes: &[(u32, i128)]) {
    for &(category, delta) in changes {
        for (c, bytes) in sample.tracked.iter_mut() {
            if *c == category {
                *bytes = (*bytes as i128 + delta).clamp(0, u64::MAX as i128) as u64;
            }
        }
    }
}

/// The moment after event `index`: allocated bytes, and the bytes of the
/// `tracked` categories by their running counts in `bytes`. Inlined into
/// `observe`, which writes it in place.
#[inline(always)]
fn sample(
    tracked: &[u32; TRACKED],
    bytes: &[u64],
    index: u64,
    time_ns: u64,
    allocated: u64,
) -> Sample {
    let mut kept = [(u32::MAX, 0); TRACKED];
    for (slot, &c) in kept.iter_mut().zip(tracked) {
        if c != u32::MAX {
            *slot = (c, bytes.get(c as usize).copied().unwrap_or(0));
        }
    }
    Sample {
        time_ns,
        index,
        allocated,
        tracked: kept,
    }
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    time_ns: u64,
    index: u64,
    allocated: u64,
    // (category, bytes); category u32::MAX marks an unused slot.
    tracked: [(u32, u64); TRACKED],
}

#[derive(Clone, Copy, Debug, Default)]
struct Column {
    min: Option<Sample>,
    max: Option<Sample>,
    reserved_min: u64,
    reserved_max: u64,
    // Bytes in private pools, at the moments reserved_min and _max are.
    pools_min: u64,
    pools_max: u64,
    // The most memory outside the allocator in force during the column.
    outside_max: Option<u64>,
}

impl Column {
    fn merge(a: Column, b: Column) -> Column {
        let pick = |x: Option<Sample>, y: Option<Sample>, lower: bool| match (x, y) {
            (Some(x), Some(y)) => {
                let take_x = if lower {
                    x.allocated <= y.allocated
                } else {
                    x.allocated >= y.allocated
                };
                Some(if take_x { x } else { y })
            }
            (x, None) => x,
            (None, y) => y,
        };
        match (a.max.is_some(), b.max.is_some()) {
            (false, _) => b,
            (_, false) => a,
            _ => Column {
                min: pick(a.min, b.min, true),
                max: pick(a.max, b.max, false),
                reserved_min: a.reserved_min.min(b.reserved_min),
                reserved_max: a.reserved_max.max(b.reserved_max),
                pools_min: if a.reserved_min <= b.reserved_min {
                    a.pools_min
                } else {
                    b.pools_min
                },
                pools_max: if a.reserved_max >= b.reserved_max {
                    a.pools_max
                } else {
                    b.pools_max
                },
                outside_max: a.outside_max.max(b.outside_max),
            },
        }
    }
}

/// A block's bytes moved from one category to another by the event at
/// `at` (`u64::MAX`: the pass's end), to move in every sample kept before it
/// while the block was live.
#[derive(Clone, Copy, Debug)]
struct Pending {
    born: u64,
    at: u64,
    from: u32,
    to: u32,
    size: u64,
}

/// Builds a [`Timeline`] in one pass.
pub struct TimelineAnalysis {
    options: TimelineOptions,
    // Allocated bytes by category id.
    bytes: Vec<u64>,
    // Category of each phase instance (for --by phase), by PhaseId + 1: index 0 is
    // "no phase", whose id is u32::MAX (indexed by the id itself, one allocation
    // outside any phase made this table 16 GiB).
    phase_category: Vec<u32>,
    phase_names: rustc_hash::FxHashMap<String, u32>,
    tracked: [u32; TRACKED],
    // The columns an event fell in, by their index (time since the origin
    // over the width).
    columns: BTreeMap<u64, Column>,
    // The column the last event fell in, held out of the map while events
    // fall in it (most do): no lookup an event.
    open: Option<(u64, Column)>,
    // The times the open column spans, `[start, end)`, while one is open.
    open_start_ns: u64,
    open_end_ns: u64,
    origin_ns: Option<u64>,
    width_ns: u64,
    current: u64,
    // Category changes not yet moved in the kept samples (see
    // `follow_categories`).
    pending: Vec<Pending>,
    // The index of the sample taken last (the latest any kept sample can
    // have), for `move_recategorized`.
    last_sample_index: Option<u64>,
    peak: Option<(Sample, u64)>,
    ooms: Vec<TimelinePoint>,
    last_time_ns: u64,
    pauses: PauseTracker,
    // Memory outside the allocator at the last device-memory sample.
    outside: Option<u64>,
    // Whether `outside` changed since the open column last took it in.
    outside_changed: bool,
    report: Option<Timeline>,
}

impl TimelineAnalysis {
    /// A timeline with these options.
    pub fn new(options: TimelineOptions) -> Self {
        TimelineAnalysis {
            options: TimelineOptions {
                columns: options.columns.max(2),
                top: options.top.max(1),
                ..options
            },
            bytes: Vec::new(),
            phase_category: Vec::new(),
            phase_names: Default::default(),
            tracked: [u32::MAX; TRACKED],
            columns: BTreeMap::new(),
            open: None,
            open_start_ns: 0,
            open_end_ns: 0,
            pending: Vec::new(),
            last_sample_index: None,
            origin_ns: None,
            width_ns: 1_000,
            current: 0,
            peak: None,
            ooms: Vec::new(),
            last_time_ns: 0,
            pauses: PauseTracker::new(GAP_BUDGET),
            outside: None,
            outside_changed: false,
            report: None,
        }
    }

    /// Takes the timeline, once the pass is over: an error if it did not finish.
    pub fn into_report(self) -> Result<Timeline, AnalysisError> {
        self.report.ok_or(AnalysisError::NoResult("timeline"))
    }

    /// The group of a block. Inlined into `event`, which asks it for each
    /// block event: a call for a field read cost about 20 instructions.
    #[inline(always)]
    fn category(&mut self, alloc: &LiveAlloc, state: &ReplayState) -> u32 {
        match self.options.group_by {
            GroupBy::None => 0,
            GroupBy::Category => alloc.class.category as u32,
            GroupBy::Site => alloc.site.0,
            GroupBy::Phase => self.phase_category(alloc, state),
        }
    }

    /// The group of a block's phase instance (for `--by phase`), named once
    /// per instance.
    fn phase_category(&mut self, alloc: &LiveAlloc, state: &ReplayState) -> u32 {
        let index = alloc.phase.0.wrapping_add(1) as usize;
        if let Some(&c) = self.phase_category.get(index).filter(|&&c| c != u32::MAX) {
            return c;
        }
        let name = match state.phase(alloc.phase) {
            None => "(no phase)".to_string(),
            Some(p) => state.path_name(p.path),
        };
        let next = self.phase_names.len() as u32;
        let c = *self.phase_names.entry(name).or_insert(next);
        if self.phase_category.len() <= index {
            self.phase_category.resize(index + 1, u32::MAX);
        }
        self.phase_category[index] = c;
        c
    }

    fn add(&mut self, category: u32, delta: i128) {
        let i = category as usize;
        if self.bytes.len() <= i {
            self.bytes.resize(i + 1, 0);
        }
        self.bytes[i] = (self.bytes[i] as i128 + delta).max(0) as u64;
    }

    /// Moves the bytes of blocks whose category changed (by category only):
    /// in the running counts and the peak at once, and in every kept moment
    /// the block was live at, in batches (`apply_pending`). A block
    /// recategorized long after its birth once walked back over every column
    /// since, each time: 100,000 such blocks took 40 s.
    ///
    /// Inlined into `event`: most events change no category, and a timeline
    /// not grouped by category has nothing to follow; the moves themselves
    /// are out of line (`move_recategorized`).
    #[inline(always)]
    fn follow_categories(&mut self, state: &ReplayState, at: u64) {
        if self.options.group_by != GroupBy::Category {
            return;
        }
        if !state.recategorized().is_empty() {
            self.move_recategorized(state, at);
        }
        // Applied once they outnumber the samples: each sample is touched
        // once per batch, so the cost per change stays constant.
        if self.pending.len() >= 4096 + 4 * self.columns.len() {
            self.apply_pending();
        }
    }

    /// The moves of `follow_categories`, for an event that changed some
    /// blocks' categories.
    fn move_recategorized(&mut self, state: &ReplayState, at: u64) {
        for change in state.recategorized() {
            let (from, to) = (change.from.category as u32, change.to.category as u32);
            if from == to {
                continue;
            }
            self.add(from, -(change.size as i128));
            self.add(to, change.size as i128);
            if let Some((peak, _)) = &mut self.peak
                && change.born <= peak.index + 1
            {
                shift(
                    peak,
                    &[(from, -(change.size as i128)), (to, change.size as i128)],
                );
            }
            // A change moves the samples taken while its block was live
            // (`born <= index + 1`, `index < at`). Samples are taken in event
            // order, so when none was taken since the block's birth (most
            // blocks recategorized are short-lived), none ever will be
            // that it moves: it is not queued.
            if self
                .last_sample_index
                .is_some_and(|i| i >= change.born.saturating_sub(1))
            {
                self.pending.push(Pending {
                    born: change.born,
                    at,
                    from,
                    to,
                    size: change.size,
                });
            }
        }
    }

    /// Moves the pending changes' bytes in the kept samples: a change applies
    /// to a sample taken before it (`index < at`) after its block was
    /// allocated (`born <= index + 1`). One sweep over the samples in event
    /// order, adding each change as its interval opens and taking it back
    /// as it closes.
    fn apply_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        self.close_open();
        let mut pending = std::mem::take(&mut self.pending);
        pending.retain(|p| p.born.saturating_sub(1) < p.at);
        let mut opens: Vec<(u64, usize)> = (pending.iter().enumerate())
            .map(|(i, p)| (p.born.saturating_sub(1), i))
            .collect();
        let mut closes: Vec<(u64, usize)> =
            pending.iter().enumerate().map(|(i, p)| (p.at, i)).collect();
        opens.sort_unstable();
        closes.sort_unstable();
        let mut samples: Vec<&mut Sample> = (self.columns.values_mut())
            .flat_map(|c| [c.min.as_mut(), c.max.as_mut()])
            .flatten()
            .collect();
        samples.sort_unstable_by_key(|s| s.index);
        let mut delta = [0i128; CATEGORIES];
        let moved = |delta: &mut [i128; CATEGORIES], p: &Pending, sign: i128| {
            for (c, bytes) in [(p.from, -(p.size as i128)), (p.to, p.size as i128)] {
                if let Some(d) = delta.get_mut(c as usize) {
                    *d += sign * bytes;
                }
            }
        };
        let (mut o, mut c) = (0, 0);
        let mut changes: Vec<(u32, i128)> = Vec::with_capacity(CATEGORIES);
        for s in samples {
            while o < opens.len() && opens[o].0 <= s.index {
                moved(&mut delta, &pending[opens[o].1], 1);
                o += 1;
            }
            while c < closes.len() && closes[c].0 <= s.index {
                moved(&mut delta, &pending[closes[c].1], -1);
                c += 1;
            }
            changes.clear();
            changes.extend((0..CATEGORIES as u32).zip(delta).filter(|&(_, d)| d != 0));
            shift(s, &changes);
        }
    }

    /// Picks the categories with the most bytes now, for the next column
    /// (every category, by category: there are fewer than the slots).
    fn retrack(&mut self) {
        if self.options.group_by == GroupBy::Category {
            self.tracked = [u32::MAX; TRACKED];
            for (slot, c) in self.tracked.iter_mut().zip(0..CATEGORIES as u32) {
                *slot = c;
            }
            return;
        }
        let mut best: Vec<(u64, u32)> = self
            .bytes
            .iter()
            .enumerate()
            .filter(|&(_, &b)| b > 0)
            .map(|(c, &b)| (b, c as u32))
            .collect();
        let k = TRACKED.min(best.len());
        if k > 0 && best.len() > k {
            best.select_nth_unstable_by(k - 1, |a, b| b.cmp(a));
        }
        self.tracked = [u32::MAX; TRACKED];
        for (slot, &(_, c)) in self.tracked.iter_mut().zip(best.iter().take(k)) {
            *slot = c;
        }
    }

    /// Puts the open column back in the map (beside what an event that
    /// went back in time left there).
    fn close_open(&mut self) {
        if let Some((i, column)) = self.open.take() {
            let held = self.columns.entry(i).or_default();
            *held = Column::merge(*held, column);
        }
    }

    fn column_for(&mut self, time_ns: u64) -> u64 {
        let origin = *self.origin_ns.get_or_insert(time_ns);
        let capacity = 2 * self.options.columns as u64;
        let offset = time_ns.saturating_sub(origin);
        if offset / self.width_ns >= capacity {
            self.close_open();
        }
        while offset / self.width_ns >= capacity {
            // Outgrown: halve the resolution, keeping each pair's extremes.
            let columns = std::mem::take(&mut self.columns);
            for (i, column) in columns {
                let merged = self.columns.entry(i / 2).or_default();
                *merged = Column::merge(*merged, column);
            }
            self.width_ns *= 2;
            self.current /= 2;
        }
        offset / self.width_ns
    }

    /// Opens the column of `time_ns` (halving the resolution first if the
    /// trace outgrew it), and notes its span for `observe`'s quick check.
    fn enter_column(&mut self, time_ns: u64) {
        let column = self.column_for(time_ns);
        if column != self.current {
            self.current = column;
            self.retrack();
        }
        if self.open.as_ref().is_none_or(|&(i, _)| i != column) {
            self.close_open();
            let held = self.columns.remove(&column).unwrap_or_default();
            self.open = Some((column, held));
        }
        // `column_for` set the origin. The column's start cannot overflow
        // (it is at most `time_ns`); its end may, and then saturates, which
        // only sends `u64::MAX` itself the long way.
        let origin = self.origin_ns.unwrap_or(time_ns);
        self.open_start_ns = origin + column * self.width_ns;
        self.open_end_ns = self.open_start_ns.saturating_add(self.width_ns);
    }

    #[inline(always)]
    fn observe(&mut self, index: u64, time_ns: u64, state: &ReplayState) {
        // Most events fall in the open column: its span tells so without
        // `column_for`'s divisions. (Closing the column, or halving the
        // resolution, which closes it, leaves none open.)
        let entered =
            self.open.is_none() || time_ns < self.open_start_ns || time_ns >= self.open_end_ns;
        if entered {
            self.enter_column(time_ns);
        }
        let totals = state.totals();
        let allocated = totals.allocated;
        // The column by reference: a copy of it (two samples) cost about 30
        // instructions an event.
        let Some((_, col)) = self.open.as_mut() else {
            return;
        };
        let new_max = col.max.as_ref().is_none_or(|m| allocated > m.allocated);
        let new_min = col.min.as_ref().is_none_or(|m| allocated < m.allocated);
        // A new extreme is written where the column keeps it, rather than
        // built apart and copied (about 60 instructions a sample).
        if new_max {
            col.max = Some(sample(
                &self.tracked,
                &self.bytes,
                index,
                time_ns,
                allocated,
            ));
            if new_min {
                col.min = col.max;
            }
        } else if new_min {
            col.min = Some(sample(
                &self.tracked,
                &self.bytes,
                index,
                time_ns,
                allocated,
            ));
        }
        if new_max || new_min {
            self.last_sample_index = Some(index);
        }
        // The column's most memory outside the allocator changes only with
        // the column or with a device-memory sample.
        if entered || self.outside_changed {
            col.outside_max = col.outside_max.max(self.outside);
            self.outside_changed = false;
        }
        let pools = state.pools_reserved();
        if col.max.is_some() && (new_max && new_min) {
            col.reserved_min = totals.reserved;
            col.reserved_max = totals.reserved;
            col.pools_min = pools;
            col.pools_max = pools;
        } else {
            if totals.reserved < col.reserved_min {
                col.pools_min = pools;
            }
            if totals.reserved > col.reserved_max {
                col.pools_max = pools;
            }
            col.reserved_min = col.reserved_min.min(totals.reserved);
            col.reserved_max = col.reserved_max.max(totals.reserved);
        }
        if self
            .peak
            .as_ref()
            .is_none_or(|(p, _)| allocated > p.allocated)
        {
            let s = sample(&self.tracked, &self.bytes, index, time_ns, allocated);
            self.peak = Some((s, totals.reserved));
        }
        self.last_time_ns = time_ns;
    }

    fn category_name(&self, c: u32, state: &ReplayState, symbols: &SymbolTable) -> String {
        match self.options.group_by {
            GroupBy::None => "allocated".into(),
            GroupBy::Category => Category::ALL
                .get(c as usize)
                .map_or("other", |c| c.label())
                .into(),
            GroupBy::Site => state.sites().name(crate::sites::SiteId(c), symbols),
            GroupBy::Phase => self
                .phase_names
                .iter()
                .find(|&(_, &id)| id == c)
                .map(|(name, _)| name.clone())
                .unwrap_or_default(),
        }
    }

    fn build(&mut self, state: &ReplayState, symbols: &SymbolTable) -> Timeline {
        self.close_open();
        self.apply_pending();
        let samples: Vec<Sample> = self
            .columns
            .values()
            .flat_map(|c| {
                let mut pair = [c.min, c.max];
                pair.sort_by_key(|s| s.map(|s| s.time_ns));
                pair.into_iter().flatten()
            })
            .collect();
        let chosen = self.chosen_categories(&samples);
        let mut categories: Vec<String> = chosen
            .iter()
            .map(|&c| self.category_name(c, state, symbols))
            .collect();
        let other_index = categories.len();
        categories.push("other".into());
        let mut out = self.timeline_samples(&chosen, samples.len(), state.has_pools());
        if out.iter().all(|s| s.values[other_index] == 0) {
            categories.pop();
            for s in &mut out {
                s.values.pop();
            }
        }
        Timeline {
            grouped_by: self.options.group_by,
            categories,
            samples: out,
            phases: self.phase_spans(state, symbols),
            peak: self.peak_point(state, symbols),
            ooms: std::mem::take(&mut self.ooms),
            idle: self.pauses.finish(),
            capacity_bytes: None,
            capacity_label: None,
        }
    }

    /// Which categories to name: the largest seen at any kept moment (every
    /// one with bytes, in their own order, when grouped by category).
    fn chosen_categories(&self, samples: &[Sample]) -> Vec<u32> {
        let mut largest: rustc_hash::FxHashMap<u32, u64> = Default::default();
        for s in samples {
            for &(c, b) in &s.tracked {
                if c != u32::MAX {
                    let e = largest.entry(c).or_default();
                    *e = (*e).max(b);
                }
            }
        }
        let mut ranked: Vec<(u64, u32)> = largest
            .into_iter()
            .map(|(c, b)| (b, c))
            .filter(|&(b, _)| b > 0)
            .collect();
        if self.options.group_by == GroupBy::Category {
            // Every category with bytes, in their own order (parameters at
            // the bottom), so a category keeps its place in every chart;
            // `other` is the last anyway.
            ranked.sort_unstable_by_key(|&(_, c)| c);
            ranked.retain(|&(_, c)| c != Category::Other as u32);
        } else {
            ranked.sort_unstable_by(|a, b| b.cmp(a));
            ranked.truncate(self.options.top);
        }
        ranked.iter().map(|&(_, c)| c).collect()
    }

    /// The samples kept, two a column at most, each with its bytes in the
    /// `chosen` categories and then in `other` (what they leave).
    fn timeline_samples(
        &self,
        chosen: &[u32],
        count: usize,
        has_pools: bool,
    ) -> Vec<TimelineSample> {
        let other_index = chosen.len();
        // (reserved, bytes in private pools) for a sample of the column.
        let reserved_of = |column: &Column, s: &Sample| {
            if column
                .max
                .is_some_and(|m| m.time_ns == s.time_ns && m.allocated == s.allocated)
            {
                (column.reserved_max, column.pools_max)
            } else {
                (column.reserved_min, column.pools_min)
            }
        };
        let mut out = Vec::with_capacity(count);
        for column in self.columns.values() {
            let mut pair = [column.min, column.max];
            pair.sort_by_key(|s| s.map(|s| s.time_ns));
            let mut seen = None;
            for s in pair.into_iter().flatten() {
                if seen == Some(s.time_ns) {
                    continue;
                }
                seen = Some(s.time_ns);
                let mut values = vec![0u64; chosen.len() + 1];
                let mut named = 0u64;
                for &(c, b) in &s.tracked {
                    if let Some(i) = chosen.iter().position(|&x| x == c) {
                        values[i] = values[i].saturating_add(b);
                        named = named.saturating_add(b);
                    }
                }
                values[other_index] = s.allocated.saturating_sub(named);
                let (reserved, pools) = reserved_of(column, &s);
                out.push(TimelineSample {
                    time_ns: s.time_ns,
                    index: s.index,
                    allocated: s.allocated,
                    reserved,
                    values,
                    outside: column.outside_max,
                    pools: has_pools.then_some(pools),
                });
            }
        }
        out
    }

    /// The phases inside the window, cut to it: a window's chart spans the
    /// window, not the phases that began before it.
    fn phase_spans(&self, state: &ReplayState, symbols: &SymbolTable) -> Vec<PhaseSpan> {
        let end = self.last_time_ns;
        let start = self.origin_ns.unwrap_or(end);
        state
            .phases()
            .iter()
            .filter(|p| p.end_ns.is_none_or(|e| e >= start) && p.begin_ns <= end)
            .map(|p| PhaseSpan {
                name: symbols.string_or_unknown(p.name).to_string(),
                start_ns: p.begin_ns.max(start),
                end_ns: p.end_ns.unwrap_or(end).min(end),
                depth: p.depth as usize,
            })
            .collect()
    }

    /// The allocated peak, with the category that held the most then.
    fn peak_point(&self, state: &ReplayState, symbols: &SymbolTable) -> Option<TimelinePoint> {
        self.peak.as_ref().map(|(s, _)| {
            let (category, category_bytes) = s
                .tracked
                .iter()
                .filter(|&&(c, _)| c != u32::MAX)
                .max_by_key(|&&(_, b)| b)
                .map(|&(c, b)| (self.category_name(c, state, symbols), b))
                .unwrap_or_default();
            TimelinePoint {
                time_ns: s.time_ns,
                bytes: s.allocated,
                category,
                category_bytes,
            }
        })
    }
}

impl Analysis for TimelineAnalysis {
    fn begin(&mut self, state: &ReplayState, _symbols: &SymbolTable) {
        // Blocks live when the window opens count from its first moment.
        let live: Vec<LiveAlloc> = state.live().copied().collect();
        for alloc in &live {
            let c = self.category(alloc, state);
            self.add(c, alloc.size as i128);
        }
        self.retrack();
    }

    // Always inlined into the pass's loop, as `Summary::event` is: called,
    // its prologue, epilogue and returned `Result` cost about 20
    // instructions an event, and `report` runs two timelines.
    #[inline(always)]
    fn event(&mut self, step: &Step<'_>, state: &ReplayState) -> Result<Flow, AnalysisError> {
        self.follow_categories(state, step.index);
        // By reference: the block is not copied out of the step.
        match step.applied {
            Applied::Alloc(alloc) => {
                // A block allocated over a live one (an inconsistent trace)
                // replaced it: its bytes no longer count.
                if let Some(old) = state.replaced_by(step.index).copied()
                    && !old.free_requested
                {
                    let c = self.category(&old, state);
                    self.add(c, -(old.size as i128));
                }
                let c = self.category(alloc, state);
                self.add(c, alloc.size as i128);
            }
            Applied::FreeRequested(_) | Applied::FreeCompleted(_) => {
                if let Some(alloc) = step.applied.released() {
                    let c = self.category(&alloc, state);
                    self.add(c, -(alloc.size as i128));
                }
            }
            Applied::Oom(site) => {
                let requested = match step.event.data {
                    EventData::Oom(o) => o.requested,
                    _ => 0,
                };
                self.ooms.push(TimelinePoint {
                    time_ns: step.event.time_ns,
                    bytes: requested,
                    category: state.sites().name(*site, step.symbols),
                    category_bytes: 0,
                });
            }
            _ => {}
        }
        if let EventData::DeviceMemory(m) = &step.event.data
            && m.free_bytes <= m.total_bytes
        {
            self.outside = Some(super::limits::outside_bytes(m, state.totals().reserved));
            self.outside_changed = true;
        }
        self.pauses.event(step.index, step.event.time_ns);
        self.observe(step.index, step.event.time_ns, state);
        Ok(Flow::Continue)
    }

    fn finish(&mut self, state: &ReplayState, symbols: &SymbolTable) -> Result<(), AnalysisError> {
        self.follow_categories(state, u64::MAX);
        self.report = Some(self.build(state, symbols));
        Ok(())
    }
}

#[cfg(test)]
mod tests;
