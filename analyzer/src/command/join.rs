//! `join`: the parts of a bounded recording put back into one trace, from
//! the ring folder a recording killed before its end leaves
//! (`TRACE.ring/part-N.vtrace`), or from parts named one by one.
//!
//! A ring left by a crash, or gathered by hand, may hold parts that cannot
//! be joined: cut inside their start, empty, not files at all (a link, a
//! FIFO), given twice, of another recording or another ring of the same
//! process, or with a part missing between them. The newest run of parts
//! that follow on, one from the next, is joined, and every part left out is
//! named, with why: [`vramtrace_format::join_ring`] chooses and joins them,
//! as the recorder's own join at the end of a bounded recording does.

use crate::error::Error;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use vramtrace_format::{FormatError, RingError, RingPart, join_ring, part_number};

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
            .filter(|p| part_number(p).is_some())
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

/// Joins what can be joined of `parts` (oldest first, as given) into one
/// trace written to `out`, named `output` in the result: see the module
/// documentation. An error when no part can be joined.
pub fn join(parts: &[PathBuf], out: impl Write, output: &Path) -> Result<JoinResult, Error> {
    let name = |i: usize| parts[i].display().to_string();
    let ring: Vec<RingPart> = parts.iter().cloned().map(RingPart::Path).collect();
    let joined = join_ring(&ring, out).map_err(|e| match e {
        RingError::Mixed(detail) => Error::JoinMixed { detail },
        RingError::Nothing(left_out) => Error::NothingToJoin {
            left_out: (left_out.into_iter())
                .map(|(i, why)| format!("{}: {why}", name(i)))
                .collect(),
        },
        RingError::Read { part, source } => read_error(&parts[part], source),
    })?;
    Ok(JoinResult {
        parts: joined.joined.iter().map(|&i| name(i)).collect(),
        events: joined.summary.events,
        damaged_parts: joined.summary.damaged_parts,
        left_out: (joined.left_out.into_iter())
            .map(|(i, why)| LeftOut { part: name(i), why })
            .collect(),
        forged_preambles: joined.forged_preambles.iter().map(|&i| name(i)).collect(),
        reordered: joined.reordered,
        output: output.display().to_string(),
    })
}

fn read_error(path: &Path, source: FormatError) -> Error {
    Error::Read {
        path: path.to_path_buf(),
        source,
    }
}
