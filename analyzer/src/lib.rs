//! # vramtrace
//!
//! Offline analysis of GPU caching-allocator traces: the data flows one way,
//! from a trace file (or a PyTorch snapshot) through the decoder and the
//! replay engine to analyses, and from analyses to tables, JSON and charts.
//!
//! - [`replay`]: the allocator's state reconstructed event by event.
//! - [`analysis`]: analyses fed by one replay pass (summary, fragmentation,
//!   leaks), site folding, phases and `--from`/`--to` windows.
//! - [`units`], [`table`]: human output.
//! - [`cli`]: the `vramtrace` command line, one module per command.

#![warn(missing_docs)]

pub mod analysis;
pub mod cli;
pub mod progress;
pub mod replay;
pub mod table;
#[cfg(test)]
pub(crate) mod testing;
pub mod units;
