//! A device that only keeps books: deterministic addresses, enforced capacity.

use super::{DeviceError, DeviceMemory};

const SEGMENT_ALIGN: u64 = 2 << 20;
// Whole allocations and reserved ranges come from separate regions so their
// addresses never meet, as on a real device.
const ALLOC_BASE: u64 = 0x7f00_0000_0000;
const RESERVE_BASE: u64 = 0x0003_0000_0000;

/// A simulated device: addresses are handed out in increasing order (2 MiB
/// aligned, never reused), and `capacity` bounds the bytes allocated plus
/// mapped at any time.
#[derive(Clone, Debug)]
pub struct SimulatedDevice {
    index: u32,
    name: String,
    capacity: u64,
    used: u64,
    next_alloc: u64,
    next_reserve: u64,
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
        }
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
        let addr = next.next_multiple_of(align);
        let end = addr
            .checked_add(size)
            .ok_or_else(|| DeviceError::Driver("simulated address space exhausted".into()))?;
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
        Self::bump(&mut self.next_alloc, size, SEGMENT_ALIGN).inspect_err(|_| self.used -= size)
    }

    fn free(&mut self, _addr: u64, size: u64) {
        self.used -= size.min(self.used);
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
}
