//! Observer mode: PyTorch's own caching allocator runs unchanged and
//! vramtrace records what it reports.
//!
//! The C++ shim that ships with the Python package
//! (`vramtrace/shim/torch_observer.cpp`, built against the installed torch)
//! attaches an allocator trace tracker and calls the functions of
//! [`vramtrace_torch_sink`] for each trace entry, with PyTorch's allocator
//! lock held. The structures of that ABI ([`TorchSink`] and what it passes)
//! reach the C++ side as `vramtrace/shim/vramtrace_sink.h`, which cbindgen
//! generates from `observe/abi.rs` alone (`tests/sink_header.rs` checks the
//! committed one). Each device gets an [`Observer`], created at its first event,
//! writing its own trace file; the hot path is one atomic load to find it.
//!
//! Starting mid-run: [`vramtrace_observe_start`] with `state=pending` arms
//! every device; the shim then takes the allocator's snapshot, which emits
//! a marker into each device's event stream, under the same lock as the
//! state it reads. Events before a device's marker are part of the state and
//! are left out; events after it follow the state, which the shim delivers
//! segment by segment ([`TorchSink::segment`], then
//! [`TorchSink::snapshot_done`]).
//!
//! Observers are never freed (a few hundred bytes each once finished: their
//! buffers and tables are released): the hot path reads a raw pointer to
//! one without any reference count, so it must stay valid after
//! [`vramtrace_observe_stop`].
//!
//! The parts: `abi` (what the shim sees), `route` (each device's slot and
//! the sink's functions), `session` (the recording in progress and its C
//! functions), `config` (the start request) and `iterations` (training
//! iterations as phases).

pub mod abi;
mod config;
mod iterations;
mod route;
mod session;

pub use abi::{KIND_SNAPSHOT, SINK_ABI, TorchBlock, TorchEvent, TorchSegment, TorchSink};
use config::*;
use iterations::*;
pub use route::vramtrace_torch_sink;
use route::*;
pub use session::*;

use crate::python::nogil;
use crate::{MAX_DEVICES, c_str, report, stack_setting, trace_path, traces};
use recorder::allocator::AllocatorConfig;
use recorder::format::{
    BlockState, BlockStatus, DeviceInfo, EventKind, InitialState, PoolAction, PoolEvent, PoolId,
    SegmentState, StackId,
};
use recorder::{
    FrameSource, KeepLast, ObservedEvent, Observer, ObserverSetup, RecorderOptions, StartState,
    Trace, capture_frames, thread_id,
};
use std::collections::BTreeMap;
use std::ffi::{CStr, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(test)]
mod tests;
