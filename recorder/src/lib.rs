//! # vramtrace-recorder
//!
//! The recording half of vramtrace, above the trace format
//! ([`vramtrace_format`], re-exported here as [`format`](mod@format)):
//!
//! - [`recorder`]: a caching allocator that records every event it causes,
//!   with time, thread and stack, to a trace file; and the observer that
//!   records another allocator's events (PyTorch's).
//! - [`allocator`], [`device`] and [`workload`]: the caching allocator with
//!   PyTorch's policy, its devices and a synthetic workload, from their own
//!   crate ([`vramtrace_allocator`]), re-exported here.
//!
//! A program that only reads or writes traces needs `vramtrace-format`
//! alone, and one that simulates `vramtrace-allocator`: this crate adds the
//! clock, the stack unwinder and the writer thread.

#![warn(missing_docs)]

pub mod recorder;

/// The caching allocator, from its own crate ([`vramtrace_allocator`]):
/// code that says `allocator::CachingAllocator` keeps working.
pub use vramtrace_allocator as allocator;
pub use vramtrace_allocator::{device, workload};

/// The trace format, from its own crate: code that says `format::TraceWriter`
/// keeps working.
pub use vramtrace_format as format;
