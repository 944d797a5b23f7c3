//! The sink's ABI: the structures the observer shim passes and the table of
//! functions it calls, `#[repr(C)]`. cbindgen reads this file alone into
//! the shim's header (`python/vramtrace/shim/vramtrace_sink.h`; see
//! `tests/sink_header.rs`): what the C++ side sees is here and nowhere else.

use super::*;

/// The version of [`TorchSink`] and the structures it passes; the shim
/// refuses a sink of another version.
pub const SINK_ABI: u32 = 5;

/// [`TorchEvent::kind`] of the snapshot marker; other kinds are
/// [`EventKind`] codes.
pub const KIND_SNAPSHOT: u32 = 100;

/// One trace entry of PyTorch's allocator, as the shim passes it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TorchEvent {
    /// An [`EventKind`] code (block, segment and `oom` kinds), or
    /// [`KIND_SNAPSHOT`].
    pub kind: u32,
    /// The CUDA device index.
    pub device: i32,
    /// The address; for `oom`, the device's free bytes.
    pub addr: u64,
    /// The requested size (blocks), the range's size (segments), the
    /// request (`oom`).
    pub size: u64,
    /// The stream (`cudaStream_t` as an integer).
    pub stream: u64,
    /// The CPU's time-stamp counter when PyTorch made the entry, or 0 (see
    /// [`ObservedEvent::counter`]).
    pub counter: u64,
    /// NULL, or the name of the autograd node the calling thread is running
    /// (for allocations of threads without Python frames).
    pub context: *const c_char,
    /// The pool of the block or segment (PyTorch's `TraceEntry::mempool_`,
    /// ABI 5): `(0, 0)` for the default pools, or where the torch the shim
    /// was built against does not say.
    pub pool: [u64; 2],
}

/// A block of a [`TorchSegment`], in address order.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TorchBlock {
    pub size: u64,
    pub requested: u64,
    /// 0 free, 1 allocated, 2 freed but in use on another stream.
    pub state: u32,
    pub reserved: u32,
}

/// A segment of the allocator's snapshot, with its blocks.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TorchSegment {
    pub device: i32,
    /// Non-zero for an expandable segment (`size` is then its mapped size).
    pub expandable: u32,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub blocks: *const TorchBlock,
    pub block_count: u64,
    /// The segment's pool (`SegmentInfo::owner_private_pool_id`, ABI 5).
    pub pool: [u64; 2],
}

/// The functions the shim calls. See the [module docs](self).
#[repr(C)]
pub struct TorchSink {
    /// [`SINK_ABI`].
    pub abi: u32,
    /// A trace entry (called under PyTorch's allocator lock). Returns 1
    /// when the library wants the device's memory right after it (ABI 4):
    /// the shim then measures it (`cudaMemGetInfo`) and calls
    /// [`device_memory`](Self::device_memory) before it returns to PyTorch.
    pub event: extern "C" fn(*const TorchEvent) -> u32,
    /// A segment of the snapshot taken at start.
    pub segment: extern "C" fn(*const TorchSegment),
    /// The snapshot's segments are all given.
    pub snapshot_done: extern "C" fn(),
    /// A `record_function` range began (`begin` 1) or ended (0).
    pub phase: extern "C" fn(c_int, *const c_char),
    /// Tags of one device's blocks: [`vramtrace_observe_tag`] (the shim
    /// tags the gradients it watches through it, ABI 3).
    pub tag: unsafe extern "C" fn(c_int, *const u64, *const u8, usize) -> c_int,
    /// A device's free and total bytes, measured by the shim when
    /// [`event`](Self::event) asked: [`vramtrace_observe_device_memory`]
    /// (ABI 4).
    pub device_memory: extern "C" fn(c_int, u64, u64) -> c_int,
}

// The layout of the sink's structures, which the shim's C++ asserts too
// (python/vramtrace/shim/torch_observer.cpp) and tests/sink_header.rs writes
// into the header it includes: changing it is a new SINK_ABI.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<TorchEvent>() == 64);
    assert!(offset_of!(TorchEvent, device) == 4);
    assert!(offset_of!(TorchEvent, addr) == 8);
    assert!(offset_of!(TorchEvent, size) == 16);
    assert!(offset_of!(TorchEvent, stream) == 24);
    assert!(offset_of!(TorchEvent, counter) == 32);
    assert!(offset_of!(TorchEvent, context) == 40);
    assert!(offset_of!(TorchEvent, pool) == 48);
    assert!(size_of::<TorchBlock>() == 24);
    assert!(offset_of!(TorchBlock, requested) == 8);
    assert!(offset_of!(TorchBlock, state) == 16);
    assert!(offset_of!(TorchBlock, reserved) == 20);
    assert!(size_of::<TorchSegment>() == 64);
    assert!(offset_of!(TorchSegment, expandable) == 4);
    assert!(offset_of!(TorchSegment, addr) == 8);
    assert!(offset_of!(TorchSegment, size) == 16);
    assert!(offset_of!(TorchSegment, stream) == 24);
    assert!(offset_of!(TorchSegment, blocks) == 32);
    assert!(offset_of!(TorchSegment, block_count) == 40);
    assert!(offset_of!(TorchSegment, pool) == 48);
    assert!(size_of::<TorchSink>() == 56);
    assert!(offset_of!(TorchSink, event) == 8);
    assert!(offset_of!(TorchSink, segment) == 16);
    assert!(offset_of!(TorchSink, snapshot_done) == 24);
    assert!(offset_of!(TorchSink, phase) == 32);
    assert!(offset_of!(TorchSink, tag) == 40);
    assert!(offset_of!(TorchSink, device_memory) == 48);
};
