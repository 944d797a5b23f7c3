use super::*;
use recorder::format::{Event, EventData, TraceReader};
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

/// A test's hold on the process-wide recording (the lock the tests that
/// start one share) and its scratch folder, removed at the end.
struct Scratch {
    dir: PathBuf,
    _globals: MutexGuard<'static, ()>,
}

impl Scratch {
    /// Takes the lock and makes the folder `vt-<name>-<pid>`.
    fn new(name: &str) -> Scratch {
        let globals = crate::tests::GLOBALS
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let dir = std::env::temp_dir().join(format!("vt-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch {
            dir,
            _globals: globals,
        }
    }

    /// Starts a recording with `settings` (lines of the start request)
    /// whose traces go to this folder, one per device; returns what
    /// `vramtrace_observe_start` does.
    fn start(&self, settings: &str) -> c_int {
        let pattern = self.dir.join("t-%d.vtrace");
        let config = format!("out={}\n{settings}", pattern.display());
        let config = std::ffi::CString::new(config).unwrap();
        // SAFETY: a valid C string.
        unsafe { vramtrace_observe_start(config.as_ptr()) }
    }

    /// The reader of a device's trace, and its events.
    fn read(&self, device: u32) -> (TraceReader<BufReader<File>>, Vec<Event>) {
        let mut r = TraceReader::open(self.dir.join(format!("t-{device}.vtrace"))).unwrap();
        let events = r.events().collect::<Result<_, _>>().unwrap();
        (r, events)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An entry of PyTorch's allocator trace, as the shim hands it over.
fn torch_event(kind: u32, device: i32, addr: u64, size: u64) -> TorchEvent {
    TorchEvent {
        kind,
        device,
        addr,
        size,
        stream: 0,
        counter: 0,
        context: std::ptr::null(),
        pool: [0, 0],
    }
}

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
    let scratch = Scratch::new("observe");
    assert_eq!(scratch.start("stacks=none\nstate=pending\n"), 0);
    assert_eq!(scratch.start("stacks=none\nstate=pending\n"), -1);
    let ev = torch_event;
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

    let (r, events) = scratch.read(5);
    assert!(r.footer().is_some());
    let state = r.initial_state().unwrap();
    assert_eq!(state.segments[0].blocks[1].addr, 0x1000 + 512);
    let shapes: Vec<(EventKind, u64)> = events
        .iter()
        .map(|e| match e.data {
            EventData::Alloc(b) | EventData::FreeRequested(b) | EventData::FreeCompleted(b) => {
                (e.kind(), b.size)
            }
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
    let (r, events) = scratch.read(6);
    assert_eq!(r.initial_state().unwrap().segments.len(), 1);
    assert!(events.is_empty());
    assert!(!scratch.dir.join("t-7.vtrace").exists());
}

/// Tags reach the device's observer in order with its events, carry the
/// header's `categories` metadata the Python side sets, and are refused
/// whole when an argument is invalid.
#[test]
fn tags_go_to_the_devices_observer() {
    let scratch = Scratch::new("observe-tag");
    let tag = |device, addrs: &[u64], codes: &[u8]| {
        assert_eq!(addrs.len(), codes.len());
        // SAFETY: two arrays of `addrs.len()` values.
        unsafe { vramtrace_observe_tag(device, addrs.as_ptr(), codes.as_ptr(), addrs.len()) }
    };
    // Not recording: nothing to tag.
    assert_eq!(tag(0, &[0x1000], &[0]), 0);
    assert_eq!(
        scratch.start("stacks=none\nstate=empty\nmeta.categories=tags\n"),
        0
    );
    // No event of the device yet: no observer, no block.
    assert_eq!(tag(2, &[0x1000], &[0]), 0);
    let ev = |kind: EventKind, addr, size| torch_event(kind.code() as u32, 2, addr, size);
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

    let (r, events) = scratch.read(2);
    assert_eq!(r.header().metadata["categories"], "tags");
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind()).collect();
    use EventKind::*;
    assert_eq!(kinds, [SegmentAlloc, Alloc, Alloc, Tag, Tag, FreeRequested]);
    let tags: Vec<(u64, u32, u8)> = events
        .iter()
        .filter_map(|e| match e.data {
            EventData::Tag(t) => Some((t.addr, t.device, t.code)),
            _ => None,
        })
        .collect();
    assert_eq!(tags, [(0x10_0000, 2, 0), (0x10_0400, 2, 3)]);
}
/// Format 1.3 in observer mode: a limit set before a device's first
/// event is recorded first in its trace; the library asks the shim for
/// a device-memory sample after the first event, each segment event and
/// each OOM (not after block events), and records it next; samples and
/// limits of devices not recorded, or with impossible values, are
/// refused; iterations count as the loop does.
#[test]
fn limits_samples_and_iterations() {
    let scratch = Scratch::new("observe-28");
    assert_eq!(vramtrace_observe_limit(1, 10, 100), -1, "not recording");
    assert_eq!(vramtrace_iteration_begin(), 0, "not recording");
    assert_eq!(scratch.start("stacks=none\nstate=empty\n"), 0);
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
    let ev = |kind: EventKind, addr, size| torch_event(kind.code() as u32, 1, addr, size);
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

    let (r, events) = scratch.read(1);
    let symbols = r.symbols();
    let shown: Vec<String> = events
        .iter()
        .map(|e| match e.data {
            EventData::Limit(l) => {
                format!("limit {} of {}", l.limit_bytes >> 30, l.total_bytes >> 30)
            }
            EventData::DeviceMemory(m) => {
                format!("memory {} of {}", m.free_bytes >> 30, m.total_bytes >> 30)
            }
            EventData::PhaseBegin { name, .. } => {
                format!("begin {}", symbols.string_or_unknown(name))
            }
            EventData::PhaseEnd { name, .. } => {
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
}
