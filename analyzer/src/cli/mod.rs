//! The `vramtrace` command line: one module per command, sharing the input
//! and output conventions below.
//!
//! - Every command prints a table for people, or one JSON object with `--json`.
//! - Bad input or usage: one line on stderr and exit code 2; never a panic.
//! - Recoverable damage (a truncated trace): a `warning:` line, the analysis
//!   of what could be read, exit code 0.

mod info;
mod synth;

use anyhow::Context;
use clap::{Parser, Subcommand};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use std::process::ExitCode;
use vramtrace_recorder::format::TraceReader;

/// Exit code for usage errors and unreadable input.
pub const EXIT_USAGE: u8 = 2;

#[derive(Parser)]
#[command(
    name = "vramtrace",
    version,
    about = "GPU memory profiler: analyze allocator traces and PyTorch memory snapshots",
    propagate_version = true,
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show a trace's header, duration, event counts and encoding.
    Info(info::Args),
    /// Write a synthetic training-loop trace (deterministic by seed).
    Synth(synth::Args),
}

/// Runs the command line and returns the process's exit code.
pub fn main() -> ExitCode {
    install_panic_hook();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help and version itself, to stdout, with exit 0.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    let result = match cli.command {
        Command::Info(args) => info::run(args),
        Command::Synth(args) => synth::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// An error and its causes on one line: `cannot open x: No such file`.
fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', " ")
}

/// A panic is a bug; report it in one line rather than with a backtrace.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        eprintln!("error: internal error{location}: {message} (please report this)");
    }));
}

/// Prints a warning line on stderr.
pub(crate) fn warn(message: impl std::fmt::Display) {
    eprintln!("warning: {message}");
}

/// An input trace, opened for reading.
pub(crate) type Input = TraceReader<Box<dyn Read + Send>>;

/// Opens a trace file for reading.
pub(crate) fn open_input(path: &Path) -> anyhow::Result<Input> {
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let reader: Box<dyn Read + Send> = Box::new(BufReader::with_capacity(1 << 20, file));
    TraceReader::new(reader).with_context(|| format!("cannot read {}", path.display()))
}

/// Prints a value as pretty JSON on stdout.
pub(crate) fn print_json(value: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("JSON values serialize")
    );
}
