//! # vramtrace
//!
//! Offline analysis of GPU caching-allocator traces and PyTorch memory
//! snapshots, as a library; the `vramtrace` binary is a thin command line
//! over it. Data flows one way: an [opened input](input::Input) streams its
//! events, the [replay engine](replay) rebuilds the allocator's state event
//! by event, [analyses](analysis) fed by one pass compute their reports, a
//! [command] gathers them into one typed result, and a
//! [printer](mod@print) turns that into text, JSON, SVG or HTML.
//!
//! - [`input`]: opens traces and snapshots alike, decompressing on the fly;
//!   an opened input streams its events again for each pass.
//! - [`snapshot`]: reads PyTorch memory snapshots (our own pickle reader).
//! - [`sites`]: stacks folded to the frame that tells where memory went.
//! - [`replay`]: the allocator's state reconstructed event by event.
//! - [`analysis`]: analyses fed by one replay pass (summary, fragmentation,
//!   leaks, timeline, totals), windows, phases, and run comparison.
//! - [`simulate`]: what-if replays of a trace's requests under another
//!   device capacity or allocator setting.
//! - [`command`]: one function per command, returning its typed result.
//! - [`print`](mod@print): the results as text, JSON, SVG charts and the HTML report.
//! - [`progress`]: how long work reports its progress; [`units`]: human units;
//!   [`bounds`]: the largest byte figure and the most devices an input may hold.
//!
//! The trace format itself is the `vramtrace-format` crate.
//!
//! ```no_run
//! use vramtrace::command::summary::{SummaryOptions, summary};
//! use vramtrace::input::Input;
//! use vramtrace::progress::NoProgress;
//!
//! let input = Input::open("run.vtrace", &NoProgress)?;
//! let options = SummaryOptions { top: 5, ..SummaryOptions::default() };
//! // One result per device of the trace, each device replayed apart.
//! let result = summary(&input, &options, &NoProgress)?;
//! for device in &result.devices {
//!     println!("device {}: peak allocated {} bytes", device.peaks.device,
//!         device.result.summary.peak_allocated_bytes);
//! }
//! print!("{}", vramtrace::print::text::by_device(&result, |r| {
//!     vramtrace::print::text::summary(r, false)
//! }));
//! # Ok::<(), vramtrace::Error>(())
//! ```

#![warn(missing_docs)]

pub mod analysis;
pub mod bounds;
pub mod command;
mod error;
pub mod input;
mod prefetch;
pub mod print;
pub mod progress;
pub mod replay;
pub mod simulate;
pub mod sites;
pub mod snapshot;
#[cfg(test)]
pub(crate) mod testing;
pub mod units;

pub use error::Error;
