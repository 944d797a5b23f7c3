//! Opening any input file: a vramtrace trace or a PyTorch snapshot pickle, either one
//! plain or compressed with gzip, xz or zstd. Formats are told apart by content, never
//! by file name: snapshots are routinely renamed and re-compressed by hand.
//!
//! An [`Input`] is opened once per command and can stream its events again: each
//! [`Input::events`] starts a fresh pass from the first event. A trace file is read
//! again from the opened file (no pass disturbs another's position); a snapshot is
//! parsed once, when it is opened, and each pass makes its events anew from the
//! parsed pickle.

mod file;
pub mod folders;
mod read_ahead;

use crate::progress::{Progress, ProgressUnit, Work};
use crate::snapshot::{self, ImportError, ImportReport, ParsedSnapshot};
use file::Source;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vramtrace_format::EventSource;
use vramtrace_format::{
    Event, FormatError, Header, InitialState, KindCounts, MAGIC, RawChunk, SymbolTable,
    TraceDamage, TraceReader, TraceReceiver, Truncation,
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

impl Compression {
    /// Its name in lower case: `none`, `gzip`, `xz`, `zstd`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Xz => "xz",
            Compression::Zstd => "zstd",
        }
    }
}

/// What the (decompressed) input holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InputKind {
    /// A vramtrace trace.
    Trace,
    /// A PyTorch memory snapshot, converted on the fly.
    TorchSnapshot,
}

/// Why an input could not be opened or read.
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
    /// The input is a pipe, a terminal or a device: it is read more than
    /// once (its start, then each pass), so it must be a file.
    #[error(
        "{path} is not a regular file (a pipe or a device): inputs are read more than once; save it to a file first"
    )]
    NotAFile {
        /// The input.
        path: PathBuf,
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
    /// A trace was given where a snapshot was expected.
    #[error("{path} is already a vramtrace trace (or not a snapshot): nothing to import")]
    NotASnapshot {
        /// The input.
        path: PathBuf,
    },
    /// A folder of traces could not be listed.
    #[error("cannot read the folder {path}: {source}")]
    Folder {
        /// The folder.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// A folder holds no trace or snapshot.
    #[error("the folder {path} holds no trace (.vtrace) or snapshot (.pickle, .pkl)")]
    EmptyFolder {
        /// The folder.
        path: PathBuf,
    },
    /// No file of the folders given is a trace or snapshot.
    #[error("no file of the folders given could be read as a trace or snapshot")]
    NoReadableTrace,
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

/// How an input is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputOptions {
    /// How many times its own size a compressed input may expand to (past
    /// [`EXPANSION_FLOOR`]); `None`: without limit. Real traces and snapshots
    /// compress 5 to 50 times; a decompression bomb, kilobytes that inflate
    /// to gigabytes, thousands of times.
    pub max_expansion: Option<u64>,
}

/// The default [`InputOptions::max_expansion`].
pub const DEFAULT_MAX_EXPANSION: u64 = 1000;

/// Decompressed bytes every compressed input may reach, however small.
pub const EXPANSION_FLOOR: u64 = 64 << 20;

impl Default for InputOptions {
    fn default() -> Self {
        InputOptions {
            max_expansion: Some(DEFAULT_MAX_EXPANSION),
        }
    }
}

/// A compressed input expanded past its budget ([`InputOptions::max_expansion`]):
/// reading stops there. It travels inside an [`io::Error`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {compression}-compressed input expands past {}, over {ratio} times its {}: refused as a decompression bomb",
    crate::units::bytes(*limit),
    crate::units::bytes(*compressed)
)]
pub struct ExpansionExceeded {
    /// The compression.
    pub compression: &'static str,
    /// The decompressed bytes allowed.
    pub limit: u64,
    /// The compressed input's size.
    pub compressed: u64,
    /// The expansion allowed.
    pub ratio: u64,
}

impl ExpansionExceeded {
    /// The expansion error inside an I/O error, if it is one.
    pub fn in_io(e: &io::Error) -> Option<&ExpansionExceeded> {
        e.get_ref()?.downcast_ref()
    }
}

/// An opened input: a trace file, or a parsed snapshot. Open it once per
/// command; every [`events`](Input::events) is a fresh pass over it.
pub struct Input {
    path: PathBuf,
    /// The trace's header, read at opening (a snapshot's, as imported).
    header: Header,
    kind: InputKind,
    compression: Compression,
    content: Content,
    options: InputOptions,
}

enum Content {
    /// A trace: its bytes, read again for each pass.
    Trace(Source),
    /// A snapshot: parsed once, its events made again for each pass.
    Snapshot(Arc<ParsedSnapshot>),
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Input")
            .field("path", &self.path)
            .field("kind", &self.kind)
            .field("compression", &self.compression)
            .finish_non_exhaustive()
    }
}

/// Opens the input file at `path`, refusing what cannot be read twice.
fn open_file(path: &Path) -> Result<File, InputError> {
    let io = |source| InputError::Io {
        path: path.to_owned(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    if !file.metadata().map_err(io)?.is_file() {
        return Err(InputError::NotAFile {
            path: path.to_owned(),
        });
    }
    Ok(file)
}

impl Input {
    /// Opens a trace or snapshot file, compressed or not. A snapshot is parsed here,
    /// with `progress` hearing the pickle bytes read.
    pub fn open(path: impl AsRef<Path>, progress: &dyn Progress) -> Result<Input, InputError> {
        Input::open_with(path, InputOptions::default(), progress)
    }

    /// [`open`](Input::open) with options.
    pub fn open_with(
        path: impl AsRef<Path>,
        options: InputOptions,
        progress: &dyn Progress,
    ) -> Result<Input, InputError> {
        let path = path.as_ref();
        let file = open_file(path)?;
        Input::from_source(path, Source::file(file), options, progress)
    }

    /// Opens a trace or snapshot held in memory; errors and results name it `-`.
    pub fn from_bytes(
        bytes: impl Into<Arc<[u8]>>,
        progress: &dyn Progress,
    ) -> Result<Input, InputError> {
        Input::from_source(
            Path::new("-"),
            Source::Bytes(bytes.into()),
            InputOptions::default(),
            progress,
        )
    }

    /// The header of a trace file, read alone: no pass and no parse. A
    /// PyTorch snapshot has no header (`None`, left unparsed).
    pub fn peek_header(
        path: impl AsRef<Path>,
        options: InputOptions,
    ) -> Result<Option<vramtrace_format::Header>, InputError> {
        let path = path.as_ref();
        let file = open_file(path)?;
        match start_of(path, &Source::file(file), options)? {
            (Start::Trace, stream, _) => trace_reader(stream)
                .map(|reader| Some(reader.header().clone()))
                .map_err(|source| InputError::Trace {
                    path: path.to_owned(),
                    source,
                }),
            (Start::Snapshot, _, _) => Ok(None),
        }
    }

    fn from_source(
        path: &Path,
        source: Source,
        options: InputOptions,
        progress: &dyn Progress,
    ) -> Result<Input, InputError> {
        let (start, stream, compression) = start_of(path, &source, options)?;
        if start == Start::Trace {
            // Read the header now, so that a damaged one is an error of opening.
            let header = trace_reader(stream)
                .map_err(|source| InputError::Trace {
                    path: path.to_owned(),
                    source,
                })?
                .header()
                .clone();
            return Ok(Input {
                path: path.to_owned(),
                header,
                kind: InputKind::Trace,
                compression,
                content: Content::Trace(source),
                options,
            });
        }
        // A compressed file's size says nothing of the pickle's.
        let total = source.len().filter(|_| compression == Compression::None);
        let meter = progress.begin(Work {
            label: "reading",
            total,
            unit: ProgressUnit::Bytes,
        });
        // A compressed file is inflated on a thread of its own, off the
        // parser's critical path.
        let stream: InputStream = match compression {
            Compression::None => stream,
            _ => Box::new(read_ahead::ReadAhead::new(stream)),
        };
        let parsed = match (compression, &source) {
            // Bytes in memory, or a plain file mapped: parsed where they lie.
            (Compression::None, Source::Bytes(bytes)) => {
                drop(stream);
                snapshot::parse_bytes(bytes, &|bytes| meter.update(bytes))
            }
            (Compression::None, Source::File(..)) => match source.map() {
                Some(mapped) => {
                    drop(stream);
                    mapped.read_paged(|bytes, consumed| {
                        snapshot::parse_bytes(bytes, &|at| {
                            meter.update(at);
                            consumed(at);
                        })
                    })
                }
                None => snapshot::parse(stream, &|bytes| meter.update(bytes)),
            },
            _ => snapshot::parse(stream, &|bytes| meter.update(bytes)),
        }
        .map_err(|source| InputError::Snapshot {
            path: path.to_owned(),
            source,
        })?;
        Ok(Input {
            path: path.to_owned(),
            header: parsed.header(),
            kind: InputKind::TorchSnapshot,
            compression,
            content: Content::Snapshot(Arc::new(parsed)),
            options,
        })
    }

    /// The trace's header, read when it was opened (a snapshot's is the
    /// header its import writes): no pass is started for it.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The path it was opened from (`-` for bytes in memory).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What it holds.
    pub fn kind(&self) -> InputKind {
        self.kind
    }

    /// How it was compressed.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// For a snapshot, what the import found (warnings, counts, the end-state
    /// check); its `event_counts` stay empty, since no trace was written.
    pub fn import_report(&self) -> Option<&ImportReport> {
        match &self.content {
            Content::Trace(_) => None,
            Content::Snapshot(parsed) => Some(parsed.report()),
        }
    }

    /// A fresh pass over the events, from the first: the header, symbols and
    /// initial state come first, then the events in batches.
    pub fn events(&self) -> Result<EventStream, InputError> {
        match &self.content {
            Content::Trace(source) => {
                let err = |e: FormatError| InputError::Trace {
                    path: self.path.clone(),
                    source: e,
                };
                let (stream, _) = decompress_within(source.reader(), budget(source, self.options))
                    .map_err(|e| err(e.into()))?;
                Ok(EventStream::Trace(trace_reader(stream).map_err(err)?))
            }
            Content::Snapshot(parsed) => Ok(EventStream::Snapshot(parsed.stream())),
        }
    }

    /// Writes a snapshot's events as a trace to `out`; returns `out` and the
    /// complete import report (its event counts included).
    pub fn write_trace<W: std::io::Write + Send>(
        &self,
        out: W,
    ) -> Result<(W, ImportReport), InputError> {
        match &self.content {
            Content::Trace(_) => Err(InputError::NotASnapshot {
                path: self.path.clone(),
            }),
            Content::Snapshot(parsed) => {
                parsed
                    .write_trace(out)
                    .map_err(|source| InputError::Snapshot {
                        path: self.path.clone(),
                        source,
                    })
            }
        }
    }

    /// Reads every event without replaying it (see [`EventStream::scan`]).
    pub fn scan(&self) -> Result<Scan, InputError> {
        self.events()?.scan().map_err(|source| InputError::Trace {
            path: self.path.clone(),
            source,
        })
    }

    /// The work of a pass, for progress reports: bytes of a trace file, events
    /// of a snapshot (its pickle's entry count, near enough).
    pub fn pass_work(&self, stream: &EventStream) -> Work {
        match &self.content {
            Content::Trace(source) => Work {
                label: "replaying",
                total: source.len(),
                unit: ProgressUnit::Bytes,
            },
            Content::Snapshot(_) => Work {
                label: "replaying",
                total: stream
                    .header()
                    .metadata
                    .get("torch.trace_entries")
                    .and_then(|n| n.parse().ok()),
                unit: ProgressUnit::Events,
            },
        }
    }
}

/// A trace reader over a decompressed stream that starts with the magic.
/// What an input's first bytes say it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    Trace,
    Snapshot,
}

/// An input's decompressed stream (within its expansion budget), what its
/// first bytes say it holds, and its compression; an input of neither kind
/// is an error.
fn start_of(
    path: &Path,
    source: &Source,
    options: InputOptions,
) -> Result<(Start, InputStream, Compression), InputError> {
    let io_err = |source| InputError::Io {
        path: path.to_owned(),
        source,
    };
    let (stream, compression) =
        decompress_within(source.reader(), budget(source, options)).map_err(io_err)?;
    let (start, stream) = peek(stream, MAGIC.len()).map_err(io_err)?;
    // A trace cut inside its signature is still a trace (cut short).
    if start.starts_with(MAGIC) || (!start.is_empty() && MAGIC.starts_with(&start)) {
        return Ok((Start::Trace, stream, compression));
    }
    if start.first() == Some(&0x80) {
        return Ok((Start::Snapshot, stream, compression));
    }
    let start: String = start.iter().take(8).map(|b| format!("{b:02x}")).collect();
    Err(InputError::UnknownFormat {
        path: path.to_owned(),
        start: if start.is_empty() {
            "nothing: it is empty".into()
        } else {
            format!("0x{start}")
        },
    })
}

fn trace_reader(stream: InputStream) -> Result<TraceReader<InputStream>, FormatError> {
    TraceReader::new(Box::new(BufReader::with_capacity(BUF, stream)) as InputStream)
}

/// The first `n` bytes of a stream, and the stream with them put back in front.
fn peek(mut stream: InputStream, n: usize) -> io::Result<(Vec<u8>, InputStream)> {
    let mut start = Vec::with_capacity(n);
    (&mut stream).take(n as u64).read_to_end(&mut start)?;
    let rest: InputStream = Box::new(Cursor::new(start.clone()).chain(stream));
    Ok((start, rest))
}

/// One pass over an input's events: a trace file's, or a snapshot's, converted as
/// they are read.
// One per pass: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum EventStream {
    /// A trace file, read and decoded.
    Trace(TraceReader<InputStream>),
    /// A snapshot's events, from the thread converting it.
    Snapshot(TraceReceiver),
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EventStream::Trace(_) => f.write_str("EventStream::Trace"),
            EventStream::Snapshot(rx) => f.debug_tuple("EventStream::Snapshot").field(rx).finish(),
        }
    }
}

/// What [`EventStream::scan`] finds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// Events by kind.
    pub counts: KindCounts,
    /// Event chunks of a trace file (none for a snapshot).
    pub chunks: Option<u64>,
    /// The first event's time and the last (latest) event time.
    pub times: Option<(u64, u64)>,
    /// Bytes of the trace read (none for a snapshot).
    pub bytes: Option<u64>,
}

impl EventStream {
    /// Reads the rest of the events without replaying them: counts events by kind
    /// and finds their time span, from the chunk headers of a trace file (nothing
    /// is decoded) or from the events of a snapshot.
    pub fn scan(&mut self) -> Result<Scan, FormatError> {
        let mut times: Option<(u64, u64)> = None;
        let mut span = |first: u64, last: u64| {
            let (_, end) = times.get_or_insert((first, last));
            *end = (*end).max(last);
        };
        let (counts, chunks, bytes) = match self {
            EventStream::Trace(r) => {
                let mut chunks = 0;
                let mut counts = KindCounts::default();
                while let Some(chunk) = r.next_chunk()? {
                    match chunk.count_kinds() {
                        Ok(c) => counts.merge(&c),
                        Err(e) => {
                            r.note_undecodable(&chunk, e.to_string());
                            continue;
                        }
                    }
                    chunks += 1;
                    span(chunk.first_time_ns(), chunk.last_time_ns());
                }
                (counts, Some(chunks), Some(r.bytes_read()))
            }
            EventStream::Snapshot(r) => {
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
                (counts, None, None)
            }
        };
        Ok(Scan {
            counts,
            chunks,
            times,
            bytes,
        })
    }
}

/// Events an [`EventStream`] has read, not yet decoded.
pub enum PendingEvents {
    /// A trace file's chunks.
    Chunks(Vec<RawChunk>),
    /// A snapshot's events (decoded already).
    Events(Vec<Event>),
}

impl EventSource for EventStream {
    type Pending = PendingEvents;

    fn header(&self) -> &Header {
        match self {
            EventStream::Trace(r) => r.header(),
            EventStream::Snapshot(r) => r.header(),
        }
    }

    fn symbols(&self) -> &SymbolTable {
        match self {
            EventStream::Trace(r) => r.symbols(),
            EventStream::Snapshot(r) => r.symbols(),
        }
    }

    fn initial_state(&self) -> Option<&InitialState> {
        match self {
            EventStream::Trace(r) => r.initial_state(),
            EventStream::Snapshot(r) => r.initial_state(),
        }
    }

    fn read(&mut self, spent: &mut Vec<Vec<Event>>) -> Result<Option<PendingEvents>, FormatError> {
        Ok(match self {
            EventStream::Trace(r) => EventSource::read(r, spent)?.map(PendingEvents::Chunks),
            EventStream::Snapshot(r) => r.read(spent)?.map(PendingEvents::Events),
        })
    }

    fn decode(
        pending: PendingEvents,
        out: &mut Vec<Vec<Event>>,
    ) -> Result<Vec<TraceDamage>, FormatError> {
        match pending {
            PendingEvents::Chunks(c) => TraceReader::<InputStream>::decode(c, out),
            PendingEvents::Events(e) => TraceReceiver::decode(e, out),
        }
    }

    fn hands_over_decoded(&self) -> bool {
        matches!(self, EventStream::Snapshot(_))
    }

    fn note_damage(&mut self, damage: TraceDamage) {
        if let EventStream::Trace(r) = self {
            r.note_damage(damage);
        }
    }

    fn damage(&self) -> &[TraceDamage] {
        match self {
            EventStream::Trace(r) => r.damage(),
            EventStream::Snapshot(_) => &[],
        }
    }

    fn damage_count(&self) -> u64 {
        match self {
            EventStream::Trace(r) => r.damage_count(),
            EventStream::Snapshot(_) => 0,
        }
    }

    fn position(&self) -> u64 {
        match self {
            EventStream::Trace(r) => r.position(),
            EventStream::Snapshot(r) => r.position(),
        }
    }

    fn truncation(&self) -> Option<&Truncation> {
        match self {
            EventStream::Trace(r) => EventSource::truncation(r),
            EventStream::Snapshot(r) => EventSource::truncation(r),
        }
    }

    fn is_complete(&self) -> bool {
        match self {
            EventStream::Trace(r) => EventSource::is_complete(r),
            EventStream::Snapshot(r) => EventSource::is_complete(r),
        }
    }
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
/// decompressed up front), and says which one it was. No expansion limit: see
/// [`decompress_within`].
pub fn decompress(read: impl Read + Send + 'static) -> io::Result<(InputStream, Compression)> {
    decompress_within(read, None)
}

/// How much a source may expand: `(compressed size, ratio)`.
fn budget(source: &Source, options: InputOptions) -> Option<(u64, u64)> {
    Some((source.len()?, options.max_expansion?))
}

/// [`decompress`], with an expansion budget `(compressed size, ratio)`:
/// reading past `max(size × ratio, EXPANSION_FLOOR)` decompressed bytes is
/// an error ([`ExpansionExceeded`]). A damaged stream's error says near
/// which compressed byte it was found.
pub fn decompress_within(
    read: impl Read + Send + 'static,
    budget: Option<(u64, u64)>,
) -> io::Result<(InputStream, Compression)> {
    let consumed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut r = BufReader::with_capacity(
        BUF,
        Counted {
            inner: read,
            count: consumed.clone(),
        },
    );
    let c = detect_compression(r.fill_buf()?);
    let s: InputStream = match c {
        Compression::None => return Ok((Box::new(r), c)),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(r)),
        Compression::Xz => Box::new(liblzma::bufread::XzDecoder::new_multi_decoder(r)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(r)?),
    };
    let limit = budget.map(|(compressed, ratio)| {
        let allowed = compressed.saturating_mul(ratio).max(EXPANSION_FLOOR);
        (allowed, compressed, ratio)
    });
    Ok((
        Box::new(Decompressed {
            inner: s,
            compression: c,
            consumed,
            produced: 0,
            limit,
        }),
        c,
    ))
}

/// Counts the bytes read through it (the compressed input, for messages).
struct Counted<R> {
    inner: R,
    count: Arc<std::sync::atomic::AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

/// A decompressor's output, held to a budget, its errors placed in the input.
struct Decompressed {
    inner: InputStream,
    compression: Compression,
    consumed: Arc<std::sync::atomic::AtomicU64>,
    produced: u64,
    limit: Option<(u64, u64, u64)>,
}

impl Read for Decompressed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf).map_err(|e| {
            let consumed = self.consumed.load(std::sync::atomic::Ordering::Relaxed);
            io::Error::new(
                e.kind(),
                format!(
                    "{} data damaged within its first {consumed} bytes (after {} bytes decompressed): {e}",
                    self.compression.name(),
                    self.produced
                ),
            )
        })?;
        self.produced += n as u64;
        if let Some((limit, compressed, ratio)) = self.limit
            && self.produced > limit
        {
            return Err(io::Error::other(ExpansionExceeded {
                compression: self.compression.name(),
                limit,
                compressed,
                ratio,
            }));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
