//! # vramtrace-recorder
//!
//! The recording half of vramtrace, above the trace format
//! ([`vramtrace_format`], re-exported here as [`format`](mod@format)):
//!
//! - [`allocator`]: a caching allocator with PyTorch's policy, generic over
//!   the device it carves memory from. It serves recording and offline
//!   simulation alike.
//! - [`device`]: the devices the allocator runs on: a simulated one, and CUDA
//!   behind the `cuda` feature.
//! - [`recorder`]: a caching allocator that records every event it causes,
//!   with time, thread and stack, to a trace file.
//! - [`workload`]: a deterministic synthetic training loop on a simulated
//!   device, and a slow disk ([`workload::SlowDisk`]), for fixtures, tests
//!   and benchmarks.
//!
//! A program that only reads or writes traces needs `vramtrace-format`
//! alone: this crate adds the stack unwinder and the devices.

#![warn(missing_docs)]

pub mod allocator;
pub mod device;
pub mod recorder;
pub mod workload;

/// The trace format, from its own crate: code that says `format::TraceWriter`
/// keeps working.
pub use vramtrace_format as format;
