//! The plan of the trace a snapshot becomes: the state at the first event,
//! rebuilt from the end state and the devices' logs, the sizes of the blocks
//! still live at the end, and the time base.

use super::convert::Collector;
use super::log::{Action, Run};
use super::pickle::Heap;
use super::rebuild::{self, DeviceReplay, EndSegment};
use super::{ImportReport, Snapshot, layout};
use rustc_hash::FxHashMap as FxMap;
use vramtrace_allocator::AllocatorConfig;
use vramtrace_format::PoolId;

/// What writing the trace needs beyond the snapshot: the state at the first event, the
/// sizes of blocks, the time base.
pub(super) struct Plan {
    pub(super) config: AllocatorConfig,
    // Entries of pinned host memory (`host_traces`) in the log, left out.
    pub(super) host_entries: u64,
    // Device index by the list object of its entries.
    pub(super) device_of: FxMap<u32, u32>,
    pub(super) devices: usize,
    // Per device.
    pub(super) start: Vec<Vec<rebuild::StartSegment>>,
    // Block sizes of allocs still live at the end, by log index.
    pub(super) live_sizes: FxMap<u64, u64>,
    pub(super) mismatches: u64,
    // The private pool of each segment that lives to the end in one, by
    // (device, address), with the number of `segment_alloc` entries at that
    // address: the last of them reserved the segment the end state has.
    pub(super) segment_pools: FxMap<(u32, u64), (PoolId, u64)>,
    // The time (in µs) that becomes 0, and whether it is since the epoch.
    pub(super) t0: i64,
    pub(super) epoch_based: bool,
}

impl Plan {
    /// Rebuilds the start state, checks the end state and reports what it finds.
    pub(super) fn new(
        heap: &Heap,
        c: &Collector,
        list_replays: Vec<(u32, DeviceReplay)>,
        s: &Snapshot,
        report: &mut ImportReport,
    ) -> Plan {
        report.warnings.extend(s.warnings.iter().cloned());
        report.entries_per_device = s.entries_per_device.clone();
        // Pinned host memory's entries were logged with the devices': they
        // are not the devices' actions, nor do they set the time base.
        let host_runs: Vec<&Run> = (c.log.runs.iter())
            .filter(|r| s.host_lists.contains(&r.list))
            .collect();
        let mut host_actions = [0u64; Action::ALL.len()];
        for r in &host_runs {
            for e in c.log.run(r) {
                host_actions[e.action as usize] += 1;
            }
        }
        let host_entries: u64 = host_actions.iter().sum();
        let mut unknown = Vec::new();
        for (&action, &n) in &c.action_counts {
            let name = heap.str(action).into_owned();
            let n = match Action::ALL.iter().find(|a| a.name() == name) {
                Some(&a) => n - host_actions[a as usize],
                None => n,
            };
            if n == 0 {
                continue;
            }
            if !Action::is_known(&name) {
                unknown.push(format!("{name} ({n})"));
            }
            report.counts_by_action.insert(name, n);
        }
        if !unknown.is_empty() {
            report.warnings.push(format!(
                "unknown trace actions skipped: {}",
                unknown.join(", ")
            ));
        }
        if c.entries_without_time > 0 {
            report.warnings.push(format!(
            "{} trace entries have no `time_us` (PyTorch before 2.2?): their times are sequence numbers, in ns",
            c.entries_without_time
        ));
        }
        if c.entries_without_frames > 0 {
            report.warnings.push(format!(
                "{} trace entries have no `frames` (recorded without context?): they have no stack",
                c.entries_without_frames
            ));
        }
        if s.impossible_segments + s.impossible_blocks + c.entries_impossible > 0 {
            report.warnings.push(format!(
                "{} segments, {} blocks and {} trace entries with impossible values (negative, sizes past 2^50 bytes, address ranges past 2^64, times past 2^63 µs) left out",
                s.impossible_segments, s.impossible_blocks, c.entries_impossible
            ));
        }
        report_unread(heap, c, s, report);
        if c.entries_out_of_order > 0 {
            report.warnings.push(format!(
            "{} events were earlier than an event before them on their device; their times were raised to keep the trace ordered",
            c.entries_out_of_order
        ));
        }

        // Block sizes follow the allocator's policy (rounding, and whether a cached block
        // is split or handed out whole), which the snapshot's settings change; the end
        // state only gives the sizes of the blocks still live.
        let config = match AllocatorConfig::from_settings(&s.settings) {
            Ok((config, _ignored)) => config,
            Err(e) => {
                report.warnings.push(format!(
                "allocator_settings could not be read ({e}): block sizes follow the default policy, and may not be exact"
            ));
                AllocatorConfig::default()
            }
        };

        // Devices: the position in device_traces.
        let device_of: FxMap<u32, u32> = s
            .device_lists
            .iter()
            .enumerate()
            .map(|(i, &l)| (l, i as u32))
            .collect();
        let devices = s.device_lists.len().max(s.end_blocks.len());
        let mut replays: Vec<DeviceReplay> =
            (0..devices).map(|_| DeviceReplay::default()).collect();
        let empty_blocks = FxMap::default();
        let end_blocks = |d: usize| s.end_blocks.get(d).unwrap_or(&empty_blocks);
        // The end segments by device, in one pass (not one per device).
        let mut end_segments: Vec<Vec<EndSegment>> = vec![Vec::new(); devices];
        for seg in &s.end_segments {
            if let Some(segs) = end_segments.get_mut(seg.device as usize) {
                segs.push(seg.clone());
            }
        }

        // The replays (done while parsing) find the first touches and check the end.
        for (list, r) in list_replays {
            if let Some(&d) = device_of.get(&list) {
                replays[d as usize] = r;
            }
        }
        let segment_pools = segment_pools(c, &device_of, &s.end_segments);
        let mut live_sizes: FxMap<u64, u64> = FxMap::default();
        let mut start = Vec::new();
        let (mut uncertain_blocks, mut uncertain_bytes) = (0, 0);
        for (d, r) in replays.iter_mut().enumerate() {
            let segs = std::mem::take(&mut end_segments[d]);
            if s.has_segments {
                live_sizes.extend(r.check_end(d as u32, end_blocks(d), &segs));
            }
            let state = r.start_state(d as u32, end_blocks(d), &segs, &config);
            uncertain_blocks += state.uncertain_blocks;
            uncertain_bytes += state.uncertain_bytes;
            start.push(state.segments);
        }
        if uncertain_blocks > 0 {
            report.warnings.push(format!(
                "{uncertain_blocks} blocks live when the history began and freed later may each have been handed out whole, larger than their requested size: allocated figures may be up to {} low while they were live",
                crate::units::bytes(uncertain_bytes)
            ));
        }
        let mut mismatches = 0;
        for (d, r) in replays.iter().enumerate() {
            mismatches += r.inconsistency_count;
            for m in &r.inconsistencies {
                report.warnings.push(format!("device {d}: {m}"));
            }
            if r.inconsistency_count > r.inconsistencies.len() as u64 {
                report.warnings.push(format!(
                    "device {d}: {} more inconsistencies not listed",
                    r.inconsistency_count - r.inconsistencies.len() as u64
                ));
            }
        }
        report.end_state_matches = s.has_segments && mismatches == 0;
        report.initial_segments = start.iter().map(Vec::len).sum();
        report.initial_blocks = start.iter().flatten().map(|seg| seg.blocks.len()).sum();
        report.phase_events = s.annotations.as_ref().map_or(0, Vec::len);

        // Times: relative to the first event or annotation.
        let first_times = (c.log.runs.iter())
            .filter(|r| !s.host_lists.contains(&r.list))
            .filter_map(|r| c.log.run(r).next().and_then(|e| e.time_us));
        let annotations = s.annotations.as_deref().unwrap_or(&[]);
        let t0 = first_times
            .chain(annotations.first().map(|a| a.0))
            .min()
            .unwrap_or(0);
        // Microseconds since the epoch after 2001 are epoch times; smaller ones are not.
        let epoch_based = t0 > 1_000_000_000_000_000;
        Plan {
            config,
            host_entries,
            device_of,
            devices,
            start,
            live_sizes,
            mismatches,
            segment_pools,
            t0,
            epoch_based,
        }
    }
}

/// The end state's segments in private pools, by (device, address), each
/// with the number of `segment_alloc` entries at its address (a pass over
/// the log only when there are such segments).
fn segment_pools(
    c: &Collector,
    device_of: &FxMap<u32, u32>,
    end_segments: &[EndSegment],
) -> FxMap<(u32, u64), (PoolId, u64)> {
    let mut pools: FxMap<(u32, u64), (PoolId, u64)> = end_segments
        .iter()
        .filter(|s| !s.pool.is_default())
        .map(|s| ((s.device, s.addr), (s.pool, 0)))
        .collect();
    if pools.is_empty() {
        return pools;
    }
    for run in &c.log.runs {
        for e in c.log.run(run) {
            if e.action != Action::SegmentAlloc {
                continue;
            }
            let Some(&device) = device_of.get(&e.list) else {
                continue;
            };
            if let Some((_, n)) = pools.get_mut(&(device, e.addr)) {
                *n += 1;
            }
        }
    }
    pools
}

/// Reports, once each, what the snapshot holds that the import does not read
/// (`ImportReport::unread`), and the entries the allocator tagged as its own.
fn report_unread(heap: &Heap, c: &Collector, s: &Snapshot, report: &mut ImportReport) {
    let mut unread = s.unread.clone();
    let u = &c.unread;
    let mut add = |key: String, n: u64| {
        if n > 0 {
            layout::not_read(&mut unread, key, n);
        }
    };
    add("trace.compile_context".into(), u.compile_context);
    add("trace.forward_frames".into(), u.forward_frames);
    add("trace.pool_id (not two counters)".into(), u.pool_unread);
    add("trace.pool_id (of a segment_map)".into(), u.map_pools);
    for (&key, &n) in &u.keys {
        add(format!("trace.{}", heap.str(key)), n);
    }
    add(
        "trace: unknown keys past an entry's second".into(),
        u.unnamed_keys,
    );
    for (&key, &n) in &u.frame_keys {
        add(format!("frames.{}", heap.str(key)), n);
    }
    if !unread.is_empty() {
        let list: Vec<String> = unread.iter().map(|(k, n)| format!("`{k}` ({n})")).collect();
        report.warnings.push(format!(
            "not understood, so not read (where, and how many times): {}",
            list.join(", ")
        ));
    }
    report.unread = unread;
    for (&tag, &n) in &u.internal {
        layout::not_read(&mut report.internal_tags, heap.str(tag).into_owned(), n);
    }
    if !report.internal_tags.is_empty() {
        let list: Vec<String> = (report.internal_tags.iter())
            .map(|(k, n)| format!("`{k}` ({n})"))
            .collect();
        report.warnings.push(format!(
            "trace entries the allocator tagged as its own work, replayed as the others: {}",
            list.join(", ")
        ));
    }
}
