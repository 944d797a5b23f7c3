//! [`Observer`]: records the events another allocator reports, as it
//! reports them: PyTorch's own caching allocator, through its trace-tracker
//! hook, so that the program runs exactly as without vramtrace.
//!
//! The observed allocator says which block it handed out, where, and for how
//! many bytes the caller asked; not the block's size. The writer thread works
//! that out from the segments and blocks seen so far and the allocator's
//! policy ([`ObservedBlocks`]), so the trace's block sizes, and the peaks
//! built on them, are the allocator's own.
//!
//! An observer may start while the allocator already holds memory: it is
//! then given the allocator's state at a point of its event stream
//! ([`StartState::Pending`], then [`Observer::set_initial_state`]), and the
//! events before that point are left out, being part of the state.

use super::recording::{Recording, Stamp};
use super::stacks::{StackBuf, StackKey};
use super::writer::WriterSetup;
use super::{
    RecorderError, RecorderOptions, StackMode, TraceSummary, create_file, stacks_metadata,
    start_unix_ns,
};
use crate::allocator::{AllocatorConfig, ObservedBlocks};
use crate::format::{
    BlockEvent, DeviceInfo, DeviceMemoryEvent, EmptyCacheEvent, Event, EventData, EventKind,
    Header, InitialState, OomEvent, PoolEvent, PoolId, ProcessInfo, SegmentPoolEvent,
};
use std::io::Write;
use std::path::Path;

/// An event the observed allocator reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObservedEvent {
    /// What happened: a block or segment action, an `Oom`, or `EmptyCache`
    /// (phases and annotations have methods of their own).
    pub kind: EventKind,
    /// The block's or range's address; for an `Oom`, the device's free
    /// bytes, as PyTorch reports them.
    pub addr: u64,
    /// For a block, the size the caller asked for; for a segment, the
    /// range's size; for an `Oom`, the request.
    pub size: u64,
    /// The stream.
    pub stream: u64,
    /// The CPU's time-stamp counter when the event happened, as the observed
    /// allocator read it (PyTorch stamps its trace entries so), or 0: the
    /// observer then reads its clock. A clock read next to the allocator's
    /// locked instructions was most of what recording an event cost.
    pub counter: u64,
}

/// What the observed allocator held when the observer started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum StartState {
    /// Nothing: the allocator was just set up.
    #[default]
    Empty,
    /// This state.
    Known(InitialState),
    /// A state given later with [`Observer::set_initial_state`]; events
    /// recorded until then are held back.
    Pending,
}

/// Who and what an observer watches.
#[derive(Clone, Debug, Default)]
pub struct ObserverSetup {
    /// The device (index, name, total memory) whose allocator it is.
    pub device: DeviceInfo,
    /// The observed allocator's settings: block sizes follow its policy.
    pub allocator: AllocatorConfig,
    /// Where the trace starts.
    pub start: StartState,
}

impl ObserverSetup {
    /// A setup for device `index`, named `name`, of `total_memory` bytes,
    /// with the default allocator settings and an empty start: the device
    /// of a test or a benchmark with no real one behind it.
    pub fn device(index: u32, name: &str, total_memory: u64) -> Self {
        ObserverSetup {
            device: DeviceInfo {
                index,
                name: name.into(),
                total_memory,
            },
            ..ObserverSetup::default()
        }
    }
}

/// Records another allocator's events (`observer.rs` says how).
///
/// `Observer` is `Send + Sync`: the observed allocator may report from any
/// thread, in its own order (PyTorch reports under its allocator lock, so
/// one device's events come one at a time).
pub struct Observer {
    pub(super) rec: Recording<Vec<Event>>,
    pub(super) device: u32,
}

impl Observer {
    /// Starts a trace of `setup.device`'s allocator on `out`: writes the
    /// header and starts the writer thread.
    pub fn new(
        out: impl Write + Send + 'static,
        setup: ObserverSetup,
        options: RecorderOptions,
    ) -> Result<Self, RecorderError> {
        Self::start(out, setup, options, None)
    }

    fn start(
        out: impl Write + Send + 'static,
        setup: ObserverSetup,
        options: RecorderOptions,
        window: Option<super::ring::Window>,
    ) -> Result<Self, RecorderError> {
        let mut metadata = options.metadata.clone();
        metadata
            .entry("stacks".into())
            .or_insert_with(|| stacks_metadata(&options));
        metadata
            .entry("block_sizes".into())
            .or_insert_with(|| "inferred from the observed events".into());
        let header = Header {
            producer: "vramtrace-recorder".into(),
            producer_version: env!("CARGO_PKG_VERSION").into(),
            start_unix_ns: start_unix_ns(&options),
            process: options.process.clone().unwrap_or_else(ProcessInfo::current),
            devices: vec![setup.device.clone()],
            allocator_settings: setup.allocator.to_settings(),
            metadata,
            ..Header::default()
        };
        let mut blocks = ObservedBlocks::new(setup.allocator);
        let pending = setup.start == StartState::Pending;
        let known = match setup.start {
            StartState::Known(state) => Some(state),
            StartState::Empty | StartState::Pending => None,
        };
        if let Some(state) = &known {
            blocks.load(state);
        }
        let writer = WriterSetup {
            // A known state goes through the same message as a later one.
            await_initial_state: pending || known.is_some(),
            blocks: Some(blocks),
            window,
        };
        let rec = Recording::new(Vec::new(), out, header, &options, writer)?;
        let observer = Observer {
            rec,
            device: setup.device.index,
        };
        if let Some(state) = known {
            observer.send_state(state)?;
        }
        Ok(observer)
    }

    /// Starts a trace in a new file at `path`.
    pub fn create(
        path: impl AsRef<Path>,
        setup: ObserverSetup,
        options: RecorderOptions,
    ) -> Result<Self, RecorderError> {
        let (out, window) = create_file(path.as_ref(), options.keep_last)?;
        Self::start(out, setup, options, window)
    }

    /// Gives the state the trace starts from, for an observer set up with
    /// [`StartState::Pending`]; events recorded so far follow it. A second
    /// state is ignored.
    pub fn set_initial_state(&self, state: InitialState) -> Result<(), RecorderError> {
        self.send_state(state)
    }

    fn send_state(&self, mut state: InitialState) -> Result<(), RecorderError> {
        // The trace is one device's: the state's segments are said to be it.
        for segment in &mut state.segments {
            segment.device = self.device;
        }
        self.rec.send_initial_state(state)
    }

    /// Records `event`, reported now by the calling thread. An allocation
    /// and an out-of-memory error get the thread's stack (the frame
    /// source's frames and, if on, native frames); where the frame source
    /// finds no frame, a single frame named `context` stands for the stack
    /// if given (the autograd node a backward thread runs, say). Other
    /// events get native frames only.
    #[inline(never)]
    pub fn record(&self, event: ObservedEvent, context: Option<&str>) {
        let with_source =
            matches!(event.kind, EventKind::Alloc | EventKind::Oom) && self.rec.source.is_some();
        if self.rec.stacks == StackMode::None && !with_source {
            return self.push(StackKey::NONE, event);
        }
        let marker = 0u8;
        let mut stack = StackBuf::new();
        self.rec.capture(&marker, &mut stack);
        if with_source {
            let before = stack.as_slice().len();
            self.rec.capture_source(&mut stack);
            if stack.as_slice().len() == before
                && let (Some(label), Some(source)) = (context, &self.rec.source)
                && let Some(code) = source.label(label)
            {
                stack.push_external(code, 0);
            }
        }
        self.rec.seal(&mut stack);
        self.push(stack.key(), event);
    }

    #[inline(always)]
    fn push(&self, stack: StackKey<'_>, event: ObservedEvent) {
        let device = self.device;
        self.rec.call(stack, event.counter, |events, stamp| {
            if let Some(stamp) = stamp
                && let Some(data) = event_data(&event, device, &stamp)
            {
                events.push(Event {
                    time_ns: stamp.time_ns,
                    data,
                });
            }
        });
    }

    /// Records the most the observed allocator may reserve on the device
    /// from now on (a [`Limit`](crate::format::EventData::Limit), format
    /// 1.3): `limit_bytes` of `total_bytes` (equal: no cap). Returns whether
    /// it was recorded (not once the trace is finished).
    pub fn limit(&self, limit_bytes: u64, total_bytes: u64) -> bool {
        self.rec.push_limit(self.device, limit_bytes, total_bytes)
    }

    /// Records the device's free and total memory as the driver reports
    /// them now (a [`DeviceMemory`](crate::format::EventData::DeviceMemory)
    /// sample, format 1.3), in order with the allocator's events reported
    /// so far. Returns whether it was recorded.
    pub fn device_memory(&self, free_bytes: u64, total_bytes: u64) -> bool {
        let device = self.device;
        self.rec.push_now(|thread| {
            EventData::DeviceMemory(DeviceMemoryEvent {
                device,
                thread,
                free_bytes,
                total_bytes,
            })
        })
    }

    /// Records that the segment just reserved at `addr` belongs to the
    /// private `pool` (a [`SegmentPool`](crate::format::EventData::SegmentPool)
    /// event, format 1.6), right after its `segment_alloc`. Returns whether
    /// it was recorded.
    pub fn segment_pool(&self, addr: u64, pool: PoolId) -> bool {
        let device = self.device;
        self.rec.push_now(|thread| {
            EventData::SegmentPool(SegmentPoolEvent {
                addr,
                pool,
                device,
                thread,
            })
        })
    }

    /// Records a memory pool's life (a
    /// [`Pool`](crate::format::EventData::Pool) event, format 1.6: a
    /// capture's begin or end, a `use_mem_pool` block's, a pool let go), in
    /// order with the allocator's events reported so far. The event's
    /// device and thread are the observer's and the caller's. Returns
    /// whether it was recorded.
    pub fn pool(&self, event: PoolEvent) -> bool {
        let device = self.device;
        self.rec.push_now(|thread| {
            EventData::Pool(PoolEvent {
                device,
                thread,
                ..event
            })
        })
    }

    /// Ends the trace: writes the remaining events and the footer. Events
    /// reported afterwards are ignored. A second call returns
    /// [`RecorderError::Finished`].
    pub fn finish(&self) -> Result<TraceSummary, RecorderError> {
        Ok(self.rec.finish(|_| ())?.0)
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        // Best effort: an observer dropped without finish() still closes
        // the trace with a footer.
        let _ = self.finish();
    }
}

/// The trace event of an observed one. A block's size is the requested
/// one until the writer thread, which follows the observed allocator's
/// blocks (`ObservedBlocks`), puts in the block's.
fn event_data(e: &ObservedEvent, device: u32, stamp: &Stamp) -> Option<EventData> {
    match e.kind {
        EventKind::Oom => Some(EventData::Oom(OomEvent {
            requested: e.size,
            free_bytes: e.addr,
            stream: e.stream,
            device,
            stack: stamp.stack,
            thread: stamp.thread,
        })),
        EventKind::EmptyCache => Some(EventData::EmptyCache(EmptyCacheEvent {
            device,
            stack: stamp.stack,
            thread: stamp.thread,
        })),
        // Block and segment events; phases and annotations have methods of
        // their own, and kinds a later format adds are not an observed
        // allocator's (`None`).
        kind => EventData::from_parts(
            kind,
            BlockEvent {
                addr: e.addr,
                size: e.size,
                requested: e.size,
                stream: e.stream,
                device,
                stack: stamp.stack,
                thread: stamp.thread,
            },
        ),
    }
}
