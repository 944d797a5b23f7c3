//! Reading the runs a plan is made from, and checking that they can be:
//! one device each, their values, one kind of GPU, no OOM but survived
//! ones, the same steps, allocations that line up.

use super::PlanOptions;
use super::words::request_words;
use crate::Error;
use crate::analysis::Devices;
use crate::input::{EventStream, Input};
use crate::progress::Progress;
use crate::replay::categories::is_step_phase;
use crate::simulate::plan::{ModelError, PlanError, Varied};
use crate::simulate::{Extracted, Op, extract};
use crate::sites::site_label;
use vramtrace_format::EventSource;

/// A run read.
pub(super) struct Run<'a> {
    /// The input it came from.
    pub(super) input: &'a Input,
    /// Its pass's stream: the header and the symbols that name its sites.
    pub(super) events: EventStream,
    /// Its requests, and the replay's state after them.
    pub(super) extracted: Extracted,
    /// The value it was recorded at (0 until [`values_of`] sets it).
    pub(super) value: u64,
    /// The optimizer steps it made.
    pub(super) steps: u64,
}

/// Reads one run's requests (of its one device, or the one picked).
pub(super) fn read_run<'a>(
    input: &'a Input,
    options: &PlanOptions,
    progress: &dyn Progress,
) -> Result<Run<'a>, Error> {
    let mut events = input.events()?;
    let meter = progress.begin(input.pass_work(&events));
    let devices = options
        .recorded_device
        .map_or(Devices::Apart, Devices::Only);
    let mut extracted = extract(&mut events, devices, &*meter)
        .map_err(|e| super::super::pass_error(input.path(), e))?;
    drop(meter);
    let path = input.path().display().to_string();
    if let Some(device) = options.recorded_device
        && extracted.devices.is_empty()
    {
        return Err(Error::NoSuchDevice {
            path: input.path().to_owned(),
            device,
            seen: extracted.seen,
        });
    }
    if extracted.devices.len() > 1 {
        let seen: Vec<String> = extracted.seen.iter().map(u32::to_string).collect();
        return Err(PlanError::SeveralDevices {
            path,
            seen: seen.join(", "),
        }
        .into());
    }
    let Some(extracted) = extracted.devices.pop() else {
        return Err(Error::NoSuchDevice {
            path: input.path().to_owned(),
            device: options.recorded_device.unwrap_or(0),
            seen: extracted.seen,
        });
    };
    let symbols = events.symbols();
    let steps = extracted
        .state
        .phases()
        .iter()
        .filter(|p| is_step_phase(symbols.string_or_unknown(p.name)))
        .count() as u64;
    Ok(Run {
        input,
        events,
        extracted,
        value: 0,
        steps,
    })
}

/// Sets each run's value, given or noted, and says what varies.
pub(super) fn values_of(read: &mut [Run<'_>], options: &PlanOptions) -> Result<Varied, PlanError> {
    const BATCH: [&str; 3] = ["batch", "batch_size", "batch-size"];
    const SEQ: [&str; 5] = ["seq", "seq_len", "seq-len", "sequence_length", "seq_length"];
    if let Some((varied, values)) = &options.values {
        let keys: &[&str] = if *varied == Varied::Batch {
            &BATCH
        } else {
            &SEQ
        };
        for (r, &v) in read.iter_mut().zip(values) {
            // A value given that the run's own note contradicts: one of the
            // two is wrong, and the plan would be of neither.
            if let Some(noted) = last_note(&r.extracted.annotations, keys)
                && let Ok(n) = noted.trim().parse::<u64>()
                && n != v
            {
                return Err(PlanError::ValueContradicts {
                    path: r.input.path().display().to_string(),
                    key: keys[0].to_string(),
                    noted: n,
                    given: v,
                });
            }
            r.value = v;
        }
        return Ok(*varied);
    }
    let noted = |r: &Run<'_>, keys: &[&str]| -> Result<Option<u64>, PlanError> {
        match last_note(&r.extracted.annotations, keys) {
            None => Ok(None),
            Some(v) => match v.trim().parse::<u64>() {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(PlanError::BadValue {
                    path: r.input.path().display().to_string(),
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
                .map(|(r, _)| r.input.path().display().to_string())
                .unwrap_or_default();
            return Err(PlanError::NoValue { path: missing });
        }
    };
    let values = if varied == Varied::Batch {
        batches
    } else {
        seqs
    };
    for (r, v) in read.iter_mut().zip(values) {
        r.value = v.unwrap_or(0);
    }
    Ok(varied)
}

/// The runs must come from one kind of GPU: a library's workspaces and
/// kernels' choices differ between them.
pub(super) fn check_gpus(read: &[Run<'_>]) -> Result<(), PlanError> {
    let gpu = |r: &Run<'_>| {
        let header = r.events.header();
        let device = r.extracted.device;
        let info = match header.devices.as_slice() {
            [one] => Some(one),
            all => all.iter().find(|d| d.index == device),
        };
        info.map(|d| d.name.clone()).filter(|n| !n.is_empty())
    };
    let names: Vec<Option<String>> = read.iter().map(gpu).collect();
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
pub(super) fn check_runs(read: &[Run<'_>]) -> Result<(), PlanError> {
    // A run that ran out of memory first: it made fewer steps, and the
    // OOM says why.
    for r in read {
        if let Some(at) = first_fatal_oom(&r.extracted, r.events.symbols()) {
            return Err(PlanError::RecordedOom {
                path: r.input.path().display().to_string(),
                at,
            });
        }
    }
    if read.windows(2).any(|w| w[0].steps != w[1].steps) {
        let words: Vec<String> = read
            .iter()
            .map(|r| format!("{} in {}", r.steps, r.input.path().display()))
            .collect();
        return Err(PlanError::StepsDiffer {
            counts: words.join(", "),
        });
    }
    Ok(())
}

/// Where a recorded run first ran out of memory, in words: a failure the
/// program does not survive (a cuDNN workspace's is survived).
pub(super) fn first_fatal_oom(
    e: &Extracted,
    symbols: &vramtrace_format::SymbolTable,
) -> Option<String> {
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
pub(super) fn model_error(e: ModelError, read: &[Run<'_>], varied: Varied) -> Error {
    match e {
        ModelError::SameValue(value) => PlanError::SameValue {
            varied: varied.words(),
            value,
        }
        .into(),
        ModelError::NotLinedUp { run, line_up } => {
            let reference = read
                .iter()
                .max_by_key(|r| r.value)
                .expect("runs were given");
            let at = line_up.first_difference.map_or_else(
                || "the end".to_string(),
                |id| {
                    let e = &reference.extracted;
                    let a = &e.list.allocs[id.min(e.list.allocs.len().saturating_sub(1))];
                    let symbols = reference.events.symbols();
                    let phase = e.state.phase_path(a.phase, symbols);
                    format!(
                        "{}'s allocation {} ({}{})",
                        reference.input.path().display(),
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
                path: read[run].input.path().display().to_string(),
                reference: reference.input.path().display().to_string(),
                unmatched: line_up.unmatched,
                allocations: line_up.allocations,
                reference_unmatched: line_up.reference_unmatched,
                reference_allocations: line_up.reference_allocations,
                at,
            }
            .into()
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
