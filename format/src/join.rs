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
use crate::event::{Event, KindCounts};
use crate::reader::TraceReader;
use crate::symbols::{FrameId, StackId, StringId};
use crate::writer::{TraceWriter, WriterOptions};
use std::io::{Read, Write};

/// The header metadata key of a part that starts mid-run: how many of its
/// first events restate the state at its start rather than happen there.
pub const PREAMBLE_EVENTS_KEY: &str = "window.preamble_events";

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
}

/// Joins the parts of a rotated trace, oldest first, into `out`: the first
/// part's header, initial state and events, then each later part's events
/// past its restatements. Returns the output.
///
/// Fails if a part is not a trace, or if its symbols do not continue those
/// of the parts before it (parts of different recordings).
pub fn join<R: Read, W: Write>(
    parts: impl IntoIterator<Item = R>,
    out: W,
) -> Result<(W, JoinSummary), FormatError> {
    let mut summary = JoinSummary::default();
    let mut writer: Option<TraceWriter<W>> = None;
    let mut out = Some(out);
    let mut known = Known::default();
    let mut first: Option<(u64, u32)> = None;
    for part in parts {
        let mut reader = TraceReader::new(part)?;
        let header = reader.header();
        let origin = (header.start_unix_ns, header.process.pid);
        let skip = if writer.is_some() {
            // A later part is the same recording's (its clock and process),
            // starts from a state, and begins with every symbol defined so
            // far.
            if first != Some(origin) || reader.initial_state().is_none() {
                return Err(FormatError::InvalidUse(MISMATCH));
            }
            known.check_continues(&reader)?;
            preamble_events(&reader)
        } else {
            0
        };
        let w = match &mut writer {
            Some(w) => w,
            None => {
                let options = WriterOptions {
                    chunk_interval: None,
                    ..WriterOptions::default()
                };
                first = Some(origin);
                let out = out.take().expect("taken once");
                let mut w = TraceWriter::with_options(out, reader.header().clone(), options)?;
                if let Some(state) = reader.initial_state().cloned() {
                    known.catch_up(&reader, &mut w)?;
                    w.write_initial_state(&state)?;
                }
                writer.insert(w)
            }
        };
        let mut events = 0u64;
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
                if events >= skip {
                    w.push(*e)?;
                    summary.events += 1;
                }
                events += 1;
            }
        }
        summary.parts += 1;
        summary.damaged_parts +=
            (reader.damage_count() > 0 || reader.truncation().is_some()) as usize;
    }
    let w = writer.ok_or(FormatError::InvalidUse("no parts to join"))?;
    summary.counts = *w.counts();
    Ok((w.finish()?, summary))
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
            Err(FormatError::InvalidUse(MISMATCH))
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
                return Err(FormatError::InvalidUse(MISMATCH));
            }
            self.strings += 1;
            s.clone_into(&mut self.last_string);
        }
        while (self.frames as usize) < table.frame_count() {
            let Some(&frame) = table.frame(FrameId(self.frames)) else {
                return Err(FormatError::InvalidUse(MISMATCH));
            };
            if w.intern_frame(frame) != FrameId(self.frames) {
                return Err(FormatError::InvalidUse(MISMATCH));
            }
            self.frames += 1;
            self.last_frame = Some(frame);
        }
        while (self.stacks as usize) < table.stack_count() {
            let frames = table.stack(StackId(self.stacks)).to_vec();
            if w.intern_stack(&frames) != StackId(self.stacks) {
                return Err(FormatError::InvalidUse(MISMATCH));
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
    use crate::event::{BlockEvent, EventData};
    use crate::header::{BlockState, BlockStatus, Header, InitialState, SegmentState};

    fn alloc(time_ns: u64, addr: u64, stack: StackId) -> Event {
        Event {
            time_ns,
            data: EventData::Alloc(BlockEvent {
                addr,
                size: 512,
                requested: 500,
                stack,
                ..BlockEvent::default()
            }),
        }
    }

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
    }
}
