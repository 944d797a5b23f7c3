//! Bounded recording: a trace kept on disk as a ring of parts, so that a
//! server can record for days in bounded space.
//!
//! The writer thread writes the trace to `TRACE.ring/part-N.vtrace`. When a
//! part holds an eighth of the bound ([`KeepLast`]), it is ended and the
//! next begins ([`TraceWriter::rotate`]): a whole trace that starts mid-run,
//! with the allocator's state at its start and what else held then
//! ([`LiveState`]). The oldest parts are deleted so that all of them stay
//! within the bound: for a size, the parts before the current one take at
//! most three quarters of it; for a duration, a part is kept while it ended
//! less than that long before the newest event. A duration is measured in
//! the events' own times ([`EventTimes`]), not in the writer thread's: a
//! writer that falls behind, or a program that pauses, keeps the same
//! stretch of the program's life.
//!
//! A dump ([`Window::dump`]) ends the current part and joins the parts kept
//! into one trace ([`crate::format::join`]), on a thread of its own, so the
//! recording goes on meanwhile; the first out-of-memory error dumps to
//! `TRACE-oom.vtrace`. At the end of the recording the parts are joined
//! into `TRACE` and the ring is removed. A recording killed before its end
//! leaves the ring, each part readable on its own (`vramtrace join` puts
//! them together).
//!
//! Dumps and the join at the end keep what they can, as `vramtrace join`
//! does ([`crate::format::join_ring`]): a part that cannot be joined (cut
//! inside its start by a full disk, removed, replaced by another file) is
//! left out, and so are the parts before a break; the newest run of parts
//! that follow on is joined, and each part left out is named, with why, in
//! the summary ([`PartLeftOut`]). The parts left out stay in the ring
//! folder: nothing readable is deleted.

use super::live::LiveState;
use crate::format::{
    CountingWriter, Event, FormatError, InitialState, JoinSummary, PREAMBLE_EVENTS_KEY, RingPart,
    TraceWriter, join_ring,
};
use std::collections::VecDeque;
use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::mpsc::SyncSender;
use std::thread::JoinHandle;
use std::time::Duration;

/// The trace output of the writer thread.
pub(crate) type Output = CountingWriter<Box<dyn Write + Send>>;

/// How much of a recording to keep: its last bytes on disk, or its last
/// stretch of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepLast {
    /// At most this many bytes of trace on disk.
    Bytes(u64),
    /// At least the events of this long before the newest one (in the
    /// events' own times).
    Duration(Duration),
}

/// Parts per bound: a part is ended at an eighth of it.
const PARTS: u64 = 8;

/// The smallest size bound a user may ask for: below it a part's start
/// (its header, symbols and state) could take most of each part.
pub const MIN_KEEP_BYTES: u64 = 1 << 20;

/// The shortest duration bound.
pub const MIN_KEEP_DURATION: Duration = Duration::from_secs(1);

impl FromStr for KeepLast {
    type Err = String;

    /// Reads a duration (`90s`, `10min`, `10m`, `2h`, `1d`) or a size in the
    /// grammar of `vramtrace_units::parse_size` (`50MiB`, `2 GiB`, `500MB`),
    /// the one the analyzer and the Python package read: `m` is minutes.
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "invalid size or duration {text:?}: expected a size (50MiB, 2GiB, 500MB) or a duration (90s, 10min, 2h, 1d)"
            )
        };
        let t = text.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let seconds = match unit.trim() {
            "s" | "sec" => Some(1.0),
            "m" | "min" => Some(60.0),
            "h" => Some(3600.0),
            "d" => Some(86400.0),
            _ => None,
        };
        let keep = match seconds {
            Some(scale) => {
                let number: f64 = number.parse().map_err(|_| bad())?;
                if !number.is_finite() || number <= 0.0 {
                    return Err(bad());
                }
                Duration::try_from_secs_f64(number * scale)
                    .map(KeepLast::Duration)
                    .map_err(|_| bad())?
            }
            None => match vramtrace_units::parse_size(t) {
                Ok(0) | Err(_) => return Err(bad()),
                Ok(bytes) => KeepLast::Bytes(bytes),
            },
        };
        match keep {
            KeepLast::Bytes(b) if b < MIN_KEEP_BYTES => {
                Err(format!("{text:?} is too small to keep: the least is 1MiB"))
            }
            KeepLast::Duration(d) if d < MIN_KEEP_DURATION => {
                Err(format!("{text:?} is too short to keep: the least is 1s"))
            }
            keep => Ok(keep),
        }
    }
}

impl fmt::Display for KeepLast {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            KeepLast::Bytes(b) if b % (1 << 30) == 0 => write!(f, "{}GiB", b >> 30),
            KeepLast::Bytes(b) if b % (1 << 20) == 0 => write!(f, "{}MiB", b >> 20),
            KeepLast::Bytes(b) if b % (1 << 10) == 0 => write!(f, "{}KiB", b >> 10),
            KeepLast::Bytes(b) => write!(f, "{b}B"),
            KeepLast::Duration(d) => write!(f, "{}s", d.as_secs_f64()),
        }
    }
}

/// What a dump wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpSummary {
    /// The trace written.
    pub path: PathBuf,
    /// Its parts and events.
    pub joined: JoinSummary,
    /// The parts kept that could not be joined, each with why.
    pub left_out: Vec<PartLeftOut>,
}

/// A part of a bounded recording's ring left out of a join, and why. It
/// stays where it is (in the ring folder, which is then not removed), for
/// `vramtrace join` or a person to look at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartLeftOut {
    /// The part.
    pub path: PathBuf,
    /// Why it was left out.
    pub why: String,
}

impl fmt::Display for PartLeftOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} left out of the join: {}",
            self.path.display(),
            self.why
        )
    }
}

/// The folder of a bounded recording's parts, beside its trace.
pub fn ring_folder(trace: &Path) -> PathBuf {
    let mut name = trace.as_os_str().to_owned();
    name.push(".ring");
    PathBuf::from(name)
}

/// Where the first out-of-memory error of a bounded recording is dumped:
/// `serve.vtrace` → `serve-oom.vtrace`.
pub fn oom_dump_path(trace: &Path) -> PathBuf {
    suffixed(trace, "-oom")
}

/// `serve.vtrace` → `serve{suffix}.vtrace`.
pub fn suffixed(trace: &Path, suffix: &str) -> PathBuf {
    let stem = trace.file_stem().unwrap_or_default().to_string_lossy();
    let name = match trace.extension() {
        Some(ext) => format!("{stem}{suffix}.{}", ext.to_string_lossy()),
        None => format!("{stem}{suffix}"),
    };
    trace.with_file_name(name)
}

struct Part {
    path: PathBuf,
    /// Its size, once ended.
    bytes: u64,
    /// The time of its last event (ns since the recording began).
    ended_ns: u64,
}

/// The times a duration bound is kept by: the newest event's, and that of
/// the current part's start, in ns since the recording began (the events'
/// clock).
///
/// The writer thread's own clock would tell how long ago it wrote a part,
/// which a writer that fell behind, or a program that paused, makes longer
/// than the stretch of the program the part holds; and the kept window is
/// read in event times (`vramtrace summary`'s duration).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct EventTimes {
    newest_ns: u64,
    part_began_ns: u64,
}

impl EventTimes {
    /// Follows events written (their times, in the order written).
    fn follow(&mut self, times: impl IntoIterator<Item = u64>) {
        // Times never go back within a recording; `max` keeps a stray
        // earlier one (a restated event, say) from moving the bound back.
        self.newest_ns = times.into_iter().fold(self.newest_ns, u64::max);
    }

    /// Whether the current part has run for an eighth of `keep`.
    fn part_is_full(&self, keep: Duration) -> bool {
        self.newest_ns - self.part_began_ns >= duration_ns(keep) / PARTS
    }

    /// Whether a part that ended at `ended_ns` is older than `keep`: all
    /// the parts after it together still hold at least `keep`.
    fn is_past(&self, ended_ns: u64, keep: Duration) -> bool {
        self.newest_ns.saturating_sub(ended_ns) > duration_ns(keep)
    }

    /// A part ends now, and the next begins.
    fn begin_part(&mut self) {
        self.part_began_ns = self.newest_ns;
    }
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A dump on its way: the thread joining the parts, and whom to tell.
type Dumping = JoinHandle<()>;

/// The writer thread's side of a bounded recording. See the [module
/// docs](self).
pub(crate) struct Window {
    keep: KeepLast,
    trace: PathBuf,
    folder: PathBuf,
    next_part: u64,
    ended: VecDeque<Part>,
    current: PathBuf,
    /// The output's byte count when the current part began, and after its
    /// start (header, symbols, state and restatement) was written.
    current_from: u64,
    current_body_from: u64,
    /// The events' times, for a duration bound.
    times: EventTimes,
    /// Whether the current part has events past its restatement.
    current_has_events: bool,
    pub live: LiveState,
    oom_dumped: bool,
    /// Dumps asked for without a path so far (they are numbered).
    dumps_named: u64,
    dumps: Vec<Dumping>,
}

impl Window {
    /// Creates the ring folder of `trace` and its first part, returned to
    /// begin the trace in.
    pub fn create(trace: &Path, keep: KeepLast) -> io::Result<(Window, File)> {
        let folder = ring_folder(trace);
        std::fs::create_dir(&folder).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                io::Error::new(
                    e.kind(),
                    format!(
                        "{} exists (the parts of an earlier bounded recording?): join or remove it",
                        folder.display()
                    ),
                )
            } else {
                e
            }
        })?;
        let current = part_path(&folder, 0);
        let file = File::create(&current)?;
        let window = Window {
            keep,
            trace: trace.to_path_buf(),
            folder,
            next_part: 1,
            ended: VecDeque::new(),
            current,
            current_from: 0,
            current_body_from: 0,
            times: EventTimes::default(),
            current_has_events: false,
            live: LiveState::default(),
            oom_dumped: false,
            dumps_named: 0,
            dumps: Vec::new(),
        };
        Ok((window, file))
    }

    /// The bound, for the header.
    pub fn keep(&self) -> KeepLast {
        self.keep
    }

    /// The most events per chunk (and per batch the writer thread gets): a
    /// part is ended between batches, so a batch must be small next to a
    /// part's share of the bound. At 16 bytes an event (more than a trace
    /// with stacks takes), a part holds at least eight batches.
    pub fn chunk_events(&self) -> usize {
        match self.keep {
            KeepLast::Bytes(bound) => (bound / PARTS / 8 / 16).clamp(256, 4096) as usize,
            KeepLast::Duration(_) => 4096,
        }
    }

    /// Follows the events just written; after a batch, [`after_batch`]
    /// decides whether to end the part. Returns whether one was an
    /// out-of-memory error.
    ///
    /// [`after_batch`]: Self::after_batch
    pub fn follow(&mut self, events: &[Event]) -> bool {
        self.current_has_events |= !events.is_empty();
        self.times.follow(events.iter().map(|e| e.time_ns));
        let mut oom = false;
        for e in events {
            oom |= self.live.apply(e);
        }
        oom
    }

    /// After a batch is written: ends the part if it is full (or old), and
    /// dumps at the first out-of-memory error.
    pub fn after_batch(
        &mut self,
        trace: &mut TraceWriter<Output>,
        saw_oom: bool,
    ) -> Result<(), FormatError> {
        if saw_oom && !self.oom_dumped {
            self.oom_dumped = true;
            let path = oom_dump_path(&self.trace);
            return self.dump(trace, Some(path), None);
        }
        if self.part_is_full(trace) {
            self.rotate(trace)?;
        }
        Ok(())
    }

    fn part_is_full(&self, trace: &TraceWriter<Output>) -> bool {
        if !self.current_has_events {
            return false;
        }
        match self.keep {
            KeepLast::Bytes(bound) => {
                let bytes = trace.get_ref().bytes() - self.current_from;
                let body = trace.get_ref().bytes() - self.current_body_from;
                // A start that alone takes most of a part is not ended at
                // once, or parts would hold little but their starts.
                bytes >= bound / PARTS && body >= bound / PARTS / 2
            }
            KeepLast::Duration(d) => self.times.part_is_full(d),
        }
    }

    /// Ends the current part and begins the next, then deletes the parts
    /// past the bound.
    fn rotate(&mut self, trace: &mut TraceWriter<Output>) -> Result<(), FormatError> {
        let path = part_path(&self.folder, self.next_part);
        let file = File::create(&path)?;
        let restatement = self.live.restatement();
        let mut header = trace.header().clone();
        header
            .metadata
            .insert(PREAMBLE_EVENTS_KEY.into(), restatement.len().to_string());
        header.metadata.insert(
            vramtrace_format::PART_KEY.into(),
            self.next_part.to_string(),
        );
        let state: InitialState = self.live.initial_state();
        let out: Box<dyn Write + Send> = Box::new(BufWriter::with_capacity(1 << 20, file));
        let mut old = trace.rotate(CountingWriter::new(out), header, &state)?;
        old.flush()?;
        // The byte count goes on across parts.
        let total = old.bytes();
        drop(old);
        trace.get_mut().add_bytes(total);
        let ended_bytes = total - self.current_from;
        self.ended.push_back(Part {
            path: std::mem::replace(&mut self.current, path),
            bytes: ended_bytes,
            ended_ns: self.times.newest_ns,
        });
        self.next_part += 1;
        self.current_from = total;
        trace.push_all(restatement)?;
        // The restatement goes out with the part's start.
        trace.flush()?;
        self.current_body_from = trace.get_ref().bytes();
        self.times.begin_part();
        self.current_has_events = false;
        self.prune();
        Ok(())
    }

    /// Deletes the oldest ended parts past the bound.
    fn prune(&mut self) {
        loop {
            let over = match self.keep {
                KeepLast::Bytes(bound) => {
                    let ended: u64 = self.ended.iter().map(|p| p.bytes).sum();
                    ended > bound - 2 * (bound / PARTS)
                }
                KeepLast::Duration(d) => {
                    (self.ended.front()).is_some_and(|p| self.times.is_past(p.ended_ns, d))
                }
            };
            if !over {
                break;
            }
            let Some(oldest) = self.ended.pop_front() else {
                break;
            };
            // A dump joining it holds it open: deleting the name is safe.
            let _ = std::fs::remove_file(&oldest.path);
        }
    }

    /// Writes the parts kept so far, joined, to `path` (by default beside
    /// the trace, numbered: `serve-dump-1.vtrace`), through a temporary
    /// name, so a half-written dump is never left under it. Ends the
    /// current part first, and joins on a thread of its own. `done` hears
    /// the result.
    pub fn dump(
        &mut self,
        trace: &mut TraceWriter<Output>,
        path: Option<PathBuf>,
        done: Option<SyncSender<Result<DumpSummary, String>>>,
    ) -> Result<(), FormatError> {
        let path = path.unwrap_or_else(|| {
            self.dumps_named += 1;
            suffixed(&self.trace, &format!("-dump-{}", self.dumps_named))
        });
        if self.current_has_events {
            self.rotate(trace)?;
        }
        // Opened now, so that pruning cannot take them from the join.
        let opened: io::Result<Vec<RingPart>> = (self.ended.iter())
            .map(|p| Ok(RingPart::Open(p.path.clone(), File::open(&p.path)?)))
            .collect();
        let parts = match opened {
            Ok(parts) => parts,
            Err(e) => {
                if let Some(done) = done {
                    let _ = done.send(Err(format!("cannot read the kept parts: {e}")));
                }
                return Ok(());
            }
        };
        if parts.is_empty() {
            if let Some(done) = done {
                let _ = done.send(Err("nothing recorded yet".into()));
            }
            return Ok(());
        }
        let joining = std::thread::Builder::new()
            .name("vramtrace-dump".into())
            .spawn(move || {
                let result = join_into(&parts, &path)
                    .map(|(joined, left_out)| DumpSummary {
                        path: path.clone(),
                        joined,
                        left_out,
                    })
                    .map_err(|e| format!("cannot write {}: {e}", path.display()));
                if let Some(done) = done {
                    let _ = done.send(result);
                }
            });
        match joining {
            Ok(handle) => self.dumps.push(handle),
            Err(e) => return Err(FormatError::Io(e)),
        }
        self.dumps.retain(|d| !d.is_finished());
        Ok(())
    }

    /// Ends the recording: waits for dumps under way, ends the last part,
    /// joins the parts kept into the trace (those that can be: see the
    /// [module docs](self)), and removes the parts joined, and the ring
    /// with them when none is left out. If nothing can be joined the ring
    /// is left whole, for `vramtrace join`.
    pub fn finish(self, trace: TraceWriter<Output>) -> Result<RingFinished, FormatError> {
        for d in self.dumps {
            let _ = d.join();
        }
        let mut out = trace.finish()?;
        out.flush()?;
        drop(out);
        let mut parts: Vec<RingPart> = (self.ended.iter())
            .map(|p| RingPart::Path(p.path.clone()))
            .collect();
        parts.push(RingPart::Path(self.current.clone()));
        let (joined, left_out) = join_into(&parts, &self.trace)?;
        // A part left out holds what the trace lacks: it stays.
        for p in &parts {
            if !left_out.iter().any(|l| l.path == p.path()) {
                let _ = std::fs::remove_file(p.path());
            }
        }
        let _ = std::fs::remove_dir(&self.folder);
        let bytes = std::fs::metadata(&self.trace).map_or(0, |m| m.len());
        Ok(RingFinished {
            bytes,
            joined,
            left_out,
        })
    }
}

/// What the end of a bounded recording wrote.
pub(crate) struct RingFinished {
    /// The size of the trace.
    pub bytes: u64,
    /// Its parts and events.
    pub joined: JoinSummary,
    /// The parts left out, kept in the ring folder.
    pub left_out: Vec<PartLeftOut>,
}

fn part_path(folder: &Path, index: u64) -> PathBuf {
    folder.join(format!("part-{index:06}.vtrace"))
}

/// Joins what can be joined of `parts` into `path`, through a temporary
/// name beside it; with the parts left out.
fn join_into(
    parts: &[RingPart],
    path: &Path,
) -> Result<(JoinSummary, Vec<PartLeftOut>), FormatError> {
    let partial = suffixed(path, ".partial");
    let out = BufWriter::with_capacity(1 << 20, File::create(&partial)?);
    let result = (join_ring(parts, out))
        .map_err(|e| e.into_format_error(parts))
        .and_then(|joined| {
            (joined.out.into_inner())
                .map_err(|e| FormatError::Io(e.into_error()))?
                .sync_all()?;
            let left_out = (joined.left_out.into_iter())
                .map(|(i, why)| PartLeftOut {
                    path: parts[i].path().to_path_buf(),
                    why,
                })
                .collect();
            Ok((joined.summary, left_out))
        });
    match result {
        Ok(joined) => {
            std::fs::rename(&partial, path)?;
            Ok(joined)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_are_read() {
        let keep = |t: &str| t.parse::<KeepLast>();
        assert_eq!(keep("50MiB"), Ok(KeepLast::Bytes(50 << 20)));
        assert_eq!(keep("2 GiB"), Ok(KeepLast::Bytes(2 << 30)));
        assert_eq!(keep("500MB"), Ok(KeepLast::Bytes(500_000_000)));
        assert_eq!(
            keep("10min"),
            Ok(KeepLast::Duration(Duration::from_secs(600)))
        );
        assert_eq!(
            keep("1.5h"),
            Ok(KeepLast::Duration(Duration::from_secs(5400)))
        );
        assert_eq!(keep("90s"), Ok(KeepLast::Duration(Duration::from_secs(90))));
        // The analyzer's size grammar (vramtrace-units), with `m` for minutes.
        assert_eq!(
            keep("10m"),
            Ok(KeepLast::Duration(Duration::from_secs(600)))
        );
        assert_eq!(keep("64M"), Ok(KeepLast::Bytes(64 << 20)));
        assert_eq!(keep("1_000mb"), Ok(KeepLast::Bytes(1_000_000_000)));
        for bad in [
            "",
            "50",
            "MiB",
            "-3MiB",
            "5 parsecs",
            "nanMiB",
            "1e9s",
            "0MiB",
            "0",
        ] {
            let err = keep(bad).unwrap_err();
            assert!(err.contains("expected a size"), "{bad}: {err}");
        }
        assert!(keep("512KiB").unwrap_err().contains("the least is 1MiB"));
        assert!(keep("0.5s").unwrap_err().contains("the least is 1s"));
        assert_eq!(KeepLast::Bytes(50 << 20).to_string(), "50MiB");
    }

    /// A duration bound in the events' times: parts end every eighth of
    /// it, and one goes once the parts after it hold the bound, however
    /// late the writer saw the events.
    #[test]
    fn a_duration_bound_follows_the_events_times() {
        const MS: u64 = 1_000_000;
        let keep = Duration::from_millis(800);
        let mut t = EventTimes::default();
        t.follow([10 * MS, 60 * MS]);
        assert!(!t.part_is_full(keep), "60 ms of an 800 ms bound");
        t.follow([99 * MS]);
        assert!(!t.part_is_full(keep));
        t.follow([100 * MS]);
        assert!(t.part_is_full(keep), "an eighth of the bound");
        t.begin_part();
        assert!(!t.part_is_full(keep));
        // The part ended at 100 ms: kept until the newest event is more
        // than 800 ms later.
        t.follow([900 * MS]);
        assert!(!t.is_past(100 * MS, keep));
        t.follow([900 * MS + 1]);
        assert!(t.is_past(100 * MS, keep));
        // An earlier time (a restated event) moves nothing back.
        t.follow([5 * MS]);
        assert_eq!(t.newest_ns, 900 * MS + 1);
        // A program that paused for an hour: the next event ends the part
        // and makes the ones before it past the bound.
        t.begin_part();
        t.follow([3_600_000 * MS]);
        assert!(t.part_is_full(keep));
        assert!(t.is_past(900 * MS, keep));
        // A bound past u64's nanoseconds neither overflows nor ends parts.
        let forever = Duration::from_secs(u64::MAX);
        assert!(!t.part_is_full(forever));
        assert!(!t.is_past(0, forever));
    }

    #[test]
    fn dump_names_sit_beside_the_trace() {
        let t = Path::new("/runs/serve.vtrace");
        assert_eq!(oom_dump_path(t), Path::new("/runs/serve-oom.vtrace"));
        assert_eq!(
            suffixed(t, "-dump-2"),
            Path::new("/runs/serve-dump-2.vtrace")
        );
        assert_eq!(ring_folder(t), Path::new("/runs/serve.vtrace.ring"));
    }
}
