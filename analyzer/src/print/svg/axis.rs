//! The x axis of a static chart: time, event index or busy time (see
//! [`XAxis`]). A chart's data carry times; the scale maps a time to its
//! place on the chosen axis through knots taken from the data's own
//! samples (their event indices and times), so every chart of a trace
//! places a moment alike.

use crate::analysis::pauses::{BusyClock, IdleGaps, XAxis};
use crate::units;

/// Where moments go along a chart's x axis.
#[derive(Clone, Debug)]
pub struct XScale {
    kind: XAxis,
    // (time, event index), by time, for the event axis.
    knots: Vec<(u64, f64)>,
    // Busy time, and its value at the first sample, for the busy axis.
    busy: BusyClock,
    busy_origin: f64,
}

impl XScale {
    /// A scale of `kind` for data whose samples are these `(event index,
    /// time)` pairs, in order; `idle` holds the pauses busy time cuts.
    pub fn new(
        kind: XAxis,
        samples: impl IntoIterator<Item = (u64, u64)>,
        idle: &IdleGaps,
    ) -> XScale {
        let mut samples = samples.into_iter().peekable();
        let start_ns = samples.peek().map_or(0, |&(_, time)| time);
        let busy = BusyClock::new(idle);
        let busy_origin = busy.busy_ns(start_ns);
        let mut knots = Vec::new();
        if kind == XAxis::Events {
            // Event indices count from the trace's start, so a window's
            // axis reads the window's place in the trace.
            let mut last_t = 0;
            for (index, time) in samples {
                // Times that go back (merged devices) keep the order.
                let t = time.max(last_t);
                last_t = t;
                knots.push((t, index as f64));
            }
        }
        XScale {
            kind,
            knots,
            busy,
            busy_origin,
        }
    }

    /// The place of a moment.
    pub fn x(&self, time_ns: u64) -> f64 {
        match self.kind {
            XAxis::Time => time_ns as f64,
            // Busy time counts from the first sample (a window's first
            // event); it is a function of time, so any moment has a place,
            // and a later one never an earlier place.
            XAxis::Busy => (self.busy.busy_ns(time_ns) - self.busy_origin).max(0.0),
            XAxis::Events => self.event_x(time_ns),
        }
    }

    // An event axis between samples: in proportion to time.
    fn event_x(&self, time_ns: u64) -> f64 {
        let k = &self.knots;
        if k.is_empty() {
            return time_ns as f64;
        }
        let i = k.partition_point(|&(t, _)| t <= time_ns);
        if i == 0 {
            return k[0].1;
        }
        if i == k.len() {
            return k[i - 1].1;
        }
        let ((t0, x0), (t1, x1)) = (k[i - 1], k[i]);
        if t1 == t0 {
            return x0;
        }
        x0 + (x1 - x0) * (time_ns - t0) as f64 / (t1 - t0) as f64
    }

    /// What the axis measures.
    pub fn kind(&self) -> XAxis {
        self.kind
    }

    /// The labels of the axis's ticks from `x0` to `x1`: event counts, or
    /// durations in one unit told apart (see [`super::time_ticks`]).
    pub fn ticks(&self, x0: f64, x1: f64) -> impl Fn(&f64) -> String {
        let time = super::time_ticks(x1, x1 - x0);
        let kind = self.kind;
        move |v: &f64| match kind {
            XAxis::Events => units::count(v.max(0.0).round() as u64),
            _ => time(v),
        }
    }

    /// The axis's description.
    pub fn description(&self) -> &'static str {
        match self.kind {
            XAxis::Time => "time",
            XAxis::Events => "event index",
            XAxis::Busy => "busy time (idle gaps cut)",
        }
    }
}

/// Points of a step line through `(x, y)` values: each value holds until
/// the next point, where the line jumps, as memory does.
pub fn steps(points: impl IntoIterator<Item = (f64, f64)>) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (x, y) in points {
        if let Some(&(_, prev)) = out.last() {
            out.push((x, prev));
        }
        out.push((x, y));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::pauses::IdleGap;

    #[test]
    fn busy_time_cuts_the_idle_gaps_and_events_count() {
        let idle = IdleGaps {
            threshold_ns: 1_000,
            gaps: vec![IdleGap {
                gap_ns: 1_000_000,
                index: 12,
                time_ns: 1_000_200,
            }],
            left_out: 0,
            median_ns: 10,
        };
        let samples = [(10, 100), (11, 200), (12, 1_000_200), (13, 1_000_300)];
        let busy = XScale::new(XAxis::Busy, samples, &idle);
        assert_eq!(busy.x(100), 0.0);
        assert_eq!(busy.x(200), 100.0);
        assert_eq!(busy.x(1_000_200), 1_100.0);
        // A moment inside the pause that is no event (a chart bucket's
        // edge) falls inside its shortened span, in proportion.
        assert_eq!(busy.x(500_200), 600.0);
        assert_eq!(busy.x(1_000_300), 1_200.0);
        let events = XScale::new(XAxis::Events, samples, &idle);
        assert_eq!(events.x(1_000_200), 12.0);
        assert_eq!(events.x(1_000_250), 12.5);
        assert_eq!(events.ticks(0.0, 2000.0)(&1234.0), "1,234");
        let time = XScale::new(XAxis::Time, samples, &idle);
        assert_eq!(time.x(1_000_200), 1_000_200.0);
    }

    #[test]
    fn steps_hold_each_value_until_the_next_point() {
        assert_eq!(
            steps([(0.0, 1.0), (2.0, 5.0), (3.0, 0.0)]),
            [
                (0.0, 1.0),
                (2.0, 1.0),
                (2.0, 5.0),
                (3.0, 1.0 * 5.0),
                (3.0, 0.0)
            ]
        );
    }
}
