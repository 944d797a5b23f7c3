//! The layout of a snapshot beside its trace entries: the device lists, the
//! segments and blocks at the end (`segments`), the allocator's settings and
//! the annotations, read from the pickle and checked for plausible values.

use super::convert::{self, Collector};
use super::pickle::{self, Heap, ObjId, ObjKind, StrId, Val};
use super::rebuild::{EndBlock, EndSegment};
use super::{ImportError, MAX_DEVICES, MAX_SETTING_VALUES};
use crate::bounds::MAX_BYTES;
use rustc_hash::FxHashMap as FxMap;
use std::collections::BTreeMap;
use vramtrace_format::{BlockStatus, PoolId};

// The parts of the snapshot other than the trace entries.
#[derive(Default)]
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

/// The keys of one kind of dict, each known by its string id once seen: a
/// snapshot's thousands of blocks have the same few keys, each a string
/// interned once, so comparing ids replaces hashing and comparing text
/// (11 M of `Snapshot::read`'s 14 M instructions on a snapshot of 11,500
/// blocks, on the critical path after the parse).
struct Keys<const N: usize> {
    names: [&'static str; N],
    /// The string ids seen, each with the position of its name in `names`
    /// (none: not one of them); at most [`Keys::REMEMBERED`].
    seen: Vec<(StrId, Option<usize>)>,
}

impl<const N: usize> Keys<N> {
    /// The ids remembered: a hostile file may hold any number of distinct
    /// keys, which would make each lookup longer.
    const REMEMBERED: usize = 32;

    fn new(names: [&'static str; N]) -> Self {
        Keys {
            names,
            seen: Vec::new(),
        }
    }

    /// The position in `names` of the string `id`, if it is one of them.
    fn find(&mut self, heap: &Heap, id: StrId) -> Option<usize> {
        if let Some(&(_, i)) = self.seen.iter().find(|(s, _)| *s == id) {
            return i;
        }
        let text = heap.str_bytes(id);
        let i = self.names.iter().position(|n| n.as_bytes() == text);
        if self.seen.len() < Self::REMEMBERED {
            self.seen.push((id, i));
        }
        i
    }
}

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
            has_segments: segments.is_some(),
            ..Snapshot::default()
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
                let mut block_keys = Keys::new(BLOCK_KEYS);
                for &seg in &heap.obj(l).items {
                    s.read_segment(heap, c, seg, &mut block_keys)?;
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

    fn read_segment(
        &mut self,
        heap: &Heap,
        c: &Collector,
        seg: Val,
        block_keys: &mut Keys<{ BLOCK_KEYS.len() }>,
    ) -> Result<(), ImportError> {
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
            // One pass over the block's keys, as `count_keys` and a lookup
            // of each key would find them.
            let [address, size, requested, state, frames, _] =
                self.read_keys(heap, b, "blocks", block_keys);
            let baddr = int(heap, address).unwrap_or(at as i128);
            let bsize = int(heap, size).unwrap_or(0);
            let requested = int(heap, requested).unwrap_or(0);
            let (Some((baddr, bsize)), Some(requested)) = (
                plausible_range(baddr, bsize),
                u64::try_from(requested).ok().filter(|&r| r <= MAX_BYTES),
            ) else {
                self.impossible_blocks += 1;
                continue;
            };
            at = baddr + bsize;
            let status = match state {
                Some(Val::Str(s)) => match heap.str_bytes(s) {
                    b"active_allocated" => BlockStatus::Allocated,
                    b"active_pending_free" => BlockStatus::PendingFree,
                    _ => continue,
                },
                _ => continue,
            };
            let stack = match frames {
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

    /// The values of `keys` in `dict` (an item of `section`), each the first
    /// of its key, as [`Heap::dict_get_str`] finds them, with the keys not
    /// among them counted as [`count_keys`](Self::count_keys) does: in one
    /// pass over the dict, with its keys known by their string ids. The
    /// names of `keys` hold `forward_frames`, as every section's do.
    fn read_keys<const N: usize>(
        &mut self,
        heap: &Heap,
        dict: ObjId,
        section: &str,
        keys: &mut Keys<N>,
    ) -> [Option<Val>; N] {
        let mut values = [None; N];
        for kv in heap.obj(dict).items.chunks_exact(2) {
            let Val::Str(k) = kv[0] else {
                self.not_read(format!("{section}: a key that is not a str"), 1);
                continue;
            };
            let known = keys.find(heap, k);
            if known.is_some_and(|i| keys.names[i] == "forward_frames") {
                if !matches!(kv[1], Val::Obj(l) if heap.obj(l).items.is_empty()) {
                    self.not_read(format!("{section}.forward_frames"), 1);
                }
            } else if known.is_none() {
                let key = heap.str_bytes(k);
                self.not_read(format!("{section}.{}", String::from_utf8_lossy(key)), 1);
            }
            if let Some(i) = known {
                values[i].get_or_insert(kv[1]);
            }
        }
        values
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

    fn empty() -> Snapshot {
        Snapshot {
            has_segments: true,
            ..Snapshot::default()
        }
    }

    /// Blocks' keys read in one pass, their ids remembered from block to
    /// block, are what looking each up and counting the others find: the
    /// first of a repeated key, a key that is not a str, a non-empty
    /// `forward_frames`, keys of no block.
    #[test]
    fn keys_read_in_one_pass_are_those_looked_up_and_counted() {
        use pickle::op;
        enum K<'a> {
            Str(&'a str),
            Int(u8),
        }
        enum V {
            Int(u8),
            List(&'static [u8]),
        }
        let dicts: &[&[(K, V)]] = &[
            &[
                (K::Str("address"), V::Int(1)),
                (K::Str("size"), V::Int(2)),
                (K::Str("requested_size"), V::Int(3)),
                (K::Str("state"), V::Int(4)),
                (K::Str("frames"), V::List(&[])),
                (K::Str("forward_frames"), V::List(&[])),
            ],
            &[
                (K::Str("size"), V::Int(5)),
                (K::Str("tier"), V::Int(6)),
                (K::Str("address"), V::Int(7)),
                (K::Str("forward_frames"), V::List(&[1])),
                (K::Int(9), V::Int(1)),
                (K::Str("address"), V::Int(8)),
            ],
            &[(K::Str("stage"), V::Int(1)), (K::Str("tier"), V::Int(2))],
            &[],
        ];
        let mut p = vec![0x80, 4, op::EMPTY_LIST, op::MARK];
        for dict in dicts {
            p.extend([op::EMPTY_DICT, op::MARK]);
            for (k, v) in dict.iter() {
                match k {
                    K::Str(k) => {
                        p.extend([op::SHORT_BINUNICODE, k.len() as u8]);
                        p.extend(k.as_bytes());
                    }
                    K::Int(n) => p.extend([op::BININT1, *n]),
                }
                match v {
                    V::Int(n) => p.extend([op::BININT1, *n]),
                    V::List(items) => {
                        p.extend([op::EMPTY_LIST, op::MARK]);
                        for &n in items.iter() {
                            p.extend([op::BININT1, n]);
                        }
                        p.push(op::APPENDS);
                    }
                }
            }
            p.push(op::SETITEMS);
        }
        p.extend([op::APPENDS, op::STOP]);
        let mut parser = pickle::Parser::over_bytes(&p, &|_| {});
        let Val::Obj(list) = parser.run(&mut pickle::KeepAll).unwrap() else {
            panic!("not a list")
        };
        let heap = parser.into_heap();
        let mut keys = Keys::new(BLOCK_KEYS);
        let (mut one_pass, mut looked_up) = (empty(), empty());
        for &d in &heap.obj(list).items {
            let Val::Obj(d) = d else { panic!() };
            let values = one_pass.read_keys(&heap, d, "blocks", &mut keys);
            looked_up.count_keys(&heap, d, "blocks", &BLOCK_KEYS);
            let expected = BLOCK_KEYS.map(|k| heap.dict_get_str(d, k));
            assert_eq!(format!("{values:?}"), format!("{expected:?}"));
        }
        assert_eq!(one_pass.unread, looked_up.unread);
        assert_eq!(
            one_pass.unread.keys().collect::<Vec<_>>(),
            [
                "blocks.forward_frames",
                "blocks.stage",
                "blocks.tier",
                "blocks: a key that is not a str"
            ]
        );
        assert_eq!(one_pass.unread["blocks.tier"], 2);
        // The first block's keys were remembered, and the others'.
        assert_eq!(keys.seen.len(), 8);
    }
}
