use super::*;
use crate::allocator::AllocatorConfig;
use crate::device::SimulatedDevice;
use crate::format::{EventData, StackId};
use crate::format::{EventKind, TraceReader};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An output the test can read while (and after) the recorder writes it.
#[derive(Clone, Default)]
struct SharedBuf(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuf {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl SharedBuf {
    fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().clone()
    }
}

fn allocator(capacity: u64) -> CachingAllocator<SimulatedDevice> {
    CachingAllocator::new(SimulatedDevice::new(capacity), AllocatorConfig::default())
}

fn recorder(options: RecorderOptions) -> (Recorder<SimulatedDevice>, SharedBuf) {
    let out = SharedBuf::default();
    let r = Recorder::new(allocator(1 << 40), out.clone(), options).unwrap();
    (r, out)
}

fn read(bytes: &[u8]) -> (TraceReader<&[u8]>, Vec<Event>) {
    let mut reader = TraceReader::new(bytes).unwrap();
    let events = reader.events().collect::<Result<Vec<_>, _>>().unwrap();
    (reader, events)
}

/// A deterministic request sequence: mixed sizes, a bounded live set.
fn ops(seed: u64, n: usize) -> Vec<(bool, u64, usize)> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..n)
        .map(|_| {
            let r = next();
            let size = match r % 4 {
                0 => 512 + r % 4096,
                1 => 100_000 + r % 900_000,
                2 => (2 << 20) + r % (8 << 20),
                _ => (12 << 20) + r % (28 << 20),
            };
            (r % 3 != 0, size, (r >> 32) as usize)
        })
        .collect()
}

#[test]
fn records_events_with_time_thread_phases_and_annotations() {
    let (r, out) = recorder(RecorderOptions::default());
    let a = {
        let _iter = r.phase("iter0");
        let _fwd = r.phase("forward");
        r.annotate("step", "0");
        r.malloc(1000, 0).unwrap()
    };
    r.free(a.addr).unwrap();
    r.empty_cache();
    let summary = r.finish().unwrap();
    let bytes = out.bytes();
    let (reader, events) = read(&bytes);
    assert_eq!(reader.header().producer, "vramtrace-recorder");
    assert_eq!(reader.header().devices[0].name, "simulated");
    assert!(reader.footer().is_some());
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind()).collect();
    use EventKind::*;
    assert_eq!(
        kinds,
        vec![
            PhaseBegin,
            PhaseBegin,
            Annotation,
            SegmentAlloc,
            Alloc,
            PhaseEnd,
            PhaseEnd,
            FreeRequested,
            FreeCompleted,
            EmptyCache,
            SegmentFree
        ]
    );
    assert!(events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    let sym = reader.symbols();
    let names: Vec<&str> = events
        .iter()
        .filter_map(|e| match e.data {
            EventData::PhaseBegin { name, thread } | EventData::PhaseEnd { name, thread } => {
                assert_eq!(thread, thread_id());
                sym.string(name)
            }
            _ => None,
        })
        .collect();
    assert_eq!(names, ["iter0", "forward", "forward", "iter0"]);
    let EventData::Alloc(b) = events[4].data else {
        panic!("not an alloc")
    };
    assert_eq!(
        (b.addr, b.requested, b.stack),
        (a.addr, 1000, StackId::NONE)
    );
    assert_eq!(b.thread, thread_id());
    assert_eq!(summary.trace.events, 11);
    assert_eq!(summary.trace.bytes, out.bytes().len() as u64);
}

#[test]
fn misuse_is_an_error_not_a_panic() {
    let (r, _out) = recorder(RecorderOptions::default());
    assert!(matches!(r.phase_end(), Err(RecorderError::NoOpenPhase)));
    assert!(matches!(
        r.free(12345),
        Err(AllocError::UnknownAddress(12345))
    ));
    r.phase_begin("a");
    r.phase_end().unwrap();
    r.finish().unwrap();
    assert!(matches!(r.finish(), Err(RecorderError::Finished)));
    assert!(matches!(r.flush(), Err(RecorderError::Finished)));
    // The allocator keeps working after the recording ends.
    let a = r.malloc(10, 0).unwrap();
    r.free(a.addr).unwrap();
}

#[test]
fn recording_does_not_change_allocation_decisions() {
    let run_raw = |seq: &[(bool, u64, usize)]| {
        let mut a = allocator(4 << 30);
        let mut live = Vec::new();
        let mut addrs = Vec::new();
        for &(is_alloc, size, pick) in seq {
            if is_alloc || live.is_empty() {
                match a.malloc(size, 0) {
                    Ok(x) => {
                        addrs.push(x.addr);
                        live.push(x.addr);
                    }
                    Err(_) => addrs.push(0),
                }
            } else {
                a.free(live.swap_remove(pick % live.len())).unwrap();
            }
        }
        addrs
    };
    let run_recorded = |seq: &[(bool, u64, usize)], stacks| {
        let out = SharedBuf::default();
        let options = RecorderOptions {
            stacks,
            chunk_events: 1000,
            ..RecorderOptions::default()
        };
        let r = Recorder::new(allocator(4 << 30), out, options).unwrap();
        let mut live = Vec::new();
        let mut addrs = Vec::new();
        for &(is_alloc, size, pick) in seq {
            if is_alloc || live.is_empty() {
                match r.malloc(size, 0) {
                    Ok(x) => {
                        addrs.push(x.addr);
                        live.push(x.addr);
                    }
                    Err(_) => addrs.push(0),
                }
            } else {
                r.free(live.swap_remove(pick % live.len())).unwrap();
            }
        }
        r.finish().unwrap();
        addrs
    };
    let seq = ops(7, 20_000);
    let raw = run_raw(&seq);
    // The device is small enough for the sequence to hit OOMs too.
    assert!(raw.contains(&0));
    let recorded = run_recorded(&seq, StackMode::None);
    let first_diff = raw.iter().zip(&recorded).position(|(a, b)| a != b);
    assert_eq!(first_diff, None);
    assert_eq!(recorded.len(), raw.len());
    assert_eq!(
        run_recorded(&seq[..2000], StackMode::Native),
        run_raw(&seq[..2000])
    );
}

/// Live blocks by address and reserved bytes, folded from a trace.
fn fold(events: &[Event]) -> (HashMap<u64, u64>, u64) {
    let mut live = HashMap::new();
    let mut reserved = 0u64;
    for e in events {
        match e.data {
            EventData::Alloc(b) => assert!(live.insert(b.addr, b.size).is_none()),
            EventData::FreeRequested(b) => assert_eq!(live.remove(&b.addr), Some(b.size)),
            EventData::SegmentAlloc(s) | EventData::SegmentMap(s) => reserved += s.size,
            EventData::SegmentFree(s) | EventData::SegmentUnmap(s) => reserved -= s.size,
            _ => {}
        }
    }
    (live, reserved)
}

#[test]
fn many_threads_lose_no_event() {
    const THREADS: usize = 8;
    const OPS: usize = 100_000;
    let (r, out) = recorder(RecorderOptions {
        chunk_events: 4096,
        // Eight threads allocating flat out outrun the writer thread (by far
        // in a debug build): here they wait for it, so that none is dropped.
        max_wait: None,
        max_queue_age: None,
        ..RecorderOptions::default()
    });
    let held: Vec<Vec<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let r = &r;
                s.spawn(move || {
                    let mut live = Vec::new();
                    for (i, (is_alloc, size, pick)) in
                        ops(t as u64 + 1, OPS).into_iter().enumerate()
                    {
                        let size = size % (4 << 20);
                        if (is_alloc && live.len() < 32) || live.is_empty() {
                            live.push(r.malloc(size, 0).unwrap().addr);
                        } else {
                            r.free(live.swap_remove(pick % live.len())).unwrap();
                        }
                        if i % 10_000 == 0 {
                            r.annotate("thread", &t.to_string());
                        }
                    }
                    live
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let stats = r.stats();
    let summary = r.finish().unwrap();
    let bytes = out.bytes();
    let (_, events) = read(&bytes);
    assert_eq!(events.len() as u64, summary.trace.events);
    let c = summary.trace.counts;
    let held_count: usize = held.iter().map(Vec::len).sum();
    assert_eq!(
        c.get(EventKind::Alloc) + c.get(EventKind::FreeRequested),
        (THREADS * OPS) as u64
    );
    assert_eq!(
        c.get(EventKind::Alloc) - c.get(EventKind::FreeRequested),
        held_count as u64
    );
    assert_eq!(
        c.get(EventKind::Annotation),
        (THREADS * OPS / 10_000) as u64
    );
    assert!(events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    let threads: std::collections::HashSet<u32> = events
        .iter()
        .filter_map(|e| match e.data {
            EventData::Alloc(b) => Some(b.thread),
            _ => None,
        })
        .collect();
    assert_eq!(threads.len(), THREADS);
    // The trace's end state is the allocator's.
    let (live, reserved) = fold(&events);
    assert_eq!(live.len(), held_count);
    for addr in held.iter().flatten() {
        let a = r.allocation(*addr).unwrap();
        assert_eq!(live.get(addr), Some(&a.size));
    }
    assert_eq!(reserved, stats.reserved_bytes.all.current);
    assert_eq!(
        live.values().sum::<u64>(),
        stats.allocated_bytes.all.current
    );
}

#[inline(never)]
fn native_caller(r: &Recorder<SimulatedDevice>) -> Allocation {
    let a = r.malloc(4096, 0).unwrap();
    std::hint::black_box(a)
}

#[test]
fn native_stacks_are_symbolized_once_per_address() {
    let (r, out) = recorder(RecorderOptions {
        stacks: StackMode::Native,
        ..RecorderOptions::default()
    });
    let mut addrs = Vec::new();
    for _ in 0..10 {
        addrs.push(native_caller(&r).addr);
    }
    for a in addrs {
        r.free(a).unwrap();
    }
    let summary = r.finish().unwrap();
    let bytes = out.bytes();
    let (reader, events) = read(&bytes);
    let sym = reader.symbols();
    let alloc_stacks: Vec<StackId> = events
        .iter()
        .filter_map(|e| match e.data {
            EventData::Alloc(b) => Some(b.stack),
            _ => None,
        })
        .collect();
    assert_eq!(alloc_stacks.len(), 10);
    // The same call site: one stack.
    assert!(alloc_stacks.iter().all(|&s| s == alloc_stacks[0]));
    assert_ne!(alloc_stacks[0], StackId::NONE);
    let frames: Vec<String> = sym
        .stack(alloc_stacks[0])
        .iter()
        .map(|&f| sym.describe_frame(f))
        .collect();
    // The innermost frame is the caller, not the recorder or the unwinder.
    assert!(
        frames[0].contains("native_caller"),
        "unexpected innermost frames: {:?}",
        &frames[..frames.len().min(4)]
    );
    assert!(!frames.iter().any(|f| f.contains("Recorder")));
    assert!(summary.trace.stacks >= 2);
    // Each distinct address is symbolized once: the alloc and free stacks
    // share their outer frames.
    assert!(
        summary.trace.addresses > 0 && summary.trace.addresses < 2 * frames.len() as u64,
        "{} addresses for {} frames",
        summary.trace.addresses,
        frames.len()
    );
}

#[test]
fn flushed_events_are_readable_while_recording_and_drop_closes_the_trace() {
    let (r, out) = recorder(RecorderOptions::default());
    let a = r.malloc(1 << 20, 0).unwrap();
    r.flush().unwrap();
    let bytes = out.bytes();
    let (reader, events) = read(&bytes);
    assert!(reader.footer().is_none());
    assert_eq!(events.len(), 2);
    r.free(a.addr).unwrap();
    drop(r);
    let bytes = out.bytes();
    let (reader, events) = read(&bytes);
    assert!(reader.footer().is_some());
    assert_eq!(events.len(), 4);
}

/// What a recording has on disk now: events of a trace without its footer.
fn on_disk(out: &SharedBuf) -> Vec<Event> {
    let bytes = out.bytes();
    let (reader, events) = read(&bytes);
    assert!(reader.truncation().is_none());
    events
}

/// Waits (up to 5 s) until `out` holds `n` events.
fn wait_for_events(out: &SharedBuf, n: usize) -> Vec<Event> {
    let start = std::time::Instant::now();
    loop {
        let events = on_disk(out);
        if events.len() >= n || start.elapsed() > Duration::from_secs(5) {
            return events;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_header_is_written_before_the_first_event() {
    let (r, out) = recorder(RecorderOptions::default());
    assert!(on_disk(&out).is_empty());
    let (o, out) = observer(StartState::Empty, RecorderOptions::default());
    assert!(on_disk(&out).is_empty());
    drop((r, o));
}

/// An idle recording's buffer, a few events that will never fill it, is
/// taken and written by the writer thread's timer; so are the events of a
/// recording that goes on slowly.
#[test]
fn the_writer_thread_writes_events_left_in_the_buffer_within_its_interval() {
    let options = RecorderOptions {
        flush_interval: Some(Duration::from_millis(50)),
        ..RecorderOptions::default()
    };
    let (r, out) = recorder(options.clone());
    let a = r.malloc(1000, 0).unwrap();
    r.annotate("step", "1");
    let started = std::time::Instant::now();
    assert_eq!(wait_for_events(&out, 3).len(), 3);
    assert!(started.elapsed() < Duration::from_secs(2));
    // A slow recording: each event is on disk within a few intervals.
    for i in 0..5 {
        r.annotate("step", &i.to_string());
        assert_eq!(wait_for_events(&out, 4 + i).len(), 4 + i);
    }
    r.free(a.addr).unwrap();
    assert_eq!(wait_for_events(&out, 10).len(), 10);

    let (o, out) = observer(StartState::Empty, options);
    o.record(
        ObservedEvent {
            kind: EventKind::SegmentAlloc,
            addr: 1 << 30,
            size: 2 << 20,
            stream: 0,
            counter: 0,
        },
        None,
    );
    o.phase_begin("idle");
    assert_eq!(wait_for_events(&out, 2).len(), 2);
}

/// An output slower than the recording: threads wait for the writer
/// thread (outside the lock) while its timer takes buffers from under the
/// lock, and no event is lost or reordered.
#[test]
fn a_recording_ahead_of_a_slow_output_waits_and_loses_nothing() {
    #[derive(Clone, Default)]
    struct Slow(SharedBuf);
    impl Write for Slow {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            std::thread::sleep(Duration::from_micros(300));
            self.0.write(buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let out = Slow::default();
    let r = Recorder::new(
        allocator(1 << 40),
        out.clone(),
        RecorderOptions {
            chunk_events: 512,
            queue_batches: 1,
            // Backpressure without a bound: the program waits, nothing drops.
            max_wait: None,
            max_queue_age: None,
            flush_interval: Some(Duration::from_millis(1)),
            ..RecorderOptions::default()
        },
    )
    .unwrap();
    std::thread::scope(|s| {
        for t in 0..3 {
            let r = &r;
            s.spawn(move || {
                for i in 0..3000u64 {
                    let a = r.malloc(512 + (i % 5) * 512, t).unwrap();
                    r.free(a.addr).unwrap();
                    if i % 500 == 0 {
                        std::thread::sleep(Duration::from_millis(3));
                    }
                }
            });
        }
    });
    let summary = r.finish().unwrap();
    let bytes = out.0.bytes();
    let (reader, events) = read(&bytes);
    assert!(reader.footer().is_some());
    assert_eq!(events.len() as u64, summary.trace.events);
    assert_eq!(summary.trace.counts.get(EventKind::Alloc), 9000);
    assert!(events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
}

#[test]
fn out_of_memory_is_recorded_with_its_stack() {
    let out = SharedBuf::default();
    let r = Recorder::new(
        allocator(64 << 20),
        out.clone(),
        RecorderOptions {
            stacks: StackMode::Native,
            ..RecorderOptions::default()
        },
    )
    .unwrap();
    let err = r.malloc(100 << 20, 0).unwrap_err();
    assert!(matches!(err, AllocError::OutOfMemory { .. }));
    r.finish().unwrap();
    let bytes = out.bytes();
    let (_, events) = read(&bytes);
    let oom = events
        .iter()
        .find_map(|e| match e.data {
            EventData::Oom(o) => Some(o),
            _ => None,
        })
        .unwrap();
    assert_eq!(oom.requested, 100 << 20);
    assert_ne!(oom.stack, StackId::NONE);
}

#[test]
fn the_writer_thread_error_surfaces_at_finish() {
    struct Failing(usize);
    impl Write for Failing {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.0 < buf.len() {
                return Err(io::Error::other("disk full"));
            }
            self.0 -= buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let r = Recorder::new(
        allocator(1 << 40),
        Failing(4096),
        RecorderOptions {
            chunk_events: 100,
            ..RecorderOptions::default()
        },
    )
    .unwrap();
    for _ in 0..10_000 {
        let a = r.malloc(512, 0).unwrap();
        r.free(a.addr).unwrap();
    }
    assert!(r.flush().is_err());
    assert!(matches!(r.finish(), Err(RecorderError::Format(_))));
}

/// A frame source without an interpreter: each thread's "interpreter stack"
/// is whatever the test sets, and naming a code is counted.
#[derive(Default)]
struct FakeFrames {
    described: Mutex<HashMap<usize, usize>>,
}

thread_local! {
    static FAKE_STACK: std::cell::RefCell<Vec<(usize, u32)>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn set_fake_stack(frames: &[(usize, u32)]) {
    FAKE_STACK.with(|s| *s.borrow_mut() = frames.to_vec());
}

impl FrameSource for FakeFrames {
    fn name(&self) -> &str {
        "fake"
    }
    fn capture(&self, sink: &mut FrameSink<'_>) {
        FAKE_STACK.with(|s| {
            for &(code, line) in s.borrow().iter() {
                if !sink.push(code, line) {
                    break;
                }
            }
        });
    }
    fn describe(&self, code: usize) -> Option<CodeInfo> {
        *self.described.lock().unwrap().entry(code).or_default() += 1;
        (code != 0xbad).then(|| CodeInfo {
            function: format!("fn{code:x}"),
            file: format!("file{code:x}.py"),
        })
    }
}

fn alloc_stacks(events: &[Event]) -> Vec<StackId> {
    events
        .iter()
        .filter_map(|e| match e.data {
            EventData::Alloc(b) => Some(b.stack),
            _ => None,
        })
        .collect()
}

fn symbol_frames(sym: &crate::format::SymbolTable, stack: StackId) -> Vec<(String, String, u32)> {
    sym.stack(stack)
        .iter()
        .filter_map(|&f| match sym.frame(f) {
            Some(crate::format::Frame::Symbol {
                function,
                file,
                line,
            }) => Some((
                sym.string_or_unknown(*function).to_string(),
                sym.string_or_unknown(*file).to_string(),
                *line,
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn source_frames_are_interned_by_code_and_line_and_named_once() {
    let source = Arc::new(FakeFrames::default());
    let (r, out) = recorder(RecorderOptions {
        frame_source: Some(source.clone()),
        ..RecorderOptions::default()
    });
    let mut live = Vec::new();
    // Innermost first: code 0x20 at line 7 called from code 0x10 at line 3.
    set_fake_stack(&[(0x20, 7), (0x10, 3)]);
    live.push(r.malloc(1000, 0).unwrap());
    live.push(r.malloc(2000, 0).unwrap());
    // Another line of the same outer code: a new stack, no new naming.
    set_fake_stack(&[(0x20, 9), (0x10, 3)]);
    live.push(r.malloc(3000, 0).unwrap());
    // A code the source cannot name still counts as a frame.
    set_fake_stack(&[(0xbad, 1)]);
    live.push(r.malloc(4000, 0).unwrap());
    // No interpreter frames (a thread without the GIL): no stack.
    set_fake_stack(&[]);
    live.push(r.malloc(5000, 0).unwrap());
    set_fake_stack(&[(0x20, 7), (0x10, 3)]);
    for a in &live {
        r.free(a.addr).unwrap();
    }
    let summary = r.finish().unwrap();
    let bytes = out.bytes();
    let (reader, events) = read(&bytes);
    assert_eq!(reader.header().metadata.get("stacks").unwrap(), "fake");
    let sym = reader.symbols();
    let stacks = alloc_stacks(&events);
    assert_eq!(stacks.len(), 5);
    assert_eq!(stacks[0], stacks[1]);
    assert_ne!(stacks[0], stacks[2]);
    assert_eq!(stacks[4], StackId::NONE);
    let s = |f: &str, l| (format!("fn{f}"), format!("file{f}.py"), l);
    assert_eq!(symbol_frames(sym, stacks[0]), vec![s("20", 7), s("10", 3)]);
    assert_eq!(symbol_frames(sym, stacks[2]), vec![s("20", 9), s("10", 3)]);
    assert_eq!(
        symbol_frames(sym, stacks[3]),
        vec![("?".into(), "?".into(), 1)]
    );
    // The outer frame (0x10, 3) is one frame shared by both stacks.
    assert_eq!(sym.stack(stacks[0])[1], sym.stack(stacks[2])[1]);
    // Frees are not walked for source frames (nor native ones here).
    assert!(events.iter().all(|e| match e.data {
        EventData::FreeRequested(b) | EventData::FreeCompleted(b) => b.stack == StackId::NONE,
        _ => true,
    }));
    let described = source.described.lock().unwrap();
    assert_eq!(described.len(), 3);
    assert!(described.values().all(|&n| n == 1), "{described:?}");
    assert_eq!(summary.trace.codes, 3);
    assert_eq!(summary.trace.stacks, 3);
}

#[test]
fn source_frames_go_outside_native_frames() {
    let source = Arc::new(FakeFrames::default());
    let (r, out) = recorder(RecorderOptions {
        stacks: StackMode::Native,
        frame_source: Some(source),
        ..RecorderOptions::default()
    });
    set_fake_stack(&[(0x30, 12)]);
    let a = native_caller(&r);
    r.free(a.addr).unwrap();
    r.finish().unwrap();
    let bytes = out.bytes();
    let (reader, events) = read(&bytes);
    assert_eq!(
        reader.header().metadata.get("stacks").unwrap(),
        "native+fake"
    );
    let sym = reader.symbols();
    let stack = alloc_stacks(&events)[0];
    let frames: Vec<String> = sym
        .stack(stack)
        .iter()
        .map(|&f| sym.describe_frame(f))
        .collect();
    assert!(frames[0].contains("native_caller"), "{:?}", &frames[..2]);
    assert_eq!(
        symbol_frames(sym, stack).last().unwrap(),
        &("fn30".into(), "file30.py".into(), 12)
    );
    // The free has its native stack, without the source's frame.
    let free = events
        .iter()
        .find_map(|e| match e.data {
            EventData::FreeRequested(b) => Some(b.stack),
            _ => None,
        })
        .unwrap();
    assert_ne!(free, StackId::NONE);
    assert!(!sym.stack(free).is_empty());
    assert!(!symbol_frames(sym, free).iter().any(|(f, _, _)| f == "fn30"));
}

#[test]
fn source_stacks_are_cut_at_the_depth_limit() {
    let source = FakeFrames::default();
    let deep: Vec<(usize, u32)> = (0..1000).map(|i| (0x1000 + i, i as u32)).collect();
    set_fake_stack(&deep);
    assert_eq!(capture_frames(&source, 5), deep[..5].to_vec());
    assert_eq!(capture_frames(&source, 10_000).len(), MAX_STACK_DEPTH);
    set_fake_stack(&[]);
    assert!(capture_frames(&source, 5).is_empty());
}

#[test]
fn buffers_are_not_reallocated_by_the_call_that_fills_them() {
    let (r, _out) = recorder(RecorderOptions {
        flush_interval: None,
        ..RecorderOptions::default()
    });
    let capacity = r.rec.lock().subject.event_log_mut().capacity();
    // Frees write two events each, so some call crosses the handoff line
    // one event early; neither the buffer written then nor a recycled one
    // grows.
    let mut live: Vec<u64> = (0..32).map(|_| r.malloc(512, 0).unwrap().addr).collect();
    for i in 0..20_000u64 {
        let slot = (i % 32) as usize;
        r.free(live[slot]).unwrap();
        live[slot] = r.malloc(512 + (i % 7) * 4096, 0).unwrap().addr;
        assert_eq!(r.rec.lock().subject.event_log_mut().capacity(), capacity);
    }
    r.finish().unwrap();
}

// ---------------------------------------------------------------- Observer

use crate::format::{BlockState, BlockStatus, InitialState, SegmentState};

/// An observed event of `kind` on the default stream.
fn ev(kind: EventKind, addr: u64, size: u64) -> ObservedEvent {
    ObservedEvent {
        kind,
        addr,
        size,
        stream: 0,
        counter: 0,
    }
}

fn observer(start: StartState, options: RecorderOptions) -> (Observer, SharedBuf) {
    let out = SharedBuf::default();
    let setup = ObserverSetup {
        start,
        ..ObserverSetup::device(3, "observed", 1 << 40)
    };
    (Observer::new(out.clone(), setup, options).unwrap(), out)
}

/// What an observed allocator would report for one of vramtrace's own
/// allocator's events: the requested size, no block size.
fn as_observed(data: &EventData) -> Option<ObservedEvent> {
    let (kind, addr, size, stream) = match *data {
        EventData::Alloc(b) => (EventKind::Alloc, b.addr, b.requested, b.stream),
        EventData::FreeRequested(b) => (EventKind::FreeRequested, b.addr, b.requested, b.stream),
        EventData::FreeCompleted(b) => (EventKind::FreeCompleted, b.addr, b.requested, b.stream),
        EventData::SegmentAlloc(s) => (EventKind::SegmentAlloc, s.addr, s.size, s.stream),
        EventData::SegmentFree(s) => (EventKind::SegmentFree, s.addr, s.size, s.stream),
        EventData::SegmentMap(s) => (EventKind::SegmentMap, s.addr, s.size, s.stream),
        EventData::SegmentUnmap(s) => (EventKind::SegmentUnmap, s.addr, s.size, s.stream),
        _ => return None,
    };
    Some(ObservedEvent {
        kind,
        addr,
        size,
        stream,
        counter: 0,
    })
}

/// The block events' (kind, addr, block size, requested size), and segment
/// events' (kind, addr, size, 0), with device and thread dropped.
fn shapes(events: impl IntoIterator<Item = EventData>) -> Vec<(EventKind, u64, u64, u64)> {
    events
        .into_iter()
        .filter_map(|d| match d {
            EventData::Alloc(b) | EventData::FreeRequested(b) | EventData::FreeCompleted(b) => {
                Some((d.kind(), b.addr, b.size, b.requested))
            }
            EventData::SegmentAlloc(s)
            | EventData::SegmentFree(s)
            | EventData::SegmentMap(s)
            | EventData::SegmentUnmap(s) => Some((d.kind(), s.addr, s.size, 0)),
            _ => None,
        })
        .collect()
}

#[test]
fn an_observed_allocator_is_recorded_with_its_block_sizes() {
    // vramtrace's allocator stands for PyTorch's: same policy, and its own
    // events say what the block sizes were.
    let mut alloc = allocator(1 << 40);
    let (obs, out) = observer(StartState::Empty, RecorderOptions::default());
    let mut live = Vec::new();
    let mut expected = Vec::new();
    for (is_alloc, size, pick) in ops(7, 3000) {
        if is_alloc || live.is_empty() {
            live.push(alloc.malloc(size, 0).unwrap().addr);
        } else {
            alloc.free(live.swap_remove(pick % live.len())).unwrap();
        }
        for data in alloc.drain_events() {
            obs.record(as_observed(&data).unwrap(), None);
            expected.push(data);
        }
    }
    let summary = obs.finish().unwrap();
    let bytes = out.bytes();
    let (reader, events) = read(&bytes);
    assert_eq!(reader.header().devices[0].index, 3);
    assert!(reader.header().metadata.contains_key("block_sizes"));
    assert_eq!(summary.events, events.len() as u64);
    assert!(events.iter().all(|e| match e.data {
        EventData::Alloc(b) => b.device == 3 && b.thread == thread_id(),
        _ => true,
    }));
    assert_eq!(shapes(events.iter().map(|e| e.data)), shapes(expected));
    // Handed out whole somewhere, or the test shows nothing.
    assert!(events.iter().any(|e| matches!(e.data,
        EventData::Alloc(b) if b.size != AllocatorConfig::default().round_size(b.requested))));
}

#[test]
fn a_pending_start_state_comes_first_and_sizes_its_blocks() {
    let (obs, out) = observer(StartState::Pending, RecorderOptions::default());
    let seg = |addr| SegmentState {
        device: 0,
        addr,
        size: 20 << 20,
        stream: 0,
        expandable: false,
        blocks: vec![
            BlockState {
                addr,
                size: 4 << 20,
                requested: 3 << 20,
                status: BlockStatus::Allocated,
                stack: StackId::NONE,
            },
            BlockState {
                addr: addr + (4 << 20),
                size: 16 << 20,
                requested: 0,
                status: BlockStatus::Free,
                stack: StackId::NONE,
            },
        ],
        pool: Default::default(),
    };
    // Reported before the state is known: held back, then sized with it.
    obs.record(ev(EventKind::Alloc, 4 << 20, 15 << 20), None);
    obs.record(ev(EventKind::FreeRequested, 0, 3 << 20), None);
    obs.phase_begin("late");
    obs.set_initial_state(InitialState {
        segments: vec![seg(0)],
    })
    .unwrap();
    // A second state is ignored.
    obs.set_initial_state(InitialState::default()).unwrap();
    obs.record(ev(EventKind::FreeCompleted, 0, 3 << 20), None);
    obs.finish().unwrap();
    let bytes = out.bytes();
    let (reader, events) = read(&bytes);
    let initial = reader.initial_state().expect("an initial state");
    assert_eq!(initial.segments.len(), 1);
    assert_eq!(initial.segments[0].device, 3, "the observed device's");
    use EventKind::*;
    assert_eq!(
        shapes(events.iter().map(|e| e.data)),
        vec![
            // 15 MiB of the free 16 MiB leave under 1 MiB: handed out whole.
            (Alloc, 4 << 20, 16 << 20, 15 << 20),
            (FreeRequested, 0, 4 << 20, 3 << 20),
            (FreeCompleted, 0, 4 << 20, 3 << 20),
        ]
    );
    assert_eq!(events[2].kind(), PhaseBegin);
}

#[test]
fn observed_allocations_get_source_frames_or_a_context_label() {
    #[derive(Default)]
    struct Labelled(FakeFrames, Mutex<Vec<String>>);
    impl FrameSource for Labelled {
        fn name(&self) -> &str {
            "fake"
        }
        fn capture(&self, sink: &mut FrameSink<'_>) {
            self.0.capture(sink)
        }
        fn describe(&self, code: usize) -> Option<CodeInfo> {
            if code >= 1 << 40 {
                let labels = self.1.lock().unwrap();
                return Some(CodeInfo {
                    function: labels[code - (1 << 40)].clone(),
                    file: String::new(),
                });
            }
            self.0.describe(code)
        }
        fn label(&self, label: &str) -> Option<usize> {
            let mut labels = self.1.lock().unwrap();
            labels.push(label.to_string());
            Some((1 << 40) + labels.len() - 1)
        }
    }
    let (obs, out) = observer(
        StartState::Empty,
        RecorderOptions {
            frame_source: Some(Arc::new(Labelled::default())),
            ..RecorderOptions::default()
        },
    );
    let ev = |kind, addr| ObservedEvent {
        kind,
        addr,
        size: 512,
        stream: 0,
        counter: 0,
    };
    obs.record(ev(EventKind::SegmentAlloc, 0), None);
    set_fake_stack(&[(0x10, 5), (0x20, 9)]);
    obs.record(ev(EventKind::Alloc, 0), Some("ignored: frames were found"));
    set_fake_stack(&[]);
    obs.record(ev(EventKind::Alloc, 512), Some("MmBackward0"));
    obs.record(ev(EventKind::Alloc, 1024), None);
    obs.record(
        ev(EventKind::FreeRequested, 0),
        Some("frees get no source frames"),
    );
    obs.finish().unwrap();
    let bytes = out.bytes();
    let (reader, events) = read(&bytes);
    let sym = reader.symbols();
    let stacks: Vec<Vec<(String, String, u32)>> = alloc_stacks(&events)
        .into_iter()
        .map(|s| symbol_frames(sym, s))
        .collect();
    assert_eq!(
        stacks[0],
        [
            ("fn10".into(), "file10.py".into(), 5),
            ("fn20".into(), "file20.py".into(), 9)
        ]
    );
    assert_eq!(stacks[1], [("MmBackward0".into(), String::new(), 0)]);
    let label_frame = sym.stack(alloc_stacks(&events)[1])[0];
    assert_eq!(sym.describe_frame(label_frame), "MmBackward0");
    assert!(stacks[2].is_empty());
    let free = events
        .iter()
        .find(|e| e.kind() == EventKind::FreeRequested)
        .unwrap();
    assert_eq!(free.data.stack(), Some(StackId::NONE));
}

#[test]
fn named_phase_ends_leave_inner_phases_open_and_finish_is_final() {
    let (obs, out) = observer(StartState::Empty, RecorderOptions::default());
    obs.phase_begin("iter");
    obs.phase_begin("train");
    assert!(obs.phase_end_named("iter"));
    assert!(!obs.phase_end_named("iter"));
    assert!(!obs.phase_end_named("never begun"));
    obs.phase_begin("iter");
    {
        let _guard = obs.phase("guarded");
    }
    obs.annotate("k", "v");
    obs.finish().unwrap();
    assert!(matches!(obs.finish(), Err(RecorderError::Finished)));
    // Ignored after the end.
    obs.record(
        ObservedEvent {
            kind: EventKind::SegmentAlloc,
            addr: 0,
            size: 1 << 20,
            stream: 0,
            counter: 0,
        },
        None,
    );
    let bytes = out.bytes();
    let (reader, events) = read(&bytes);
    let sym = reader.symbols();
    let marks: Vec<(EventKind, &str)> = events
        .iter()
        .map(|e| match e.data {
            EventData::PhaseBegin { name, .. } | EventData::PhaseEnd { name, .. } => {
                (e.kind(), sym.string(name).unwrap_or(""))
            }
            EventData::Annotation { key, .. } => (e.kind(), sym.string(key).unwrap_or("")),
            _ => (e.kind(), ""),
        })
        .collect();
    use EventKind::*;
    assert_eq!(
        marks,
        [
            (PhaseBegin, "iter"),
            (PhaseBegin, "train"),
            (PhaseEnd, "iter"),
            (PhaseBegin, "iter"),
            (PhaseBegin, "guarded"),
            (PhaseEnd, "guarded"),
            (Annotation, "k"),
        ]
    );
}

/// Guards and explicit begins and ends on several threads at once: each
/// thread's phases nest in its own stack, carry its id, and no thread ends
/// another's (an end without a phase of its own is refused).
#[test]
fn each_thread_has_its_own_phases() {
    const THREADS: usize = 8;
    let (r, out) = recorder(RecorderOptions::default());
    let main = thread_id();
    r.phase_begin("main");
    let ids: Vec<u32> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let r = &r;
                s.spawn(move || {
                    // Nothing of this thread is open: main's phase stays.
                    assert!(matches!(r.phase_end(), Err(RecorderError::NoOpenPhase)));
                    assert!(!r.phase_end_named("main"));
                    for i in 0..2000 {
                        let _outer = r.phase("outer");
                        if i % 2 == 0 {
                            r.phase_begin("explicit");
                            let a = r.malloc(512 + t as u64 * 512, 0).unwrap();
                            r.free(a.addr).unwrap();
                            r.phase_end().unwrap();
                        } else {
                            let _inner = r.phase("inner");
                            r.phase_begin("left open");
                            // Ending a named phase leaves those inside open,
                            // and the guard's end still finds its own.
                            assert!(r.phase_end_named("inner"));
                            r.phase_end().unwrap();
                        }
                    }
                    thread_id()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(r.phase_end_named("main"));
    r.finish().unwrap();
    let bytes = out.bytes();
    let (reader, events) = read(&bytes);
    let sym = reader.symbols();
    // Replaying each thread's stack: every end closes its thread's innermost
    // phase of that name, and every phase is closed.
    let mut open: HashMap<u32, Vec<&str>> = HashMap::new();
    let mut begins: HashMap<u32, usize> = HashMap::new();
    for e in &events {
        match e.data {
            EventData::PhaseBegin { name, thread } => {
                open.entry(thread)
                    .or_default()
                    .push(sym.string(name).unwrap());
                *begins.entry(thread).or_default() += 1;
            }
            EventData::PhaseEnd { name, thread } => {
                let stack = open
                    .get_mut(&thread)
                    .expect("an end on a thread with no phase");
                let name = sym.string(name).unwrap();
                let at = stack
                    .iter()
                    .rposition(|n| *n == name)
                    .expect("an unmatched end");
                stack.remove(at);
            }
            _ => {}
        }
    }
    assert!(open.values().all(Vec::is_empty), "{open:?}");
    assert_eq!(begins[&main], 1);
    for id in ids {
        assert_ne!(id, main);
        assert_eq!(begins[&id], 2000 * 2 + 1000);
    }
}

// ---------------------------------------------------------------- Tags

use crate::format::{Category, TagEvent};

fn tags(events: &[Event]) -> Vec<TagEvent> {
    events
        .iter()
        .filter_map(|e| match e.data {
            EventData::Tag(t) => Some(t),
            _ => None,
        })
        .collect()
}

/// An observer's tags land where they were recorded among the allocator's
/// events, with the observed device, the calling thread and the time of the
/// walk (one moment for a batch).
#[test]
fn an_observers_tags_are_ordered_with_its_events_and_stamped() {
    let (obs, out) = observer(StartState::Empty, RecorderOptions::default());
    obs.record(ev(EventKind::SegmentAlloc, 0, 2 << 20), None);
    obs.record(ev(EventKind::Alloc, 0, 4096), None);
    obs.record(ev(EventKind::Alloc, 4096, 4096), None);
    obs.tag(0, Category::Parameter);
    obs.phase_begin("Optimizer.step#AdamW.step");
    obs.record(ev(EventKind::Alloc, 8192, 8192), None);
    assert_eq!(
        obs.tag_all([(4096, Category::Gradient), (8192, Category::OptimizerState)]),
        2
    );
    obs.phase_end().unwrap();
    obs.finish().unwrap();
    // Ignored once finished.
    obs.tag(0, Category::Other);
    assert_eq!(obs.tag_all([(0, Category::Other)]), 0, "finished");
    let bytes = out.bytes();
    let (_, events) = read(&bytes);
    use EventKind::*;
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind()).collect();
    assert_eq!(
        kinds,
        [
            SegmentAlloc,
            Alloc,
            Alloc,
            Tag,
            PhaseBegin,
            Alloc,
            Tag,
            Tag,
            PhaseEnd
        ]
    );
    let tags = tags(&events);
    let expected = [
        (0, Category::Parameter),
        (4096, Category::Gradient),
        (8192, Category::OptimizerState),
    ];
    assert_eq!(
        tags.iter()
            .map(|t| (t.addr, t.category().unwrap()))
            .collect::<Vec<_>>(),
        expected
    );
    assert!(
        tags.iter()
            .all(|t| t.device == 3 && t.thread == thread_id())
    );
    assert_eq!(events[6].time_ns, events[7].time_ns, "one moment per batch");
    assert!(events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
}

/// Tags recorded while the start state is awaited are held back with the
/// allocator's events, and come after the state.
#[test]
fn tags_before_a_pending_state_wait_for_it() {
    let (obs, out) = observer(StartState::Pending, RecorderOptions::default());
    obs.tag(0x1000, Category::Buffer);
    obs.set_initial_state(InitialState {
        segments: vec![SegmentState {
            device: 0,
            addr: 0,
            size: 2 << 20,
            stream: 0,
            expandable: false,
            blocks: vec![BlockState {
                addr: 0,
                size: 2 << 20,
                requested: 2 << 20,
                status: BlockStatus::Allocated,
                stack: StackId::NONE,
            }],
            pool: Default::default(),
        }],
    })
    .unwrap();
    obs.finish().unwrap();
    let bytes = out.bytes();
    let (reader, events) = read(&bytes);
    assert!(reader.initial_state().is_some());
    assert_eq!(
        tags(&events),
        [TagEvent::new(0x1000, 3, Category::Buffer)].map(|t| TagEvent {
            thread: thread_id(),
            ..t
        })
    );
}

/// A walk over a large model tags thousands of blocks in one call: full
/// buffers are handed over as it goes (the buffer never grows past its
/// room) and none is lost.
#[test]
fn a_long_batch_of_tags_is_handed_over_in_buffers_and_lost_nowhere() {
    let (obs, out) = observer(
        StartState::Empty,
        RecorderOptions {
            chunk_events: 100,
            queue_batches: 1,
            max_wait: None,
            max_queue_age: None,
            flush_interval: None,
            ..RecorderOptions::default()
        },
    );
    let capacity = obs.rec.lock().subject.capacity();
    let n = 25_000u64;
    let recorded = obs.tag_all((0..n).map(|i| (i * 512, Category::ALL[i as usize % 7])));
    assert_eq!(recorded, n as usize);
    assert_eq!(obs.rec.lock().subject.capacity(), capacity);
    let summary = obs.finish().unwrap();
    assert_eq!(summary.counts.get(EventKind::Tag), n);
    let bytes = out.bytes();
    let (_, events) = read(&bytes);
    let tags = tags(&events);
    assert_eq!(tags.len() as u64, n);
    assert!(
        tags.iter()
            .enumerate()
            .all(|(i, t)| t.addr == i as u64 * 512 && t.code == (i % 7) as u8)
    );
}

/// Replacement mode: the recorder tags its own device's blocks.
#[test]
fn a_recorders_tags_name_its_device() {
    let out = SharedBuf::default();
    let alloc = CachingAllocator::new(
        SimulatedDevice::new(1 << 30).with_index(2),
        AllocatorConfig::default(),
    );
    let r = Recorder::new(alloc, out.clone(), RecorderOptions::default()).unwrap();
    let a = r.malloc(1 << 20, 0).unwrap();
    r.tag(a.addr, Category::Activation);
    assert_eq!(r.tag_all([(a.addr, Category::Temporary)]), 1);
    r.free(a.addr).unwrap();
    r.finish().unwrap();
    assert_eq!(r.tag_all([(a.addr, Category::Other)]), 0);
    let bytes = out.bytes();
    let (_, events) = read(&bytes);
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind()).collect();
    use EventKind::*;
    assert_eq!(
        kinds,
        [SegmentAlloc, Alloc, Tag, Tag, FreeRequested, FreeCompleted]
    );
    let tags = tags(&events);
    assert_eq!(tags[0].device, 2);
    assert_eq!(tags[0].addr, a.addr);
    assert_eq!(
        tags.iter().map(|t| t.category()).collect::<Vec<_>>(),
        [Some(Category::Activation), Some(Category::Temporary)]
    );
}

// ------------------------------------------------- format 1.3: issue #28

/// An out-of-memory error gets the Python frames of the thread that asked,
/// as an allocation does (observer mode: PyTorch reports it under its
/// lock, on that thread), and the autograd node's label without frames.
#[test]
fn observed_ooms_get_source_frames() {
    let (obs, out) = observer(
        StartState::Empty,
        RecorderOptions {
            frame_source: Some(Arc::new(FakeFrames::default())),
            ..RecorderOptions::default()
        },
    );
    set_fake_stack(&[(0x30, 17), (0x40, 3)]);
    obs.record(
        ObservedEvent {
            kind: EventKind::Oom,
            addr: 5 << 20,
            size: 1 << 30,
            stream: 0,
            counter: 0,
        },
        None,
    );
    set_fake_stack(&[]);
    obs.finish().unwrap();
    let bytes = out.bytes();
    let (reader, events) = read(&bytes);
    let EventData::Oom(o) = events[0].data else {
        panic!("{:?}", events[0]);
    };
    assert_eq!((o.requested, o.free_bytes, o.device), (1 << 30, 5 << 20, 3));
    assert_eq!(
        symbol_frames(reader.symbols(), o.stack),
        [
            ("fn30".to_string(), "file30.py".to_string(), 17),
            ("fn40".to_string(), "file40.py".to_string(), 3)
        ]
    );
}

/// Limits and device-memory samples go into the observer's trace in order
/// with its events, on its device, from the calling thread; none after the
/// finish.
#[test]
fn observer_records_limits_and_device_memory_in_order() {
    let (obs, out) = observer(StartState::Empty, RecorderOptions::default());
    assert!(obs.limit(3 << 30, 80 << 30));
    obs.record(ev(EventKind::SegmentAlloc, 0, 20 << 20), None);
    assert!(obs.device_memory(70 << 30, 80 << 30));
    obs.record(ev(EventKind::Alloc, 0, 1 << 20), None);
    assert!(obs.limit(80 << 30, 80 << 30));
    obs.finish().unwrap();
    assert!(!obs.limit(1, 2), "finished");
    assert!(!obs.device_memory(1, 2), "finished");
    let bytes = out.bytes();
    let (_, events) = read(&bytes);
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind()).collect();
    use EventKind::*;
    assert_eq!(kinds, [Limit, SegmentAlloc, DeviceMemory, Alloc, Limit]);
    let EventData::Limit(l) = events[0].data else {
        unreachable!()
    };
    assert_eq!(
        (l.device, l.limit_bytes, l.total_bytes),
        (3, 3 << 30, 80 << 30)
    );
    assert_eq!(l.thread, thread_id());
    let EventData::DeviceMemory(m) = events[2].data else {
        unreachable!()
    };
    assert_eq!(
        (m.device, m.free_bytes, m.total_bytes),
        (3, 70 << 30, 80 << 30)
    );
    assert!(events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
}

/// A recorder's allocator set to sample the device follows each segment
/// event and each OOM with the device's memory, as the device reports it
/// then; a simulation (samples off, the default) gets none.
#[test]
fn device_memory_samples_follow_segment_events_and_ooms() {
    let run = |samples: bool| {
        let mut a = CachingAllocator::new(
            SimulatedDevice::new(100 << 20).with_index(1),
            AllocatorConfig::default(),
        );
        a.set_device_memory_samples(samples);
        let out = SharedBuf::default();
        let r = Recorder::new(a, out.clone(), RecorderOptions::default()).unwrap();
        let x = r.malloc(30 << 20, 0).unwrap();
        assert!(r.malloc(200 << 20, 0).is_err());
        r.free(x.addr).unwrap();
        r.empty_cache();
        r.finish().unwrap();
        let bytes = out.bytes();
        read(&bytes).1
    };
    let events = run(true);
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind()).collect();
    use EventKind::*;
    assert_eq!(
        kinds,
        [
            SegmentAlloc,
            DeviceMemory,
            Alloc,
            // The block is live: nothing to free, the request fails.
            Oom,
            DeviceMemory,
            FreeRequested,
            FreeCompleted,
            EmptyCache,
            SegmentFree,
            DeviceMemory
        ]
    );
    let samples: Vec<(u32, u64, u64)> = events
        .iter()
        .filter_map(|e| match e.data {
            EventData::DeviceMemory(m) => Some((m.device, m.free_bytes, m.total_bytes)),
            _ => None,
        })
        .collect();
    assert_eq!(
        samples,
        [
            (1, 70 << 20, 100 << 20),
            (1, 70 << 20, 100 << 20),
            (1, 100 << 20, 100 << 20)
        ]
    );
    assert!(
        run(false)
            .iter()
            .all(|e| e.kind() != EventKind::DeviceMemory)
    );
}

/// `set_memory_fraction` limits the allocator as PyTorch's does and records
/// the limit; a fraction PyTorch refuses changes nothing.
#[test]
fn recorder_memory_fraction_is_enforced_and_recorded() {
    let out = SharedBuf::default();
    let r = Recorder::new(allocator(1 << 30), out.clone(), RecorderOptions::default()).unwrap();
    assert!(!r.set_memory_fraction(1.5));
    assert!(!r.set_memory_fraction(f64::NAN));
    assert!(!r.set_memory_fraction(-0.1));
    assert!(r.set_memory_fraction(0.25));
    assert!(r.malloc(300 << 20, 0).is_err(), "above a quarter of 1 GiB");
    let x = r.malloc(200 << 20, 0).unwrap();
    r.free(x.addr).unwrap();
    r.finish().unwrap();
    let bytes = out.bytes();
    let (_, events) = read(&bytes);
    let limits: Vec<(u64, u64)> = events
        .iter()
        .filter_map(|e| match e.data {
            EventData::Limit(l) => Some((l.limit_bytes, l.total_bytes)),
            _ => None,
        })
        .collect();
    assert_eq!(limits, [(256 << 20, 1 << 30)]);
    assert_eq!(events[0].kind(), EventKind::Limit);
}

/// A frame source that names its walks, as a caching interpreter source
/// does: each thread's walk is whatever the test sets.
#[derive(Default)]
struct WalkFrames;

thread_local! {
    static WALK: std::cell::RefCell<Option<(crate::WalkId, Vec<usize>)>> =
        const { std::cell::RefCell::new(None) };
}

impl FrameSource for WalkFrames {
    fn name(&self) -> &str {
        "walks"
    }
    fn capture(&self, sink: &mut FrameSink<'_>) {
        WALK.with(|w| {
            if let Some((walk, frames)) = &*w.borrow() {
                sink.push_walk(*walk, frames);
            }
        });
    }
    fn describe(&self, code: usize) -> Option<CodeInfo> {
        Some(CodeInfo {
            function: format!("fn{code:x}"),
            file: "walks.py".into(),
        })
    }
}

#[test]
fn named_walks_are_interned_by_their_frames_once_then_by_name() {
    use crate::WalkId;
    let (r, out) = recorder(RecorderOptions {
        frame_source: Some(Arc::new(WalkFrames)),
        max_stack_depth: 3,
        ..RecorderOptions::default()
    });
    let set = |walk: WalkId, frames: &[usize]| {
        WALK.with(|w| *w.borrow_mut() = Some((walk, frames.to_vec())));
    };
    let (a, b, long) = (WalkId::fresh(), WalkId::fresh(), WalkId::fresh());
    let mut live = Vec::new();
    set(a, &[0x20, 7, 0x10, 3]);
    live.push(r.malloc(1000, 0).unwrap());
    live.push(r.malloc(1000, 0).unwrap());
    // Another walk of the same frames: the same stack.
    set(b, &[0x20, 7, 0x10, 3]);
    live.push(r.malloc(1000, 0).unwrap());
    // A walk deeper than the recorder keeps: cut at 3 frames, like the
    // same frames pushed one by one.
    set(long, &[1, 1, 2, 2, 3, 3, 4, 4]);
    live.push(r.malloc(1000, 0).unwrap());
    live.push(r.malloc(1000, 0).unwrap());
    // The first walk again, after others.
    set(a, &[0x20, 7, 0x10, 3]);
    live.push(r.malloc(1000, 0).unwrap());
    for x in &live {
        r.free(x.addr).unwrap();
    }
    let summary = r.finish().unwrap();
    let bytes = out.bytes();
    let (reader, events) = read(&bytes);
    let stacks = alloc_stacks(&events);
    assert_eq!(stacks[0], stacks[1]);
    assert_eq!(stacks[0], stacks[2]);
    assert_eq!(stacks[3], stacks[4]);
    assert_ne!(stacks[0], stacks[3]);
    assert_eq!(stacks[5], stacks[0]);
    let sym = reader.symbols();
    let lines: Vec<u32> = symbol_frames(sym, stacks[3]).iter().map(|f| f.2).collect();
    assert_eq!(lines, [1, 2, 3]);
    let s = |f: &str, l| (format!("fn{f}"), "walks.py".to_string(), l);
    assert_eq!(symbol_frames(sym, stacks[0]), vec![s("20", 7), s("10", 3)]);
    assert_eq!(summary.trace.stacks, 2);
}

/// Issue #32: a disk far slower than the program (20 kB/s against 30,000
/// events a second). No call blocks the program past the bound (plus a
/// generous margin for a loaded machine: unbounded, a call waited for a
/// whole chunk's write, about 400 ms here); what the disk cannot take is
/// dropped, counted, and marked in the trace where it was; and the trace
/// accounts for every event produced.
#[test]
fn a_disk_slower_than_the_program_costs_events_not_time() {
    let disk = crate::workload::SlowDisk::new(20_000);
    let max_wait = Duration::from_millis(2);
    let setup = ObserverSetup::device(0, "observed", 1 << 40);
    let obs = Observer::new(
        disk.clone(),
        setup,
        RecorderOptions {
            chunk_events: 1024,
            queue_batches: 2,
            max_wait: Some(max_wait),
            ..RecorderOptions::default()
        },
    )
    .unwrap();
    let mut produced = 0u64;
    let mut longest_call = Duration::ZERO;
    let mut record = |event: ObservedEvent| {
        let start = std::time::Instant::now();
        obs.record(event, None);
        longest_call = longest_call.max(start.elapsed());
        produced += 1;
    };
    record(ev(EventKind::SegmentAlloc, 0, 1 << 30));
    // 30 events a millisecond for 0.6 s.
    let start = std::time::Instant::now();
    for ms in 0..600u64 {
        for i in 0..10u64 {
            let addr = ((ms * 10 + i) % 997) << 20;
            record(ev(EventKind::Alloc, addr, 512 << (i % 8)));
            record(ev(EventKind::FreeRequested, addr, 512 << (i % 8)));
            record(ev(EventKind::FreeCompleted, addr, 512 << (i % 8)));
        }
        let next = start + Duration::from_millis(ms + 1);
        std::thread::sleep(next.saturating_duration_since(std::time::Instant::now()));
    }
    disk.unthrottle();
    let summary = obs.finish().unwrap();
    let stats = obs.queue_stats();
    assert!(stats.dropped_events > 0, "{stats:?}");
    assert!(stats.drops > 0);
    assert!(
        stats.longest_wait < max_wait + Duration::from_millis(50),
        "{stats:?}"
    );
    assert!(
        longest_call < Duration::from_millis(100),
        "a call blocked the program {longest_call:?}"
    );
    assert_eq!(summary.dropped_events, stats.dropped_events);
    let bytes = disk.bytes();
    let (reader, events) = read(&bytes);
    assert!(reader.footer().is_some());
    let markers: Vec<(u64, crate::format::DroppedEvents)> = events
        .iter()
        .filter_map(|e| match e.data {
            EventData::EventsDropped(d) => Some((e.time_ns, d)),
            _ => None,
        })
        .collect();
    assert_eq!(markers.len() as u64, stats.drops);
    assert!(
        markers
            .iter()
            .all(|(to, d)| d.from_ns <= *to && d.count > 0)
    );
    let dropped: u64 = markers.iter().map(|(_, d)| d.count).sum();
    assert_eq!(dropped, stats.dropped_events);
    assert_eq!(
        events.len() as u64 - markers.len() as u64 + dropped,
        produced,
        "every event produced is in the trace or counted in a marker"
    );
    assert!(events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
}

/// A marker waits for the next buffer sent, even when none fills: a flush
/// sends it alone, after everything recorded before it.
#[test]
fn a_marker_goes_out_with_the_next_flush() {
    let disk = crate::workload::SlowDisk::new(2_000);
    let obs = Observer::new(
        disk.clone(),
        ObserverSetup::default(),
        RecorderOptions {
            chunk_events: 100,
            queue_batches: 1,
            max_wait: Some(Duration::ZERO),
            // The drops of a full queue alone (its buffers wait a second).
            max_queue_age: None,
            flush_interval: None,
            ..RecorderOptions::default()
        },
    )
    .unwrap();
    // Full buffers until one is dropped: the writer takes a chunk 0.4 s to
    // write, so at most two fit the queue (one over its limit) beside the
    // one it writes, and a third or fourth finds it still behind. Recording
    // stops at that drop, which the recording thread counts as it happens,
    // so that no buffer fills after it, however the threads were scheduled
    // (a fixed count of events let a loaded machine send one more buffer,
    // which took the marker before the flush could).
    let mut recorded = 0u64;
    while obs.queue_stats().drops == 0 && recorded < 100 * 100 {
        obs.record(ev(EventKind::Alloc, recorded << 20, 512), None);
        recorded += 1;
    }
    let stats = obs.queue_stats();
    assert_eq!(stats.drops, 1, "{stats:?}");
    assert_eq!(stats.dropped_events, 100, "one full buffer: {stats:?}");
    assert_eq!(recorded % 100, 0, "the drop came as a buffer filled");
    disk.unthrottle();
    obs.flush().unwrap();
    let (_, events) = read(&disk.bytes());
    let last = events.last().unwrap();
    let EventData::EventsDropped(d) = last.data else {
        panic!("the flush sent the marker: {last:?}");
    };
    assert_eq!(d.count, stats.dropped_events);
    assert_eq!(events.len() as u64 - 1 + d.count, recorded);
    obs.finish().unwrap();
}

/// A buffer that waited in the queue past the age bound is dropped by the
/// writer thread, which writes its marker in its place: the trace stays in
/// order and accounts for every event, and the program never waited.
#[test]
fn buffers_older_than_the_age_bound_are_dropped_by_the_writer() {
    let disk = crate::workload::SlowDisk::new(5_000);
    let obs = Observer::new(
        disk.clone(),
        ObserverSetup::default(),
        RecorderOptions {
            chunk_events: 100,
            queue_batches: 64,
            // No drop of a full queue: any drop here is the writer's.
            max_wait: None,
            max_queue_age: Some(Duration::from_millis(50)),
            flush_interval: None,
            ..RecorderOptions::default()
        },
    )
    .unwrap();
    // Ten buffers at once: the first chunk takes the disk a fifth of a
    // second, so the buffers behind it are stale when the writer gets them.
    for i in 0..1000u64 {
        obs.record(ev(EventKind::Alloc, i << 20, 512), None);
    }
    obs.flush().unwrap();
    let stats = obs.queue_stats();
    assert!(stats.dropped_events > 0, "{stats:?}");
    assert_eq!(stats.longest_wait, Duration::ZERO);
    disk.unthrottle();
    let summary = obs.finish().unwrap();
    assert_eq!(summary.dropped_events, stats.dropped_events);
    let (_, events) = read(&disk.bytes());
    let markers: Vec<_> = events
        .iter()
        .filter_map(|e| match e.data {
            EventData::EventsDropped(d) => Some(d),
            _ => None,
        })
        .collect();
    assert_eq!(markers.len() as u64, stats.drops);
    let dropped: u64 = markers.iter().map(|d| d.count).sum();
    assert_eq!(dropped, stats.dropped_events);
    assert_eq!(events.len() as u64 - markers.len() as u64 + dropped, 1000);
    assert!(events.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
}

/// A bounded recording of `n` requests into `trace`, flushed and left
/// unfinished: its ring holds several parts.
fn bounded(trace: &std::path::Path, n: usize) -> Recorder<SimulatedDevice> {
    let options = RecorderOptions {
        keep_last: Some(KeepLast::Bytes(MIN_KEEP_BYTES)),
        max_wait: None,
        max_queue_age: None,
        ..RecorderOptions::default()
    };
    let r = Recorder::create(trace, allocator(1 << 40), options).unwrap();
    let mut live = Vec::new();
    for (alloc, size, pick) in ops(7, n) {
        if alloc || live.is_empty() {
            live.push(r.malloc(size, 0).unwrap().addr);
        } else {
            let a = live.swap_remove(pick % live.len());
            r.free(a).unwrap();
        }
        if live.len() > 64 {
            r.free(live.swap_remove(0)).unwrap();
        }
    }
    r.flush().unwrap();
    r
}

/// The parts of a ring, oldest first.
fn ring_parts(trace: &std::path::Path) -> Vec<PathBuf> {
    let mut parts: Vec<PathBuf> = std::fs::read_dir(ring_folder(trace))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    parts.sort();
    parts
}

/// The events of `parts` joined by the strict joiner (every part sound).
fn strictly_joined(parts: &[Vec<u8>]) -> Vec<Event> {
    let (bytes, _) = crate::format::join(parts.iter().map(|p| &p[..]), Vec::new()).unwrap();
    read(&bytes).1
}

/// The recorder's own join at the end keeps what it can, as `vramtrace
/// join` does: a part cut inside its start (a full disk, say) is left out
/// and named, the parts before a break are left out and kept on disk, and
/// the newest run of sound parts is the trace (issue #46).
#[test]
fn the_join_at_the_end_keeps_the_sound_parts_and_names_the_others() {
    let dir = std::env::temp_dir().join(format!("vramtrace-ring-finish-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // The newest ended part cut inside its start: the parts before it are
    // before a break, those after it the run joined.
    let trace = dir.join("cut.vtrace");
    let r = bounded(&trace, 120_000);
    let parts = ring_parts(&trace);
    assert!(parts.len() >= 4, "{parts:?}");
    let cut = parts.len() - 2;
    let copies: Vec<Vec<u8>> = parts.iter().map(|p| std::fs::read(p).unwrap()).collect();
    std::fs::write(&parts[cut], &copies[cut][..40]).unwrap();
    let summary = r.finish().unwrap();
    let left: Vec<&PathBuf> = summary
        .trace
        .parts_left_out
        .iter()
        .map(|l| &l.path)
        .collect();
    assert_eq!(
        left,
        parts[..=cut].iter().collect::<Vec<_>>(),
        "{summary:?}"
    );
    assert!(
        summary.trace.parts_left_out[cut]
            .why
            .contains("its start cannot be read"),
        "{summary:?}"
    );
    assert!(
        summary.trace.parts_left_out[0]
            .why
            .contains("before a break"),
        "{summary:?}"
    );
    // The trace is the run after the cut, exactly as the undamaged parts
    // of it join (the current part, copied before its footer, reads as
    // cut short at the same event); the parts joined are removed.
    let (_, events) = read(&std::fs::read(&trace).unwrap());
    assert_eq!(events, strictly_joined(&copies[cut + 1..]));
    assert_eq!(summary.trace.events, events.len() as u64);
    assert!(!parts[parts.len() - 1].exists());
    // Nothing readable is lost: every part left out is still there, as it
    // was.
    for (p, copy) in parts[..cut].iter().zip(&copies) {
        assert_eq!(&std::fs::read(p).unwrap(), copy, "{}", p.display());
    }
    assert!(parts[cut].exists());

    // A ring whose oldest kept part was emptied: only it is left out, and
    // the trace is every other part, exactly as the strict join of them.
    let trace = dir.join("empty.vtrace");
    let r = bounded(&trace, 120_000);
    let parts = ring_parts(&trace);
    assert!(parts.len() >= 3, "{parts:?}");
    let copies: Vec<Vec<u8>> = parts.iter().map(|p| std::fs::read(p).unwrap()).collect();
    std::fs::write(&parts[0], b"").unwrap();
    let summary = r.finish().unwrap();
    assert_eq!(summary.trace.parts_left_out.len(), 1, "{summary:?}");
    assert_eq!(summary.trace.parts_left_out[0].path, parts[0]);
    assert!(
        summary.trace.parts_left_out[0].why.contains("empty"),
        "{summary:?}"
    );
    assert!(parts[0].exists(), "a part left out stays");
    assert!(ring_folder(&trace).exists(), "so does its folder");
    let (_, events) = read(&std::fs::read(&trace).unwrap());
    assert_eq!(events, strictly_joined(&copies[1..]));
    assert_eq!(summary.trace.events, events.len() as u64);

    // An undamaged ring: nothing left out, the ring removed.
    let trace = dir.join("sound.vtrace");
    let r = bounded(&trace, 60_000);
    let summary = r.finish().unwrap();
    assert!(summary.trace.parts_left_out.is_empty(), "{summary:?}");
    assert!(!ring_folder(&trace).exists());
    let _ = std::fs::remove_dir_all(&dir);
}
