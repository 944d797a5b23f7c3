//! LEB128 varints with zigzag for signed deltas, and a bounds-checked cursor
//! that never panics on damaged input: the codec of the event chunks, public
//! for other compact logs of events (the snapshot importer's).

/// Appends `v` as an unsigned LEB128 varint.
#[inline]
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    // Dictionary indices and stack ids are mostly one or two bytes: those get
    // a single capacity check rather than one per byte.
    if v < 1 << 7 {
        out.push(v as u8);
        return;
    }
    if v < 1 << 14 {
        out.extend_from_slice(&[(v as u8) | 0x80, (v >> 7) as u8]);
        return;
    }
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Maps a signed value to an unsigned one with small magnitudes staying small.
#[inline]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag`].
#[inline]
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// A read position in a byte slice.
#[derive(Clone, Debug)]
pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

/// The cursor ran past its data, or a varint was longer than 10 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfData;

impl<'a> Cursor<'a> {
    /// A cursor at the start of `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Cursor { data, pos: 0 }
    }

    /// Bytes read so far.
    #[cfg(test)]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    /// Reads an unsigned LEB128 varint.
    #[inline(always)]
    pub fn varint(&mut self) -> Result<u64, OutOfData> {
        // Values of up to three bytes are nearly all there are (indices into
        // dictionaries of thousands, stack ids, time deltas of up to a
        // millisecond), so they get branches of their own.
        match self.data.get(self.pos..self.pos + 3) {
            Some(&[b, _, _]) if b < 0x80 => {
                self.pos += 1;
                Ok(b as u64)
            }
            Some(&[b0, b1, _]) if b1 < 0x80 => {
                self.pos += 2;
                Ok((b0 & 0x7f) as u64 | (b1 as u64) << 7)
            }
            Some(&[b0, b1, b2]) if b2 < 0x80 => {
                self.pos += 3;
                Ok((b0 & 0x7f) as u64 | ((b1 & 0x7f) as u64) << 7 | (b2 as u64) << 14)
            }
            _ => self.varint_slow(),
        }
    }

    #[inline(never)]
    fn varint_slow(&mut self) -> Result<u64, OutOfData> {
        let mut value = 0u64;
        for i in 0..10 {
            let b = *self.data.get(self.pos + i).ok_or(OutOfData)?;
            value |= ((b & 0x7f) as u64) << (7 * i);
            if b < 0x80 {
                self.pos += i + 1;
                return Ok(value);
            }
        }
        Err(OutOfData)
    }

    /// Reads one byte.
    #[inline(always)]
    pub fn byte(&mut self) -> Result<u8, OutOfData> {
        let b = *self.data.get(self.pos).ok_or(OutOfData)?;
        self.pos += 1;
        Ok(b)
    }

    /// The next `len` bytes, as a slice of the underlying data.
    pub fn bytes(&mut self, len: usize) -> Result<&'a [u8], OutOfData> {
        let end = self.pos.checked_add(len).ok_or(OutOfData)?;
        let slice = self.data.get(self.pos..end).ok_or(OutOfData)?;
        self.pos = end;
        Ok(slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(values: &[u64]) -> Result<(), TestCaseError> {
        let mut buf = Vec::new();
        for &v in values {
            put(&mut buf, v);
        }
        let mut cur = Cursor::new(&buf);
        for &v in values {
            prop_assert_eq!(cur.varint(), Ok(v));
        }
        prop_assert!(cur.is_empty());
        Ok(())
    }

    proptest! {
        #[test]
        fn varints_round_trip(values in proptest::collection::vec(any::<u64>(), 0..50)) {
            round_trip(&values)?;
        }

        // Values of every length (random u64s are nearly all 10 bytes long), so
        // that each of the reader's inline branches is taken, also near the end
        // of the data, where they fall back to the byte-at-a-time loop.
        #[test]
        fn varints_of_every_length_round_trip(
            values in proptest::collection::vec((any::<u64>(), 0u32..64), 0..50)
        ) {
            let values: Vec<u64> = values.into_iter().map(|(v, shift)| v >> shift).collect();
            round_trip(&values)?;
        }

        #[test]
        fn zigzag_round_trips(v in any::<i64>()) {
            prop_assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    #[test]
    fn overlong_and_short_varints_are_errors() {
        assert_eq!(Cursor::new(&[0xff; 11]).varint(), Err(OutOfData));
        assert_eq!(Cursor::new(&[0x80]).varint(), Err(OutOfData));
        assert_eq!(Cursor::new(&[]).varint(), Err(OutOfData));
    }
}
