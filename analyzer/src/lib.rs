//! # vramtrace
//!
//! Offline analysis of GPU caching-allocator traces.

pub mod input;
pub mod snapshot;
