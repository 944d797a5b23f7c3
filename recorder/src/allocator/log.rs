//! [`EventLog`]: the allocator's events, kept compact.
//!
//! A recorder makes the log its buffer, so every event is written here on the
//! allocating thread, into memory that another thread (the trace writer) read
//! last: the bytes per event are what that thread pays, more than the
//! instructions. A plain [`Event`] takes 64 bytes; here a block event takes
//! one 32-byte slot (address, size and kind, requested size, time), because
//! what is the same for a run of events (device, stack, thread, stream) is
//! written once in a context slot before the first block event it differs
//! for. A `FreeRequested` followed by its `FreeCompleted` at the same time
//! (a free on one stream) shares one slot. The rest (segments, OOMs, phases)
//! are rare and kept whole, aside.
//!
//! Reading the log ([`EventLog::iter`], [`EventLog::drain`]) gives back the
//! very events pushed, in order.

use crate::format::{BlockEvent, Event, EventData, StackId};

/// Slot tags, in the top byte of a slot's second word.
const ALLOC: u8 = 1;
const FREE_REQUESTED: u8 = 2;
const FREE_COMPLETED: u8 = 3;
/// A `FreeRequested` and the `FreeCompleted` of the same block, same time.
const FREE_BOTH: u8 = 4;
/// The device, stack, thread and stream of the block slots that follow.
const CONTEXT: u8 = 5;
/// The next event of [`EventLog::rare`].
const RARE: u8 = 6;

const TAG_SHIFT: u32 = 56;
/// Block sizes below this fit beside the tag (64 PiB: every real one).
const MAX_COMPACT_SIZE: u64 = 1 << TAG_SHIFT;

/// 32 bytes, aligned so that a slot never straddles two cache lines.
///
/// A block slot is `[addr, size | tag << 56, requested, time_ns]`; a context
/// slot is `[stream, device | tag << 56, thread | stack << 32, 0]`; a rare
/// slot is `[0, tag << 56, 0, 0]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(32))]
struct Slot([u64; 4]);

impl Slot {
    #[inline(always)]
    fn tag(&self) -> u8 {
        (self.0[1] >> TAG_SHIFT) as u8
    }
}

/// What block events share, written once per run of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Context {
    stream: u64,
    device: u32,
    stack: StackId,
    thread: u32,
}

impl Context {
    fn of(b: &BlockEvent) -> Self {
        Context {
            stream: b.stream,
            device: b.device,
            stack: b.stack,
            thread: b.thread,
        }
    }

    /// The first three words of its slot (the fourth is zero).
    #[inline(always)]
    fn words(&self) -> [u64; 3] {
        [
            self.stream,
            self.device as u64 | (CONTEXT as u64) << TAG_SHIFT,
            self.thread as u64 | (self.stack.0 as u64) << 32,
        ]
    }

    fn from_slot(s: &Slot) -> Self {
        Context {
            stream: s.0[0],
            device: s.0[1] as u32,
            stack: StackId((s.0[2] >> 32) as u32),
            thread: s.0[2] as u32,
        }
    }

    fn block(&self, addr: u64, size: u64, requested: u64) -> BlockEvent {
        BlockEvent {
            addr,
            size,
            requested,
            stream: self.stream,
            device: self.device,
            stack: self.stack,
            thread: self.thread,
        }
    }
}

/// Events in the order they were pushed, stored compactly (see the
/// [module docs](self)).
#[derive(Clone, Debug, Default)]
pub struct EventLog {
    slots: Vec<Slot>,
    /// Events without a compact form, in order; a rare slot stands for each.
    rare: Vec<Event>,
    /// The context of the block slots written last, as the first three
    /// words of its slot (so that checking it is three comparisons); all
    /// zeros (no context: its tag is not [`CONTEXT`]) at the start.
    context: [u64; 3],
}

impl EventLog {
    /// An empty log with room for `slots` block events before it grows.
    pub fn with_capacity(slots: usize) -> Self {
        EventLog {
            slots: Vec::with_capacity(slots),
            ..EventLog::default()
        }
    }

    /// Whether the log holds no event.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The 32-byte slots used: about one per block event, more when its
    /// context changes. This, not the event count, is what the log's memory
    /// grows with.
    #[inline]
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Forgets every event, keeping the memory.
    pub fn clear(&mut self) {
        self.slots.clear();
        self.rare.clear();
        self.context = [0; 3];
    }

    /// Appends `event`.
    #[inline(always)]
    pub fn push(&mut self, event: Event) {
        match event.data {
            EventData::Alloc(b) => self.push_block(ALLOC, event.time_ns, b),
            EventData::FreeRequested(b) => self.push_block(FREE_REQUESTED, event.time_ns, b),
            EventData::FreeCompleted(b) => self.push_block(FREE_COMPLETED, event.time_ns, b),
            _ => self.push_rare(event),
        }
    }

    /// Appends a block event of kind `tag`. Written field by field (rather
    /// than by comparing arrays), the checks stay in registers.
    #[inline(always)]
    fn push_block(&mut self, tag: u8, time_ns: u64, b: BlockEvent) {
        if b.size >= MAX_COMPACT_SIZE {
            return self.push_huge(tag, time_ns, b);
        }
        let [stream, device, origin] = Context::of(&b).words();
        let size = b.size | (tag as u64) << TAG_SHIFT;
        if self.context[0] != stream || self.context[1] != device || self.context[2] != origin {
            self.push_context([stream, device, origin]);
        } else if tag == FREE_COMPLETED
            && let Some(last) = self.slots.last_mut()
            && last.0[1] == b.size | (FREE_REQUESTED as u64) << TAG_SHIFT
            && last.0[0] == b.addr
            && last.0[3] == time_ns
            && last.0[2] == b.requested
        {
            // The same context and fields: the pair shares the slot.
            last.0[1] = b.size | (FREE_BOTH as u64) << TAG_SHIFT;
            return;
        }
        self.slots.push(Slot([b.addr, size, b.requested, time_ns]));
    }

    /// Starts a run of block events of another context.
    #[inline(never)]
    fn push_context(&mut self, context: [u64; 3]) {
        self.context = context;
        self.slots
            .push(Slot([context[0], context[1], context[2], 0]));
    }

    /// Keeps a block event too large for a block slot whole.
    #[cold]
    #[inline(never)]
    fn push_huge(&mut self, tag: u8, time_ns: u64, b: BlockEvent) {
        let data = match tag {
            ALLOC => EventData::Alloc(b),
            FREE_REQUESTED => EventData::FreeRequested(b),
            _ => EventData::FreeCompleted(b),
        };
        self.push_rare(Event { time_ns, data });
    }

    #[cold]
    #[inline(never)]
    fn push_rare(&mut self, event: Event) {
        self.rare.push(event);
        self.slots.push(Slot([0, (RARE as u64) << TAG_SHIFT, 0, 0]));
    }

    /// The events, oldest first.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            log: self,
            cursor: Cursor::default(),
        }
    }

    /// Takes the events, oldest first: the log is empty afterwards, even if
    /// the iterator is dropped early.
    pub fn drain(&mut self) -> Drain<'_> {
        Drain {
            log: self,
            cursor: Cursor::default(),
        }
    }
}

impl<'a> IntoIterator for &'a EventLog {
    type Item = Event;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Where a reading of a log is.
#[derive(Clone, Debug, Default)]
struct Cursor {
    slot: usize,
    rare: usize,
    context: Option<Context>,
    /// The second event of a shared free slot, due next.
    completed: Option<Event>,
}

impl Cursor {
    #[inline]
    fn next(&mut self, log: &EventLog) -> Option<Event> {
        if let Some(e) = self.completed.take() {
            return Some(e);
        }
        loop {
            let s = log.slots.get(self.slot)?;
            self.slot += 1;
            let tag = s.tag();
            let kind: fn(BlockEvent) -> EventData = match tag {
                ALLOC => EventData::Alloc,
                FREE_REQUESTED | FREE_BOTH => EventData::FreeRequested,
                FREE_COMPLETED => EventData::FreeCompleted,
                CONTEXT => {
                    self.context = Some(Context::from_slot(s));
                    continue;
                }
                RARE => {
                    self.rare += 1;
                    return Some(log.rare[self.rare - 1]);
                }
                _ => unreachable!("slot tag {tag}"),
            };
            let context = self.context.expect("a context slot precedes block slots");
            let b = context.block(s.0[0], s.0[1] & (MAX_COMPACT_SIZE - 1), s.0[2]);
            let time_ns = s.0[3];
            if tag == FREE_BOTH {
                self.completed = Some(Event {
                    time_ns,
                    data: EventData::FreeCompleted(b),
                });
            }
            return Some(Event {
                time_ns,
                data: kind(b),
            });
        }
    }
}

/// The events of an [`EventLog`], oldest first. See [`EventLog::iter`].
#[derive(Clone, Debug)]
pub struct Iter<'a> {
    log: &'a EventLog,
    cursor: Cursor,
}

impl Iterator for Iter<'_> {
    type Item = Event;

    #[inline]
    fn next(&mut self) -> Option<Event> {
        self.cursor.next(self.log)
    }
}

/// The events taken from an [`EventLog`], oldest first. See
/// [`EventLog::drain`].
#[derive(Debug)]
pub struct Drain<'a> {
    log: &'a mut EventLog,
    cursor: Cursor,
}

impl Iterator for Drain<'_> {
    type Item = Event;

    #[inline]
    fn next(&mut self) -> Option<Event> {
        self.cursor.next(self.log)
    }
}

impl Drop for Drain<'_> {
    fn drop(&mut self) {
        self.log.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::SegmentEvent;

    fn block(addr: u64, stream: u64, thread: u32) -> BlockEvent {
        BlockEvent {
            addr,
            size: 1024,
            requested: 1000,
            stream,
            device: 1,
            stack: StackId(3),
            thread,
        }
    }

    fn at(time_ns: u64, data: EventData) -> Event {
        Event { time_ns, data }
    }

    fn round_trip(events: &[Event]) -> EventLog {
        let mut log = EventLog::default();
        events.iter().for_each(|&e| log.push(e));
        assert_eq!(log.iter().collect::<Vec<_>>(), events);
        log
    }

    #[test]
    fn block_events_take_a_slot_each_after_one_context_slot() {
        let b = block(4096, 0, 0);
        let log = round_trip(&[
            at(1, EventData::Alloc(b)),
            at(2, EventData::Alloc(BlockEvent { addr: 8192, ..b })),
            at(3, EventData::FreeRequested(b)),
        ]);
        assert_eq!(log.slots(), 4);
    }

    #[test]
    fn a_change_of_stream_thread_stack_or_device_writes_a_context_slot() {
        let b = block(4096, 0, 0);
        let log = round_trip(&[
            at(1, EventData::Alloc(b)),
            at(1, EventData::Alloc(BlockEvent { stream: 7, ..b })),
            at(1, EventData::Alloc(BlockEvent { thread: 2, ..b })),
            at(
                1,
                EventData::Alloc(BlockEvent {
                    stack: StackId(9),
                    ..b
                }),
            ),
            at(1, EventData::Alloc(BlockEvent { device: 0, ..b })),
            at(1, EventData::Alloc(b)),
        ]);
        assert_eq!(log.slots(), 12);
    }

    #[test]
    fn a_free_completed_right_after_its_request_shares_its_slot() {
        let b = block(4096, 0, 0);
        let log = round_trip(&[
            at(5, EventData::FreeRequested(b)),
            at(5, EventData::FreeCompleted(b)),
            at(6, EventData::Alloc(b)),
        ]);
        assert_eq!(log.slots(), 3);
        // Not when anything differs.
        let log = round_trip(&[
            at(5, EventData::FreeRequested(b)),
            at(6, EventData::FreeCompleted(b)),
            at(7, EventData::FreeRequested(b)),
            at(7, EventData::FreeCompleted(BlockEvent { size: 2048, ..b })),
            at(8, EventData::FreeRequested(b)),
            at(8, EventData::FreeCompleted(BlockEvent { stream: 1, ..b })),
            at(9, EventData::Alloc(b)),
            at(9, EventData::FreeCompleted(b)),
        ]);
        // Two context slots: to stream 1 and back.
        assert_eq!(log.slots(), 11);
    }

    #[test]
    fn other_events_and_huge_blocks_are_kept_whole_in_order() {
        let b = block(4096, 0, 0);
        let huge = BlockEvent {
            size: MAX_COMPACT_SIZE,
            ..b
        };
        let s = SegmentEvent {
            addr: 4096,
            size: 2 << 20,
            ..SegmentEvent::default()
        };
        round_trip(&[
            at(1, EventData::SegmentAlloc(s)),
            at(1, EventData::Alloc(b)),
            at(2, EventData::Alloc(huge)),
            at(
                2,
                EventData::PhaseBegin {
                    name: crate::format::StringId(1),
                },
            ),
            at(3, EventData::FreeRequested(b)),
            at(3, EventData::FreeCompleted(b)),
            at(3, EventData::SegmentFree(s)),
        ]);
    }

    #[test]
    fn drain_and_clear_empty_the_log_and_restart_its_context() {
        let b = block(4096, 0, 0);
        let mut log = EventLog::with_capacity(8);
        log.push(at(1, EventData::Alloc(b)));
        log.push(at(2, EventData::FreeRequested(b)));
        // Dropped after one event: the rest go too.
        assert_eq!(log.drain().next(), Some(at(1, EventData::Alloc(b))));
        assert!(log.is_empty());
        // The next block event brings its context along again.
        log.push(at(3, EventData::Alloc(b)));
        assert_eq!(log.iter().collect::<Vec<_>>(), [at(3, EventData::Alloc(b))]);
        log.clear();
        log.push(at(4, EventData::Alloc(b)));
        assert_eq!(
            log.drain().collect::<Vec<_>>(),
            [at(4, EventData::Alloc(b))]
        );
        assert_eq!(log.slots(), 0);
    }
}
