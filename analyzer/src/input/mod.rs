//! Opening any input file: a vramtrace trace or a PyTorch snapshot pickle, either one
//! plain or compressed with gzip, xz or zstd. Formats are told apart by content, never
//! by file name: snapshots are routinely renamed and re-compressed by hand.

mod growing;

use crate::snapshot::{self, ImportError, ImportReport};
use growing::GrowingBuffer;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use vramtrace_recorder::format::{FormatError, MAGIC, TraceReader};

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

/// A boxed byte stream: the decompressed input, or the converted trace.
pub type InputStream = Box<dyn Read + Send>;

/// An opened input, ready for analysis.
pub struct OpenedInput {
    /// The trace reader, positioned after the header, symbols and initial state.
    pub reader: TraceReader<InputStream>,
    /// What the file held.
    pub kind: InputKind,
    /// How it was compressed.
    pub compression: Compression,
    /// For a snapshot, the import report (warnings, counts, end-state check).
    pub import_report: Option<ImportReport>,
}

impl std::fmt::Debug for OpenedInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenedInput")
            .field("kind", &self.kind)
            .field("compression", &self.compression)
            .field("import_report", &self.import_report)
            .finish_non_exhaustive()
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

/// Opens a trace or snapshot file, compressed or not. A snapshot is parsed first, then
/// converted into an in-memory trace on a thread of its own while the returned reader
/// reads it; its import report lacks the counts of events written. `progress`
/// receives the snapshot bytes parsed so far (of the decompressed pickle).
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
        return hit.map_err(|e| e.at(path));
    }
    match open_stream(file, progress).map_err(|e| e.at(path))? {
        Opened::Trace(opened) => Ok(*opened),
        Opened::Snapshot {
            trace,
            compression,
            report,
        } => {
            if let Some(key) = key {
                let mut converted = CONVERTED.lock().unwrap_or_else(|e| e.into_inner());
                converted.push(Converted {
                    key,
                    trace: trace.clone(),
                    compression,
                    report: (*report).clone(),
                });
            }
            reader_over(trace, compression, Some(*report)).map_err(|e| e.at(path))
        }
    }
}

/// Identifies a file's content for the conversion cache: its path, size and
/// modification time.
type CacheKey = (PathBuf, u64, Option<std::time::SystemTime>);

/// Snapshots converted in this process, so a command that reads one twice
/// (a window bounded by phases, found by a first pass; a summary whose free
/// space at the peak needs a second replay) converts it once. The traces are
/// compact: about 10 bytes per event.
static CONVERTED: std::sync::Mutex<Vec<Converted>> = std::sync::Mutex::new(Vec::new());

/// A snapshot converted by this process.
struct Converted {
    key: CacheKey,
    trace: Arc<GrowingBuffer>,
    compression: Compression,
    report: ImportReport,
}

fn cached(key: &CacheKey) -> Option<Result<OpenedInput, InputError>> {
    let converted = CONVERTED.lock().unwrap_or_else(|e| e.into_inner());
    let hit = converted.iter().find(|c| c.key == *key)?;
    Some(reader_over(
        hit.trace.clone(),
        hit.compression,
        Some(hit.report.clone()),
    ))
}

/// Writes a parsed snapshot's trace on a thread of its own, so that the analyses read
/// it while it is written.
fn convert_in_background(parsed: snapshot::ParsedSnapshot) -> Arc<GrowingBuffer> {
    // About 13 bytes per event: room for all, so the buffer is not copied as it grows.
    let capacity = parsed.report().entries_per_device.iter().sum::<u64>() as usize * 16;
    let (trace, writer) = GrowingBuffer::new(capacity);
    std::thread::spawn(move || {
        let mut writer = writer;
        // A panic drops the writer, which ends the trace with an error for its readers.
        match parsed.write_trace(&mut writer) {
            Ok(_) => writer.finish(),
            Err(e) => writer.fail(format!("converting the snapshot: {e}")),
        }
    });
    trace
}

/// An opened reader over a converted snapshot's trace.
fn reader_over(
    trace: Arc<GrowingBuffer>,
    compression: Compression,
    import_report: Option<ImportReport>,
) -> Result<OpenedInput, InputError> {
    let reader =
        TraceReader::new(Box::new(BufReader::with_capacity(BUF, trace.reader())) as InputStream)
            .map_err(|source| InputError::Trace {
                path: PathBuf::from("-"),
                source,
            })?;
    Ok(OpenedInput {
        reader,
        kind: InputKind::TorchSnapshot,
        compression,
        import_report,
    })
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
            trace,
            compression,
            report,
        } => reader_over(trace, compression, Some(*report)),
    }
}

/// A trace ready to read, or a snapshot converted to trace bytes.
enum Opened {
    Trace(Box<OpenedInput>),
    Snapshot {
        trace: Arc<GrowingBuffer>,
        compression: Compression,
        report: Box<ImportReport>,
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
            reader,
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
        let report = Box::new(parsed.report().clone());
        return Ok(Opened::Snapshot {
            trace: convert_in_background(parsed),
            compression,
            report,
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
    fn a_snapshot_opened_twice_is_converted_once() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/torch/mlp_expandable.pickle.xz");
        let first = open(&path).unwrap();
        let second = open(&path).unwrap();
        assert_eq!(first.import_report, second.import_report);
        assert!(
            CONVERTED
                .lock()
                .unwrap()
                .iter()
                .any(|c| path.canonicalize().unwrap() == c.key.0)
        );
        assert_eq!(second.kind, InputKind::TorchSnapshot);
        assert_eq!(second.compression, Compression::Xz);
        assert_eq!(first.reader.header(), second.reader.header());
    }

    #[test]
    fn unknown_content_is_an_error() {
        let e = from_reader(Cursor::new(b"hello world".to_vec()), &|_| {}).unwrap_err();
        assert!(matches!(e, InputError::UnknownFormat { .. }), "{e}");
        let e = from_reader(Cursor::new(Vec::new()), &|_| {}).unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
    }
}
