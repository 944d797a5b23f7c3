//! Replacement mode: the library is PyTorch's CUDA allocator, through
//! PyTorch's pluggable-allocator hook, and runs vramtrace's caching
//! allocator on the GPU, recording every event it causes:
//!
//! ```python
//! alloc = torch.cuda.memory.CUDAPluggableAllocator(
//!     "libvramtrace_recorder.so", "vramtrace_malloc", "vramtrace_free")
//! torch.cuda.memory.change_current_allocator(alloc)
//! ```
//!
//! (`vramtrace.install(mode="replace")` does this). For running a program
//! under another allocator setting for real; it changes what PyTorch can do
//! (see docs/recording.md), which observer mode does not. Each CUDA device
//! gets its own [`Recorder`] over a [`CudaDevice`], created on the device's
//! first allocation; configuration is read from the environment then:
//!
//! - `VRAMTRACE_OUT`: the trace file, default `vramtrace-%p.vtrace` (see
//!   `trace_path` in `lib.rs`).
//! - `VRAMTRACE_ALLOC_CONF`, else `PYTORCH_CUDA_ALLOC_CONF`: the allocator
//!   settings (`PYTORCH_CUDA_ALLOC_CONF` syntax).
//! - `VRAMTRACE_STACKS`: `python` (default; see [`python::gil`]), `native`,
//!   `all` or `none`.
//! - `VRAMTRACE_KEEP_LAST`: a size or a duration (`50MiB`, `10min`): keep
//!   only the last part of each trace on disk, in a ring beside it (see
//!   [`KeepLast`]); the trace is written at the end, and
//!   [`vramtrace_dump`](crate::traces::vramtrace_dump) writes the part
//!   kept so far.
//! - `VRAMTRACE_OOM`: `raise` (default): an allocation that fails throws a
//!   C++ exception, which PyTorch raises as a `RuntimeError` whose message
//!   begins with `CUDA out of memory`; `null`: return NULL (for C callers).

use crate::{MAX_DEVICES, env_nonempty, python, report, stack_setting, trace_path, traces};
use recorder::allocator::{AllocError, AllocatorConfig, CachingAllocator};
use recorder::device::{CudaDevice, DeviceMemory};
use recorder::{FrameSource, KeepLast, Recorder, RecorderOptions, Trace};
use std::ffi::{CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

type Rec = Recorder<CudaDevice>;

unsafe extern "C-unwind" {
    /// Throws a C++ exception carrying `message` (src/throw.cpp); never returns.
    fn vramtrace_throw_oom(message: *const c_char) -> !;
}

/// Per-device recorders, created on first use; an error is kept so that every
/// later call reports it again instead of retrying.
static SLOTS: [OnceLock<Result<Arc<Rec>, String>>; MAX_DEVICES] =
    [const { OnceLock::new() }; MAX_DEVICES];

/// No fraction pending ([`PENDING_FRACTION`]): not the bits of any fraction
/// in [0, 1].
const NO_FRACTION: u64 = u64::MAX;

/// The memory fraction set for a device before its recorder exists, as
/// `f64` bits, applied when it is created.
static PENDING_FRACTION: [AtomicU64; MAX_DEVICES] =
    [const { AtomicU64::new(NO_FRACTION) }; MAX_DEVICES];

/// The first device index that got a recorder, -1 before.
static FIRST_DEVICE: AtomicI64 = AtomicI64::new(-1);

/// Creates the recorder of `device` from the environment.
fn create(device: u32) -> Result<Arc<Rec>, String> {
    let (conf_var, conf) = match env_nonempty("VRAMTRACE_ALLOC_CONF") {
        Some(v) => ("VRAMTRACE_ALLOC_CONF", v),
        None => (
            "PYTORCH_CUDA_ALLOC_CONF",
            env_nonempty("PYTORCH_CUDA_ALLOC_CONF").unwrap_or_default(),
        ),
    };
    let config =
        AllocatorConfig::parse(&conf).map_err(|e| format!("invalid {conf_var} {conf:?}: {e}"))?;
    let (stacks, with_python) = stack_setting(env_nonempty("VRAMTRACE_STACKS").as_deref())?;
    let frame_source = if with_python {
        // No Python in the process (a C host): no Python frames, not an error.
        python::gil::source().map(|s| s as Arc<dyn FrameSource>)
    } else {
        None
    };
    let dev = CudaDevice::new(device).map_err(|e| format!("CUDA device {device}: {e}"))?;
    let first = FIRST_DEVICE
        .compare_exchange(-1, device as i64, Ordering::AcqRel, Ordering::Acquire)
        .is_ok();
    let pattern = env_nonempty("VRAMTRACE_OUT").unwrap_or_else(|| "vramtrace-%p.vtrace".into());
    let rank = env_nonempty("RANK").unwrap_or_else(|| "0".into());
    let path = trace_path(&pattern, device, first, std::process::id(), rank.trim());
    let keep_last = env_nonempty("VRAMTRACE_KEEP_LAST")
        .map(|v| {
            v.parse::<KeepLast>()
                .map_err(|e| format!("VRAMTRACE_KEEP_LAST: {e}"))
        })
        .transpose()?;
    let mut options = RecorderOptions {
        stacks,
        frame_source,
        keep_last,
        ..RecorderOptions::default()
    };
    options
        .metadata
        .insert("recorded_by".into(), "libvramtrace_recorder".into());
    options
        .metadata
        .insert("granularity".into(), dev.granularity().to_string());
    let mut allocator = CachingAllocator::new(dev, config);
    // The card's memory after each segment event and out-of-memory error.
    allocator.set_device_memory_samples(true);
    let rec = Recorder::create(&path, allocator, options).map_err(|e| e.to_string())?;
    // A limit set before the device's first allocation applies from it.
    let pending = PENDING_FRACTION[device as usize].swap(NO_FRACTION, Ordering::AcqRel);
    if pending != NO_FRACTION {
        rec.set_memory_fraction(f64::from_bits(pending));
    }
    let rec = Arc::new(rec);
    traces::register(rec.clone());
    Ok(rec)
}

/// The recorder of `device`, creating it on first use.
fn recorder(device: c_int) -> Result<&'static Arc<Rec>, String> {
    let index = usize::try_from(device)
        .ok()
        .filter(|&d| d < MAX_DEVICES)
        .ok_or_else(|| format!("device index {device} out of range"))?;
    SLOTS[index]
        .get_or_init(|| {
            create(index as u32).inspect_err(|e| traces::not_begun(&format!("device {index}: {e}")))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// What a failed allocation should do.
enum Failure {
    /// Return NULL.
    Null,
    /// Throw a C++ exception with this message.
    Raise(String),
}

fn raise_on_oom() -> bool {
    static RAISE: OnceLock<bool> = OnceLock::new();
    *RAISE.get_or_init(|| {
        !matches!(
            env_nonempty("VRAMTRACE_OOM").as_deref().map(str::trim),
            Some("null")
        )
    })
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn malloc_impl(size: usize, device: c_int, stream: *mut c_void) -> Result<*mut c_void, Failure> {
    if size == 0 {
        // PyTorch's own allocator hands out no memory for empty tensors.
        return Ok(std::ptr::null_mut());
    }
    let fail = |msg: String| {
        if raise_on_oom() {
            Failure::Raise(msg)
        } else {
            report(&msg);
            Failure::Null
        }
    };
    let rec = recorder(device).map_err(|e| fail(format!("cannot record: {e}")))?;
    match rec.malloc(size as u64, stream as u64) {
        Ok(a) => Ok(a.addr as *mut c_void),
        Err(AllocError::OutOfMemory {
            requested,
            free_bytes,
        }) => {
            // The Oom event must reach the file even if the program dies of
            // the failed allocation.
            if let Err(e) = rec.flush() {
                report(&format!("cannot flush the trace: {e}"));
            }
            let (total, reserved) = rec.with_allocator(|a| {
                (
                    a.device().total_memory(),
                    a.stats().reserved_bytes.all.current,
                )
            });
            Err(fail(format!(
                "CUDA out of memory. Tried to allocate {} on device {device} \
                 ({} total, {} free, {} reserved by vramtrace's allocator).",
                gib(requested),
                gib(total),
                gib(free_bytes),
                gib(reserved),
            )))
        }
        Err(e) => Err(fail(format!("allocation on device {device} failed: {e}"))),
    }
}

/// Whether [`vramtrace_malloc`] and [`vramtrace_free`] time themselves.
static TIMING: AtomicBool = AtomicBool::new(false);

/// Calls timed and their total nanoseconds: malloc, then free.
static TIMED: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// Adds the time since `start` to the counters at `i` (0 malloc, 2 free).
#[inline(never)]
fn add_time(i: usize, start: Instant) {
    TIMED[i].fetch_add(1, Ordering::Relaxed);
    TIMED[i + 1].fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// Self-timing, to tell the library's share of an allocation's cost from
/// the host's (PyTorch's pluggable-allocator wrapper): writes the calls
/// timed and their total nanoseconds since the last call to `out[0..4]`
/// (malloc calls, malloc ns, free calls, free ns; `out` may be NULL), resets
/// them, and turns timing on (`enable` != 0) or off. Off by default, and
/// then the cost is one relaxed load per call.
///
/// # Safety
/// `out` is NULL or points to 4 writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_timing(enable: c_int, out: *mut u64) {
    let values = TIMED.each_ref().map(|c| c.swap(0, Ordering::Relaxed));
    if !out.is_null() {
        // SAFETY: the caller's contract: 4 writable values.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), out, values.len()) };
    }
    TIMING.store(enable != 0, Ordering::Relaxed);
}

/// Allocates `size` bytes on CUDA device `device` for use on `stream`
/// (NULL: the default stream), PyTorch's pluggable-allocator `malloc`.
///
/// Returns NULL for `size` 0. On failure, throws a C++ exception (the
/// default, `VRAMTRACE_OOM=raise`) or returns NULL (`VRAMTRACE_OOM=null`).
#[unsafe(no_mangle)]
pub extern "C-unwind" fn vramtrace_malloc(
    size: usize,
    device: c_int,
    stream: *mut c_void,
) -> *mut c_void {
    let start = TIMING.load(Ordering::Relaxed).then(Instant::now);
    let result = catch_unwind(AssertUnwindSafe(|| malloc_impl(size, device, stream)));
    if let Some(start) = start {
        add_time(0, start);
    }
    let message = match result {
        Ok(Ok(ptr)) => return ptr,
        Ok(Err(Failure::Null)) => return std::ptr::null_mut(),
        Ok(Err(Failure::Raise(msg))) => msg,
        Err(_) => "vramtrace: internal error (panic) in vramtrace_malloc".to_string(),
    };
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // SAFETY: `message` is a valid C string; the callee copies it before
    // throwing. The exception unwinds through this frame, which is declared
    // "C-unwind" and outside any catch_unwind; `message` is dropped by the
    // unwinding, after the copy.
    unsafe { vramtrace_throw_oom(message.as_ptr()) }
}

/// Frees `ptr`, returned by [`vramtrace_malloc`] for `device`, PyTorch's
/// pluggable-allocator `free`. `size` and `stream` are those of the
/// allocation; the allocator knows both already.
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_free(
    ptr: *mut c_void,
    _size: usize,
    device: c_int,
    _stream: *mut c_void,
) {
    if ptr.is_null() {
        return;
    }
    let start = TIMING.load(Ordering::Relaxed).then(Instant::now);
    let r = catch_unwind(AssertUnwindSafe(|| {
        let rec = recorder(device)?;
        rec.free(ptr as u64).map_err(|e| e.to_string())
    }));
    if let Some(start) = start {
        add_time(2, start);
    }
    match r {
        Ok(Ok(())) => {}
        Ok(Err(e)) => report(&format!("free on device {device}: {e}")),
        Err(_) => report("internal error (panic) in vramtrace_free"),
    }
}

/// Limits what the allocator of `device` may reserve to `fraction` of the
/// device's memory and records the limit (a `limit` event, format 1.3):
/// PyTorch's pluggable-allocator `set_memory_fraction` hook, which
/// `torch.cuda.set_per_process_memory_fraction(fraction, device)` calls
/// (`vramtrace.install(mode="replace")` sets it). Before the device's first
/// allocation, the fraction is kept and applied when its recorder is made.
/// A fraction outside [0, 1] (PyTorch refuses those before the call) or a
/// device index out of range changes nothing, with a message.
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_set_memory_fraction(fraction: f64, device: c_int) {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let Some(index) = usize::try_from(device).ok().filter(|&d| d < MAX_DEVICES) else {
            return Err(format!("device index {device} out of range"));
        };
        if !(0.0..=1.0).contains(&fraction) {
            return Err(format!("invalid memory fraction {fraction}"));
        }
        match SLOTS[index].get() {
            Some(Ok(rec)) => {
                rec.set_memory_fraction(fraction);
            }
            Some(Err(_)) => {}
            None => {
                PENDING_FRACTION[index].store(fraction.to_bits(), Ordering::Release);
                // A recorder made meanwhile may have missed it.
                if let Some(Ok(rec)) = SLOTS[index].get() {
                    let pending = PENDING_FRACTION[index].swap(NO_FRACTION, Ordering::AcqRel);
                    if pending != NO_FRACTION {
                        rec.set_memory_fraction(f64::from_bits(pending));
                    }
                }
            }
        }
        Ok(())
    }));
    match r {
        Ok(Ok(())) => {}
        Ok(Err(e)) => report(&format!("set_memory_fraction ignored: {e}")),
        Err(_) => report("internal error (panic) in vramtrace_set_memory_fraction"),
    }
}

/// Returns every device's cached memory to the driver
/// (`torch.cuda.empty_cache()`, which the pluggable allocator cannot reach).
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_empty_cache() {
    for slot in &SLOTS {
        if let Some(Ok(rec)) = slot.get()
            && catch_unwind(AssertUnwindSafe(|| rec.empty_cache())).is_err()
        {
            report("internal error (panic) in vramtrace_empty_cache");
        }
    }
}

/// [`vramtrace_observe_tag`](crate::observe::vramtrace_observe_tag) for
/// replacement mode: tags the live blocks at `addrs` of `device`'s recorder
/// with `codes`. Returns the number recorded (0 when the device has no
/// recorder yet), or -1 for invalid arguments or an internal error.
///
/// # Safety
/// `addrs` and `codes` are NULL or point to `count` readable values each.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_tag(
    device: c_int,
    addrs: *const u64,
    codes: *const u8,
    count: usize,
) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: forwarded contract.
        let Some(tags) = (unsafe { crate::tag_arrays(addrs, codes, count) }) else {
            return -1;
        };
        let Some(rec) = recorder_of(device) else {
            return 0;
        };
        c_int::try_from(rec.tag_all(tags)).unwrap_or(c_int::MAX)
    }));
    r.unwrap_or_else(|_| {
        report("internal error (panic) in vramtrace_tag");
        -1
    })
}

/// The recorder of `device`, once its first allocation made one.
fn recorder_of(device: c_int) -> Option<&'static Arc<Rec>> {
    let slot = usize::try_from(device).ok().and_then(|d| SLOTS.get(d))?;
    slot.get()?.as_ref().ok()
}

/// [`vramtrace_observe_tag_user`](crate::observe::vramtrace_observe_tag_user)
/// for replacement mode: the live blocks at `addrs` of `device`'s recorder
/// hold the program's own category `name`. Returns the number recorded (0
/// when the device has no recorder yet), or -1 for a refused name, invalid
/// arguments or an internal error.
///
/// # Safety
/// `name` is NULL or a valid NUL-terminated string; `addrs` is NULL or
/// points to `count` readable values.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_tag_user(
    device: c_int,
    name: *const c_char,
    addrs: *const u64,
    count: usize,
) -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: forwarded contract.
        let Some((name, addrs)) = (unsafe { crate::user_tag_args(name, addrs, count) }) else {
            return -1;
        };
        match recorder_of(device) {
            Some(rec) => name.record(rec.as_ref(), addrs),
            None => 0,
        }
    }));
    r.unwrap_or_else(|_| {
        report("internal error (panic) in vramtrace_tag_user");
        -1
    })
}

/// Writes the allocator statistics of `device` to `out[0..6]`: allocated
/// bytes (current, peak), reserved bytes (current, peak), requested bytes
/// (current), OOMs. Returns 0, or -1 when the device has no recorder (no
/// allocation yet) or `out` is NULL.
///
/// # Safety
/// `out` is NULL or points to 6 writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_memory_stats(device: c_int, out: *mut u64) -> c_int {
    let Some(slot) = usize::try_from(device).ok().and_then(|d| SLOTS.get(d)) else {
        return -1;
    };
    let Some(Ok(rec)) = slot.get() else {
        return -1;
    };
    if out.is_null() {
        return -1;
    }
    let Ok(s) = catch_unwind(AssertUnwindSafe(|| rec.stats())) else {
        return -1;
    };
    let values = [
        s.allocated_bytes.all.current,
        s.allocated_bytes.all.peak,
        s.reserved_bytes.all.current,
        s.reserved_bytes.all.peak,
        s.requested_bytes.all.current,
        s.num_ooms,
    ];
    // SAFETY: the caller's contract: 6 writable values.
    unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), out, values.len()) };
    0
}

/// Writes the calling thread's Python frames, as the recorder would capture
/// them for an allocation now, to `buf` as lines `function\tfile\tline`,
/// innermost first, NUL-terminated (cut to fit `len`). Returns the number of
/// frames, 0 when the thread does not hold the GIL, or -1 when the process
/// has no Python or `buf` is NULL. For tests and diagnostics (call it through
/// `ctypes.PyDLL`, which keeps the GIL, unlike `ctypes.CDLL`).
///
/// # Safety
/// `buf` is NULL or points to `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_python_stack(buf: *mut c_char, len: usize) -> c_int {
    if buf.is_null() || len == 0 {
        return -1;
    }
    let text = catch_unwind(AssertUnwindSafe(|| {
        let source = python::gil::source()?;
        let frames = recorder::capture_frames(&*source, 128);
        let mut text = String::new();
        for &(code, line) in &frames {
            let info = source.describe(code).unwrap_or_default();
            text.push_str(&format!("{}\t{}\t{line}\n", info.function, info.file));
        }
        Some((frames.len(), text))
    }));
    let Ok(Some((count, text))) = text else {
        return -1;
    };
    let n = text.len().min(len - 1);
    // SAFETY: the caller's contract: `len` writable bytes; n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    count as c_int
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traces::*;
    use std::ffi::CString;

    #[test]
    fn without_python_there_is_no_python_source() {
        // This test binary does not link libpython.
        assert!(python::gil::source().is_none());
        let mut buf = [0 as c_char; 64];
        // SAFETY: a writable local buffer of its length.
        assert_eq!(
            unsafe { vramtrace_python_stack(buf.as_mut_ptr(), buf.len()) },
            -1
        );
    }

    #[test]
    fn without_a_gpu_calls_fail_cleanly() {
        let _globals = crate::tests::GLOBALS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // No driver in CI (or no device 63 on a GPU machine): free of an
        // unknown pointer and the marker calls must neither panic nor crash.
        vramtrace_free(0x1000 as *mut c_void, 16, 63, std::ptr::null_mut());
        let name = CString::new("p").unwrap();
        // SAFETY: valid C strings.
        unsafe {
            vramtrace_phase_begin(name.as_ptr());
            vramtrace_annotate(name.as_ptr(), std::ptr::null());
        }
        assert_eq!(vramtrace_phase_end(), 0);
        assert_eq!(vramtrace_phase_end(), -1);
        // The free asked for device 63's recorder, which could not be made:
        // what was to be recorded there is lost, and flush says so.
        assert_eq!(vramtrace_flush(), -1);
        let (addrs, codes) = ([0x1000u64], [0u8]);
        // SAFETY: arrays of one value each.
        unsafe {
            assert_eq!(vramtrace_tag(63, addrs.as_ptr(), codes.as_ptr(), 1), 0);
            assert_eq!(vramtrace_tag(63, std::ptr::null(), codes.as_ptr(), 1), -1);
            assert_eq!(vramtrace_tag(-1, addrs.as_ptr(), codes.as_ptr(), 1), 0);
        }
        vramtrace_empty_cache();
        assert_eq!(vramtrace_finish(), -1);
        assert_eq!(vramtrace_device_count(), 0);
    }
}
