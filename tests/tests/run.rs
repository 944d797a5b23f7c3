//! `vramtrace run`: recording from the analyzer's command, which runs
//! `python -m vramtrace run` (here without PyTorch: the program runs
//! unrecorded, and one line says so).

use std::process::Command;
use vramtrace_e2e::{binary, repo, scratch};

/// `vramtrace run ARGS` in `dir`, with this tree's Python package and the
/// given PATH.
fn run(dir: &std::path::Path, path: &str, args: &[&str]) -> std::process::Output {
    Command::new(binary())
        .arg("run")
        .args(args)
        .current_dir(dir)
        .env("PATH", path)
        .env("PYTHONPATH", repo().join("python"))
        .output()
        .expect("run vramtrace")
}

#[test]
fn run_records_a_script_or_a_module_through_python() {
    let path = std::env::var("PATH").unwrap_or_default();
    let has_python = std::env::split_paths(&path).any(|d| d.join("python3").exists());
    if !has_python {
        assert!(std::env::var_os("CI").is_none(), "CI must have python3");
        eprintln!("skipped: no python3 on this machine");
        return;
    }
    let dir = scratch("run");
    std::fs::write(
        dir.join("train.py"),
        "import sys\nprint('args', sys.argv[1:])\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("trainer")).unwrap();
    std::fs::write(dir.join("trainer/__init__.py"), "").unwrap();
    std::fs::write(
        dir.join("trainer/__main__.py"),
        "import sys\nprint('module', sys.argv[1:])\n",
    )
    .unwrap();
    let out = run(
        &dir,
        &path,
        &["--out", "run.vtrace", "train.py", "--epochs", "1"],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "args ['--epochs', '1']\n"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    let out = run(&dir, &path, &["-m", "trainer", "--x"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "module ['--x']\n");
    // Strict: one line, and the program does not run.
    let out = run(&dir, &path, &["--strict", "train.py"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: ") && err.lines().count() == 1,
        "{err}"
    );
}

#[test]
fn a_missing_script_is_blamed_on_the_command_typed() {
    let path = std::env::var("PATH").unwrap_or_default();
    if !std::env::split_paths(&path).any(|d| d.join("python3").exists()) {
        assert!(std::env::var_os("CI").is_none(), "CI must have python3");
        eprintln!("skipped: no python3 on this machine");
        return;
    }
    let dir = scratch("run-missing");
    let out = run(&dir, &path, &["nothere.py"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim_end(),
        "error: vramtrace run: no such script: nothere.py (see --help)"
    );
}

#[test]
fn run_without_python_is_a_one_line_error() {
    let dir = scratch("run-no-python");
    let out = run(&dir, "/nonexistent", &["train.py"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim(),
        "error: vramtrace run needs Python with the vramtrace package: no python3 or python beside this command or on the PATH"
    );
    // And it is the first command listed.
    let help = Command::new(binary()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let first = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .nth(1)
        .unwrap_or("");
    assert!(first.trim_start().starts_with("run "), "{help}");
}
