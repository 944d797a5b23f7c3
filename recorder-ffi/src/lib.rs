//! `libvramtrace_recorder.so`: vramtrace's recording caching allocator behind
//! a C ABI, for PyTorch's pluggable-allocator hook:
//!
//! ```python
//! alloc = torch.cuda.memory.CUDAPluggableAllocator(
//!     "libvramtrace_recorder.so", "vramtrace_malloc", "vramtrace_free")
//! torch.cuda.memory.change_current_allocator(alloc)
//! ```
//!
//! (the `vramtrace` Python package does this). Each CUDA device gets its own
//! [`Recorder`] over a [`CudaDevice`], created on the device's first
//! allocation, and so its own trace file. Configuration is read from the
//! environment then:
//!
//! - `VRAMTRACE_OUT`: the trace file, default `vramtrace-%p.vtrace`. `%p`
//!   expands to the process id, `%r` to `RANK` (0 when unset), `%d` to the
//!   device index, `%%` to `%`. Without `%d`, the first device the process
//!   uses writes to the name as given and any other device to the name with
//!   `.dev<N>` before the extension.
//! - `VRAMTRACE_ALLOC_CONF`, else `PYTORCH_CUDA_ALLOC_CONF`: the allocator
//!   settings (`PYTORCH_CUDA_ALLOC_CONF` syntax).
//! - `VRAMTRACE_STACKS`: which stacks each allocation gets. `python`
//!   (default): the Python frames of the allocating thread when it holds the
//!   GIL (function, file, line; see [`python`]); threads without it (the
//!   autograd engine's) get none. `native`: native frames (C++, Rust),
//!   symbolized in the trace. `all`: native frames, then Python frames
//!   outside them. `none`.
//! - `VRAMTRACE_OOM`: `raise` (default): an allocation that fails throws a
//!   C++ exception, which PyTorch raises as a `RuntimeError` whose message
//!   begins with `CUDA out of memory`; `null`: return NULL (PyTorch then
//!   makes a tensor with a NULL data pointer; for C callers).
//!
//! Traces are finished (footer written) at process exit and when SIGTERM or
//! SIGINT would kill the process; see [`vramtrace_finish`].
//!
//! No function here lets a Rust panic out: each catches it, reports it on
//! standard error and fails the call.

use recorder::allocator::{AllocError, AllocatorConfig, CachingAllocator};
use recorder::device::{CudaDevice, DeviceMemory};
use recorder::recorder::{FrameSource, Recorder, RecorderOptions, StackMode};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, OnceLock};
use std::time::Instant;

pub mod python;

/// Devices a process may record (CUDA ordinals below this).
const MAX_DEVICES: usize = 64;

type Rec = Recorder<CudaDevice>;

unsafe extern "C-unwind" {
    /// Throws a C++ exception carrying `message` (src/throw.cpp); never returns.
    fn vramtrace_throw_oom(message: *const c_char) -> !;
}

/// Per-device recorders, created on first use; an error is kept so that every
/// later call reports it again instead of retrying.
static SLOTS: [OnceLock<Result<Arc<Rec>, String>>; MAX_DEVICES] =
    [const { OnceLock::new() }; MAX_DEVICES];

/// Process-wide markers: phases open now and annotations so far, replayed
/// into a recorder created later, plus every recorder created (to broadcast
/// markers to). One lock, so a recorder being created cannot miss a marker.
struct Markers {
    open_phases: Vec<String>,
    annotations: Vec<(String, String)>,
    recorders: Vec<Arc<Rec>>,
}

static MARKERS: Mutex<Markers> = Mutex::new(Markers {
    open_phases: Vec::new(),
    annotations: Vec::new(),
    recorders: Vec::new(),
});

/// The first device index that got a recorder, -1 before.
static FIRST_DEVICE: AtomicI64 = AtomicI64::new(-1);

fn markers() -> MutexGuard<'static, Markers> {
    MARKERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Reports a problem on standard error, the only channel a C caller that
/// ignores return values is sure to see. At most 20 reports per process, so
/// a repeated failure cannot flood the output.
fn report(msg: &str) {
    static COUNT: AtomicU32 = AtomicU32::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    if n < 20 {
        eprintln!("vramtrace: {msg}");
    } else if n == 20 {
        eprintln!("vramtrace: further messages suppressed");
    }
}

/// Expands `VRAMTRACE_OUT`'s pattern for `device`. `first` says whether this
/// is the first device the process records.
fn trace_path(pattern: &str, device: u32, first: bool, pid: u32, rank: &str) -> PathBuf {
    let mut out = String::new();
    let mut has_device = false;
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&pid.to_string()),
            Some('r') => out.push_str(rank),
            Some('d') => {
                has_device = true;
                out.push_str(&device.to_string());
            }
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    if has_device || first {
        return PathBuf::from(out);
    }
    let path = Path::new(&out);
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    let name = match (stem, path.extension()) {
        (Some(stem), Some(ext)) => format!("{stem}.dev{device}.{}", ext.to_string_lossy()),
        _ => format!("{out}.dev{device}"),
    };
    path.with_file_name(name)
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Reads `VRAMTRACE_STACKS`: the native stack mode, and whether Python
/// frames are wanted.
fn stack_setting(value: Option<&str>) -> Result<(StackMode, bool), String> {
    match value.map(str::trim) {
        None | Some("python") => Ok((StackMode::None, true)),
        Some("none") => Ok((StackMode::None, false)),
        Some("native") => Ok((StackMode::Native, false)),
        Some("all") => Ok((StackMode::Native, true)),
        Some(other) => Err(format!(
            "invalid VRAMTRACE_STACKS {other:?}: expected python, native, all or none"
        )),
    }
}

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
        python::source().map(|s| s as Arc<dyn FrameSource>)
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
    let mut options = RecorderOptions {
        stacks,
        frame_source,
        ..RecorderOptions::default()
    };
    options
        .metadata
        .insert("recorded_by".into(), "libvramtrace_recorder".into());
    options
        .metadata
        .insert("granularity".into(), dev.granularity().to_string());
    let allocator = CachingAllocator::new(dev, config);
    let rec = Recorder::create(&path, allocator, options).map_err(|e| e.to_string())?;
    let rec = Arc::new(rec);
    let mut m = markers();
    for (k, v) in &m.annotations {
        rec.annotate(k, v);
    }
    for name in &m.open_phases {
        rec.phase_begin(name);
    }
    m.recorders.push(rec.clone());
    drop(m);
    install_exit_hooks();
    Ok(rec)
}

/// The recorder of `device`, creating it on first use.
fn recorder(device: c_int) -> Result<&'static Arc<Rec>, String> {
    let index = usize::try_from(device)
        .ok()
        .filter(|&d| d < MAX_DEVICES)
        .ok_or_else(|| format!("device index {device} out of range"))?;
    SLOTS[index]
        .get_or_init(|| create(index as u32))
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

/// Runs `f` on every recorder created so far, under the markers lock, and
/// reports a panic instead of letting it out.
fn broadcast(what: &str, f: impl FnOnce(&mut Markers)) {
    if catch_unwind(AssertUnwindSafe(|| f(&mut markers()))).is_err() {
        report(&format!("internal error (panic) in {what}"));
    }
}

/// Reads a C string argument; NULL reads as empty.
///
/// # Safety
/// `s` is NULL or a valid NUL-terminated string.
unsafe fn c_str(s: *const c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

/// Begins a phase named `name` on every device (phases nest).
///
/// # Safety
/// `name` is NULL or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_phase_begin(name: *const c_char) {
    // SAFETY: forwarded contract.
    let name = unsafe { c_str(name) };
    broadcast("vramtrace_phase_begin", |m| {
        for r in &m.recorders {
            r.phase_begin(&name);
        }
        m.open_phases.push(name);
    });
}

/// Ends the innermost open phase. Returns 0, or -1 when no phase is open.
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_phase_end() -> c_int {
    let mut status = -1;
    broadcast("vramtrace_phase_end", |m| {
        if m.open_phases.pop().is_some() {
            status = 0;
            for r in &m.recorders {
                let _ = r.phase_end();
            }
        }
    });
    status
}

/// Records a key/value annotation on every device.
///
/// # Safety
/// `key` and `value` are NULL or valid NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_annotate(key: *const c_char, value: *const c_char) {
    // SAFETY: forwarded contract.
    let (key, value) = unsafe { (c_str(key), c_str(value)) };
    broadcast("vramtrace_annotate", |m| {
        for r in &m.recorders {
            r.annotate(&key, &value);
        }
        m.annotations.push((key, value));
    });
}

/// Returns every device's cached memory to the driver
/// (`torch.cuda.empty_cache()`, which the pluggable allocator cannot reach).
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_empty_cache() {
    broadcast("vramtrace_empty_cache", |m| {
        for r in &m.recorders {
            r.empty_cache();
        }
    });
}

/// Writes everything recorded so far to the trace files. Returns 0, or -1
/// if a trace could not be written (reported on standard error).
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_flush() -> c_int {
    let mut status = 0;
    broadcast("vramtrace_flush", |m| {
        for r in &m.recorders {
            if let Err(e) = r.flush() {
                report(&format!("flush: {e}"));
                status = -1;
            }
        }
    });
    status
}

/// Finishes every trace (footer written, file complete); allocation goes on
/// unrecorded. Called at exit and on a fatal SIGTERM/SIGINT; a second call
/// does nothing. Returns 0, or -1 if a trace could not be finished.
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_finish() -> c_int {
    let mut status = 0;
    broadcast("vramtrace_finish", |m| {
        for r in &m.recorders {
            match r.finish() {
                Ok(_) | Err(recorder::recorder::RecorderError::Finished) => {}
                Err(e) => {
                    report(&format!("finish: {e}"));
                    status = -1;
                }
            }
        }
    });
    status
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

/// The number of devices recording so far (for tests and the Python side).
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_device_count() -> c_int {
    markers().recorders.len() as c_int
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
        let source = python::source()?;
        let frames = recorder::recorder::capture_frames(&*source, 128);
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

extern "C" fn finish_at_exit() {
    vramtrace_finish();
}

/// Signals whose default action kills the process without running atexit.
const SIGNALS: [c_int; 2] = [libc::SIGTERM, libc::SIGINT];

/// The dispositions our handlers replaced, by index into [`SIGNALS`].
static PREVIOUS: [OnceLock<libc::sigaction>; 2] = [const { OnceLock::new() }; 2];

/// Write end of the pipe to the thread that finishes traces on a signal
/// (a signal handler may only do async-signal-safe things such as write()).
static SIGNAL_PIPE: AtomicI64 = AtomicI64::new(-1);

extern "C" fn on_signal(sig: c_int) {
    let Some(i) = SIGNALS.iter().position(|&s| s == sig) else {
        return;
    };
    let Some(prev) = PREVIOUS[i].get() else {
        return;
    };
    match prev.sa_sigaction {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // The process is about to die: let the finishing thread write the
            // footers, then re-raise with the default action.
            let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
            if fd >= 0 {
                let byte = sig as u8;
                // SAFETY: write() is async-signal-safe; one byte from a local.
                unsafe { libc::write(fd as c_int, (&byte as *const u8).cast(), 1) };
            }
        }
        handler => {
            // The program handles this signal (Python's SIGINT handler raises
            // KeyboardInterrupt): pass it on; the process is not dying, and
            // exit will finish the traces.
            if prev.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler was installed as a three-argument
                // one; it gets no siginfo from us, which it must tolerate
                // (as for a raise()d signal it may read fields of NULL...):
                // rare, since Python and most runtimes install one-argument ones.
                let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
                    unsafe { std::mem::transmute(handler) };
                f(sig, std::ptr::null_mut(), std::ptr::null_mut());
            } else {
                // SAFETY: a one-argument handler was installed at this address.
                let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(handler) };
                f(sig);
            }
        }
    }
}

/// Registers the exit hook and the signal handlers, once per process.
fn install_exit_hooks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain function with no captured state.
        if unsafe { libc::atexit(finish_at_exit) } != 0 {
            report("cannot register the exit hook: traces may lack their footer");
        }
        if let Err(e) = install_signal_handlers() {
            report(&format!("cannot install signal handlers: {e}"));
        }
    });
}

fn install_signal_handlers() -> std::io::Result<()> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let read_fd = fds[0];
    SIGNAL_PIPE.store(fds[1] as i64, Ordering::Relaxed);
    std::thread::Builder::new()
        .name("vramtrace-signals".into())
        .spawn(move || {
            loop {
                let mut byte = 0u8;
                // SAFETY: reads one byte into a local from our own pipe.
                let n = unsafe { libc::read(read_fd, (&mut byte as *mut u8).cast(), 1) };
                if n == 1 {
                    let sig = byte as c_int;
                    vramtrace_finish();
                    // SAFETY: restores the default action, then re-raises to
                    // die of the signal as the process would have.
                    unsafe {
                        libc::signal(sig, libc::SIG_DFL);
                        libc::raise(sig);
                    }
                } else if n == 0
                    || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
                {
                    return;
                }
            }
        })?;
    for (i, &sig) in SIGNALS.iter().enumerate() {
        // SAFETY: all-zero is a valid sigaction (empty mask, no flags).
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_signal as extern "C" fn(c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        // SAFETY: valid pointers to a local action and an out-parameter.
        let mut prev: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above: the mask is a valid sigset_t.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // PREVIOUS must be set before the handler can run: install in two
        // steps, reading the old action first.
        // SAFETY: valid out-pointer; a NULL new action only reads.
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut prev) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let _ = PREVIOUS[i].set(prev);
        // SAFETY: installs our handler; `on_signal` only does
        // async-signal-safe work or calls the previous handler.
        if unsafe { libc::sigaction(sig, &action, std::ptr::null_mut()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_names() {
        let p = |pat: &str, dev, first| trace_path(pat, dev, first, 42, "3");
        assert_eq!(
            p("vramtrace-%p.vtrace", 0, true),
            PathBuf::from("vramtrace-42.vtrace")
        );
        assert_eq!(p("out/r%r.vtrace", 5, true), PathBuf::from("out/r3.vtrace"));
        assert_eq!(
            p("out/r%r.vtrace", 1, false),
            PathBuf::from("out/r3.dev1.vtrace")
        );
        assert_eq!(p("t-%d.vtrace", 2, false), PathBuf::from("t-2.vtrace"));
        assert_eq!(p("trace", 2, false), PathBuf::from("trace.dev2"));
        assert_eq!(p("100%%-%x%", 0, true), PathBuf::from("100%-%x%"));
    }

    #[test]
    fn stack_settings() {
        assert_eq!(stack_setting(None), Ok((StackMode::None, true)));
        assert_eq!(stack_setting(Some(" python")), Ok((StackMode::None, true)));
        assert_eq!(stack_setting(Some("none")), Ok((StackMode::None, false)));
        assert_eq!(
            stack_setting(Some("native")),
            Ok((StackMode::Native, false))
        );
        assert_eq!(stack_setting(Some("all")), Ok((StackMode::Native, true)));
        assert!(
            stack_setting(Some("pyhton"))
                .unwrap_err()
                .contains("python, native")
        );
    }

    #[test]
    fn without_python_there_is_no_python_source() {
        // This test binary does not link libpython.
        assert!(python::source().is_none());
        let mut buf = [0 as c_char; 64];
        // SAFETY: a writable local buffer of its length.
        assert_eq!(
            unsafe { vramtrace_python_stack(buf.as_mut_ptr(), buf.len()) },
            -1
        );
    }

    #[test]
    fn without_a_gpu_calls_fail_cleanly() {
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
        assert_eq!(vramtrace_flush(), 0);
        vramtrace_empty_cache();
        assert_eq!(vramtrace_finish(), 0);
        assert_eq!(vramtrace_device_count(), 0);
    }
}
