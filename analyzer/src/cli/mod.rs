//! The `vramtrace` command line: one module per command, each parsing its
//! arguments, calling the library's command and picking a printer.
//!
//! - Every command prints text for people, or JSON with `--json`.
//! - Bad input or usage: one line on stderr and exit code 2; never a panic.
//! - Recoverable damage (a truncated trace): a `warning:` line, the analysis
//!   of what could be read, exit code 0.
//!
//! Beside the commands' modules: `dispatch` (the arguments parsed, each
//! command run, the exit code), `errors` (every error on one line, in the
//! flags' terms), `output` (warnings, stdout, files written whole) and
//! `signals` (a closed pipe, `SIGBUS`, panics).

mod common;
mod compare;
mod device;
mod dispatch;
mod errors;
mod export;
mod flamegraph;
mod fragmentation;
mod import;
mod info;
mod join;
mod leaks;
mod merge;
mod output;
mod plan;
mod progress;
mod report;
mod run;
mod signals;
mod simulate;
mod summary;
mod synth;
mod timeline;

pub use dispatch::main;
use output::{MESSAGE_CHARS, emit, warn, warn_about, warn_inputs, write_file, write_with};

/// Exit code for usage errors and unreadable input.
pub const EXIT_USAGE: u8 = 2;
