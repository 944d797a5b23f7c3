//! [`join_ring`]: what can be joined of a ring of parts, joined, and every
//! part left out named with why.
//!
//! A ring left by a crash, gathered by hand, or damaged under a running
//! recorder (a full disk, a part removed or replaced) may hold parts that
//! cannot be joined: cut inside their start, empty, not files at all (a
//! link, a FIFO), given twice, of another recording or another ring of the
//! same process, or with a part missing between them. Each part is read
//! through once first ([`scan`], one file open at a time); the parts are
//! put in the order they were recorded, and what follows on from what is
//! worked out from that alone; then the newest run of parts that follow
//! on, one from the next, is joined ([`Joiner`]). `vramtrace join` and the
//! recorder's own join at the end of a bounded recording both go through
//! here, so they keep and leave out the same parts.

use crate::error::FormatError;
use crate::join::{JoinSummary, Joiner, PartScan, scan};
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, Write};
use std::path::{Path, PathBuf};

/// A part of a ring to join: a file named by its path (opened only while
/// it is read), or one opened already (held against its deletion, as a
/// recorder's dump holds the parts it joins while older ones are pruned).
#[derive(Debug)]
pub enum RingPart {
    /// A part named by its path; a symbolic link is not followed.
    Path(PathBuf),
    /// A part opened already, with its path (for its number and for
    /// messages).
    Open(PathBuf, File),
}

impl RingPart {
    /// The part's path.
    pub fn path(&self) -> &Path {
        match self {
            RingPart::Path(p) | RingPart::Open(p, _) => p,
        }
    }

    /// A reader from the part's start.
    fn open(&self) -> io::Result<Box<dyn Read + '_>> {
        Ok(match self {
            RingPart::Path(p) => Box::new(BufReader::new(File::open(p)?)),
            RingPart::Open(_, f) => {
                let mut f = f;
                f.rewind()?;
                Box::new(BufReader::new(f))
            }
        })
    }

    /// Reads the part through, if it is a regular file that holds a part's
    /// start; else why not. With the file's identity (device, inode) where
    /// the system gives one.
    fn read(&self) -> Result<(PartScan, Option<(u64, u64)>), String> {
        let meta = match self {
            // Not followed: a link in a ring is none of the recorder's.
            RingPart::Path(p) => std::fs::symlink_metadata(p),
            RingPart::Open(_, f) => f.metadata(),
        }
        .map_err(|e| format!("cannot read it: {e}"))?;
        let kind = meta.file_type();
        if kind.is_symlink() {
            return Err("a symbolic link, not a part the recorder wrote".into());
        }
        if !kind.is_file() {
            return Err("not a regular file (a FIFO, a device or a folder)".into());
        }
        if meta.len() == 0 {
            return Err("empty: its recording was killed before it began".into());
        }
        let reader = self.open().map_err(|e| format!("cannot open it: {e}"))?;
        let scan = scan(reader).map_err(|e| format!("its start cannot be read: {e}"))?;
        Ok((scan, identity(&meta)))
    }
}

#[cfg(unix)]
fn identity(meta: &std::fs::Metadata) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    Some((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn identity(_: &std::fs::Metadata) -> Option<(u64, u64)> {
    None
}

/// A part's number from the name the recorder gives it
/// (`part-000012.vtrace`).
pub fn part_number(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    name.strip_prefix("part-")?
        .strip_suffix(".vtrace")?
        .parse()
        .ok()
}

/// What [`join_ring`] joined, and what it left out.
#[derive(Debug)]
pub struct RingJoin<W> {
    /// The output.
    pub out: W,
    /// What was written.
    pub summary: JoinSummary,
    /// The parts joined (indices into the parts given), oldest first.
    pub joined: Vec<usize>,
    /// The parts left out, each with why, in the order they were given.
    pub left_out: Vec<(usize, String)>,
    /// The parts whose header claimed more restating events than they
    /// begin with (a forged or damaged count): their events past what they
    /// restate were joined.
    pub forged_preambles: Vec<usize>,
    /// Whether the parts were joined in another order than given: the
    /// order they were recorded in.
    pub reordered: bool,
}

/// Why [`join_ring`] joined nothing.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// The parts are of two recordings, or two rings, with as many parts
    /// each (or two parts each start a recording): a mix to refuse, not to
    /// guess at.
    #[error("the parts are not parts of one recording: {0}")]
    Mixed(String),
    /// No part can be joined: each part given, and why not.
    #[error("no part can be joined")]
    Nothing(Vec<(usize, String)>),
    /// A part chosen could not be read when it was joined, or the output
    /// could not be written.
    #[error("{source}")]
    Read {
        /// The part (an index into the parts given).
        part: usize,
        /// Why.
        source: FormatError,
    },
}

impl RingError {
    /// The error in words, each part named by its path: `parts` are those
    /// given to [`join_ring`].
    pub fn describe(&self, parts: &[RingPart]) -> String {
        let name = |i: usize| {
            parts
                .get(i)
                .map_or_else(String::new, |p| p.path().display().to_string())
        };
        match self {
            RingError::Mixed(detail) => {
                format!("the parts are not parts of one recording: {detail}")
            }
            RingError::Nothing(left_out) => {
                let reasons: Vec<String> = (left_out.iter())
                    .map(|(i, why)| format!("{}: {why}", name(*i)))
                    .collect();
                format!("no part can be joined: {}", reasons.join("; "))
            }
            RingError::Read { part, source } => format!("{}: {source}", name(*part)),
        }
    }

    /// As a [`FormatError`]: a read error as it came, the others described
    /// ([`describe`](Self::describe)).
    pub fn into_format_error(self, parts: &[RingPart]) -> FormatError {
        match self {
            RingError::Read { source, .. } => source,
            e => FormatError::Ring(e.describe(parts)),
        }
    }
}

/// A part that could be read, and where it goes.
struct Readable {
    given: usize,
    scan: PartScan,
    /// Its number in the ring: from its header, else from its name.
    number: Option<u64>,
}

/// Joins what can be joined of `parts` (oldest first, as given) into
/// `out`. Each part is read through once, one file open at a time; the
/// parts are put in the order they were recorded, and the newest run of
/// parts that follow on, one from the next, is joined. Every part left out
/// (cut inside its start, empty, not a file, given twice, of another
/// recording, or after a gap) is named in the result with why. An error
/// when no part can be joined, or when the parts are of two recordings in
/// equal measure.
pub fn join_ring<W: Write>(parts: &[RingPart], out: W) -> Result<RingJoin<W>, RingError> {
    let name = |i: usize| parts[i].path().display().to_string();
    let mut left_out: Vec<(usize, String)> = Vec::new();
    let mut readable: Vec<Readable> = Vec::new();
    let mut files: Vec<((u64, u64), usize)> = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        match part.read() {
            Err(why) => left_out.push((i, why)),
            Ok((scan, identity)) => {
                if let Some(identity) = identity {
                    if let Some(&(_, first)) = files.iter().find(|f| f.0 == identity) {
                        left_out
                            .push((i, format!("the same file as {}, given twice", name(first))));
                        continue;
                    }
                    files.push((identity, i));
                }
                let number = scan.part.or_else(|| part_number(part.path()));
                readable.push(Readable {
                    given: i,
                    scan,
                    number,
                });
            }
        }
    }
    // One recording: the one most parts are of; as many of two is a
    // mix to refuse, not to guess at.
    let recording = |r: &Readable| (r.scan.start_unix_ns, r.scan.pid);
    let chosen = most(&readable, |r| Some(recording(r))).map_err(|(a, b)| {
        RingError::Mixed(format!(
            "{} (process {}, started at {} ns of Unix time) and {} (process {}, started at {} ns) are of two, with as many parts each",
            name(a.given), a.scan.pid, a.scan.start_unix_ns, name(b.given), b.scan.pid, b.scan.start_unix_ns
        ))
    })?;
    readable.retain(|r| {
        let keep = Some(recording(r)) == chosen;
        if !keep {
            left_out.push((
                r.given,
                format!(
                    "a part of another recording (process {}, started at {} ns of Unix time)",
                    r.scan.pid, r.scan.start_unix_ns
                ),
            ));
        }
        keep
    });
    // One ring of it: parts carry their ring's id (a part without one, of
    // an older recorder, goes with any).
    let ring = most(&readable, |r| r.scan.ring.clone()).map_err(|(a, b)| {
        RingError::Mixed(format!(
            "{} and {} are of two rings of one process (a ring per device), with as many parts each",
            name(a.given),
            name(b.given)
        ))
    })?;
    readable.retain(|r| {
        let keep = r.scan.ring.is_none() || r.scan.ring == ring;
        if !keep {
            left_out.push((
                r.given,
                "a part of another ring of the same recording (a ring per device)".into(),
            ));
        }
        keep
    });
    // The order they were recorded in: by number where every part has one,
    // else by time.
    let given_order: Vec<usize> = readable.iter().map(|r| r.given).collect();
    if readable.iter().all(|r| r.number.is_some()) {
        readable.sort_by_key(|r| (r.number, r.given));
    } else {
        readable.sort_by_key(|r| (r.scan.first_ns.unwrap_or(0), r.given));
    }
    let reordered = readable
        .iter()
        .map(|r| r.given)
        .ne(given_order.iter().copied());
    // A part repeated under another name: the same number, or the same
    // start and events.
    let mut kept: Vec<Readable> = Vec::new();
    for r in readable {
        let key = |p: &Readable| {
            (
                p.scan.first_ns,
                p.scan.last_ns,
                p.scan.events,
                p.scan.has_state,
            )
        };
        let repeat = kept
            .iter()
            .find(|k| (k.number.is_some() && k.number == r.number) || key(k) == key(&r));
        match repeat {
            Some(k) => left_out.push((r.given, format!("a repeat of {}", name(k.given)))),
            None => kept.push(r),
        }
    }
    // A part without a state starts a recording: two are two recordings
    // (whole traces of one process and clock, say).
    let mut starts = kept.iter().filter(|r| !r.scan.has_state);
    if let (Some(a), Some(b)) = (starts.next(), starts.next()) {
        return Err(RingError::Mixed(format!(
            "{} and {} each start a recording (neither starts from a state)",
            name(a.given),
            name(b.given)
        )));
    }
    // The newest run of parts that follow on: each starts from a state,
    // numbered next, and not before the one before it ends.
    let mut start = 0;
    let mut breaks: Vec<(usize, String)> = Vec::new();
    for i in 1..kept.len() {
        let (a, b) = (&kept[i - 1], &kept[i]);
        let why = if !b.scan.has_state {
            Some(format!(
                "{} starts a recording (no initial state), so the parts before it are of an earlier one",
                name(b.given)
            ))
        } else if let (Some(x), Some(y)) = (a.number, b.number)
            && y != x + 1
        {
            Some(format!(
                "{} part{} missing between it and {}",
                y - x - 1,
                if y - x - 1 == 1 { " is" } else { "s are" },
                name(b.given)
            ))
        } else if let (Some(end), Some(begin)) = (a.scan.last_ns, b.scan.first_ns)
            && begin < end
        {
            Some(format!(
                "{} begins before it ends: they are not one run's parts",
                name(b.given)
            ))
        } else {
            None
        };
        if let Some(why) = why {
            start = i;
            breaks.push((i, why));
        }
    }
    for (k, part) in kept[..start].iter().enumerate() {
        let (_, why) = breaks
            .iter()
            .find(|(at, _)| *at > k)
            .expect("a break after every part left out");
        left_out.push((
            part.given,
            format!("before a break in the ring ({why}); a newer run of parts was joined"),
        ));
    }
    left_out.sort_by_key(|(i, _)| *i);
    let run = &kept[start..];
    if run.is_empty() {
        return Err(RingError::Nothing(left_out));
    }
    let mut joiner = Joiner::new(out);
    let mut forged = Vec::new();
    for r in run {
        let read = |source: FormatError| RingError::Read {
            part: r.given,
            source,
        };
        let reader = parts[r.given].open().map_err(|e| read(e.into()))?;
        let joined = joiner.add(reader).map_err(read)?;
        if joined.claimed_preamble.is_some() {
            forged.push(r.given);
        }
    }
    let (out, summary) = joiner.finish().map_err(|source| RingError::Read {
        part: run[0].given,
        source,
    })?;
    Ok(RingJoin {
        out,
        summary,
        joined: run.iter().map(|r| r.given).collect(),
        left_out,
        forged_preambles: forged,
        reordered,
    })
}

/// The value of `key` most parts have (`None`: no part has one), or two
/// parts of different values with as many parts each.
fn most<K: PartialEq>(
    parts: &[Readable],
    key: impl Fn(&Readable) -> Option<K>,
) -> Result<Option<K>, (&Readable, &Readable)> {
    let count = |k: &K| parts.iter().filter(|p| key(p).as_ref() == Some(k)).count();
    let mut best: Option<(usize, &Readable)> = None;
    let mut tie = None;
    for p in parts {
        let Some(k) = key(p) else { continue };
        let n = count(&k);
        match best {
            Some((m, _)) if m > n => {}
            Some((m, b)) if m == n => {
                if key(b).as_ref() != Some(&k) {
                    tie = Some((b, p));
                }
            }
            _ => {
                best = Some((n, p));
                tie = None;
            }
        }
    }
    match (best, tie) {
        (_, Some(t)) => Err(t),
        (Some((_, b)), None) => Ok(key(b)),
        (None, None) => Ok(None),
    }
}
