//! The event log of a snapshot's trace entries: each entry as the pickle gives
//! it, packed, kept until the initial state is known. The collector
//! (`convert`) appends to it while the pickle streams by; the replay that
//! rebuilds the initial state (`rebuild`) and the merge that makes events
//! (`mod.rs`) read it.

use super::pickle::ObjId;
use vramtrace_format::varint;

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

/// The event log: entries coded in about 15 bytes each instead of 56 for the
/// struct, since every event must be kept until the initial state is known.
///
/// An entry is a 3-byte header (the action, whether it has a time, and a 3-bit
/// length code for each of five fields) and the fields' low bytes, little-endian:
/// the time and address as zigzagged deltas from the entry before, the size, the
/// stream and the stack. The list is the run's. Byte lengths known from the header
/// make a field one unaligned load and a mask to read, and never longer than its
/// LEB128 varint (a zero takes no byte at all): the varints this replaced cost
/// about 470 instructions an entry to write and read back, a tenth of a snapshot's
/// `summary`.
#[derive(Default)]
pub(crate) struct EventLog {
    /// The entries up to `end`, then at least `SLACK` bytes to write the next
    /// entry's fields whole into, and to read the last entry's fields whole from.
    bytes: Vec<u8>,
    end: usize,
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

/// The bytes a field of each length code takes: 7-byte values take 8.
const CODE_BYTES: [usize; 8] = [0, 1, 2, 3, 4, 5, 6, 8];
/// The bits a field of each length code keeps.
const CODE_MASK: [u64; 8] = [
    0,
    (1 << 8) - 1,
    (1 << 16) - 1,
    (1 << 24) - 1,
    (1 << 32) - 1,
    (1 << 40) - 1,
    (1 << 48) - 1,
    u64::MAX,
];
const HEADER: usize = 3;
const HAS_TIME: u32 = 1 << 4;
const FIELDS_SHIFT: u32 = 5;
/// The most bytes an entry takes.
const MAX_ENTRY: usize = HEADER + 5 * 8;
/// The bytes kept past the entries: an entry, and the 8-byte reach of its last field.
const SLACK: usize = MAX_ENTRY + 8;
/// The bytes by which the log grows at a time, so that the slack is made rarely.
const GROW: usize = 4096;

/// The length code of `v`: the fewest bytes that hold it.
#[inline(always)]
fn code(v: u64) -> u32 {
    CODE_OF_ZEROS[v.leading_zeros() as usize] as u32
}

/// The length code of a value by its leading zero bits: a table load, where
/// the arithmetic (`((71 - zeros) / 8).min(7)`) took 6 more instructions an
/// entry on the logging thread (of about 370).
const CODE_OF_ZEROS: [u8; 65] = {
    let mut t = [0; 65];
    let mut zeros = 0;
    while zeros <= 64 {
        let bytes = (71 - zeros) / 8;
        t[zeros] = if bytes > 7 { 7 } else { bytes as u8 };
        zeros += 1;
    }
    t
};

impl EventLog {
    // Inlined into the logging thread's loop, its one caller there.
    #[inline]
    pub fn push(&mut self, e: &LogEntry) {
        match self.runs.last_mut() {
            Some(r) if r.list == e.list => r.len += 1,
            _ => self.runs.push(Run {
                list: e.list,
                first_index: self.len,
                len: 1,
                pos: self.end,
                prev_time: self.prev_time,
                prev_addr: self.prev_addr,
            }),
        }
        let time = match e.time_us {
            Some(t) => {
                let d = varint::zigzag(t.wrapping_sub(self.prev_time));
                self.prev_time = t;
                d
            }
            None => 0,
        };
        let addr = varint::zigzag(e.addr.wrapping_sub(self.prev_addr) as i64);
        self.prev_addr = e.addr;
        if self.bytes.len() < self.end + SLACK {
            self.bytes.resize(self.end + SLACK + GROW, 0);
        }
        // Each field is written whole into the slack, then overwritten past its
        // length by the next: no loop, no branch on its length, no copy.
        let out: &mut [u8; SLACK] = (&mut self.bytes[self.end..self.end + SLACK])
            .try_into()
            .expect("the log's slack");
        let mut at = HEADER;
        let mut header = e.action as u32 | if e.time_us.is_some() { HAS_TIME } else { 0 };
        for (i, v) in [time, addr, e.size, e.stream, e.stack as u64]
            .into_iter()
            .enumerate()
        {
            let c = code(v);
            header |= c << (FIELDS_SHIFT + 3 * i as u32);
            out[at..at + 8].copy_from_slice(&v.to_le_bytes());
            at += CODE_BYTES[c as usize];
        }
        out[..HEADER].copy_from_slice(&header.to_le_bytes()[..HEADER]);
        self.end += at;
        self.len += 1;
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = LogEntry> + '_ {
        self.runs.iter().flat_map(|r| self.run(r))
    }

    /// The entries of one run.
    pub fn run(&self, run: &Run) -> LogIter<'_> {
        LogIter {
            data: &self.bytes,
            pos: run.pos,
            list: run.list,
            prev_time: run.prev_time,
            prev_addr: run.prev_addr,
            left: run.len,
        }
    }
}

pub(crate) struct LogIter<'a> {
    data: &'a [u8],
    pos: usize,
    list: ObjId,
    prev_time: i64,
    prev_addr: u64,
    left: u64,
}

/// The field of length code `c` at `at` of an entry's bytes; moves `at` past it.
#[inline(always)]
fn field(entry: &[u8; SLACK], at: &mut usize, c: u32) -> u64 {
    let c = (c & 7) as usize;
    // An entry's last field starts at its byte `MAX_ENTRY - 8` at the latest:
    // the `min` changes nothing but tells the compiler that the 8 bytes read
    // are within `entry`, so that no read checks bounds.
    let start = (*at).min(SLACK - 8);
    *at += CODE_BYTES[c];
    let word = u64::from_le_bytes(entry[start..start + 8].try_into().expect("8 bytes"));
    word & CODE_MASK[c]
}

impl Iterator for LogIter<'_> {
    type Item = LogEntry;

    // Inlined into its loops (the merge that makes events reads 56-byte
    // entries): out of line, each entry was stored to memory and read back.
    #[inline(always)]
    fn next(&mut self) -> Option<LogEntry> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // An entry's start has `SLACK` bytes after it (`push` makes sure of
        // it): the entry and the 8-byte reach of its last field, taken with
        // one bounds check.
        let entry: &[u8; SLACK] = self.data[self.pos..self.pos + SLACK]
            .try_into()
            .expect("the log's slack");
        let header = u32::from_le_bytes([entry[0], entry[1], entry[2], 0]);
        let mut at = HEADER;
        let action = Action::ALL[(header & 0xf) as usize];
        let code = |i: u32| header >> (FIELDS_SHIFT + 3 * i);
        let time = field(entry, &mut at, code(0));
        let time_us = if header & HAS_TIME != 0 {
            self.prev_time = self.prev_time.wrapping_add(varint::unzigzag(time));
            Some(self.prev_time)
        } else {
            None
        };
        let addr = varint::unzigzag(field(entry, &mut at, code(1)));
        self.prev_addr = self.prev_addr.wrapping_add(addr as u64);
        let size = field(entry, &mut at, code(2));
        let stream = field(entry, &mut at, code(3));
        let stack = field(entry, &mut at, code(4)) as u32;
        self.pos += at;
        Some(LogEntry {
            action,
            list: self.list,
            time_us,
            addr: self.prev_addr,
            size,
            stream,
            stack,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every length code, both signs of every delta, and an entry ending the log with
    // fewer than 8 bytes after its last field's start.
    #[test]
    fn fields_of_every_length_round_trip() {
        let mut entries = Vec::new();
        let mut time = 0i64;
        for shift in 0..64 {
            let v = (1u64 << shift) | 1;
            time = time.wrapping_add(if shift % 2 == 0 {
                v as i64
            } else {
                -(v as i64)
            });
            entries.push(LogEntry {
                action: Action::ALL[shift % Action::ALL.len()],
                list: (shift / 20) as ObjId,
                time_us: (shift % 3 != 0).then_some(time),
                addr: if shift % 2 == 0 { v } else { !v },
                size: v,
                stream: v >> 1,
                stack: v as u32,
            });
        }
        let mut log = EventLog::default();
        for e in &entries {
            log.push(e);
        }
        assert_eq!(log.iter().collect::<Vec<_>>(), entries);
        assert_eq!(log.runs.len(), 4);
        assert_eq!(
            CODE_BYTES.map(|n| code(CODE_MASK[0] | ((1u128 << (8 * n)) - 1) as u64)),
            [0, 1, 2, 3, 4, 5, 6, 7]
        );
    }
}
