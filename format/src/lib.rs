//! # vramtrace-format
//!
//! The vramtrace trace format, version 1: what a GPU caching allocator did,
//! event by event, with stacks and phases. This crate writes and reads it and
//! nothing else; producers (`vramtrace-recorder`, the snapshot importer) and
//! consumers (the `vramtrace` analyzer) sit above it, the way samply's
//! `fxprof-processed-profile` sits between profilers and viewers. It depends
//! on nothing that unwinds stacks or touches a GPU.
//!
//! - [`Header`], [`InitialState`], [`Footer`]: what a trace says about itself.
//! - [`Event`], [`EventData`]: the events, one enum variant per kind.
//! - [`SymbolTable`]: strings, frames and stacks, interned and referred to by id.
//! - [`TraceWriter`]: writes events in columnar chunks, each numbered with
//!   its place (format 1.4); [`TraceReader`] reads them back, checking every
//!   record, telling a file cut short ([`Truncation`]) from a damaged one
//!   ([`TraceDamage`], [`FormatError`]), reading every intact chunk past
//!   damage, and handing chunks out in their order, each once.
//! - [`EventSource`]: anything that yields decoded events in batches: a
//!   [`TraceReader`] (decoding chunks on all cores while the batch before is
//!   used) or a [`TraceReceiver`], the far end of a [`TraceChannel`] that a
//!   converter fills without writing a file.
//! - [`CountingWriter`]: an output that counts the bytes written to it,
//!   for a producer that reports its trace's size.
//! - [`join`], [`Joiner`], [`join_ring`]: the parts of a bounded recording
//!   put back into one trace; [`join_ring`] joins what can be joined of a
//!   damaged or mixed ring and names each part it leaves out.
//!
//! ```
//! use vramtrace_format::{BlockEvent, Event, EventData, Header, TraceReader, TraceWriter};
//!
//! let mut writer = TraceWriter::new(Vec::new(), Header::default())?;
//! let stack = writer.intern_symbol_stack([("forward", "model.py", 41)]);
//! let block = BlockEvent { addr: 0x1000, size: 512, requested: 500, stack, ..Default::default() };
//! writer.push(Event { time_ns: 10, data: EventData::Alloc(block) })?;
//! writer.push(Event { time_ns: 20, data: EventData::FreeRequested(block) })?;
//! let bytes = writer.finish()?;
//!
//! let mut reader = TraceReader::new(&bytes[..])?;
//! let events: Vec<Event> = reader.events().collect::<Result<_, _>>()?;
//! assert_eq!(events.len(), 2);
//! assert!(reader.footer().is_some(), "closed cleanly");
//! # Ok::<(), vramtrace_format::FormatError>(())
//! ```
//!
//! ## On disk
//!
//! A trace is a stream of MessagePack values (see `docs/trace-format.md`):
//! the string `"vramtrace"`, the array `[major, minor]`, then records, each a
//! MessagePack `ext 32` value whose type byte says what it holds:
//!
//! | type | record | payload |
//! |------|--------|---------|
//! | 1 | [`Header`] | MessagePack map |
//! | 2 | symbol definitions | MessagePack array |
//! | 3 | [`InitialState`] | MessagePack map |
//! | 4 | event chunk | columnar binary (see `chunk`) |
//! | 5 | [`Footer`] | MessagePack map |
//!
//! Each record's data starts with two CRC-32s, of the record's own header and
//! of its payload, so a reader finds every record boundary without decoding
//! events, detects corruption at the record it happens in, and tells a file
//! cut short (a killed process) from a damaged one.

#![warn(missing_docs)]

mod category;
mod channel;
mod chunk;
mod counting;
mod error;
mod event;
mod header;
mod join;
mod reader;
mod record;
mod ring;
mod source;
mod symbols;
pub mod varint;
mod writer;

pub use category::Category;
pub use channel::{ReceiverGone, TraceChannel, TraceReceiver, TraceSender};
pub use chunk::{MAX_CHUNK_EVENTS, RawChunk};
pub use counting::CountingWriter;
pub use error::FormatError;

pub use event::{
    BlockEvent, DeviceMemoryEvent, DroppedEvents, EmptyCacheEvent, Event, EventData, EventKind,
    KindCounts, LimitEvent, MAX_USER_CATEGORY_LEN, OomEvent, PoolAction, PoolEvent, PoolId,
    SegmentEvent, SegmentPoolEvent, TagEvent, UserTagEvent, user_category_name_ok,
};
pub use header::{
    BlockState, BlockStatus, DeviceInfo, Footer, Header, InitialState, ProcessInfo, SegmentState,
};
pub use join::{
    JoinSummary, Joiner, PART_KEY, PREAMBLE_EVENTS_KEY, PartJoined, PartScan, RING_KEY, join, scan,
};
pub use reader::{Events, KEPT_DAMAGE, REORDER_CHUNKS, TraceDamage, TraceReader, Truncation};
pub use ring::{RingError, RingJoin, RingPart, join_ring, part_number};
pub use source::EventSource;
pub use symbols::{Frame, FrameId, StackId, StringId, SymbolTable};
pub use writer::{TraceWriter, WriterOptions};

/// The format's major version: readers reject any other.
pub const VERSION_MAJOR: u16 = 1;
/// The format's minor version: readers accept newer minors of their major.
pub const VERSION_MINOR: u16 = 7;
/// The first bytes of every trace: the MessagePack string `"vramtrace"`.
pub const MAGIC: &[u8; 10] = b"\xa9vramtrace";
/// The conventional file extension.
pub const FILE_EXTENSION: &str = "vtrace";
