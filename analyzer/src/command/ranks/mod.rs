//! Rank sets: the traces of a distributed run (one per rank, and per
//! device when a rank drives several), read together into a rank table.
//!
//! Rank traces are independent, so they are replayed in parallel, a few at
//! a time: memory is bounded by the files in flight, not by the number of
//! ranks. [`set`] reads a set for each command that takes one (which traces,
//! whether they are ranks, and each command's work on every rank). The
//! per-rank work can also run anywhere (`vramtrace summary --json TRACE` on
//! each machine of a batch system) and its JSON be merged ([`print::merge`](crate::print::merge)) into
//! one table.

pub mod set;

pub use crate::analysis::ranks::{
    JOB_START_WINDOW_NS, RankPeak, RankRow, RankSource, RankTable, RankTrace, Spread, assign_ranks,
    header_rank, jobs, one_run, rank_in_name, rank_table,
};

use super::{Replay, ReplayOptions};
use crate::Error;
use crate::analysis::timeline::{GroupBy, Timeline, TimelineAnalysis, TimelineOptions};
use crate::input::Input;
use crate::progress::Progress;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Traces of a rank set replayed at once by default: each holds its replay
/// state and a batch of decoded chunks, so this bounds memory.
pub const IN_FLIGHT: usize = 4;

/// A trace measured by a command, for its rank and its devices' peaks.
pub fn rank_trace<T>(path: &Path, result: &super::ByDevice<T>) -> RankTrace {
    RankTrace {
        path: path.to_owned(),
        header_rank: result.rank,
        devices: result.peaks(),
        warnings: (result.warnings.iter())
            .map(|w| w.warning.clone())
            .collect(),
    }
}

/// Replays one trace of a rank set for its peaks alone, each device apart.
pub fn measure_rank(
    input: &Input,
    options: &ReplayOptions,
    progress: &dyn Progress,
) -> Result<RankTrace, Error> {
    let replay = Replay::new(input, options, progress)?;
    let (devices, pass) = replay.run(|_| ())?;
    let devices = devices
        .into_iter()
        .map(|d| replay.result(d.peaks.into_report(d.device)))
        .collect::<Result<_, _>>()?;
    Ok(RankTrace {
        path: input.path().to_owned(),
        header_rank: header_rank(&pass.header),
        devices,
        warnings: pass.warnings,
    })
}

/// Runs `each` on every path (or pair of paths), `in_flight` at a time (at least one), on a
/// pool of its own (the decoding inside each runs there too), and returns
/// the results in the paths' order; the first error ends it.
fn for_each_rank<I: Sync, T: Send, E: Send>(
    paths: &[I],
    in_flight: usize,
    each: impl Fn(&I) -> Result<T, E> + Sync,
) -> Result<Vec<T>, E> {
    use rayon::prelude::*;
    let run = || paths.par_iter().map(&each).collect();
    match rayon::ThreadPoolBuilder::new()
        .num_threads(in_flight.clamp(1, paths.len().max(1)))
        .thread_name(|i| format!("vramtrace-rank-{i}"))
        .build()
    {
        Ok(pool) => pool.install(run),
        // No thread to spare: the global pool, unbounded by file but still
        // by its threads.
        Err(_) => run(),
    }
}

/// A command's result on every device of every rank of a set: for `leaks`
/// and `compare` of rank sets.
#[derive(Clone, Debug, Serialize)]
pub struct RankResults<T> {
    /// Where the ranks were read.
    pub ranks_from: RankSource,
    /// One per rank and device, by rank then device.
    pub rows: Vec<RankResult<T>>,
}

/// A command's result on one device of one rank.
#[derive(Clone, Debug, Serialize)]
pub struct RankResult<T> {
    /// The rank.
    pub rank: u32,
    /// The device.
    pub device: u32,
    /// The result.
    #[serde(flatten)]
    pub result: T,
}

impl<T> RankResults<T> {
    /// Numbers each trace's results by [`assign_ranks`], and orders them.
    pub fn of(traces: Vec<(PathBuf, super::ByDevice<T>)>) -> Self {
        let measured: Vec<RankTrace> = (traces.iter())
            .map(|(path, result)| rank_trace(path, result))
            .collect();
        let (ranks_from, ranks) = assign_ranks(&measured);
        let mut rows: Vec<RankResult<T>> = (traces.into_iter().zip(ranks))
            .flat_map(|((_, result), rank)| {
                result.devices.into_iter().map(move |d| RankResult {
                    rank,
                    device: d.peaks.device,
                    result: d.result,
                })
            })
            .collect();
        rows.sort_by_key(|r| (r.rank, r.device));
        RankResults { ranks_from, rows }
    }
}

/// A rank, and its traces in the baseline and in the new run.
pub type RankPair = (u32, PathBuf, PathBuf);

/// Pairs the traces of two rank sets, rank by rank: by the numbers in their
/// file names when each set's are distinct, else in order. An error when the
/// sets differ in size or in ranks.
pub fn pair_ranks(base: &[PathBuf], new: &[PathBuf]) -> Result<(RankSource, Vec<RankPair>), Error> {
    fn numbered(paths: &[PathBuf]) -> (RankSource, Vec<(u32, PathBuf)>) {
        let names: Option<Vec<u32>> = paths.iter().map(|p| rank_in_name(p)).collect();
        let distinct = names.as_ref().is_some_and(|n| {
            let mut sorted = n.clone();
            sorted.sort_unstable();
            sorted.windows(2).all(|w| w[0] != w[1])
        });
        let (source, ranks) = match names {
            Some(n) if distinct => (RankSource::FileName, n),
            _ => (
                RankSource::Order,
                (0..paths.len())
                    .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
                    .collect(),
            ),
        };
        let mut all: Vec<(u32, PathBuf)> = ranks.into_iter().zip(paths.iter().cloned()).collect();
        all.sort();
        (source, all)
    }
    let ((source, b), (_, n)) = (numbered(base), numbered(new));
    let ranks = |set: &[(u32, PathBuf)]| set.iter().map(|(r, _)| *r).collect::<Vec<u32>>();
    if ranks(&b) != ranks(&n) {
        return Err(Error::RanksDiffer {
            base: ranks(&b),
            new: ranks(&n),
        });
    }
    let pairs = (b.into_iter().zip(n))
        .map(|((rank, b), (_, n))| (rank, b, n))
        .collect();
    Ok((source, pairs))
}

/// Columns of each rank's memory over time in a report's small multiples:
/// a few hundred samples per rank, so that thousands of ranks fit a page.
pub const SMALL_MULTIPLE_COLUMNS: usize = 100;

/// A rank's memory over time, for the report's small multiples.
#[derive(Clone, Debug)]
pub struct RankTimeline {
    /// The rank.
    pub rank: u32,
    /// The device.
    pub device: u32,
    /// Allocated and reserved bytes over time.
    pub timeline: Timeline,
}

/// A report's section on the rank set it belongs to.
#[derive(Clone, Debug, Serialize)]
pub struct RanksSection {
    /// The rank table.
    pub table: RankTable,
    /// Each rank's (and device's) memory over time, by rank then device.
    #[serde(skip)]
    pub timelines: Vec<RankTimeline>,
}

/// Replays one trace of a rank set for its peaks and, per device, its
/// memory over time at [`SMALL_MULTIPLE_COLUMNS`].
pub fn measure_rank_timeline(
    input: &Input,
    options: &ReplayOptions,
    progress: &dyn Progress,
) -> Result<(RankTrace, Vec<Timeline>), Error> {
    let replay = Replay::new(input, options, progress)?;
    let result = replay.by_device(
        |_| {
            (TimelineAnalysis::new(TimelineOptions {
                columns: SMALL_MULTIPLE_COLUMNS,
                group_by: GroupBy::None,
                top: 0,
            }),)
        },
        |(timeline,), _| replay.result(timeline.into_report()),
    )?;
    let trace = rank_trace(input.path(), &result);
    let timelines = result.devices.into_iter().map(|d| d.result).collect();
    Ok((trace, timelines))
}

/// The ranks section of a set's measured traces (numbered by [`assign_ranks`]).
pub fn ranks_section(measured: Vec<(RankTrace, Vec<Timeline>)>) -> RanksSection {
    let traces: Vec<RankTrace> = measured.iter().map(|(t, _)| t.clone()).collect();
    let (_, ranks) = assign_ranks(&traces);
    let mut timelines: Vec<RankTimeline> = (measured.into_iter().zip(ranks))
        .flat_map(|((trace, timelines), rank)| {
            (trace.devices.into_iter().zip(timelines)).map(move |(d, timeline)| RankTimeline {
                rank,
                device: d.device,
                timeline,
            })
        })
        .collect();
    timelines.sort_by_key(|t| (t.rank, t.device));
    RanksSection {
        table: rank_table(&traces),
        timelines,
    }
}
