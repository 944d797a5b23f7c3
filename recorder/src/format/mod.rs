//! The vramtrace trace format, version 1.
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

mod channel;
mod chunk;
mod error;
mod event;
mod header;
mod reader;
mod record;
mod source;
mod symbols;
pub mod varint;
mod writer;

pub use channel::{ReceiverGone, TraceChannel, TraceReceiver, TraceSender};
pub use chunk::RawChunk;
pub use error::FormatError;

pub use event::{
    BlockEvent, EmptyCacheEvent, Event, EventData, EventKind, KindCounts, OomEvent, SegmentEvent,
};
pub use header::{
    BlockState, BlockStatus, DeviceInfo, Footer, Header, InitialState, ProcessInfo, SegmentState,
};
pub use reader::{Events, TraceReader, Truncation};
pub use source::EventSource;
pub use symbols::{Frame, FrameId, StackId, StringId, SymbolTable};
pub use writer::{TraceWriter, WriterOptions};

/// The format's major version: readers reject any other.
pub const VERSION_MAJOR: u16 = 1;
/// The format's minor version: readers accept newer minors of their major.
pub const VERSION_MINOR: u16 = 0;
/// The first bytes of every trace: the MessagePack string `"vramtrace"`.
pub const MAGIC: &[u8; 10] = b"\xa9vramtrace";
/// The conventional file extension.
pub const FILE_EXTENSION: &str = "vtrace";
