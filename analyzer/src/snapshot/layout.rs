//! The layout of a snapshot beside its trace entries: the device lists, the
//! segments and blocks at the end (`segments`), the allocator's settings and
//! the annotations, read from the pickle and checked for plausible values.

use super::convert::{self, Collector};
use super::pickle::{self, Heap, ObjId, ObjKind, Val};
use super::rebuild::{EndBlock, EndSegment};
use super::{ImportError, MAX_DEVICES, MAX_SETTING_VALUES};
use crate::bounds::MAX_BYTES;
use rustc_hash::FxHashMap as FxMap;
use std::collections::BTreeMap;
use vramtrace_format::{BlockStatus, PoolId};

// The parts of the snapshot other than the trace entries.
pub(super) struct Snapshot {
    // The list objects of device_traces, by device index.
    pub(super) device_lists: Vec<u32>,
    // Consumed entries per device list.
    pub(super) entries_per_device: Vec<u64>,
    pub(super) has_segments: bool,
    pub(super) end_segments: Vec<EndSegment>,
    pub(super) end_blocks: Vec<FxMap<u64, EndBlock>>,
    pub(super) settings: BTreeMap<String, String>,
    // (time_us, is START, name)
    pub(super) annotations: Option<Vec<(i64, bool, String)>>,
    pub(super) warnings: Vec<String>,
    // Segments and blocks of `segments` left out for impossible values.
    pub(super) impossible_segments: u64,
    pub(super) impossible_blocks: u64,
    // What the snapshot holds beside the trace entries that is not read, by
    // name (`segments.forward_frames`, `host_segments`, ...), counted.
    pub(super) unread: BTreeMap<String, u64>,
    // The lists of `host_traces` (pinned host memory, PyTorch 2.14 and
    // later): their entries were logged as the devices' were, and are left
    // out of the trace.
    pub(super) host_lists: Vec<u32>,
}

/// The keys of a snapshot's top-level dict this reader knows.
const TOP_KEYS: [&str; 6] = [
    "segments",
    "device_traces",
    "allocator_settings",
    "external_annotations",
    "host_segments",
    "host_traces",
];

/// The keys of a segment of `segments`, in every PyTorch 2.x.
const SEGMENT_KEYS: [&str; 13] = [
    "device",
    "address",
    "total_size",
    "allocated_size",
    "active_size",
    "requested_size",
    "stream",
    "segment_type",
    "segment_pool_id",
    "is_expandable",
    "frames",
    "forward_frames",
    "blocks",
];

/// The keys of a block of a segment.
const BLOCK_KEYS: [&str; 6] = [
    "address",
    "size",
    "requested_size",
    "state",
    "frames",
    "forward_frames",
];

/// The keys of an `external_annotations` item.
const ANNOTATION_KEYS: [&str; 4] = ["stage", "name", "device", "time_us"];

/// An address and a size from a pickle as an allocator could have recorded
/// them: neither negative, the size at most [`MAX_BYTES`], the end within
/// 64 bits.
fn plausible_range(addr: i128, size: i128) -> Option<(u64, u64)> {
    let addr = u64::try_from(addr).ok()?;
    let size = u64::try_from(size).ok().filter(|&s| s <= MAX_BYTES)?;
    addr.checked_add(size)?;
    Some((addr, size))
}

fn int(heap: &Heap, v: Option<Val>) -> Option<i128> {
    heap.int(v?)
}

/// A segment's `segment_pool_id` (PyTorch 2.1 and later): a pair of
/// counters. Anything else (absent, or not two counters) reads as the
/// default pools, as older snapshots' segments all were.
fn pool_id(heap: &Heap, v: Option<Val>) -> PoolId {
    let Some(Val::Obj(pair)) = v else {
        return PoolId::DEFAULT;
    };
    let ids: Vec<u64> = (heap.obj(pair).items.iter())
        .map_while(|&i| heap.int(i).and_then(|n| u64::try_from(n).ok()))
        .collect();
    match ids[..] {
        [a, b] if heap.obj(pair).items.len() == 2 => PoolId(a, b),
        _ => PoolId::DEFAULT,
    }
}

/// ` (the container at byte N)` for a container, else nothing.
fn at_byte(heap: &Heap, v: Val) -> String {
    match v {
        Val::Obj(o) => format!(" (the container at byte {})", heap.obj(o).offset()),
        _ => String::new(),
    }
}

impl Snapshot {
    pub(super) fn read(heap: &Heap, c: &Collector, root: Val) -> Result<Snapshot, ImportError> {
        let Val::Obj(root) = root else {
            return Err(ImportError::NotASnapshot(
                "the top-level value is not a dict".into(),
            ));
        };
        if heap.obj(root).kind != ObjKind::Dict {
            return Err(ImportError::NotASnapshot(
                "the top-level value is not a dict".into(),
            ));
        }
        let get = |key: &str| heap.dict_get_str(root, key);
        let traces = get("device_traces");
        let segments = get("segments");
        if traces.is_none() && segments.is_none() {
            return Err(ImportError::NotASnapshot(
                "the top-level dict has neither `device_traces` nor `segments`".into(),
            ));
        }
        let mut s = Snapshot {
            device_lists: Vec::new(),
            entries_per_device: Vec::new(),
            has_segments: segments.is_some(),
            end_segments: Vec::new(),
            end_blocks: Vec::new(),
            settings: BTreeMap::new(),
            annotations: None,
            warnings: Vec::new(),
            impossible_segments: 0,
            impossible_blocks: 0,
            unread: BTreeMap::new(),
            host_lists: Vec::new(),
        };
        s.read_extra_sections(heap, root);
        match traces {
            Some(Val::Obj(t)) if heap.obj(t).kind == ObjKind::List => {
                let lists = &heap.obj(t).items;
                // Tables are kept per device, and every analysis goes over the
                // devices: past the limit `segments` has, the rest is skipped.
                if lists.len() > MAX_DEVICES as usize {
                    s.warnings.push(format!(
                        "`device_traces` (the list at byte {}) holds {} lists, one per device: only devices 0 to {} are read, the rest skipped",
                        heap.obj(t).offset(),
                        lists.len(),
                        MAX_DEVICES - 1
                    ));
                }
                for v in lists.iter().take(MAX_DEVICES as usize) {
                    let Val::Obj(l) = *v else {
                        return Err(ImportError::NotASnapshot(format!(
                            "an item of `device_traces` (the list at byte {}) is not a list",
                            heap.obj(t).offset()
                        )));
                    };
                    let o = heap.obj(l);
                    if !o.items.is_empty() {
                        s.warnings.push(format!(
                            "device {}: {} trace entries were not recognized (no `action`) and were skipped",
                            s.device_lists.len(),
                            o.items.len()
                        ));
                    }
                    s.device_lists.push(l);
                    s.entries_per_device.push(o.consumed);
                }
            }
            Some(v) => {
                return Err(ImportError::NotASnapshot(format!(
                    "`device_traces` is not a list{}",
                    at_byte(heap, v)
                )));
            }
            None => s
                .warnings
                .push("no `device_traces`: the snapshot holds no events".into()),
        }
        match segments {
            Some(Val::Obj(l)) => {
                for &seg in &heap.obj(l).items {
                    s.read_segment(heap, c, seg)?;
                }
            }
            Some(v) => {
                return Err(ImportError::NotASnapshot(format!(
                    "`segments` is not a list{}",
                    at_byte(heap, v)
                )));
            }
            None => s.warnings.push(
                "no `segments`: the end state is unknown, so the initial state holds only what the events imply and cannot be checked"
                    .into(),
            ),
        }
        if let Some(Val::Obj(d)) = get("allocator_settings") {
            let items = &heap.obj(d).items;
            let setting = |v| {
                heap.to_value(v, MAX_SETTING_VALUES).map_err(|e| {
                    ImportError::NotASnapshot(format!(
                        "an allocator setting (in the dict at byte {}): {e}",
                        heap.obj(d).offset()
                    ))
                })
            };
            for kv in items.chunks_exact(2) {
                let key = setting(kv[0])?;
                let value = setting(kv[1])?;
                s.settings.insert(setting_text(&key), setting_text(&value));
            }
        }
        match get("external_annotations") {
            Some(Val::Obj(l)) => {
                let mut out = Vec::new();
                for &a in &heap.obj(l).items {
                    let Val::Obj(a) = a else { continue };
                    s.count_keys(heap, a, "external_annotations", &ANNOTATION_KEYS);
                    let stage = match heap.dict_get_str(a, "stage") {
                        Some(Val::Str(x)) => heap.str(x).into_owned(),
                        _ => continue,
                    };
                    let name = match heap.dict_get_str(a, "name") {
                        Some(Val::Str(x)) => heap.str(x).into_owned(),
                        _ => String::new(),
                    };
                    let Some(t) = int(heap, heap.dict_get_str(a, "time_us")) else {
                        continue;
                    };
                    let begin = match stage.as_str() {
                        "START" => true,
                        "END" => false,
                        _ => continue,
                    };
                    out.push((t as i64, begin, name));
                }
                // One annotation is recorded once per device: keep one.
                out.sort_by(|a, b| (a.0, !a.1, &a.2).cmp(&(b.0, !b.1, &b.2)));
                out.dedup();
                s.annotations = Some(out);
            }
            _ => s.warnings.push(
                "no `external_annotations` (PyTorch before 2.5?): the trace has no phases".into(),
            ),
        }
        Ok(s)
    }

    fn read_segment(&mut self, heap: &Heap, c: &Collector, seg: Val) -> Result<(), ImportError> {
        let Val::Obj(seg) = seg else {
            return Err(ImportError::NotASnapshot(
                "an item of `segments` is not a dict".into(),
            ));
        };
        let bad = |what: &str| {
            ImportError::NotASnapshot(format!(
                "the segment at byte {} {what}",
                heap.obj(seg).offset()
            ))
        };
        self.count_keys(heap, seg, "segments", &SEGMENT_KEYS);
        let g = |k: &str| heap.dict_get_str(seg, k);
        let device = int(heap, g("device")).unwrap_or(0);
        let device = u32::try_from(device)
            .ok()
            .filter(|&d| d < MAX_DEVICES)
            .ok_or_else(|| {
                bad(&format!(
                    "is on device {device}, not one of 0 to {}",
                    MAX_DEVICES - 1
                ))
            })?;
        let addr = int(heap, g("address")).ok_or_else(|| bad("has no `address`"))?;
        let size = int(heap, g("total_size")).ok_or_else(|| bad("has no `total_size`"))?;
        let Some((addr, size)) = plausible_range(addr, size) else {
            self.impossible_segments += 1;
            return Ok(());
        };
        let stream = int(heap, g("stream")).unwrap_or(0) as u64;
        let expandable = int(heap, g("is_expandable")).unwrap_or(0) != 0;
        let pool = pool_id(heap, g("segment_pool_id"));
        self.end_segments.push(EndSegment {
            device,
            addr,
            size,
            stream,
            expandable,
            pool,
        });
        while self.end_blocks.len() <= device as usize {
            self.end_blocks.push(FxMap::default());
        }
        let Some(Val::Obj(blocks)) = g("blocks") else {
            return Ok(());
        };
        let mut at = addr;
        for &b in &heap.obj(blocks).items {
            let Val::Obj(b) = b else { continue };
            self.count_keys(heap, b, "blocks", &BLOCK_KEYS);
            let g = |k: &str| heap.dict_get_str(b, k);
            let baddr = int(heap, g("address")).unwrap_or(at as i128);
            let bsize = int(heap, g("size")).unwrap_or(0);
            let requested = int(heap, g("requested_size")).unwrap_or(0);
            let (Some((baddr, bsize)), Some(requested)) = (
                plausible_range(baddr, bsize),
                u64::try_from(requested).ok().filter(|&r| r <= MAX_BYTES),
            ) else {
                self.impossible_blocks += 1;
                continue;
            };
            at = baddr + bsize;
            let status = match g("state") {
                Some(Val::Str(s)) => match heap.str_bytes(s) {
                    b"active_allocated" => BlockStatus::Allocated,
                    b"active_pending_free" => BlockStatus::PendingFree,
                    _ => continue,
                },
                _ => continue,
            };
            let stack = match g("frames") {
                Some(Val::Custom {
                    kind: convert::CUSTOM_STACK,
                    id,
                }) => c.stack_id(id),
                _ => 0,
            };
            self.end_blocks[device as usize].insert(
                baddr,
                EndBlock {
                    size: bsize,
                    requested,
                    status,
                    stack,
                },
            );
        }
        Ok(())
    }
}

impl Snapshot {
    /// Counts the top-level keys no PyTorch 2.x writes, and the sections
    /// that are not read: `host_segments` and `host_traces`, the pinned host
    /// memory that `_record_memory_history(record_pinned_host_memory=True)`
    /// adds (PyTorch 2.14 and later). Their trace lists are kept, to be left
    /// out of the trace.
    fn read_extra_sections(&mut self, heap: &Heap, root: ObjId) {
        for kv in heap.obj(root).items.chunks_exact(2) {
            let key = match kv[0] {
                Val::Str(k) => heap.str(k).into_owned(),
                _ => "(a key that is not a str)".to_string(),
            };
            let len = |v: Val| match v {
                Val::Obj(o) => heap.obj(o).items.len() as u64 + heap.obj(o).consumed,
                _ => 0,
            };
            match key.as_str() {
                "host_segments" => {
                    if len(kv[1]) > 0 {
                        self.not_read(key, len(kv[1]));
                    }
                }
                "host_traces" => {
                    let Val::Obj(l) = kv[1] else { continue };
                    // One list of entries, or one per device: the entries'
                    // lists either way.
                    let lists: Vec<u32> = match heap.obj(l).items.first() {
                        Some(&Val::Obj(first)) if heap.obj(first).kind == ObjKind::List => {
                            (heap.obj(l).items.iter())
                                .filter_map(|v| match *v {
                                    Val::Obj(o) => Some(o),
                                    _ => None,
                                })
                                .collect()
                        }
                        _ => vec![l],
                    };
                    let entries: u64 = lists.iter().map(|&o| len(Val::Obj(o))).sum();
                    if entries > 0 {
                        self.not_read(key, entries);
                    }
                    self.host_lists.extend(lists);
                }
                k if TOP_KEYS.contains(&k) => {}
                _ => self.not_read(key, 1),
            }
        }
    }

    /// Counts the keys of `dict` (an item of `section`) that are not in
    /// `known`, and a non-empty `forward_frames`, which is not read.
    fn count_keys(&mut self, heap: &Heap, dict: ObjId, section: &str, known: &[&str]) {
        for kv in heap.obj(dict).items.chunks_exact(2) {
            let Val::Str(k) = kv[0] else {
                self.not_read(format!("{section}: a key that is not a str"), 1);
                continue;
            };
            let key = heap.str_bytes(k);
            let forward = key == b"forward_frames";
            if forward && !matches!(kv[1], Val::Obj(l) if heap.obj(l).items.is_empty()) {
                self.not_read(format!("{section}.forward_frames"), 1);
            } else if !forward && !known.iter().any(|n| n.as_bytes() == key) {
                self.not_read(format!("{section}.{}", String::from_utf8_lossy(key)), 1);
            }
        }
    }

    /// Counts `n` of something not read, under its name (see [`not_read`]).
    fn not_read(&mut self, name: String, n: u64) {
        not_read(&mut self.unread, name, n);
    }
}

/// The most names of things not read that one snapshot's report keeps: a
/// hostile file may hold any number of distinct keys.
pub(super) const MAX_UNREAD_NAMES: usize = 64;

/// Counts `n` of something not read under `name` (its control characters
/// escaped, cut at 80 characters), or, past [`MAX_UNREAD_NAMES`] names,
/// under "other names".
pub(super) fn not_read(unread: &mut BTreeMap<String, u64>, name: String, n: u64) {
    let name = if name.chars().any(char::is_control) || name.chars().count() > 80 {
        let escaped: String = name.escape_debug().collect();
        escaped.chars().take(80).collect()
    } else {
        name
    };
    let name = if unread.len() >= MAX_UNREAD_NAMES && !unread.contains_key(&name) {
        "(other names)".to_string()
    } else {
        name
    };
    *unread.entry(name).or_insert(0) += n;
}

// Settings as PYTORCH_CUDA_ALLOC_CONF writes them: True/False, `[1:0,2:0]` for dicts.
fn setting_text(v: &pickle::Value) -> String {
    use pickle::Value as V;
    match v {
        V::None => "None".into(),
        V::Bool(true) => "True".into(),
        V::Bool(false) => "False".into(),
        V::Int(i) => i.to_string(),
        V::Float(f) => format!("{f:?}"),
        V::Str(s) => s.clone(),
        V::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        V::List(x) | V::Tuple(x) | V::Set(x) => {
            let parts: Vec<String> = x.iter().map(setting_text).collect();
            format!("[{}]", parts.join(","))
        }
        V::Dict(kv) => {
            let parts: Vec<String> = kv
                .iter()
                .map(|(k, v)| format!("{}:{}", setting_text(k), setting_text(v)))
                .collect();
            format!("[{}]", parts.join(","))
        }
        V::Custom { .. } | V::Consumed => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_not_read_are_bounded_and_escaped() {
        let mut unread = BTreeMap::new();
        not_read(&mut unread, "trace.tier".into(), 2);
        not_read(&mut unread, "trace.tier".into(), 1);
        not_read(&mut unread, "blocks.\u{1b}[31mred\n".into(), 1);
        assert_eq!(unread["trace.tier"], 3);
        assert_eq!(unread["blocks.\\u{1b}[31mred\\n"], 1, "{unread:?}");
        for i in 0..1000 {
            not_read(&mut unread, format!("segments.k{i}"), 1);
        }
        assert_eq!(unread.len(), MAX_UNREAD_NAMES + 1);
        assert_eq!(
            unread["(other names)"],
            1000 - (MAX_UNREAD_NAMES as u64 - 2)
        );
        // A name already kept is still counted under itself.
        not_read(&mut unread, "trace.tier".into(), 1);
        assert_eq!(unread["trace.tier"], 4);
        let long = "x".repeat(500);
        let mut one = BTreeMap::new();
        not_read(&mut one, long, 1);
        assert_eq!(one.keys().next().unwrap().len(), 80);
    }
}
