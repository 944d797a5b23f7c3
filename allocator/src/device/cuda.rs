//! [`CudaDevice`]: device memory of a real CUDA GPU through the driver API
//! (cudarc, loaded at run time: building needs no CUDA install, running needs
//! the driver's `libcuda.so`).
//!
//! Whole segments come from `cuMemAlloc`/`cuMemFree`, as PyTorch's
//! `cudaMalloc`/`cudaFree`; expandable segments from the virtual memory API
//! (`cuMemAddressReserve`, `cuMemCreate` + `cuMemMap` + `cuMemSetAccess`,
//! `cuMemUnmap` + `cuMemRelease`), as PyTorch's `ExpandableSegment`.
//!
//! Every call runs in the device's primary context (the one the CUDA runtime,
//! and so PyTorch, uses), made current for the duration of the call and the
//! caller's previous context restored after: callers may come from any
//! thread (PyTorch frees from its autograd threads) and need not have set a
//! context up.

use super::{DeviceError, DeviceMemory};
use cudarc::driver::sys;
use std::collections::HashMap;
use std::sync::OnceLock;

/// Checks once per process that the driver library is there and initializes
/// it. Every entry point of this module goes through here first: without a
/// driver, cudarc's first call panics rather than returning an error.
fn driver() -> Result<(), DeviceError> {
    static STATE: OnceLock<Result<(), DeviceError>> = OnceLock::new();
    STATE
        .get_or_init(|| {
            // SAFETY: only tries to open the library; no CUDA call is made.
            if !unsafe { sys::is_culib_present() } {
                return Err(DeviceError::Driver(
                    "the CUDA driver library (libcuda.so) was not found".into(),
                ));
            }
            // A missing symbol in an old driver would panic inside cudarc;
            // turn that into an error too.
            std::panic::catch_unwind(|| {
                // SAFETY: cuInit has no preconditions.
                check(unsafe { sys::cuInit(0) }, "cuInit")
            })
            .unwrap_or_else(|_| {
                Err(DeviceError::Driver(
                    "the CUDA driver library lacks a required function".into(),
                ))
            })
        })
        .clone()
}

/// Maps a driver status to a [`DeviceError`]; `what` names the call.
fn check(status: sys::CUresult, what: &str) -> Result<(), DeviceError> {
    match status {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => Err(DeviceError::OutOfMemory),
        other => Err(DeviceError::Driver(format!("{what} failed: {other:?}"))),
    }
}

/// The primary context handle. A `CUcontext` is a process-wide handle the
/// driver accepts from any thread, so moving it between threads is sound.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Context(sys::CUcontext);

// SAFETY: see `Context`: the handle is not tied to the thread that made it.
unsafe impl Send for Context {}
// SAFETY: as for Send; the handle is only ever copied, never mutated.
unsafe impl Sync for Context {}

/// Makes a context current for its lifetime and restores the caller's after.
struct CurrentGuard {
    previous: Option<sys::CUcontext>,
}

impl CurrentGuard {
    fn enter(ctx: Context) -> Result<Self, DeviceError> {
        let mut current: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `current` is a valid out-pointer.
        check(
            unsafe { sys::cuCtxGetCurrent(&mut current) },
            "cuCtxGetCurrent",
        )?;
        if current == ctx.0 {
            return Ok(CurrentGuard { previous: None });
        }
        // SAFETY: `ctx` is a retained primary context, valid until
        // `CudaDevice` drops (which cannot happen during a call on it).
        check(unsafe { sys::cuCtxSetCurrent(ctx.0) }, "cuCtxSetCurrent")?;
        Ok(CurrentGuard {
            previous: Some(current),
        })
    }
}

impl Drop for CurrentGuard {
    fn drop(&mut self) {
        if let Some(previous) = self.previous {
            // SAFETY: `previous` was current on this thread a moment ago (or
            // null, which unbinds): restoring it is what the caller had.
            unsafe { sys::cuCtxSetCurrent(previous) };
        }
    }
}

/// A CUDA GPU's memory, for the caching allocator, through the driver API:
/// whole segments from `cuMemAlloc`, expandable ones from the virtual memory
/// API, each call in the device's primary context, from any thread.
///
/// Failures of releasing calls (which [`DeviceMemory`] cannot report) are
/// counted and the last one kept: see [`release_errors`](Self::release_errors).
pub struct CudaDevice {
    index: u32,
    name: String,
    total: u64,
    device: sys::CUdevice,
    ctx: Context,
    granularity: u64,
    /// Physical allocation behind each mapped page, by the page's address.
    pages: HashMap<u64, sys::CUmemGenericAllocationHandle>,
    release_errors: u64,
    last_release_error: Option<String>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice")
            .field("index", &self.index)
            .field("name", &self.name)
            .field("total", &self.total)
            .field("granularity", &self.granularity)
            .field("mapped_pages", &self.pages.len())
            .finish()
    }
}

impl CudaDevice {
    /// Opens GPU `index` (the CUDA ordinal, as `torch.device("cuda", index)`)
    /// and retains its primary context.
    ///
    /// Fails with [`DeviceError::Driver`] when there is no driver, no such
    /// device, or the driver refuses; never panics.
    pub fn new(index: u32) -> Result<Self, DeviceError> {
        driver()?;
        std::panic::catch_unwind(|| Self::open(index)).unwrap_or_else(|_| {
            Err(DeviceError::Driver(
                "the CUDA driver library lacks a required function".into(),
            ))
        })
    }

    fn open(index: u32) -> Result<Self, DeviceError> {
        let ordinal = i32::try_from(index)
            .map_err(|_| DeviceError::Driver(format!("no CUDA device {index}")))?;
        let mut count = 0;
        // SAFETY: valid out-pointer; the driver is initialized.
        check(
            unsafe { sys::cuDeviceGetCount(&mut count) },
            "cuDeviceGetCount",
        )?;
        if ordinal >= count {
            return Err(DeviceError::Driver(format!(
                "no CUDA device {index} ({count} present)"
            )));
        }
        let mut device: sys::CUdevice = 0;
        // SAFETY: valid out-pointer, ordinal in range.
        check(
            unsafe { sys::cuDeviceGet(&mut device, ordinal) },
            "cuDeviceGet",
        )?;
        let mut name = [0 as std::ffi::c_char; 256];
        // SAFETY: the buffer holds `len` bytes; the driver NUL-terminates.
        check(
            unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, device) },
            "cuDeviceGetName",
        )?;
        // SAFETY: NUL-terminated by the driver, within the buffer.
        let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mut total = 0usize;
        // SAFETY: valid out-pointer and device.
        check(
            unsafe { sys::cuDeviceTotalMem_v2(&mut total, device) },
            "cuDeviceTotalMem",
        )?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: valid out-pointer and device. Released in Drop.
        check(
            unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, device) },
            "cuDevicePrimaryCtxRetain",
        )?;
        let mut dev = CudaDevice {
            index,
            name,
            total: total as u64,
            device,
            ctx: Context(ctx),
            granularity: 0,
            pages: HashMap::new(),
            release_errors: 0,
            last_release_error: None,
        };
        let prop = dev.allocation_prop();
        let mut granularity = 0usize;
        // SAFETY: valid out-pointer and allocation properties.
        check(
            unsafe {
                sys::cuMemGetAllocationGranularity(
                    &mut granularity,
                    &prop,
                    sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                )
            },
            "cuMemGetAllocationGranularity",
        )?;
        dev.granularity = granularity as u64;
        Ok(dev)
    }

    /// The number of CUDA devices, or the reason there are none usable.
    pub fn count() -> Result<u32, DeviceError> {
        driver()?;
        let mut count = 0;
        // SAFETY: valid out-pointer; the driver is initialized.
        check(
            unsafe { sys::cuDeviceGetCount(&mut count) },
            "cuDeviceGetCount",
        )?;
        Ok(count.max(0) as u32)
    }

    /// The granularity of physical allocations (`cuMemGetAllocationGranularity`,
    /// 2 MiB on current GPUs): expandable-segment pages are multiples of it.
    pub fn granularity(&self) -> u64 {
        self.granularity
    }

    /// How many releasing calls (`cuMemFree`, `cuMemUnmap`, ...) failed, and
    /// the last failure.
    pub fn release_errors(&self) -> (u64, Option<&str>) {
        (self.release_errors, self.last_release_error.as_deref())
    }

    /// Pages mapped now (for tests and diagnostics).
    pub fn mapped_pages(&self) -> usize {
        self.pages.len()
    }

    fn allocation_prop(&self) -> sys::CUmemAllocationProp {
        // SAFETY: a plain C struct for which all-zero is a valid value (no
        // handle types, no flags); the fields that matter are set below.
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = self.device;
        prop
    }

    fn enter(&self) -> Result<CurrentGuard, DeviceError> {
        CurrentGuard::enter(self.ctx)
    }

    fn release_failed(&mut self, what: &str, err: DeviceError) {
        self.release_errors += 1;
        self.last_release_error = Some(format!("{what}: {err}"));
    }

    /// Unmaps and releases the pages at `addrs` (each `page_size` long).
    fn unmap_each(&mut self, addrs: impl Iterator<Item = u64>, page_size: u64) {
        for addr in addrs {
            // SAFETY: the range is a page this device mapped (or a failed
            // attempt's, where unmapping an unmapped range only errs).
            if let Err(e) = check(
                unsafe { sys::cuMemUnmap(addr, page_size as usize) },
                "cuMemUnmap",
            ) {
                self.release_failed("cuMemUnmap", e);
            }
            if let Some(handle) = self.pages.remove(&addr) {
                // SAFETY: `handle` came from cuMemCreate and is released once.
                if let Err(e) = check(unsafe { sys::cuMemRelease(handle) }, "cuMemRelease") {
                    self.release_failed("cuMemRelease", e);
                }
            }
        }
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // SAFETY: balances the retain in `open`; the device handle is valid.
        unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

impl DeviceMemory for CudaDevice {
    fn index(&self) -> u32 {
        self.index
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn total_memory(&self) -> u64 {
        self.total
    }

    fn free_memory(&self) -> u64 {
        let Ok(_guard) = self.enter() else {
            return 0;
        };
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers, a context is current.
        match check(
            unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) },
            "cuMemGetInfo",
        ) {
            Ok(()) => free as u64,
            Err(_) => 0,
        }
    }

    fn allocate(&mut self, size: u64) -> Result<u64, DeviceError> {
        let _guard = self.enter()?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: valid out-pointer, a context is current.
        check(
            unsafe { sys::cuMemAlloc_v2(&mut ptr, size as usize) },
            "cuMemAlloc",
        )?;
        Ok(ptr)
    }

    fn free(&mut self, addr: u64, _size: u64) {
        let guard = match self.enter() {
            Ok(g) => g,
            Err(e) => return self.release_failed("cuMemFree", e),
        };
        // SAFETY: `addr` came from `allocate` and is freed once (the
        // allocator's contract). cuMemFree waits for work using it, as
        // cudaFree does.
        let r = check(unsafe { sys::cuMemFree_v2(addr) }, "cuMemFree");
        drop(guard);
        if let Err(e) = r {
            self.release_failed("cuMemFree", e);
        }
    }

    fn reserve_address_range(&mut self, size: u64, _page_size: u64) -> Result<u64, DeviceError> {
        let _guard = self.enter()?;
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: valid out-pointer. The size is a multiple of the page size,
        // itself a multiple of the granularity (checked when mapping).
        check(
            unsafe {
                sys::cuMemAddressReserve(&mut ptr, size as usize, self.granularity as usize, 0, 0)
            },
            "cuMemAddressReserve",
        )?;
        Ok(ptr)
    }

    fn release_address_range(&mut self, addr: u64, size: u64) {
        let guard = match self.enter() {
            Ok(g) => g,
            Err(e) => return self.release_failed("cuMemAddressFree", e),
        };
        // SAFETY: the range came from `reserve_address_range` and has no
        // mapped page left (the trait's contract).
        let r = check(
            unsafe { sys::cuMemAddressFree(addr, size as usize) },
            "cuMemAddressFree",
        );
        drop(guard);
        if let Err(e) = r {
            self.release_failed("cuMemAddressFree", e);
        }
    }

    fn map_pages(&mut self, addr: u64, size: u64, page_size: u64) -> Result<(), DeviceError> {
        if page_size == 0
            || !page_size.is_multiple_of(self.granularity.max(1))
            || !size.is_multiple_of(page_size)
        {
            return Err(DeviceError::Driver(format!(
                "page size {page_size} is not a multiple of the granularity {}",
                self.granularity
            )));
        }
        let _guard = self.enter()?;
        let prop = self.allocation_prop();
        let mut mapped = Vec::new();
        let mut result = Ok(());
        for page in (addr..addr + size).step_by(page_size as usize) {
            let mut handle: sys::CUmemGenericAllocationHandle = 0;
            // SAFETY: valid out-pointer and properties; size is a multiple of
            // the granularity.
            result = check(
                unsafe { sys::cuMemCreate(&mut handle, page_size as usize, &prop, 0) },
                "cuMemCreate",
            );
            if result.is_err() {
                break;
            }
            // SAFETY: `page` lies in a range reserved by this device and is
            // not mapped (the allocator maps each page once).
            result = check(
                unsafe { sys::cuMemMap(page, page_size as usize, 0, handle, 0) },
                "cuMemMap",
            );
            if result.is_err() {
                // SAFETY: the handle was created above and is not mapped.
                unsafe { sys::cuMemRelease(handle) };
                break;
            }
            self.pages.insert(page, handle);
            mapped.push(page);
        }
        if result.is_ok() {
            let desc = sys::CUmemAccessDesc {
                location: prop.location,
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            // SAFETY: the whole range was just mapped; one descriptor.
            result = check(
                unsafe { sys::cuMemSetAccess(addr, size as usize, &desc, 1) },
                "cuMemSetAccess",
            );
        }
        if result.is_err() {
            // All or nothing, as the trait requires.
            self.unmap_each(mapped.into_iter(), page_size);
        }
        result
    }

    fn unmap_pages(&mut self, addr: u64, size: u64, page_size: u64) {
        let guard = match self.enter() {
            Ok(g) => g,
            Err(e) => return self.release_failed("cuMemUnmap", e),
        };
        // Unlike cuMemFree, unmapping does not wait for kernels still using
        // the pages (PyTorch synchronizes here too).
        // SAFETY: a context is current.
        if let Err(e) = check(unsafe { sys::cuCtxSynchronize() }, "cuCtxSynchronize") {
            self.release_failed("cuCtxSynchronize", e);
        }
        self.unmap_each(
            (addr..addr + size).step_by(page_size.max(1) as usize),
            page_size,
        );
        drop(guard);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::{AllocatorConfig, CachingAllocator};

    #[test]
    fn no_device_is_an_error_not_a_panic() {
        // On a machine without a driver (CI) this is an error value; on a GPU
        // machine an absurd ordinal is.
        let err = CudaDevice::new(100_000).unwrap_err();
        assert!(matches!(err, DeviceError::Driver(_)), "{err:?}");
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn segments_and_pages_on_a_gpu() {
        let mut dev = CudaDevice::new(0).expect("a CUDA device");
        assert!(dev.total_memory() > 0);
        assert!(!dev.name().is_empty());
        assert_eq!(dev.granularity() % 4096, 0);
        let free0 = dev.free_memory();
        let a = dev.allocate(64 << 20).unwrap();
        assert_ne!(a, 0);
        assert!(dev.free_memory() <= free0 - (64 << 20));
        dev.free(a, 64 << 20);
        let page = dev.granularity().max(2 << 20);
        let base = dev.reserve_address_range(16 * page, page).unwrap();
        dev.map_pages(base + page, 4 * page, page).unwrap();
        assert_eq!(dev.mapped_pages(), 4);
        dev.unmap_pages(base + page, 4 * page, page);
        assert_eq!(dev.mapped_pages(), 0);
        dev.release_address_range(base, 16 * page);
        assert_eq!(dev.release_errors().0, 0);
        assert_eq!(
            dev.allocate(dev.total_memory() * 2),
            Err(DeviceError::OutOfMemory)
        );
    }

    #[test]
    #[ignore = "needs a CUDA GPU"]
    fn caching_allocator_on_a_gpu_from_several_threads() {
        for conf in ["", "expandable_segments:True"] {
            let dev = CudaDevice::new(0).expect("a CUDA device");
            let alloc = std::sync::Mutex::new(CachingAllocator::new(
                dev,
                AllocatorConfig::parse(conf).unwrap(),
            ));
            std::thread::scope(|s| {
                for t in 0..4u64 {
                    let alloc = &alloc;
                    s.spawn(move || {
                        let mut live = Vec::new();
                        for i in 0..200u64 {
                            let size = ((i * 7919 + t) % 64 + 1) << 16;
                            live.push(alloc.lock().unwrap().malloc(size, 0).unwrap().addr);
                            if i % 3 == 0 {
                                let a = live.swap_remove(0);
                                alloc.lock().unwrap().free(a).unwrap();
                            }
                        }
                        for a in live {
                            alloc.lock().unwrap().free(a).unwrap();
                        }
                    });
                }
            });
            let mut alloc = alloc.into_inner().unwrap();
            assert_eq!(alloc.stats().allocated_bytes.all.current, 0);
            alloc.empty_cache();
            assert_eq!(alloc.stats().reserved_bytes.all.current, 0, "{conf}");
            assert_eq!(alloc.device().release_errors().0, 0, "{conf}");
            let too_big = alloc.device().total_memory() * 2;
            assert!(alloc.malloc(too_big, 0).is_err());
        }
    }
}
