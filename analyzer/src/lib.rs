//! # vramtrace
//!
//! Offline analysis of GPU caching-allocator traces.
