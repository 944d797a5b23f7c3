//! The input, read into a buffer of our own (or lent whole, when it is in memory).

use super::PickleError;
use std::io::{self, Read};

// The input, buffered by hand: the opcode loop reads a few bytes at a time and must
// not pay a trait call per byte.
pub(super) struct Source<'p, R> {
    pub(super) inner: R,
    pub(super) buf: Buf<'p>,
    pub(super) pos: usize,
    pub(super) end: usize,
    pub(super) base: u64,
    pub(super) eof: bool,
    pub(super) progress: &'p dyn Fn(u64),
}

// The bytes the opcode loop reads: its own buffer, refilled from a reader, or the
// whole pickle lent by the caller (a mapped file, bytes in memory), read where it
// lies with no copy. Over a lent pickle, `end` still advances a window at a time,
// so that progress is told as often as with a reader and the lookahead checks
// stay the same.
pub(super) enum Buf<'p> {
    Owned(Vec<u8>),
    Lent(&'p [u8]),
}

impl std::ops::Deref for Buf<'_> {
    type Target = [u8];

    #[inline(always)]
    fn deref(&self) -> &[u8] {
        match self {
            Buf::Owned(v) => v,
            Buf::Lent(s) => s,
        }
    }
}

// Over twice the `BufReader` that `input::decompress` puts in front of a file, so
// that each read asks for more than its capacity and goes around it, straight into
// this buffer, instead of being copied through it.
pub(super) const BUF_SIZE: usize = 4 << 20;
// Bytes kept buffered ahead of a dict offered to `Hook::decode_dict`: trace entries
// are a few hundred bytes at most.
pub(super) const LOOKAHEAD: usize = 1 << 16;

impl<R: Read> Source<'_, R> {
    pub(super) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    #[inline(always)]
    pub(super) fn need(&mut self, n: usize, what: &'static str) -> Result<(), PickleError> {
        if self.end - self.pos < n {
            self.fill(n, what)?;
        }
        Ok(())
    }

    #[cold]
    pub(super) fn fill(&mut self, n: usize, what: &'static str) -> Result<(), PickleError> {
        let buf = match &mut self.buf {
            Buf::Owned(buf) => buf,
            Buf::Lent(all) => {
                // Nothing to copy: the window moves on. Progress hears the bytes
                // consumed, which the lender may drop from memory (see
                // `Parser::over_bytes`).
                (self.progress)(self.pos as u64);
                let want = n.max(BUF_SIZE / 2);
                self.end = all.len().min(self.pos.saturating_add(want).max(self.end));
                self.eof = self.end == all.len();
                if self.end - self.pos < n {
                    return Err(PickleError::Truncated {
                        offset: self.end as u64,
                        what,
                    });
                }
                return Ok(());
            }
        };
        buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        if buf.len() < BUF_SIZE {
            buf.resize(BUF_SIZE, 0);
        }
        // Fill at least half the buffer so refills (and progress calls) stay rare even
        // when the reader hands out small pieces.
        let target = n.max(buf.len() / 2);
        while self.end < target && !self.eof {
            if self.end == buf.len() {
                // A long string: the buffer grows as its bytes arrive, never to a
                // length the input has not borne out (a 14-byte pickle may claim
                // a string of 512 GiB).
                let grown = buf.len().saturating_mul(2).min(target);
                buf.resize(grown, 0);
            }
            match self.inner.read(&mut buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(k) => self.end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(PickleError::Io {
                        offset: self.base + self.end as u64,
                        source,
                    });
                }
            }
        }
        (self.progress)(self.base + self.end as u64);
        if self.end < n {
            return Err(PickleError::Truncated {
                offset: self.base + self.end as u64,
                what,
            });
        }
        Ok(())
    }

    // Buffers at least `n` bytes ahead if the input has them; a shorter input is not
    // an error here.
    #[cold]
    pub(super) fn top_up(&mut self, n: usize) -> Result<(), PickleError> {
        match self.fill(n, "") {
            Err(PickleError::Truncated { .. }) => Ok(()),
            r => r,
        }
    }

    #[inline(always)]
    pub(super) fn u8(&mut self) -> u8 {
        let b = self.buf[self.pos];
        self.pos += 1;
        b
    }

    #[inline(always)]
    pub(super) fn array<const N: usize>(&mut self) -> [u8; N] {
        let a: [u8; N] = self.buf[self.pos..self.pos + N].try_into().unwrap();
        self.pos += N;
        a
    }

    #[inline(always)]
    pub(super) fn bytes(&mut self, n: usize) -> &[u8] {
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        s
    }
}
