//! Crash safety, tested with real kills: a child process records at a given
//! rate (steadily, or a burst and then nothing) and is killed with SIGKILL
//! at a random moment; what its trace holds is checked against what it had
//! recorded a second before the kill (`docs/recording.md`, crash safety).
//!
//! The child is this test executable run again, with `VRAMTRACE_CRASH_CHILD`
//! saying what to record. It reports how many allocations it has recorded
//! on its standard output, every millisecond; the parent notes when each
//! report arrives, so a count it has read at time `t` was recorded before
//! `t`. After the kill, every allocation reported at least [`BOUND`] before
//! the kill must be in the trace.
//!
//! `VRAMTRACE_CRASH_ROUNDS=N` repeats every scenario N times (a soak run;
//! `docs/recording.md` has the figures of one); `VRAMTRACE_CRASH_SEED` picks
//! the kill moments (each run prints its seed).
//!
//! A child allocating flat out may outrun its writer thread, which then
//! drops events rather than stall it (`docs/recording.md`, "A disk slower
//! than the program"): an allocation counted in an `events_dropped` marker
//! is accounted for, if not kept (each dropped event is at most one
//! allocation).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vramtrace_recorder::allocator::{AllocatorConfig, CachingAllocator};
use vramtrace_recorder::device::SimulatedDevice;
use vramtrace_recorder::format::{EventData, EventKind, TraceReader};
use vramtrace_recorder::{ObservedEvent, Observer, ObserverSetup, Recorder, RecorderOptions};

/// Everything recorded this long before a kill must be on disk.
const BOUND: Duration = Duration::from_secs(1);

const CHILD_ENV: &str = "VRAMTRACE_CRASH_CHILD";

/// Which side of the recorder the child records through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// vramtrace's allocator records its own events.
    Recorder,
    /// Another allocator's events, observed.
    Observer,
}

/// What a child records: allocations (each with its free) at `rate` per
/// second (0: as fast as it goes), and after `burst` of them, if set,
/// nothing more.
#[derive(Clone, Copy, Debug)]
struct Scenario {
    mode: Mode,
    rate: u64,
    burst: Option<u64>,
    /// The kill comes at a random moment in this range.
    kill_between: (Duration, Duration),
}

impl Scenario {
    fn steady(mode: Mode, rate: u64) -> Self {
        Scenario {
            mode,
            rate,
            burst: None,
            kill_between: (Duration::from_millis(1200), Duration::from_millis(2600)),
        }
    }

    fn burst(mode: Mode, burst: u64) -> Self {
        Scenario {
            mode,
            rate: 0,
            burst: Some(burst),
            kill_between: (Duration::from_millis(1500), Duration::from_millis(3000)),
        }
    }

    fn env(&self, out: &Path) -> String {
        format!(
            "{}\n{}\n{}\n{}",
            match self.mode {
                Mode::Recorder => "recorder",
                Mode::Observer => "observer",
            },
            self.rate,
            self.burst.map_or(String::new(), |b| b.to_string()),
            out.display()
        )
    }

    fn from_env(text: &str) -> (Scenario, PathBuf) {
        let lines: Vec<&str> = text.split('\n').collect();
        let scenario = Scenario {
            mode: if lines[0] == "observer" {
                Mode::Observer
            } else {
                Mode::Recorder
            },
            rate: lines[1].parse().unwrap(),
            burst: lines[2].parse().ok(),
            kill_between: (Duration::ZERO, Duration::ZERO),
        };
        (scenario, PathBuf::from(lines[3]))
    }
}

/// The child: records until killed.
#[test]
#[ignore = "run by the crash tests as a child process"]
fn crash_child() {
    let Ok(text) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (scenario, out) = Scenario::from_env(&text);
    let mut sink = Sink::new(scenario.mode, &out);
    let stdout = std::io::stdout();
    let mut report = stdout.lock();
    let started = Instant::now();
    let mut last_report = started;
    let mut live = std::collections::VecDeque::new();
    let mut done = 0u64;
    loop {
        if scenario.burst.is_none_or(|b| done < b) {
            if scenario.rate > 0 {
                // Each allocation at its time in the schedule.
                let due = started + Duration::from_secs_f64(done as f64 / scenario.rate as f64);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep((due - now).min(Duration::from_millis(1)));
                    continue;
                }
            }
            live.push_back(sink.alloc(512 * (1 + done % 64)));
            if live.len() > 16 {
                sink.free(live.pop_front().unwrap());
            }
            done += 1;
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
        if done.is_multiple_of(64) || scenario.rate > 0 || scenario.burst.is_some_and(|b| done >= b)
        {
            let now = Instant::now();
            if now - last_report >= Duration::from_millis(1) {
                writeln!(report, "{done}").unwrap();
                report.flush().unwrap();
                last_report = now;
            }
        }
    }
}

/// Records allocations and frees through a recorder or an observer.
enum Sink {
    Recorder(Recorder<SimulatedDevice>),
    Observer { observer: Observer, next: u64 },
}

impl Sink {
    fn new(mode: Mode, out: &Path) -> Sink {
        match mode {
            Mode::Recorder => Sink::Recorder(
                Recorder::create(
                    out,
                    CachingAllocator::new(SimulatedDevice::unlimited(), AllocatorConfig::default()),
                    RecorderOptions::default(),
                )
                .unwrap(),
            ),
            Mode::Observer => {
                let setup = ObserverSetup::device(0, "observed", 1 << 40);
                let observer = Observer::create(out, setup, RecorderOptions::default()).unwrap();
                observer.record(observed(EventKind::SegmentAlloc, SEGMENT, 1 << 30), None);
                Sink::Observer { observer, next: 0 }
            }
        }
    }

    fn alloc(&mut self, size: u64) -> (u64, u64) {
        match self {
            Sink::Recorder(r) => (r.malloc(size, 0).unwrap().addr, size),
            Sink::Observer { observer, next } => {
                // Blocks of 32 KiB slots in a 1 GiB segment, reused in turn.
                let addr = SEGMENT + (*next % 32_768) * 32_768;
                *next += 1;
                observer.record(observed(EventKind::Alloc, addr, size), None);
                (addr, size)
            }
        }
    }

    fn free(&mut self, (addr, size): (u64, u64)) {
        match self {
            Sink::Recorder(r) => r.free(addr).unwrap(),
            Sink::Observer { observer, .. } => {
                observer.record(observed(EventKind::FreeRequested, addr, size), None);
                observer.record(observed(EventKind::FreeCompleted, addr, size), None);
            }
        }
    }
}

const SEGMENT: u64 = 1 << 40;

fn observed(kind: EventKind, addr: u64, size: u64) -> ObservedEvent {
    ObservedEvent {
        kind,
        addr,
        size,
        stream: 0,
        counter: 0,
    }
}

/// What one kill left.
#[derive(Debug)]
struct Outcome {
    /// Allocations in the trace.
    survived: u64,
    /// Events the trace says were dropped.
    dropped: u64,
    /// Allocations reported [`BOUND`] or more before the kill.
    required: u64,
    /// Allocations reported before the kill.
    recorded: u64,
    /// How long before the kill the oldest allocation missing from the trace
    /// was recorded, at least (zero when none is missing).
    lost: Duration,
    events: u64,
}

fn run(scenario: Scenario, seed: u64, dir: &Path, n: usize) -> Outcome {
    let out = dir.join(format!("run-{n}.vtrace"));
    let (lo, hi) = scenario.kill_between;
    let kill_after = lo + (hi - lo).mul_f64((splitmix(seed ^ n as u64) % 1000) as f64 / 1000.0);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "crash_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, scenario.env(&out))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // Reports as they arrive: (when, allocations recorded by then).
    let reader = std::thread::spawn(move || {
        let mut reports = vec![(Instant::now(), 0u64)];
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(n) = line.trim().parse() {
                reports.push((Instant::now(), n));
            }
        }
        reports
    });
    let started = Instant::now();
    std::thread::sleep(kill_after);
    child.kill().unwrap(); // SIGKILL
    let killed = Instant::now();
    child.wait().unwrap();
    let reports = reader.join().unwrap();
    let reported_by = |t: Instant| {
        reports
            .iter()
            .take_while(|(at, _)| *at <= t)
            .last()
            .map_or(0, |r| r.1)
    };
    let required = reported_by(killed - BOUND.min(killed - started));
    let recorded = reported_by(killed);
    let bytes = std::fs::read(&out).unwrap();
    let mut reader = TraceReader::new(&bytes[..])
        .unwrap_or_else(|e| panic!("{scenario:?}: the killed trace has no readable header: {e}"));
    let mut survived = 0;
    let mut dropped = 0;
    let mut events = 0;
    for e in reader.events() {
        let e = e.unwrap_or_else(|e| panic!("{scenario:?}: the killed trace is damaged: {e}"));
        events += 1;
        survived += (e.kind() == EventKind::Alloc) as u64;
        if let EventData::EventsDropped(d) = e.data {
            dropped += d.count;
        }
    }
    // The oldest missing allocation was recorded before the first report
    // that counts it.
    let lost = reports
        .iter()
        .find(|(_, n)| *n > survived + dropped)
        .map_or(Duration::ZERO, |(at, _)| {
            killed.saturating_duration_since(*at)
        });
    std::fs::remove_file(&out).unwrap();
    Outcome {
        survived,
        dropped,
        required,
        recorded,
        lost,
        events,
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Steady rates from about 10 to as many events per second as the child
/// makes (each allocation is three events: alloc, free requested, free
/// completed), and bursts followed by silence; through the recorder and the
/// observer.
#[test]
fn a_killed_recording_keeps_everything_older_than_a_second() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let scenarios = [
        Scenario::steady(Mode::Recorder, 3),
        Scenario::steady(Mode::Recorder, 1_000),
        Scenario::steady(Mode::Recorder, 30_000),
        Scenario::steady(Mode::Recorder, 0),
        Scenario::burst(Mode::Recorder, 2_000),
        Scenario::burst(Mode::Recorder, 100_000),
        Scenario::steady(Mode::Observer, 3),
        Scenario::steady(Mode::Observer, 3_000),
        Scenario::steady(Mode::Observer, 0),
        Scenario::burst(Mode::Observer, 50_000),
    ];
    let rounds: usize = std::env::var("VRAMTRACE_CRASH_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let seed = std::env::var("VRAMTRACE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("VRAMTRACE_CRASH_SEED={seed}");
    let dir = std::env::temp_dir().join(format!("vramtrace-crash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut worst = Duration::ZERO;
    let mut kills = 0;
    for round in 0..rounds {
        for (i, scenario) in scenarios.iter().enumerate() {
            let o = run(*scenario, seed, &dir, round * scenarios.len() + i);
            eprintln!(
                "{:?} rate {}/s burst {:?}: {} of {} allocations survived ({} events, {} dropped), {} required, oldest lost {:?}",
                scenario.mode,
                scenario.rate,
                scenario.burst,
                o.survived,
                o.recorded,
                o.events,
                o.dropped,
                o.required,
                o.lost
            );
            assert!(
                o.survived + o.dropped >= o.required,
                "{scenario:?} (seed {seed}): only {} allocations survived ({} events dropped), {} were recorded a second before the kill",
                o.survived,
                o.dropped,
                o.required
            );
            assert!(
                o.lost < BOUND,
                "{scenario:?} (seed {seed}): lost allocations recorded {:?} before the kill",
                o.lost
            );
            worst = worst.max(o.lost);
            kills += 1;
        }
    }
    eprintln!("{kills} kills; the oldest allocation lost was recorded {worst:?} before its kill");
    let _ = std::fs::remove_dir_all(&dir);
}
