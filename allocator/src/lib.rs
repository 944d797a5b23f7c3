//! # vramtrace-allocator
//!
//! The caching allocator with PyTorch's policy, in one place: the recorder
//! runs it in replacement mode and follows its block sizes in observer mode
//! ([`ObservedBlocks`]), and the analyzer simulates other GPUs and settings
//! with it. It writes the events it causes to a
//! [`TraceWriter`](vramtrace_format::TraceWriter) or a caller's buffer, and
//! needs no stack unwinder: a program that simulates depends on this crate
//! and the format alone.
//!
//! - The crate's root: [`CachingAllocator`], with the policy of PyTorch's
//!   `CUDACachingAllocator` (torch 2.x defaults; `docs/allocator.md` tells
//!   it), generic over the [`DeviceMemory`](device::DeviceMemory) it carves
//!   segments from and reporting every action as an
//!   [`EventData`](vramtrace_format::EventData); its settings ([`AllocatorConfig`], read from
//!   `PYTORCH_CUDA_ALLOC_CONF`), and [`ObservedBlocks`], the block sizes of
//!   an allocator seen only through its events.
//! - [`device`]: the devices the allocator runs on: a simulated one, and
//!   CUDA behind the `cuda` feature.
//! - [`workload`]: a deterministic synthetic training loop on a simulated
//!   device, and a slow disk ([`workload::SlowDisk`]), for fixtures, tests
//!   and benchmarks.

#![warn(missing_docs)]

mod allocator;
pub mod device;
pub mod workload;

pub use allocator::*;

// The modules say `crate::format::...`, as they did inside the recorder.
use vramtrace_format as format;
