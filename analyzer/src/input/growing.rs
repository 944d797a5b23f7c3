//! A byte buffer that one thread appends to while others read it from the start:
//! a snapshot's converted trace, read by the analyses while it is being written.

use std::io::{self, Read, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The buffer. Written through [`GrowingWriter`], read through [`GrowingReader`]s,
/// each of which sees every byte from the first.
#[derive(Debug, Default)]
pub struct GrowingBuffer {
    state: Mutex<State>,
    grew: Condvar,
}

#[derive(Debug, Default)]
struct State {
    bytes: Vec<u8>,
    // Set once the writer is done: nothing more will come.
    end: Option<End>,
}

#[derive(Clone, Debug)]
enum End {
    Complete,
    // The writer failed: readers get this error after the bytes written before it.
    Failed(String),
}

impl GrowingBuffer {
    /// An empty buffer with room for `capacity` bytes, and its writer.
    pub fn new(capacity: usize) -> (Arc<GrowingBuffer>, GrowingWriter) {
        let buffer = Arc::new(GrowingBuffer {
            state: Mutex::new(State {
                bytes: Vec::with_capacity(capacity),
                end: None,
            }),
            grew: Condvar::new(),
        });
        let writer = GrowingWriter {
            buffer: buffer.clone(),
            done: false,
        };
        (buffer, writer)
    }

    /// A reader from the first byte.
    pub fn reader(self: &Arc<Self>) -> GrowingReader {
        GrowingReader {
            buffer: self.clone(),
            pos: 0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A writer that panicked has marked the end (see `GrowingWriter::drop`): the
        // bytes are still good.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn end(&self, end: End) {
        let mut state = self.lock();
        if state.end.is_none() {
            state.end = Some(end);
        }
        self.grew.notify_all();
    }
}

/// Appends to a [`GrowingBuffer`]. Dropped without [`GrowingWriter::finish`] or
/// [`GrowingWriter::fail`] (a panic), it ends the buffer with an error, so that readers
/// never wait forever.
#[derive(Debug)]
pub struct GrowingWriter {
    buffer: Arc<GrowingBuffer>,
    done: bool,
}

impl GrowingWriter {
    /// Ends the buffer: readers get end-of-file after the last byte.
    pub fn finish(mut self) {
        self.done = true;
        self.buffer.end(End::Complete);
    }

    /// Ends the buffer with an error, which readers get after the last byte.
    pub fn fail(mut self, message: String) {
        self.done = true;
        self.buffer.end(End::Failed(message));
    }
}

impl Write for GrowingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut state = self.buffer.lock();
        state.bytes.extend_from_slice(buf);
        drop(state);
        self.buffer.grew.notify_all();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for GrowingWriter {
    fn drop(&mut self) {
        if !self.done {
            self.buffer
                .end(End::Failed("the conversion stopped unexpectedly".into()));
        }
    }
}

/// Reads a [`GrowingBuffer`] from its first byte, waiting for bytes not yet written.
#[derive(Debug)]
pub struct GrowingReader {
    buffer: Arc<GrowingBuffer>,
    pos: usize,
}

impl Read for GrowingReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut state = self.buffer.lock();
        while self.pos >= state.bytes.len() && state.end.is_none() {
            state = self
                .buffer
                .grew
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
        let available = &state.bytes[self.pos.min(state.bytes.len())..];
        if available.is_empty() {
            return match &state.end {
                Some(End::Failed(message)) => Err(io::Error::other(message.clone())),
                _ => Ok(0),
            };
        }
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_see_every_byte_while_it_is_written() {
        let (buffer, mut writer) = GrowingBuffer::new(0);
        let mut early = buffer.reader();
        let reading = std::thread::spawn(move || {
            let mut out = Vec::new();
            early.read_to_end(&mut out).map(|_| out)
        });
        for i in 0..1000u32 {
            writer.write_all(&i.to_le_bytes()).unwrap();
        }
        writer.finish();
        let expected: Vec<u8> = (0..1000u32).flat_map(|i| i.to_le_bytes()).collect();
        assert_eq!(reading.join().unwrap().unwrap(), expected);
        let mut late = Vec::new();
        buffer.reader().read_to_end(&mut late).unwrap();
        assert_eq!(late, expected);
    }

    #[test]
    fn a_failed_or_dropped_writer_ends_the_readers_with_an_error() {
        let (buffer, mut writer) = GrowingBuffer::new(0);
        writer.write_all(b"abc").unwrap();
        writer.fail("disk on fire".into());
        let mut out = Vec::new();
        let e = buffer.reader().read_to_end(&mut out).unwrap_err();
        assert_eq!(e.to_string(), "disk on fire");
        assert_eq!(out, b"abc");

        let (buffer, writer) = GrowingBuffer::new(0);
        drop(writer);
        let e = buffer.reader().read_to_end(&mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("stopped"), "{e}");
    }
}
