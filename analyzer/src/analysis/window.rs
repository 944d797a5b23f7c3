//! Windows: restricting an analysis to part of a trace (the CLI's `--from`
//! and `--to`).
//!
//! A bound is a time since the trace start (`1.5s`, `300ms`) or a phase
//! name: a start named by a phase is the phase's first begin, an end its
//! last end; a name with `#` stands for every number (`iter#`: from
//! the first `iterN` to begin to the last to end). Phase names are resolved
//! to event indices by a first, decode-only pass over the same opened input;
//! the replay itself always starts at the trace's start, so the state at the
//! window's start is exact.

use crate::analysis::phases::normalize_name;
use crate::units::{self, UnitError};
use vramtrace_format::EventSource;
use vramtrace_format::{EventData, FormatError};

/// Why a window cannot be made or found in a trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WindowError {
    /// A bound is empty.
    #[error("an empty window bound")]
    EmptyBound,
    /// A bound that starts like a time is not one.
    #[error(transparent)]
    BadTime(#[from] UnitError),
    /// The start's time is after the end's.
    #[error("the window's start ({}) is after its end ({})", units::duration_ns(*from_ns), units::duration_ns(*to_ns))]
    StartAfterEnd {
        /// The start.
        from_ns: u64,
        /// The end.
        to_ns: u64,
    },
    /// The start names a phase the trace never begins.
    #[error("no phase named '{0}' in the trace")]
    NoSuchPhase(String),
    /// The end names a phase the trace never ends.
    #[error("phase '{0}' never ends in the trace")]
    PhaseNeverEnds(String),
    /// The start's phase begins after the end's phase ends.
    #[error("the start's phase begins after the end's phase ends")]
    PhasesOutOfOrder,
    /// The trace could not be read while looking for the phases.
    #[error(transparent)]
    Read(#[from] FormatError),
}

/// One end of a window as given on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BoundSpec {
    /// Nanoseconds since the trace start.
    Time(u64),
    /// A phase name.
    Phase(String),
}

impl BoundSpec {
    /// Parses a time (`1.5s`, `300ms`, `2m`) or, failing that, a phase name.
    pub fn parse(text: &str) -> Result<BoundSpec, WindowError> {
        let t = text.trim();
        if t.is_empty() {
            return Err(WindowError::EmptyBound);
        }
        if t.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
            return Ok(BoundSpec::Time(units::parse_duration_ns(t)?));
        }
        Ok(BoundSpec::Phase(t.to_string()))
    }
}

/// A window as given on the command line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowSpec {
    /// Where it starts (the trace's start when `None`).
    pub from: Option<BoundSpec>,
    /// Where it ends (the trace's end when `None`).
    pub to: Option<BoundSpec>,
}

impl WindowSpec {
    /// Parses a start and an end, each a time or a phase name.
    pub fn parse(from: Option<&str>, to: Option<&str>) -> Result<WindowSpec, WindowError> {
        let spec = WindowSpec {
            from: from.map(BoundSpec::parse).transpose()?,
            to: to.map(BoundSpec::parse).transpose()?,
        };
        if let (Some(BoundSpec::Time(a)), Some(BoundSpec::Time(b))) = (&spec.from, &spec.to)
            && a > b
        {
            return Err(WindowError::StartAfterEnd {
                from_ns: *a,
                to_ns: *b,
            });
        }
        Ok(spec)
    }

    /// Whether resolving needs a pass over the trace (a phase bound).
    pub fn needs_phases(&self) -> bool {
        matches!(self.from, Some(BoundSpec::Phase(_)))
            || matches!(self.to, Some(BoundSpec::Phase(_)))
    }

    /// The window of time bounds alone; `None` when a bound is a phase
    /// (see [`resolve`](Self::resolve)).
    pub fn times(&self) -> Option<Window> {
        if self.needs_phases() {
            return None;
        }
        let time = |b: &Option<BoundSpec>| match b {
            Some(BoundSpec::Time(t)) => Some(*t),
            _ => None,
        };
        Some(Window {
            from_ns: time(&self.from),
            to_ns: time(&self.to),
            ..Window::ALL
        })
    }

    /// Resolves the bounds against a trace, reading `source` to its end when a
    /// bound is a phase name (decoding only: nothing is replayed). Phase
    /// names are those of `phase_thread`'s phases, the thread a replay follows.
    pub fn resolve<S: EventSource>(
        &self,
        source: &mut S,
        phase_thread: u32,
    ) -> Result<Window, WindowError> {
        let mut window = Window::default();
        if let Some(BoundSpec::Time(t)) = self.from {
            window.from_ns = Some(t);
        }
        if let Some(BoundSpec::Time(t)) = self.to {
            window.to_ns = Some(t);
        }
        if !self.needs_phases() {
            return Ok(window);
        }
        let from_name = match &self.from {
            Some(BoundSpec::Phase(n)) => Some(n.as_str()),
            _ => None,
        };
        let to_name = match &self.to {
            Some(BoundSpec::Phase(n)) => Some(n.as_str()),
            _ => None,
        };
        let mut first_begin = None;
        let mut last_end = None;
        let mut index = 0u64;
        // A name with `#` matches every instance of the normalized name
        // (`iter#` matches `iter0`, `iter1`, ...).
        let matches = |wanted: Option<&str>, name: Option<&str>| match (wanted, name) {
            (Some(w), Some(n)) if w.contains('#') => normalize_name(n) == w,
            (Some(w), Some(n)) => w == n,
            _ => false,
        };
        source.for_each_batch(|events, symbols| {
            for e in events {
                match e.data {
                    EventData::PhaseBegin { name, thread }
                        if thread == phase_thread
                            && first_begin.is_none()
                            && matches(from_name, symbols.string(name)) =>
                    {
                        first_begin = Some(index);
                    }
                    EventData::PhaseEnd { name, thread }
                        if thread == phase_thread && matches(to_name, symbols.string(name)) =>
                    {
                        last_end = Some(index);
                    }
                    _ => {}
                }
                index += 1;
            }
        })?;
        if let Some(name) = from_name {
            match first_begin {
                Some(i) => window.from_index = Some(i),
                None => return Err(WindowError::NoSuchPhase(name.to_string())),
            }
        }
        if let Some(name) = to_name {
            match last_end {
                Some(i) => window.to_index = Some(i),
                None => return Err(WindowError::PhaseNeverEnds(name.to_string())),
            }
        }
        if let (Some(a), Some(b)) = (window.from_index, window.to_index)
            && a > b
        {
            return Err(WindowError::PhasesOutOfOrder);
        }
        Ok(window)
    }
}

/// A resolved window: the events whose time and index lie within every
/// bound given (all inclusive).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// First time inside.
    pub from_ns: Option<u64>,
    /// Last time inside.
    pub to_ns: Option<u64>,
    /// First event index inside.
    pub from_index: Option<u64>,
    /// Last event index inside.
    pub to_index: Option<u64>,
}

impl Window {
    /// The whole trace.
    pub const ALL: Window = Window {
        from_ns: None,
        to_ns: None,
        from_index: None,
        to_index: None,
    };

    /// Whether the window is the whole trace.
    pub fn is_all(&self) -> bool {
        *self == Window::ALL
    }

    /// Whether an event is inside.
    #[inline]
    pub fn contains(&self, index: u64, time_ns: u64) -> bool {
        self.bounds().contains(index, time_ns)
    }

    /// Whether an event (and so every later one) is past the window's end.
    #[inline]
    pub fn is_after(&self, index: u64, time_ns: u64) -> bool {
        self.bounds().is_after(index, time_ns)
    }

    /// The window as plain bounds, for per-event checks.
    pub fn bounds(&self) -> Bounds {
        Bounds {
            from_ns: self.from_ns.unwrap_or(0),
            to_ns: self.to_ns.unwrap_or(u64::MAX),
            from_index: self.from_index.unwrap_or(0),
            to_index: self.to_index.unwrap_or(u64::MAX),
        }
    }
}

/// A [`Window`] with its absent bounds made the widest: four comparisons
/// per event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    from_ns: u64,
    to_ns: u64,
    from_index: u64,
    to_index: u64,
}

impl Bounds {
    /// Whether some event can be before the start: `false` when the start
    /// is open, and [`started`](Self::started) always true.
    #[inline]
    pub fn has_start(&self) -> bool {
        self.from_ns > 0 || self.from_index > 0
    }

    /// Whether some event can be past the end: `false` when the end is
    /// open, and [`is_after`](Self::is_after) always false.
    #[inline]
    pub fn has_end(&self) -> bool {
        self.to_ns < u64::MAX || self.to_index < u64::MAX
    }

    /// Whether an event is past the end.
    #[inline]
    pub fn is_after(&self, index: u64, time_ns: u64) -> bool {
        (time_ns > self.to_ns) | (index > self.to_index)
    }

    /// Whether an event at or before the end is past the start.
    #[inline]
    pub fn started(&self, index: u64, time_ns: u64) -> bool {
        (time_ns >= self.from_ns) & (index >= self.from_index)
    }

    /// Whether an event is inside.
    #[inline]
    pub fn contains(&self, index: u64, time_ns: u64) -> bool {
        self.started(index, time_ns) && !self.is_after(index, time_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bounds() {
        assert_eq!(
            BoundSpec::parse("1.5s").unwrap(),
            BoundSpec::Time(1_500_000_000)
        );
        assert_eq!(
            BoundSpec::parse("300ms").unwrap(),
            BoundSpec::Time(300_000_000)
        );
        assert_eq!(
            BoundSpec::parse("train_epoch1").unwrap(),
            BoundSpec::Phase("train_epoch1".into())
        );
        assert!(matches!(
            BoundSpec::parse(" "),
            Err(WindowError::EmptyBound)
        ));
        assert!(BoundSpec::parse("1.5 fortnights").is_err());
        assert!(matches!(
            WindowSpec::parse(Some("2s"), Some("1s")),
            Err(WindowError::StartAfterEnd { .. })
        ));
    }

    #[test]
    fn windows_contain_events() {
        let w = Window {
            from_ns: Some(10),
            to_index: Some(5),
            ..Window::ALL
        };
        assert!(!w.contains(0, 9));
        assert!(w.contains(5, 10));
        assert!(w.is_after(6, 11));
        assert!(Window::ALL.contains(7, 0));
    }

    #[test]
    fn bounds_say_whether_they_need_checking() {
        let all = Window::ALL.bounds();
        assert!(!all.has_start() && !all.has_end());
        // Each bound alone makes its side need checking.
        let all_but = |set: fn(&mut Window)| {
            let mut w = Window::ALL;
            set(&mut w);
            let b = w.bounds();
            (b.has_start(), b.has_end())
        };
        assert_eq!(all_but(|w| w.from_ns = Some(1)), (true, false));
        assert_eq!(all_but(|w| w.from_index = Some(1)), (true, false));
        assert_eq!(all_but(|w| w.to_ns = Some(0)), (false, true));
        assert_eq!(all_but(|w| w.to_index = Some(u64::MAX - 1)), (false, true));
        // Where a side needs no check, its answer is the same for every event.
        for (index, time_ns) in [(0, 0), (u64::MAX, u64::MAX), (3, 7)] {
            assert!(all.started(index, time_ns) && !all.is_after(index, time_ns));
        }
    }
}
