//! Damaged, truncated and hostile inputs (issue #20): each defect the audit
//! found, as a regression test of the binary. Bad input gets a one-line
//! error and exit code 2, in bounded memory (the runs that once took
//! gigabytes run here within 1 GiB of address space); damage that can be
//! skipped gets a warning, exit code 0 and the rest analyzed.

use std::path::{Path, PathBuf};
use vramtrace_e2e::{fixture, scratch, vramtrace, vramtrace_within};
use vramtrace_format::{
    BlockEvent, Event, EventData, Header, SegmentEvent, TraceWriter, WriterOptions,
};

/// Address space for runs on hostile input: what the fixed readers need,
/// far below what the audit saw (4 to 7 GB).
const MIB: u64 = 1024;

fn synthetic(name: &str) -> PathBuf {
    fixture(&format!("torch/synthetic/{name}"))
}

fn os(p: &Path) -> &std::ffi::OsStr {
    p.as_os_str()
}

#[test]
fn pickle_lengths_beyond_the_input_are_errors_at_once() {
    for name in ["long_str8.pickle", "long_bytes8.pickle", "long_str4.pickle"] {
        let path = synthetic(name);
        let len = std::fs::metadata(&path).unwrap().len();
        let run = vramtrace_within(MIB, ["summary".as_ref(), os(&path)]).fails_with(2);
        assert!(
            run.stderr
                .contains(&format!("truncated pickle: input ends at byte {len}")),
            "{name}: {}",
            run.stderr
        );
    }
}

#[test]
fn a_device_index_out_of_range_is_an_error() {
    for (name, device) in [
        ("device_minus_one_p4.pickle", "-1"),
        ("device_huge_p4.pickle", "18446744073709551615"),
    ] {
        let run = vramtrace_within(MIB, ["summary".as_ref(), os(&synthetic(name))]).fails_with(2);
        assert!(
            run.stderr
                .contains(&format!("is on device {device}, not one of 0 to 1023"))
                && run.stderr.contains("the segment at byte"),
            "{name}: {}",
            run.stderr
        );
    }
}

#[test]
fn a_bomb_of_shared_lists_in_the_settings_is_refused() {
    let run = vramtrace_within(
        MIB,
        [
            "summary".as_ref(),
            os(&synthetic("settings_bomb_p4.pickle")),
        ],
    )
    .fails_with(2);
    assert!(
        run.stderr
            .contains("an allocator setting (in the dict at byte")
            && run.stderr.contains("expands"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_pickle_filling_its_stack_is_refused() {
    let run = vramtrace_within(
        MIB,
        ["summary".as_ref(), os(&synthetic("none_bomb.pickle.xz"))],
    )
    .fails_with(2);
    assert!(run.stderr.contains("on the pickle stack"), "{}", run.stderr);
}

#[test]
fn decompression_has_a_budget_and_big_chunks_are_read_one_at_a_time() {
    let bomb = fixture("hostile/zero_chunks.vtrace.xz");
    let run = vramtrace_within(MIB, ["summary".as_ref(), os(&bomb)]).fails_with(2);
    assert!(
        run.stderr.contains("refused as a decompression bomb")
            && run.stderr.contains("--max-expansion"),
        "{}",
        run.stderr
    );
    // With the budget lifted, 300 MiB of chunks fit in a GiB: one at a time.
    let run = vramtrace_within(
        MIB,
        [
            "summary".as_ref(),
            os(&bomb),
            "--max-expansion".as_ref(),
            "none".as_ref(),
        ],
    )
    .success();
    assert!(run.stdout.contains("events    0"), "{}", run.stdout);
    let run = vramtrace([
        "info".as_ref(),
        os(&bomb),
        "--max-expansion".as_ref(),
        "0".as_ref(),
    ])
    .fails_with(2);
    assert!(run.stderr.contains("--max-expansion"), "{}", run.stderr);
}

/// A trace of `chunks` chunks of `per_chunk` allocations (and their frees),
/// with a footer: (bytes, events, offset of each chunk record).
fn chunked_trace(chunks: usize, per_chunk: usize) -> Vec<u8> {
    let mut w = TraceWriter::with_options(
        Vec::new(),
        Header::default(),
        WriterOptions {
            chunk_events: 2 * per_chunk,
            chunk_interval: None,
        },
    )
    .unwrap();
    w.push(Event {
        time_ns: 0,
        data: EventData::SegmentAlloc(SegmentEvent {
            addr: 0,
            size: 1 << 30,
            ..Default::default()
        }),
    })
    .unwrap();
    for t in 1..(chunks * per_chunk) as u64 {
        let block = BlockEvent {
            addr: 4096 * (t % 100),
            size: 4096,
            requested: 4000,
            ..Default::default()
        };
        for data in [EventData::Alloc(block), EventData::FreeCompleted(block)] {
            w.push(Event { time_ns: t, data }).unwrap();
        }
    }
    w.finish().unwrap()
}

/// Record offsets, from the framing.
fn records(bytes: &[u8]) -> Vec<(usize, usize, u8)> {
    let mut at = 13;
    let mut out = Vec::new();
    while at + 6 <= bytes.len() {
        let data = u32::from_be_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
        out.push((at, 6 + data, bytes[at + 5]));
        at += 6 + data;
    }
    out
}

#[test]
fn one_damaged_record_costs_only_itself() {
    let dir = scratch("hostile-damage");
    let bytes = chunked_trace(16, 500);
    let chunk_records: Vec<_> = records(&bytes).into_iter().filter(|r| r.2 == 4).collect();
    assert_eq!(chunk_records.len(), 16);
    let total: u64 = {
        let path = dir.join("whole.vtrace");
        std::fs::write(&path, &bytes).unwrap();
        let run = vramtrace(["info".as_ref(), "--json".as_ref(), os(&path)]).success();
        run.result()["events"].as_u64().unwrap()
    };
    // A bit flipped in chunk 8 of 16: its events are lost, and said to be.
    let mut flipped = bytes.clone();
    let (at, len, _) = chunk_records[7];
    flipped[at + len / 2] ^= 0x04;
    let path = dir.join("flipped.vtrace");
    std::fs::write(&path, &flipped).unwrap();
    let run = vramtrace(["summary".as_ref(), "--json".as_ref(), os(&path)]).success();
    let events = run.result()["events"].as_u64().unwrap();
    assert_eq!(events, total - 1000, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("bytes {at} to {} are damaged", at + len))
            && run.stderr.contains("1000 events are missing"),
        "{}",
        run.stderr
    );
    let run = vramtrace(["info".as_ref(), os(&path)]).success();
    assert!(run.stdout.contains("status    damaged"), "{}", run.stdout);

    // The same flip in the footer: every event is read.
    let mut flipped = bytes.clone();
    let (at, len, kind) = *records(&bytes).last().unwrap();
    assert_eq!(kind, 5);
    flipped[at + len - 2] ^= 0x04;
    std::fs::write(&path, &flipped).unwrap();
    let run = vramtrace(["summary".as_ref(), "--json".as_ref(), os(&path)]).success();
    assert_eq!(run.result()["events"].as_u64(), Some(total));
    assert!(run.stderr.contains("are damaged"), "{}", run.stderr);

    // One zero byte after a complete trace: a warning, every event read.
    let mut trailing = bytes.clone();
    trailing.push(0);
    std::fs::write(&path, &trailing).unwrap();
    let run = vramtrace(["summary".as_ref(), "--json".as_ref(), os(&path)]).success();
    assert_eq!(run.result()["events"].as_u64(), Some(total));
    assert!(
        run.stderr.contains("1 byte after the footer, at byte"),
        "{}",
        run.stderr
    );
}

/// A chunk re-typed as a record of an unknown type: skipped, but said, and
/// the footer's count shows what is missing (the audit saw `status
/// complete` with 968 of 1,032 events).
#[test]
fn an_unknown_record_is_reported_and_the_footer_checked() {
    let dir = scratch("hostile-unknown");
    let mut bytes = chunked_trace(4, 250);
    let (at, _, _) = records(&bytes).into_iter().find(|r| r.2 == 4).unwrap();
    bytes[at + 5] = 77;
    let crc = crc32fast::hash(&bytes[at..at + 6]);
    bytes[at + 6..at + 10].copy_from_slice(&crc.to_le_bytes());
    let path = dir.join("unknown.vtrace");
    std::fs::write(&path, &bytes).unwrap();
    let run = vramtrace(["info".as_ref(), "--json".as_ref(), os(&path)]).success();
    let json = run.result();
    assert_eq!(json["status"], "damaged");
    let damage = json["damage"].to_string();
    assert!(
        damage.contains("is of type 77") && damage.contains("500 events are missing"),
        "{damage}"
    );
}

/// A trace of `depth` nested phases (the audit's 30,000 took 5.3 GB in
/// `compare`; 100,000 aborted it).
/// Pushes events one nanosecond apart, after a 1 GiB segment at address 0:
/// the start of the hand-made traces below.
fn one_gib_then(
    w: &mut TraceWriter<Vec<u8>>,
) -> impl FnMut(&mut TraceWriter<Vec<u8>>, EventData) + use<> {
    let mut t = 1;
    let segment = SegmentEvent {
        addr: 0,
        size: 1 << 30,
        ..Default::default()
    };
    w.push(Event {
        time_ns: t,
        data: EventData::SegmentAlloc(segment),
    })
    .unwrap();
    move |w: &mut TraceWriter<Vec<u8>>, data| {
        t += 1;
        w.push(Event { time_ns: t, data }).unwrap();
    }
}

fn nested_phases(depth: usize) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), Header::default()).unwrap();
    let names: Vec<_> = (0..7)
        .map(|i| w.intern_string(&format!("level{i}")))
        .collect();
    let mut push = one_gib_then(&mut w);
    for i in 0..depth {
        let name = names[i % 7];
        push(&mut w, EventData::PhaseBegin { name, thread: 0 });
        if i % 1000 == 0 {
            let block = BlockEvent {
                addr: 512 * i as u64,
                size: 512,
                requested: 512,
                ..Default::default()
            };
            push(&mut w, EventData::Alloc(block));
        }
    }
    for i in (0..depth).rev() {
        let name = names[i % 7];
        push(&mut w, EventData::PhaseEnd { name, thread: 0 });
    }
    w.finish().unwrap()
}

#[test]
fn deep_nesting_is_linear() {
    let dir = scratch("hostile-nesting");
    let path = dir.join("nested.vtrace");
    std::fs::write(&path, nested_phases(100_000)).unwrap();
    for command in ["leaks", "summary"] {
        let run = vramtrace_within(MIB, [command.as_ref(), "--json".as_ref(), os(&path)]).success();
        assert!(
            run.stdout.len() < 1 << 20,
            "{command}: {} bytes",
            run.stdout.len()
        );
    }
    let run = vramtrace_within(
        MIB,
        ["compare".as_ref(), os(&path), os(&path), "--json".as_ref()],
    )
    .success();
    assert!(
        run.stdout.contains("…(99976 phases)…"),
        "{}",
        &run.stdout[..2000.min(run.stdout.len())]
    );
}

/// 400,000 live segments in descending address order (65 s once, against
/// 0.1 s ascending): each is inserted in `O(log n)`.
#[test]
fn segments_in_descending_order() {
    let dir = scratch("hostile-segments");
    let mut w = TraceWriter::new(Vec::new(), Header::default()).unwrap();
    const N: u64 = 400_000;
    for i in 0..N {
        let seg = SegmentEvent {
            addr: (N - i) << 21,
            size: 1 << 20,
            ..Default::default()
        };
        w.push(Event {
            time_ns: i,
            data: EventData::SegmentAlloc(seg),
        })
        .unwrap();
    }
    let path = dir.join("descending.vtrace");
    std::fs::write(&path, w.finish().unwrap()).unwrap();
    let run = vramtrace(["summary".as_ref(), "--json".as_ref(), os(&path)]).success();
    assert_eq!(
        run.result()["peak_reserved_bytes"].as_u64(),
        Some(N << 20),
        "{}",
        run.stderr
    );
}

#[test]
fn outputs_never_destroy_inputs() {
    let dir = scratch("hostile-outputs");
    let trace = dir.join("run.vtrace");
    std::fs::copy(fixture("leak.vtrace"), &trace).unwrap();
    let original = std::fs::read(&trace).unwrap();
    let same = dir.join(".").join("run.vtrace");
    let other = fixture("clean.vtrace");
    let t = os(&trace);
    let cases: Vec<Vec<&std::ffi::OsStr>> = vec![
        vec!["timeline".as_ref(), t, "-o".as_ref(), os(&same)],
        vec!["fragmentation".as_ref(), t, "-o".as_ref(), t],
        vec!["leaks".as_ref(), t, "-o".as_ref(), t],
        vec!["report".as_ref(), t, "-o".as_ref(), t],
        vec!["simulate".as_ref(), t, "-o".as_ref(), t],
        vec!["compare".as_ref(), os(&other), t, "-o".as_ref(), t],
        vec![
            "report".as_ref(),
            os(&other),
            "--baseline".as_ref(),
            t,
            "-o".as_ref(),
            t,
        ],
        vec!["import".as_ref(), t, "-o".as_ref(), t],
    ];
    for args in cases {
        let run = vramtrace(&args).fails_with(2);
        assert!(
            run.stderr.contains("would destroy the input"),
            "{args:?}: {}",
            run.stderr
        );
        assert_eq!(std::fs::read(&trace).unwrap(), original, "{args:?}");
    }
    // Written whole, through a temporary file: none is left behind.
    let out = dir.join("report.html");
    vramtrace(["report".as_ref(), t, "-o".as_ref(), os(&out)]).success();
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn an_output_over_a_trace_of_an_input_folder_is_refused_and_hidden_files_are_no_ranks() {
    let dir = scratch("hostile-folder-outputs");
    let ranks = dir.join("ranks");
    std::fs::create_dir_all(&ranks).unwrap();
    let rank1 = ranks.join("rank-1.vtrace");
    for name in ["rank-0.vtrace", "rank-1.vtrace"] {
        std::fs::copy(fixture("leak.vtrace"), ranks.join(name)).unwrap();
    }
    let original = std::fs::read(&rank1).unwrap();
    let run = vramtrace(["report".as_ref(), os(&ranks), "-o".as_ref(), os(&rank1)]).fails_with(2);
    assert!(
        run.stderr.contains("would destroy the input"),
        "{}",
        run.stderr
    );
    assert_eq!(std::fs::read(&rank1).unwrap(), original);
    // A write that a kill left behind (`.NAME.PID.tmp`) is not a rank.
    std::fs::write(ranks.join(".rank-2.vtrace.4242.tmp"), b"partial").unwrap();
    let run = vramtrace(["summary".as_ref(), "--json".as_ref(), os(&ranks)]).success();
    assert!(!run.stderr.contains(".tmp"), "{}", run.stderr);
    assert!(!run.stdout.contains(".tmp"), "{}", run.stdout);
    // An empty file among them is left out with a warning naming it; the
    // others are still summarized, with or without --ranks.
    std::fs::write(ranks.join("rank-3.vtrace"), b"").unwrap();
    for args in [vec![os(&ranks)], vec![os(&ranks), "--ranks".as_ref()]] {
        let run = vramtrace(std::iter::once("summary".as_ref()).chain(args)).success();
        assert!(
            run.stderr.contains("rank-3.vtrace") && run.stderr.contains("left out"),
            "{}",
            run.stderr
        );
        assert!(run.stdout.contains("rank-1.vtrace"), "{}", run.stdout);
    }
    // Named on the command line, it is still an error.
    vramtrace([
        "summary".as_ref(),
        os(&rank1),
        os(&ranks.join("rank-3.vtrace")),
    ])
    .fails_with(2);
}

#[test]
fn messages_name_the_argument_the_path_and_the_offset() {
    let run = vramtrace(["simulate"]).fails_with(2);
    assert!(
        run.stderr.contains("not provided: <TRACE>"),
        "{}",
        run.stderr
    );
    let run = vramtrace(["synth"]).fails_with(2);
    assert!(
        run.stderr.contains("not provided: --output <OUTPUT>"),
        "{}",
        run.stderr
    );
    let leak = fixture("leak.vtrace");
    let l = os(&leak);
    let run =
        vramtrace(["simulate".as_ref(), l, "--capacity".as_ref(), "-1".as_ref()]).fails_with(2);
    assert!(
        run.stderr.contains("invalid value '-1' for '--capacity"),
        "{}",
        run.stderr
    );
    for size in ["18446744073709551616B", "16777216TiB"] {
        let run =
            vramtrace(["simulate".as_ref(), l, "--capacity".as_ref(), size.as_ref()]).fails_with(2);
        assert!(run.stderr.contains("out of range"), "{}", run.stderr);
    }
    let run = vramtrace([
        "summary".as_ref(),
        l,
        "--to".as_ref(),
        "99999999999999h".as_ref(),
    ])
    .fails_with(2);
    assert!(
        run.stderr
            .contains("--to: time '99999999999999h' is out of range"),
        "{}",
        run.stderr
    );
    for (args, wanted) in [
        (
            vec!["synth", "-o", "x.vtrace", "--seq-len", "8:99999999999999"],
            "4 EiB",
        ),
        (
            vec!["synth", "-o", "x.vtrace", "--leak-bytes", "16000000TiB"],
            "4 EiB",
        ),
    ] {
        let dir = scratch("hostile-synth");
        let args: Vec<String> = args
            .iter()
            .map(|a| {
                if *a == "x.vtrace" {
                    dir.join(a).display().to_string()
                } else {
                    a.to_string()
                }
            })
            .collect();
        let run = vramtrace(&args).fails_with(2);
        assert!(run.stderr.contains(wanted), "{}", run.stderr);
    }

    let dir = scratch("hostile-messages");
    // Cut below the 10-byte signature: a trace cut short, not a foreign file.
    let cut = dir.join("cut.vtrace");
    std::fs::write(&cut, &std::fs::read(&leak).unwrap()[..5]).unwrap();
    let run = vramtrace(["info".as_ref(), os(&cut)]).fails_with(2);
    assert!(
        run.stderr
            .contains(&format!("{}: trace is cut short at byte 5", cut.display())),
        "{}",
        run.stderr
    );
    // info names the path, whatever the failure.
    let empty = dir.join("empty.vtrace");
    std::fs::write(&empty, b"").unwrap();
    for path in [empty.clone(), dir.join("missing.vtrace"), dir.clone()] {
        let run = vramtrace(["info".as_ref(), os(&path)]).fails_with(2);
        assert!(
            run.stderr.contains(&path.display().to_string()),
            "{}",
            run.stderr
        );
    }
    // A damaged compressed stream: where in it.
    let xz = std::fs::read(fixture("torch/mlp_expandable.pickle.xz")).unwrap();
    let mut damaged = xz.clone();
    let at = damaged.len() / 2;
    damaged[at] ^= 0xff;
    let path = dir.join("damaged.pickle.xz");
    std::fs::write(&path, &damaged).unwrap();
    let run = vramtrace(["info".as_ref(), os(&path)]).fails_with(2);
    assert!(
        run.stderr.contains("xz data damaged within its first")
            && run.stderr.contains(&path.display().to_string()),
        "{}",
        run.stderr
    );
}

/// Characters a terminal obeys or a page hides, as a reader would see them
/// raw: control characters (but newline and tab, and a page's carriage
/// return), DEL, C1 and the bidirectional overrides.
fn raw_controls(text: &str) -> usize {
    text.chars()
        .filter(|&c| {
            matches!(c, '\0'..='\u{8}' | '\u{b}'..='\u{c}' | '\u{e}'..='\u{1f}'
                | '\u{7f}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .count()
}

/// A trace whose frames and phases are named with escape sequences: a
/// file name that retitles the terminal, a function name that clears it,
/// a C1 CSI, a right-to-left override.
fn trace_with_hostile_names() -> (Vec<u8>, &'static str, &'static str) {
    const FILE: &str = "/home/u/\u{1b}]0;pwned\u{7}train\u{1b}[31m.py";
    const FUNCTION: &str = "forward\u{9b}2J\u{202e}drawkcab";
    let frames = [(FUNCTION, FILE, 7), ("main", "/home/u/main.py", 3)];
    let trace = vramtrace_e2e::repeated_phase_trace(&frames, "step\u{1b}[2J");
    (trace, FILE, FUNCTION)
}

#[test]
fn names_from_the_input_reach_no_terminal_and_no_page_raw() {
    let dir = scratch("hostile-names");
    let path = dir.join("names.vtrace");
    let (bytes, file, function) = trace_with_hostile_names();
    std::fs::write(&path, bytes).unwrap();
    for command in ["summary", "leaks", "info", "fragmentation", "simulate"] {
        let run = vramtrace([command.as_ref(), os(&path)]).success();
        assert_eq!(raw_controls(&run.stdout), 0, "{command}: {:?}", run.stdout);
        assert_eq!(raw_controls(&run.stderr), 0, "{command}: {:?}", run.stderr);
    }
    // The text shows them as escapes.
    let summary = vramtrace(["summary".as_ref(), os(&path)]).success();
    assert!(
        summary.stdout.contains("forward\\x9b2J\\u{202e}drawkcab"),
        "{}",
        summary.stdout
    );
    // JSON keeps the names as they are, as JSON escapes.
    let json = vramtrace(["summary".as_ref(), "--json".as_ref(), os(&path)]).success();
    assert_eq!(raw_controls(&json.stdout), 0);
    let frame = &json.result()["top_sites_at_peak"][0]["frames"][0];
    assert_eq!(
        frame.as_str(),
        Some(format!("{function} ({file}:7)").as_str())
    );
    // Charts and the page show them as escapes too.
    let svg = dir.join("timeline.svg");
    let html = dir.join("report.html");
    vramtrace(["timeline".as_ref(), os(&path), "-o".as_ref(), os(&svg)]).success();
    vramtrace(["report".as_ref(), os(&path), "-o".as_ref(), os(&html)]).success();
    for page in [&svg, &html] {
        let text = std::fs::read_to_string(page).unwrap();
        assert_eq!(raw_controls(&text), 0, "{}", page.display());
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("\\x1b]0;pwned\\x07train"),
        "the file name, shown"
    ); // The folded stacks, written to a file that `cat` shows, as escapes
    // (issue #46: ESC, BEL and NUL went out raw and set the terminal's
    // title).
    let folded = dir.join("stacks.folded");
    vramtrace([
        "flamegraph".as_ref(),
        os(&path),
        "--folded".as_ref(),
        "-o".as_ref(),
        os(&folded),
    ])
    .success();
    let text = std::fs::read_to_string(&folded).unwrap();
    assert_eq!(raw_controls(&text), 0, "{text:?}");
    assert!(text.contains("\\x1b]0:pwned\\x07train"), "{text}");
}

#[test]
fn a_message_quoting_a_long_value_stays_one_readable_line() {
    let dir = scratch("hostile-message");
    let path = dir.join("names.vtrace");
    std::fs::write(&path, trace_with_hostile_names().0).unwrap();
    let setting = format!("bogus\u{1b}]0;x\u{7}:{}", "x".repeat(100_000));
    let run = vramtrace([
        "simulate".as_ref(),
        os(&path),
        "--alloc-conf".as_ref(),
        setting.as_ref(),
    ])
    .fails_with(2);
    assert_eq!(run.stderr.lines().count(), 1, "{}", &run.stderr[..200]);
    assert!(run.stderr.len() < 2_000, "{} bytes", run.stderr.len());
    assert!(
        run.stderr.contains("bogus\\x1b]0;x\\x07"),
        "{}",
        &run.stderr[..200]
    );
    assert!(run.stderr.contains("more characters)"));
}

#[cfg(unix)]
#[test]
fn a_pipe_as_input_is_refused_plainly() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(vramtrace_e2e::binary())
        .args(["summary", "/dev/stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let trace = std::fs::read(fixture("leak.vtrace")).unwrap();
    // The reader may refuse before reading it all: a broken pipe is fine.
    let _ = child.stdin.take().unwrap().write_all(&trace);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is not a regular file") && stderr.lines().count() == 1,
        "{stderr}"
    );
}

/// A trace of `n` devices, each named by one event alone (a tag, a limit
/// or a device-memory sample, in turn), ids spread over the `u32` range
/// and the last at `u32::MAX`: a few bytes each.
fn devices_of_one_event(n: u32) -> Vec<u8> {
    use vramtrace_format::{Category, DeviceMemoryEvent, LimitEvent, TagEvent};
    let mut w = TraceWriter::new(Vec::new(), Header::default()).unwrap();
    for i in 0..n {
        let device = if i + 1 == n {
            u32::MAX
        } else {
            i.wrapping_mul(2_654_435_761)
        };
        let data = match i % 3 {
            0 => EventData::Tag(TagEvent::new(0x1000, device, Category::Parameter)),
            1 => EventData::Limit(LimitEvent {
                device,
                limit_bytes: 1 << 30,
                total_bytes: 1 << 34,
                ..Default::default()
            }),
            _ => EventData::DeviceMemory(DeviceMemoryEvent {
                device,
                free_bytes: 1 << 33,
                total_bytes: 1 << 34,
                ..Default::default()
            }),
        };
        w.push(Event {
            time_ns: u64::from(i) * 1_000_000,
            data,
        })
        .unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn a_device_costs_what_its_events_do() {
    // Issue #46: each device cost 19.2 MB in a Perfetto export and 2 MB in
    // `report` and `compare`, allocated before its first event: 255 tagged
    // devices (2.3 KB) aborted the export at 2 GiB, 1,023 aborted `report`.
    // Within 1 GiB of address space (the binary's own start costs most of
    // it), each device may take about half a MiB at most.
    let dir = scratch("hostile-devices-of-one-event");
    let trace = dir.join("devices.vtrace");
    std::fs::write(&trace, devices_of_one_event(1023)).unwrap();
    let t = os(&trace);
    let out = dir.join("out");
    let o = os(&out);
    let runs: [Vec<&std::ffi::OsStr>; 5] = [
        vec![
            "export".as_ref(),
            t,
            "--format".as_ref(),
            "perfetto".as_ref(),
            "-o".as_ref(),
            o,
        ],
        vec!["report".as_ref(), t, "-o".as_ref(), o],
        vec!["compare".as_ref(), t, t, "--json".as_ref()],
        vec!["summary".as_ref(), t, "--json".as_ref()],
        vec![
            "timeline".as_ref(),
            t,
            "--json".as_ref(),
            "--by".as_ref(),
            "category".as_ref(),
        ],
    ];
    for args in runs {
        let run = vramtrace_within(MIB, &args);
        assert_eq!(run.code, Some(0), "{args:?}: {}", run.stderr);
    }
    // Every device is in the export, the highest id's track included (its
    // thread id once overflowed 32 bits).
    vramtrace_within(
        MIB,
        [
            "export".as_ref(),
            t,
            "--format".as_ref(),
            "perfetto".as_ref(),
            "-o".as_ref(),
            o,
        ],
    )
    .success();
    let export: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let names: Vec<&str> = export["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    assert_eq!(names.len(), 1023);
    assert!(
        names.contains(&"GPU 4294967295 memory (vramtrace)"),
        "{:?}",
        &names[..3]
    );
    let tid = export["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["args"]["name"] == "GPU 4294967295 memory (vramtrace)")
        .unwrap()["tid"]
        .as_u64();
    assert_eq!(tid, Some(1_000_000 + u64::from(u32::MAX)));
}

#[test]
fn a_killed_synth_leaves_no_file_behind() {
    // Issue #46: SIGKILL left `.NAME.PID.tmp` beside the output. The file
    // being written now has no name until it is whole.
    let dir = scratch("hostile-killed-synth");
    let out = dir.join("big.vtrace");
    let mut child = std::process::Command::new(vramtrace_e2e::binary())
        .args(["synth", "--events", "1e9", "-o"])
        .arg(&out)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed once it has written something: a file open in `dir` (named or
    // not), past its first bytes.
    let fds = PathBuf::from(format!("/proc/{}/fd", child.id()));
    let writing = || {
        std::fs::read_dir(&fds)
            .into_iter()
            .flatten()
            .flatten()
            .any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|target| target.starts_with(&dir))
                    && std::fs::metadata(fd.path()).is_ok_and(|m| m.len() > 1 << 20)
            })
    };
    while !writing() {
        assert!(child.try_wait().unwrap().is_none(), "synth ended early");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
