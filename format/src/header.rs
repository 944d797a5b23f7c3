//! The trace's metadata records: header, initial state and footer.

use super::event::{EventKind, KindCounts, PoolId};
use super::symbols::StackId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Who recorded the trace, where, and on what.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Header {
    /// Format major version (readers reject one they do not know).
    pub version_major: u16,
    /// Format minor version (readers accept newer minors, skipping what they do not know).
    pub version_minor: u16,
    /// The program that wrote the trace, e.g. `vramtrace-recorder` or `vramtrace import`.
    pub producer: String,
    /// Its version.
    pub producer_version: String,
    /// Wall-clock time of the trace start, in nanoseconds since the Unix epoch
    /// (0 when unknown). Event times are relative to it.
    pub start_unix_ns: u64,
    /// The recorded process.
    pub process: ProcessInfo,
    /// The devices the process used.
    pub devices: Vec<DeviceInfo>,
    /// The allocator's settings, as `PYTORCH_CUDA_ALLOC_CONF`-style keys and values.
    pub allocator_settings: BTreeMap<String, String>,
    /// Free-form facts about the trace's origin (e.g. `source = torch-snapshot`).
    pub metadata: BTreeMap<String, String>,
}

/// The recorded process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct ProcessInfo {
    /// Process id (0 when unknown).
    pub pid: u32,
    /// Host name.
    pub hostname: String,
    /// Global rank (`RANK`) in a distributed job.
    pub rank: Option<u32>,
    /// Rank within the node (`LOCAL_RANK`).
    pub local_rank: Option<u32>,
    /// Number of ranks (`WORLD_SIZE`).
    pub world_size: Option<u32>,
}

impl ProcessInfo {
    /// This process: pid, host name, and the launcher's rank variables when set.
    pub fn current() -> Self {
        fn env_u32(name: &str) -> Option<u32> {
            std::env::var(name).ok()?.trim().parse().ok()
        }
        ProcessInfo {
            pid: std::process::id(),
            hostname: hostname(),
            rank: env_u32("RANK"),
            local_rank: env_u32("LOCAL_RANK"),
            world_size: env_u32("WORLD_SIZE"),
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|s| s.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default()
}

/// A device the process used.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceInfo {
    /// Device index, as in events.
    pub index: u32,
    /// Device name, e.g. `NVIDIA H200` or `simulated`.
    pub name: String,
    /// Total device memory in bytes.
    pub total_memory: u64,
}

/// What the allocator held when recording began: needed for traces that start
/// mid-run, such as imports of PyTorch's ring-buffer snapshots.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InitialState {
    /// The segments reserved at the start, with their blocks.
    pub segments: Vec<SegmentState>,
}

/// A reserved segment and the blocks that tile it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SegmentState {
    /// Device index.
    pub device: u32,
    /// Start address.
    pub addr: u64,
    /// Size in bytes (for an expandable segment: the mapped size).
    pub size: u64,
    /// The stream whose pool owns it.
    pub stream: u64,
    /// Whether it is an expandable segment.
    pub expandable: bool,
    /// Its blocks, in address order.
    pub blocks: Vec<BlockState>,
    /// The pool it belongs to (format 1.6; absent for the default pools,
    /// and in older traces, whose segments all are).
    #[serde(skip_serializing_if = "pool_is_default")]
    pub pool: PoolId,
}

fn pool_is_default(pool: &PoolId) -> bool {
    pool.is_default()
}

/// A block of a segment in an [`InitialState`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct BlockState {
    /// Start address.
    pub addr: u64,
    /// Block size in bytes.
    pub size: u64,
    /// The size the caller asked for (0 for a free block).
    pub requested: u64,
    /// Whether the block is free, allocated, or freed but still in use.
    pub status: BlockStatus,
    /// The stack that allocated it.
    pub stack: StackId,
}

impl BlockState {
    /// A free block: cached, its request and stack none.
    pub fn free(addr: u64, size: u64) -> Self {
        BlockState {
            addr,
            size,
            requested: 0,
            status: BlockStatus::Free,
            stack: StackId::NONE,
        }
    }
}

/// The state of a block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum BlockStatus {
    /// Cached, free for reuse.
    #[default]
    Free,
    /// Handed to the caller.
    Allocated,
    /// Freed by the caller, waiting for uses on other streams to finish.
    PendingFree,
}

/// Totals written when a trace is closed cleanly.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Footer {
    /// Number of events, all kinds.
    pub events: u64,
    /// Number of event chunks.
    pub chunks: u64,
    /// Events by kind name.
    pub counts: BTreeMap<String, u64>,
    /// Time of the last event, in ns since the trace start.
    pub end_time_ns: u64,
}

impl Footer {
    /// The footer's counts as [`KindCounts`], ignoring kinds this version does not know.
    pub fn kind_counts(&self) -> KindCounts {
        let mut counts = KindCounts::default();
        for kind in EventKind::ALL {
            counts.0[kind as usize] = self.counts.get(kind.name()).copied().unwrap_or(0);
        }
        counts
    }
}
