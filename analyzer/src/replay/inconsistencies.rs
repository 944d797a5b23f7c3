//! What a replay cannot trust: events that contradict the state, counted
//! by kind and kept up to a bound, and the gaps the recorder marked, which
//! explain some of them.

use super::{Applied, LiveAlloc, ReplayState};
use crate::sites::SiteId;
use serde::Serialize;
use vramtrace_format::DroppedEvents;

/// What kind of contradiction an [`Inconsistency`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InconsistencyKind {
    /// A free of an address that holds no live block.
    UnknownFree,
    /// A second free request for the same block.
    DoubleFree,
    /// An allocation at the address of a block still live.
    AllocOverLive,
    /// A free whose size differs from the block's.
    SizeMismatch,
    /// An allocation outside every reserved segment.
    AllocOutsideSegment,
    /// A segment freed or unmapped that was never reserved.
    UnknownSegment,
    /// A segment reserved over one already reserved.
    OverlappingSegment,
    /// A segment freed or unmapped while blocks in it are live.
    SegmentFreedWithLiveBlocks,
    /// A phase end that does not match the innermost open phase.
    UnmatchedPhaseEnd,
    /// A block or segment so large that the totals would pass 2^64 bytes.
    ImplausibleSize,
    /// A tag of an address that holds no block the caller holds.
    TagWithoutBlock,
    /// A tag with a category this reader does not know (read as `other`).
    UnknownCategory,
    /// A CUDA graph capture (or a `use_mem_pool` block) still under way
    /// when the trace ends.
    CaptureNeverEnded,
    /// A segment reserved for a pool after its last user let it go.
    PoolUsedAfterRelease,
    /// A pool ended or let go that nothing began, held or reserved.
    UnknownPool,
}

impl InconsistencyKind {
    /// Every kind, in report order.
    pub const ALL: [InconsistencyKind; 15] = [
        InconsistencyKind::UnknownFree,
        InconsistencyKind::DoubleFree,
        InconsistencyKind::AllocOverLive,
        InconsistencyKind::SizeMismatch,
        InconsistencyKind::AllocOutsideSegment,
        InconsistencyKind::UnknownSegment,
        InconsistencyKind::OverlappingSegment,
        InconsistencyKind::SegmentFreedWithLiveBlocks,
        InconsistencyKind::UnmatchedPhaseEnd,
        InconsistencyKind::ImplausibleSize,
        InconsistencyKind::TagWithoutBlock,
        InconsistencyKind::UnknownCategory,
        InconsistencyKind::CaptureNeverEnded,
        InconsistencyKind::PoolUsedAfterRelease,
        InconsistencyKind::UnknownPool,
    ];

    /// Whether events missing from the trace (dropped by the recorder) can
    /// cause this contradiction: all but sizes past 64 bits and unknown
    /// categories, which no gap explains.
    pub fn may_follow_a_gap(self) -> bool {
        !matches!(
            self,
            InconsistencyKind::ImplausibleSize | InconsistencyKind::UnknownCategory
        )
    }

    /// A short description for reports.
    pub fn describe(self) -> &'static str {
        match self {
            InconsistencyKind::UnknownFree => "free of an address with no live block",
            InconsistencyKind::DoubleFree => "block freed twice",
            InconsistencyKind::AllocOverLive => "allocation over a live block",
            InconsistencyKind::SizeMismatch => "free with a size other than the block's",
            InconsistencyKind::AllocOutsideSegment => "allocation outside every segment",
            InconsistencyKind::UnknownSegment => "free or unmap of an unknown segment",
            InconsistencyKind::OverlappingSegment => "segment overlapping another",
            InconsistencyKind::SegmentFreedWithLiveBlocks => "segment freed with live blocks",
            InconsistencyKind::UnmatchedPhaseEnd => "phase end without a matching begin",
            InconsistencyKind::ImplausibleSize => "size past what 64 bits of totals hold",
            InconsistencyKind::TagWithoutBlock => "tag of an address with no live block",
            InconsistencyKind::UnknownCategory => {
                "tag with a category this version does not know (read as other)"
            }
            InconsistencyKind::CaptureNeverEnded => "CUDA graph capture that never ended",
            InconsistencyKind::PoolUsedAfterRelease => {
                "segment reserved for a pool after its last user let it go"
            }
            InconsistencyKind::UnknownPool => "pool ended or released that was never begun",
        }
    }
}

/// An event that contradicts the replayed state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Inconsistency {
    /// Index of the event in the trace (0 is the first event).
    pub index: u64,
    /// Time of the event.
    pub time_ns: u64,
    /// What is wrong.
    pub kind: InconsistencyKind,
    /// The address concerned (0 for phases).
    pub addr: u64,
}

/// How many inconsistencies of each kind are kept with their details; the
/// rest are only counted, so a badly broken trace cannot exhaust memory.
pub const KEPT_PER_KIND: usize = 20;

/// A span of events the recorder dropped (its output could not keep up):
/// an `events_dropped` marker (format 1.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct DroppedSpan {
    /// How many events were dropped.
    pub events: u64,
    /// The time of the first of them.
    pub from_ns: u64,
    /// The time of the last.
    pub to_ns: u64,
}

/// How many dropped spans are kept with their times; the rest are counted.
pub const KEPT_DROPPED_SPANS: usize = 64;

/// The events the recorder dropped, as the trace's markers say, and what the
/// replay made of the gaps.
///
/// A dropped event leaves the state unknown from then on: a dropped free
/// leaves its block live, a dropped allocation makes its free look
/// unknown. So after a drop, the contradictions a gap explains (a free of
/// an unknown block, an allocation over a live one born before the gap, a
/// segment freed with blocks in it, ...) are counted here and not as
/// inconsistencies, and the blocks live at a gap are *in doubt*: their free
/// may have been dropped, so leak analyses leave them out (a lower bound).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DroppedReport {
    /// Events dropped, all spans.
    pub events: u64,
    /// Spans of dropped events (markers).
    pub spans: u64,
    /// The first dropped event's time.
    pub from_ns: u64,
    /// The last dropped event's time.
    pub to_ns: u64,
    /// The first [`KEPT_DROPPED_SPANS`] spans.
    pub kept_spans: Vec<DroppedSpan>,
    /// Contradictions of the state after a gap, which the gap explains:
    /// not counted as inconsistencies.
    pub explained_inconsistencies: u64,
}

impl DroppedReport {
    /// Whether the trace marks any drop.
    pub fn any(&self) -> bool {
        self.spans > 0
    }
}

impl std::fmt::Display for DroppedReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} dropped by the recorder between {} and {} ({}; the disk could not keep up): figures over that span are a lower bound, and blocks live then are left out of leaks",
            crate::units::counted(self.events, "event", "events"),
            crate::units::duration_ns(self.from_ns),
            crate::units::duration_ns(self.to_ns),
            crate::units::counted(self.spans, "gap", "gaps"),
        )
    }
}

impl ReplayState {
    /// A gap in the trace: every block live now is in doubt (its free may
    /// be among the dropped events).
    #[cold]
    pub(super) fn events_dropped(
        &mut self,
        index: u64,
        time_ns: u64,
        d: &DroppedEvents,
    ) -> Applied {
        let r = &mut self.dropped;
        if r.spans == 0 {
            r.from_ns = d.from_ns;
        }
        r.events = r.events.saturating_add(d.count);
        r.spans += 1;
        r.to_ns = time_ns;
        if r.kept_spans.len() < KEPT_DROPPED_SPANS {
            r.kept_spans.push(DroppedSpan {
                events: d.count,
                from_ns: d.from_ns,
                to_ns: time_ns,
            });
        }
        self.last_drop = Some(index + 1);
        self.site_doubt.clear();
        self.site_doubt
            .extend(self.site_live.iter().map(|s| s.bytes));
        Applied::Other
    }

    /// Whether the block's free may have been dropped: it was live at a gap.
    #[inline]
    pub fn in_doubt(&self, a: &LiveAlloc) -> bool {
        self.last_drop.is_some_and(|gap| a.born <= gap)
    }

    /// The bytes the caller holds at `site` in blocks in doubt.
    pub fn site_doubt(&self, site: SiteId) -> u64 {
        self.site_doubt.get(site.0 as usize).copied().unwrap_or(0)
    }

    /// The recorder's dropped events, as marked in the trace so far.
    pub fn dropped(&self) -> &DroppedReport {
        &self.dropped
    }

    /// Records a contradiction, unless a gap before it explains it: after
    /// a drop, the state is not known well enough to tell (see
    /// [`DroppedReport`]).
    pub(super) fn record(&mut self, kind: InconsistencyKind, index: u64, time_ns: u64, addr: u64) {
        if self.last_drop.is_some() && kind.may_follow_a_gap() {
            self.dropped.explained_inconsistencies += 1;
        } else {
            self.count_inconsistency(kind, index, time_ns, addr);
        }
    }

    pub(super) fn count_inconsistency(
        &mut self,
        kind: InconsistencyKind,
        index: u64,
        time_ns: u64,
        addr: u64,
    ) {
        let n = &mut self.inconsistency_counts[kind as usize];
        *n += 1;
        if *n as usize <= KEPT_PER_KIND {
            self.inconsistencies.push(Inconsistency {
                index,
                time_ns,
                kind,
                addr,
            });
        }
    }

    pub(super) fn inconsistent(&mut self, kind: InconsistencyKind, addr: u64) {
        // Before the first event (the initial state) the index is that of the
        // event about to come.
        self.record(kind, self.events, self.time_ns, addr);
    }

    /// The inconsistencies found so far (at most [`KEPT_PER_KIND`] of each kind).
    pub fn inconsistencies(&self) -> &[Inconsistency] {
        &self.inconsistencies
    }

    /// How many inconsistencies of a kind were found, including those not kept.
    pub fn inconsistency_count(&self, kind: InconsistencyKind) -> u64 {
        self.inconsistency_counts[kind as usize]
    }

    /// The total number of inconsistencies found.
    pub fn inconsistency_total(&self) -> u64 {
        self.inconsistency_counts.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::replay;
    use super::*;
    use crate::testing::TraceBuilder;

    #[test]
    fn inconsistencies_are_reported_not_fatal() {
        let mut b = TraceBuilder::new();
        let s = b.site("f", "a.py", 1);
        b.segment(0, 4096);
        b.free(777, 10); // unknown: two events
        b.alloc(0, 100, 100, s)
            .free_requested(0, 100)
            .free_requested(0, 100); // double free
        b.free_completed(0, 100).free_completed(0, 100); // the second is unknown
        b.alloc(0, 100, 100, s).alloc(0, 200, 200, s); // over a live block
        b.segment(2048, 4096); // overlaps
        b.segment_free(0, 4096); // with a live block
        b.segment_free(1 << 40, 10); // unknown segment
        b.end("nothing"); // unmatched phase end
        let (state, applied) = replay(&b.finish());
        use InconsistencyKind::*;
        assert_eq!(state.inconsistency_count(UnknownFree), 3);
        assert_eq!(state.inconsistency_count(DoubleFree), 1);
        assert_eq!(state.inconsistency_count(AllocOverLive), 1);
        assert_eq!(state.inconsistency_count(OverlappingSegment), 1);
        assert_eq!(state.inconsistency_count(SegmentFreedWithLiveBlocks), 1);
        assert_eq!(state.inconsistency_count(UnknownSegment), 1);
        assert_eq!(state.inconsistency_count(UnmatchedPhaseEnd), 1);
        let first = &state.inconsistencies()[0];
        assert_eq!((first.index, first.kind, first.addr), (1, UnknownFree, 777));
        assert_eq!(applied[1], Applied::Inconsistent);
        // The replacing block is the one live; the reservation is gone.
        assert_eq!(state.totals().allocated, 200);
        assert_eq!(state.totals().reserved, 0);
    }

    /// Sizes no allocator hands out (found by fuzzing): a block or segment that
    /// would take a total past 2^64 bytes is an inconsistency, skipped, and the
    /// totals stay exact.
    #[test]
    fn sizes_past_64_bits_of_totals_are_skipped() {
        let mut b = TraceBuilder::new();
        let s = b.site("f", "a.py", 1);
        b.segment(0, u64::MAX).segment(1 << 62, u64::MAX);
        b.alloc(0, u64::MAX - 10, 5, s)
            .alloc(512, 512, 512, s)
            .alloc(1024, 512, 512, s);
        let (state, applied) = replay(&b.finish());
        assert_eq!(
            state.inconsistency_count(InconsistencyKind::ImplausibleSize),
            3
        );
        assert!(matches!(applied[1], Applied::Inconsistent));
        assert!(matches!(applied[2], Applied::Alloc(_)));
        assert!(matches!(applied[3], Applied::Inconsistent));
        assert!(matches!(applied[4], Applied::Inconsistent));
        assert_eq!(state.totals().allocated, u64::MAX - 10);
        assert_eq!(state.totals().requested, 5);
        assert_eq!(state.totals().reserved, u64::MAX);
    }
}
