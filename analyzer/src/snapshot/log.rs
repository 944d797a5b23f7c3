//! The event log of a snapshot's trace entries: each entry as the pickle gives
//! it, varint-coded, kept until the initial state is known. The collector
//! (`convert`) appends to it while the pickle streams by; the replay that
//! rebuilds the initial state (`rebuild`) and the merge that makes events
//! (`mod.rs`) read it.

use super::pickle::ObjId;
use vramtrace_format::varint::{self, Cursor};

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
    /// A newer PyTorch's note on a live block (`_annotate_memory`): `addr` is
    /// the block's, its text says what the block holds.
    Annotate = 10,
}

impl Action {
    /// Whether an entry of this action with these fields holds values no
    /// allocator records (the judgement of [`crate::replay::plausible`]): a
    /// block or segment past 2^50 bytes or ending past 2^64, an OOM's device
    /// figure (`device_free`, read into `addr`) past 2^50 bytes. The size an
    /// OOM asked for may be anything.
    pub fn impossible(self, addr: u64, size: u64) -> bool {
        use crate::bounds::MAX_BYTES;
        match self {
            Action::Alloc
            | Action::FreeRequested
            | Action::FreeCompleted
            | Action::SegmentAlloc
            | Action::SegmentFree
            | Action::SegmentMap
            | Action::SegmentUnmap => size > MAX_BYTES || addr.checked_add(size).is_none(),
            Action::Oom => addr > MAX_BYTES,
            Action::Snapshot | Action::UserDefined | Action::Annotate => false,
        }
    }

    pub const ALL: [Action; 11] = [
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
        Action::Annotate,
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
            Action::Annotate => "annotate",
        }
    }
}

/// One logged trace entry. For `Oom`, `addr` is the device's free memory; for
/// `UserDefined` and `Annotate`, `size` is the heap string id of its text.
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

impl EventLog {
    pub fn push(&mut self, e: &LogEntry) {
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
        varint::put(b, e.list as u64);
        if let Some(t) = e.time_us {
            varint::put(b, varint::zigzag(t.wrapping_sub(self.prev_time)));
            self.prev_time = t;
        }
        varint::put(
            b,
            varint::zigzag(e.addr.wrapping_sub(self.prev_addr) as i64),
        );
        self.prev_addr = e.addr;
        varint::put(b, e.size);
        varint::put(b, e.stream);
        varint::put(b, e.stack as u64);
        self.len += 1;
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    #[cfg(test)]
    pub fn iter(&self) -> LogIter<'_> {
        LogIter {
            cur: Cursor::new(&self.bytes),
            prev_time: 0,
            prev_addr: 0,
            left: u64::MAX,
        }
    }

    /// The entries of one run.
    pub fn run(&self, run: &Run) -> LogIter<'_> {
        LogIter {
            cur: Cursor::new(&self.bytes[run.pos..]),
            prev_time: run.prev_time,
            prev_addr: run.prev_addr,
            left: run.len,
        }
    }
}

pub(crate) struct LogIter<'a> {
    cur: Cursor<'a>,
    prev_time: i64,
    prev_addr: u64,
    left: u64,
}

impl LogIter<'_> {
    fn varint(&mut self) -> u64 {
        self.cur
            .varint()
            .expect("EventLog::push wrote whole entries")
    }
}

impl Iterator for LogIter<'_> {
    type Item = LogEntry;

    fn next(&mut self) -> Option<LogEntry> {
        if self.cur.is_empty() || self.left == 0 {
            return None;
        }
        self.left -= 1;
        let tag = self.cur.byte().expect("not empty");
        let action = Action::ALL[(tag & 0x7f) as usize];
        let list = self.varint() as ObjId;
        let time_us = if tag & 0x80 != 0 {
            self.prev_time = self.prev_time.wrapping_add(varint::unzigzag(self.varint()));
            Some(self.prev_time)
        } else {
            None
        };
        self.prev_addr = self
            .prev_addr
            .wrapping_add(varint::unzigzag(self.varint()) as u64);
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
