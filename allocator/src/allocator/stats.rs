//! Counters in the shape of `torch.cuda.memory_stats()`.

/// One statistic: its current value, its peak, and running totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    /// The value now.
    pub current: u64,
    /// The highest value reached.
    pub peak: u64,
    /// The sum of all increases.
    pub allocated: u64,
    /// The sum of all decreases.
    pub freed: u64,
}

impl Stat {
    #[inline]
    pub(crate) fn increase(&mut self, amount: u64) {
        self.current += amount;
        self.peak = self.peak.max(self.current);
        self.allocated += amount;
    }

    #[inline]
    pub(crate) fn decrease(&mut self, amount: u64) {
        debug_assert!(self.current >= amount, "allocator statistic went negative");
        self.current -= amount;
        self.freed += amount;
    }
}

/// A statistic for all pools together and for each pool alone, like PyTorch's
/// `all` / `small_pool` / `large_pool`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatArray {
    /// Both pools.
    pub all: Stat,
    /// The small pool (requests of at most 1 MiB).
    pub small_pool: Stat,
    /// The large pool.
    pub large_pool: Stat,
}

impl StatArray {
    #[inline]
    pub(crate) fn increase(&mut self, small: bool, amount: u64) {
        self.all.increase(amount);
        self.pool(small).increase(amount);
    }

    #[inline]
    pub(crate) fn decrease(&mut self, small: bool, amount: u64) {
        self.all.decrease(amount);
        self.pool(small).decrease(amount);
    }

    #[inline]
    fn pool(&mut self, small: bool) -> &mut Stat {
        if small {
            &mut self.small_pool
        } else {
            &mut self.large_pool
        }
    }
}

/// The allocator's statistics, named as in `torch.cuda.memory_stats()`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocatorStats {
    /// Blocks handed to callers and not yet freed (`allocation`).
    pub allocation: StatArray,
    /// Segments reserved from the device (`segment`); expandable segments
    /// count once each, however many pages they map.
    pub segment: StatArray,
    /// Blocks allocated or waiting for other streams' uses (`active`).
    pub active: StatArray,
    /// Bytes in allocated blocks (`allocated_bytes`).
    pub allocated_bytes: StatArray,
    /// Bytes reserved from the device, mapped pages included (`reserved_bytes`).
    pub reserved_bytes: StatArray,
    /// Bytes in active blocks (`active_bytes`).
    pub active_bytes: StatArray,
    /// Bytes the callers asked for in active blocks (`requested_bytes`).
    pub requested_bytes: StatArray,
    /// Allocations that had to release cached memory and retry (`num_alloc_retries`).
    pub num_alloc_retries: u64,
    /// Allocations that failed (`num_ooms`).
    pub num_ooms: u64,
    /// Times every stream's pending work was waited for (`num_sync_all_streams`).
    pub num_sync_all_streams: u64,
    /// Segment allocations and page mappings (`num_device_alloc`).
    pub num_device_alloc: u64,
    /// Segment frees and page unmappings (`num_device_free`).
    pub num_device_free: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_survives_decrease() {
        let mut s = StatArray::default();
        s.increase(true, 10);
        s.increase(false, 5);
        s.decrease(true, 10);
        assert_eq!(s.all.current, 5);
        assert_eq!(s.all.peak, 15);
        assert_eq!(s.small_pool.peak, 10);
        assert_eq!(s.small_pool.freed, 10);
        assert_eq!(s.large_pool.current, 5);
    }
}
