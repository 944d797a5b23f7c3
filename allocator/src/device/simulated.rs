//! A device that only keeps books: deterministic addresses, enforced capacity.

use super::{DeviceError, DeviceMemory};
use std::collections::BTreeMap;

const SEGMENT_ALIGN: u64 = 2 << 20;
// Whole allocations and reserved ranges come from separate regions so their
// addresses never meet, as on a real device.
const ALLOC_BASE: u64 = 0x7f00_0000_0000;
const RESERVE_BASE: u64 = 0x0003_0000_0000;

/// A simulated device: addresses are handed out in increasing order (2 MiB
/// aligned, never reused), or as a recording had them (see
/// [`SimulatedDevice::with_recorded_addresses`]), and `capacity` bounds the
/// bytes allocated plus mapped at any time.
#[derive(Clone, Debug)]
pub struct SimulatedDevice {
    index: u32,
    name: String,
    capacity: u64,
    used: u64,
    next_alloc: u64,
    next_reserve: u64,
    recorded: RecordedAddresses,
}

/// The addresses a recording's allocations got, handed out again while the
/// allocations asked for are the recorded ones.
#[derive(Clone, Debug, Default)]
struct RecordedAddresses {
    /// (size, address) of each recorded allocation, in order.
    allocations: Vec<(u64, u64)>,
    /// How many of them were handed out.
    next: usize,
    /// Allocations live now, by address, while addresses are replayed.
    live: BTreeMap<u64, u64>,
}

impl RecordedAddresses {
    /// The recorded address of the next allocation, if it has this size and
    /// its range is free; from the first one that does not, none.
    fn take(&mut self, size: u64) -> Option<u64> {
        let &(recorded_size, addr) = self.allocations.get(self.next)?;
        let end = addr.checked_add(size)?;
        let overlaps = self
            .live
            .range(..end)
            .next_back()
            .is_some_and(|(&a, &s)| a + s > addr);
        if recorded_size != size || overlaps {
            // The run went another way: the rest of the recording says
            // nothing about it.
            *self = RecordedAddresses::default();
            return None;
        }
        self.next += 1;
        self.live.insert(addr, size);
        Some(addr)
    }
}

impl SimulatedDevice {
    /// A device 0 with `capacity_bytes` of memory.
    pub fn new(capacity_bytes: u64) -> Self {
        SimulatedDevice {
            index: 0,
            name: "simulated".to_string(),
            capacity: capacity_bytes,
            used: 0,
            next_alloc: ALLOC_BASE,
            next_reserve: RESERVE_BASE,
            recorded: RecordedAddresses::default(),
        }
    }

    /// The same device handing out the addresses a recording's allocations
    /// (`cudaMalloc`) got, given as (size, address) in order, for as long as
    /// the allocations asked for have the recorded sizes; from the first one
    /// that differs (or would overlap a live one), addresses are its own,
    /// above every recorded one.
    ///
    /// A caching allocator picks among free blocks of one size by address,
    /// so a simulation only follows a recording block for block when its
    /// segments lie in the recorded order.
    pub fn with_recorded_addresses(mut self, allocations: Vec<(u64, u64)>) -> Self {
        let top = allocations
            .iter()
            .map(|&(size, addr)| addr.saturating_add(size))
            .max()
            .unwrap_or(0);
        self.next_alloc = self.next_alloc.max(top);
        self.recorded = RecordedAddresses {
            allocations,
            ..Default::default()
        };
        self
    }

    /// A device that never runs out of memory. It reports 1 PiB of total
    /// memory, which sizes the address range of expandable segments.
    pub fn unlimited() -> Self {
        Self::new(1 << 50)
    }

    /// The same device with another index (for multi-device simulations).
    pub fn with_index(mut self, index: u32) -> Self {
        self.index = index;
        self
    }

    /// Bytes allocated or mapped now.
    pub fn used(&self) -> u64 {
        self.used
    }

    fn take(&mut self, size: u64) -> Result<(), DeviceError> {
        if size > self.capacity - self.used {
            return Err(DeviceError::OutOfMemory);
        }
        self.used += size;
        Ok(())
    }

    fn bump(next: &mut u64, size: u64, align: u64) -> Result<u64, DeviceError> {
        let exhausted = || DeviceError::Driver("simulated address space exhausted".into());
        // A recording's addresses may lie anywhere, the top of the address
        // space included.
        let addr = next.checked_next_multiple_of(align).ok_or_else(exhausted)?;
        let end = addr.checked_add(size).ok_or_else(exhausted)?;
        *next = end;
        Ok(addr)
    }
}

impl DeviceMemory for SimulatedDevice {
    fn index(&self) -> u32 {
        self.index
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn total_memory(&self) -> u64 {
        self.capacity
    }

    fn free_memory(&self) -> u64 {
        self.capacity - self.used
    }

    fn allocate(&mut self, size: u64) -> Result<u64, DeviceError> {
        self.take(size)?;
        if let Some(addr) = self.recorded.take(size) {
            return Ok(addr);
        }
        Self::bump(&mut self.next_alloc, size, SEGMENT_ALIGN).inspect_err(|_| self.used -= size)
    }

    fn free(&mut self, addr: u64, size: u64) {
        self.used -= size.min(self.used);
        self.recorded.live.remove(&addr);
    }

    fn reserve_address_range(&mut self, size: u64, page_size: u64) -> Result<u64, DeviceError> {
        Self::bump(&mut self.next_reserve, size, page_size.max(SEGMENT_ALIGN))
    }

    fn release_address_range(&mut self, _addr: u64, _size: u64) {}

    fn map_pages(&mut self, _addr: u64, size: u64, _page_size: u64) -> Result<(), DeviceError> {
        self.take(size)
    }

    fn unmap_pages(&mut self, _addr: u64, size: u64, _page_size: u64) {
        self.used -= size.min(self.used);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_is_enforced_and_addresses_are_aligned() {
        let mut d = SimulatedDevice::new(10 << 20);
        let a = d.allocate(3 << 20).unwrap();
        let b = d.allocate(2 << 20).unwrap();
        assert_eq!(a % SEGMENT_ALIGN, 0);
        assert_eq!(b % SEGMENT_ALIGN, 0);
        assert!(b >= a + (3 << 20));
        assert_eq!(d.allocate(6 << 20), Err(DeviceError::OutOfMemory));
        d.free(a, 3 << 20);
        assert_eq!(d.free_memory(), 8 << 20);
        let r = d.reserve_address_range(1 << 30, 20 << 20).unwrap();
        assert_eq!(r % (20 << 20), 0);
        d.map_pages(r, 8 << 20, 2 << 20).unwrap();
        assert_eq!(
            d.map_pages(r + (8 << 20), 2 << 20, 2 << 20),
            Err(DeviceError::OutOfMemory)
        );
        d.unmap_pages(r, 8 << 20, 2 << 20);
        assert_eq!(d.used(), 2 << 20);
    }

    #[test]
    fn recorded_addresses_are_replayed_until_the_run_differs() {
        let recorded = vec![
            (2 << 20, 0x9000_0000),
            (20 << 20, 0x1000_0000),
            (2 << 20, 0x9000_0000),
        ];
        let mut d = SimulatedDevice::new(1 << 30).with_recorded_addresses(recorded.clone());
        assert_eq!(d.allocate(2 << 20), Ok(0x9000_0000));
        assert_eq!(d.allocate(20 << 20), Ok(0x1000_0000));
        d.free(0x9000_0000, 2 << 20);
        // Freed, its address can come back.
        assert_eq!(d.allocate(2 << 20), Ok(0x9000_0000));
        // Past the recording: above every recorded address.
        assert!(d.allocate(4 << 20).unwrap() >= ALLOC_BASE);

        // A size other than the recorded one ends the replay.
        let mut d = SimulatedDevice::new(1 << 30).with_recorded_addresses(recorded.clone());
        let a = d.allocate(4 << 20).unwrap();
        assert!(a >= ALLOC_BASE);
        assert_ne!(d.allocate(20 << 20), Ok(0x1000_0000));

        // So does a recorded address still in use here.
        let mut d = SimulatedDevice::new(1 << 30).with_recorded_addresses(recorded);
        d.allocate(2 << 20).unwrap();
        d.allocate(20 << 20).unwrap();
        assert_ne!(d.allocate(2 << 20), Ok(0x9000_0000));
    }
}
