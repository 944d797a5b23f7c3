//! The version of the trace format that the README and the format's page
//! name is the one this crate writes: a minor version added without them
//! fails here rather than leaving a new user reading an old number.

use std::path::Path;
use vramtrace_format::{VERSION_MAJOR, VERSION_MINOR};

/// A file of the workspace, beside this crate.
fn workspace_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_readme_and_the_format_page_name_the_version_written() {
    let version = format!("version {VERSION_MAJOR}.{VERSION_MINOR}");
    let page = workspace_file("docs/trace-format.md");
    let title = page.lines().next().unwrap_or_default();
    assert_eq!(title, format!("# The vramtrace trace format, {version}"));
    let readme = workspace_file("README.md");
    let line = readme
        .lines()
        .find(|l| l.contains("(docs/trace-format.md)"))
        .expect("the README links the format's page");
    assert!(
        line.contains(&format!("the trace format, {version},")),
        "the README says: {line}"
    );
}
