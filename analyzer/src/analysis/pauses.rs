//! Pauses between events, for an x axis of busy time: time with each idle
//! gap shrunk to a short, fixed length, so a run whose history starts with
//! minutes of loading (or a snapshot taken across a pause) spreads its work
//! over the whole axis.
//!
//! A gap is idle when it is longer than [`MIN_IDLE_NS`] and
//! [`IDLE_FACTOR`] times the median gap. The longest gaps are kept (at most
//! a budget), with a histogram of all of them for the median: memory is
//! independent of the trace's length.

use super::{Analysis, AnalysisError, Flow, Step};
use crate::replay::ReplayState;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// What a chart's x axis measures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum XAxis {
    /// Time since the first event.
    #[default]
    Time,
    /// The event index, as PyTorch's viewer counts.
    Events,
    /// Time with idle gaps collapsed ([`IdleGaps`]).
    Busy,
}

/// The shortest gap counted as idle, whatever the median.
pub const MIN_IDLE_NS: u64 = 1_000_000;
/// A gap this many times the median gap is idle.
pub const IDLE_FACTOR: u64 = 100;
/// Idle gaps kept by default (the longest).
pub const GAP_BUDGET: usize = 4_096;

/// A pause between two events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct IdleGap {
    /// Its length.
    pub gap_ns: u64,
    /// The index of the event after it.
    pub index: u64,
    /// The time of the event after it: the pause spans `time_ns - gap_ns`
    /// to `time_ns`.
    pub time_ns: u64,
}

/// The pauses a busy-time axis collapses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct IdleGaps {
    /// A gap longer than this is idle; each is drawn this long.
    pub threshold_ns: u64,
    /// The idle gaps, by index (the longest, up to the budget).
    pub gaps: Vec<IdleGap>,
    /// Idle gaps not kept past the budget (drawn at their length).
    pub left_out: u64,
    /// The median gap between consecutive events (to a power of two).
    pub median_ns: u64,
}

impl IdleGaps {
    /// The time a busy-time axis cuts: each idle gap kept, less the length
    /// it is drawn.
    pub fn cut_ns(&self) -> u64 {
        (self.gaps.iter())
            .map(|g| g.gap_ns.saturating_sub(self.threshold_ns))
            .sum()
    }

    /// Whether a time axis of `span_ns` would squeeze the work: the idle
    /// gaps take [`SQUEEZED_SHARE`] of it or more.
    pub fn squeeze(&self, span_ns: u64) -> bool {
        span_ns > 0 && self.cut_ns() as f64 >= SQUEEZED_SHARE * span_ns as f64
    }
}

/// The share of a chart's span that idle gaps must take for a trace's
/// charts to open on busy time: a real run's imports and CUDA start-up
/// take seconds before steps of milliseconds, which a time axis would
/// squeeze into its last few percent.
pub const SQUEEZED_SHARE: f64 = 0.25;

/// Busy time as a function of time: any moment, an event's or not (a
/// chart's bucket edges fall inside pauses), has a place on a busy-time
/// axis, and a later moment never has an earlier place.
#[derive(Clone, Debug, Default)]
pub struct BusyClock {
    // Each idle gap, by time: its start, its end, and the time cut from
    // the gaps before it.
    cuts: Vec<(u64, u64, u64)>,
    threshold_ns: u64,
}

impl BusyClock {
    /// The clock that shrinks each of these idle gaps to their threshold.
    pub fn new(idle: &IdleGaps) -> BusyClock {
        let mut spans: Vec<(u64, u64)> = idle
            .gaps
            .iter()
            .map(|g| (g.time_ns.saturating_sub(g.gap_ns), g.time_ns))
            .collect();
        spans.sort_unstable_by_key(|&(_, end)| end);
        let mut cuts = Vec::with_capacity(spans.len());
        let (mut cut, mut last_end) = (0, 0);
        for (start, end) in spans {
            // Pauses overlap only where times go back (devices merged into
            // one stream): a moment is cut once.
            let start = start.max(last_end);
            if end.saturating_sub(start) <= idle.threshold_ns {
                continue;
            }
            cuts.push((start, end, cut));
            cut += end - start - idle.threshold_ns;
            last_end = end;
        }
        BusyClock {
            cuts,
            threshold_ns: idle.threshold_ns,
        }
    }

    /// Busy time at `time_ns`: the time less what the idle gaps before it
    /// were cut by. A moment inside a gap falls in proportion into the gap's
    /// shortened span.
    pub fn busy_ns(&self, time_ns: u64) -> f64 {
        let i = self.cuts.partition_point(|&(start, _, _)| start <= time_ns);
        let Some(&(start, end, cut)) = i.checked_sub(1).map(|i| &self.cuts[i]) else {
            return time_ns as f64;
        };
        let gap = (end - start) as f64;
        let into = (time_ns.min(end) - start) as f64;
        time_ns as f64 - cut as f64 - into * (1.0 - self.threshold_ns as f64 / gap)
    }
}

/// Tracks the gaps between consecutive events.
#[derive(Clone, Debug)]
pub struct PauseTracker {
    budget: usize,
    longest: BinaryHeap<Reverse<IdleGap>>,
    // Gaps by bit length.
    histogram: [u64; 65],
    last_ns: Option<u64>,
}

impl PauseTracker {
    /// A tracker keeping the `budget` longest gaps.
    pub fn new(budget: usize) -> Self {
        PauseTracker {
            budget: budget.max(1),
            longest: BinaryHeap::new(),
            histogram: [0; 65],
            last_ns: None,
        }
    }

    /// The event with this index happened at `time_ns`. Always inlined:
    /// four analyses of `report` call it for every event, and one of them
    /// left out of line cost 32 instructions an event.
    #[inline(always)]
    pub fn event(&mut self, index: u64, time_ns: u64) {
        let Some(last) = self.last_ns.replace(time_ns) else {
            return;
        };
        let gap_ns = time_ns.saturating_sub(last);
        self.histogram[bits(gap_ns)] += 1;
        if gap_ns < MIN_IDLE_NS {
            return;
        }
        let gap = IdleGap {
            gap_ns,
            index,
            time_ns,
        };
        if self.longest.len() < self.budget {
            self.longest.push(Reverse(gap));
        } else if self.longest.peek().is_some_and(|Reverse(g)| *g < gap) {
            self.longest.pop();
            self.longest.push(Reverse(gap));
        }
    }

    /// The idle gaps.
    pub fn finish(&self) -> IdleGaps {
        let total: u64 = self.histogram.iter().sum();
        let mut median_ns = 0;
        let mut seen = 0;
        for (b, &n) in self.histogram.iter().enumerate() {
            seen += n;
            if n > 0 && seen * 2 >= total {
                median_ns = if b == 0 { 0 } else { 1u64 << (b - 1) };
                break;
            }
        }
        let threshold_ns = MIN_IDLE_NS.max(median_ns.saturating_mul(IDLE_FACTOR));
        let mut gaps: Vec<IdleGap> = self
            .longest
            .iter()
            .map(|Reverse(g)| *g)
            .filter(|g| g.gap_ns > threshold_ns)
            .collect();
        gaps.sort_unstable_by_key(|g| g.index);
        // Gaps past the threshold's bit length are idle; those of the same
        // length may or may not be, so they count as kept.
        let idle: u64 = self.histogram[bits(threshold_ns) + 1..].iter().sum();
        IdleGaps {
            threshold_ns,
            left_out: idle.saturating_sub(gaps.len() as u64),
            gaps,
            median_ns,
        }
    }
}

fn bits(v: u64) -> usize {
    (64 - v.leading_zeros()) as usize
}

/// The pauses of a pass, as an analysis.
pub struct Pauses {
    tracker: PauseTracker,
    report: Option<IdleGaps>,
}

impl Pauses {
    /// Pauses keeping the [`GAP_BUDGET`] longest.
    pub fn new() -> Self {
        Pauses {
            tracker: PauseTracker::new(GAP_BUDGET),
            report: None,
        }
    }

    /// The idle gaps, once the pass is over: an error if it did not finish.
    pub fn into_report(self) -> Result<IdleGaps, AnalysisError> {
        self.report.ok_or(AnalysisError::NoResult("pauses"))
    }
}

impl Default for Pauses {
    fn default() -> Self {
        Self::new()
    }
}

impl Analysis for Pauses {
    fn event(&mut self, step: &Step<'_>, _state: &ReplayState) -> Result<Flow, AnalysisError> {
        self.tracker.event(step.index, step.event.time_ns);
        Ok(Flow::Continue)
    }

    fn finish(
        &mut self,
        _state: &ReplayState,
        _symbols: &vramtrace_format::SymbolTable,
    ) -> Result<(), AnalysisError> {
        self.report = Some(self.tracker.finish());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_pause_among_short_ones_is_idle() {
        let mut t = PauseTracker::new(4);
        let mut now = 0;
        for i in 0..1000 {
            now += if i == 500 { 60_000_000_000 } else { 2_000 };
            t.event(i, now);
        }
        let idle = t.finish();
        assert_eq!(idle.median_ns, 1024);
        assert_eq!(idle.threshold_ns, MIN_IDLE_NS);
        assert_eq!(
            idle.gaps,
            [IdleGap {
                gap_ns: 60_000_000_000,
                index: 500,
                time_ns: 60_001_000_000,
            }]
        );
        let clock = BusyClock::new(&idle);
        // The pause begins at 1 ms, with event 499.
        let before = 1_000_000.0;
        assert_eq!(clock.busy_ns(1_000_000), before);
        // Half way through the pause is half way through its shortened span.
        assert_eq!(
            clock.busy_ns(30_001_000_000),
            before + MIN_IDLE_NS as f64 / 2.0
        );
        assert_eq!(clock.busy_ns(60_001_000_000), before + MIN_IDLE_NS as f64);
        assert_eq!(idle.left_out, 0);
    }

    #[test]
    fn only_the_longest_gaps_past_the_budget_are_kept() {
        let mut t = PauseTracker::new(2);
        let mut now = 0;
        for i in 0..100u64 {
            now += if i % 10 == 0 {
                (i + 1) * 10_000_000
            } else {
                1_000
            };
            t.event(i, now);
        }
        let idle = t.finish();
        let kept: Vec<u64> = idle.gaps.iter().map(|g| g.index).collect();
        assert_eq!(kept, [80, 90]);
        assert_eq!(idle.left_out, 7, "{idle:?}");
    }
}
