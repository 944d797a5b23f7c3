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
    let all = vramtrace(["summary", &folder, "--json"]).success().result();
    assert_eq!(all.as_array().map(Vec::len), Some(5), "{all:#}");
    // Two files named on the command line alike.
    let two = vramtrace([
        "summary",
        &path("clean.vtrace"),
        &path("leak.vtrace"),
        "--json",
    ])
    .success()
    .result();
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
    let table = vramtrace(["summary", &set, "--json"]).success().result();
    assert_eq!(table["ranks_from"], "header", "{table:#}");
    assert_eq!(table["rows"].as_array().map(Vec::len), Some(3));
    // A stray trace among them: not one run, so the ranks are tabled as
    // their job and the stray trace is summarized on its own.
    let stray = dir.join("stray.vtrace");
    std::fs::copy(fixture("clean.vtrace"), &stray).unwrap();
    let each = vramtrace(["summary", &set, "--json"]).success().result();
    assert_eq!(each.as_array().map(Vec::len), Some(2), "{each:#}");
    assert_eq!(each[0]["rows"].as_array().map(Vec::len), Some(3));
    assert_eq!(each[1]["path"], stray.display().to_string());
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

#[test]
fn a_set_tells_each_traces_warnings_once_in_rank_order() {
    // Three ranks, two cut short, and a file of the folder that is no trace.
    let dir = scratch("ranks-warnings");
    let pattern = dir.join("run-%r.vtrace").display().to_string();
    vramtrace(["synth", "--world-size", "3", "-o", &pattern]).success();
    for rank in [2, 0] {
        let trace = dir.join(format!("run-{rank}.vtrace"));
        let bytes = std::fs::read(&trace).unwrap();
        std::fs::write(&trace, &bytes[..bytes.len() * 2 / 3]).unwrap();
    }
    std::fs::write(dir.join("notes.vtrace.txt"), b"not a trace").unwrap();
    let set = dir.display().to_string();
    let pass_warnings = |stderr: &str| -> Vec<String> {
        stderr
            .lines()
            .filter(|l| l.contains("run-") && !l.contains("left out"))
            .map(|l| l.split(".vtrace").next().unwrap_or_default().to_string())
            .collect()
    };
    for command in [&["summary"][..], &["leaks"][..]] {
        let run = vramtrace(command.iter().copied().chain([set.as_str()])).success();
        let left_out: Vec<&str> = (run.stderr.lines())
            .filter(|l| l.contains("left out of its folder's traces"))
            .collect();
        assert_eq!(left_out.len(), 1, "{}", run.stderr);
        assert!(left_out[0].contains("notes.vtrace.txt"), "{}", run.stderr);
        let told = pass_warnings(&run.stderr);
        // Rank 0's, then rank 2's: each trace's, once.
        assert!(!told.is_empty(), "{}", run.stderr);
        assert!(told.iter().all(|w| !w.ends_with("run-1")), "{}", run.stderr);
        let first_two = told.iter().position(|w| w.ends_with("run-2")).unwrap();
        assert!(
            told[..first_two].iter().all(|w| w.ends_with("run-0")),
            "{}",
            run.stderr
        );
        let mut each = told.clone();
        each.dedup();
        assert_eq!(each.len(), 2, "{}", run.stderr);
    }
    // The report: the rank pass tells them; the page's own pass repeats none.
    let out = dir.join("report.html").display().to_string();
    let run = vramtrace(["report", &set, "-o", &out]).success();
    let mut lines: Vec<&str> = run.stderr.lines().filter(|l| l.contains("run-")).collect();
    let all = lines.len();
    lines.sort();
    lines.dedup();
    assert_eq!(lines.len(), all, "a warning told twice:\n{}", run.stderr);
}

/// A folder of two distributed jobs' traces (the same world size, so the
/// ranks repeat): each job's ranks in a table of their own, the job's files
/// only, and a trace of no job on its own.
#[test]
fn a_folder_of_two_jobs_tables_each_job() {
    let dir = scratch("ranks-two-jobs");
    for (job, seed) in [("a", "1"), ("b", "2")] {
        let pattern = dir
            .join(format!("{job}-rank%r.vtrace"))
            .display()
            .to_string();
        vramtrace(["synth", "--world-size", "3", "--seed", seed, "-o", &pattern]).success();
    }
    std::fs::copy(fixture("clean.vtrace"), dir.join("c-alone.vtrace")).unwrap();
    let folder = dir.display().to_string();
    let all = vramtrace(["summary", &folder, "--json"]).success().result();
    let docs = all.as_array().unwrap_or_else(|| panic!("{all:#}"));
    assert_eq!(docs.len(), 3, "{all:#}");
    for (doc, job) in docs[..2].iter().zip(["a-", "b-"]) {
        let rows = doc["rows"].as_array().unwrap_or_else(|| panic!("{doc:#}"));
        assert_eq!(rows.len(), 3, "{doc:#}");
        for row in rows {
            let file = row["path"].as_str().unwrap_or_else(|| panic!("{row:#}"));
            assert!(file.contains(job), "{file} in job {job}");
        }
    }
    assert_eq!(
        docs[2]["path"],
        dir.join("c-alone.vtrace").display().to_string()
    );
    let text = vramtrace(["summary", &folder]).success().stdout;
    assert!(
        text.contains("job 1 of 2: 3 traces of world size 3"),
        "{text}"
    );
    assert!(
        text.contains("job 2 of 2: 3 traces of world size 3"),
        "{text}"
    );
    assert_eq!(text.matches("3 ranks").count(), 2, "{text}");
    assert!(text.contains("c-alone.vtrace"), "{text}");
}
