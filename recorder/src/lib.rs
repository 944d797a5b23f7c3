//! # vramtrace-recorder
//!
//! The recording half of vramtrace:
//!
//! - [`format`]: the trace file format (MessagePack records, columnar event
//!   chunks), with [`format::TraceWriter`] and [`format::TraceReader`]. The
//!   analyzer depends on this module alone.
//! - [`allocator`]: a caching allocator with PyTorch's policy, generic over
//!   the device it carves memory from. It serves recording and offline
//!   simulation alike.
//! - [`device`]: the devices the allocator runs on: a simulated one, and CUDA
//!   behind the `cuda` feature.
//! - [`recorder`]: a caching allocator that records every event it causes,
//!   with time, thread and stack, to a trace file.
//! - [`workload`]: a deterministic synthetic training loop on a simulated
//!   device, for fixtures, tests and benchmarks.

#![warn(missing_docs)]

pub mod allocator;
pub mod device;
pub mod format;
pub mod recorder;
pub mod workload;
