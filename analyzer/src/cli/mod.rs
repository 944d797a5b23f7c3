//! The `vramtrace` command line: one module per command, sharing the input
//! and output conventions below.
//!
//! - Every command prints a table for people, or one JSON object with `--json`.
//! - Bad input or usage: one line on stderr and exit code 2; never a panic.
//! - Recoverable damage (a truncated trace): a `warning:` line, the analysis
//!   of what could be read, exit code 0.

mod analyze;
mod compare;
mod fragmentation;
mod import;
mod info;
mod leaks;
mod report;
mod simulate;
mod summary;
mod synth;
mod timeline;

use crate::input::{self, Input};
use crate::progress;
use clap::{Parser, Subcommand};
use std::path::Path;
use std::process::ExitCode;

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
    /// Convert a PyTorch memory snapshot (pickle, optionally gz/xz/zst) into a trace.
    Import(import::Args),
    /// Summarize a trace: peaks, top allocation sites at the peak, OOMs.
    Summary(summary::Args),
    /// Show cached and fragmented memory over time.
    Fragmentation(fragmentation::Args),
    /// Find leaks: memory retained by phases, growth across repetitions.
    Leaks(leaks::Args),
    /// Draw memory over time as an SVG chart, stacked by site or phase.
    Timeline(timeline::Args),
    /// Write every analysis of a trace into one self-contained HTML page.
    Report(report::Args),
    /// Write a synthetic training-loop trace (deterministic by seed).
    Synth(synth::Args),
    /// Compare two runs: what grew, where, and by how much; a CI gate with --fail-on.
    Compare(compare::Args),
    /// Replay a trace under another GPU size or allocator setting: peaks, retries, OOMs.
    Simulate(simulate::Args),
}

/// Runs the command line and returns the process's exit code.
pub fn main() -> ExitCode {
    install_panic_hook();
    restore_default_sigpipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(EXIT_USAGE);
        }
        Err(e) if !e.use_stderr() => {
            // --help and --version: clap prints them to stdout.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // clap's usage errors run over several lines (tips, usage); the
            // first says what is wrong, and --help says the rest.
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid usage");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("error: {first} (see 'vramtrace --help')");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let result = match cli.command {
        Command::Info(args) => info::run(args),
        Command::Import(args) => import::run(args),
        Command::Summary(args) => summary::run(args),
        Command::Fragmentation(args) => fragmentation::run(args),
        Command::Leaks(args) => leaks::run(args),
        Command::Timeline(args) => timeline::run(args),
        Command::Report(args) => report::run(args),
        Command::Synth(args) => synth::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Simulate(args) => simulate::run(args),
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
/// A cause whose text the message already holds is not repeated.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace('\n', " ")
}

/// `vramtrace summary x | head` should end quietly when `head` exits, as
/// Unix tools do, rather than fail on the write to the closed pipe.
fn restore_default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called once at start-up, before any other thread exists;
    // setting a signal's disposition to its default is always sound.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
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

/// Opens a trace or a PyTorch snapshot (compressed or not), with a progress
/// bar while a snapshot is converted, and warns about what the conversion
/// found.
pub(crate) fn open_input(path: &Path) -> anyhow::Result<Input> {
    let opened = open_input_with_report(path)?;
    Ok(opened.input)
}

/// Like [`open_input`], keeping the import report of a snapshot.
pub(crate) fn open_input_with_report(path: &Path) -> anyhow::Result<input::OpenedInput> {
    let size = std::fs::metadata(path).map(|m| m.len()).ok();
    let bar = progress::bytes_bar(size, "reading");
    let opened = input::open_with_progress(path, &|bytes| bar.set_position(bytes))?;
    bar.finish_and_clear();
    // A command may open a snapshot twice (a second replay); warn once.
    static WARNED: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());
    let first_time = {
        let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
        let new = !warned.iter().any(|p| p == path);
        if new {
            warned.push(path.to_path_buf());
        }
        new
    };
    if let (Some(report), true) = (&opened.import_report, first_time) {
        for warning in &report.warnings {
            warn(format_args!("{}: {warning}", path.display()));
        }
    }
    Ok(opened)
}

/// Prints a value as pretty JSON on stdout.
pub(crate) fn print_json(value: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("JSON values serialize")
    );
}
