//! Rank sets: several traces are a distributed run's ranks only when their
//! headers say so, or when asked (`--ranks`); otherwise each is analyzed on
//! its own.

use vramtrace_e2e::{fixture, scratch, vramtrace};

fn path(name: &str) -> String {
    fixture(name).display().to_string()
}

#[test]
fn unrelated_traces_are_summarized_each_on_its_own() {
    // The fixtures folder: traces of unrelated runs, no rank in any header.
    let folder = fixture("").display().to_string();
    let text = vramtrace(["summary", &folder]).success().stdout;
    assert!(!text.contains("ranks "), "{text}");
    for name in [
        "clean.vtrace",
        "fragmenting.vtrace",
        "leak.vtrace",
        "oom.vtrace",
        "two-devices.vtrace",
    ] {
        assert!(text.contains(&format!("trace     {folder}")), "{text}");
        assert!(text.contains(name), "{name} not summarized:\n{text}");
    }
    let all = vramtrace(["summary", &folder, "--json"]).success().json();
    assert_eq!(all.as_array().map(Vec::len), Some(5), "{all:#}");
    // Two files named on the command line alike.
    let two = vramtrace([
        "summary",
        &path("clean.vtrace"),
        &path("leak.vtrace"),
        "--json",
    ])
    .success()
    .json();
    assert_eq!(two[1]["path"], path("leak.vtrace"), "{two:#}");
    let help = vramtrace(["summary", "--help"]).success().stdout;
    assert!(help.contains("--ranks"), "{help}");
}

#[test]
fn ranks_are_read_from_headers_or_when_asked_and_rows_name_their_files() {
    // Asked: the files, in order, with each row's file named.
    let text = vramtrace([
        "summary",
        "--ranks",
        &path("clean.vtrace"),
        &path("leak.vtrace"),
    ])
    .success()
    .stdout;
    assert!(text.contains("2 ranks"), "{text}");
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("rank  "))
        .collect();
    assert!(rows[0].contains("file"), "{text}");
    assert!(rows[1].contains("clean.vtrace"), "{text}");
    assert!(rows[2].contains("leak.vtrace"), "{text}");
    // Traces whose headers record their ranks of one run.
    let dir = scratch("ranks-headers");
    let pattern = dir.join("run-%r.vtrace").display().to_string();
    vramtrace(["synth", "--world-size", "3", "-o", &pattern]).success();
    let set = dir.display().to_string();
    let table = vramtrace(["summary", &set, "--json"]).success().json();
    assert_eq!(table["ranks_from"], "header", "{table:#}");
    assert_eq!(table["rows"].as_array().map(Vec::len), Some(3));
    // A stray trace among them: not one run, so each on its own.
    let stray = dir.join("stray.vtrace");
    std::fs::copy(fixture("clean.vtrace"), &stray).unwrap();
    let each = vramtrace(["summary", &set, "--json"]).success().json();
    assert_eq!(each.as_array().map(Vec::len), Some(4), "{each:#}");
    // A report of traces that are not ranks of one run is refused in one line.
    let out = dir.join("report.html").display().to_string();
    let run = vramtrace([
        "report",
        &path("clean.vtrace"),
        &path("leak.vtrace"),
        "-o",
        &out,
    ])
    .fails_with(2);
    assert!(run.stderr.contains("--ranks"), "{}", run.stderr);
}

#[test]
fn equal_peaks_are_said_to_be_equal_not_a_rank_against_itself() {
    let leak = path("leak.vtrace");
    let text = vramtrace(["summary", "--ranks", &leak, &leak])
        .success()
        .stdout;
    let spread: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("spread"))
        .take(2)
        .collect();
    assert_eq!(spread.len(), 2, "{text}");
    for line in spread {
        assert!(!line.contains(" to rank"), "a rank against itself: {line}");
        assert!(line.contains("equal on every rank"), "{line}");
    }
    let dir = scratch("ranks-equal");
    let out = dir.join("report.html");
    vramtrace([
        "report",
        "--ranks",
        &leak,
        &leak,
        "-o",
        out.to_str().unwrap(),
    ])
    .success();
    let page = std::fs::read_to_string(&out).unwrap();
    assert!(!page.contains("rank 0 to rank 0"), "the report's spread");
    assert!(page.contains("equal on every rank"));
}
