//! Where the shim's entries go: the sink's functions, and each device's
//! [`Slot`], which routes an event to the device's observer (one atomic
//! load on the hot path), creates it at the device's first event, and holds
//! events back until a mid-run start's snapshot marker.

use super::*;

pub(super) static SINK: TorchSink = TorchSink {
    abi: SINK_ABI,
    event: on_event,
    segment: on_segment,
    snapshot_done: on_snapshot_done,
    phase: on_phase,
    tag: vramtrace_observe_tag,
    device_memory: vramtrace_observe_device_memory,
};

/// The sink for the shim's `vramtrace_shim_attach`.
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_torch_sink() -> *const TorchSink {
    &SINK
}

/// Where a device's events go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// Nowhere: no recording.
    Idle,
    /// Nowhere yet: the snapshot's marker has not come, so events are
    /// part of the state it will give.
    AwaitingMarker,
    /// To the device's observer, created at the first event;
    /// `state_known` says whether its initial state is known by then.
    Live { state_known: bool },
}

pub(super) struct Slot {
    /// The device's observer while recording (hot path: one load).
    pub(super) observer: AtomicPtr<Observer>,
    pub(super) route: Mutex<Route>,
    /// A limit (bytes, total bytes) set for the device before its
    /// observer exists: recorded first thing in its trace.
    pub(super) pending_limit: Mutex<Option<(u64, u64)>>,
}

pub(super) static SLOTS: [Slot; MAX_DEVICES] = [const {
    Slot {
        observer: AtomicPtr::new(std::ptr::null_mut()),
        route: Mutex::new(Route::Idle),
        pending_limit: Mutex::new(None),
    }
}; MAX_DEVICES];

/// Whether a device's trace could not be created during the recording in
/// progress (reported then): [`vramtrace_observe_stop`] then fails, so the
/// program hears that a trace is missing.
pub(super) static CREATE_FAILED: AtomicBool = AtomicBool::new(false);

/// Every observer ever created: they must outlive any pointer to them.
pub(super) static OBSERVERS: Mutex<Vec<Arc<Observer>>> = Mutex::new(Vec::new());

impl Slot {
    pub(super) fn route(&self) -> MutexGuard<'_, Route> {
        self.route.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(super) fn observed(e: &TorchEvent, kind: EventKind) -> ObservedEvent {
    ObservedEvent {
        kind,
        addr: e.addr,
        size: e.size,
        stream: e.stream,
        counter: e.counter,
    }
}

/// Whether an event of `kind` changes what the device holds (or failed
/// for want of it): the device's memory is sampled right after it.
pub(super) fn samples_device_memory(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::SegmentAlloc
            | EventKind::SegmentFree
            | EventKind::SegmentMap
            | EventKind::SegmentUnmap
            | EventKind::Oom
    )
}

/// Records a trace entry; returns 1 when the shim should measure the
/// device's memory now ([`TorchSink::event`]): after a segment event or an
/// out-of-memory error that was recorded, and after the first event of a
/// device's trace (its memory when recording began).
pub(super) extern "C" fn on_event(e: *const TorchEvent) -> u32 {
    if traces::forked_child() {
        return 0;
    }
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the shim passes a valid event for the call's duration.
        let e = unsafe { &*e };
        let Some(slot) = usize::try_from(e.device).ok().and_then(|d| SLOTS.get(d)) else {
            return 0;
        };
        let kind = u8::try_from(e.kind).ok().and_then(EventKind::from_code);
        let obs = slot.observer.load(Ordering::Acquire);
        if !obs.is_null() {
            if let Some(kind) = kind {
                // SAFETY: observers are never freed (see the module docs).
                let obs = unsafe { &*obs };
                obs.record(observed(e, kind), context(e, kind));
                if kind == EventKind::SegmentAlloc && e.pool != [0, 0] {
                    obs.segment_pool(e.addr, PoolId(e.pool[0], e.pool[1]));
                }
                return samples_device_memory(kind) as u32;
            }
            return 0;
        }
        route_slowly(slot, e.device as u32, e, kind) as u32
    }));
    r.unwrap_or_else(|_| {
        report("internal error (panic) recording an allocator event");
        0
    })
}

/// The autograd node's name, for allocations.
pub(super) fn context(e: &TorchEvent, kind: EventKind) -> Option<&str> {
    if !matches!(kind, EventKind::Alloc | EventKind::Oom) || e.context.is_null() {
        return None;
    }
    // SAFETY: the shim passes NULL or a NUL-terminated name valid during the
    // call.
    unsafe { CStr::from_ptr(e.context) }.to_str().ok()
}

/// An event for a device without an observer: the marker, an event that is
/// part of the state to come, or the first event of a device. Returns
/// whether the device's memory should be sampled now (a recorded event
/// that samples it, or the first event of the device's trace).
#[cold]
pub(super) fn route_slowly(
    slot: &Slot,
    device: u32,
    e: &TorchEvent,
    kind: Option<EventKind>,
) -> bool {
    let mut route = slot.route();
    match (*route, kind) {
        (Route::Idle, _) => false,
        (Route::AwaitingMarker, _) => {
            if e.kind == KIND_SNAPSHOT {
                *route = Route::Live { state_known: false };
            }
            false
        }
        (Route::Live { .. }, None) => false,
        (Route::Live { state_known }, Some(kind)) => {
            // Another thread may have created it while this one waited.
            let mut obs = slot.observer.load(Ordering::Acquire);
            let created = obs.is_null();
            if obs.is_null() {
                let start = if state_known {
                    StartState::Empty
                } else {
                    StartState::Pending
                };
                match create(device, start) {
                    Ok(o) => {
                        obs = Arc::as_ptr(&o).cast_mut();
                        slot.observer.store(obs, Ordering::Release);
                    }
                    Err(msg) => {
                        report(&msg);
                        CREATE_FAILED.store(true, Ordering::Relaxed);
                        *route = Route::Idle;
                        return false;
                    }
                }
            }
            // SAFETY: observers are never freed.
            let obs = unsafe { &*obs };
            obs.record(observed(e, kind), context(e, kind));
            if kind == EventKind::SegmentAlloc && e.pool != [0, 0] {
                obs.segment_pool(e.addr, PoolId(e.pool[0], e.pool[1]));
            }
            created || samples_device_memory(kind)
        }
    }
}

/// Creates the observer of `device` for the recording in progress.
pub(super) fn create(device: u32, start: StartState) -> Result<Arc<Observer>, String> {
    let (config, first) = {
        let mut s = session();
        let s = s.as_mut().ok_or("no recording in progress")?;
        let first = *s.first_device.get_or_insert(device) == device;
        (s.config.clone(), first)
    };
    let rank = crate::env_nonempty("RANK").unwrap_or_else(|| "0".into());
    let path = trace_path(
        &config.pattern,
        device,
        first,
        std::process::id(),
        rank.trim(),
    );
    let setup = ObserverSetup {
        device: config.devices.get(&device).cloned().unwrap_or(DeviceInfo {
            index: device,
            ..DeviceInfo::default()
        }),
        allocator: config.allocator.clone(),
        start,
    };
    let observer = Observer::create(&path, setup, config.options.clone())
        .map_err(|e| format!("cannot record device {device}: {e}"))?;
    let observer = Arc::new(observer);
    // A limit set before the device's first event comes first.
    if let Some((limit, total)) = SLOTS
        .get(device as usize)
        .and_then(|slot| lock(&slot.pending_limit).take())
    {
        observer.limit(limit, total);
    }
    lock(&OBSERVERS).push(observer.clone());
    traces::register(observer.clone());
    Ok(observer)
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) extern "C" fn on_segment(s: *const TorchSegment) {
    let r = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the shim passes a valid segment and `block_count` blocks
        // for the call's duration.
        let s = unsafe { &*s };
        let blocks = if s.blocks.is_null() {
            &[][..]
        } else {
            // SAFETY: as above.
            unsafe { std::slice::from_raw_parts(s.blocks, s.block_count as usize) }
        };
        let Ok(device) = u32::try_from(s.device) else {
            return;
        };
        let mut addr = s.addr;
        let blocks = blocks
            .iter()
            .map(|b| {
                let block = BlockState {
                    addr,
                    size: b.size,
                    requested: b.requested,
                    status: match b.state {
                        1 => BlockStatus::Allocated,
                        2 => BlockStatus::PendingFree,
                        _ => BlockStatus::Free,
                    },
                    stack: StackId::NONE,
                };
                addr += b.size;
                block
            })
            .collect();
        let mut session = session();
        if let Some(session) = session.as_mut() {
            session
                .snapshot
                .entry(device)
                .or_default()
                .segments
                .push(SegmentState {
                    device,
                    addr: s.addr,
                    size: s.size,
                    stream: s.stream,
                    expandable: s.expandable != 0,
                    blocks,
                    pool: PoolId(s.pool[0], s.pool[1]),
                });
        }
    }));
    if r.is_err() {
        report("internal error (panic) reading the allocator's snapshot");
    }
}

/// Gives each device's observer the state of the snapshot, creating one for
/// a device that holds memory and has none yet.
pub(super) extern "C" fn on_snapshot_done() {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let mut states = match session().as_mut() {
            Some(s) => std::mem::take(&mut s.snapshot),
            None => return,
        };
        for (device, slot) in SLOTS.iter().enumerate() {
            let state = states.remove(&(device as u32)).unwrap_or_default();
            let mut route = slot.route();
            let (Route::Live { state_known: false } | Route::AwaitingMarker) = *route else {
                continue;
            };
            // A device without a marker had no allocator to snapshot, or a
            // torch that emits none: its state is what the snapshot says.
            *route = Route::Live { state_known: true };
            let obs = slot.observer.load(Ordering::Acquire);
            let result = if !obs.is_null() {
                // SAFETY: observers are never freed.
                unsafe { &*obs }
                    .set_initial_state(state)
                    .map_err(|e| e.to_string())
            } else if !state.segments.is_empty() {
                create(device as u32, StartState::Known(state)).map(|o| {
                    slot.observer
                        .store(Arc::as_ptr(&o).cast_mut(), Ordering::Release)
                })
            } else {
                Ok(())
            };
            if let Err(e) = result {
                report(&format!("device {device}: {e}"));
            }
        }
    }));
    if r.is_err() {
        report("internal error (panic) delivering the allocator's snapshot");
    }
}

pub(super) extern "C" fn on_phase(begin: c_int, name: *const c_char) {
    // SAFETY: the shim passes a NUL-terminated name.
    unsafe {
        if begin != 0 {
            traces::vramtrace_phase_begin(name);
        } else {
            traces::vramtrace_phase_end_named(name);
            if ITERATION_PENDING.load(Ordering::Relaxed)
                && CStr::from_ptr(name).to_bytes().starts_with(OPTIMIZER_STEP)
                && ITERATION_PENDING.swap(false, Ordering::Relaxed)
            {
                next_iteration();
            }
        }
    }
}
