//! [`SlowDisk`]: an output that takes bytes no faster than a slow disk, for
//! tests and benchmarks of a recording that runs ahead of its output.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most bytes one write takes: a longer write is split, as a disk
/// completes a large write piece by piece (a process killed during it
/// leaves the pieces written).
const WRITE_PIECE: usize = 4096;

/// The longest a write sleeps before it looks at the rate again (so that
/// [`SlowDisk::unthrottle`] takes effect at once).
const SLEEP_SLICE: Duration = Duration::from_millis(1);

/// An in-memory output that takes at most `bytes_per_second`: each write
/// sleeps as long as writing its bytes at that rate takes. Clones share the
/// bytes, which can be read while a recorder writes them: what a process
/// killed at that moment would have left on disk.
#[derive(Clone, Debug)]
pub struct SlowDisk {
    bytes: Arc<Mutex<Vec<u8>>>,
    /// Bytes per second; 0: as fast as memory.
    rate: Arc<AtomicU64>,
}

impl SlowDisk {
    /// A disk that writes `bytes_per_second` (0: unthrottled).
    pub fn new(bytes_per_second: u64) -> Self {
        SlowDisk {
            bytes: Arc::default(),
            rate: Arc::new(AtomicU64::new(bytes_per_second)),
        }
    }

    /// From now on, writes take no time (a test's recording can then finish
    /// at once).
    pub fn unthrottle(&self) {
        self.rate.store(0, Ordering::Relaxed);
    }

    /// The bytes written so far.
    pub fn bytes(&self) -> Vec<u8> {
        self.bytes.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How many bytes were written so far.
    pub fn len(&self) -> usize {
        self.bytes.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Write for SlowDisk {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let piece = &buf[..buf.len().min(WRITE_PIECE)];
        let start = Instant::now();
        loop {
            let rate = self.rate.load(Ordering::Relaxed);
            if rate == 0 {
                break;
            }
            let due = Duration::from_secs_f64(piece.len() as f64 / rate as f64);
            let left = due.saturating_sub(start.elapsed());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(SLEEP_SLICE));
        }
        self.bytes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(piece);
        Ok(piece.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_take_the_time_of_the_rate_until_unthrottled() {
        let mut disk = SlowDisk::new(100_000);
        let start = Instant::now();
        disk.write_all(&[7; 2000]).unwrap();
        // 2,000 bytes at 100 kB/s: 20 ms at least.
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert_eq!(disk.len(), 2000);
        let n = disk.write(&[1; 10_000]).unwrap();
        assert_eq!(n, WRITE_PIECE, "a long write is taken piece by piece");
        disk.unthrottle();
        let start = Instant::now();
        disk.write_all(&[2; 1 << 20]).unwrap();
        // A megabyte at 100 kB/s would take 10 s.
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(disk.bytes().len(), 2000 + WRITE_PIECE + (1 << 20));
    }
}
