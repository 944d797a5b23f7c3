//! The memory the caching allocator carves blocks from.
//!
//! [`DeviceMemory`] has the two ways CUDA hands out memory: whole allocations
//! (`cudaMalloc`/`cudaFree`), and a reserved virtual range whose pages are
//! backed on demand (`cuMemAddressReserve`, `cuMemCreate` + `cuMemMap`), which
//! expandable segments use. [`SimulatedDevice`] implements it for tests and
//! offline simulation; `CudaDevice` (feature `cuda`) for a real GPU.

#[cfg(feature = "cuda")]
mod cuda;
mod simulated;

#[cfg(feature = "cuda")]
pub use cuda::CudaDevice;
pub use simulated::SimulatedDevice;

use thiserror::Error;

/// A device call that failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DeviceError {
    /// Not enough device memory; the allocator reacts by releasing cached
    /// memory and retrying.
    #[error("device out of memory")]
    OutOfMemory,
    /// Any other failure (a driver error): the allocator passes it on.
    #[error("device error: {0}")]
    Driver(String),
}

/// Device memory as the caching allocator needs it.
///
/// Releasing calls cannot fail from the allocator's point of view (as
/// `cudaFree` failing aborts PyTorch); an implementation reports such failures
/// through its own channel.
pub trait DeviceMemory {
    /// The device index, as events carry it.
    fn index(&self) -> u32;
    /// A human-readable name, e.g. `NVIDIA H200` or `simulated`.
    fn name(&self) -> &str;
    /// Total memory in bytes.
    fn total_memory(&self) -> u64;
    /// Memory not in use, in bytes, as the driver reports it (`cudaMemGetInfo`).
    fn free_memory(&self) -> u64;
    /// Allocates `size` bytes (a segment) and returns its address (`cudaMalloc`).
    fn allocate(&mut self, size: u64) -> Result<u64, DeviceError>;
    /// Returns a segment obtained from [`allocate`](Self::allocate) (`cudaFree`).
    fn free(&mut self, addr: u64, size: u64);
    /// Reserves `size` bytes of virtual address space, aligned to
    /// `page_size`, with no memory behind it (`cuMemAddressReserve`).
    fn reserve_address_range(&mut self, size: u64, page_size: u64) -> Result<u64, DeviceError>;
    /// Releases a range from [`reserve_address_range`](Self::reserve_address_range);
    /// none of its pages are mapped any more (`cuMemAddressFree`).
    fn release_address_range(&mut self, addr: u64, size: u64);
    /// Backs `[addr, addr + size)` of a reserved range with memory, one
    /// physical allocation of `page_size` bytes per page (`cuMemCreate`,
    /// `cuMemMap`, `cuMemSetAccess`). All or nothing: on failure no page of
    /// the range stays mapped.
    fn map_pages(&mut self, addr: u64, size: u64, page_size: u64) -> Result<(), DeviceError>;
    /// Unmaps and releases the pages of `[addr, addr + size)` (`cuMemUnmap`,
    /// `cuMemRelease`).
    fn unmap_pages(&mut self, addr: u64, size: u64, page_size: u64);
}
