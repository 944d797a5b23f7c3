//! The recording in progress ([`Session`]) and the C functions a program
//! calls on it: start and stop, the device figures, pools, limits, tags, and
//! the Python stack.

use super::*;

/// The recording in progress, if any.
pub(super) struct Session {
    pub(super) config: Arc<Config>,
    pub(super) first_device: Option<u32>,
    /// The snapshot's segments as they arrive, by device.
    pub(super) snapshot: BTreeMap<u32, InitialState>,
}

pub(super) static SESSION: Mutex<Option<Session>> = Mutex::new(None);

pub(super) fn session() -> MutexGuard<'static, Option<Session>> {
    SESSION.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts recording what the shim reports. `config` is `key=value` lines:
///
/// - `out=PATTERN`: the trace file pattern (`%p`, `%r`, `%d`, as in
///   replacement mode; see `trace_path`);
/// - `stacks=python|native|all|none` (default `python`, read without the
///   GIL: [`nogil`]);
/// - `keep_last=SIZE|DURATION` (`50MiB`, `10min`): keep only the last part
///   of each trace on disk, in a ring beside it ([`KeepLast`]);
/// - `state=empty` (default: the allocator holds nothing yet) or
///   `state=pending` (the shim's snapshot will give the state);
/// - `device=INDEX<TAB>TOTAL_BYTES<TAB>NAME`, for each device, for the
///   trace headers;
/// - `setting.KEY=VALUE`: PyTorch's allocator settings, as a snapshot's
///   `allocator_settings` gives them (block sizes follow them);
/// - `meta.KEY=VALUE`: header metadata.
///
/// Returns 0, or -1 when the configuration is invalid or a recording is in
/// progress (reported on standard error).
///
/// # Safety
/// `config` is NULL or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_observe_start(config: *const c_char) -> c_int {
    // SAFETY: forwarded contract.
    let text = unsafe { c_str(config) };
    let r = catch_unwind(AssertUnwindSafe(|| {
        let request = parse_start(&text)?;
        writable_folder(&request.config.pattern)?;
        {
            let mut s = session();
            if s.is_some() {
                return Err("a recording is already in progress".to_string());
            }
            *s = Some(Session {
                config: Arc::new(request.config),
                first_device: None,
                snapshot: BTreeMap::new(),
            });
        }
        reset_iterations();
        CREATE_FAILED.store(false, Ordering::Relaxed);
        for slot in &SLOTS {
            *lock(&slot.pending_limit) = None;
            *slot.route() = if request.pending_state {
                Route::AwaitingMarker
            } else {
                Route::Live { state_known: true }
            };
        }
        Ok(())
    }));
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(msg)) => {
            report(&msg);
            -1
        }
        Err(_) => {
            report("internal error (panic) in vramtrace_observe_start");
            -1
        }
    }
}

/// Stops the recording: every observer's trace is finished, and events are
/// ignored until the next start. Returns 0, or -1 if a trace could not be
/// finished (reported on standard error).
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_observe_stop() -> c_int {
    let r = catch_unwind(AssertUnwindSafe(|| {
        reset_iterations();
        let mut stopped: Vec<*const Observer> = Vec::new();
        for slot in &SLOTS {
            *slot.route() = Route::Idle;
            *lock(&slot.pending_limit) = None;
            let obs = slot.observer.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !obs.is_null() {
                stopped.push(obs);
            }
        }
        *session() = None;
        let finished: Vec<Arc<Observer>> = lock(&OBSERVERS)
            .iter()
            .filter(|o| stopped.contains(&Arc::as_ptr(o)))
            .cloned()
            .collect();
        // A device whose trace could not be created was told of then.
        let mut status = if CREATE_FAILED.swap(false, Ordering::Relaxed) {
            -1
        } else {
            0
        };
        for o in &finished {
            match o.finish() {
                Ok(_) | Err(recorder::RecorderError::Finished) => {}
                Err(e) => {
                    report(&format!("finishing device {}: {e}", o.device()));
                    status = -1;
                }
            }
        }
        let finished: Vec<Arc<dyn traces::Written>> = finished
            .into_iter()
            .map(|o| o as Arc<dyn traces::Written>)
            .collect();
        traces::unregister(&finished);
        status
    }));
    r.unwrap_or_else(|_| {
        report("internal error (panic) in vramtrace_observe_stop");
        -1
    })
}

/// Records that `torch.cuda.empty_cache()` is about to run, on every device
/// being recorded (the segment frees it causes follow as events).
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_observe_empty_cache() {
    for slot in &SLOTS {
        let obs = slot.observer.load(Ordering::Acquire);
        if !obs.is_null() {
            let event = ObservedEvent {
                kind: EventKind::EmptyCache,
                addr: 0,
                size: 0,
                stream: 0,
                counter: 0,
            };
            // SAFETY: observers are never freed.
            if catch_unwind(AssertUnwindSafe(|| unsafe { &*obs }.record(event, None))).is_err() {
                report("internal error (panic) in vramtrace_observe_empty_cache");
            }
        }
    }
}

/// The observer of `device`, if it is being recorded.
pub(super) fn observer_of(device: c_int) -> Option<&'static Observer> {
    let slot = usize::try_from(device).ok().and_then(|d| SLOTS.get(d))?;
    let obs = slot.observer.load(Ordering::Acquire);
    // SAFETY: observers are never freed (see the module docs).
    (!obs.is_null()).then(|| unsafe { &*obs })
}

/// Records `device`'s free and total memory as the driver reports them
/// now (`cudaMemGetInfo`; a `device_memory` event, format 1.3), in order
/// with the device's allocator events: the shim calls it (through the
/// sink) right after an event the library asked a sample for, under
/// PyTorch's allocator lock; the Python package at the start (devices that
/// already hold memory) and before the stop. Returns 1 if recorded, 0 when
/// the device is not being recorded (no recording, or no event of the
/// device yet), -1 for values that cannot be (free above total, a total of
/// 0).
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_observe_device_memory(device: c_int, free: u64, total: u64) -> c_int {
    if traces::forked_child() {
        return 0;
    }
    if total == 0 || free > total {
        return -1;
    }
    let r = catch_unwind(|| match observer_of(device) {
        Some(obs) => obs.device_memory(free, total) as c_int,
        None => 0,
    });
    r.unwrap_or_else(|_| {
        report("internal error (panic) in vramtrace_observe_device_memory");
        -1
    })
}

/// Records a memory pool's life on `device` (a `pool` event, format 1.6):
/// `action` a [`PoolAction`] code (0 a capture began on `stream`, 1 it
/// ended, 2 the thread began allocating from the pool, 3 it stopped, 4 one
/// of the pool's users let it go, 5 a `MemPool` was made), `pool` the
/// pool's two ids (PyTorch's `MempoolId_t`). The Python package calls it around
/// `torch.cuda.graph` captures, `use_mem_pool` blocks and the end of
/// graphs and `MemPool`s. Returns 1 if recorded, 0 when the device is not
/// being recorded, -1 for an unknown action.
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_observe_pool(
    device: c_int,
    action: c_int,
    pool_first: u64,
    pool_second: u64,
    stream: u64,
) -> c_int {
    if traces::forked_child() {
        return 0;
    }
    let Some(action) = u8::try_from(action).ok().and_then(PoolAction::from_code) else {
        return -1;
    };
    let r = catch_unwind(|| match observer_of(device) {
        Some(obs) => {
            let event = PoolEvent::new(
                action,
                PoolId(pool_first, pool_second),
                device as u32,
                stream,
            );
            obs.pool(event) as c_int
        }
        None => 0,
    });
    r.unwrap_or_else(|_| {
        report("internal error (panic) in vramtrace_observe_pool");
        -1
    })
}

/// Records the most PyTorch's allocator may reserve on `device` from now
/// on (`torch.cuda.set_per_process_memory_fraction`, or the limit in force
/// when recording began; a `limit` event, format 1.3): `limit` bytes of
/// the device's `total` (`limit == total`: no cap). For a device with no
/// event yet, the limit is kept and recorded first in its trace, when its
/// first event comes (a later limit replaces it). Returns 1 if recorded, 0
/// if kept for the device's first event, -1 when not recording or the
/// values cannot be (a device index out of range, a limit above the total,
/// a total of 0).
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_observe_limit(device: c_int, limit: u64, total: u64) -> c_int {
    if traces::forked_child() {
        return 0;
    }
    let r = catch_unwind(|| {
        let Some(slot) = usize::try_from(device).ok().and_then(|d| SLOTS.get(d)) else {
            return -1;
        };
        if total == 0 || limit > total || session().is_none() {
            return -1;
        }
        // Under the route's lock, so that an observer made meanwhile takes
        // the pending limit or this call sees it.
        let _route = slot.route();
        if let Some(obs) = observer_of(device) {
            return obs.limit(limit, total) as c_int;
        }
        *lock(&slot.pending_limit) = Some((limit, total));
        0
    });
    r.unwrap_or_else(|_| {
        report("internal error (panic) in vramtrace_observe_limit");
        -1
    })
}

/// Writes the indices of the devices being recorded (those with a trace),
/// in order, to `out` (at most `len`) and returns how many there are (which
/// may exceed `len`); -1 for a NULL `out` with a non-zero `len`.
///
/// # Safety
/// `out` is NULL or points to `len` writable `int`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_observe_devices(out: *mut c_int, len: usize) -> c_int {
    if out.is_null() && len != 0 {
        return -1;
    }
    let mut n = 0usize;
    for (device, slot) in SLOTS.iter().enumerate() {
        if !slot.observer.load(Ordering::Acquire).is_null() {
            if n < len {
                // SAFETY: the caller's contract: `len` writable values.
                unsafe { *out.add(n) = device as c_int };
            }
            n += 1;
        }
    }
    n as c_int
}

/// Says what the live blocks at `addrs` on `device` hold, for their whole
/// lives (format 1.2's tags): `codes[i]` is the category code
/// (`vramtrace_format::Category`: 0 parameters, 1 buffers, 2 gradients,
/// 3 optimizer state, 4 activations, 5 temporaries, 6 other) of
/// `addrs[i]`. One call records a walk's tags under one lock, at one
/// moment, ordered with the device's allocator events, on the calling
/// thread. Returns the number recorded: 0 when `device` is not being
/// recorded (no recording, or no event of that device yet: it then holds
/// no block to tag); -1 when an argument is invalid (a NULL array, a code
/// of no category: nothing is recorded) or on an internal error.
///
/// # Safety
/// `addrs` and `codes` are NULL or point to `count` readable values each.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_observe_tag(
    device: c_int,
    addrs: *const u64,
    codes: *const u8,
    count: usize,
) -> c_int {
    if traces::forked_child() {
        return 0;
    }
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: forwarded contract.
        let Some(tags) = (unsafe { crate::tag_arrays(addrs, codes, count) }) else {
            return -1;
        };
        let Some(obs) = observer_of(device) else {
            return 0;
        };
        c_int::try_from(obs.tag_all(tags)).unwrap_or(c_int::MAX)
    }));
    r.unwrap_or_else(|_| {
        report("internal error (panic) in vramtrace_observe_tag");
        -1
    })
}

/// Says that the live blocks at `addrs[0..count]` of `device` hold a
/// category the program names itself (format 1.7's user tags): `name`, 1 to
/// 64 bytes without control characters, such as `"kv_cache"`. A built-in
/// category's name (`"parameters"`, ..., `"other"`) records plain tags.
/// Analyses show the category beside the built-in ones, exact. One lock
/// and one moment for the lot. Returns the number recorded: 0 when
/// `device` is not being recorded; -1 for a NULL or refused name, a NULL
/// array, or an internal error (nothing is recorded).
///
/// # Safety
/// `name` is NULL or a valid NUL-terminated string; `addrs` is NULL or
/// points to `count` readable values.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_observe_tag_user(
    device: c_int,
    name: *const c_char,
    addrs: *const u64,
    count: usize,
) -> c_int {
    if traces::forked_child() {
        return 0;
    }
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: forwarded contract.
        let Some((name, addrs)) = (unsafe { crate::user_tag_args(name, addrs, count) }) else {
            return -1;
        };
        match observer_of(device) {
            Some(obs) => name.record(obs, addrs),
            None => 0,
        }
    }));
    r.unwrap_or_else(|_| {
        report("internal error (panic) in vramtrace_observe_tag_user");
        -1
    })
}

/// Leaves out the Python frames of files whose path starts with `prefix`
/// (vramtrace's own package; `runpy`'s always are), from allocations and
/// from [`vramtrace_observe_python_stack`]. Call it before any frame is
/// read: a code already met keeps whether it was hidden.
///
/// # Safety
/// `prefix` is NULL or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_observe_hide(prefix: *const c_char) {
    // SAFETY: forwarded contract.
    let prefix = unsafe { c_str(prefix) };
    if !prefix.is_empty()
        && let Ok(source) = nogil::source()
    {
        source.hide(&prefix);
    }
}

/// Whether a recording is in progress (1) or not (0).
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_observe_active() -> c_int {
    session().is_some() as c_int
}

/// Writes the calling thread's Python frames, as an observed allocation
/// would record them now (read without the GIL), to `buf` as lines
/// `function\tfile\tline`, innermost first, NUL-terminated (cut to fit
/// `len`). Returns the number of frames, or -1 when frames cannot be read
/// in this process (the reason is written to `buf`). The Python package
/// checks these against the interpreter's own before it relies on them.
///
/// # Safety
/// `buf` is NULL or points to `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_observe_python_stack(buf: *mut c_char, len: usize) -> c_int {
    if buf.is_null() || len == 0 {
        return -1;
    }
    let r = catch_unwind(AssertUnwindSafe(|| match nogil::source() {
        Ok(source) => {
            // As a recording reads them (called from Python: the GIL may be
            // taken).
            source.watch_codes();
            let frames = capture_frames(&*source as &dyn FrameSource, 128);
            let mut text = String::new();
            for &(code, line) in &frames {
                let info = source.describe(code).unwrap_or_default();
                text.push_str(&format!("{}\t{}\t{line}\n", info.function, info.file));
            }
            (frames.len() as c_int, text)
        }
        Err(e) => (-1, e.to_string()),
    }));
    let (count, text) = r.unwrap_or_else(|_| (-1, "internal error (panic)".into()));
    let n = text.len().min(len - 1);
    // SAFETY: the caller's contract: `len` writable bytes; n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    count
}
