//! Values no allocator could have recorded: a size no device holds, a range
//! whose end passes 2^64. A hostile or corrupt input carries them; an
//! analysis that took them in would print figures made by wrapped or
//! saturated arithmetic ("16.0 EiB" peaks, negative fragmentation). Each
//! such event is left out of every pass, counted, and named in a warning;
//! the rest of the input is analyzed as if it were not there.
//!
//! Only byte figures the allocator itself produced are judged. What a
//! program asked for and was refused (an OOM's request) may be anything.

use std::borrow::Cow;
use vramtrace_format::{Event, EventData, InitialState, SegmentState};

pub use crate::bounds::MAX_BYTES;

/// Why an event's values cannot be: what is out of range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Impossible {
    /// A block's or segment's size (or a block's requested size) past
    /// [`MAX_BYTES`].
    Size,
    /// A block or segment whose end passes 2^64.
    AddressRange,
    /// A device figure (free, total, limit) past [`MAX_BYTES`].
    DeviceFigure,
    /// An `events_dropped` marker counting more than [`MAX_DROPPED`]
    /// events, or whose span ends before it starts.
    DroppedMarker,
}

/// The most events one `events_dropped` marker may count: a recorder
/// drops what a program allocates while its disk lags, far fewer than 2^50
/// (a thousand years at a million events a second), and sums of such
/// counts stay inside 64 bits.
pub const MAX_DROPPED: u64 = 1 << 50;

impl Impossible {
    /// What is wrong, for a message.
    pub fn describe(self) -> &'static str {
        match self {
            Impossible::Size => "a size past 2^50 bytes",
            Impossible::AddressRange => "an address range past 2^64",
            Impossible::DeviceFigure => "a device figure past 2^50 bytes",
            Impossible::DroppedMarker => {
                "an events_dropped marker counting past 2^50 events or ending before it starts"
            }
        }
    }
}

fn range(addr: u64, size: u64) -> Option<Impossible> {
    if size > MAX_BYTES {
        Some(Impossible::Size)
    } else if addr.checked_add(size).is_none() {
        Some(Impossible::AddressRange)
    } else {
        None
    }
}

/// Whether an event's values are impossible, and why.
// Inlined into the pass's loop, with the block events (nearly all) told
// apart by one comparison and the other kinds out of line: a dispatch on
// every kind cost about 7 instructions an event (callgrind, issue #47).
#[inline(always)]
pub fn impossible(event: &Event) -> Option<Impossible> {
    match &event.data {
        EventData::Alloc(b) | EventData::FreeRequested(b) | EventData::FreeCompleted(b) => {
            if b.requested > MAX_BYTES {
                Some(Impossible::Size)
            } else {
                range(b.addr, b.size)
            }
        }
        _ => impossible_other(event),
    }
}

/// [`impossible`] for the events that are not block events.
#[inline(never)]
fn impossible_other(event: &Event) -> Option<Impossible> {
    match &event.data {
        EventData::EventsDropped(d) => (d.count > MAX_DROPPED || d.from_ns > event.time_ns)
            .then_some(Impossible::DroppedMarker),
        EventData::SegmentAlloc(s)
        | EventData::SegmentFree(s)
        | EventData::SegmentMap(s)
        | EventData::SegmentUnmap(s) => range(s.addr, s.size),
        EventData::Oom(o) => (o.free_bytes > MAX_BYTES).then_some(Impossible::DeviceFigure),
        EventData::Limit(l) => (l.limit_bytes > MAX_BYTES || l.total_bytes > MAX_BYTES)
            .then_some(Impossible::DeviceFigure),
        EventData::DeviceMemory(m) => (m.free_bytes > MAX_BYTES || m.total_bytes > MAX_BYTES)
            .then_some(Impossible::DeviceFigure),
        _ => None,
    }
}

fn impossible_segment(s: &SegmentState) -> bool {
    range(s.addr, s.size).is_some()
        || s.blocks
            .iter()
            .any(|b| b.requested > MAX_BYTES || range(b.addr, b.size).is_some())
}

/// The initial state without its impossible segments (a segment is left out
/// whole when it or one of its blocks is impossible), and how many were left
/// out. Borrowed when nothing was.
pub fn plausible_initial(state: &InitialState) -> (Cow<'_, InitialState>, u64) {
    let bad = state
        .segments
        .iter()
        .filter(|s| impossible_segment(s))
        .count() as u64;
    if bad == 0 {
        return (Cow::Borrowed(state), 0);
    }
    let segments = state
        .segments
        .iter()
        .filter(|s| !impossible_segment(s))
        .cloned()
        .collect();
    (Cow::Owned(InitialState { segments }), bad)
}

/// Impossible values met in one pass: how many, and the first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ImpossibleValues {
    /// Events left out.
    pub events: u64,
    /// Segments of the initial state left out.
    pub initial_segments: u64,
    /// The first event left out: its index, and why.
    pub first: Option<(u64, Impossible)>,
}

impl ImpossibleValues {
    /// Counts an event left out.
    pub fn note(&mut self, index: u64, why: Impossible) {
        self.events += 1;
        self.first.get_or_insert((index, why));
    }

    /// Whether nothing was left out.
    pub fn is_empty(&self) -> bool {
        self.events == 0 && self.initial_segments == 0
    }
}

impl std::fmt::Display for ImpossibleValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if self.events > 0 {
            let first = self
                .first
                .map(|(i, why)| format!(" (the first, event {i}, has {})", why.describe()))
                .unwrap_or_default();
            parts.push(format!(
                "{} event{}{first}",
                self.events,
                if self.events == 1 { "" } else { "s" }
            ));
        }
        if self.initial_segments > 0 {
            parts.push(format!(
                "{} segment{} of the starting state",
                self.initial_segments,
                if self.initial_segments == 1 { "" } else { "s" }
            ));
        }
        write!(
            f,
            "{} with impossible values (sizes past 2^50 bytes, address ranges past 2^64, impossible events_dropped markers) left out",
            parts.join(" and ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramtrace_format::{BlockEvent, BlockState, DroppedEvents, OomEvent, SegmentEvent};

    fn impossible_data(data: &EventData) -> Option<Impossible> {
        impossible(&Event {
            time_ns: 1_000,
            data: *data,
        })
    }

    #[test]
    fn a_dropped_marker_past_any_recording_is_impossible() {
        let marker = |count, from_ns| EventData::EventsDropped(DroppedEvents { count, from_ns });
        assert_eq!(impossible_data(&marker(40_000, 900)), None);
        assert_eq!(impossible_data(&marker(MAX_DROPPED, 1_000)), None);
        assert_eq!(
            impossible_data(&marker(u64::MAX, 900)),
            Some(Impossible::DroppedMarker)
        );
        // A span that ends (at the marker's time) before it starts.
        assert_eq!(
            impossible_data(&marker(10, 1_001)),
            Some(Impossible::DroppedMarker)
        );
    }

    #[test]
    fn judges_sizes_ranges_and_device_figures() {
        let block = |addr, size, requested| {
            EventData::Alloc(BlockEvent {
                addr,
                size,
                requested,
                ..Default::default()
            })
        };
        assert_eq!(impossible_data(&block(0, MAX_BYTES, MAX_BYTES)), None);
        assert_eq!(
            impossible_data(&block(0, MAX_BYTES + 1, 1)),
            Some(Impossible::Size)
        );
        assert_eq!(
            impossible_data(&block(0, 1, u64::MAX)),
            Some(Impossible::Size)
        );
        assert_eq!(
            impossible_data(&block(u64::MAX - 1, 2, 2)),
            Some(Impossible::AddressRange)
        );
        // An address above 2^63 is real (PyTorch's on some systems).
        assert_eq!(impossible_data(&block(1 << 63, 1 << 20, 1 << 20)), None);
        let segment = EventData::SegmentUnmap(SegmentEvent {
            addr: 0,
            size: u64::MAX,
            ..Default::default()
        });
        assert_eq!(impossible_data(&segment), Some(Impossible::Size));
        // A program may ask for anything: its refused request is kept.
        let oom = |requested, free_bytes| {
            EventData::Oom(OomEvent {
                requested,
                free_bytes,
                ..Default::default()
            })
        };
        assert_eq!(impossible_data(&oom(u64::MAX, 0)), None);
        assert_eq!(
            impossible_data(&oom(1, u64::MAX)),
            Some(Impossible::DeviceFigure)
        );
    }

    #[test]
    fn an_initial_segment_with_an_impossible_block_is_left_out_whole() {
        let seg = |addr, block_size| SegmentState {
            addr,
            size: 1 << 20,
            blocks: vec![BlockState {
                addr,
                size: block_size,
                ..Default::default()
            }],
            ..Default::default()
        };
        let state = InitialState {
            segments: vec![seg(0, 1 << 20), seg(1 << 30, u64::MAX)],
        };
        let (kept, left_out) = plausible_initial(&state);
        assert_eq!(left_out, 1);
        assert_eq!(kept.segments, vec![seg(0, 1 << 20)]);
        let sound = InitialState {
            segments: vec![seg(0, 1 << 20)],
        };
        assert!(matches!(plausible_initial(&sound), (Cow::Borrowed(_), 0)));
    }
}
