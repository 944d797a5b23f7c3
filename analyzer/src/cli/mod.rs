//! The `vramtrace` command line: one module per command, each parsing its
//! arguments, calling the library's command and picking a printer.
//!
//! - Every command prints text for people, or JSON with `--json`.
//! - Bad input or usage: one line on stderr and exit code 2; never a panic.
//! - Recoverable damage (a truncated trace): a `warning:` line, the analysis
//!   of what could be read, exit code 0.

mod common;
mod compare;
mod export;
mod flamegraph;
mod fragmentation;
mod import;
mod info;
mod join;
mod leaks;
mod merge;
mod plan;
mod progress;
mod report;
mod run;
mod simulate;
mod summary;
mod synth;
mod timeline;

use clap::{Parser, Subcommand};
use std::path::Path;
use std::process::ExitCode;
use vramtrace::Error;
use vramtrace::analysis::compare::CompareError;
use vramtrace::analysis::window::WindowError;
use vramtrace::command::Warning;
use vramtrace::input::ExpansionExceeded;
use vramtrace::print::{ChartError, printable, printable_cut};
use vramtrace::simulate::SimulateError;
use vramtrace::simulate::plan::PlanError;
use vramtrace::sites::PatternError;
use vramtrace::units;

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

/// A usage error on one line. clap's run over several (tips, usage): the
/// first says what is wrong, and --help the rest; but a missing argument's
/// name is on the lines after it.
fn usage_error(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("invalid usage");
    let mut line = first.strip_prefix("error: ").unwrap_or(first).to_string();
    if e.kind() == clap::error::ErrorKind::MissingRequiredArgument {
        let missing: Vec<&str> = lines
            .take_while(|l| !l.trim().is_empty())
            .map(str::trim)
            .collect();
        line = format!("{} {}", line.trim_end(), missing.join(", "));
    }
    // A value outside a fixed set: name the set ("[possible values: a, b]").
    if e.kind() == clap::error::ErrorKind::InvalidValue
        && let Some(possible) = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("[possible values: "))
    {
        line = format!(
            "{}; one of: {}",
            line.trim_end(),
            possible.trim_end_matches(']')
        );
    }
    line
}

/// An error and its causes on one line: `cannot open x: No such file`.
/// A cause whose text the message already holds is not repeated. Errors of
/// the library that concern a flag are told in the flag's terms.
fn one_line(e: &anyhow::Error) -> String {
    if let Some(text) = in_flag_terms(e) {
        return text.replace('\n', " ");
    }
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
    let expansion = e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .and_then(ExpansionExceeded::in_io)
            .is_some()
    });
    if expansion {
        line.push_str(" (--max-expansion RATIO, or none, raises the limit)");
    }
    line.replace('\n', " ")
}

/// A library error about what a flag asked for, told with the flag's name
/// (the library's own messages name no flags).
fn in_flag_terms(e: &anyhow::Error) -> Option<String> {
    let in_input = |path: &Path, text: String| format!("{}: {text}", path.display());
    if let Some(e) = e.downcast_ref::<Error>() {
        return match e {
            Error::Window { path, source } => {
                window_in_flag_terms(source).map(|t| in_input(path, t))
            }
            Error::Compare(e) => compare_in_flag_terms(e),
            Error::Plan(e) => plan_in_flag_terms(e),
            Error::Simulate {
                path,
                source: SimulateError::NoSettings(_),
            } => Some(in_input(
                path,
                "no usable recorded settings; give --alloc-conf".into(),
            )),
            _ => None,
        };
    }
    if let Some(e) = e.downcast_ref::<WindowError>() {
        return window_in_flag_terms(e);
    }
    if let Some(e) = e.downcast_ref::<PatternError>() {
        return Some(format!(
            "bad --skip-frames pattern '{}': {}",
            e.pattern, e.source
        ));
    }
    if let Some(e) = e.downcast_ref::<CompareError>() {
        return compare_in_flag_terms(e);
    }
    if let Some(e) = e.downcast_ref::<ChartError>() {
        return chart_in_flag_terms(e);
    }
    None
}

fn plan_in_flag_terms(e: &PlanError) -> Option<String> {
    match e {
        PlanError::NoValue { path } => Some(format!(
            "{path} does not say its batch size or sequence length (no `batch` or `seq` annotation): give each trace's value with --batch 4,8 or --seq 512,1024, in the traces' order"
        )),
        PlanError::NoCapacity => Some(
            "nothing to plan for: the runs record no cap on the allocator; give --gpu, --capacity or --cap".into(),
        ),
        PlanError::SeveralDevices { path, seen } => Some(format!(
            "{path} holds devices {seen}: pick one with --device"
        )),
        _ => None,
    }
}

fn window_in_flag_terms(e: &WindowError) -> Option<String> {
    Some(match e {
        WindowError::EmptyBound => "an empty --from/--to bound".into(),
        WindowError::StartAfterEnd { from_ns, to_ns } => format!(
            "--from ({}) is after --to ({})",
            units::duration_ns(*from_ns),
            units::duration_ns(*to_ns)
        ),
        WindowError::NoSuchPhase(name) => format!("--from: no phase named '{name}' in the trace"),
        WindowError::PhaseNeverEnds(name) => {
            format!("--to: phase '{name}' never ends in the trace")
        }
        WindowError::PhasesOutOfOrder => "--from's phase begins after --to's phase ends".into(),
        _ => return None,
    })
}

fn compare_in_flag_terms(e: &CompareError) -> Option<String> {
    match e {
        CompareError::NoIterations(name) => Some(format!(
            "--per-iteration needs a phase repeated three times or more in both runs; {name} has none"
        )),
        _ => None,
    }
}

fn chart_in_flag_terms(e: &ChartError) -> Option<String> {
    match e {
        ChartError::NoRepetitions(name) => Some(format!(
            "--align repetition needs a phase repeated three times or more in both runs; {name} has none"
        )),
        _ => None,
    }
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

/// A plain snapshot is parsed from a mapping of its file (`input`): if another
/// process truncates the file meanwhile, reading a page past its new end raises
/// `SIGBUS`, which would kill the process with the shell's bare "Bus error".
/// Say what happened in one line instead, and exit with the status of any
/// other error. Only a mapped file can raise it in this program.
fn report_sigbus() {
    #[cfg(unix)]
    {
        extern "C" fn on_sigbus(_: libc::c_int) {
            const MESSAGE: &[u8] =
                b"error: an input file was truncated or changed while it was being read\n";
            // SAFETY: write(2) and _exit(2) are async-signal-safe; MESSAGE is static.
            unsafe {
                libc::write(2, MESSAGE.as_ptr().cast(), MESSAGE.len());
                libc::_exit(EXIT_USAGE as libc::c_int);
            }
        }
        // SAFETY: called once at start-up, before any other thread exists; the
        // handler only calls async-signal-safe functions.
        unsafe {
            libc::signal(libc::SIGBUS, on_sigbus as *const () as libc::sighandler_t);
        }
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

/// The most characters of a message quoting the input: a value of
/// megabytes (an allocator setting) is cut, so that the message stays one
/// line.
const MESSAGE_CHARS: usize = 1000;

/// Prints a warning line on stderr, its control characters shown, not
/// obeyed (they may come from the input).
fn warn(message: impl std::fmt::Display) {
    eprintln!(
        "warning: {}",
        printable_cut(&message.to_string(), MESSAGE_CHARS)
    );
}

/// Prints a pass's warnings about an input, in the CLI's terms. Phases of
/// other threads are no warning: every pass of a DDP trace has them, and
/// `summary` tells of them once, in its header.
fn warn_about(path: &Path, warnings: &[Warning]) {
    for w in warnings {
        match w {
            Warning::EmptyWindow => warn(format_args!(
                "{}: no event lies inside --from/--to",
                path.display()
            )),
            Warning::OtherThreadPhases { .. } => {}
            w => warn(format_args!("{}: {w}", path.display())),
        }
    }
}

/// Prints the warnings of a result's passes, each about its input (see
/// [`warn_about`]), less what converting a snapshot found: that was told as
/// the input opened (`common::open`).
fn warn_inputs(warnings: &[vramtrace::command::InputWarning]) {
    for w in warnings {
        if !matches!(w.warning, Warning::Conversion(_)) {
            warn_about(&w.path, std::slice::from_ref(&w.warning));
        }
    }
}

/// Writes text to stdout, names from the input with their control
/// characters shown, not obeyed (JSON is already so). A closed pipe
/// (`| head`) is not an error: the reader has what it wanted.
fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let text = printable(text);
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

/// Writes a chart, page or trace whole or not at all: to a temporary file
/// beside it, renamed over it once complete, so that a failure (a full disk,
/// a kill) never leaves a partial file or destroys the one there.
fn write_file(path: &Path, content: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    write_with(path, |out| out.write_all(content))
}

/// [`write_file`] for content written as it is made (`synth`).
fn write_with(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let context = || format!("cannot write {}", path.display());
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file()) {
        // A device or a pipe (`-o /dev/stdout`): there is nothing to replace.
        let mut out = std::io::BufWriter::new(std::fs::File::create(path).with_context(context)?);
        return write(&mut out)
            .and_then(|()| out.into_inner().map(drop).map_err(|e| e.into_error()))
            .with_context(context);
    }
    let name = path.file_name().with_context(context)?;
    let mut temporary_name = std::ffi::OsString::from(".");
    temporary_name.push(name);
    temporary_name.push(format!(".{}.tmp", std::process::id()));
    let temporary = path.with_file_name(temporary_name);
    let result = (|| {
        // A file without a name while it is written (O_TMPFILE), so that a
        // kill (SIGKILL) leaves nothing behind: it is named only once
        // whole. Where the file system has no such files, a new file under
        // the temporary name.
        let anonymous = anonymous_file_beside(path);
        let file = match &anonymous {
            Some(file) => file.try_clone()?,
            // A new file, or none: a file or a symlink planted at the
            // temporary name is neither followed nor overwritten (O_EXCL).
            None => std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&temporary)?,
        };
        let mut out = std::io::BufWriter::with_capacity(4 << 20, file);
        write(&mut out)?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        if let Some(file) = anonymous {
            name_file(file, &temporary)?;
        }
        std::fs::rename(&temporary, path)
    })();
    if let Err(e) = &result
        && e.kind() != std::io::ErrorKind::AlreadyExists
    {
        let _ = std::fs::remove_file(&temporary);
    }
    result.with_context(context)
}

/// A new file without a name, in the folder of `path` (Linux's
/// `O_TMPFILE`); `None` where the file system cannot make one.
#[cfg(target_os = "linux")]
fn anonymous_file_beside(path: &Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = (path.parent())
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o666)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
        .ok()
}

#[cfg(not(target_os = "linux"))]
fn anonymous_file_beside(_path: &Path) -> Option<std::fs::File> {
    None
}

/// Gives a file made by [`anonymous_file_beside`] the name `name`, which
/// must be free: a file or a link planted there is left as it is (EEXIST).
/// Without `/proc` to link it through, its content is copied to a new file
/// of that name.
#[cfg(target_os = "linux")]
fn name_file(mut file: std::fs::File, name: &Path) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom};
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let from = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    let to = std::ffi::CString::new(name.as_os_str().as_bytes())?;
    // SAFETY: two valid NUL-terminated paths; linkat reads them only.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == std::io::ErrorKind::AlreadyExists {
        return Err(e);
    }
    let mut copy = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(name)?;
    file.seek(SeekFrom::Start(0))?;
    std::io::copy(&mut file, &mut copy)?;
    copy.sync_all()
}

#[cfg(not(target_os = "linux"))]
fn name_file(_file: std::fs::File, _name: &Path) -> std::io::Result<()> {
    unreachable!("no file is made without a name here")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_symlink_planted_at_the_temporary_name_is_not_followed() {
        let dir = std::env::temp_dir().join(format!("vramtrace-planted-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim.txt");
        std::fs::write(&victim, b"precious").unwrap();
        let out = dir.join("report.html");
        // The name write_file gives its temporary file in this process.
        let temporary = dir.join(format!(".report.html.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&victim, &temporary).unwrap();
        assert!(write_file(&out, b"<html>").is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!out.exists());
        // Without the plant, the file is written whole and nothing is left.
        std::fs::remove_file(&temporary).unwrap();
        write_file(&out, b"<html>").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"<html>");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
