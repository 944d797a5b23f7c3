//! The explorer's result: what the page draws ([`Explorer`]), and the
//! bounds on what the pass keeps for it ([`ExplorerOptions`]).

use crate::analysis::pauses::IdleGaps;
use crate::replay::FreeSpace;
use crate::replay::categories::Category;
use serde::Serialize;

/// Bounds on what the explorer keeps.
#[derive(Clone, Copy, Debug)]
pub struct ExplorerOptions {
    /// Buckets of the finest series at most (it ends with between half this
    /// and this many).
    pub series_buckets: usize,
    /// Allocations kept one by one at most.
    pub allocation_budget: usize,
    /// Evenly spaced checkpoints (at least this many and at most twice).
    pub even_checkpoints: usize,
    /// Blocks a checkpoint keeps one by one (the largest); the rest are
    /// counted per segment.
    pub checkpoint_blocks: usize,
    /// Segments a checkpoint keeps (the largest); the rest are summed up
    /// (`segments_left_out`), so that a run of 400,000 segments costs the
    /// page what one of this many does.
    pub checkpoint_segments: usize,
    /// OOM checkpoints at most (the first ones).
    pub oom_checkpoints: usize,
    /// Phase instances kept at most, the outermost first.
    pub phase_budget: usize,
    /// Idle gaps kept at most (the longest).
    pub gap_budget: usize,
}

impl Default for ExplorerOptions {
    fn default() -> Self {
        ExplorerOptions {
            series_buckets: 1 << 16,
            allocation_budget: 250_000,
            even_checkpoints: 16,
            checkpoint_blocks: 20_000,
            checkpoint_segments: 10_000,
            oom_checkpoints: 4,
            phase_budget: 10_000,
            gap_budget: crate::analysis::pauses::GAP_BUDGET,
        }
    }
}

/// The lowest, highest and last value of a quantity in a bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Extent {
    /// The lowest value after an event of the bucket.
    pub min: u64,
    /// The highest.
    pub max: u64,
    /// The value after the bucket's last event.
    pub last: u64,
}

impl Extent {
    pub(super) fn of(v: u64) -> Self {
        Extent {
            min: v,
            max: v,
            last: v,
        }
    }

    pub(super) fn add(&mut self, v: u64) {
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.last = v;
    }

    pub(super) fn merge(a: Extent, b: Extent) -> Extent {
        Extent {
            min: a.min.min(b.min),
            max: a.max.max(b.max),
            last: b.last,
        }
    }
}

/// One bucket of consecutive events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SeriesBucket {
    /// The time of its first event.
    pub start_ns: u64,
    /// The time of its last event.
    pub end_ns: u64,
    /// Allocated bytes (blocks the program holds).
    pub allocated: Extent,
    /// Reserved bytes (segments).
    pub reserved: Extent,
    /// Reserved bytes in no block in use: what the cache holds free.
    pub cached_free: Extent,
    /// Reserved bytes in private pools (CUDA graphs, `MemPool`s).
    pub pools: Extent,
}

impl SeriesBucket {
    pub(super) fn merge(a: &SeriesBucket, b: &SeriesBucket) -> SeriesBucket {
        SeriesBucket {
            start_ns: a.start_ns,
            end_ns: b.end_ns,
            allocated: Extent::merge(a.allocated, b.allocated),
            reserved: Extent::merge(a.reserved, b.reserved),
            cached_free: Extent::merge(a.cached_free, b.cached_free),
            pools: Extent::merge(a.pools, b.pools),
        }
    }
}

/// Memory over the events, at one resolution.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Series {
    /// Events per bucket (a power of two); bucket `b` holds the window's
    /// events `b × bucket_events` to `(b + 1) × bucket_events - 1`.
    pub bucket_events: u64,
    /// The buckets, the last one possibly partial.
    pub buckets: Vec<SeriesBucket>,
    /// Whether the trace has private pools (else every bucket's `pools`
    /// is 0, and the page draws none).
    pub has_pools: bool,
}

/// A phase instance with its event indices.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PhaseMark {
    /// The phase's own name.
    pub name: String,
    /// Nesting depth (0 for a top-level phase).
    pub depth: u32,
    /// The index of its begin event.
    pub begin_index: u64,
    /// The index of its end event (the last event when it never ended).
    pub end_index: u64,
    /// When it began.
    pub begin_ns: u64,
    /// When it ended (the last event's time when it never did).
    pub end_ns: u64,
}

/// One allocation, from the moment it was made to the moment the program
/// freed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AllocationRecord {
    /// The index of its allocation event (the window's first event when it
    /// was live before the window opened).
    pub alloc_index: u64,
    /// Whether it was live before the window opened (its allocation is not
    /// in the window, or not in the trace).
    pub initial: bool,
    /// The time of it.
    pub alloc_ns: u64,
    /// The index of the event that freed it (the caller's free), if any.
    pub free_index: Option<u64>,
    /// The time of it.
    pub free_ns: Option<u64>,
    /// Block size.
    pub size: u64,
    /// The size asked for.
    pub requested: u64,
    /// Its device address.
    pub addr: u64,
    /// Its stack, an index into [`Explorer::stacks`].
    pub stack: u32,
    /// Its site, an index into [`Explorer::sites`].
    pub site: u32,
    /// The phase path it was made in, an index into
    /// [`Explorer::phase_paths`], if any.
    pub phase: Option<u32>,
    /// What it held (as the whole pass settled it).
    pub category: Category,
    /// Whether the program said so (a tag) rather than replay inferring it.
    pub exact: bool,
}

/// Why a moment is a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointKind {
    /// The most allocated memory.
    AllocatedPeak,
    /// The most reserved memory.
    ReservedPeak,
    /// An out-of-memory event.
    Oom,
    /// The last event.
    End,
    /// One of the evenly spaced moments.
    Even,
}

/// A block of a segment at a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct CheckpointBlock {
    /// Its offset in the segment.
    pub offset: u64,
    /// Its size.
    pub size: u64,
    /// Freed by the program, waiting for another stream's work before the
    /// cache may reuse it (PyTorch's `active_pending_free`).
    pub pending_free: bool,
    /// Its stack, an index into [`Explorer::stacks`].
    pub stack: u32,
    /// Its record in [`Explorer::allocations`], when kept.
    pub allocation: Option<u32>,
}

/// A segment at a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CheckpointSegment {
    /// Its address.
    pub addr: u64,
    /// Its size.
    pub size: u64,
    /// Whether it is (part of) an expandable segment.
    pub expandable: bool,
    /// Bytes of blocks in use (allocated or pending free).
    pub used_bytes: u64,
    /// Blocks in use.
    pub used_blocks: u64,
    /// The largest free range inside it.
    pub largest_free: u64,
    /// The blocks kept one by one, by offset.
    pub blocks: Vec<CheckpointBlock>,
}

/// The allocator's state at one moment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Checkpoint {
    /// Why this moment was kept (several reasons may meet).
    pub kinds: Vec<CheckpointKind>,
    /// The index of the event after which the state is taken.
    pub index: u64,
    /// Its time.
    pub time_ns: u64,
    /// Allocated bytes.
    pub allocated: u64,
    /// Bytes freed by the program but not yet back in the cache.
    pub pending_free: u64,
    /// Reserved bytes.
    pub reserved: u64,
    /// The free space of the segments.
    pub free: FreeSpace,
    /// `1 - largest free block / free bytes`.
    pub external_fragmentation: f64,
    /// The segments, by address.
    pub segments: Vec<CheckpointSegment>,
    /// Blocks in use not kept one by one (the smallest, past the budget).
    pub blocks_left_out: u64,
    /// Segments not kept (the smallest, past the budget), summed up.
    pub segments_left_out: LeftOutSegments,
}

/// The segments a checkpoint left out, summed up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LeftOutSegments {
    /// How many.
    pub count: u64,
    /// Their bytes.
    pub reserved: u64,
    /// Their bytes in blocks in use.
    pub used: u64,
}

/// Everything the explorer draws.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Explorer {
    /// The index of the window's first event.
    pub first_index: u64,
    /// Events in the window.
    pub events: u64,
    /// The time of the first event.
    pub start_ns: u64,
    /// The time of the last event.
    pub end_ns: u64,
    /// Memory over the events.
    pub series: Series,
    /// Pauses, for a busy-time axis.
    pub idle: IdleGaps,
    /// Phase instances (at most the budget, the outermost first).
    pub phases: Vec<PhaseMark>,
    /// Phase instances left out past the budget.
    pub phases_left_out: u64,
    /// The allocations kept one by one, by allocation index.
    pub allocations: Vec<AllocationRecord>,
    /// Every allocation of at least this many bytes is kept.
    pub allocation_threshold: u64,
    /// Allocations in the window, kept or not.
    pub allocations_total: u64,
    /// Stacks, innermost frame first, from the site's telling frame on:
    /// indices into [`frames`](Self::frames).
    pub stacks: Vec<Vec<u32>>,
    /// Frames, `function (file:line)`.
    pub frames: Vec<String>,
    /// Site names.
    pub sites: Vec<String>,
    /// Phase paths (`iter3/forward`) that allocations were made in.
    pub phase_paths: Vec<String>,
    /// Allocator states, by index.
    pub checkpoints: Vec<Checkpoint>,
}

impl Explorer {
    /// The busy time of an event: its time since the first event, less
    /// what the idle gaps up to it were collapsed by.
    pub fn busy_ns(&self, index: u64, time_ns: u64) -> u64 {
        let collapsed: u64 = self
            .idle
            .gaps
            .iter()
            .take_while(|g| g.index <= index)
            .map(|g| g.gap_ns - self.idle.threshold_ns)
            .sum();
        time_ns
            .saturating_sub(self.start_ns)
            .saturating_sub(collapsed)
    }
}
