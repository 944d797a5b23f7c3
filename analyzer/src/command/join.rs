//! `join`: the parts of a bounded recording put back into one trace, from
//! the ring folder a recording killed before its end leaves
//! (`TRACE.ring/part-N.vtrace`), or from parts named one by one.
//!
//! A ring left by a crash, or gathered by hand, may hold parts that cannot
//! be joined: cut inside their start, empty, not files at all (a link, a
//! FIFO), given twice, of another recording or another ring of the same
//! process, or with a part missing between them. Each part is read through
//! once first ([`vramtrace_format::scan`], one file open at a time); the
//! parts are put in the order they were recorded, and what follows on from
//! what is worked out from that alone; then the newest run of parts that
//! follow on, one from the next, is joined. Every part left out is named,
//! with why.

use crate::error::Error;
use serde::Serialize;
use std::fs::File;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use vramtrace_format::{FormatError, Joiner, PartScan, scan};

/// What a join read and wrote.
#[derive(Clone, Debug, Serialize)]
pub struct JoinResult {
    /// The parts joined, oldest first.
    pub parts: Vec<String>,
    /// Events written (each part's restatement of its start left out but
    /// the first's).
    pub events: u64,
    /// Parts that could not be read whole (the last one, cut off by the
    /// kill, as a rule): their readable events are in the trace.
    pub damaged_parts: usize,
    /// Parts not joined, each with why, in the order they were given.
    pub left_out: Vec<LeftOut>,
    /// Parts whose header claimed more restating events than they begin
    /// with (a forged or damaged count): their events past what they
    /// restate were joined.
    pub forged_preambles: Vec<String>,
    /// Whether the parts were joined in another order than given: the
    /// order they were recorded in.
    pub reordered: bool,
    /// Where the trace is written.
    pub output: String,
}

/// A part left out of a join, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LeftOut {
    /// The part's path.
    pub part: String,
    /// Why.
    pub why: String,
}

/// The parts `inputs` name, oldest first: a folder stands for the parts in
/// it (`part-*.vtrace`, in the order of their numbers).
pub fn parts_of(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    let mut parts = Vec::new();
    for input in inputs {
        if !input.is_dir() {
            parts.push(input.clone());
            continue;
        }
        let entries = std::fs::read_dir(input).map_err(|e| read_error(input, e.into()))?;
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| number_of(p).is_some())
            .collect();
        if found.is_empty() {
            return Err(read_error(
                input,
                FormatError::NotJoinable("the folder holds no parts (part-N.vtrace)"),
            ));
        }
        // Zero-padded numbers: their names sort as their numbers do.
        found.sort();
        parts.extend(found);
    }
    Ok(parts)
}

/// A part's number from its name (`part-000012.vtrace`).
fn number_of(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    name.strip_prefix("part-")?
        .strip_suffix(".vtrace")?
        .parse()
        .ok()
}

/// A part that could be read, and where it goes.
struct Readable {
    given: usize,
    scan: PartScan,
    /// Its number in the ring: from its header, else from its name.
    number: Option<u64>,
}

/// Joins what can be joined of `parts` (oldest first, as given) into one
/// trace written to `out`, named `output` in the result: see the module
/// documentation. An error when no part can be joined.
pub fn join(parts: &[PathBuf], out: impl Write, output: &Path) -> Result<JoinResult, Error> {
    let name = |i: usize| parts[i].display().to_string();
    let mut left_out: Vec<(usize, String)> = Vec::new();
    let mut readable: Vec<Readable> = Vec::new();
    let mut files: Vec<(u64, u64, usize)> = Vec::new();
    for (i, path) in parts.iter().enumerate() {
        match read_part(path) {
            Err(why) => left_out.push((i, why)),
            Ok((scan, identity)) => {
                if let Some(&(_, _, first)) = files.iter().find(|f| (f.0, f.1) == identity) {
                    left_out.push((i, format!("the same file as {}, given twice", name(first))));
                    continue;
                }
                files.push((identity.0, identity.1, i));
                let number = scan.part.or_else(|| number_of(path));
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
    let chosen = most(&readable, |r| Some(recording(r))).map_err(|(a, b)| Error::JoinMixed {
        detail: format!(
            "{} (process {}, started at {} ns of Unix time) and {} (process {}, started at {} ns) are of two, with as many parts each",
            name(a.given), a.scan.pid, a.scan.start_unix_ns, name(b.given), b.scan.pid, b.scan.start_unix_ns
        ),
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
    let ring = most(&readable, |r| r.scan.ring.clone()).map_err(|(a, b)| Error::JoinMixed {
        detail: format!(
            "{} and {} are of two rings of one process (a ring per device), with as many parts each",
            name(a.given),
            name(b.given)
        ),
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
        let repeat = kept.iter().find(|k| {
            (k.number.is_some() && k.number == r.number)
                || (
                    k.scan.first_ns,
                    k.scan.last_ns,
                    k.scan.events,
                    k.scan.has_state,
                ) == (
                    r.scan.first_ns,
                    r.scan.last_ns,
                    r.scan.events,
                    r.scan.has_state,
                )
        });
        match repeat {
            Some(k) => left_out.push((r.given, format!("a repeat of {}", name(k.given)))),
            None => kept.push(r),
        }
    }
    // A part without a state starts a recording: two are two recordings
    // (whole traces of one process and clock, say).
    let mut starts = kept.iter().filter(|r| !r.scan.has_state);
    if let (Some(a), Some(b)) = (starts.next(), starts.next()) {
        return Err(Error::JoinMixed {
            detail: format!(
                "{} and {} each start a recording (neither starts from a state)",
                name(a.given),
                name(b.given)
            ),
        });
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
    let run = &kept[start..];
    if run.is_empty() {
        left_out.sort_by_key(|(i, _)| *i);
        let reasons: Vec<String> = (left_out.iter())
            .map(|(i, why)| format!("{}: {why}", name(*i)))
            .collect();
        return Err(Error::NothingToJoin { left_out: reasons });
    }
    let mut joiner = Joiner::new(out);
    let mut forged = Vec::new();
    for r in run {
        let path = &parts[r.given];
        let file = File::open(path).map_err(|e| read_error(path, e.into()))?;
        let joined = joiner
            .add(BufReader::new(file))
            .map_err(|e| read_error(path, e))?;
        if joined.claimed_preamble.is_some() {
            forged.push(name(r.given));
        }
    }
    let (_, summary) = joiner
        .finish()
        .map_err(|e| read_error(&parts[run[0].given], e))?;
    left_out.sort_by_key(|(i, _)| *i);
    Ok(JoinResult {
        parts: run.iter().map(|r| name(r.given)).collect(),
        events: summary.events,
        damaged_parts: summary.damaged_parts,
        left_out: left_out
            .into_iter()
            .map(|(i, why)| LeftOut { part: name(i), why })
            .collect(),
        forged_preambles: forged,
        reordered,
        output: output.display().to_string(),
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

/// Reads a part through, if it is a regular file that holds a part's start;
/// else why not. With the file's identity (device, inode).
fn read_part(path: &Path) -> Result<(PartScan, (u64, u64)), String> {
    use std::os::unix::fs::MetadataExt;
    // Not followed: a link in a ring is none of the recorder's.
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("cannot read it: {e}"))?;
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
    let file = File::open(path).map_err(|e| format!("cannot open it: {e}"))?;
    let scan = scan(BufReader::new(file)).map_err(|e| format!("its start cannot be read: {e}"))?;
    Ok((scan, (meta.dev(), meta.ino())))
}

fn read_error(path: &Path, source: FormatError) -> Error {
    Error::Read {
        path: path.to_path_buf(),
        source,
    }
}
