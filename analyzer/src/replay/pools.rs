//! Memory pools (trace format 1.6): the private pools of CUDA graphs,
//! shared graph pools and `MemPool`s, followed from `segment_pool` events
//! (which segment belongs to which pool) and `pool` events (captures and
//! `use_mem_pool` blocks begun and ended, a pool's users). Every block lies
//! in a segment, so its pool is its segment's. A trace without pools pays
//! nothing here but a branch per block on its segment's pool.
//!
//! What contradicts PyTorch's rules is counted as an inconsistency, once
//! per event, never fatal: a capture (or block) still under way when the
//! trace ends, a segment reserved for a pool after its last user let it go,
//! a pool ended or let go that nothing began, held or reserved.

use super::{Applied, InconsistencyKind, ReplayState};

/// The most captures under way at once that the replay follows: a program
/// has a few; a hostile trace's millions of unended begins would make each
/// end a long search. Past it, the oldest is dropped.
pub(crate) const MAX_OPEN_CAPTURES: usize = 256;
use serde::Serialize;
use vramtrace_format::{PoolAction, PoolEvent, PoolId, SegmentPoolEvent};

/// One private pool as the replay follows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PoolTally {
    /// The pool (PyTorch's `MempoolId_t`).
    #[serde(serialize_with = "pool_pair")]
    pub id: PoolId,
    /// Bytes of its segments now.
    pub reserved: u64,
    /// Bytes of its blocks in use now (allocated, or freed and waiting for
    /// other streams).
    pub live: u64,
    /// The most its segments held at once.
    pub peak_reserved: u64,
    /// Segments reserved for it now.
    pub segments: u64,
    /// Captures begun in it so far (each a CUDA graph).
    pub captures: u32,
    /// `use_mem_pool` blocks begun in it so far.
    pub uses: u32,
    /// Captures and blocks under way now.
    pub open: u32,
    /// Its users now, as PyTorch counts them (captures, blocks, a
    /// `MemPool`), where the trace says; 0 or less: nothing holds it.
    pub users: i64,
    /// Whether a `MemPool` object made it (a `hold` event).
    pub mem_pool: bool,
    /// Whether its users fell to none at some point (its free segments
    /// could go back to the device from then on).
    pub released: bool,
    /// Whether the trace says how it is used (any `pool` event), rather than
    /// only which segments it has.
    pub followed: bool,
}

impl PoolTally {
    /// Bytes of its segments free now.
    pub fn free(&self) -> u64 {
        self.reserved.saturating_sub(self.live)
    }

    /// What made it, in words: a graph's own pool, a pool graphs share
    /// (`graph_pool_handle()`), or a `MemPool`.
    pub fn kind(&self) -> PoolKind {
        if self.mem_pool {
            PoolKind::MemPool
        } else if self.id.made_by_capture() {
            PoolKind::Graph
        } else {
            PoolKind::Shared
        }
    }
}

/// What made a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolKind {
    /// A CUDA graph's capture, for itself (`(n, 0)`).
    Graph,
    /// `graph_pool_handle()` (or a `MemPool`'s id) given to captures, which
    /// share it (`(0, n)`, no `MemPool` seen).
    Shared,
    /// `torch.cuda.MemPool()`.
    MemPool,
}

fn pool_pair<S: serde::Serializer>(id: &PoolId, s: S) -> Result<S::Ok, S::Error> {
    (id.0, id.1).serialize(s)
}

impl ReplayState {
    /// The private pools met so far, in the order they were met (a block's
    /// or segment's pool index `n` is the `n - 1`th).
    pub fn pools(&self) -> &[PoolTally] {
        &self.pools
    }

    /// Bytes reserved in private pools now (every pool's `reserved`).
    #[inline]
    pub fn pools_reserved(&self) -> u64 {
        self.pools_reserved
    }

    /// Whether the trace has any private pool or pool event so far.
    #[inline]
    pub fn has_pools(&self) -> bool {
        !self.pools.is_empty()
    }

    /// The pool index of the segment holding `addr`: 0 for the default
    /// pools (and outside every segment).
    pub fn pool_at(&self, addr: u64) -> u16 {
        if self.pools.is_empty() {
            return 0;
        }
        self.segments.holding_ref(addr).map_or(0, |s| s.pool)
    }

    /// The index of a pool met so far.
    pub fn pool_index_of(&self, id: PoolId) -> Option<u16> {
        self.pool_indices.get(&id).copied()
    }

    /// The pool with this index (0: the default pools).
    pub fn pool_id(&self, index: u16) -> PoolId {
        (index as usize)
            .checked_sub(1)
            .and_then(|i| self.pools.get(i))
            .map_or(PoolId::DEFAULT, |p| p.id)
    }

    /// The index of a pool, met now if new; `None` past what an index holds
    /// (a hostile trace's millions of pools: the rest read as the default
    /// pools').
    pub(super) fn pool_index(&mut self, id: PoolId) -> Option<u16> {
        if id.is_default() {
            return Some(0);
        }
        if let Some(&i) = self.pool_indices.get(&id) {
            return Some(i);
        }
        let i = u16::try_from(self.pools.len() + 1).ok()?;
        self.pools.push(PoolTally {
            id,
            ..PoolTally::default()
        });
        self.pool_indices.insert(id, i);
        Some(i)
    }

    /// Adds (`true`) or takes away a live block's bytes from its pool.
    #[inline]
    pub(super) fn pool_live(&mut self, pool: u16, bytes: u64, add: bool) {
        if let Some(p) = (pool as usize)
            .checked_sub(1)
            .and_then(|i| self.pools.get_mut(i))
        {
            if add {
                p.live += bytes;
            } else {
                p.live = p.live.saturating_sub(bytes);
            }
        }
    }

    /// A segment left the state: its bytes leave its pool.
    pub(super) fn pool_segment_gone(&mut self, pool: u16, bytes: u64) {
        if let Some(p) = (pool as usize)
            .checked_sub(1)
            .and_then(|i| self.pools.get_mut(i))
        {
            let gone = p.reserved.min(bytes);
            p.reserved -= gone;
            p.segments = p.segments.saturating_sub(1);
            self.pools_reserved -= gone;
        }
    }

    /// A segment of the initial state (or one just reserved) belongs to
    /// `id`: it and its live blocks move to the pool.
    pub(super) fn assign_segment(&mut self, start: u64, id: PoolId) -> bool {
        let Some(index) = self.pool_index(id) else {
            return true;
        };
        let Some(seg) = self.segments.get_mut(start) else {
            return false;
        };
        if seg.pool == index {
            return true;
        }
        let (old, size, live) = (seg.pool, seg.end - seg.start, seg.live_bytes);
        seg.pool = index;
        if old != 0 {
            self.pool_segment_gone(old, size);
            self.pool_live(old, live, false);
        }
        if let Some(p) = (index as usize)
            .checked_sub(1)
            .and_then(|i| self.pools.get_mut(i))
        {
            p.reserved += size;
            p.segments += 1;
            p.live += live;
            p.peak_reserved = p.peak_reserved.max(p.reserved);
            self.pools_reserved += size;
        }
        true
    }

    pub(super) fn segment_pool(
        &mut self,
        index: u64,
        time_ns: u64,
        s: &SegmentPoolEvent,
    ) -> Applied {
        // Reserved for a pool nothing holds any more (and no capture or
        // block of it under way): PyTorch would have made it anew, users and
        // all, so the trace lost that pool's begin.
        let after_release = self
            .pool_indices
            .get(&s.pool)
            .and_then(|&i| self.pools.get(i as usize - 1))
            .is_some_and(|p| p.followed && p.released && p.users <= 0 && p.open == 0);
        if after_release {
            self.record(
                InconsistencyKind::PoolUsedAfterRelease,
                index,
                time_ns,
                s.addr,
            );
        }
        if !self.assign_segment(s.addr, s.pool) {
            self.record(InconsistencyKind::UnknownSegment, index, time_ns, s.addr);
            return Applied::Inconsistent;
        }
        Applied::Other
    }

    pub(super) fn pool_event(&mut self, index: u64, time_ns: u64, e: &PoolEvent) -> Applied {
        if e.pool.is_default() {
            // A capture into a pool of the graph's own: PyTorch names it only
            // when the capture ends (its `capture_end` carries the id).
            if e.action() == Some(PoolAction::CaptureBegin) {
                if self.anonymous_captures.len() >= MAX_OPEN_CAPTURES {
                    self.anonymous_captures.remove(0);
                }
                self.anonymous_captures.push((e.stream, e.thread));
            }
            return Applied::Other;
        }
        // The end of such a capture: the capture was this pool's.
        let anonymous = if e.action() == Some(PoolAction::CaptureEnd)
            && self
                .pool_indices
                .get(&e.pool)
                .is_none_or(|&i| self.pools[i as usize - 1].open == 0)
        {
            let found = self
                .anonymous_captures
                .iter()
                .rposition(|&(stream, _)| stream == e.stream);
            found.map(|i| self.anonymous_captures.remove(i)).is_some()
        } else {
            false
        };
        let known = self.pool_indices.contains_key(&e.pool);
        let Some(i) = self.pool_index(e.pool) else {
            return Applied::Other;
        };
        let Some(p) = self.pools.get_mut(i as usize - 1) else {
            return Applied::Other;
        };
        p.followed = true;
        let mut unknown = false;
        match e.action() {
            Some(PoolAction::CaptureBegin) => {
                p.captures += 1;
                p.open += 1;
                p.users += 1;
            }
            Some(PoolAction::UseBegin) => {
                p.uses += 1;
                p.open += 1;
                p.users += 1;
            }
            Some(PoolAction::CaptureEnd) if anonymous => {
                p.captures += 1;
                p.users += 1;
            }
            Some(PoolAction::CaptureEnd) => {
                unknown = !known || p.open == 0;
                p.open = p.open.saturating_sub(1);
            }
            Some(PoolAction::UseEnd) => {
                unknown = !known || p.open == 0;
                p.open = p.open.saturating_sub(1);
                p.users -= 1;
            }
            Some(PoolAction::Hold) => {
                p.mem_pool = true;
                p.users += 1;
            }
            Some(PoolAction::Release) => {
                unknown = !known;
                p.users -= 1;
            }
            // An action a later version adds: nothing this one knows.
            _ => {}
        }
        if p.users <= 0
            && p.open == 0
            && matches!(e.action(), Some(PoolAction::Release | PoolAction::UseEnd))
        {
            p.released = true;
        }
        if unknown {
            self.record(InconsistencyKind::UnknownPool, index, time_ns, 0);
        }
        Applied::Other
    }

    /// At the pass's end: each capture or block still under way is one
    /// inconsistency (a capture that never ended).
    pub(super) fn close_pools(&mut self) {
        let open: u32 =
            self.pools.iter().map(|p| p.open).sum::<u32>() + self.anonymous_captures.len() as u32;
        for _ in 0..open.min(64) {
            self.inconsistent(InconsistencyKind::CaptureNeverEnded, 0);
        }
    }
}
