//! Rank sets: the traces of a distributed run (one per rank, and per
//! device when a rank drives several), numbered and laid side by side in a
//! rank table. Which traces are one run's ranks is read from their headers
//! ([`one_run`], [`jobs`]); each is numbered by its header, its file name or
//! its order ([`assign_ranks`]). Reading and replaying the traces is
//! `command::ranks`'s; merging tables from the JSON of per-rank work done
//! elsewhere, `print::merge`'s.

use super::categories::CategoryTable;
use super::peaks::DevicePeaks;
use super::summary::Peak;
use super::warning::Warning;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where the ranks of a set were read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankSource {
    /// Each trace's header (the `RANK` the recording process had).
    Header,
    /// The number in each file name (`run-3.vtrace`, `rank3.pickle`).
    FileName,
    /// The order of the files, as given (sorted, for a folder).
    Order,
}

/// One trace of a rank set, measured: its rank (when its header has one)
/// and each device's peaks.
#[derive(Clone, Debug)]
pub struct RankTrace {
    /// The trace's path.
    pub path: PathBuf,
    /// The rank its header records.
    pub header_rank: Option<u32>,
    /// Each device's peaks.
    pub devices: Vec<DevicePeaks>,
    /// What the pass found worth a warning.
    pub warnings: Vec<Warning>,
}

/// The rank a trace's header records (the launcher's `RANK` when the
/// recording process ran under one).
pub fn header_rank(header: &vramtrace_format::Header) -> Option<u32> {
    header.process.rank
}

/// How far apart the starts of one job's ranks may lie: the launcher
/// starts them together, but each begins recording after its own imports
/// and CUDA start-up, which a busy machine spreads over seconds.
pub const JOB_START_WINDOW_NS: u64 = 120 * 1_000_000_000;

/// The distributed jobs among traces that are not all one run's ranks
/// (several runs' traces in one folder): traces whose headers record a
/// rank of one world size, started together (within
/// [`JOB_START_WINDOW_NS`] of the job's first; or all without a start), no
/// two with the same rank and device. Traces are taken in the order they
/// started, each into the first job it fits, so a second run of the same
/// world size, whose ranks repeat the first's, makes a job of its own.
/// Each job is its traces' indices in `headers`, in that order, and holds
/// two traces or more; traces of no job are in none.
pub fn jobs(headers: &[Option<vramtrace_format::Header>]) -> Vec<Vec<usize>> {
    struct Job {
        world: u32,
        start: u64,
        seen: std::collections::BTreeSet<(u32, Option<u32>)>,
        members: Vec<usize>,
    }
    let mut order: Vec<(u64, usize)> = (headers.iter().enumerate())
        .filter_map(|(i, h)| h.as_ref().map(|h| (h.start_unix_ns, i)))
        .collect();
    order.sort_unstable();
    let mut jobs: Vec<Job> = Vec::new();
    for (start, i) in order {
        let Some(header) = &headers[i] else { continue };
        let (Some(rank), Some(world)) = (header.process.rank, header.process.world_size) else {
            continue;
        };
        if rank >= world {
            continue;
        }
        let mut keys: Vec<(u32, Option<u32>)> = header
            .devices
            .iter()
            .map(|d| (rank, Some(d.index)))
            .collect();
        if keys.is_empty() {
            keys.push((rank, None));
        }
        // A start of 0 is unknown: such traces group only with each other.
        let fits = |j: &Job| {
            j.world == world
                && (j.start == 0) == (start == 0)
                && start.abs_diff(j.start) <= JOB_START_WINDOW_NS
                && keys.iter().all(|k| !j.seen.contains(k))
        };
        match jobs.iter_mut().find(|j| fits(j)) {
            Some(job) => {
                job.seen.extend(keys);
                job.members.push(i);
            }
            None => jobs.push(Job {
                world,
                start,
                seen: keys.into_iter().collect(),
                members: vec![i],
            }),
        }
    }
    (jobs.into_iter())
        .filter(|j| j.members.len() >= 2)
        .map(|j| j.members)
        .collect()
}

/// Whether these headers say their traces are the ranks of one distributed
/// run: each records a rank below one world size that all record, and no
/// two share a rank and a device (a rank driving two devices writes a
/// trace per device). A PyTorch snapshot has no header (`None`): nothing
/// says whose rank it is.
pub fn one_run(headers: &[Option<vramtrace_format::Header>]) -> bool {
    let mut world = None;
    let mut seen = std::collections::BTreeSet::new();
    headers.iter().all(|header| {
        let Some(header) = header else {
            return false;
        };
        let process = &header.process;
        let (Some(rank), Some(size)) = (process.rank, process.world_size) else {
            return false;
        };
        // A trace that lists no device counts as one.
        let mut devices: Vec<Option<u32>> = header.devices.iter().map(|d| Some(d.index)).collect();
        if devices.is_empty() {
            devices.push(None);
        }
        rank < size
            && *world.get_or_insert(size) == size
            && devices.into_iter().all(|d| seen.insert((rank, d)))
    })
}

/// The number a file name gives a rank: the last run of digits in its name
/// without extensions and without the recorder's `.devN` suffix
/// (`run-3.vtrace`, `run-3.dev1.vtrace`: 3).
pub fn rank_in_name(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_string_lossy();
    let stem = name.split('.').next().unwrap_or(&name);
    let end = stem.rfind(|c: char| c.is_ascii_digit())? + 1;
    let start = stem[..end]
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    stem[start..end].parse().ok()
}

/// One line of a rank table: a device of a rank, and its peaks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankRow {
    /// The rank.
    pub rank: u32,
    /// The device.
    pub device: u32,
    /// The trace it was read from.
    pub path: String,
    /// Its allocated peak, when and in which phase.
    pub peak_allocated: Peak,
    /// Its reserved peak, when and in which phase.
    pub peak_reserved: Peak,
    /// Allocated bytes at the end (what stays live: parameters and
    /// optimizer state, in training).
    #[serde(default, rename = "end_allocated_bytes", alias = "end_allocated")]
    pub end_allocated: u64,
    /// Allocated memory by category at the allocated peak.
    #[serde(default)]
    pub categories_at_peak: CategoryTable,
}

/// A rank and device whose peak stands out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankPeak {
    /// The rank.
    pub rank: u32,
    /// The device.
    pub device: u32,
    /// Its peak.
    pub bytes: u64,
}

/// How far apart the ranks' peaks are.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// The highest peak.
    pub highest: RankPeak,
    /// The lowest peak.
    pub lowest: RankPeak,
    /// Highest less lowest.
    pub bytes: u64,
    /// `bytes` as a fraction of the highest peak (0 when it is 0).
    pub fraction: f64,
}

impl Spread {
    fn of(rows: &[RankRow], peak: impl Fn(&RankRow) -> u64) -> Option<Spread> {
        let at = |r: &RankRow| RankPeak {
            rank: r.rank,
            device: r.device,
            bytes: peak(r),
        };
        // The first of equals, in rank order.
        let highest = rows.iter().rev().max_by_key(|r| peak(r)).map(at)?;
        let lowest = rows.iter().min_by_key(|r| peak(r)).map(at)?;
        let bytes = highest.bytes - lowest.bytes;
        Some(Spread {
            fraction: if highest.bytes == 0 {
                0.0
            } else {
                bytes as f64 / highest.bytes as f64
            },
            highest,
            lowest,
            bytes,
        })
    }
}

/// The peaks of every rank of a run, side by side.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RankTable {
    /// Where the ranks were read.
    pub ranks_from: RankSource,
    /// How many ranks.
    pub ranks: usize,
    /// One row per rank and device, by rank then device.
    pub rows: Vec<RankRow>,
    /// The spread of allocated peaks (none without rows).
    pub allocated: Option<Spread>,
    /// The spread of reserved peaks.
    pub reserved: Option<Spread>,
}

impl RankTable {
    /// The table of these rows, sorted by rank and device.
    pub fn of(ranks_from: RankSource, mut rows: Vec<RankRow>) -> Self {
        rows.sort_by(|a, b| (a.rank, a.device, &a.path).cmp(&(b.rank, b.device, &b.path)));
        let mut ranks: Vec<u32> = rows.iter().map(|r| r.rank).collect();
        ranks.dedup();
        RankTable {
            ranks_from,
            ranks: ranks.len(),
            allocated: Spread::of(&rows, |r| r.peak_allocated.bytes),
            reserved: Spread::of(&rows, |r| r.peak_reserved.bytes),
            rows,
        }
    }
}

/// Numbers the traces of a set: by their headers' ranks when every trace
/// has one, else by the numbers in their file names when every name has one,
/// else in order; in each case, unless two traces would share a rank and a
/// device (then the next way). One rank per trace.
pub fn assign_ranks(traces: &[RankTrace]) -> (RankSource, Vec<u32>) {
    type RankOf<'a> = &'a dyn Fn(usize, &RankTrace) -> Option<u32>;
    let ways: [(RankSource, RankOf<'_>); 2] = [
        (RankSource::Header, &|_, t| t.header_rank),
        (RankSource::FileName, &|_, t| rank_in_name(&t.path)),
    ];
    for (source, rank_of) in ways {
        let ranks: Option<Vec<u32>> = (traces.iter().enumerate())
            .map(|(i, t)| rank_of(i, t))
            .collect();
        let Some(ranks) = ranks else { continue };
        let mut keys = std::collections::BTreeSet::new();
        let distinct = (ranks.iter().zip(traces))
            .all(|(&r, t)| t.devices.iter().all(|d| keys.insert((r, d.device))));
        if distinct {
            return (source, ranks);
        }
    }
    let order = (0..traces.len())
        .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
        .collect();
    (RankSource::Order, order)
}

/// The rank table of a set's traces, numbered by [`assign_ranks`].
pub fn rank_table(traces: &[RankTrace]) -> RankTable {
    let (source, ranks) = assign_ranks(traces);
    let rows = (traces.iter().zip(ranks))
        .flat_map(|(t, rank)| {
            t.devices.iter().map(move |d| RankRow {
                rank,
                device: d.device,
                path: t.path.display().to_string(),
                peak_allocated: d.peak_allocated.clone(),
                peak_reserved: d.peak_reserved.clone(),
                end_allocated: d.end_allocated,
                categories_at_peak: d.categories_at_peak.clone(),
            })
        })
        .collect();
    RankTable::of(source, rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peak(bytes: u64) -> Peak {
        Peak {
            bytes,
            ..Peak::default()
        }
    }

    fn trace(path: &str, rank: Option<u32>, peaks: &[(u32, u64)]) -> RankTrace {
        RankTrace {
            path: PathBuf::from(path),
            header_rank: rank,
            devices: peaks
                .iter()
                .map(|&(device, bytes)| DevicePeaks {
                    device,
                    peak_allocated: peak(bytes),
                    peak_reserved: peak(bytes * 2),
                    end_allocated: bytes / 2,
                    categories_at_peak: Default::default(),
                })
                .collect(),
            warnings: Vec::new(),
        }
    }

    #[test]
    fn a_header_names_its_rank_in_its_process() {
        let mut header = vramtrace_format::Header::default();
        assert_eq!(header_rank(&header), None);
        header.process.rank = Some(2);
        assert_eq!(header_rank(&header), Some(2));
    }

    #[test]
    fn headers_say_whether_traces_are_ranks_of_one_run() {
        let rank = |rank: u32, world: u32, device: u32| {
            let mut h = vramtrace_format::Header::default();
            h.process.rank = Some(rank);
            h.process.world_size = Some(world);
            h.devices.push(vramtrace_format::DeviceInfo {
                index: device,
                name: String::new(),
                total_memory: 0,
            });
            Some(h)
        };
        assert!(one_run(&[rank(0, 2, 0), rank(1, 2, 1)]));
        // A rank driving two devices writes a trace for each.
        assert!(one_run(&[rank(0, 1, 0), rank(0, 1, 1)]));
        assert!(
            !one_run(&[rank(0, 2, 0), rank(0, 2, 0)]),
            "the same rank twice"
        );
        assert!(!one_run(&[rank(0, 2, 0), rank(1, 4, 0)]), "two world sizes");
        assert!(
            !one_run(&[rank(0, 2, 0), rank(2, 2, 0)]),
            "a rank past the world"
        );
        let unranked = Some(vramtrace_format::Header::default());
        assert!(!one_run(&[rank(0, 2, 0), unranked]));
        assert!(!one_run(&[rank(0, 2, 0), None]), "a snapshot");
    }

    #[test]
    fn two_jobs_of_one_world_size_are_told_apart_by_their_starts_and_ranks() {
        const S: u64 = 1_000_000_000;
        let rank = |rank: u32, start: u64| {
            let mut h = vramtrace_format::Header::default();
            h.process.rank = Some(rank);
            h.process.world_size = Some(2);
            h.start_unix_ns = start;
            Some(h)
        };
        // Job A at t=1000 s, job B an hour later, given interleaved; a
        // snapshot and a rank starting 10 minutes after A (of no job).
        let headers = [
            rank(0, 1000 * S),
            rank(0, 4600 * S),
            None,
            rank(1, 1003 * S),
            rank(1, 4601 * S),
            rank(1, 1600 * S),
        ];
        assert_eq!(jobs(&headers), vec![vec![0, 3], vec![1, 4]]);
        // Without starts, the ranks' repetition alone tells the jobs apart.
        let headers = [rank(0, 0), rank(0, 0), rank(1, 0), rank(1, 0)];
        assert_eq!(jobs(&headers), vec![vec![0, 2], vec![1, 3]]);
    }

    #[test]
    fn ranks_come_from_names_without_the_device_suffix() {
        let r = |p: &str| rank_in_name(Path::new(p));
        assert_eq!(r("out/run-3.vtrace"), Some(3));
        assert_eq!(r("run-12.dev1.vtrace"), Some(12));
        assert_eq!(r("rank7_snapshot.pickle.xz"), Some(7));
        assert_eq!(r("run.vtrace"), None);
    }

    #[test]
    fn headers_name_ranks_first_then_file_names_then_order() {
        let t = rank_table(&[
            trace("b/run-0.vtrace", Some(1), &[(1, 30)]),
            trace("a/run-1.vtrace", Some(0), &[(0, 40)]),
        ]);
        assert_eq!(t.ranks_from, RankSource::Header);
        assert_eq!(t.rows[0].path, "a/run-1.vtrace");
        // Headers without ranks: the names' numbers.
        let t = rank_table(&[
            trace("run-5.vtrace", None, &[(0, 30)]),
            trace("run-2.vtrace", None, &[(0, 40)]),
        ]);
        assert_eq!(t.ranks_from, RankSource::FileName);
        assert_eq!(
            t.rows.iter().map(|r| r.rank).collect::<Vec<_>>(),
            vec![2, 5]
        );
        // Names that collide: the order given.
        let t = rank_table(&[
            trace("x/run-1.vtrace", None, &[(0, 30)]),
            trace("y/run-1.vtrace", None, &[(0, 40)]),
        ]);
        assert_eq!(t.ranks_from, RankSource::Order);
        assert_eq!(t.ranks, 2);
    }

    #[test]
    fn the_spread_names_the_highest_and_lowest_rank() {
        let t = rank_table(&[
            trace("run-0.vtrace", Some(0), &[(0, 100)]),
            trace("run-1.vtrace", Some(1), &[(1, 75)]),
            trace("run-2.vtrace", Some(2), &[(2, 100)]),
        ]);
        let a = t.allocated.unwrap();
        assert_eq!((a.highest.rank, a.lowest.rank), (0, 1));
        assert_eq!(a.bytes, 25);
        assert!((a.fraction - 0.25).abs() < 1e-12);
        assert_eq!(t.reserved.unwrap().bytes, 50);
    }
}
