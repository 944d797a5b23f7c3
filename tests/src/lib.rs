//! Helpers for the end-to-end tests of the `vramtrace` binary: find (or
//! build) it, run it, and point at the repository's fixtures.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the repository")
        .to_path_buf()
}

/// A file under `fixtures/`.
pub fn fixture(name: &str) -> PathBuf {
    repo().join("fixtures").join(name)
}

/// The `vramtrace` binary of this build. `cargo test --workspace` builds it
/// before any test runs; when this package is tested alone, it is built here.
pub fn binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        // Test executables live in target/<profile>/deps/.
        let exe = std::env::current_exe().expect("test executable path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>/deps");
        let binary = profile_dir.join(format!("vramtrace{}", std::env::consts::EXE_SUFFIX));
        if !binary.exists() {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let release = profile_dir.ends_with("release");
            let mut build = Command::new(cargo);
            build.args(["build", "-p", "vramtrace", "--bin", "vramtrace"]);
            if release {
                build.arg("--release");
            }
            let status = build.current_dir(repo()).status().expect("run cargo build");
            assert!(status.success(), "building vramtrace failed");
        }
        binary
    })
}

/// A command's JSON with one device's result at the top: a document of one
/// device (`{schema_version, rank, warnings, devices, by_device: [one]}`) as
/// that device's result, with the document's `schema_version`, `rank` and
/// `warnings` beside its fields (as the Python package's
/// `vramtrace.one_device` reads it); any other document as it is. An array
/// of documents, each so.
pub fn one_device(json: serde_json::Value) -> serde_json::Value {
    fn one(document: serde_json::Value) -> serde_json::Value {
        let serde_json::Value::Object(fields) = &document else {
            return document;
        };
        let Some(serde_json::Value::Array(by_device)) = fields.get("by_device") else {
            return document;
        };
        let [serde_json::Value::Object(result)] = by_device.as_slice() else {
            return document;
        };
        let mut result = result.clone();
        for key in ["schema_version", "rank", "warnings"] {
            if let Some(value) = fields.get(key) {
                result.entry(key).or_insert_with(|| value.clone());
            }
        }
        serde_json::Value::Object(result)
    }
    match json {
        serde_json::Value::Array(documents) => {
            serde_json::Value::Array(documents.into_iter().map(one).collect())
        }
        document => one(document),
    }
}

/// The result of one run of the binary.
#[derive(Debug)]
pub struct Run {
    /// The exit code (`None` if killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// The JSON object printed on stdout.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }

    /// The JSON printed on stdout, read by [`one_device`].
    pub fn result(&self) -> serde_json::Value {
        one_device(self.json())
    }

    /// Asserts exit code 0 and returns self.
    pub fn success(self) -> Self {
        assert_eq!(self.code, Some(0), "expected success:\n{self:#?}");
        self
    }

    /// Asserts a failure with this code, one line on stderr, no panic and no
    /// backtrace; returns self.
    pub fn fails_with(self, code: i32) -> Self {
        assert_eq!(
            self.code,
            Some(code),
            "expected exit code {code}:\n{self:#?}"
        );
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "expected one line on stderr:\n{}",
            self.stderr
        );
        assert!(lines[0].starts_with("error: "), "{}", self.stderr);
        assert!(
            !self.stderr.contains("panicked") && !self.stderr.contains("internal error"),
            "{}",
            self.stderr
        );
        self
    }
}

/// Runs `vramtrace` with these arguments.
pub fn vramtrace<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut command = Command::new(binary());
    command.args(args);
    run(command)
}

/// Runs `vramtrace` with these arguments and at most `mib` MiB of address
/// space (`ulimit -v`): an allocation past it fails, and the process dies
/// of the abort that follows (no exit code), where bounded code goes on.
pub fn vramtrace_within<I, S>(mib: u64, args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(format!("ulimit -v {} && exec \"$0\" \"$@\"", mib * 1024))
        .arg(binary())
        .args(args);
    run(command)
}

fn run(mut command: Command) -> Run {
    let Output {
        status,
        stdout,
        stderr,
    } = command
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("run vramtrace");
    Run {
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// A fresh scratch directory for one test, under the build's `target/tmp`
/// (where cargo puts integration tests' files): emptied when the test runs
/// again, left for a look after a failure, gone with `cargo clean`.
pub fn scratch(name: &str) -> PathBuf {
    let target = binary()
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/vramtrace");
    let dir = target.join("tmp").join("vramtrace-e2e").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Chromium, when installed (CI installs it; elsewhere a test that needs it
/// says it was skipped, and fails under CI).
pub fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if found.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have chromium (.ci/run installs it)"
        );
        eprintln!("skipped: no chromium on this machine");
    }
    found
}

/// Writes the HTML report of `trace` into `dir`; returns its path.
pub fn write_report(trace: &Path, dir: &Path) -> PathBuf {
    let out = dir.join("report.html");
    vramtrace([
        "report".as_ref(),
        trace.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ])
    .success();
    out
}

/// Writes the run of issue #28 to `path` (format 1.3): on a card of `card`
/// bytes, with `outside` bytes held outside the allocator, PyTorch's
/// caching allocator capped at `cap` (at the card, when `None`) makes
/// `count` tensors of 6 MiB, frees two of every three, then asks for `big`
/// bytes and runs out of memory. A limit event and device-memory samples
/// (at the start, after each segment event and at the OOM) are written as
/// the recorder writes them.
pub fn write_capped_run(
    path: &Path,
    card: u64,
    cap: Option<u64>,
    outside: u64,
    count: u64,
    big: u64,
) {
    use vramtrace_allocator::device::SimulatedDevice;
    use vramtrace_allocator::{AllocatorConfig, CachingAllocator};
    use vramtrace_format::{DeviceMemoryEvent, Event, EventData, Header, LimitEvent, TraceWriter};
    const MIB: u64 = 1 << 20;
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = TraceWriter::new(file, Header::default()).unwrap();
    let small = w.intern_symbol_stack([("make", "issue28.py", 5u32)]);
    let large = w.intern_symbol_stack([("ask", "issue28.py", 9u32)]);
    let limit = cap.unwrap_or(card - outside);
    let mut alloc = CachingAllocator::new(SimulatedDevice::new(limit), AllocatorConfig::default());
    alloc.set_event_log(true);
    let mut time = 0u64;
    let mut push = |w: &mut TraceWriter<_>, data| {
        time += 1000;
        w.push(Event {
            time_ns: time,
            data,
        })
        .unwrap();
    };
    push(
        &mut w,
        EventData::Limit(LimitEvent {
            limit_bytes: cap.unwrap_or(card),
            total_bytes: card,
            ..Default::default()
        }),
    );
    let sample = |free| {
        EventData::DeviceMemory(DeviceMemoryEvent {
            free_bytes: free,
            total_bytes: card,
            ..Default::default()
        })
    };
    push(&mut w, sample(card - outside));
    let mut write =
        |w: &mut TraceWriter<_>, alloc: &mut CachingAllocator<SimulatedDevice>, stack| {
            let events: Vec<EventData> = alloc.drain_events().collect();
            let free = card - outside - alloc.stats().reserved_bytes.all.current;
            for mut e in events {
                let sampled = matches!(
                    e,
                    EventData::SegmentAlloc(_) | EventData::SegmentFree(_) | EventData::Oom(_)
                );
                match &mut e {
                    EventData::Alloc(x) => x.stack = stack,
                    EventData::Oom(o) => {
                        o.stack = stack;
                        o.free_bytes = free;
                    }
                    _ => {}
                }
                push(w, e);
                if sampled {
                    push(w, sample(free));
                }
            }
        };
    let mut addrs = Vec::new();
    for _ in 0..count {
        addrs.push(alloc.malloc(6 * MIB, 0).unwrap().addr);
        write(&mut w, &mut alloc, small);
    }
    for (i, addr) in addrs.iter().enumerate() {
        if i % 3 != 0 {
            alloc.free(*addr).unwrap();
            write(&mut w, &mut alloc, small);
        }
    }
    let _ = alloc.malloc(big, 0);
    write(&mut w, &mut alloc, large);
    w.finish().unwrap();
}

/// A trace of one 1 GiB segment, then three repetitions of the phase
/// `phase`, each allocating 1 MiB at the stack `frames` (function, file,
/// line; innermost first): where names from the input reach every printer
/// (a site, a phase).
pub fn repeated_phase_trace(frames: &[(&str, &str, u32)], phase: &str) -> Vec<u8> {
    use vramtrace_format::{BlockEvent, Event, EventData, Header, SegmentEvent, TraceWriter};
    let mut w = TraceWriter::new(Vec::new(), Header::default()).unwrap();
    let stack = w.intern_symbol_stack(frames.iter().copied());
    let phase = w.intern_string(phase);
    let mut time_ns = 0;
    let mut push = |w: &mut TraceWriter<Vec<u8>>, data| {
        time_ns += 1;
        w.push(Event { time_ns, data }).unwrap();
    };
    let segment = SegmentEvent {
        addr: 0,
        size: 1 << 30,
        ..Default::default()
    };
    push(&mut w, EventData::SegmentAlloc(segment));
    for i in 0..3 {
        push(
            &mut w,
            EventData::PhaseBegin {
                name: phase,
                thread: 0,
            },
        );
        let block = BlockEvent {
            addr: i << 20,
            size: 1 << 20,
            requested: 1 << 20,
            stack,
            ..Default::default()
        };
        push(&mut w, EventData::Alloc(block));
        push(
            &mut w,
            EventData::PhaseEnd {
                name: phase,
                thread: 0,
            },
        );
    }
    w.finish().unwrap()
}
