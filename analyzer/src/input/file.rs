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
