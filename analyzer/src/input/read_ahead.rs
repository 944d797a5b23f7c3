//! Decompressing an input on a thread of its own, ahead of the thread that
//! parses it: the snapshot parser is the critical path of a snapshot's
//! analysis, and inflating xz, gzip or zstd need not be on it. (A plain file
//! is read directly: the copy a block costs here is what reading it costs.)

use std::io::{self, Read};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

/// Bytes read at a time: a few per megabyte of parsing, so the hand-over
/// costs nothing beside the reading.
const BLOCK: usize = 2 << 20;
/// Blocks read ahead of the parser: enough to ride out an uneven reader
/// (a decompressor), few enough to bound the memory.
const AHEAD: usize = 2;

/// A buffer of `BLOCK` bytes, its first `len` filled. Its bytes stay
/// initialized from one use to the next.
struct Block {
    bytes: Vec<u8>,
    len: usize,
}

/// A reader whose bytes are read by a thread of its own, a few blocks ahead.
pub struct ReadAhead {
    blocks: Receiver<io::Result<Block>>,
    spare: SyncSender<Block>,
    block: Block,
    pos: usize,
    reader: Option<JoinHandle<()>>,
    done: bool,
}

impl ReadAhead {
    /// Starts reading `inner` on a thread of its own.
    pub fn new(mut inner: impl Read + Send + 'static) -> ReadAhead {
        let (tx, blocks) = sync_channel(AHEAD);
        // Blocks the parser is done with come back to be filled again, so the
        // memory is touched once rather than once per block.
        let (spare, spares) = sync_channel::<Block>(AHEAD + 1);
        let reader = std::thread::spawn(move || {
            loop {
                let mut block = spares.try_recv().unwrap_or_else(|_| Block {
                    bytes: vec![0; BLOCK],
                    len: 0,
                });
                block.bytes.resize(BLOCK, 0);
                block.len = 0;
                let failure = loop {
                    match inner.read(&mut block.bytes[block.len..]) {
                        Ok(0) => break None,
                        Ok(n) => {
                            block.len += n;
                            if block.len == BLOCK {
                                break None;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => break Some(e),
                    }
                };
                // What was read before an error is the input's too.
                let end = block.len < BLOCK;
                if block.len > 0 && tx.send(Ok(block)).is_err() {
                    return; // The parser stopped early.
                }
                if let Some(e) = failure {
                    let _ = tx.send(Err(e));
                    return;
                }
                if end {
                    return;
                }
            }
        });
        ReadAhead {
            blocks,
            spare,
            block: Block {
                bytes: Vec::new(),
                len: 0,
            },
            pos: 0,
            reader: Some(reader),
            done: false,
        }
    }

    /// The next block, or `false` at the end of the input.
    fn next_block(&mut self) -> io::Result<bool> {
        match self.blocks.recv() {
            Ok(Ok(block)) => {
                let spent = std::mem::replace(&mut self.block, block);
                self.pos = 0;
                let _ = self.spare.try_send(spent);
                Ok(true)
            }
            Ok(Err(e)) => {
                self.done = true;
                Err(e)
            }
            Err(_) => {
                self.done = true;
                // The reader ended: at the end of the input, or by panicking,
                // which must not pass for the end.
                match self.reader.take().map(JoinHandle::join) {
                    Some(Err(_)) => Err(io::Error::other("the thread reading the input failed")),
                    _ => Ok(false),
                }
            }
        }
    }
}

impl Read for ReadAhead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.block.len {
            if self.done || !self.next_block()? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.block.len - self.pos);
        buf[..n].copy_from_slice(&self.block.bytes[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_inner_reader_holds() {
        let data: Vec<u8> = (0..5 * BLOCK + 12345)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let mut out = Vec::new();
        ReadAhead::new(io::Cursor::new(data.clone()))
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, data);
        let mut empty = Vec::new();
        ReadAhead::new(io::empty()).read_to_end(&mut empty).unwrap();
        assert!(empty.is_empty());
    }

    #[test]
    fn errors_and_failures_of_the_reader_are_errors() {
        struct Failing(usize);
        impl Read for Failing {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0 == 0 {
                    return Err(io::Error::other("disk on fire"));
                }
                let n = buf.len().min(self.0);
                buf[..n].fill(1);
                self.0 -= n;
                Ok(n)
            }
        }
        let mut out = Vec::new();
        let e = ReadAhead::new(Failing(3 * BLOCK + 5))
            .read_to_end(&mut out)
            .unwrap_err();
        assert_eq!(e.to_string(), "disk on fire");
        assert_eq!(out.len(), 3 * BLOCK + 5, "what was read before the error");

        struct Panicking;
        impl Read for Panicking {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                panic!("a decompressor bug");
            }
        }
        let e = ReadAhead::new(Panicking)
            .read_to_end(&mut Vec::new())
            .unwrap_err();
        assert!(e.to_string().contains("failed"), "{e}");
    }
}
