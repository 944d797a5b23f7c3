//! The bytes of an opened input, readable from the start any number of times.

use std::fs::File;
use std::io::{self, Cursor, Read};
use std::sync::Arc;

/// Where an input's bytes are: an opened file, or memory.
#[derive(Clone, Debug)]
pub(super) enum Source {
    /// An opened file and its size (when the file system says).
    File(Arc<File>, Option<u64>),
    /// Bytes in memory.
    Bytes(Arc<[u8]>),
}

impl Source {
    pub fn file(file: File) -> Source {
        let len = file.metadata().ok().map(|m| m.len());
        Source::File(Arc::new(file), len)
    }

    /// The size in bytes, when known.
    pub fn len(&self) -> Option<u64> {
        match self {
            Source::File(_, len) => *len,
            Source::Bytes(b) => Some(b.len() as u64),
        }
    }

    /// A reader from the first byte. Readers of one source do not share a
    /// position, so one pass cannot disturb another.
    pub fn reader(&self) -> Box<dyn Read + Send> {
        match self {
            Source::File(file, _) => Box::new(FileAt {
                file: Arc::clone(file),
                pos: 0,
            }),
            Source::Bytes(bytes) => Box::new(Cursor::new(Arc::clone(bytes))),
        }
    }
}

/// A file mapped into memory, to be parsed where it lies (see [`Source::map`]).
pub(super) struct Mapped {
    map: memmap2::Mmap,
    // Bytes from the start whose pages were handed back already.
    released: std::cell::Cell<usize>,
}

/// Pages are handed back once this many bytes behind the reader.
const RELEASE_STEP: usize = 2 << 20;

impl Mapped {
    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Tells the mapping that the bytes before `consumed` will not be read again:
    /// their pages leave this process's resident set, a step at a time, so a parse
    /// of a 400 MB pickle does not hold 400 MB of pages (they stay in the page
    /// cache, shared, and a later read finds them there).
    pub fn consumed(&self, consumed: u64) {
        let page = 4096;
        let upto = (consumed as usize).min(self.map.len()) / page * page;
        let from = self.released.get();
        if upto < from + RELEASE_STEP {
            return;
        }
        self.released.set(upto);
        #[cfg(unix)]
        // SAFETY: the mapping is shared and read-only, so MADV_DONTNEED only drops
        // page-table entries: a later access reads the same file bytes back from
        // the page cache, and so does an access under way (the parser is past the
        // range, but the snapshot's read-ahead thread, overtaken, may still read
        // in it). Nothing writes through this mapping.
        unsafe {
            let _ = self.map.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                from,
                upto - from,
            );
        }
    }
}

impl Source {
    /// The file mapped into memory, when it is a plain file that can be: a
    /// snapshot pickle is then parsed where the page cache holds it, saving the
    /// copy into the parser's buffer (about a tenth of the parse). `None`:
    /// bytes in memory, or a file that cannot be mapped (a pipe, an empty file),
    /// to be read the usual way.
    ///
    /// The mapping lives only while the snapshot is parsed. A file truncated by
    /// another process during that time makes the next read of a page past its new
    /// end a `SIGBUS`, which would kill the process: the command line catches it
    /// and reports the input as changed while it was read (see `cli`). Reading with
    /// `read` instead would not fail there but parse a mix of the old and new
    /// content, so neither way reads a file rewritten under it correctly; the
    /// mapping is taken for its speed.
    pub fn map(&self) -> Option<Mapped> {
        let Source::File(file, Some(len)) = self else {
            return None;
        };
        if *len == 0 || !file.metadata().ok()?.is_file() {
            return None;
        }
        // SAFETY: the mapping is read-only and private to this parse; a file changed
        // under it is discussed above.
        let map = unsafe { memmap2::MmapOptions::new().map(&**file) }.ok()?;
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        Some(Mapped {
            map,
            released: std::cell::Cell::new(0),
        })
    }
}

/// Reads a shared file at a position of its own (`pread`), leaving the
/// file's own offset alone.
struct FileAt {
    file: Arc<File>,
    pos: u64,
}

impl Read for FileAt {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = read_at(&self.file, buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], pos: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, pos)
}

#[cfg(windows)]
fn read_at(file: &File, buf: &mut [u8], pos: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_mapped_file_reads_the_same_after_its_pages_are_released() {
        let path = std::env::temp_dir().join(format!("vramtrace-mapped-{}", std::process::id()));
        let content: Vec<u8> = (0..3 * RELEASE_STEP + 5000)
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(&path, &content).unwrap();
        let source = Source::file(File::open(&path).unwrap());
        let empty = std::env::temp_dir().join(format!("vramtrace-mapped-0-{}", std::process::id()));
        std::fs::write(&empty, b"").unwrap();
        let nothing = Source::file(File::open(&empty).unwrap());
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_file(&empty).unwrap();
        assert!(nothing.map().is_none());
        assert!(Source::Bytes(Arc::from(&b"x"[..])).map().is_none());
        let mapped = source.map().unwrap();
        for at in [
            10,
            RELEASE_STEP + 7,
            2 * RELEASE_STEP + 4097,
            content.len() * 2,
        ] {
            mapped.consumed(at as u64);
            assert_eq!(mapped.bytes(), &content[..]);
        }
        assert_eq!(mapped.released.get(), content.len() / 4096 * 4096);
    }

    #[test]
    fn readers_of_one_file_keep_their_own_positions() {
        let path = std::env::temp_dir().join(format!("vramtrace-file-at-{}", std::process::id()));
        std::fs::File::create(&path)
            .unwrap()
            .write_all(b"0123456789")
            .unwrap();
        let source = Source::file(File::open(&path).unwrap());
        std::fs::remove_file(&path).unwrap();
        assert_eq!(source.len(), Some(10));
        let (mut a, mut b) = (source.reader(), source.reader());
        let mut buf = [0u8; 4];
        a.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"0123");
        let mut all = Vec::new();
        b.read_to_end(&mut all).unwrap();
        assert_eq!(all, b"0123456789");
        a.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"4567");
    }
}
