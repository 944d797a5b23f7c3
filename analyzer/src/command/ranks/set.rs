//! A rank set, read: which traces a command was given and whether they are
//! the ranks of one run ([`resolve`]), then each command's work on every
//! rank, a few traces at a time ([`summary`], [`leaks`], [`compare`],
//! [`report_section`], then [`report`] of the trace it chose).
//!
//! Every function opens its own inputs, on the pool's threads, and returns
//! its result with what each trace told besides ([`SetRun::warnings`], in
//! the traces' order), so the caller shows each warning once and nothing is
//! printed from a worker thread.

use super::{
    RankResult, RankResults, RankTable, RankTrace, RanksSection, for_each_rank, measure_rank,
    measure_rank_timeline, one_run, pair_ranks, rank_table, ranks_section,
};
use crate::Error;
use crate::command::compare::{CompareCommandOptions, CompareResult};
use crate::command::leaks::LeaksResult;
use crate::command::report::{ReportOptions, ReportResult};
use crate::command::{InputWarning, ReplayOptions, Warning};
use crate::input::folders::expand_folders;
use crate::input::{Input, InputError, InputOptions};
use crate::progress::Progress;
use serde::Serialize;
use std::path::PathBuf;

/// The traces a command was given, resolved.
#[derive(Debug)]
pub struct Traces {
    /// Files as named, and each folder's traces (sorted by name), less those
    /// left out.
    pub paths: Vec<PathBuf>,
    /// Whether they are the ranks of one run: asked for, or several traces
    /// whose headers say so.
    pub rank_set: bool,
    /// Files of the folders given that are no trace at all (empty, another
    /// format), left out so that one bad file does not cost the others'
    /// table, with why.
    pub left_out: Vec<InputError>,
    /// When they are not one run's ranks: the distributed jobs among them
    /// (see [`jobs`](super::jobs)), each its traces in the order they
    /// started; the traces of no job are each on their own.
    pub jobs: Vec<Job>,
}

/// The ranks of one distributed job, among traces of several runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// Its traces, in the order they started.
    pub paths: Vec<PathBuf>,
    /// The world size their headers record.
    pub world_size: u32,
    /// When its first trace started, in nanoseconds of Unix time (0 when
    /// the traces do not say).
    pub start_unix_ns: u64,
}

impl Traces {
    /// The traces of no job, in the order given.
    pub fn alone(&self) -> Vec<&PathBuf> {
        (self.paths.iter())
            .filter(|p| !self.jobs.iter().any(|j| j.paths.contains(p)))
            .collect()
    }
}

/// The traces named (files, and each folder's traces; see
/// [`expand_folders`]), and whether they are a rank set: `asked`, or
/// several whose headers say they are the ranks of one run ([`one_run`];
/// headers are read alone, a snapshot is not parsed for this). A file
/// named itself must be readable; a folder's file that is not is left out.
pub fn resolve(paths: &[PathBuf], asked: bool, options: InputOptions) -> Result<Traces, Error> {
    let traces = expand_folders(paths)?;
    if traces.len() < 2 {
        return Ok(Traces {
            paths: traces,
            rank_set: asked,
            left_out: Vec::new(),
            jobs: Vec::new(),
        });
    }
    let mut kept = Vec::with_capacity(traces.len());
    let mut headers = Vec::with_capacity(traces.len());
    let mut left_out = Vec::new();
    for path in traces {
        match Input::peek_header(&path, options) {
            Ok(header) => {
                kept.push(path);
                headers.push(header);
            }
            Err(e) if !paths.contains(&path) => left_out.push(e),
            Err(e) => return Err(e.into()),
        }
    }
    if kept.is_empty() {
        return Err(InputError::NoReadableTrace.into());
    }
    let rank_set = asked || one_run(&headers);
    let jobs = if rank_set {
        Vec::new()
    } else {
        (super::jobs(&headers).into_iter())
            .map(|members| {
                let first = headers[members[0]].as_ref();
                Job {
                    world_size: first.and_then(|h| h.process.world_size).unwrap_or(0),
                    start_unix_ns: first.map_or(0, |h| h.start_unix_ns),
                    paths: members.iter().map(|&i| kept[i].clone()).collect(),
                }
            })
            .collect()
    };
    Ok(Traces {
        rank_set,
        paths: kept,
        left_out,
        jobs,
    })
}

/// How a rank set's traces are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetOptions {
    /// How each trace is opened.
    pub input: InputOptions,
    /// How many traces are read at once (at least one), which bounds memory:
    /// each holds its replay state and a batch of decoded chunks.
    pub in_flight: usize,
}

impl Default for SetOptions {
    fn default() -> Self {
        SetOptions {
            input: InputOptions::default(),
            in_flight: super::IN_FLIGHT,
        }
    }
}

/// A command's result on a rank set, and what its traces told besides
/// (each trace's warnings, in the traces' order: what converting it found,
/// then its pass's).
///
/// As JSON: the result's keys, then `warnings` (as a command's result on
/// one input has them, docs/json.md).
#[derive(Clone, Debug, Serialize)]
pub struct SetRun<T> {
    /// The result.
    #[serde(flatten)]
    pub result: T,
    /// What the traces told besides.
    pub warnings: Vec<InputWarning>,
}

/// Runs `each` on every path of the set, `in_flight` at a time, and splits
/// what it returns into the results and the warnings (in the paths' order).
fn run_set<I: Sync, T: Send>(
    items: &[I],
    options: &SetOptions,
    each: impl Fn(&I) -> Result<(T, Vec<InputWarning>), Error> + Sync,
) -> Result<(Vec<T>, Vec<InputWarning>), Error> {
    let done = for_each_rank(items, options.in_flight, each)?;
    let mut results = Vec::with_capacity(done.len());
    let mut warnings = Vec::new();
    for (result, told) in done {
        results.push(result);
        warnings.extend(told);
    }
    Ok((results, warnings))
}

/// The rank table of a set: each trace replayed for its peaks alone, each
/// device apart.
pub fn summary(
    paths: &[PathBuf],
    options: &SetOptions,
    replay: &ReplayOptions,
    progress: &dyn Progress,
) -> Result<SetRun<RankTable>, Error> {
    let (measured, warnings) = run_set(paths, options, |path| {
        let input = Input::open_with(path, options.input, progress)?;
        let trace: RankTrace = measure_rank(&input, replay, progress)?;
        let told = InputWarning::of_input(&input, trace.warnings.clone());
        Ok((trace, told))
    })?;
    Ok(SetRun {
        result: rank_table(&measured),
        warnings,
    })
}

/// Every rank's leaks, on each of its devices.
pub fn leaks(
    paths: &[PathBuf],
    options: &SetOptions,
    replay: &ReplayOptions,
    progress: &dyn Progress,
) -> Result<SetRun<RankResults<LeaksResult>>, Error> {
    let (results, warnings) = run_set(paths, options, |path| {
        let input = Input::open_with(path, options.input, progress)?;
        let mut result = crate::command::leaks::leaks(&input, replay, progress)?;
        let told = std::mem::take(&mut result.warnings);
        Ok(((path.clone(), result), told))
    })?;
    Ok(SetRun {
        result: RankResults::of(results),
        warnings,
    })
}

/// Two rank sets compared rank by rank (paired by [`pair_ranks`]): rank i of
/// `new` against rank i of `base`, on each device. The charts' timelines are
/// not kept: a set may have thousands of ranks.
pub fn compare(
    base: &[PathBuf],
    new: &[PathBuf],
    options: &SetOptions,
    compare: &CompareCommandOptions,
    progress: &dyn Progress,
) -> Result<SetRun<RankResults<CompareResult>>, Error> {
    let (ranks_from, pairs) = pair_ranks(base, new)?;
    let (rows, warnings) = run_set(&pairs, options, |(rank, b, n)| {
        let base = Input::open_with(b, options.input, progress)?;
        let new = Input::open_with(n, options.input, progress)?;
        let result = crate::command::compare::compare(&base, &new, compare, progress)?;
        let mut rows = Vec::with_capacity(result.devices.len());
        for d in result.devices {
            let mut result = d.result;
            result.base_timeline = Default::default();
            result.new_timeline = Default::default();
            rows.push(RankResult {
                rank: *rank,
                device: d.peaks.device,
                result,
            });
        }
        Ok((rows, result.warnings))
    })?;
    Ok(SetRun {
        result: RankResults {
            ranks_from,
            rows: rows.into_iter().flatten().collect(),
        },
        warnings,
    })
}

/// A report's section on a rank set (the rank table, and each rank's memory
/// over time), and the trace the report is of: the highest allocated peak's
/// (the first of equals).
pub fn report_section(
    paths: &[PathBuf],
    options: &SetOptions,
    replay: &ReplayOptions,
    progress: &dyn Progress,
) -> Result<SetRun<(RanksSection, PathBuf)>, Error> {
    let (measured, warnings) = run_set(paths, options, |path| {
        let input = Input::open_with(path, options.input, progress)?;
        let measured = measure_rank_timeline(&input, replay, progress)?;
        let told = InputWarning::of_input(&input, measured.0.warnings.clone());
        Ok((measured, told))
    })?;
    let section = ranks_section(measured);
    let highest = section
        .table
        .allocated
        .as_ref()
        .and_then(|a| {
            (section.table.rows.iter())
                .find(|r| r.rank == a.highest.rank && r.device == a.highest.device)
        })
        .map(|row| PathBuf::from(&row.path))
        .or_else(|| paths.first().cloned())
        .unwrap_or_default();
    Ok(SetRun {
        result: (section, highest),
        warnings,
    })
}

/// The report of a rank set's trace `input` (the one [`report_section`]
/// chose), finished: the set's section in it, and its warnings less those
/// the set's pass told about `input` (each warning is told once).
pub fn report(
    input: &Input,
    section: SetRun<RanksSection>,
    options: &ReportOptions,
    progress: &dyn Progress,
) -> Result<ReportResult, Error> {
    let mut result = crate::command::report::report(input, None, options, progress)?;
    let told: Vec<&Warning> = (section.warnings.iter())
        .filter(|told| told.path == input.path())
        .map(|told| &told.warning)
        .collect();
    result.warnings.retain(|w| !told.contains(&w));
    result.ranks = Some(section.result);
    Ok(result)
}
