//! [`join`]: the parts of a rotated trace put back together as one trace.
//!
//! A recording that keeps only its last part on disk writes its trace as a
//! series of parts ([`TraceWriter::rotate`]): each a whole trace that
//! starts mid-run, with the allocator's state at its start, every symbol
//! defined so far (the ids of all parts agree), and a few events that
//! restate what else was true then (open phases, limits, tags), counted in
//! its header under [`PREAMBLE_EVENTS_KEY`]. Joining the parts that are
//! left keeps the first one's start and leaves out the restatements of the
//! others: their events follow on from the part before.

use crate::error::FormatError;
use crate::event::{Event, EventData, KindCounts};
use crate::reader::TraceReader;
use crate::symbols::{FrameId, StackId, StringId};
use crate::writer::{TraceWriter, WriterOptions};
use std::io::{Read, Write};

/// The header metadata key of a part that starts mid-run: how many of its
/// first events restate the state at its start rather than happen there.
pub const PREAMBLE_EVENTS_KEY: &str = "window.preamble_events";

/// The header metadata key of a bounded recording's parts: an id its
/// rotations share and no other ring has (several rings of one process, a
/// ring per device, share its clock and process id).
pub const RING_KEY: &str = "window.ring";

/// The header metadata key of a part's number in its ring (0 for the part
/// that starts the recording, which lacks the key).
pub const PART_KEY: &str = "window.part";

/// What [`join`] wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JoinSummary {
    /// Parts read.
    pub parts: usize,
    /// Events written.
    pub events: u64,
    /// Events written, by kind.
    pub counts: KindCounts,
    /// Parts that could not be read whole (one cut off by a crash, say):
    /// their readable events are joined all the same.
    pub damaged_parts: usize,
    /// Parts whose header claimed more restating events than they begin
    /// with: only those they begin with were left out.
    pub forged_preambles: usize,
}

/// Joins the parts of a rotated trace, oldest first, into `out`: the first
/// part's header, initial state and events, then each later part's events
/// past its restatements. Returns the output.
///
/// Fails if a part is not a trace, or if its symbols do not continue those
/// of the parts before it (parts of different recordings). To join what can
/// be joined of a damaged or mixed ring instead, [`scan`] each part, choose
/// the ones that follow on, and give them to a [`Joiner`].
pub fn join<R: Read, W: Write>(
    parts: impl IntoIterator<Item = R>,
    out: W,
) -> Result<(W, JoinSummary), FormatError> {
    let mut joiner = Joiner::new(out);
    for part in parts {
        joiner.add(part)?;
    }
    joiner.finish()
}

/// What a part holds, read through once: enough to tell which recording
/// and ring it is of, where in the ring it goes, and whether it follows on
/// from another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartScan {
    /// The recording's start (Unix time, ns): every part of a ring has it.
    pub start_unix_ns: u64,
    /// The recording process.
    pub pid: u32,
    /// The ring's id ([`RING_KEY`]), when the recorder wrote one.
    pub ring: Option<String>,
    /// The part's number in its ring ([`PART_KEY`]): `Some(0)` for a ring's
    /// first part, `None` when the recorder wrote no ring id.
    pub part: Option<u64>,
    /// Whether it starts from a state (every part but a recording's first).
    pub has_state: bool,
    /// The time of its first and last event (offsets from the start).
    pub first_ns: Option<u64>,
    /// See `first_ns`.
    pub last_ns: Option<u64>,
    /// Events read.
    pub events: u64,
    /// Whether it could not be read whole.
    pub damaged: bool,
}

/// Reads a part through: see [`PartScan`]. An error when not even its
/// start (header, symbols, initial state) can be read.
pub fn scan<R: Read>(part: R) -> Result<PartScan, FormatError> {
    let mut reader = TraceReader::new(part)?;
    let header = reader.header();
    let ring = header.metadata.get(RING_KEY).cloned();
    let part = match header.metadata.get(PART_KEY) {
        Some(n) => n.parse().ok(),
        None => ring.as_ref().map(|_| 0),
    };
    let mut scan = PartScan {
        start_unix_ns: header.start_unix_ns,
        pid: header.process.pid,
        ring,
        part,
        has_state: reader.initial_state().is_some(),
        first_ns: None,
        last_ns: None,
        events: 0,
        damaged: false,
    };
    let mut batch: Vec<Event> = Vec::new();
    while let Some(chunk) = reader.next_chunk()? {
        batch.clear();
        if let Err(e) = chunk.decode_into(&mut batch) {
            reader.note_undecodable(&chunk, e.to_string());
            continue;
        }
        for e in &batch {
            scan.first_ns.get_or_insert(e.time_ns);
            scan.last_ns = Some(scan.last_ns.map_or(e.time_ns, |l| l.max(e.time_ns)));
            scan.events += 1;
        }
    }
    scan.damaged = reader.damage_count() > 0 || reader.truncation().is_some();
    Ok(scan)
}

/// What one part gave a [`Joiner`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartJoined {
    /// Events written from it.
    pub events: u64,
    /// Whether it could not be read whole.
    pub damaged: bool,
    /// The restating events its header claims, when it claims more than
    /// it begins with (a forged or damaged count).
    pub claimed_preamble: Option<u64>,
    /// Restating events left out.
    pub preamble: u64,
}

/// Joins parts one at a time (each opened only while it is read): the
/// first part's header, initial state and events, then each later part's
/// events past its restatements.
pub struct Joiner<W: Write> {
    out: Option<W>,
    writer: Option<TraceWriter<W>>,
    known: Known,
    first: Option<(u64, u32)>,
    summary: JoinSummary,
}

impl<W: Write> Joiner<W> {
    /// A join into `out`.
    pub fn new(out: W) -> Self {
        Joiner {
            out: Some(out),
            writer: None,
            known: Known::default(),
            first: None,
            summary: JoinSummary::default(),
        }
    }

    /// Adds the next part. Fails if it is not a trace, or does not follow
    /// on from the parts before it (another recording's clock or process,
    /// no initial state, symbols that disagree).
    pub fn add<R: Read>(&mut self, part: R) -> Result<PartJoined, FormatError> {
        let mut reader = TraceReader::new(part)?;
        let header = reader.header();
        let origin = (header.start_unix_ns, header.process.pid);
        let claimed = if self.writer.is_some() {
            // A later part is the same recording's (its clock and process),
            // starts from a state, and begins with every symbol defined so
            // far.
            if self.first != Some(origin) || reader.initial_state().is_none() {
                return Err(FormatError::NotJoinable(MISMATCH));
            }
            self.known.check_continues(&reader)?;
            preamble_events(&reader)
        } else {
            0
        };
        let known = &mut self.known;
        let w = match &mut self.writer {
            Some(w) => w,
            None => {
                let options = WriterOptions {
                    chunk_interval: None,
                    ..WriterOptions::default()
                };
                self.first = Some(origin);
                let out = self.out.take().expect("taken once");
                let mut w = TraceWriter::with_options(out, reader.header().clone(), options)?;
                if let Some(state) = reader.initial_state().cloned() {
                    known.catch_up(&reader, &mut w)?;
                    w.write_initial_state(&state)?;
                }
                self.writer.insert(w)
            }
        };
        let mut joined = PartJoined::default();
        // The restatement is what the part begins with, at its first
        // event's time, of the kinds a rotation restates: a count in the
        // header past it (forged, damaged) leaves out no real event.
        let mut restating = claimed > 0;
        let mut restated_at = None;
        let mut batch: Vec<Event> = Vec::new();
        while let Some(chunk) = reader.next_chunk()? {
            batch.clear();
            if let Err(e) = chunk.decode_into(&mut batch) {
                // Sound records, content that does not decode: this chunk's
                // events are lost, the next chunk's are not.
                reader.note_undecodable(&chunk, e.to_string());
                continue;
            }
            // The symbols a chunk uses are defined before it.
            known.catch_up(&reader, w)?;
            for e in &batch {
                if restating {
                    let at = *restated_at.get_or_insert(e.time_ns);
                    restating = joined.preamble < claimed && e.time_ns == at && restates(e);
                    if restating {
                        joined.preamble += 1;
                        continue;
                    }
                }
                w.push(*e)?;
                joined.events += 1;
            }
        }
        if joined.preamble < claimed {
            joined.claimed_preamble = Some(claimed);
            self.summary.forged_preambles += 1;
        }
        joined.damaged = reader.damage_count() > 0 || reader.truncation().is_some();
        self.summary.parts += 1;
        self.summary.events += joined.events;
        self.summary.damaged_parts += joined.damaged as usize;
        Ok(joined)
    }

    /// Ends the trace; an error if no part was added.
    pub fn finish(self) -> Result<(W, JoinSummary), FormatError> {
        let w = self
            .writer
            .ok_or(FormatError::NotJoinable("no parts to join"))?;
        let mut summary = self.summary;
        summary.counts = *w.counts();
        Ok((w.finish()?, summary))
    }
}

/// Whether an event is of a kind a rotation restates (open phases,
/// annotations, limits, device-memory readings, tags of both kinds).
fn restates(e: &Event) -> bool {
    matches!(
        e.data,
        EventData::PhaseBegin { .. }
            | EventData::Annotation { .. }
            | EventData::Limit(_)
            | EventData::DeviceMemory(_)
            | EventData::Tag(_)
            | EventData::UserTag(_)
    )
}

/// How many of a part's first events restate its starting state.
fn preamble_events<R: Read>(reader: &TraceReader<R>) -> u64 {
    reader
        .header()
        .metadata
        .get(PREAMBLE_EVENTS_KEY)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

const MISMATCH: &str = "the parts' symbols disagree: they are not parts of one recording";

/// The symbols given to the writer so far, and the last of each kind (to
/// check that a later part defines them alike).
#[derive(Default)]
struct Known {
    strings: u32,
    frames: u32,
    stacks: u32,
    last_string: String,
    last_frame: Option<crate::symbols::Frame>,
    last_stack: Vec<FrameId>,
}

impl Known {
    /// Checks that a part's table (as read up to its first chunk) holds at
    /// least the symbols known, the last of each alike.
    fn check_continues<R: Read>(&self, reader: &TraceReader<R>) -> Result<(), FormatError> {
        let table = reader.symbols();
        let same = table.string_count() >= self.strings as usize
            && table.frame_count() >= self.frames as usize
            && table.stack_count() >= self.stacks as usize
            && (self.strings <= 1
                || table.string(StringId(self.strings - 1)) == Some(&self.last_string[..]))
            && (self.frames == 0
                || table.frame(FrameId(self.frames - 1)) == self.last_frame.as_ref())
            && (self.stacks <= 1 || table.stack(StackId(self.stacks - 1)) == &self.last_stack[..]);
        if same {
            Ok(())
        } else {
            Err(FormatError::NotJoinable(MISMATCH))
        }
    }

    /// Gives the writer the symbols the reader has defined since the last
    /// call, checking that each keeps its id.
    fn catch_up<R: Read, W: Write>(
        &mut self,
        reader: &TraceReader<R>,
        w: &mut TraceWriter<W>,
    ) -> Result<(), FormatError> {
        let table = reader.symbols();
        // Ids 0 are the empty string and the empty stack, always defined.
        self.strings = self.strings.max(1);
        self.stacks = self.stacks.max(1);
        while (self.strings as usize) < table.string_count() {
            let s = table.string(StringId(self.strings)).unwrap_or("");
            if w.intern_string(s) != StringId(self.strings) {
                return Err(FormatError::NotJoinable(MISMATCH));
            }
            self.strings += 1;
            s.clone_into(&mut self.last_string);
        }
        while (self.frames as usize) < table.frame_count() {
            let Some(&frame) = table.frame(FrameId(self.frames)) else {
                return Err(FormatError::NotJoinable(MISMATCH));
            };
            if w.intern_frame(frame) != FrameId(self.frames) {
                return Err(FormatError::NotJoinable(MISMATCH));
            }
            self.frames += 1;
            self.last_frame = Some(frame);
        }
        while (self.stacks as usize) < table.stack_count() {
            let frames = table.stack(StackId(self.stacks)).to_vec();
            if w.intern_stack(&frames) != StackId(self.stacks) {
                return Err(FormatError::NotJoinable(MISMATCH));
            }
            self.stacks += 1;
            self.last_stack = frames;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventData;
    use crate::event::tests::alloc;
    use crate::header::{BlockState, BlockStatus, Header, InitialState, SegmentState};

    fn phase(time_ns: u64, name: StringId) -> Event {
        Event {
            time_ns,
            data: EventData::PhaseBegin { name, thread: 0 },
        }
    }

    /// Writes `parts` parts of 10 events each, every part defining a new
    /// stack; each rotation restates the open phase.
    fn parts(n: usize) -> (Vec<Vec<u8>>, Vec<(Event, String)>) {
        let mut outs = Vec::new();
        let mut w = TraceWriter::new(Vec::new(), Header::default()).unwrap();
        let serve = w.intern_string("serve");
        w.push(phase(0, serve)).unwrap();
        let mut all = Vec::new();
        for p in 0..n {
            let name = format!("f{p}");
            let stack = w.intern_symbol_stack([(name.as_str(), "serve.py", p as u32)]);
            for i in 0..10u64 {
                let e = alloc(p as u64 * 100 + i + 1, (p as u64 * 10 + i) * 512, stack);
                w.push(e).unwrap();
                all.push((e, format!("{name} (serve.py:{p})")));
            }
            if p + 1 < n {
                let mut header = Header::default();
                header
                    .metadata
                    .insert(PREAMBLE_EVENTS_KEY.into(), "1".into());
                let state = InitialState {
                    segments: vec![SegmentState {
                        addr: 0,
                        size: 1 << 20,
                        blocks: vec![BlockState {
                            addr: 0,
                            size: 512,
                            requested: 500,
                            status: BlockStatus::Allocated,
                            stack,
                        }],
                        ..SegmentState::default()
                    }],
                };
                outs.push(w.rotate(Vec::new(), header, &state).unwrap());
                w.push(phase(p as u64 * 100 + 99, serve)).unwrap();
            }
        }
        outs.push(w.finish().unwrap());
        (outs, all)
    }

    fn read(bytes: &[u8]) -> (Vec<(Event, String)>, Option<InitialState>) {
        let mut r = TraceReader::new(bytes).unwrap();
        let events: Vec<Event> = r.events().collect::<Result<_, _>>().unwrap();
        let named = events
            .into_iter()
            .map(|e| {
                let name = match e.data {
                    EventData::Alloc(b) => {
                        r.symbols().describe_frame(r.symbols().stack(b.stack)[0])
                    }
                    _ => String::new(),
                };
                (e, name)
            })
            .collect();
        (named, r.initial_state().cloned())
    }

    #[test]
    fn each_part_is_a_whole_trace_that_starts_mid_run() {
        let (parts, all) = parts(3);
        let (events, state) = read(&parts[2]);
        // The restated phase, then the part's own events, named.
        assert!(matches!(events[0].0.data, EventData::PhaseBegin { .. }));
        assert_eq!(events.len(), 11);
        assert_eq!(events[1].1, "f2 (serve.py:2)");
        assert_eq!(
            events[1..].iter().map(|e| e.0).collect::<Vec<_>>(),
            all[20..].iter().map(|e| e.0).collect::<Vec<_>>()
        );
        assert_eq!(state.unwrap().segments[0].blocks[0].size, 512);
    }

    #[test]
    fn joined_parts_are_the_trace_from_the_first_parts_start() {
        let (parts, all) = parts(4);
        let (joined, summary) = join(parts[1..].iter().map(|p| &p[..]), Vec::new()).unwrap();
        assert_eq!(summary.parts, 3);
        let (events, state) = read(&joined);
        // The first part's restatement stays; the later ones' go.
        assert!(matches!(events[0].0.data, EventData::PhaseBegin { .. }));
        let own: Vec<_> = events[1..].to_vec();
        assert_eq!(own, all[10..].to_vec());
        assert_eq!(summary.events, 31);
        assert!(state.is_some());
        // The whole trace joins to itself.
        let (whole, _) = join(parts.iter().map(|p| &p[..]), Vec::new()).unwrap();
        let (events, state) = read(&whole);
        assert_eq!(events[1..].to_vec(), all);
        assert!(state.is_none());
    }

    #[test]
    fn parts_of_different_recordings_are_refused() {
        let (a, _) = parts(2);
        let mut w = TraceWriter::new(Vec::new(), Header::default()).unwrap();
        let other = w.intern_string("other");
        w.push(phase(0, other)).unwrap();
        let b = w.finish().unwrap();
        let err = join([&a[0][..], &b[..]], Vec::new()).unwrap_err();
        assert!(
            err.to_string().contains("not parts of one recording"),
            "{err}"
        );
        // A join's error is about the parts, not about the writer it uses.
        assert!(
            err.to_string().starts_with("cannot join the parts: "),
            "{err}"
        );
        let none = Joiner::new(Vec::new()).finish().unwrap_err();
        assert!(
            none.to_string().starts_with("cannot join the parts: "),
            "{none}"
        );
    }
}
