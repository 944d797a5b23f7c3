//! `join` on rings a crash or a hand left damaged or mixed (issue #46,
//! item 3): it joins the sound parts that follow on, names each part left
//! out and why, and loses no event it could read, compared with the
//! undamaged ring.

use std::path::{Path, PathBuf};
use vramtrace_e2e::{scratch, vramtrace};
use vramtrace_format::{
    BlockEvent, Event, EventData, Header, InitialState, PART_KEY, PREAMBLE_EVENTS_KEY, RING_KEY,
    TraceReader, TraceWriter,
};

const EVENTS_PER_PART: u64 = 10;

/// A ring of `n` parts as the recorder writes them: every part after the
/// first starts from a state and restates the open phase; `ring` is its id,
/// `forged` a part whose header claims `900` restating events. With every
/// event the ring holds past the first part's start, in order.
fn ring(n: u64, ring: &str, forged: Option<u64>) -> (Vec<Vec<u8>>, Vec<Event>) {
    let mut header = Header {
        start_unix_ns: 1_700_000_000_000_000_000,
        ..Header::default()
    };
    header.process.pid = 4242;
    header.metadata.insert(RING_KEY.into(), ring.into());
    let mut w = TraceWriter::new(Vec::new(), header.clone()).unwrap();
    let serve = w.intern_string("serve");
    let mut all = vec![Event {
        time_ns: 0,
        data: EventData::PhaseBegin {
            name: serve,
            thread: 0,
        },
    }];
    w.push(all[0]).unwrap();
    let mut parts = Vec::new();
    for p in 0..n {
        for i in 0..EVENTS_PER_PART {
            let k = p * EVENTS_PER_PART + i;
            let e = Event {
                time_ns: 1_000 * (k + 1),
                data: EventData::Alloc(BlockEvent {
                    addr: (1 << 30) + 512 * k,
                    size: 512,
                    requested: 512,
                    ..BlockEvent::default()
                }),
            };
            w.push(e).unwrap();
            all.push(e);
        }
        if p + 1 < n {
            let mut next = header.clone();
            let claimed = if forged == Some(p + 1) { 900 } else { 1 };
            next.metadata
                .insert(PREAMBLE_EVENTS_KEY.into(), claimed.to_string());
            next.metadata.insert(PART_KEY.into(), (p + 1).to_string());
            parts.push(
                w.rotate(Vec::new(), next, &InitialState::default())
                    .unwrap(),
            );
            w.push(Event {
                time_ns: 1_000 * (p + 1) * EVENTS_PER_PART,
                data: EventData::PhaseBegin {
                    name: serve,
                    thread: 0,
                },
            })
            .unwrap();
        }
    }
    parts.push(w.finish().unwrap());
    (parts, all)
}

/// Writes parts into `dir` as a ring folder does.
fn write_ring(dir: &Path, parts: &[Vec<u8>]) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    (parts.iter().enumerate())
        .map(|(i, bytes)| {
            let path = dir.join(format!("part-{i:06}.vtrace"));
            std::fs::write(&path, bytes).unwrap();
            path
        })
        .collect()
}

/// The events of a trace past its first `skip`.
fn events(path: &Path) -> Vec<Event> {
    let mut r = TraceReader::open(path).unwrap();
    r.events().collect::<Result<Vec<_>, _>>().unwrap()
}

/// Joins `inputs` into `out`: the JSON result.
fn join(inputs: &[&Path], out: &Path) -> (serde_json::Value, String) {
    let mut args: Vec<&std::ffi::OsStr> = vec!["join".as_ref()];
    args.extend(inputs.iter().map(|p| p.as_os_str()));
    args.extend(["-o".as_ref(), out.as_os_str(), "--json".as_ref()]);
    let run = vramtrace(&args).success();
    (run.json(), run.stderr)
}

fn left_out(result: &serde_json::Value) -> Vec<(String, String)> {
    result["left_out"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let part = l["part"].as_str().unwrap();
            let name = Path::new(part).file_name().unwrap().to_string_lossy();
            (name.into_owned(), l["why"].as_str().unwrap().to_string())
        })
        .collect()
}

/// Events from part `from` on: the first's own events, its restatement
/// ahead of them when it is not the first part.
fn from_part(all: &[Event], from: u64, until: u64) -> Vec<Event> {
    let start = 1 + (from * EVENTS_PER_PART) as usize;
    let end = 1 + (until * EVENTS_PER_PART) as usize;
    let mut expected = Vec::new();
    if from > 0 {
        expected.push(Event {
            time_ns: 1_000 * from * EVENTS_PER_PART,
            ..all[0]
        });
    } else {
        expected.push(all[0]);
    }
    expected.extend_from_slice(&all[start..end]);
    expected
}

#[test]
fn a_newest_part_cut_in_its_start_or_empty_leaves_the_rest_joined() {
    let dir = scratch("join-cut-newest");
    let (mut parts, all) = ring(5, "r1", None);
    let whole = dir.join("whole.vtrace");
    let ring_dir = dir.join("whole.ring");
    write_ring(&ring_dir, &parts);
    let (result, _) = join(&[&ring_dir], &whole);
    assert_eq!(events(&whole), all);
    assert!(left_out(&result).is_empty(), "{result}");
    // The newest part cut inside its header and symbols: the other four
    // are joined whole, and the cut one is named (not part 0, nor "another
    // recording").
    for cut in [0, 20, 60] {
        parts[4].truncate(cut);
        let ring_dir = dir.join(format!("cut-{cut}.ring"));
        write_ring(&ring_dir, &parts);
        let out = dir.join(format!("cut-{cut}.vtrace"));
        let (result, stderr) = join(&[&ring_dir], &out);
        assert_eq!(events(&out), from_part(&all, 0, 4), "cut at {cut}");
        let left = left_out(&result);
        assert_eq!(left.len(), 1, "{result}");
        assert_eq!(left[0].0, "part-000004.vtrace");
        assert!(
            stderr.contains("part-000004.vtrace: left out of the join"),
            "{stderr}"
        );
    }
}

#[test]
fn links_fifos_repeats_and_foreign_parts_are_left_out_by_name() {
    let dir = scratch("join-mixed");
    let (parts, all) = ring(4, "r1", None);
    let ring_dir = dir.join("run.ring");
    let paths = write_ring(&ring_dir, &parts);
    // A link and a FIFO among the parts: neither followed nor read.
    std::os::unix::fs::symlink(&paths[0], ring_dir.join("part-000007.vtrace")).unwrap();
    let fifo = ring_dir.join("part-000008.vtrace");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let out = dir.join("joined.vtrace");
    let (result, _) = join(&[&ring_dir], &out);
    assert_eq!(events(&out), all);
    let left = left_out(&result);
    assert_eq!(left.len(), 2, "{result}");
    assert!(left[0].1.contains("symbolic link"), "{left:?}");
    assert!(left[1].1.contains("not a regular file"), "{left:?}");
    std::fs::remove_file(ring_dir.join("part-000007.vtrace")).unwrap();
    std::fs::remove_file(&fifo).unwrap();

    // Given twice, in reverse order: put in order, the repeat left out.
    let (result, _) = join(
        &[&paths[3], &paths[2], &paths[1], &paths[0], &paths[2]],
        &out,
    );
    assert_eq!(events(&out), all);
    assert_eq!(result["reordered"], true);
    let left = left_out(&result);
    assert_eq!(left.len(), 1, "{result}");
    assert!(left[0].1.contains("given twice"), "{left:?}");
    // A copy under another name is a repeat too.
    let copy = dir.join("copy-of-part-2.vtrace");
    std::fs::copy(&paths[2], &copy).unwrap();
    let (result, _) = join(&[&paths[0], &paths[1], &paths[2], &copy, &paths[3]], &out);
    assert_eq!(events(&out), all);
    assert!(left_out(&result)[0].1.contains("a repeat of"), "{result}");

    // A part of another ring of the same process (a ring per device): the
    // same clock and process, another ring id.
    let (other, _) = ring(4, "r2", None);
    let foreign = dir.join("other-ring-part-2.vtrace");
    std::fs::write(&foreign, &other[2]).unwrap();
    let (result, _) = join(
        &[&paths[0], &paths[1], &foreign, &paths[2], &paths[3]],
        &out,
    );
    assert_eq!(events(&out), all);
    let left = left_out(&result);
    assert_eq!(left.len(), 1, "{result}");
    assert!(left[0].1.contains("another ring"), "{left:?}");

    // A part missing: the newest run is joined, whole, from its own start;
    // the parts before the gap are named.
    let (result, _) = join(&[&paths[0], &paths[2], &paths[3]], &out);
    assert_eq!(events(&out), from_part(&all, 2, 4));
    let left = left_out(&result);
    assert_eq!(left.len(), 1, "{result}");
    assert!(left[0].1.contains("1 part is missing"), "{left:?}");
    // Time runs forward in every join above: no inconsistency.
    let summary = vramtrace(["summary", "--json", out.to_str().unwrap()])
        .success()
        .stderr;
    assert!(!summary.contains("inconsisten"), "{summary}");
}

#[test]
fn a_forged_restatement_count_loses_no_event() {
    let dir = scratch("join-forged-preamble");
    let (parts, all) = ring(4, "r1", Some(2));
    let ring_dir = dir.join("run.ring");
    write_ring(&ring_dir, &parts);
    let out = dir.join("joined.vtrace");
    let (result, _) = join(&[&ring_dir], &out);
    // Part 2 claims 900 restating events and begins with one: only that
    // one is left out, so every event is there.
    assert_eq!(events(&out), all);
    let forged = result["forged_preambles"].as_array().unwrap();
    assert_eq!(forged.len(), 1, "{result}");
    assert!(forged[0].as_str().unwrap().ends_with("part-000002.vtrace"));
}

#[test]
fn two_thousand_parts_join_one_open_at_a_time() {
    let dir = scratch("join-many-parts");
    let (parts, all) = ring(2_000, "r1", None);
    let ring_dir = dir.join("run.ring");
    write_ring(&ring_dir, &parts);
    let out = dir.join("joined.vtrace");
    // 64 open files at most: every part opened at once failed at 2,000.
    let run = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 64 && exec \"$0\" \"$@\"")
        .arg(vramtrace_e2e::binary())
        .args([
            "join".as_ref(),
            ring_dir.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(events(&out), all);
}

/// A folder without parts is said to be one, as a join's error, not as a
/// misuse of the trace writer the join uses.
#[test]
fn a_folder_without_parts_is_named_as_such() {
    let dir = scratch("join-empty");
    let ring_dir = dir.join("empty.ring");
    std::fs::create_dir_all(&ring_dir).unwrap();
    let out = dir.join("joined.vtrace");
    let run = vramtrace([
        "join",
        ring_dir.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ])
    .fails_with(2);
    assert!(!run.stderr.contains("trace writer"), "{}", run.stderr);
    assert!(run.stderr.contains("holds no parts"), "{}", run.stderr);
}
