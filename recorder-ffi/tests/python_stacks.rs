//! Runs `python/tests/test_python_stacks.py` against the library
//! cargo just built: the Python frame walk checked in a real interpreter,
//! without a GPU. Skipped (with a note) where `python3` is missing, or
//! where the library is not built: `cargo test` does not build a
//! `cdylib`-only crate's library for its integration tests, so run
//! `cargo build -p vramtrace-recorder-ffi` first (`--release` with
//! `cargo test --release`). Under CI (`CI` set) neither is a reason to
//! skip: `.ci/run` builds the library first, and the test fails without.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn python_frames_from_a_real_interpreter() {
    let under_ci = std::env::var_os("CI").is_some();
    let Ok(version) = Command::new("python3").arg("--version").output() else {
        assert!(!under_ci, "CI must have python3");
        eprintln!("python3 not found: skipped");
        return;
    };
    assert!(version.status.success());
    // target/<profile>/deps/<this test> -> target/<profile>/libvramtrace_recorder.so
    let exe = std::env::current_exe().expect("test binary path");
    let lib = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target folder")
        .join("libvramtrace_recorder.so");
    if !lib.is_file() {
        assert!(
            !under_ci,
            "{} not built: .ci/run builds it before the tests",
            lib.display()
        );
        eprintln!(
            "{} not built (cargo build -p vramtrace-recorder-ffi): skipped",
            lib.display()
        );
        return;
    }
    // Canonical: the script compares the file names Python records with its
    // own resolved path.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("workspace root");
    let script = root.join("python/tests/test_python_stacks.py");
    let out = Command::new("python3")
        .arg(&script)
        .env("VRAMTRACE_LIB", &lib)
        .env("PYTHONPATH", root.join("python"))
        .output()
        .expect("run python3");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
}
