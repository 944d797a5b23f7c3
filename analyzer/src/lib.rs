//! # vramtrace
//!
//! Offline analysis of GPU caching-allocator traces: the data flows one way,
//! from a trace file (or a PyTorch snapshot) through the decoder and the
//! replay engine to analyses, and from analyses to tables, JSON and charts.
//!
//! - [`input`]: opens traces and snapshots alike, decompressing on the fly.
//! - [`snapshot`]: reads PyTorch memory snapshots (our own pickle reader).
//! - [`render`]: SVG charts and the HTML report.
//! - [`replay`]: the allocator's state reconstructed event by event.
//! - [`analysis`]: analyses fed by one replay pass (summary, fragmentation,
//!   leaks), site folding, phases and `--from`/`--to` windows.
//! - [`simulate`]: what-if replays of a trace's requests under another
//!   device capacity or allocator setting.
//! - [`units`], [`table`]: human output.
//! - [`cli`]: the `vramtrace` command line, one module per command.

#![warn(missing_docs)]

pub mod analysis;
pub mod cli;
pub mod input;
pub mod progress;
pub mod render;
pub mod replay;
pub mod simulate;
pub mod sites;
pub mod snapshot;
pub mod table;
#[cfg(test)]
pub(crate) mod testing;
pub mod units;
