//! The synthetic fixtures are what `fixtures/README.md` says regenerates
//! them: each command line there, run now, writes the checked-in bytes.

use std::path::{Path, PathBuf};
use std::process::Command;

const PREFIX: &str = "cargo run -p vramtrace -- ";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn every_fixture_regenerates_byte_for_byte() {
    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("fixtures/README.md")).unwrap();
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("vramtrace-fixtures");
    std::fs::create_dir_all(&out_dir).unwrap();
    let mut checked = Vec::new();
    for line in readme.lines().filter_map(|l| l.trim().strip_prefix(PREFIX)) {
        let mut args: Vec<String> = line.split_whitespace().map(String::from).collect();
        let o = args.iter().position(|a| a == "-o").expect("-o FILE") + 1;
        let fixture = root.join(&args[o]);
        let name = fixture.file_name().unwrap().to_owned();
        let fresh = out_dir.join(&name);
        args[o] = fresh.display().to_string();
        let status = Command::new(env!("CARGO_BIN_EXE_vramtrace"))
            .args(&args)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "`{line}` failed");
        let expected = std::fs::read(&fixture)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", fixture.display()));
        let actual = std::fs::read(&fresh).unwrap();
        assert!(
            expected == actual,
            "{} differs from what `{PREFIX}{line}` writes now: regenerate it (see fixtures/README.md)",
            fixture.display()
        );
        assert!(
            expected.len() < 1 << 20,
            "{} is over 1 MB",
            fixture.display()
        );
        checked.push(name.to_string_lossy().into_owned());
    }
    let _ = std::fs::remove_dir_all(&out_dir);
    checked.sort();
    assert_eq!(
        checked,
        [
            "clean.vtrace",
            "fragmenting.vtrace",
            "leak.vtrace",
            "oom.vtrace",
            "two-devices.vtrace"
        ]
    );
}
