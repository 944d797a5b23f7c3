//! The command line parsed and each command run: the argument types, the
//! outputs checked before any work, and the exit code.

use super::errors::{one_line, usage_error};
use super::signals::{install_panic_hook, report_sigbus, restore_default_sigpipe};
use super::*;
use clap::{Parser, Subcommand};
use std::process::ExitCode;
use vramtrace::print::printable_cut;

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
    /// Record a PyTorch program's GPU memory: `vramtrace run [OPTIONS] SCRIPT
    /// [ARGS]` (or `-m MODULE`) runs `python -m vramtrace run` with the same
    /// arguments, in the Python beside this command, else python3 (or
    /// python) on the PATH.
    Run(run::Args),
    /// Show a trace's header, duration, event counts and encoding.
    Info(info::Args),
    /// Convert a PyTorch memory snapshot (pickle, optionally gz/xz/zst) into a trace.
    Import(import::Args),
    /// Summarize a trace: peaks, top allocation sites at the peak, OOMs; several
    /// each on its own, or a distributed run's ranks (or a folder of them) in
    /// a rank table.
    Summary(summary::Args),
    /// Show cached and fragmented memory over time.
    Fragmentation(fragmentation::Args),
    /// Find leaks: sites whose memory grows across repetitions, and phase trends.
    Leaks(leaks::Args),
    /// Draw memory over time (SVG, or JSON), stacked by site, phase or category.
    Timeline(timeline::Args),
    /// Draw the memory live at the peak (or at an OOM, or a time) as a flame
    /// graph of the stacks that allocated it (SVG, folded stacks, or JSON).
    Flamegraph(flamegraph::Args),
    /// Write a trace as a Perfetto trace (memory counters, phases, OOMs) or
    /// a pprof profile (live memory at the peak by stack).
    Export(export::Args),
    /// Write every analysis of a trace into one self-contained HTML page.
    Report(report::Args),
    /// Write a synthetic training-loop trace (deterministic by seed).
    Synth(synth::Args),
    /// Merge per-rank `summary --json` files (or rank tables) into one rank table.
    Merge(merge::Args),
    /// Join the parts a bounded recording (`--keep-last`) left on disk when
    /// it was killed (`TRACE.ring/`) into one trace.
    Join(join::Args),
    /// Compare two runs: what grew, where, and by how much; a CI gate with --fail-on.
    Compare(compare::Args),
    /// What if: would the run fit on another GPU or allocator setting; if not, where.
    Simulate(simulate::Args),
    /// The largest batch size (or sequence length) that fits, from runs
    /// recorded at two or more values.
    Plan(plan::Args),
}

/// Runs the command line and returns the process's exit code.
pub fn main() -> ExitCode {
    install_panic_hook();
    restore_default_sigpipe();
    report_sigbus();
    let cli = match parse_arguments() {
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
            eprintln!(
                "error: {} (see 'vramtrace --help')",
                printable_cut(&usage_error(&e), MESSAGE_CHARS)
            );
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Every output of every command is checked here, once, before any
    // work: none may replace an input.
    let files = match &cli.command {
        Command::Info(args) => args.files(),
        Command::Import(args) => args.files(),
        Command::Summary(args) => args.files(),
        Command::Fragmentation(args) => args.files(),
        Command::Leaks(args) => args.files(),
        Command::Timeline(args) => args.files(),
        Command::Flamegraph(args) => args.files(),
        Command::Export(args) => args.files(),
        Command::Report(args) => args.files(),
        Command::Compare(args) => args.files(),
        Command::Join(args) => args.files(),
        Command::Simulate(args) => args.files(),
        Command::Plan(args) => args.files(),
        // `synth` reads no file and `merge` writes none; `run` hands its
        // arguments, unparsed, to Python (`python -m vramtrace run`).
        Command::Run(_) | Command::Synth(_) | Command::Merge(_) => common::Files::default(),
    };
    if let Err(e) = common::check_files(&files) {
        eprintln!("error: {}", printable_cut(&one_line(&e), MESSAGE_CHARS));
        return ExitCode::from(EXIT_USAGE);
    }
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Info(args) => info::run(args),
        Command::Import(args) => import::run(args),
        Command::Summary(args) => summary::run(args),
        Command::Fragmentation(args) => fragmentation::run(args),
        Command::Leaks(args) => leaks::run(args),
        Command::Timeline(args) => timeline::run(args),
        Command::Flamegraph(args) => flamegraph::run(args),
        Command::Export(args) => export::run(args),
        Command::Report(args) => report::run(args),
        Command::Synth(args) => synth::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Merge(args) => merge::run(args),
        Command::Join(args) => join::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Plan(args) => plan::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", printable_cut(&one_line(&e), MESSAGE_CHARS));
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Parses the command line. Every option that takes a value takes one
/// that starts with a hyphen too (`--capacity -1`, `--capacity -5GiB`), so
/// that its parser can say what is wrong with it, rather than clap calling
/// it an unknown flag; positional arguments take negative numbers only, so
/// a flag after them is still a flag.
fn parse_arguments() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let command = Cli::command().mut_subcommands(|sub| {
        sub.mut_args(|arg| {
            if !arg.get_action().takes_values() {
                arg
            } else if arg.is_positional() {
                arg.allow_negative_numbers(true)
            } else {
                arg.allow_hyphen_values(true)
            }
        })
    });
    Cli::from_arg_matches(&command.try_get_matches()?)
}
