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
}

/// Pages are handed back once this many bytes behind the reader. The pager
/// shares a core with the logging thread, so it lags the parser by up to a
/// step: with 2 MiB, a 3 M-event summary mapped 2 MiB more of the file at
/// its peak once the parser sped up (15.6 against 13.7 MiB of file pages,
/// medians of 10), and with 1 MiB 14.1, at the same speed.
const RELEASE_STEP: usize = 1 << 20;

/// Bytes past the reader whose pages are kept mapped ahead of it: two of the
/// steps at which a parser tells its progress (`pickle::Parser::over_bytes`),
/// so that the pager keeps ahead of it between two.
const MAP_AHEAD: usize = 4 << 20;

const PAGE: usize = 4096;

impl Mapped {
    /// The file's bytes.
    #[cfg(test)]
    fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Runs `read` over the file's bytes with a thread beside it that pages
    /// for the reader: `read` tells it how many bytes from the start it has
    /// consumed (through the function it is given), and the thread maps the
    /// pages just ahead of that and hands back those behind it (see
    /// [`Mapped::page`]). Mapping each page at the reader's first touch of
    /// it, and unmapping pages, would otherwise cost the reader, which bounds
    /// a snapshot's parse: on a 3 M-event snapshot, a tenth of its time, in
    /// the kernel.
    pub fn read_paged<T>(&self, read: impl FnOnce(&[u8], &dyn Fn(u64)) -> T) -> T {
        std::thread::scope(|scope| {
            let (consumed, positions) = std::sync::mpsc::channel();
            // Without a thread to be had, the pager is not there: the reader
            // maps its pages at first touch and they stay mapped to the end,
            // as a plain mapping's would.
            let _ = std::thread::Builder::new().spawn_scoped(scope, || self.page(positions));
            read(&self.map, &|bytes| {
                // Fails only without a pager; nothing is lost.
                let _ = consumed.send(bytes);
            })
            // `consumed` is dropped here, which ends the pager.
        })
    }

    /// The pager of [`Mapped::read_paged`], until `positions` closes: from
    /// each position the reader reached (the latest of those waiting), maps
    /// the next `MAP_AHEAD` bytes, and, once `RELEASE_STEP` bytes have passed
    /// since the last time, hands back the pages before it. Those leave this
    /// process's resident set, so a parse of a 400 MB pickle does not hold
    /// 400 MB of pages; they stay in the page cache, shared, and a later read
    /// finds them there. Returns how many bytes from the start were handed
    /// back.
    fn page(&self, positions: std::sync::mpsc::Receiver<u64>) -> usize {
        let len = self.map.len();
        let (mut released, mut mapped) = (0, 0);
        self.map_ahead(&mut mapped, 0);
        while let Ok(mut at) = positions.recv() {
            while let Ok(later) = positions.try_recv() {
                at = later;
            }
            let at = (at as usize).min(len);
            let upto = at / PAGE * PAGE;
            if upto >= released + RELEASE_STEP {
                #[cfg(unix)]
                // SAFETY: the mapping is shared and read-only, so MADV_DONTNEED
                // only drops page-table entries: a later access reads the same
                // file bytes back from the page cache, and so does an access
                // under way (the reader is past the range, but the snapshot's
                // read-ahead thread, overtaken, may still read in it). Nothing
                // writes through this mapping.
                unsafe {
                    let _ = self.map.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        released,
                        upto - released,
                    );
                }
                released = upto;
            }
            self.map_ahead(&mut mapped, at);
        }
        released
    }

    // Maps the pages from `mapped` up to `MAP_AHEAD` bytes past `at`, if
    // that is further, and moves `mapped` there. Where the kernel cannot
    // (before Linux 5.14, or another system), the reader maps them at its
    // first touch, as it would without this.
    fn map_ahead(&self, mapped: &mut usize, at: usize) {
        let want = (at + MAP_AHEAD).min(self.map.len());
        if want <= *mapped {
            return;
        }
        #[cfg(target_os = "linux")]
        {
            let from = *mapped / PAGE * PAGE;
            let _ = self
                .map
                .advise_range(memmap2::Advice::PopulateRead, from, want - from);
        }
        *mapped = want;
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
        Some(Mapped { map })
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
        let (consumed, positions) = std::sync::mpsc::channel();
        for at in [
            10,
            RELEASE_STEP + 7,
            2 * RELEASE_STEP + 4097,
            content.len() * 2,
        ] {
            consumed.send(at as u64).unwrap();
        }
        drop(consumed);
        assert_eq!(mapped.page(positions), content.len() / 4096 * 4096);
        assert_eq!(mapped.bytes(), &content[..]);
        // Through a reader, each position read as it is given.
        let seen = mapped.read_paged(|bytes, consumed| {
            for at in (0..=bytes.len()).step_by(RELEASE_STEP / 2) {
                consumed(at as u64);
                assert_eq!(bytes[at..], content[at..]);
            }
            bytes.len()
        });
        assert_eq!(seen, content.len());
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
