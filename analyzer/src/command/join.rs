//! `join`: the parts of a bounded recording put back into one trace, from
//! the ring folder a recording killed before its end leaves
//! (`TRACE.ring/part-N.vtrace`), or from parts named one by one.

use crate::error::Error;
use serde::Serialize;
use std::fs::File;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use vramtrace_format::{FormatError, join as join_parts};

/// What a join read and wrote.
#[derive(Clone, Debug, Serialize)]
pub struct JoinResult {
    /// The parts read, oldest first.
    pub parts: Vec<String>,
    /// Events written (each part's restatement of its start left out but
    /// the first's).
    pub events: u64,
    /// Parts that could not be read whole (the last one, cut off by the
    /// kill, as a rule): their readable events are in the trace.
    pub damaged_parts: usize,
    /// Where the trace is written.
    pub output: String,
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
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("part-") && n.ends_with(".vtrace"))
            })
            .collect();
        if found.is_empty() {
            return Err(read_error(
                input,
                FormatError::InvalidUse("the folder holds no parts (part-N.vtrace)"),
            ));
        }
        // Zero-padded numbers: their names sort as their numbers do.
        found.sort();
        parts.extend(found);
    }
    Ok(parts)
}

/// Joins `parts` (oldest first) into one trace written to `out`, named
/// `output` in the result.
pub fn join(parts: &[PathBuf], out: impl Write, output: &Path) -> Result<JoinResult, Error> {
    let first = parts.first().cloned().unwrap_or_default();
    let readers = parts
        .iter()
        .map(|p| {
            File::open(p)
                .map(BufReader::new)
                .map_err(|e| read_error(p, e.into()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (_, joined) = join_parts(readers, out).map_err(|e| read_error(&first, e))?;
    Ok(JoinResult {
        parts: parts.iter().map(|p| p.display().to_string()).collect(),
        events: joined.events,
        damaged_parts: joined.damaged_parts,
        output: output.display().to_string(),
    })
}

fn read_error(path: &Path, source: FormatError) -> Error {
    Error::Read {
        path: path.to_path_buf(),
        source,
    }
}
