//! Fuzzing on the stable toolchain: three targets, each fed inputs mutated
//! from the bundled fixtures for a fixed budget, checked for panics and for
//! memory beyond a bound in proportion to the input (a counting allocator
//! measures each run's peak).
//!
//! - **trace**: the trace reader, then every analysis (the `report`
//!   command's pass, with the input as its own baseline), `simulate` and
//!   `plan` (the input as two runs, and alone).
//!   Mutations keep the records' checksums right half of the time, so that
//!   they reach the decoders behind them.
//! - **pickle**: the snapshot reader (pickle, then conversion), then the
//!   same analyses.
//! - **replay**: event sequences built from random bytes (any kind, any
//!   order, unknown addresses, mismatched phases on several threads),
//!   written as a trace and analyzed: the replay and the analyses on events
//!   no allocator would emit.
//! - **plan**: pairs of traces, each mutated on its own (from one seed or
//!   two), planned from as two runs: the line-up of two programs' or two
//!   damaged runs' allocations, the laws fitted through them and the
//!   search, under values and caps at the edges of 64 bits.
//!
//! `cargo test --release -p vramtrace --test fuzz -- --nocapture` runs each
//! target for `VRAMTRACE_FUZZ_SECONDS` (default 10; CI runs the default in
//! a debug build), from `VRAMTRACE_FUZZ_SEED` (default: the clock; printed).
//! A failing input is written to `target/tmp/fuzz-failures/` and named in
//! the failure; once fixed, it goes into `fixtures/fuzz/`, where
//! `fuzz_failures_stay_fixed` runs it on every test run. `docs/fuzzing.md`
//! has the executions run clean.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Read;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use vramtrace::command::ReplayOptions;
use vramtrace::command::export::{perfetto, pprof};
use vramtrace::command::flamegraph::{Moment, flamegraph};
use vramtrace::command::plan::{PlanOptions, plan};
use vramtrace::command::report::{ReportOptions, report};
use vramtrace::command::simulate::{SimulateOptions, simulate};
use vramtrace::input::{Input, decompress};
use vramtrace::print::perfetto::{ProfilerTrace, join_profiler_trace};
use vramtrace::progress::NoProgress;
use vramtrace::simulate::plan::Varied;
use vramtrace_format::{
    BlockEvent, DeviceMemoryEvent, Event, EventData, Header, LimitEvent, OomEvent, PART_KEY,
    PREAMBLE_EVENTS_KEY, RING_KEY, SegmentEvent, StringId, TagEvent, TraceWriter, WriterOptions,
};

/// Counts the bytes allocated now, and the most since the last reset.
struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = CURRENT.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                let now = CURRENT.fetch_add(new_size - layout.size(), Ordering::Relaxed) + new_size
                    - layout.size();
                PEAK.fetch_max(now, Ordering::Relaxed);
            } else {
                CURRENT.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The memory one run may take beyond what was allocated before it: a
/// base for the analyses' own tables, and a multiple of the input for what
/// it decodes to.
fn memory_bound(input_len: usize) -> usize {
    (96 << 20) + 200 * input_len
}

/// A small, fast, seedable generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.next().is_multiple_of(one_in)
    }
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// The seeds of a target: the bundled files of that kind, decompressed,
/// up to 400 KB each (bigger ones would slow every run down).
fn seeds(pickles: bool) -> Vec<Vec<u8>> {
    let mut dirs = vec![fixtures(), fixtures().join("compat")];
    if pickles {
        dirs = vec![fixtures().join("torch"), fixtures().join("torch/synthetic")];
    }
    let mut seeds = Vec::new();
    for dir in dirs {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let wanted = if pickles {
                name.contains(".pickle") && !name.contains("bomb")
            } else {
                name.ends_with(".vtrace")
            };
            if !wanted {
                continue;
            }
            let (mut stream, _) = decompress(std::fs::File::open(&path).unwrap()).unwrap();
            let mut bytes = Vec::new();
            stream.read_to_end(&mut bytes).unwrap();
            if bytes.len() <= 400_000 {
                seeds.push(bytes);
            }
        }
    }
    assert!(!seeds.is_empty());
    seeds
}

/// Values that cross boundaries: lengths, counts, indices and sizes.
const INTERESTING: [u64; 12] = [
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    1 << 40,
    i64::MAX as u64,
    1 << 63,
    u64::MAX,
];

/// One to eight mutations of `seed`, spliced with `other` at times.
fn mutate(rng: &mut Rng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(8) {
        if b.is_empty() {
            b.push(rng.next() as u8);
        }
        let at = rng.below(b.len());
        match rng.below(9) {
            0 => b[at] ^= 1 << rng.below(8),
            1 => b[at] = rng.next() as u8,
            2 => b[at] = INTERESTING[rng.below(5)] as u8,
            3 => {
                let v = INTERESTING[rng.below(INTERESTING.len())];
                let width = [1, 2, 4, 8][rng.below(4)];
                let bytes = if rng.chance(2) {
                    v.to_le_bytes()
                } else {
                    v.to_be_bytes()
                };
                let end = (at + width).min(b.len());
                b[at..end].copy_from_slice(&bytes[..end - at]);
            }
            4 => {
                let len = rng.below(64).min(b.len() - at);
                b.drain(at..at + len);
            }
            5 => {
                let len = rng.below(64).min(b.len() - at);
                let copy = b[at..at + len].to_vec();
                let to = rng.below(b.len());
                b.splice(to..to, copy);
            }
            6 => b.truncate(at),
            7 if !other.is_empty() => {
                let from = rng.below(other.len());
                let len = rng.below(256).min(other.len() - from);
                b.splice(at..at, other[from..from + len].iter().copied());
            }
            _ => {
                let len = rng.below(16);
                let byte = rng.next() as u8;
                b.splice(at..at, std::iter::repeat_n(byte, len));
            }
        }
    }
    b
}

/// Recomputes the checksums of every record whose framing is still there,
/// so that mutations inside records get past the checks to the decoders.
fn fix_checksums(b: &mut [u8]) {
    let mut at = 13;
    while at + 14 <= b.len() && b[at] == 0xc9 {
        let data = u32::from_be_bytes(b[at + 1..at + 5].try_into().unwrap()) as usize;
        if data < 8 || at + 6 + data > b.len() {
            return;
        }
        let head = crc32fast::hash(&b[at..at + 6]);
        b[at + 6..at + 10].copy_from_slice(&head.to_le_bytes());
        let payload = crc32fast::hash(&b[at + 14..at + 6 + data]);
        b[at + 10..at + 14].copy_from_slice(&payload.to_le_bytes());
        at += 6 + data;
    }
}

/// Everything a command does with an opened input: every analysis in one
/// pass (with the input as its own baseline, so the comparison runs too),
/// the HTML report, and the simulation. Errors are fine; panics are not.
fn analyze(input: &Input) {
    let options = ReportOptions {
        replay: ReplayOptions::default(),
        top: 5,
        explorer: Default::default(),
        // The simulator runs below; the report's capacities would only
        // repeat it.
        what_if: false,
        reserve: None,
    };
    if let Ok(result) = report(input, Some(input), &options, &NoProgress) {
        let _ = vramtrace::print::html::report(&result, 5);
    }
    let _ = simulate(input, &SimulateOptions::default(), &NoProgress);
    exports(input);
    // The planner: the input against itself at two batch sizes (every law
    // fitted through it), and alone (activations assumed to scale), under
    // a cap and on the card it names.
    for (values, cap) in [(vec![4, 8], Some(1 << 30)), (vec![8], None)] {
        let runs = vec![input; values.len()];
        let options = PlanOptions {
            values: Some((Varied::Batch, values)),
            cap,
            at: Some(1 << 20),
            step: 1,
            ..PlanOptions::default()
        };
        if let Ok(result) = plan(&runs, &options, &NoProgress) {
            let _ = vramtrace::print::text::plan(&result);
        }
    }
}

/// The exports: Perfetto (alone, and joined to a profiler trace that
/// starts with the input), pprof, and the folded stacks of each device.
fn exports(input: &Input) {
    let options = ReplayOptions::default();
    let start = input.header().start_unix_ns;
    if let Ok(export) = perfetto(input, &options, start, &NoProgress) {
        let doc = format!(
            r#"{{"baseTimeNanoseconds": {start}, "traceEvents": [{{"ph": "X", "name": "k", "ts": 0, "dur": 1}}], "vramtrace": 1}}"#
        );
        if let Ok(trace) = ProfilerTrace::read(doc.into_bytes()) {
            let _ = join_profiler_trace(trace, export);
        }
    }
    if let Ok(export) = pprof(input, &options, &NoProgress) {
        let profile = vramtrace::print::pprof::profile(&export.graphs, export.start_unix_ns);
        let _ = vramtrace::print::pprof::encode(&profile);
    }
    if let Ok(graphs) = flamegraph(input, &options, Moment::AllocatedPeak, &NoProgress) {
        for d in &graphs.devices {
            let _ = d.result.stacks.folded_lines();
        }
    }
}

/// A ring of two sound parts, as the recorder writes them (made once).
fn ring_parts() -> &'static [Vec<u8>] {
    static PARTS: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    PARTS.get_or_init(|| {
        let mut header = Header::default();
        header.metadata.insert(RING_KEY.into(), "fuzz".into());
        let mut w = TraceWriter::new(Vec::new(), header.clone()).unwrap();
        let mut parts = Vec::new();
        for p in 0..2u64 {
            for i in 0..20u64 {
                let addr = (p * 20 + i) << 12;
                w.push(Event {
                    time_ns: 1_000 * (p * 20 + i + 1),
                    data: EventData::Alloc(BlockEvent {
                        addr,
                        size: 4096,
                        requested: 4096,
                        ..Default::default()
                    }),
                })
                .unwrap();
            }
            let mut next = header.clone();
            next.metadata.insert(PART_KEY.into(), (p + 1).to_string());
            next.metadata.insert(PREAMBLE_EVENTS_KEY.into(), "0".into());
            parts.push(w.rotate(Vec::new(), next, &Default::default()).unwrap());
        }
        parts
    })
}

/// `join` of a ring whose newest part (and, in turn, whose oldest) is the
/// input, and of the input given twice: whatever the input, no panic.
fn join_with(input: &[u8]) {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-join-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sound = ring_parts();
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let a = write("part-000000.vtrace", &sound[0]);
    let b = write("part-000001.vtrace", &sound[1]);
    let c = write("part-000002.vtrace", input);
    for parts in [
        vec![a.clone(), b.clone(), c.clone()],
        vec![c.clone(), a, b, c.clone()],
    ] {
        let _ = vramtrace::command::join::join(&parts, std::io::sink(), Path::new("joined"));
    }
}

/// The events that a byte string stands for: each event's kind and fields
/// drawn from small sets, so that addresses, segments and phases meet.
fn events_of(bytes: &[u8]) -> Vec<Event> {
    let mut rng = Rng(bytes.iter().fold(0x9e37_79b9_7f4a_7c15, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x1000_0000_01b3)
    }) | 1);
    let mut t = 0u64;
    let mut events = Vec::with_capacity(bytes.len());
    for &op in bytes {
        t += rng.below(3) as u64;
        let addr = (rng.below(16) as u64) << 20;
        let size = [512, 4096, 1 << 20, 3 << 20, 0, u64::MAX][rng.below(6)];
        let block = BlockEvent {
            addr,
            size,
            requested: size.saturating_sub(rng.below(600) as u64),
            stream: rng.below(2) as u64,
            thread: rng.below(3) as u32,
            ..Default::default()
        };
        let segment = SegmentEvent {
            addr: addr & !((2 << 20) - 1),
            size: [2 << 20, 20 << 20, 1 << 20, u64::MAX][rng.below(4)],
            ..Default::default()
        };
        // Phase names: iter0, forward, iter1, an optimizer step, backward.
        let name = StringId(1 + [0, 1, 2, 4, 5][rng.below(5)]);
        let thread = rng.below(3) as u32;
        // Devices: mostly the first; at times one whose id is past what a
        // Perfetto track id held in 32 bits, or the last id.
        let device = [0, 0, 0, 0, 1, 4_293_967_296, u32::MAX][rng.below(7)];
        let block = BlockEvent { device, ..block };
        let data = match op % 15 {
            0 | 1 => EventData::Alloc(block),
            2 => EventData::FreeRequested(block),
            3 => EventData::FreeCompleted(block),
            4 => EventData::SegmentAlloc(segment),
            5 => EventData::SegmentFree(segment),
            6 => EventData::SegmentMap(segment),
            7 => EventData::SegmentUnmap(segment),
            8 => EventData::PhaseBegin { name, thread },
            9 => EventData::PhaseEnd { name, thread },
            10 => EventData::Oom(OomEvent {
                requested: size,
                ..Default::default()
            }),
            11 => EventData::Annotation {
                key: name,
                value: StringId(4),
            },
            // Limits and device-memory samples: plausible, zero, past the
            // card, and absurd.
            13 => EventData::Limit(LimitEvent {
                device,
                thread,
                limit_bytes: [0, 1 << 30, 12 << 30, u64::MAX][rng.below(4)],
                total_bytes: [0, 80 << 30, 8 << 30, u64::MAX][rng.below(4)],
            }),
            14 => EventData::DeviceMemory(DeviceMemoryEvent {
                device: rng.below(2) as u32,
                thread,
                free_bytes: [0, 1 << 30, 70 << 30, u64::MAX][rng.below(4)],
                total_bytes: [0, 80 << 30, 8 << 30, u64::MAX][rng.below(4)],
            }),
            // Categories known and unknown, on blocks live or not.
            _ => EventData::Tag(TagEvent {
                addr,
                device,
                thread,
                code: rng.below(9) as u8,
            }),
        };
        events.push(Event { time_ns: t, data });
    }
    events
}

/// The trace of [`events_of`]: strings for the phase names, chunks of a
/// size the bytes choose.
fn replay_trace(bytes: &[u8]) -> Vec<u8> {
    let chunk_events = 1 + bytes.first().copied().unwrap_or(0) as usize * 4;
    let mut w = TraceWriter::with_options(
        Vec::new(),
        Header::default(),
        WriterOptions {
            chunk_events,
            chunk_interval: None,
        },
    )
    .unwrap();
    for name in [
        "iter0",
        "forward",
        "iter1",
        "step",
        "Optimizer.step#SGD.step",
        "backward",
    ] {
        w.intern_string(name);
    }
    for e in events_of(bytes) {
        w.push(e).unwrap();
    }
    w.finish().unwrap()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Trace,
    Pickle,
    Replay,
    Plan,
}

/// A pair of inputs as one: the first's length (8 bytes, little-endian),
/// the first, the second.
fn pair(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = (a.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(a);
    out.extend_from_slice(b);
    out
}

/// The two inputs of [`pair`]'s bytes (a short or overlong length gives
/// what there is).
fn unpair(bytes: &[u8]) -> (&[u8], &[u8]) {
    let Some((len, rest)) = bytes.split_first_chunk::<8>() else {
        return (&[], &[]);
    };
    let n = (u64::from_le_bytes(*len).min(rest.len() as u64)) as usize;
    rest.split_at(n)
}

/// `plan` on a pair of traces as two runs, under each set of options: the
/// values given (batch, sequence length, and ones past 2^53 and at 2^64 −
/// 1), read from the runs' notes, under a cap, on the card recorded, with
/// a value to simulate in full. Errors are fine; panics are not.
fn plan_pair(bytes: &[u8]) {
    let (a, b) = unpair(bytes);
    let (Ok(a), Ok(b)) = (
        Input::from_bytes(a.to_vec(), &NoProgress),
        Input::from_bytes(b.to_vec(), &NoProgress),
    ) else {
        return;
    };
    let runs = [&a, &b];
    let sets = [
        (
            Some((Varied::Batch, vec![4, 8])),
            Some(1 << 30),
            Some(1 << 20),
            1,
        ),
        (Some((Varied::Seq, vec![512, 128])), None, None, 8),
        (None, None, Some(64), 1),
        (
            Some((Varied::Batch, vec![(1 << 53) + 1, u64::MAX])),
            Some(u64::MAX),
            Some(u64::MAX),
            3,
        ),
    ];
    for (values, cap, at, step) in sets {
        let options = PlanOptions {
            values,
            cap,
            at,
            step,
            ..PlanOptions::default()
        };
        if let Ok(result) = plan(&runs, &options, &NoProgress) {
            let _ = vramtrace::print::text::plan(&result);
            let _ = serde_json::to_string(&result);
        }
    }
}

/// Runs `target` for its budget; returns the executions run, or what
/// failed.
fn fuzz(target: Target, seed: u64, budget: Duration) -> Result<u64, String> {
    let seeds = match target {
        Target::Trace | Target::Plan => seeds(false),
        Target::Pickle => seeds(true),
        Target::Replay => vec![vec![0u8; 64], (0..=255).collect()],
    };
    let mut rng = Rng(seed | 1);
    let started = Instant::now();
    let mut runs = 0u64;
    let mut slowest = Duration::ZERO;
    while started.elapsed() < budget {
        let base = &seeds[rng.below(seeds.len())];
        let other = &seeds[rng.below(seeds.len())];
        let mut input = mutate(&mut rng, base, other);
        if matches!(target, Target::Trace | Target::Plan) && rng.chance(2) {
            fix_checksums(&mut input);
        }
        if target == Target::Plan {
            // The second run: of the same program (the same seed, mutated
            // on its own) half of the time, of another the rest.
            let from = if rng.chance(2) {
                base
            } else {
                &seeds[rng.below(seeds.len())]
            };
            let mut second = mutate(&mut rng, from, other);
            if rng.chance(2) {
                fix_checksums(&mut second);
            }
            input = pair(&input, &second);
        }
        if target == Target::Replay {
            input.truncate(4096);
        }
        let before = CURRENT.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let run_started = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            if target == Target::Plan {
                return plan_pair(&input);
            }
            let bytes = match target {
                Target::Replay => replay_trace(&input),
                _ => input.clone(),
            };
            if target == Target::Trace {
                join_with(&bytes);
            }
            if let Ok(opened) = Input::from_bytes(bytes, &NoProgress) {
                analyze(&opened);
            }
        }));
        slowest = slowest.max(run_started.elapsed());
        let used = PEAK.load(Ordering::Relaxed).saturating_sub(before);
        let failure = match outcome {
            Err(panic) => Some(format!(
                "panicked: {}",
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            )),
            Ok(()) if used > memory_bound(input.len()) => Some(format!(
                "took {used} bytes of memory for a {}-byte input",
                input.len()
            )),
            Ok(()) => None,
        };
        if let Some(failure) = failure {
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures");
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join(format!("{target:?}-{seed}-{runs}.bin").to_lowercase());
            std::fs::write(&path, &input).unwrap();
            return Err(format!(
                "{target:?} (VRAMTRACE_FUZZ_SEED={seed}, run {runs}) {failure}; input in {}",
                path.display()
            ));
        }
        runs += 1;
    }
    eprintln!(
        "fuzz {target:?}: {runs} executions ran clean in {:.0?} (slowest {slowest:.0?}; VRAMTRACE_FUZZ_SEED={seed})",
        started.elapsed()
    );
    Ok(runs)
}

/// Every input a fuzz run (or an audit) once failed on, kept in
/// `fixtures/fuzz/` under the name the fuzzer gave it (`TARGET-SEED-RUN.bin`):
/// each must now run clean, in this build (the tests' debug build has
/// overflow checks on).
#[test]
fn fuzz_failures_stay_fixed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/fuzz");
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "no inputs in {}", dir.display());
    for path in inputs {
        let input = std::fs::read(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy();
        eprintln!("{name}");
        if name.starts_with("plan-") {
            plan_pair(&input);
            continue;
        }
        let bytes = if name.starts_with("replay-") {
            replay_trace(&input)
        } else {
            input
        };
        if let Ok(opened) = Input::from_bytes(bytes, &NoProgress) {
            analyze(&opened);
        }
    }
}

/// Runs one input again, with panics reported as usual (where, and a
/// backtrace with `RUST_BACKTRACE=1`): `VRAMTRACE_FUZZ_REPRO=FILE`, and
/// `VRAMTRACE_FUZZ_TARGET=replay` or `plan` for an input of that target.
#[test]
fn fuzz_repro() {
    let Some(path) = std::env::var_os("VRAMTRACE_FUZZ_REPRO") else {
        return;
    };
    let input = std::fs::read(path).unwrap();
    let bytes = match std::env::var("VRAMTRACE_FUZZ_TARGET").as_deref() {
        Ok("replay") => replay_trace(&input),
        Ok("plan") => return plan_pair(&input),
        _ => input,
    };
    if let Ok(opened) = Input::from_bytes(bytes, &NoProgress) {
        analyze(&opened);
    }
}

#[test]
fn fuzz_the_readers_and_the_replay() {
    let seconds: u64 = std::env::var("VRAMTRACE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let seed: u64 = std::env::var("VRAMTRACE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    // Panics are caught and reported with their input: keep the default
    // hook from printing each one.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    // One after the other: the allocator's count is the process's.
    let runs: Result<Vec<u64>, String> =
        [Target::Trace, Target::Pickle, Target::Replay, Target::Plan]
            .into_iter()
            .map(|t| fuzz(t, seed, Duration::from_secs(seconds)))
            .collect();
    std::panic::set_hook(hook);
    let runs = runs.unwrap_or_else(|failure| panic!("{failure}"));
    assert!(runs.iter().all(|&n| n > 0));
}
