//! A writer that counts the bytes through it: the trace's output, which the
//! writer thread and a bounded recording's parts (`ring`) both measure. Its
//! own module, below both, so that neither reaches into the other for it.

use std::io::{self, Write};

/// A writer that counts the bytes through it.
pub(crate) struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W> Counting<W> {
    pub fn new(inner: W) -> Self {
        Counting { inner, bytes: 0 }
    }

    /// The bytes written through it (and counted in by [`add_bytes`](Self::add_bytes)).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Counts bytes written elsewhere in (those of an output before it).
    pub fn add_bytes(&mut self, bytes: u64) {
        self.bytes += bytes;
    }
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
