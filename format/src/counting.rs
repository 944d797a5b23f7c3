//! [`CountingWriter`]: a writer that counts the bytes through it. A trace's
//! size is what its producers report (the recorder's summary, a bounded
//! recording's parts, the synthetic workload's), and they all measure it
//! here, on the way out, rather than asking the file afterwards.

use std::io::{self, Write};

/// A writer that counts the bytes written through it.
#[derive(Debug)]
pub struct CountingWriter<W> {
    inner: W,
    bytes: u64,
}

impl<W> CountingWriter<W> {
    /// A count of 0 over `inner`.
    pub fn new(inner: W) -> Self {
        CountingWriter { inner, bytes: 0 }
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

impl<W: Write> Write for CountingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_goes_through_and_what_is_added() {
        let mut w = CountingWriter::new(Vec::new());
        w.write_all(b"vramtrace").unwrap();
        w.add_bytes(7);
        assert_eq!(w.bytes(), 16);
        assert_eq!(w.inner, b"vramtrace");
    }
}
