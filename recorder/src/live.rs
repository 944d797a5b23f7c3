//! [`LiveState`]: what is true at a moment of a recording, followed from its
//! events, for a trace part that starts then ([`super::ring`]).
//!
//! A part that starts mid-run must carry what its events alone cannot tell:
//! the segments reserved and the blocks in them (its initial state, from
//! which peaks inside the part are exact), and what else holds at its start
//! (the phases open, the annotations made, the latest memory limit and
//! device reading, the categories of live blocks), restated as its first
//! events.

use crate::allocator::ReservedRanges;
use crate::format::{
    BlockState, BlockStatus, DeviceMemoryEvent, Event, EventData, InitialState, LimitEvent,
    PoolAction, PoolEvent, PoolId, SegmentState, StackId, StringId, TagEvent, UserTagEvent,
};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// The most annotation keys restated (the latest value of each): a program
/// that annotates every step with a new key would otherwise grow each
/// part's start without bound.
const MAX_ANNOTATIONS: usize = 1024;

/// The most captures and `use_mem_pool` blocks under way that a part
/// restates.
const MAX_OPEN_POOLS: usize = 256;

#[derive(Clone, Copy, Debug)]
struct Block {
    size: u64,
    requested: u64,
    stack: StackId,
    pending: bool,
    category: Option<(u32, u8)>,
    /// The program's own category (format 1.7), with the tagging thread.
    user: Option<(u32, StringId)>,
}

/// The state of a recording at its latest event, in the trace's ids. See
/// the [module docs](self).
#[derive(Default)]
pub(crate) struct LiveState {
    /// Each device's reserved ranges, each with its stream (the observed
    /// allocator's own bookkeeping, `ObservedBlocks`, keeps them alike).
    ranges: BTreeMap<u32, ReservedRanges<u64>>,
    /// Blocks in use (allocated, or freed and waiting on other streams) by
    /// (device, address).
    blocks: FxHashMap<(u32, u64), Block>,
    /// Each thread's open phases, in the order they began.
    phases: Vec<(u32, StringId)>,
    annotations: Vec<(StringId, StringId)>,
    limits: BTreeMap<u32, LimitEvent>,
    readings: BTreeMap<u32, DeviceMemoryEvent>,
    /// The private pool of each segment in one, by (device, address).
    segment_pools: BTreeMap<(u32, u64), PoolId>,
    /// The captures and pool uses begun and not yet ended, in order.
    open_pools: Vec<PoolEvent>,
    /// The latest event's time.
    pub time_ns: u64,
}

impl LiveState {
    /// Starts from the state a trace starts with.
    pub fn load(&mut self, state: &InitialState) {
        for s in &state.segments {
            self.device(s.device)
                .reserve(s.addr, s.size, s.expandable, s.stream);
            if !s.pool.is_default() {
                self.segment_pools.insert((s.device, s.addr), s.pool);
            }
            for b in s.blocks.iter().filter(|b| b.status != BlockStatus::Free) {
                let block = Block {
                    size: b.size,
                    requested: b.requested,
                    stack: b.stack,
                    pending: b.status == BlockStatus::PendingFree,
                    category: None,
                    user: None,
                };
                self.blocks.insert((s.device, b.addr), block);
            }
        }
    }

    /// Follows one event; returns whether it is an out-of-memory error.
    pub fn apply(&mut self, event: &Event) -> bool {
        self.time_ns = self.time_ns.max(event.time_ns);
        match event.data {
            EventData::Alloc(b) => {
                self.blocks.insert(
                    (b.device, b.addr),
                    Block {
                        size: b.size,
                        requested: b.requested,
                        stack: b.stack,
                        pending: false,
                        category: None,
                        user: None,
                    },
                );
            }
            EventData::FreeRequested(b) => {
                if let Some(block) = self.blocks.get_mut(&(b.device, b.addr)) {
                    block.pending = true;
                }
            }
            EventData::FreeCompleted(b) => {
                self.blocks.remove(&(b.device, b.addr));
            }
            EventData::SegmentAlloc(s) => self
                .device(s.device)
                .reserve(s.addr, s.size, false, s.stream),
            EventData::SegmentMap(s) => self
                .device(s.device)
                .reserve(s.addr, s.size, true, s.stream),
            EventData::SegmentFree(s) | EventData::SegmentUnmap(s) => {
                if let Some(ranges) = self.ranges.get_mut(&s.device) {
                    ranges.release(s.addr, s.size);
                }
                self.segment_pools.remove(&(s.device, s.addr));
            }
            EventData::SegmentPool(s) => {
                self.segment_pools.insert((s.device, s.addr), s.pool);
            }
            EventData::Pool(p) => match p.action() {
                Some(PoolAction::CaptureBegin | PoolAction::UseBegin) => {
                    // A program has a few under way; a runaway one is not
                    // restated whole in every part.
                    if self.open_pools.len() >= MAX_OPEN_POOLS {
                        self.open_pools.remove(0);
                    }
                    self.open_pools.push(p)
                }
                Some(PoolAction::CaptureEnd | PoolAction::UseEnd) => {
                    if let Some(i) = self.open_pools.iter().rposition(|o| {
                        o.device == p.device && o.pool == p.pool && o.thread == p.thread
                    }) {
                        self.open_pools.remove(i);
                    }
                }
                _ => {}
            },
            EventData::PhaseBegin { name, thread } => self.phases.push((thread, name)),
            EventData::PhaseEnd { name, thread } => {
                if let Some(i) = self
                    .phases
                    .iter()
                    .rposition(|&(t, n)| t == thread && n == name)
                {
                    self.phases.remove(i);
                }
            }
            EventData::Annotation { key, value } => {
                if let Some(a) = self.annotations.iter_mut().find(|(k, _)| *k == key) {
                    a.1 = value;
                } else if self.annotations.len() < MAX_ANNOTATIONS {
                    self.annotations.push((key, value));
                }
            }
            EventData::Tag(t) => {
                if let Some(block) = self.blocks.get_mut(&(t.device, t.addr)) {
                    block.category = Some((t.thread, t.code));
                }
            }
            EventData::UserTag(t) => {
                if let Some(block) = self.blocks.get_mut(&(t.device, t.addr)) {
                    block.user = Some((t.thread, t.name));
                }
            }
            EventData::Limit(l) => {
                self.limits.insert(l.device, l);
            }
            EventData::DeviceMemory(d) => {
                self.readings.insert(d.device, d);
            }
            EventData::Oom(_) => return true,
            EventData::EmptyCache(_) | EventData::EventsDropped(_) => {}
            // Kinds a later format adds: this recorder writes none of them.
            _ => {}
        }
        false
    }

    /// A device's reserved ranges.
    fn device(&mut self, device: u32) -> &mut ReservedRanges<u64> {
        self.ranges.entry(device).or_default()
    }

    /// The segments reserved now, each tiled by its blocks: those in use as
    /// they are, the gaps between them free (the allocator merges free
    /// neighbours, so a gap is one free block).
    pub fn initial_state(&self) -> InitialState {
        let mut in_use: Vec<(&(u32, u64), &Block)> = self.blocks.iter().collect();
        in_use.sort_unstable_by_key(|(k, _)| **k);
        let mut next = 0;
        let mut segments = Vec::with_capacity(self.ranges.values().map(ReservedRanges::len).sum());
        let ranges = (self.ranges.iter())
            .flat_map(|(&device, ranges)| ranges.iter().map(move |(addr, r)| (device, addr, r)));
        for (device, addr, r) in ranges {
            let mut blocks = Vec::new();
            let mut at = addr;
            // Blocks before this range (none, unless events were lost) are
            // passed over.
            while next < in_use.len() && *in_use[next].0 < (device, addr) {
                next += 1;
            }
            while next < in_use.len() && *in_use[next].0 < (device, r.end) {
                let (&(_, b_addr), b) = in_use[next];
                next += 1;
                if b_addr < at {
                    continue;
                }
                if b_addr > at {
                    blocks.push(BlockState::free(at, b_addr - at));
                }
                let size = b.size.min(r.end - b_addr);
                blocks.push(BlockState {
                    addr: b_addr,
                    size,
                    requested: b.requested,
                    status: if b.pending {
                        BlockStatus::PendingFree
                    } else {
                        BlockStatus::Allocated
                    },
                    stack: b.stack,
                });
                at = b_addr + size;
            }
            if at < r.end {
                blocks.push(BlockState::free(at, r.end - at));
            }
            segments.push(SegmentState {
                device,
                addr,
                size: r.end - addr,
                stream: r.tag,
                expandable: r.mapped,
                blocks,
                pool: (self.segment_pools.get(&(device, addr)).copied()).unwrap_or_default(),
            });
        }
        InitialState { segments }
    }

    /// The events that restate, at the latest event's time, what else holds
    /// now: open phases (in the order they began), annotations, each
    /// device's latest limit and memory reading, and the categories of the
    /// blocks in use.
    pub fn restatement(&self) -> Vec<Event> {
        let at = |data| Event {
            time_ns: self.time_ns,
            data,
        };
        let mut events = Vec::new();
        for &(thread, name) in &self.phases {
            events.push(at(EventData::PhaseBegin { name, thread }));
        }
        for &(key, value) in &self.annotations {
            events.push(at(EventData::Annotation { key, value }));
        }
        events.extend(self.limits.values().map(|&l| at(EventData::Limit(l))));
        events.extend(self.open_pools.iter().map(|&p| at(EventData::Pool(p))));
        events.extend(
            self.readings
                .values()
                .map(|&d| at(EventData::DeviceMemory(d))),
        );
        let mut tags: Vec<TagEvent> = self
            .blocks
            .iter()
            .filter_map(|(&(device, addr), b)| {
                b.category.map(|(thread, code)| TagEvent {
                    addr,
                    device,
                    thread,
                    code,
                })
            })
            .collect();
        tags.sort_unstable_by_key(|t| (t.device, t.addr));
        events.extend(tags.into_iter().map(|t| at(EventData::Tag(t))));
        let mut user: Vec<UserTagEvent> = self
            .blocks
            .iter()
            .filter_map(|(&(device, addr), b)| {
                b.user.map(|(thread, name)| UserTagEvent {
                    addr,
                    device,
                    thread,
                    name,
                })
            })
            .collect();
        user.sort_unstable_by_key(|t| (t.device, t.addr));
        events.extend(user.into_iter().map(|t| at(EventData::UserTag(t))));
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{BlockEvent, SegmentEvent};

    fn seg(kind: fn(SegmentEvent) -> EventData, addr: u64, size: u64) -> Event {
        Event {
            time_ns: 1,
            data: kind(SegmentEvent {
                addr,
                size,
                stream: 7,
                ..SegmentEvent::default()
            }),
        }
    }

    fn block(kind: fn(BlockEvent) -> EventData, addr: u64, size: u64) -> Event {
        Event {
            time_ns: 2,
            data: kind(BlockEvent {
                addr,
                size,
                requested: size - 1,
                stack: StackId(3),
                ..BlockEvent::default()
            }),
        }
    }

    #[test]
    fn segments_are_tiled_by_their_blocks_and_free_gaps() {
        let mut live = LiveState::default();
        for e in [
            seg(EventData::SegmentAlloc, 1 << 21, 1 << 21),
            block(EventData::Alloc, 1 << 21, 4096),
            block(EventData::Alloc, (1 << 21) + 8192, 4096),
            block(EventData::Alloc, (1 << 21) + 16384, 4096),
            block(EventData::FreeRequested, (1 << 21) + 16384, 4096),
            block(EventData::FreeRequested, (1 << 21) + 8192, 4096),
            block(EventData::FreeCompleted, (1 << 21) + 8192, 4096),
        ] {
            live.apply(&e);
        }
        let state = live.initial_state();
        let s = &state.segments[0];
        assert_eq!(
            (s.addr, s.size, s.stream, s.expandable),
            (1 << 21, 1 << 21, 7, false)
        );
        let tiles: Vec<_> = s
            .blocks
            .iter()
            .map(|b| (b.addr - s.addr, b.size, b.status))
            .collect();
        assert_eq!(
            tiles,
            vec![
                (0, 4096, BlockStatus::Allocated),
                (4096, 12288, BlockStatus::Free),
                (16384, 4096, BlockStatus::PendingFree),
                (20480, (1 << 21) - 20480, BlockStatus::Free),
            ]
        );
        assert_eq!(s.blocks[0].stack, StackId(3));
        assert_eq!(s.blocks[0].requested, 4095);
    }

    #[test]
    fn mapped_pages_merge_and_unmapping_splits_them() {
        let mut live = LiveState::default();
        let mb = 1 << 20;
        for e in [
            seg(EventData::SegmentMap, 10 * mb, 2 * mb),
            seg(EventData::SegmentMap, 12 * mb, 2 * mb),
            seg(EventData::SegmentMap, 14 * mb, 2 * mb),
            seg(EventData::SegmentUnmap, 12 * mb, 2 * mb),
        ] {
            live.apply(&e);
        }
        let ranges: Vec<_> = live
            .initial_state()
            .segments
            .iter()
            .map(|s| (s.addr / mb, s.size / mb, s.expandable))
            .collect();
        assert_eq!(ranges, vec![(10, 2, true), (14, 2, true)]);
        live.apply(&seg(EventData::SegmentUnmap, 10 * mb, 2 * mb));
        live.apply(&seg(EventData::SegmentFree, 14 * mb, 2 * mb));
        assert!(live.initial_state().segments.is_empty());
    }

    #[test]
    fn open_phases_and_tags_are_restated() {
        let mut live = LiveState::default();
        let (serve, req) = (StringId(1), StringId(2));
        live.apply(&seg(EventData::SegmentAlloc, 0, 1 << 20));
        live.apply(&block(EventData::Alloc, 512, 512));
        for data in [
            EventData::PhaseBegin {
                name: serve,
                thread: 0,
            },
            EventData::PhaseBegin {
                name: req,
                thread: 0,
            },
            EventData::PhaseEnd {
                name: req,
                thread: 0,
            },
            EventData::PhaseBegin {
                name: req,
                thread: 1,
            },
            EventData::Tag(TagEvent {
                addr: 512,
                code: 2,
                ..TagEvent::default()
            }),
        ] {
            live.apply(&Event { time_ns: 5, data });
        }
        let kinds: Vec<_> = live.restatement().iter().map(|e| e.data).collect();
        assert_eq!(
            kinds,
            vec![
                EventData::PhaseBegin {
                    name: serve,
                    thread: 0
                },
                EventData::PhaseBegin {
                    name: req,
                    thread: 1
                },
                EventData::Tag(TagEvent {
                    addr: 512,
                    code: 2,
                    ..TagEvent::default()
                }),
            ]
        );
        assert!(live.apply(&Event {
            time_ns: 6,
            data: EventData::Oom(Default::default())
        }));
    }
}
