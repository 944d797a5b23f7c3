//! Opening any input file: a vramtrace trace or a PyTorch snapshot pickle, either one
//! plain or compressed with gzip, xz or zstd. Formats are told apart by content, never
//! by file name: snapshots are routinely renamed and re-compressed by hand.

use crate::snapshot::{self, ImportError, ImportReport, ParsedSnapshot};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vramtrace_format::EventSource;
use vramtrace_format::{
    Event, FormatError, Header, InitialState, KindCounts, MAGIC, RawChunk, SymbolTable,
    TraceReader, TraceReceiver, Truncation,
};

/// A compression wrapper found on an input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Not compressed.
    None,
    /// gzip (`1f 8b`), concatenated members included.
    Gzip,
    /// xz (`fd 37 7a 58 5a 00`).
    Xz,
    /// zstd (`28 b5 2f fd`).
    Zstd,
}

/// What the (decompressed) input holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// A vramtrace trace.
    Trace,
    /// A PyTorch memory snapshot, converted on the fly.
    TorchSnapshot,
}

/// Why an input could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The input.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// The content is neither a trace nor a pickle.
    #[error("{path}: not a vramtrace trace nor a PyTorch snapshot pickle (it starts with {start})")]
    UnknownFormat {
        /// The input.
        path: PathBuf,
        /// The first bytes after decompression, in hex.
        start: String,
    },
    /// The trace could not be read.
    #[error("{path}: {source}")]
    Trace {
        /// The input.
        path: PathBuf,
        /// The failure.
        #[source]
        source: FormatError,
    },
    /// The snapshot could not be imported.
    #[error("{path}: {source}")]
    Snapshot {
        /// The input.
        path: PathBuf,
        /// The failure.
        #[source]
        source: ImportError,
    },
}

/// A boxed byte stream: the decompressed input.
pub type InputStream = Box<dyn Read + Send>;

/// An input's events: a trace file's, or a snapshot's, converted as they are read.
pub enum Input {
    /// A trace file, read and decoded.
    Trace(TraceReader<InputStream>),
    /// A snapshot's events, from the thread converting it.
    Snapshot(TraceReceiver),
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Input::Trace(_) => f.write_str("Input::Trace"),
            Input::Snapshot(rx) => f.debug_tuple("Input::Snapshot").field(rx).finish(),
        }
    }
}

/// What [`Input::scan`] finds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// Events by kind.
    pub counts: KindCounts,
    /// Event chunks of a trace file (none for a snapshot).
    pub chunks: Option<u64>,
    /// The first event's time and the last (latest) event time.
    pub times: Option<(u64, u64)>,
}

impl Input {
    /// Reads the rest of the input without replaying it: counts events by kind and
    /// finds their time span, from the chunk headers of a trace file (nothing is
    /// decoded) or from the events of a snapshot.
    pub fn scan(&mut self) -> Result<Scan, FormatError> {
        let mut times: Option<(u64, u64)> = None;
        let mut span = |first: u64, last: u64| {
            let (_, end) = times.get_or_insert((first, last));
            *end = (*end).max(last);
        };
        let (counts, chunks) = match self {
            Input::Trace(r) => {
                let mut chunks = 0;
                let mut counts = KindCounts::default();
                while let Some(chunk) = r.next_chunk()? {
                    counts.merge(&chunk.count_kinds()?);
                    chunks += 1;
                    span(chunk.first_time_ns(), chunk.last_time_ns());
                }
                (counts, Some(chunks))
            }
            Input::Snapshot(r) => {
                let mut counts = KindCounts::default();
                while let Some(events) = r.next_batch()? {
                    if let (Some(first), Some(last)) = (events.first(), events.last()) {
                        span(first.time_ns, last.time_ns);
                    }
                    for e in &events {
                        counts.add(e.data.kind());
                    }
                    r.recycle(events);
                }
                (counts, None)
            }
        };
        Ok(Scan {
            counts,
            chunks,
            times,
        })
    }
}

/// Events an [`Input`] has read, not yet decoded.
pub enum PendingEvents {
    /// A trace file's chunks.
    Chunks(Vec<RawChunk>),
    /// A snapshot's events (decoded already).
    Events(Vec<Event>),
}

impl EventSource for Input {
    type Pending = PendingEvents;

    fn header(&self) -> &Header {
        match self {
            Input::Trace(r) => r.header(),
            Input::Snapshot(r) => r.header(),
        }
    }

    fn symbols(&self) -> &SymbolTable {
        match self {
            Input::Trace(r) => r.symbols(),
            Input::Snapshot(r) => r.symbols(),
        }
    }

    fn initial_state(&self) -> Option<&InitialState> {
        match self {
            Input::Trace(r) => r.initial_state(),
            Input::Snapshot(r) => r.initial_state(),
        }
    }

    fn read(&mut self, spent: &mut Vec<Vec<Event>>) -> Result<Option<PendingEvents>, FormatError> {
        Ok(match self {
            Input::Trace(r) => EventSource::read(r, spent)?.map(PendingEvents::Chunks),
            Input::Snapshot(r) => r.read(spent)?.map(PendingEvents::Events),
        })
    }

    fn decode(pending: PendingEvents, out: &mut Vec<Vec<Event>>) -> Result<(), FormatError> {
        match pending {
            PendingEvents::Chunks(c) => TraceReader::<InputStream>::decode(c, out),
            PendingEvents::Events(e) => TraceReceiver::decode(e, out),
        }
    }

    fn position(&self) -> u64 {
        match self {
            Input::Trace(r) => r.position(),
            Input::Snapshot(r) => r.position(),
        }
    }

    fn truncation(&self) -> Option<&Truncation> {
        match self {
            Input::Trace(r) => EventSource::truncation(r),
            Input::Snapshot(r) => EventSource::truncation(r),
        }
    }

    fn is_complete(&self) -> bool {
        match self {
            Input::Trace(r) => EventSource::is_complete(r),
            Input::Snapshot(r) => EventSource::is_complete(r),
        }
    }
}

/// An opened input, ready for analysis.
#[derive(Debug)]
pub struct OpenedInput {
    /// The events, after the header, symbols and initial state.
    pub input: Input,
    /// What the file held.
    pub kind: InputKind,
    /// How it was compressed.
    pub compression: Compression,
    /// For a snapshot, the import report (warnings, counts, end-state check).
    pub import_report: Option<ImportReport>,
}

/// Detects compression from the first bytes.
pub fn detect_compression(start: &[u8]) -> Compression {
    if start.starts_with(&[0x1f, 0x8b]) {
        Compression::Gzip
    } else if start.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
        Compression::Xz
    } else if start.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Compression::Zstd
    } else {
        Compression::None
    }
}

const BUF: usize = 1 << 20;

/// Wraps `read` in the decompressor its first bytes call for (streaming: nothing is
/// decompressed up front), and says which one it was.
pub fn decompress(read: impl Read + Send + 'static) -> io::Result<(InputStream, Compression)> {
    let mut r = BufReader::with_capacity(BUF, read);
    let c = detect_compression(r.fill_buf()?);
    let s: InputStream = match c {
        Compression::None => Box::new(r),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(r)),
        Compression::Xz => Box::new(liblzma::bufread::XzDecoder::new_multi_decoder(r)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(r)?),
    };
    Ok((s, c))
}

/// Opens a trace or snapshot file, compressed or not. A snapshot is parsed first; its
/// events are then made on a thread of their own while the returned input reads them,
/// with no trace encoded in between. Its import report lacks the counts of events
/// (`event_counts`). `progress` receives the snapshot bytes parsed so far (of the
/// decompressed pickle).
pub fn open_with_progress(
    path: impl AsRef<Path>,
    progress: &dyn Fn(u64),
) -> Result<OpenedInput, InputError> {
    let path = path.as_ref();
    let io_err = |source| InputError::Io {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(io_err)?;
    let key = file.metadata().ok().map(|m| {
        (
            path.canonicalize().unwrap_or_else(|_| path.to_owned()),
            m.len(),
            m.modified().ok(),
        )
    });
    if let Some(hit) = key.as_ref().and_then(cached) {
        return Ok(hit);
    }
    match open_stream(file, progress).map_err(|e| e.at(path))? {
        Opened::Trace(opened) => Ok(*opened),
        Opened::Snapshot {
            parsed,
            compression,
        } => {
            if let Some(key) = key {
                let mut parsed_before = PARSED.lock().unwrap_or_else(|e| e.into_inner());
                parsed_before.push(Parsed {
                    key,
                    snapshot: parsed.clone(),
                    compression,
                });
            }
            Ok(snapshot_input(&parsed, compression))
        }
    }
}

/// Identifies a file's content for the cache of parsed snapshots: its path, size and
/// modification time.
type CacheKey = (PathBuf, u64, Option<std::time::SystemTime>);

/// Snapshots parsed in this process, so a command that reads one twice (a window
/// bounded by phases, found by a first pass; a summary whose free space at the peak
/// needs a second replay) parses it once: each read streams its events again.
static PARSED: std::sync::Mutex<Vec<Parsed>> = std::sync::Mutex::new(Vec::new());

/// A snapshot parsed by this process.
struct Parsed {
    key: CacheKey,
    snapshot: Arc<ParsedSnapshot>,
    compression: Compression,
}

fn cached(key: &CacheKey) -> Option<OpenedInput> {
    let parsed = PARSED.lock().unwrap_or_else(|e| e.into_inner());
    let hit = parsed.iter().find(|c| c.key == *key)?;
    Some(snapshot_input(&hit.snapshot, hit.compression))
}

/// An input streaming a parsed snapshot's events.
fn snapshot_input(parsed: &Arc<ParsedSnapshot>, compression: Compression) -> OpenedInput {
    OpenedInput {
        input: Input::Snapshot(parsed.stream()),
        kind: InputKind::TorchSnapshot,
        compression,
        import_report: Some(parsed.report().clone()),
    }
}

/// Opens a trace or snapshot file (see [`open_with_progress`]).
pub fn open(path: impl AsRef<Path>) -> Result<OpenedInput, InputError> {
    open_with_progress(path, &|_| {})
}

/// Like [`open_with_progress`], from any reader; errors name the path `-`.
pub fn from_reader(
    read: impl Read + Send + 'static,
    progress: &dyn Fn(u64),
) -> Result<OpenedInput, InputError> {
    match open_stream(read, progress)? {
        Opened::Trace(opened) => Ok(*opened),
        Opened::Snapshot {
            parsed,
            compression,
        } => Ok(snapshot_input(&parsed, compression)),
    }
}

/// A trace ready to read, or a parsed snapshot.
enum Opened {
    Trace(Box<OpenedInput>),
    Snapshot {
        parsed: Arc<ParsedSnapshot>,
        compression: Compression,
    },
}

fn open_stream(
    read: impl Read + Send + 'static,
    progress: &dyn Fn(u64),
) -> Result<Opened, InputError> {
    let path = PathBuf::from("-");
    let io_err = |source| InputError::Io {
        path: path.clone(),
        source,
    };
    let (mut stream, compression) = decompress(read).map_err(io_err)?;
    // Peek at the first bytes by reading them and putting them back in front.
    let mut start = Vec::with_capacity(MAGIC.len());
    (&mut stream)
        .take(MAGIC.len() as u64)
        .read_to_end(&mut start)
        .map_err(io_err)?;
    let stream = Cursor::new(start.clone()).chain(stream);
    if start.starts_with(MAGIC) {
        let reader =
            TraceReader::new(Box::new(BufReader::with_capacity(BUF, stream)) as InputStream)
                .map_err(|source| InputError::Trace {
                    path: path.clone(),
                    source,
                })?;
        return Ok(Opened::Trace(Box::new(OpenedInput {
            input: Input::Trace(reader),
            kind: InputKind::Trace,
            compression,
            import_report: None,
        })));
    }
    if start.first() == Some(&0x80) {
        let parsed = snapshot::parse(stream, progress).map_err(|source| InputError::Snapshot {
            path: path.clone(),
            source,
        })?;
        return Ok(Opened::Snapshot {
            parsed: Arc::new(parsed),
            compression,
        });
    }
    let start: String = start.iter().take(8).map(|b| format!("{b:02x}")).collect();
    Err(InputError::UnknownFormat {
        path,
        start: if start.is_empty() {
            "nothing: it is empty".into()
        } else {
            format!("0x{start}")
        },
    })
}

impl InputError {
    fn at(self, path: &Path) -> InputError {
        let path = path.to_owned();
        match self {
            InputError::Io { source, .. } => InputError::Io { path, source },
            InputError::UnknownFormat { start, .. } => InputError::UnknownFormat { path, start },
            InputError::Trace { source, .. } => InputError::Trace { path, source },
            InputError::Snapshot { source, .. } => InputError::Snapshot { path, source },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn detects_compression_by_content() {
        assert_eq!(detect_compression(&[0x1f, 0x8b, 8]), Compression::Gzip);
        assert_eq!(detect_compression(b"\xfd7zXZ\x00\x00"), Compression::Xz);
        assert_eq!(
            detect_compression(&[0x28, 0xb5, 0x2f, 0xfd]),
            Compression::Zstd
        );
        assert_eq!(detect_compression(b"\x80\x04"), Compression::None);
        assert_eq!(detect_compression(b""), Compression::None);
    }

    #[test]
    fn decompresses_transparently() {
        let data = b"\x80\x04hello".repeat(1000);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&data).unwrap();
        let gz = gz.finish().unwrap();
        let zs = zstd::encode_all(&data[..], 1).unwrap();
        let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 1);
        xz.write_all(&data).unwrap();
        let xz = xz.finish().unwrap();
        for (bytes, kind) in [
            (gz, Compression::Gzip),
            (zs, Compression::Zstd),
            (xz, Compression::Xz),
            (data.clone(), Compression::None),
        ] {
            let (mut s, c) = decompress(Cursor::new(bytes)).unwrap();
            assert_eq!(c, kind);
            let mut out = Vec::new();
            s.read_to_end(&mut out).unwrap();
            assert_eq!(out, data);
        }
    }

    #[test]
    fn a_snapshot_opened_twice_is_parsed_once_and_streamed_twice() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/torch/mlp_expandable.pickle.xz");
        let mut first = open(&path).unwrap();
        let mut second = open(&path).unwrap();
        assert_eq!(first.import_report, second.import_report);
        assert!(
            PARSED
                .lock()
                .unwrap()
                .iter()
                .any(|c| path.canonicalize().unwrap() == c.key.0)
        );
        assert_eq!(second.kind, InputKind::TorchSnapshot);
        assert_eq!(second.compression, Compression::Xz);
        assert_eq!(first.input.header(), second.input.header());
        let events = |input: &mut Input| {
            let mut all = Vec::new();
            input
                .for_each_batch(|events, _| all.extend_from_slice(events))
                .unwrap();
            assert!(input.is_complete());
            all
        };
        let a = events(&mut first.input);
        assert!(!a.is_empty());
        assert_eq!(a, events(&mut second.input));
    }

    #[test]
    fn a_snapshot_scans_like_its_imported_trace() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/torch/cnn_eval_accumulate.pickle.xz");
        let streamed = open(&path).unwrap().input.scan().unwrap();
        let (stream, _) = decompress(File::open(&path).unwrap()).unwrap();
        let imported = snapshot::import(stream, &|_| {}).unwrap();
        let reader = TraceReader::new(Box::new(Cursor::new(imported.trace)) as InputStream);
        let written = Input::Trace(reader.unwrap()).scan().unwrap();
        assert_eq!(streamed.counts, written.counts);
        assert_eq!(streamed.counts, imported.report.event_counts);
        assert_eq!(streamed.times, written.times);
        assert!(streamed.times.is_some_and(|(a, b)| a < b));
        assert_eq!(streamed.chunks, None);
        assert_eq!(written.chunks, Some(1));
    }

    #[test]
    fn unknown_content_is_an_error() {
        let e = from_reader(Cursor::new(b"hello world".to_vec()), &|_| {}).unwrap_err();
        assert!(matches!(e, InputError::UnknownFormat { .. }), "{e}");
        let e = from_reader(Cursor::new(Vec::new()), &|_| {}).unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
    }
}
