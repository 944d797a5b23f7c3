//! Observer mode: PyTorch's own caching allocator runs unchanged and
//! vramtrace records what it reports.
//!
//! The C++ shim that ships with the Python package
//! (`vramtrace/shim/torch_observer.cpp`, built against the installed torch)
//! attaches an allocator trace tracker and calls the functions of
//! [`vramtrace_torch_sink`] for each trace entry, with PyTorch's allocator
//! lock held. The structures of that ABI ([`TorchSink`] and what it passes)
//! reach the C++ side as `vramtrace/shim/vramtrace_sink.h`, which cbindgen
//! generates from this file (`tests/sink_header.rs` checks the committed
//! one). Each device gets an [`Observer`], created at its first event,
//! writing its own trace file; the hot path is one atomic load to find it.
//!
//! Starting mid-run: [`vramtrace_observe_start`] with `state=pending` arms
//! every device; the shim then takes the allocator's snapshot, which emits
//! a marker into each device's event stream, under the same lock as the
//! state it reads. Events before a device's marker are part of the state and
//! are left out; events after it follow the state, which the shim delivers
//! segment by segment ([`TorchSink::segment`], then
//! [`TorchSink::snapshot_done`]).
//!
//! Observers are never freed (a few hundred bytes each once finished: their
//! buffers and tables are released): the hot path reads a raw pointer to
//! one without any reference count, so it must stay valid after
//! [`vramtrace_observe_stop`].

use crate::python::nogil;
use crate::{MAX_DEVICES, c_str, report, stack_setting, trace_path, traces};
use recorder::allocator::AllocatorConfig;
use recorder::format::{
    BlockState, BlockStatus, DeviceInfo, EventKind, InitialState, PoolAction, PoolEvent, PoolId,
    SegmentState, StackId,
};
use recorder::recorder::{
    FrameSource, KeepLast, ObservedEvent, Observer, ObserverSetup, RecorderOptions, StartState,
    Trace, capture_frames, thread_id,
};
use std::collections::BTreeMap;
use std::ffi::{CStr, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The version of [`TorchSink`] and the structures it passes; the shim
/// refuses a sink of another version.
pub const SINK_ABI: u32 = 5;

/// [`TorchEvent::kind`] of the snapshot marker; other kinds are
/// [`EventKind`] codes.
pub const KIND_SNAPSHOT: u32 = 100;

/// One trace entry of PyTorch's allocator, as the shim passes it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TorchEvent {
    /// An [`EventKind`] code (block, segment and `oom` kinds), or
    /// [`KIND_SNAPSHOT`].
    pub kind: u32,
    /// The CUDA device index.
    pub device: i32,
    /// The address; for `oom`, the device's free bytes.
    pub addr: u64,
    /// The requested size (blocks), the range's size (segments), the
    /// request (`oom`).
    pub size: u64,
    /// The stream (`cudaStream_t` as an integer).
    pub stream: u64,
    /// The CPU's time-stamp counter when PyTorch made the entry, or 0 (see
    /// [`ObservedEvent::counter`]).
    pub counter: u64,
    /// NULL, or the name of the autograd node the calling thread is running
    /// (for allocations of threads without Python frames).
    pub context: *const c_char,
    /// The pool of the block or segment (PyTorch's `TraceEntry::mempool_`,
    /// ABI 5): `(0, 0)` for the default pools, or where the torch the shim
    /// was built against does not say.
    pub pool: [u64; 2],
}

/// A block of a [`TorchSegment`], in address order.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TorchBlock {
    pub size: u64,
    pub requested: u64,
    /// 0 free, 1 allocated, 2 freed but in use on another stream.
    pub state: u32,
    pub reserved: u32,
}

/// A segment of the allocator's snapshot, with its blocks.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct TorchSegment {
    pub device: i32,
    /// Non-zero for an expandable segment (`size` is then its mapped size).
    pub expandable: u32,
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    pub blocks: *const TorchBlock,
    pub block_count: u64,
    /// The segment's pool (`SegmentInfo::owner_private_pool_id`, ABI 5).
    pub pool: [u64; 2],
}

/// The functions the shim calls. See the [module docs](self).
#[repr(C)]
pub struct TorchSink {
    /// [`SINK_ABI`].
    pub abi: u32,
    /// A trace entry (called under PyTorch's allocator lock). Returns 1
    /// when the library wants the device's memory right after it (ABI 4):
    /// the shim then measures it (`cudaMemGetInfo`) and calls
    /// [`device_memory`](Self::device_memory) before it returns to PyTorch.
    pub event: extern "C" fn(*const TorchEvent) -> u32,
    /// A segment of the snapshot taken at start.
    pub segment: extern "C" fn(*const TorchSegment),
    /// The snapshot's segments are all given.
    pub snapshot_done: extern "C" fn(),
    /// A `record_function` range began (`begin` 1) or ended (0).
    pub phase: extern "C" fn(c_int, *const c_char),
    /// Tags of one device's blocks: [`vramtrace_observe_tag`] (the shim
    /// tags the gradients it watches through it, ABI 3).
    pub tag: unsafe extern "C" fn(c_int, *const u64, *const u8, usize) -> c_int,
    /// A device's free and total bytes, measured by the shim when
    /// [`event`](Self::event) asked: [`vramtrace_observe_device_memory`]
    /// (ABI 4).
    pub device_memory: extern "C" fn(c_int, u64, u64) -> c_int,
}

// The layout of the sink's structures, which the shim's C++ asserts too
// (python/vramtrace/shim/torch_observer.cpp) and tests/sink_header.rs writes
// into the header it includes: changing it is a new SINK_ABI.
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<TorchEvent>() == 64);
    assert!(offset_of!(TorchEvent, device) == 4);
    assert!(offset_of!(TorchEvent, addr) == 8);
    assert!(offset_of!(TorchEvent, size) == 16);
    assert!(offset_of!(TorchEvent, stream) == 24);
    assert!(offset_of!(TorchEvent, counter) == 32);
    assert!(offset_of!(TorchEvent, context) == 40);
    assert!(offset_of!(TorchEvent, pool) == 48);
    assert!(size_of::<TorchBlock>() == 24);
    assert!(offset_of!(TorchBlock, requested) == 8);
    assert!(offset_of!(TorchBlock, state) == 16);
    assert!(offset_of!(TorchBlock, reserved) == 20);
    assert!(size_of::<TorchSegment>() == 64);
    assert!(offset_of!(TorchSegment, expandable) == 4);
    assert!(offset_of!(TorchSegment, addr) == 8);
    assert!(offset_of!(TorchSegment, size) == 16);
    assert!(offset_of!(TorchSegment, stream) == 24);
    assert!(offset_of!(TorchSegment, blocks) == 32);
    assert!(offset_of!(TorchSegment, block_count) == 40);
    assert!(offset_of!(TorchSegment, pool) == 48);
    assert!(size_of::<TorchSink>() == 56);
    assert!(offset_of!(TorchSink, event) == 8);
    assert!(offset_of!(TorchSink, segment) == 16);
    assert!(offset_of!(TorchSink, snapshot_done) == 24);
    assert!(offset_of!(TorchSink, phase) == 32);
    assert!(offset_of!(TorchSink, tag) == 40);
    assert!(offset_of!(TorchSink, device_memory) == 48);
};

static SINK: TorchSink = TorchSink {
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

/// What a recording is set up with ([`vramtrace_observe_start`]).
struct Config {
    pattern: String,
    options: RecorderOptions,
    allocator: AllocatorConfig,
    devices: BTreeMap<u32, DeviceInfo>,
}

/// The recording in progress, if any.
struct Session {
    config: Arc<Config>,
    first_device: Option<u32>,
    /// The snapshot's segments as they arrive, by device.
    snapshot: BTreeMap<u32, InitialState>,
}

static SESSION: Mutex<Option<Session>> = Mutex::new(None);

fn session() -> MutexGuard<'static, Option<Session>> {
    SESSION.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where a device's events go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// Nowhere: no recording.
    Idle,
    /// Nowhere yet: the snapshot's marker has not come, so events are
    /// part of the state it will give.
    AwaitingMarker,
    /// To the device's observer, created at the first event;
    /// `state_known` says whether its initial state is known by then.
    Live { state_known: bool },
}

struct Slot {
    /// The device's observer while recording (hot path: one load).
    observer: AtomicPtr<Observer>,
    route: Mutex<Route>,
    /// A limit (bytes, total bytes) set for the device before its
    /// observer exists: recorded first thing in its trace.
    pending_limit: Mutex<Option<(u64, u64)>>,
}

static SLOTS: [Slot; MAX_DEVICES] = [const {
    Slot {
        observer: AtomicPtr::new(std::ptr::null_mut()),
        route: Mutex::new(Route::Idle),
        pending_limit: Mutex::new(None),
    }
}; MAX_DEVICES];

/// Whether a device's trace could not be created during the recording in
/// progress (reported then): [`vramtrace_observe_stop`] then fails, so the
/// program hears that a trace is missing.
static CREATE_FAILED: AtomicBool = AtomicBool::new(false);

/// Every observer ever created: they must outlive any pointer to them.
static OBSERVERS: Mutex<Vec<Arc<Observer>>> = Mutex::new(Vec::new());

impl Slot {
    fn route(&self) -> MutexGuard<'_, Route> {
        self.route.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn observed(e: &TorchEvent, kind: EventKind) -> ObservedEvent {
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
fn samples_device_memory(kind: EventKind) -> bool {
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
extern "C" fn on_event(e: *const TorchEvent) -> u32 {
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
fn context(e: &TorchEvent, kind: EventKind) -> Option<&str> {
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
fn route_slowly(slot: &Slot, device: u32, e: &TorchEvent, kind: Option<EventKind>) -> bool {
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
fn create(device: u32, start: StartState) -> Result<Arc<Observer>, String> {
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

extern "C" fn on_segment(s: *const TorchSegment) {
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
extern "C" fn on_snapshot_done() {
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

extern "C" fn on_phase(begin: c_int, name: *const c_char) {
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

/// Each training iteration is a phase `iter<N>`, numbered from 0 in each
/// recording as the training loop counts them: `iter0` begins when
/// recording does if an optimizer exists by then, else when the first one
/// is made ([`vramtrace_iteration_begin`]); the N-th step of the first
/// optimizer to step (N from 1) ends `iter<N-1>` and begins `iter<N>`
/// ([`vramtrace_iteration_end`]); stopping ends the open one. So
/// `for i in range(n): ...; opt.step()` runs loop index `i` in `iter<i>`.
/// (The analyzer groups them as `iter#`, and a peak names its iteration.)
const ITERATION: &str = "iter";

/// The start of the `record_function` name PyTorch gives an optimizer's
/// `step` (`Optimizer.step#AdamW.step`).
const OPTIMIZER_STEP: &[u8] = b"Optimizer.step#";

/// An iteration ends when the step's `record_function` range does.
static ITERATION_PENDING: AtomicBool = AtomicBool::new(false);

/// The thread whose `iter` phase is open (the thread that steps the
/// optimizer), so that stopping ends it from any thread; `u32::MAX` while
/// none is.
static ITERATION_THREAD: AtomicU32 = AtomicU32::new(u32::MAX);

/// The number of the open iteration, or of the next to begin while none
/// is open: the steps counted so far in this recording.
static ITERATION_NUMBER: AtomicU64 = AtomicU64::new(0);

/// Serializes the iteration calls (the optimizer's thread and the one that
/// stops may differ).
static ITERATION_LOCK: Mutex<()> = Mutex::new(());

/// A step ended: the open iteration ends (if one is) and the next begins,
/// numbered by the steps counted so far (a step with no iteration open, as
/// when no optimizer was known at its making, begins `iter1` after the
/// first step: the numbers stay the loop's).
fn next_iteration() {
    let _serial = lock(&ITERATION_LOCK);
    let previous = ITERATION_THREAD.swap(thread_id(), Ordering::Relaxed);
    let n = ITERATION_NUMBER.load(Ordering::Relaxed);
    if previous != u32::MAX {
        traces::end_phase_of(previous, &format!("{ITERATION}{n}"));
    }
    ITERATION_NUMBER.store(n + 1, Ordering::Relaxed);
    traces::begin_phase(format!("{ITERATION}{}", n + 1));
}

/// Begins the first iteration, `iter0`, on the calling thread, if none has
/// begun in this recording. Returns whether it began one.
fn begin_first_iteration() -> bool {
    let _serial = lock(&ITERATION_LOCK);
    if ITERATION_THREAD.load(Ordering::Relaxed) != u32::MAX
        || ITERATION_NUMBER.load(Ordering::Relaxed) != 0
        || session().is_none()
    {
        return false;
    }
    ITERATION_THREAD.store(thread_id(), Ordering::Relaxed);
    traces::begin_phase(format!("{ITERATION}0"));
    true
}

/// Ends the open iteration (at stop) and forgets the count.
fn reset_iterations() {
    let _serial = lock(&ITERATION_LOCK);
    ITERATION_PENDING.store(false, Ordering::Relaxed);
    let iterating = ITERATION_THREAD.swap(u32::MAX, Ordering::Relaxed);
    if iterating != u32::MAX {
        let n = ITERATION_NUMBER.load(Ordering::Relaxed);
        traces::end_phase_of(iterating, &format!("{ITERATION}{n}"));
    }
    ITERATION_NUMBER.store(0, Ordering::Relaxed);
}

/// The training loop's first iteration begins now (the Python package
/// calls it when recording begins while an optimizer exists, or when the
/// first optimizer is made): `iter0` begins on the calling thread, unless
/// an iteration has begun already in this recording or none is in
/// progress. Returns 1 if it began, else 0.
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_iteration_begin() -> c_int {
    catch_unwind(begin_first_iteration).unwrap_or_else(|_| {
        report("internal error (panic) in vramtrace_iteration_begin");
        false
    }) as c_int
}

/// An optimizer step of the training loop ended (called from torch's
/// global optimizer-step hook): the open `iter` phase ends and the next
/// begins. With `deferred`, that happens when the step's `record_function`
/// range ends, which encloses the hook (so that the phases nest); else now.
#[unsafe(no_mangle)]
pub extern "C" fn vramtrace_iteration_end(deferred: c_int) {
    if deferred != 0 {
        ITERATION_PENDING.store(true, Ordering::Relaxed);
    } else if catch_unwind(next_iteration).is_err() {
        report("internal error (panic) in vramtrace_iteration_end");
    }
}

/// What [`vramtrace_observe_start`]'s text says.
struct StartRequest {
    config: Config,
    pending_state: bool,
}

/// Parses the start configuration: `key=value` lines (see
/// [`vramtrace_observe_start`]).
fn parse_start(text: &str) -> Result<StartRequest, String> {
    let mut pattern = "vramtrace-%p.vtrace".to_string();
    let mut stacks = None;
    let mut keep_last = None;
    let mut pending_state = false;
    let mut settings = BTreeMap::new();
    let mut devices = BTreeMap::new();
    let mut metadata = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (key, value) = line
            .split_once('=')
            .ok_or_else(|| format!("invalid configuration line {line:?}"))?;
        match key {
            "out" => pattern = value.to_string(),
            "stacks" => stacks = Some(value.to_string()),
            "keep_last" => keep_last = Some(value.parse::<KeepLast>()?),
            "state" => {
                pending_state = match value {
                    "pending" => true,
                    "empty" => false,
                    _ => return Err(format!("invalid state {value:?}")),
                }
            }
            "device" => {
                let mut parts = value.splitn(3, '\t');
                let index = parts.next().and_then(|v| v.parse().ok());
                let total = parts.next().and_then(|v| v.parse().ok());
                let name = parts.next().unwrap_or("").to_string();
                let (Some(index), Some(total_memory)) = (index, total) else {
                    return Err(format!("invalid device {value:?}"));
                };
                devices.insert(
                    index,
                    DeviceInfo {
                        index,
                        name,
                        total_memory,
                    },
                );
            }
            _ => {
                if let Some(k) = key.strip_prefix("setting.") {
                    settings.insert(k.to_string(), value.to_string());
                } else if let Some(k) = key.strip_prefix("meta.") {
                    metadata.insert(k.to_string(), value.to_string());
                } else {
                    return Err(format!("unknown configuration key {key:?}"));
                }
            }
        }
    }
    let allocator = match AllocatorConfig::from_settings(&settings) {
        Ok((config, _ignored)) => config,
        Err(e) => {
            report(&format!(
                "PyTorch's allocator settings could not be read ({e}): block sizes assume the defaults"
            ));
            AllocatorConfig::default()
        }
    };
    let (native, python) = stack_setting(stacks.as_deref())?;
    let frame_source = if python {
        match nogil::source() {
            Ok(s) => {
                // Here, called from Python and not under the allocator's
                // lock, the GIL may be taken.
                s.watch_codes();
                Some(s as Arc<dyn FrameSource>)
            }
            Err(e) => {
                report(&format!("no Python stacks: {e}"));
                None
            }
        }
    } else {
        None
    };
    metadata.insert("recorded_by".into(), "libvramtrace_recorder".into());
    metadata.insert("mode".into(), "observe".into());
    let options = RecorderOptions {
        stacks: native,
        frame_source,
        metadata,
        keep_last,
        ..RecorderOptions::default()
    };
    Ok(StartRequest {
        config: Config {
            pattern,
            options,
            allocator,
            devices,
        },
        pending_state,
    })
}

/// Refuses a trace file pattern whose folder does not exist or cannot be
/// written: the traces are created at each device's first event, too late
/// to tell the program that started the recording.
fn writable_folder(pattern: &str) -> Result<(), String> {
    let folder = std::path::Path::new(pattern)
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    if folder.to_string_lossy().contains('%') {
        // A folder per rank or device: made by whoever names it so.
        return Ok(());
    }
    if !folder.is_dir() {
        return Err(format!(
            "cannot write traces to {}: no such folder",
            folder.display()
        ));
    }
    let c = std::ffi::CString::new(folder.as_os_str().as_encoded_bytes())
        .map_err(|_| format!("cannot write traces to {}", folder.display()))?;
    // SAFETY: `c` is a NUL-terminated path; access() only reads it.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return Err(format!(
            "cannot write traces to {}: {}",
            folder.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
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
                Ok(_) | Err(recorder::recorder::RecorderError::Finished) => {}
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
fn observer_of(device: c_int) -> Option<&'static Observer> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_configuration() {
        let r = parse_start(
            "out=run-%d.vtrace\nstacks=none\nstate=pending\n\
             device=1\t85899345920\tNVIDIA H100 80GB HBM3\n\
             setting.max_split_size=-1\nsetting.expandable_segments=True\n\
             setting.roundup_power2_divisions=[1:0,2:0]\nmeta.torch=2.11.0\n",
        )
        .unwrap();
        assert!(r.pending_state);
        assert_eq!(r.config.pattern, "run-%d.vtrace");
        assert!(r.config.allocator.expandable_segments);
        assert!(r.config.options.frame_source.is_none());
        assert_eq!(r.config.devices[&1].name, "NVIDIA H100 80GB HBM3");
        assert_eq!(r.config.devices[&1].total_memory, 85899345920);
        assert_eq!(r.config.options.metadata["torch"], "2.11.0");
        assert_eq!(r.config.options.metadata["mode"], "observe");
        assert!(parse_start("state=later").is_err());
        assert!(parse_start("colour=blue").is_err());
        assert!(parse_start("stacks=pyhton").is_err());
        assert!(parse_start("device=x\ty\tz").is_err());
    }

    /// Feeds events as the shim would and reads the trace back.
    #[test]
    fn events_route_through_marker_snapshot_and_stop() {
        let _globals = crate::tests::GLOBALS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("vt-observe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pattern = dir.join("t-%d.vtrace");
        let config = format!("out={}\nstacks=none\nstate=pending\n", pattern.display());
        let config = std::ffi::CString::new(config).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { vramtrace_observe_start(config.as_ptr()) }, 0);
        assert_eq!(unsafe { vramtrace_observe_start(config.as_ptr()) }, -1);
        let ev = |kind: u32, device, addr, size| TorchEvent {
            kind,
            device,
            addr,
            size,
            stream: 0,
            counter: 0,
            context: std::ptr::null(),
            pool: [0, 0],
        };
        let alloc = EventKind::Alloc.code() as u32;
        let free = EventKind::FreeRequested.code() as u32;
        let freed = EventKind::FreeCompleted.code() as u32;
        // Before the marker: part of the snapshot, left out.
        on_event(&ev(alloc, 5, 0x1000, 100));
        on_event(&ev(KIND_SNAPSHOT, 5, 0, 0));
        // After it: recorded, held until the state comes.
        on_event(&ev(free, 5, 0x1000, 100));
        on_event(&ev(freed, 5, 0x1000, 100));
        let blocks = [
            TorchBlock {
                size: 512,
                requested: 100,
                state: 1,
                reserved: 0,
            },
            TorchBlock {
                size: (2 << 20) - 512,
                requested: 0,
                state: 0,
                reserved: 0,
            },
        ];
        on_segment(&TorchSegment {
            device: 5,
            expandable: 0,
            addr: 0x1000,
            size: 2 << 20,
            stream: 0,
            blocks: blocks.as_ptr(),
            block_count: 2,
            pool: [0, 0],
        });
        // A device that holds memory but reported nothing since.
        on_segment(&TorchSegment {
            device: 6,
            expandable: 0,
            addr: 0x100000,
            size: 2 << 20,
            stream: 0,
            blocks: std::ptr::null(),
            block_count: 0,
            pool: [0, 0],
        });
        on_snapshot_done();
        on_event(&ev(alloc, 5, 0x1000, 300));
        // Device 7 was never marked: its first event comes after the state.
        on_event(&ev(KIND_SNAPSHOT, 7, 0, 0));
        assert_eq!(vramtrace_observe_active(), 1);
        assert_eq!(vramtrace_observe_stop(), 0);
        assert_eq!(vramtrace_observe_active(), 0);
        // Ignored once stopped.
        on_event(&ev(alloc, 5, 0x2000, 300));

        let read = |device: u32| {
            let path = dir.join(format!("t-{device}.vtrace"));
            let bytes = std::fs::read(&path).unwrap();
            let mut r = recorder::format::TraceReader::new(&bytes[..]).unwrap();
            let events: Vec<_> = r.events().collect::<Result<_, _>>().unwrap();
            (r.initial_state().cloned(), events, r.footer().is_some())
        };
        let (state, events, complete) = read(5);
        assert!(complete);
        let state = state.unwrap();
        assert_eq!(state.segments[0].blocks[1].addr, 0x1000 + 512);
        let shapes: Vec<(EventKind, u64)> = events
            .iter()
            .map(|e| match e.data {
                recorder::format::EventData::Alloc(b)
                | recorder::format::EventData::FreeRequested(b)
                | recorder::format::EventData::FreeCompleted(b) => (e.kind(), b.size),
                _ => (e.kind(), 0),
            })
            .collect();
        assert_eq!(
            shapes,
            [
                (EventKind::FreeRequested, 512),
                (EventKind::FreeCompleted, 512),
                (EventKind::Alloc, 512),
            ]
        );
        let (state, events, _) = read(6);
        assert_eq!(state.unwrap().segments.len(), 1);
        assert!(events.is_empty());
        assert!(!dir.join("t-7.vtrace").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Tags reach the device's observer in order with its events, carry the
    /// header's `categories` metadata the Python side sets, and are refused
    /// whole when an argument is invalid.
    #[test]
    fn tags_go_to_the_devices_observer() {
        let _globals = crate::tests::GLOBALS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("vt-observe-tag-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pattern = dir.join("t-%d.vtrace");
        let config = format!(
            "out={}\nstacks=none\nstate=empty\nmeta.categories=tags\n",
            pattern.display()
        );
        let config = std::ffi::CString::new(config).unwrap();
        let tag = |device, addrs: &[u64], codes: &[u8]| {
            assert_eq!(addrs.len(), codes.len());
            // SAFETY: two arrays of `addrs.len()` values.
            unsafe { vramtrace_observe_tag(device, addrs.as_ptr(), codes.as_ptr(), addrs.len()) }
        };
        // Not recording: nothing to tag.
        assert_eq!(tag(0, &[0x1000], &[0]), 0);
        // SAFETY: a valid C string.
        assert_eq!(unsafe { vramtrace_observe_start(config.as_ptr()) }, 0);
        // No event of the device yet: no observer, no block.
        assert_eq!(tag(2, &[0x1000], &[0]), 0);
        let ev = |kind: EventKind, addr, size| TorchEvent {
            kind: kind.code() as u32,
            device: 2,
            addr,
            size,
            stream: 0,
            counter: 0,
            context: std::ptr::null(),
            pool: [0, 0],
        };
        on_event(&ev(EventKind::SegmentAlloc, 0x10_0000, 2 << 20));
        on_event(&ev(EventKind::Alloc, 0x10_0000, 1000));
        on_event(&ev(EventKind::Alloc, 0x10_0400, 1000));
        assert_eq!(tag(2, &[0x10_0000, 0x10_0400], &[0, 3]), 2);
        assert_eq!(tag(2, &[0x10_0000], &[7]), -1, "no category 7");
        // SAFETY: NULL arrays, with and without a count.
        unsafe {
            assert_eq!(
                vramtrace_observe_tag(2, std::ptr::null(), std::ptr::null(), 1),
                -1
            );
            assert_eq!(
                vramtrace_observe_tag(2, std::ptr::null(), std::ptr::null(), 0),
                0
            );
        }
        assert_eq!(tag(-1, &[0x10_0000], &[0]), 0);
        assert_eq!(tag(MAX_DEVICES as c_int, &[0x10_0000], &[0]), 0);
        on_event(&ev(EventKind::FreeRequested, 0x10_0400, 1000));
        assert_eq!(vramtrace_observe_stop(), 0);
        assert_eq!(tag(2, &[0x10_0000], &[0]), 0, "stopped");

        let bytes = std::fs::read(dir.join("t-2.vtrace")).unwrap();
        let mut r = recorder::format::TraceReader::new(&bytes[..]).unwrap();
        assert_eq!(r.header().metadata["categories"], "tags");
        let events: Vec<_> = r.events().collect::<Result<_, _>>().unwrap();
        let kinds: Vec<EventKind> = events.iter().map(|e| e.kind()).collect();
        use EventKind::*;
        assert_eq!(kinds, [SegmentAlloc, Alloc, Alloc, Tag, Tag, FreeRequested]);
        let tags: Vec<(u64, u32, u8)> = events
            .iter()
            .filter_map(|e| match e.data {
                recorder::format::EventData::Tag(t) => Some((t.addr, t.device, t.code)),
                _ => None,
            })
            .collect();
        assert_eq!(tags, [(0x10_0000, 2, 0), (0x10_0400, 2, 3)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
    /// Format 1.3 in observer mode: a limit set before a device's first
    /// event is recorded first in its trace; the library asks the shim for
    /// a device-memory sample after the first event, each segment event and
    /// each OOM (not after block events), and records it next; samples and
    /// limits of devices not recorded, or with impossible values, are
    /// refused; iterations count as the loop does.
    #[test]
    fn limits_samples_and_iterations() {
        let _globals = crate::tests::GLOBALS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("vt-observe-28-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pattern = dir.join("t-%d.vtrace");
        assert_eq!(vramtrace_observe_limit(1, 10, 100), -1, "not recording");
        assert_eq!(vramtrace_iteration_begin(), 0, "not recording");
        let config = format!("out={}\nstacks=none\nstate=empty\n", pattern.display());
        let config = std::ffi::CString::new(config).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { vramtrace_observe_start(config.as_ptr()) }, 0);
        assert_eq!(vramtrace_observe_limit(1, 30 << 30, 80 << 30), 0, "kept");
        assert_eq!(
            vramtrace_observe_limit(1, 20 << 30, 80 << 30),
            0,
            "replaced"
        );
        assert_eq!(vramtrace_observe_limit(1, 90 << 30, 80 << 30), -1);
        assert_eq!(vramtrace_observe_limit(-1, 1, 2), -1);
        assert_eq!(vramtrace_observe_limit(MAX_DEVICES as c_int, 1, 2), -1);
        assert_eq!(vramtrace_observe_device_memory(1, 5, 10), 0, "no trace yet");
        assert_eq!(vramtrace_iteration_begin(), 1);
        assert_eq!(vramtrace_iteration_begin(), 0, "began already");
        let ev = |kind: EventKind, addr, size| TorchEvent {
            kind: kind.code() as u32,
            device: 1,
            addr,
            size,
            stream: 0,
            counter: 0,
            context: std::ptr::null(),
            pool: [0, 0],
        };
        use EventKind::*;
        // The first event (a device's first: sampled even for a block).
        assert_eq!(on_event(&ev(Alloc, 0x10_0000, 512)), 1);
        assert_eq!(
            SINK.device_memory as *const () as usize,
            vramtrace_observe_device_memory as *const () as usize
        );
        assert_eq!(vramtrace_observe_device_memory(1, 70 << 30, 80 << 30), 1);
        assert_eq!(on_event(&ev(Alloc, 0x10_0200, 512)), 0);
        assert_eq!(on_event(&ev(SegmentAlloc, 0x20_0000, 20 << 20)), 1);
        assert_eq!(vramtrace_observe_device_memory(1, 69 << 30, 80 << 30), 1);
        assert_eq!(vramtrace_observe_device_memory(1, 81 << 30, 80 << 30), -1);
        assert_eq!(vramtrace_observe_device_memory(1, 0, 0), -1);
        vramtrace_iteration_end(0); // step 1: iter0 ends, iter1 begins
        assert_eq!(on_event(&ev(Oom, 1 << 30, 40 << 30)), 1);
        assert_eq!(on_event(&ev(FreeRequested, 0x10_0000, 512)), 0);
        assert_eq!(on_event(&ev(SegmentFree, 0x20_0000, 20 << 20)), 1);
        assert_eq!(vramtrace_observe_limit(1, 80 << 30, 80 << 30), 1, "now");
        let mut devices = [0 as c_int; 4];
        // SAFETY: a writable local array of its length, then none.
        unsafe {
            assert_eq!(vramtrace_observe_devices(devices.as_mut_ptr(), 4), 1);
            assert_eq!(vramtrace_observe_devices(std::ptr::null_mut(), 0), 1);
            assert_eq!(vramtrace_observe_devices(std::ptr::null_mut(), 4), -1);
        }
        assert_eq!(devices[0], 1);
        assert_eq!(vramtrace_observe_stop(), 0);
        assert_eq!(vramtrace_observe_device_memory(1, 5, 10), 0, "stopped");

        let bytes = std::fs::read(dir.join("t-1.vtrace")).unwrap();
        let mut r = recorder::format::TraceReader::new(&bytes[..]).unwrap();
        let events: Vec<_> = r.events().collect::<Result<_, _>>().unwrap();
        let symbols = r.symbols().clone();
        let shown: Vec<String> = events
            .iter()
            .map(|e| match e.data {
                recorder::format::EventData::Limit(l) => {
                    format!("limit {} of {}", l.limit_bytes >> 30, l.total_bytes >> 30)
                }
                recorder::format::EventData::DeviceMemory(m) => {
                    format!("memory {} of {}", m.free_bytes >> 30, m.total_bytes >> 30)
                }
                recorder::format::EventData::PhaseBegin { name, .. } => {
                    format!("begin {}", symbols.string_or_unknown(name))
                }
                recorder::format::EventData::PhaseEnd { name, .. } => {
                    format!("end {}", symbols.string_or_unknown(name))
                }
                _ => e.kind().name().to_string(),
            })
            .collect();
        assert_eq!(
            shown,
            [
                "limit 20 of 80",
                "begin iter0",
                "alloc",
                "memory 70 of 80",
                "alloc",
                "segment_alloc",
                "memory 69 of 80",
                "end iter0",
                "begin iter1",
                "oom",
                "free_requested",
                "segment_free",
                "limit 80 of 80",
                "end iter1",
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
