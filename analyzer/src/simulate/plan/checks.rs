//! The planner's checks on the runs it is given, before anything is
//! fitted: each run's value (given, or noted in the run), one kind of GPU,
//! one path through the program (no OOM it did not survive, the same
//! optimizer steps), and a model error told in the runs' terms. Each is a
//! [`PlanError`] naming the run.

use super::{ModelError, PlanError, Varied};
use crate::simulate::{Extracted, Op};
use crate::sites::site_label;
use crate::units;
use vramtrace_format::SymbolTable;

/// One recorded run, as the checks see it.
#[derive(Clone, Copy)]
pub struct RunFacts<'a> {
    /// The run's name in messages: its input's path.
    pub name: &'a str,
    /// Its requests, and the replay's state after them.
    pub extracted: &'a Extracted,
    /// The symbols that name its sites and phases.
    pub symbols: &'a SymbolTable,
    /// The GPU it was recorded on, when its header names one.
    pub gpu: Option<&'a str>,
    /// The optimizer steps it made.
    pub steps: u64,
    /// The value it was recorded at (0 before [`values_of`] says).
    pub value: u64,
}

/// A request in words: `train_step (train.py:41) in iter2/backward, asking
/// for 1.2 GiB`.
pub fn request_words(site: &str, phase: &str, bytes: u64) -> String {
    format!(
        "{}{}, asking for {}",
        site_label(site),
        if phase.is_empty() {
            String::new()
        } else {
            format!(" in {phase}")
        },
        units::bytes(bytes)
    )
}

/// Each run's value, given (`given`: what varies and each run's value) or
/// noted in the run (an annotation `batch` or `seq`), and what varies.
pub fn values_of(
    read: &[RunFacts<'_>],
    given: Option<&(Varied, Vec<u64>)>,
) -> Result<(Varied, Vec<u64>), PlanError> {
    const BATCH: [&str; 3] = ["batch", "batch_size", "batch-size"];
    const SEQ: [&str; 5] = ["seq", "seq_len", "seq-len", "sequence_length", "seq_length"];
    if let Some((varied, values)) = given {
        let keys: &[&str] = if *varied == Varied::Batch {
            &BATCH
        } else {
            &SEQ
        };
        for (r, &v) in read.iter().zip(values) {
            // A value given that the run's own note contradicts: one of the
            // two is wrong, and the plan would be of neither.
            if let Some(noted) = last_note(&r.extracted.annotations, keys)
                && let Ok(n) = noted.trim().parse::<u64>()
                && n != v
            {
                return Err(PlanError::ValueContradicts {
                    path: r.name.to_string(),
                    key: keys[0].to_string(),
                    noted: n,
                    given: v,
                });
            }
        }
        return Ok((*varied, values.clone()));
    }
    let noted = |r: &RunFacts<'_>, keys: &[&str]| -> Result<Option<u64>, PlanError> {
        match last_note(&r.extracted.annotations, keys) {
            None => Ok(None),
            Some(v) => match v.trim().parse::<u64>() {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(PlanError::BadValue {
                    path: r.name.to_string(),
                    key: keys[0].to_string(),
                    value: v.to_string(),
                }),
            },
        }
    };
    let mut batches = Vec::new();
    let mut seqs = Vec::new();
    for r in read.iter() {
        batches.push(noted(r, &BATCH)?);
        seqs.push(noted(r, &SEQ)?);
    }
    let varies =
        |v: &[Option<u64>]| v.iter().all(Option::is_some) && v.windows(2).any(|w| w[0] != w[1]);
    let all = |v: &[Option<u64>]| v.iter().all(Option::is_some);
    let varied = match (varies(&batches), varies(&seqs)) {
        (true, true) => return Err(PlanError::BothVary),
        (true, false) => Varied::Batch,
        (false, true) => Varied::Seq,
        // One run, or runs at one value: the batch when noted.
        (false, false) if all(&batches) => Varied::Batch,
        (false, false) if all(&seqs) => Varied::Seq,
        (false, false) => {
            let missing = read
                .iter()
                .zip(batches.iter().zip(&seqs))
                .find(|(_, (b, s))| b.is_none() && s.is_none())
                .or_else(|| read.iter().zip(batches.iter().zip(&seqs)).next())
                .map(|(r, _)| r.name.to_string())
                .unwrap_or_default();
            return Err(PlanError::NoValue { path: missing });
        }
    };
    let values = if varied == Varied::Batch {
        batches
    } else {
        seqs
    };
    Ok((varied, values.into_iter().map(|v| v.unwrap_or(0)).collect()))
}

/// The runs must come from one kind of GPU: a library's workspaces and
/// kernels' choices differ between them.
pub fn check_gpus(read: &[RunFacts<'_>]) -> Result<(), PlanError> {
    let names: Vec<Option<String>> = read.iter().map(|r| r.gpu.map(str::to_string)).collect();
    let known: Vec<&String> = names.iter().flatten().collect();
    if let Some(other) = known.iter().find(|n| **n != known[0]) {
        return Err(PlanError::DifferentGpus {
            first: known[0].clone(),
            other: (*other).clone(),
        });
    }
    Ok(())
}

/// The runs must be of one path through the program: none may have run out
/// of memory (but on a cuDNN workspace, which it survives), and all must
/// have made the same number of optimizer steps.
pub fn check_runs(read: &[RunFacts<'_>]) -> Result<(), PlanError> {
    // A run that ran out of memory first: it made fewer steps, and the
    // OOM says why.
    for r in read {
        if let Some(at) = first_fatal_oom(r.extracted, r.symbols) {
            return Err(PlanError::RecordedOom {
                path: r.name.to_string(),
                at,
            });
        }
    }
    if read.windows(2).any(|w| w[0].steps != w[1].steps) {
        let words: Vec<String> = read
            .iter()
            .map(|r| format!("{} in {}", r.steps, r.name))
            .collect();
        return Err(PlanError::StepsDiffer {
            counts: words.join(", "),
        });
    }
    Ok(())
}

/// Where a recorded run first ran out of memory, in words: a failure the
/// program does not survive (a cuDNN workspace's is survived).
pub fn first_fatal_oom(e: &Extracted, symbols: &vramtrace_format::SymbolTable) -> Option<String> {
    let list = &e.list;
    let r = list.requests.iter().find(|r| {
        r.op == Op::FailedAlloc && !list.survivable.get(r.id as usize).copied().unwrap_or(false)
    })?;
    let a = &list.allocs[r.id as usize];
    Some(format!(
        "at {}",
        request_words(
            &e.state.sites().name(a.site, symbols),
            &e.state.phase_path(a.phase, symbols),
            a.requested
        )
    ))
}

/// A model error, with the runs' names and the site where they differ.
pub fn model_error(e: ModelError, read: &[RunFacts<'_>], varied: Varied) -> PlanError {
    match e {
        ModelError::SameValue(value) => PlanError::SameValue {
            varied: varied.words(),
            value,
        },
        ModelError::NotLinedUp { run, line_up } => {
            let reference = read
                .iter()
                .max_by_key(|r| r.value)
                .expect("runs were given");
            // Where the reference ran out (it may have no allocations at
            // all: a damaged run), its last allocation, or the end.
            let e = reference.extracted;
            let allocation = |id: usize| {
                Some((
                    id,
                    e.list
                        .allocs
                        .get(id.min(e.list.allocs.len().checked_sub(1)?))?,
                ))
            };
            let at = line_up.first_difference.and_then(allocation).map_or_else(
                || "the end".to_string(),
                |(id, a)| {
                    let symbols = reference.symbols;
                    let phase = e.state.phase_path(a.phase, symbols);
                    format!(
                        "{}'s allocation {} ({}{})",
                        reference.name,
                        id + 1,
                        site_label(&e.state.sites().name(a.site, symbols)),
                        if phase.is_empty() {
                            String::new()
                        } else {
                            format!(" in {phase}")
                        }
                    )
                },
            );
            PlanError::NotLinedUp {
                path: read[run].name.to_string(),
                reference: reference.name.to_string(),
                unmatched: line_up.unmatched,
                allocations: line_up.allocations,
                reference_unmatched: line_up.reference_unmatched,
                reference_allocations: line_up.reference_allocations,
                at,
            }
        }
    }
}

/// The last value noted under any of `keys` (compared without case): a
/// process's notes reach every trace it starts later, so a second
/// recording in one process holds the first one's notes before its own.
fn last_note<'a>(notes: &'a [(String, String)], keys: &[&str]) -> Option<&'a str> {
    notes
        .iter()
        .rev()
        .find(|(k, _)| keys.iter().any(|w| k.eq_ignore_ascii_case(w)))
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_note_of_a_key_is_found_without_case() {
        let notes = vec![
            ("step".to_string(), "1".to_string()),
            ("Batch".to_string(), "8".to_string()),
            ("batch".to_string(), "16".to_string()),
        ];
        assert_eq!(last_note(&notes, &["batch", "batch_size"]), Some("16"));
        assert_eq!(last_note(&notes, &["seq"]), None);
    }
}
