//! Fragmentation over time, as a series of time buckets.
//!
//! When the span is known in advance ([`Fragmentation::with_span`]), there
//! are exactly `N` buckets. Otherwise buckets start narrow (1 µs) and double
//! in width, merging pairs, whenever there are `2 × N` of them: the series
//! ends with between `N` and `2N - 1` buckets of equal width. Each bucket holds the state at its end (its last event) and the
//! maxima inside it. The free-space sweep runs once per closed bucket, so
//! its cost is bounded by the number of buckets ever closed, not by the
//! number of events.

use super::pauses::{BusyClock, GAP_BUDGET, IdleGaps, PauseTracker, XAxis};
use super::{Analysis, AnalysisError, Flow, Step};
use crate::replay::{FreeSpace, ReplayState};
use serde::Serialize;
use vramtrace_format::{Event, SymbolTable};

/// The narrowest bucket.
pub const INITIAL_BUCKET_NS: u64 = 1_000;

/// One time bucket of the series.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FragmentationBucket {
    /// Start of the bucket.
    pub start_ns: u64,
    /// End of the bucket (exclusive).
    pub end_ns: u64,
    /// Events inside.
    pub events: u64,
    /// Reserved bytes at the bucket's end.
    pub reserved_bytes: u64,
    /// Allocated bytes at the bucket's end.
    pub allocated_bytes: u64,
    /// Requested bytes at the bucket's end.
    pub requested_bytes: u64,
    /// Reserved bytes not in live blocks (cached by the allocator) at the end.
    pub cached_free_bytes: u64,
    /// The largest contiguous free range at the end.
    pub largest_free_block: u64,
    /// `1 - largest free block / cached free bytes` at the end.
    pub external_fragmentation: f64,
    /// Block sizes minus requested sizes of live blocks, at the end.
    pub internal_fragmentation_bytes: u64,
    /// Reserved segments at the end.
    pub segments: u64,
    /// The most reserved bytes inside the bucket.
    pub max_reserved_bytes: u64,
    /// The most allocated bytes inside the bucket.
    pub max_allocated_bytes: u64,
}

/// The fragmentation series of a trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FragmentationReport {
    /// What the buckets divide evenly: time, or (once
    /// [`regrouped`](Self::regrouped)) busy time or events.
    pub axis: XAxis,
    /// The width of every bucket in time (0 on another axis: there the
    /// buckets' times differ).
    pub bucket_ns: u64,
    /// The width of a bucket on its axis, about: nanoseconds of time or of
    /// busy time, or events.
    pub axis_width: u64,
    /// The buckets, in time order, from the window's first event.
    pub buckets: Vec<FragmentationBucket>,
    /// The bucket with the most cached free bytes at its end.
    pub worst_cached_free: Option<usize>,
    /// The bucket with the highest external fragmentation at its end.
    pub worst_external: Option<usize>,
    /// The index of the window's first event (the buckets' event counts
    /// follow from it).
    pub first_index: u64,
    /// The pauses, for an axis of busy time.
    pub idle: IdleGaps,
}

/// The time bucket being filled: its events and highest totals so far.
#[derive(Clone, Copy, Debug, Default)]
struct OpenBucket {
    events: u64,
    max_reserved: u64,
    max_allocated: u64,
}

/// Computes a [`FragmentationReport`].
#[derive(Clone, Debug)]
pub struct Fragmentation {
    target: usize,
    origin: Option<u64>,
    width: u64,
    closed: Vec<FragmentationBucket>,
    open_index: u64,
    open: OpenBucket,
    first_index: Option<u64>,
    pauses: PauseTracker,
    report: Option<FragmentationReport>,
}

impl Fragmentation {
    /// A series of about `buckets` buckets (between that and twice it).
    pub fn new(buckets: usize) -> Self {
        Fragmentation {
            target: buckets.max(1),
            origin: None,
            width: INITIAL_BUCKET_NS,
            closed: Vec::new(),
            open_index: 0,
            open: OpenBucket::default(),
            first_index: None,
            pauses: PauseTracker::new(GAP_BUDGET),
            report: None,
        }
    }

    /// Exactly `buckets` buckets over a span known in advance (from the
    /// chunks' times, read without decoding): one free-space sweep per
    /// bucket instead of one per bucket of every width the adaptive series
    /// passes through.
    pub fn with_span(buckets: usize, start_ns: u64, end_ns: u64) -> Self {
        let n = buckets.max(1) as u64;
        Fragmentation {
            origin: Some(start_ns),
            width: end_ns.saturating_sub(start_ns) / n + 1,
            ..Self::new(buckets)
        }
    }

    /// Takes the report, once the pass is over: an error if it did not finish.
    pub fn into_report(self) -> Result<FragmentationReport, AnalysisError> {
        self.report.ok_or(AnalysisError::NoResult("fragmentation"))
    }

    fn close(&mut self, state: &ReplayState) {
        let t = state.totals();
        let space: FreeSpace = state.free_space();
        self.closed.push(FragmentationBucket {
            events: self.open.events,
            reserved_bytes: t.reserved,
            allocated_bytes: t.allocated,
            requested_bytes: t.requested,
            cached_free_bytes: space.free_bytes,
            largest_free_block: space.largest_free_block,
            external_fragmentation: space.external_fragmentation(),
            internal_fragmentation_bytes: t.allocated.saturating_sub(t.requested),
            segments: t.segments,
            max_reserved_bytes: self.open.max_reserved.max(t.reserved),
            max_allocated_bytes: self.open.max_allocated.max(t.allocated),
            ..Default::default()
        });
        self.open = OpenBucket::default();
    }

    fn halve(&mut self) {
        let carry = if self.closed.len() % 2 == 1 {
            self.closed.pop()
        } else {
            None
        };
        let merged = merge_pairs(&self.closed);
        self.closed = merged;
        if let Some(c) = carry {
            // The last closed bucket and the open one become one open bucket.
            self.open.events += c.events;
            self.open.max_reserved = self.open.max_reserved.max(c.max_reserved_bytes);
            self.open.max_allocated = self.open.max_allocated.max(c.max_allocated_bytes);
        }
        self.open_index /= 2;
        self.width = self.width.saturating_mul(2);
    }
}

/// Pairs of adjacent buckets as one bucket each (see [`merged`]).
fn merge_pairs(buckets: &[FragmentationBucket]) -> Vec<FragmentationBucket> {
    buckets.chunks(2).map(merged).collect()
}

/// Adjacent buckets as one: from the first's start to the last's end, with
/// the last one's end state, the maxima of all and their events.
fn merged(group: &[FragmentationBucket]) -> FragmentationBucket {
    let (first, last) = (&group[0], &group[group.len() - 1]);
    FragmentationBucket {
        start_ns: first.start_ns,
        events: group.iter().map(|b| b.events).sum(),
        max_reserved_bytes: group
            .iter()
            .map(|b| b.max_reserved_bytes)
            .max()
            .unwrap_or(0),
        max_allocated_bytes: group
            .iter()
            .map(|b| b.max_allocated_bytes)
            .max()
            .unwrap_or(0),
        ..last.clone()
    }
}

/// The bucket with the highest `key` above zero at its end.
fn worst(
    buckets: &[FragmentationBucket],
    key: impl Fn(&FragmentationBucket) -> f64,
) -> Option<usize> {
    buckets
        .iter()
        .enumerate()
        .filter(|(_, b)| key(b) > 0.0)
        .max_by(|a, b| key(a.1).total_cmp(&key(b.1)))
        .map(|(i, _)| i)
}

impl FragmentationReport {
    /// The series in about `rows` buckets of equal width on `axis` (busy
    /// time or events): its buckets, finer, merged in order, a row closing
    /// at the first edge past its share of the axis. So no row is empty on
    /// either axis, where a bucket of time may be (a pause), and rows are
    /// fewer when one fine bucket spans several shares.
    pub fn regrouped(&self, rows: usize, axis: XAxis) -> FragmentationReport {
        let buckets = &self.buckets;
        // The place of each bucket's start on the axis, and of the end.
        let mut edges = Vec::with_capacity(buckets.len() + 1);
        match axis {
            XAxis::Time => return self.clone(),
            XAxis::Events => {
                let mut index = self.first_index;
                edges.push(index as f64);
                for b in buckets {
                    index += b.events;
                    edges.push(index as f64);
                }
            }
            XAxis::Busy => {
                let clock = BusyClock::new(&self.idle);
                edges.extend(buckets.iter().map(|b| clock.busy_ns(b.start_ns)));
                edges.extend(buckets.last().map(|b| clock.busy_ns(b.end_ns)));
            }
        }
        let (Some(&x0), Some(&x1)) = (edges.first(), edges.last()) else {
            return self.clone();
        };
        let width = (x1 - x0) / rows.max(1) as f64;
        let mut out: Vec<FragmentationBucket> = Vec::with_capacity(rows);
        let mut start = 0;
        for i in 0..buckets.len() {
            let share_end = x0 + width * (out.len() + 1) as f64;
            if edges[i + 1] >= share_end || i + 1 == buckets.len() {
                out.push(merged(&buckets[start..=i]));
                start = i + 1;
            }
        }
        FragmentationReport {
            axis,
            bucket_ns: 0,
            axis_width: width.round() as u64,
            worst_cached_free: worst(&out, |b| b.cached_free_bytes as f64),
            worst_external: worst(&out, |b| b.external_fragmentation),
            buckets: out,
            first_index: self.first_index,
            idle: self.idle.clone(),
        }
    }
}

impl Analysis for Fragmentation {
    fn wants_before(&self) -> bool {
        true
    }

    #[inline]
    fn before(&mut self, _index: u64, event: &Event, state: &ReplayState) {
        let origin = *self.origin.get_or_insert(event.time_ns);
        let offset = event.time_ns.saturating_sub(origin);
        let mut k = offset / self.width;
        if k <= self.open_index {
            return;
        }
        // The state now is the state at the end of the open bucket, and of
        // every empty bucket between it and this event's.
        self.close(state);
        let end = self.closed.last().cloned().unwrap_or_default();
        self.open_index += 1;
        // Widen first, so a long idle gap does not create a bucket per µs.
        while k >= 2 * self.target as u64 {
            self.halve();
            k = offset / self.width;
        }
        while self.open_index < k {
            self.closed.push(FragmentationBucket {
                events: self.open.events,
                max_reserved_bytes: self.open.max_reserved.max(end.reserved_bytes),
                max_allocated_bytes: self.open.max_allocated.max(end.allocated_bytes),
                ..end.clone()
            });
            self.open = OpenBucket::default();
            self.open_index += 1;
        }
    }

    #[inline]
    fn event(&mut self, step: &Step<'_>, state: &ReplayState) -> Result<Flow, AnalysisError> {
        self.first_index.get_or_insert(step.index);
        self.pauses.event(step.index, step.event.time_ns);
        let t = state.totals();
        self.open.events += 1;
        self.open.max_reserved = self.open.max_reserved.max(t.reserved);
        self.open.max_allocated = self.open.max_allocated.max(t.allocated);
        Ok(Flow::Continue)
    }

    fn finish(&mut self, state: &ReplayState, _symbols: &SymbolTable) -> Result<(), AnalysisError> {
        let origin = self.origin.unwrap_or(state.time_ns());
        self.close(state);
        if self.closed.len() >= 2 * self.target {
            // The last bucket made 2N: one more doubling, with no open
            // bucket to carry into.
            self.closed = merge_pairs(&self.closed);
            self.width = self.width.saturating_mul(2);
        }
        let width = self.width;
        for (i, b) in self.closed.iter_mut().enumerate() {
            // Saturating: a damaged trace may carry times near 2^64.
            b.start_ns = origin.saturating_add((i as u64).saturating_mul(width));
            b.end_ns = b.start_ns.saturating_add(width);
        }
        self.report = Some(FragmentationReport {
            axis: XAxis::Time,
            bucket_ns: width,
            axis_width: width,
            worst_cached_free: worst(&self.closed, |b| b.cached_free_bytes as f64),
            worst_external: worst(&self.closed, |b| b.external_fragmentation),
            buckets: std::mem::take(&mut self.closed),
            first_index: self.first_index.unwrap_or(state.events_applied()),
            idle: self.pauses.finish(),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::analysis::window::Window;
    use crate::testing::{TraceBuilder, replay_trace};

    fn series(bytes: &[u8], n: usize) -> FragmentationReport {
        let mut f = Fragmentation::new(n);
        replay_trace(bytes, &mut [&mut f], &Window::ALL);
        f.into_report().unwrap()
    }

    #[test]
    fn a_series_regrouped_by_events_or_busy_time_has_no_empty_bucket() {
        let bucket = |start_ns: u64, events: u64, reserved_bytes: u64| FragmentationBucket {
            start_ns,
            end_ns: start_ns + 10,
            events,
            reserved_bytes,
            max_reserved_bytes: reserved_bytes,
            ..Default::default()
        };
        let report = FragmentationReport {
            buckets: vec![
                bucket(0, 10, 1),
                bucket(10, 0, 1),
                bucket(20, 0, 1),
                bucket(30, 10, 5),
                bucket(40, 5, 2),
                bucket(50, 5, 3),
            ],
            first_index: 100,
            ..Default::default()
        };
        let rows = report.regrouped(3, XAxis::Events);
        assert_eq!(rows.axis, XAxis::Events);
        assert_eq!(rows.axis_width, 10);
        let events: Vec<u64> = rows.buckets.iter().map(|b| b.events).collect();
        assert_eq!(events, [10, 10, 10]);
        // Each row holds its last bucket's end state and the maxima of all.
        assert_eq!(rows.buckets[2].reserved_bytes, 3);
        assert_eq!(rows.buckets[2].max_reserved_bytes, 3);
        assert_eq!(rows.buckets[1].start_ns, 10);
        // Busy time with the pause from 10 to 30 ns cut to 1 ns.
        let mut paused = report.clone();
        paused.idle = IdleGaps {
            threshold_ns: 1,
            gaps: vec![super::super::pauses::IdleGap {
                gap_ns: 20,
                index: 110,
                time_ns: 30,
            }],
            ..Default::default()
        };
        let rows = paused.regrouped(2, XAxis::Busy);
        assert_eq!(rows.axis_width, 21);
        assert!(rows.buckets.iter().all(|b| b.events > 0), "{rows:?}");
    }

    #[test]
    fn a_known_span_gives_exactly_n_buckets() {
        let mut b = TraceBuilder::new();
        let s = b.site("f", "a.py", 1);
        b.at(0).segment(0, 1 << 30);
        for i in 0..100u64 {
            b.at(i * 1_000_000).alloc(i * 4096, 4096, 4096, s);
        }
        let bytes = b.finish();
        let mut f = Fragmentation::with_span(7, 0, 99_000_000);
        replay_trace(&bytes, &mut [&mut f], &Window::ALL);
        let r = f.into_report().unwrap();
        assert_eq!(r.buckets.len(), 7);
        assert_eq!(r.buckets.iter().map(|b| b.events).sum::<u64>(), 101);
        assert_eq!(r.buckets[6].allocated_bytes, 100 * 4096);
    }

    #[test]
    fn fragmentation_math() {
        let mut b = TraceBuilder::new();
        let s = b.site("f", "a.py", 1);
        // One 1000-byte segment holding blocks at [0,100), [300,400) and
        // [700,800): free ranges 200, 300 and 200.
        b.at(0).segment(0, 1000);
        b.alloc(0, 100, 60, s)
            .alloc(300, 100, 100, s)
            .alloc(700, 100, 90, s);
        b.at(5_000).alloc(900, 50, 50, s);
        let r = series(&b.finish(), 4);
        let first = &r.buckets[0];
        assert_eq!(first.reserved_bytes, 1000);
        assert_eq!(first.allocated_bytes, 300);
        assert_eq!(first.cached_free_bytes, 700);
        assert_eq!(first.largest_free_block, 300);
        assert!((first.external_fragmentation - (1.0 - 300.0 / 700.0)).abs() < 1e-12);
        assert_eq!(first.internal_fragmentation_bytes, 50);
        assert_eq!(first.segments, 1);
        assert_eq!(first.events, 4);
        let last = r.buckets.last().unwrap();
        assert_eq!(last.allocated_bytes, 350);
        assert_eq!(last.cached_free_bytes, 650);
        assert_eq!(last.largest_free_block, 300);
        assert_eq!(last.events, 1);
        assert_eq!(r.buckets.iter().map(|b| b.events).sum::<u64>(), 5);
        assert!(r.buckets.len() >= 4 && r.buckets.len() < 8);
        assert!(r.buckets.windows(2).all(|w| w[0].end_ns == w[1].start_ns));
    }

    #[test]
    fn buckets_merge_as_time_goes_on() {
        let mut b = TraceBuilder::new();
        let s = b.site("f", "a.py", 1);
        b.at(0).segment(0, 1 << 30);
        for i in 0..1000u64 {
            b.at(i * 1_000_000).alloc(i * 4096, 4096, 4096, s);
        }
        let r = series(&b.finish(), 10);
        assert!(
            r.buckets.len() >= 10 && r.buckets.len() < 20,
            "{}",
            r.buckets.len()
        );
        assert_eq!(r.buckets.iter().map(|b| b.events).sum::<u64>(), 1001);
        let last = r.buckets.last().unwrap();
        assert_eq!(last.allocated_bytes, 1000 * 4096);
        assert_eq!(last.max_allocated_bytes, 1000 * 4096);
        assert_eq!(last.largest_free_block, (1 << 30) - 1000 * 4096);
    }
}

#[cfg(test)]
mod random {
    use super::*;

    use crate::analysis::window::Window;
    use crate::testing::{TraceBuilder, replay_trace};
    use proptest::prelude::*;
    use vramtrace_format::{Event, TraceReader};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// However the buckets merge, each holds the state after the last
        /// event before its end, and every event is counted once.
        #[test]
        fn buckets_hold_the_state_at_their_end(
            gaps in proptest::collection::vec(0u64..50_000, 1..120),
            n in 1usize..6,
        ) {
            let mut b = TraceBuilder::new();
            let s = b.site("f", "a.py", 1);
            b.at(0).segment(0, 1 << 30);
            let mut t = 0;
            for (i, gap) in gaps.iter().enumerate() {
                t += gap;
                b.at(t + 1);
                if i % 3 == 2 {
                    b.free_completed((i as u64 - 1) * 4096, 0);
                } else {
                    b.alloc(i as u64 * 4096, 100 + i as u64, 100, s);
                }
            }
            let bytes = b.finish();
            let mut f = Fragmentation::new(n);
            replay_trace(&bytes, &mut [&mut f], &Window::ALL);
            let r = f.into_report().unwrap();
            prop_assert!(r.buckets.len() < 2 * n);
            prop_assert_eq!(r.buckets.iter().map(|b| b.events).sum::<u64>(), gaps.len() as u64 + 1);

            // Brute force: the allocated bytes after the last event before each end.
            let mut reader = TraceReader::new(&bytes[..]).unwrap();
            let events: Vec<Event> = reader.events().collect::<Result<_, _>>().unwrap();
            let mut state = ReplayState::default();
            let mut after: Vec<(u64, u64)> = Vec::new();
            for (i, e) in events.iter().enumerate() {
                state.apply(i as u64, e, reader.symbols());
                after.push((e.time_ns, state.totals().allocated));
            }
            for bucket in &r.buckets {
                let expected = after
                    .iter()
                    .rfind(|(t, _)| *t < bucket.end_ns)
                    .map(|(_, a)| *a);
                prop_assert_eq!(Some(bucket.allocated_bytes), expected);
                let inside = after
                    .iter()
                    .filter(|(t, _)| *t >= bucket.start_ns && *t < bucket.end_ns)
                    .count() as u64;
                prop_assert_eq!(bucket.events, inside);
            }
        }
    }
}
