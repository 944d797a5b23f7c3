//! `vramtrace run`: records a program's GPU memory, the same as `python -m
//! vramtrace run`, which it runs. Recording happens inside the program's
//! Python process (PyTorch's allocator is observed there), so this command
//! only finds the Python and hands it the arguments.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// Arguments of `vramtrace run`: everything after `run` goes to `python -m
/// vramtrace run` as it is.
#[derive(clap::Args)]
pub struct Args {
    /// The recording's options (--out FILE, --mode, --stacks, --strict,
    /// ...), then the script and its arguments, or -m, a module and its
    /// arguments: `vramtrace run --out run.vtrace train.py --epochs 1`.
    /// `python -m vramtrace run --help` lists the options.
    #[arg(
        value_name = "[OPTIONS] SCRIPT|-m MODULE [ARGS]",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    args: Vec<OsString>,
}

/// The names a Python interpreter goes by, in the order they are tried.
const PYTHONS: [&str; 2] = ["python3", "python"];

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let python = python().ok_or_else(|| {
        anyhow::anyhow!(
            "vramtrace run needs Python with the vramtrace package: no python3 or python beside this command or on the PATH"
        )
    })?;
    // A missing package would otherwise be Python's own message, on a line
    // that names neither vramtrace run nor what to do.
    let found = Command::new(&python)
        .args([
            "-c",
            "import importlib.util, sys; sys.exit(importlib.util.find_spec('vramtrace') is None)",
        ])
        .status()
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", python.display()))?;
    if !found.success() {
        anyhow::bail!(
            "{} has no vramtrace package: install it into that Python's environment (pip install . in vramtrace's source tree)",
            python.display()
        );
    }
    let mut command = Command::new(&python);
    // Usage errors then name the command the user typed, not the module.
    command
        .args(["-m", "vramtrace", "run"])
        .args(&args.args)
        .env("VRAMTRACE_COMMAND", "vramtrace");
    exec(command, &python)
}

/// The Python to run: the one beside this command (pip installs both into
/// an environment's `bin/`, so that is the environment with the package),
/// else the first on the PATH.
fn python() -> Option<PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    let path = std::env::var_os("PATH").unwrap_or_default();
    beside
        .into_iter()
        .chain(std::env::split_paths(&path))
        .flat_map(|dir| PYTHONS.map(|name| dir.join(name)))
        .find(|candidate| is_executable(candidate))
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

/// Becomes the Python process: its output, signals and exit code are the
/// program's, as if it had been run directly.
#[cfg(unix)]
fn exec(mut command: Command, python: &Path) -> anyhow::Result<ExitCode> {
    use std::os::unix::process::CommandExt;
    let e = command.exec();
    anyhow::bail!("cannot run {}: {e}", python.display())
}

/// Runs Python and exits with its exit code (no exec here).
#[cfg(not(unix))]
fn exec(mut command: Command, python: &Path) -> anyhow::Result<ExitCode> {
    let status = command
        .status()
        .map_err(|e| anyhow::anyhow!("cannot run {}: {e}", python.display()))?;
    Ok(ExitCode::from(
        status.code().unwrap_or(1).clamp(0, 255) as u8
    ))
}
