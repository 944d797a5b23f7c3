//! Collecting a snapshot while its pickle streams by: trace entries become records of a
//! compact event log, frame dicts become local frames (by memo identity) and frames
//! lists become local stacks. What the log cannot hold yet (the initial state) needs
//! every event first, so the log is replayed afterwards (see `rebuild`).

use super::pickle::{Attach, FxBuild, Heap, Hook, ObjId, ObjKind, StrId, Val};
use std::collections::HashMap;

/// [`Val::Custom`] kind of a frame dict turned into a local frame.
pub(crate) const CUSTOM_FRAME: u8 = 0;
/// [`Val::Custom`] kind of a frames list turned into a local stack.
pub(crate) const CUSTOM_STACK: u8 = 1;

/// A frame as the snapshot gives it, with strings still in the pickle's heap.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LocalFrame {
    pub name: StrId,
    pub file: StrId,
    pub line: u32,
}

/// Stacks interned by their local frame ids; stack 0 is the empty stack.
#[derive(Default)]
pub(crate) struct LocalStacks {
    map: HashMap<Box<[u32]>, u32, FxBuild>,
    pub starts: Vec<u32>,
    pub flat: Vec<u32>,
}

impl LocalStacks {
    fn new() -> Self {
        let mut s = LocalStacks {
            starts: vec![0, 0],
            ..Default::default()
        };
        s.map.insert(Box::new([]), 0);
        s
    }

    fn intern(&mut self, frames: &[u32]) -> u32 {
        if let Some(&id) = self.map.get(frames) {
            return id;
        }
        let id = (self.starts.len() - 1) as u32;
        self.flat.extend_from_slice(frames);
        self.starts.push(self.flat.len() as u32);
        self.map.insert(frames.into(), id);
        id
    }

    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    pub fn get(&self, id: u32) -> &[u32] {
        &self.flat[self.starts[id as usize] as usize..self.starts[id as usize + 1] as usize]
    }

    /// Drops the lookup map once parsing is over: only the tables are needed then.
    fn shrink(&mut self) {
        self.map = HashMap::default();
    }
}

/// What a trace entry's `action` says, as stored in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Action {
    Alloc = 0,
    FreeRequested = 1,
    FreeCompleted = 2,
    SegmentAlloc = 3,
    SegmentFree = 4,
    SegmentMap = 5,
    SegmentUnmap = 6,
    Oom = 7,
    Snapshot = 8,
    UserDefined = 9,
}

impl Action {
    const ALL: [Action; 10] = [
        Action::Alloc,
        Action::FreeRequested,
        Action::FreeCompleted,
        Action::SegmentAlloc,
        Action::SegmentFree,
        Action::SegmentMap,
        Action::SegmentUnmap,
        Action::Oom,
        Action::Snapshot,
        Action::UserDefined,
    ];

    pub fn is_known(name: &str) -> bool {
        Action::ALL.iter().any(|a| a.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Oom => "oom",
            Action::Snapshot => "snapshot",
            Action::UserDefined => "user_defined",
        }
    }
}

/// One logged trace entry. For `Oom`, `addr` is the device's free memory; for
/// `UserDefined`, `size` is the heap string id of its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogEntry {
    pub action: Action,
    /// The list (in the pickle) the entry was appended to: mapped to a device later.
    pub list: ObjId,
    pub time_us: Option<i64>,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub stack: u32,
}

/// The event log: varint-coded entries (about 15 bytes each instead of 56 for the
/// struct), since every event must be kept until the initial state is known.
#[derive(Default)]
pub(crate) struct EventLog {
    bytes: Vec<u8>,
    len: u64,
    prev_time: i64,
    prev_addr: u64,
    /// Stretches of entries appended to one list (one device), so that devices can be
    /// read side by side and merged by time.
    pub runs: Vec<Run>,
}

/// A stretch of the log from one list, with the decoder state at its start.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Run {
    pub list: ObjId,
    pub first_index: u64,
    pub len: u64,
    pos: usize,
    prev_time: i64,
    prev_addr: u64,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

impl EventLog {
    fn push(&mut self, e: &LogEntry) {
        if self.runs.last().is_none_or(|r| r.list != e.list) {
            self.runs.push(Run {
                list: e.list,
                first_index: self.len,
                len: 0,
                pos: self.bytes.len(),
                prev_time: self.prev_time,
                prev_addr: self.prev_addr,
            });
        }
        self.runs.last_mut().unwrap().len += 1;
        let b = &mut self.bytes;
        b.push(e.action as u8 | if e.time_us.is_some() { 0x80 } else { 0 });
        put_varint(b, e.list as u64);
        if let Some(t) = e.time_us {
            put_varint(b, zigzag(t.wrapping_sub(self.prev_time)));
            self.prev_time = t;
        }
        put_varint(b, zigzag(e.addr.wrapping_sub(self.prev_addr) as i64));
        self.prev_addr = e.addr;
        put_varint(b, e.size);
        put_varint(b, e.stream);
        put_varint(b, e.stack as u64);
        self.len += 1;
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    #[cfg(test)]
    pub fn iter(&self) -> LogIter<'_> {
        LogIter {
            data: &self.bytes,
            pos: 0,
            prev_time: 0,
            prev_addr: 0,
            left: u64::MAX,
        }
    }

    /// The entries of one run.
    pub fn run(&self, run: &Run) -> LogIter<'_> {
        LogIter {
            data: &self.bytes,
            pos: run.pos,
            prev_time: run.prev_time,
            prev_addr: run.prev_addr,
            left: run.len,
        }
    }
}

pub(crate) struct LogIter<'a> {
    data: &'a [u8],
    pos: usize,
    prev_time: i64,
    prev_addr: u64,
    left: u64,
}

impl LogIter<'_> {
    fn varint(&mut self) -> u64 {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = self.data[self.pos];
            self.pos += 1;
            v |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                return v;
            }
            shift += 7;
        }
    }
}

impl Iterator for LogIter<'_> {
    type Item = LogEntry;

    fn next(&mut self) -> Option<LogEntry> {
        if self.pos >= self.data.len() || self.left == 0 {
            return None;
        }
        self.left -= 1;
        let tag = self.data[self.pos];
        self.pos += 1;
        let action = Action::ALL[(tag & 0x7f) as usize];
        let list = self.varint() as ObjId;
        let time_us = if tag & 0x80 != 0 {
            self.prev_time = self.prev_time.wrapping_add(unzigzag(self.varint()));
            Some(self.prev_time)
        } else {
            None
        };
        self.prev_addr = self.prev_addr.wrapping_add(unzigzag(self.varint()) as u64);
        Some(LogEntry {
            action,
            list,
            time_us,
            addr: self.prev_addr,
            size: self.varint(),
            stream: self.varint(),
            stack: self.varint() as u32,
        })
    }
}

// The strings the collector compares keys and actions against, interned up front so
// each comparison is an integer compare.
struct Keys {
    action: StrId,
    addr: StrId,
    size: StrId,
    stream: StrId,
    time_us: StrId,
    frames: StrId,
    device_free: StrId,
    user_metadata: StrId,
    name: StrId,
    filename: StrId,
    line: StrId,
    actions: [StrId; 10],
}

/// The [`Hook`] that turns a snapshot's pickle into the log and symbol tables.
pub(crate) struct Collector {
    k: Keys,
    pub frames: Vec<LocalFrame>,
    pub stacks: LocalStacks,
    pub log: EventLog,
    /// Counts of every `action` seen, known or not, by heap string id.
    pub action_counts: HashMap<StrId, u64, FxBuild>,
    /// Entries without `time_us` (snapshots before PyTorch 2.2).
    pub entries_without_time: u64,
    /// Entries without `frames`.
    pub entries_without_frames: u64,
    scratch: Vec<u32>,
}

impl Collector {
    pub fn new(heap: &mut Heap) -> Self {
        let mut i = |s: &str| heap.intern(s.as_bytes());
        let k = Keys {
            action: i("action"),
            addr: i("addr"),
            size: i("size"),
            stream: i("stream"),
            time_us: i("time_us"),
            frames: i("frames"),
            device_free: i("device_free"),
            user_metadata: i("user_metadata"),
            name: i("name"),
            filename: i("filename"),
            line: i("line"),
            actions: Action::ALL.map(|a| i(a.name())),
        };
        Collector {
            k,
            frames: Vec::new(),
            stacks: LocalStacks::new(),
            log: EventLog::default(),
            action_counts: HashMap::default(),
            entries_without_time: 0,
            entries_without_frames: 0,
            scratch: Vec::new(),
        }
    }

    /// Frees what only parsing needed.
    pub fn finish_parsing(&mut self) {
        self.stacks.shrink();
        self.scratch = Vec::new();
    }

    // A trace entry: record it and consume it. None: not a trace entry.
    fn entry(&mut self, heap: &Heap, list: ObjId, item: ObjId) -> Option<Attach> {
        let k = &self.k;
        let mut action = None;
        let mut e = LogEntry {
            action: Action::Snapshot,
            list,
            time_us: None,
            addr: 0,
            size: 0,
            stream: 0,
            stack: 0,
        };
        let mut has_frames = false;
        let mut text = 0;
        for kv in heap.obj(item).items.chunks_exact(2) {
            let Val::Str(key) = kv[0] else { continue };
            let int = match kv[1] {
                Val::Int(i) => Some(i),
                _ => None,
            };
            if key == k.action {
                action = match kv[1] {
                    Val::Str(s) => Some(s),
                    _ => return None,
                };
            } else if key == k.addr || key == k.device_free {
                e.addr = int.unwrap_or(0) as u64;
            } else if key == k.size {
                e.size = int.unwrap_or(0) as u64;
            } else if key == k.stream {
                e.stream = int.unwrap_or(0) as u64;
            } else if key == k.time_us {
                e.time_us = int.map(|t| t as i64);
            } else if key == k.frames {
                has_frames = true;
                if let Val::Custom {
                    kind: CUSTOM_STACK,
                    id,
                } = kv[1]
                {
                    e.stack = id;
                }
            } else if key == k.user_metadata || key == k.name {
                if let Val::Str(s) = kv[1] {
                    if !heap.str_bytes(s).is_empty() {
                        text = s;
                    }
                }
            }
        }
        let action = action?;
        *self.action_counts.entry(action).or_insert(0) += 1;
        let Some(pos) = self.k.actions.iter().position(|&a| a == action) else {
            // Unknown actions are counted (and reported) but not converted.
            return Some(Attach::Consume);
        };
        e.action = Action::ALL[pos];
        if e.action == Action::UserDefined {
            e.size = text as u64;
        }
        if e.time_us.is_none() {
            self.entries_without_time += 1;
        }
        if !has_frames {
            self.entries_without_frames += 1;
        }
        self.log.push(&e);
        Some(Attach::Consume)
    }

    // A frame dict ({name, filename, line}): a local frame, by memo identity.
    fn frame(&mut self, heap: &Heap, item: ObjId) -> Option<Attach> {
        let o = heap.obj(item);
        if o.items.len() > 8 {
            return None;
        }
        let (mut name, mut file, mut line) = (None, None, 0u32);
        for kv in o.items.chunks_exact(2) {
            match (kv[0], kv[1]) {
                (Val::Str(k), Val::Str(v)) if k == self.k.name => name = Some(v),
                (Val::Str(k), Val::Str(v)) if k == self.k.filename => file = Some(v),
                (Val::Str(k), Val::Int(v)) if k == self.k.line => {
                    line = v.clamp(0, u32::MAX as i128) as u32
                }
                _ => {}
            }
        }
        let (name, file) = (name?, file?);
        self.frames.push(LocalFrame { name, file, line });
        Some(Attach::Replace(Val::Custom {
            kind: CUSTOM_FRAME,
            id: (self.frames.len() - 1) as u32,
        }))
    }
}

impl Hook for Collector {
    #[inline]
    fn on_append(&mut self, heap: &mut Heap, list: ObjId, item: ObjId) -> Result<Attach, String> {
        if heap.obj(item).kind != ObjKind::Dict {
            return Ok(Attach::Keep);
        }
        if let Some(a) = self.entry(heap, list, item) {
            return Ok(a);
        }
        Ok(self.frame(heap, item).unwrap_or(Attach::Keep))
    }

    #[inline]
    fn on_set(
        &mut self,
        heap: &mut Heap,
        _dict: ObjId,
        key: Val,
        value: ObjId,
    ) -> Result<Attach, String> {
        if key != Val::Str(self.k.frames) {
            return Ok(Attach::Keep);
        }
        let o = heap.obj(value);
        if o.kind != ObjKind::List {
            return Ok(Attach::Keep);
        }
        self.scratch.clear();
        for v in &o.items {
            match *v {
                Val::Custom {
                    kind: CUSTOM_FRAME,
                    id,
                } => self.scratch.push(id),
                _ => return Ok(Attach::Keep),
            }
        }
        let id = self.stacks.intern(&self.scratch);
        Ok(Attach::Replace(Val::Custom {
            kind: CUSTOM_STACK,
            id,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_round_trips() {
        let entries = [
            LogEntry {
                action: Action::Alloc,
                list: 3,
                time_us: Some(1_795_295_545_355_498),
                addr: 0x7f00_0000_0000,
                size: 512,
                stream: 0,
                stack: 7,
            },
            LogEntry {
                action: Action::Oom,
                list: 3,
                time_us: None,
                addr: u64::MAX,
                size: 1 << 40,
                stream: u64::MAX - 1,
                stack: 0,
            },
            LogEntry {
                action: Action::SegmentFree,
                list: 9,
                time_us: Some(1),
                addr: 0,
                size: 0,
                stream: 5,
                stack: u32::MAX,
            },
        ];
        let mut log = EventLog::default();
        for e in &entries {
            log.push(e);
        }
        assert_eq!(log.iter().collect::<Vec<_>>(), entries);
        assert_eq!(log.len(), 3);
        assert_eq!(log.runs.len(), 2);
        assert_eq!(log.run(&log.runs[1]).collect::<Vec<_>>(), &entries[2..]);
        assert_eq!(log.run(&log.runs[0]).collect::<Vec<_>>(), &entries[..2]);
    }

    #[test]
    fn stacks_intern_by_content() {
        let mut s = LocalStacks::new();
        assert_eq!(s.intern(&[]), 0);
        let a = s.intern(&[1, 2, 3]);
        assert_eq!(s.intern(&[1, 2, 3]), a);
        assert_ne!(s.intern(&[1, 2]), a);
        assert_eq!(s.get(a), &[1, 2, 3]);
        assert_eq!(s.len(), 3);
    }
}
