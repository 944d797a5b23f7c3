//! Crafted traces whose cost once grew faster than their size, one family
//! each (issue #32): the scaling tests replay them at two sizes, and
//! `cargo test --release -p vramtrace --test scaling -- --ignored write_hostile_inputs`
//! writes them at the sizes of the audit for timing the binary
//! (`scripts/hostile-scaling.sh`).

#![allow(dead_code)]

use vramtrace_format::{BlockEvent, Event, EventData, Header, SegmentEvent, TraceWriter};

/// A trace written event by event, its clock one nanosecond a step.
struct Trace {
    w: TraceWriter<Vec<u8>>,
    t: u64,
}

impl Trace {
    fn new() -> Self {
        Trace {
            w: TraceWriter::new(Vec::new(), Header::default()).unwrap(),
            t: 0,
        }
    }

    /// Starts with one segment of 1 TiB at address 0, for blocks to sit in.
    fn with_segment() -> Self {
        let mut t = Trace::new();
        t.push(EventData::SegmentAlloc(segment(0, 1 << 40)));
        t
    }

    fn push(&mut self, data: EventData) {
        self.t += 1;
        self.w
            .push(Event {
                time_ns: self.t,
                data,
            })
            .unwrap();
    }

    fn finish(self) -> Vec<u8> {
        self.w.finish().unwrap()
    }
}

fn block(addr: u64, size: u64) -> BlockEvent {
    BlockEvent {
        addr,
        size,
        requested: size,
        ..Default::default()
    }
}

fn segment(addr: u64, size: u64) -> SegmentEvent {
    SegmentEvent {
        addr,
        size,
        ..Default::default()
    }
}

/// `n` phases each inside the last, a block allocated in every hundredth,
/// then all ended innermost first.
pub fn deep_phases(n: usize) -> Vec<u8> {
    let mut t = Trace::with_segment();
    let names: Vec<_> = (0..7)
        .map(|i| t.w.intern_string(&format!("level{i}")))
        .collect();
    for i in 0..n {
        t.push(EventData::PhaseBegin {
            name: names[i % 7],
            thread: 0,
        });
        if i % 100 == 0 {
            t.push(EventData::Alloc(block(512 * i as u64, 512)));
        }
    }
    for i in (0..n).rev() {
        t.push(EventData::PhaseEnd {
            name: names[i % 7],
            thread: 0,
        });
    }
    t.finish()
}

/// `n` phases begun and never ended, each allocating a block that stays
/// live, and each freeing the block of the one before the last.
pub fn unclosed_phases(n: usize) -> Vec<u8> {
    let mut t = Trace::with_segment();
    let step = t.w.intern_string("step");
    for i in 0..n as u64 {
        t.push(EventData::PhaseBegin {
            name: step,
            thread: 0,
        });
        t.push(EventData::Alloc(block(512 * i, 512)));
        if i >= 2 && i % 2 == 0 {
            t.push(EventData::FreeCompleted(block(512 * (i - 2), 512)));
        }
    }
    t.finish()
}

/// `n` segments each overlapping the one before (refused), among live
/// segments, with blocks allocated and freed in them.
pub fn overlapping_segments(n: usize) -> Vec<u8> {
    let mut t = Trace::new();
    for i in 0..n as u64 {
        let addr = i << 20;
        // A segment of 2 MiB every MiB: each overlaps the one before.
        t.push(EventData::SegmentAlloc(segment(addr, 2 << 20)));
        t.push(EventData::Alloc(block(addr, 4096)));
        t.push(EventData::FreeCompleted(block(addr, 4096)));
    }
    t.finish()
}

/// Expandable segments mapped and unmapped in a churn, among `n` small
/// blocks of which every other one is freed (cached, split, so no
/// `empty_cache()` can release them): `n` times a page mapped, a block
/// allocated and freed in it, the page unmapped. Every unmap reads as an
/// `empty_cache()` call.
pub fn expandable_churn(n: usize) -> Vec<u8> {
    let mut t = Trace::with_segment();
    for i in 0..n as u64 {
        t.push(EventData::Alloc(block(i * 512, 512)));
    }
    for i in (1..n as u64).step_by(2) {
        t.push(EventData::FreeCompleted(block(i * 512, 512)));
    }
    const PAGE: u64 = 2 << 20;
    for i in 0..n as u64 {
        let addr = (2 << 40) + (i % 64) * PAGE;
        t.push(EventData::SegmentMap(segment(addr, PAGE)));
        t.push(EventData::Alloc(block(addr, PAGE / 2)));
        t.push(EventData::FreeCompleted(block(addr, PAGE / 2)));
        t.push(EventData::SegmentUnmap(segment(addr, PAGE)));
    }
    t.finish()
}

/// `n` segments of zero bytes, each with a block allocated at its address
/// (outside every segment, since the segment holds no byte) and left live.
pub fn zero_size_segments(n: usize) -> Vec<u8> {
    let mut t = Trace::with_segment();
    for i in 0..n as u64 {
        let addr = (2 << 40) + (i << 12);
        t.push(EventData::SegmentAlloc(segment(addr, 0)));
        t.push(EventData::Alloc(block(addr, 4096)));
        t.push(EventData::Alloc(block(i << 12, 4096)));
        t.push(EventData::FreeCompleted(block(i << 12, 4096)));
    }
    t.finish()
}

/// `n` repetitions of a step that allocates 16 blocks, frees 15 and
/// leaks one: the allocated peak rises at every step.
pub fn leaking_steps(n: usize) -> Vec<u8> {
    let mut t = Trace::with_segment();
    let step = t.w.intern_string("step");
    let mut next = 0u64;
    for _ in 0..n {
        t.push(EventData::PhaseBegin {
            name: step,
            thread: 0,
        });
        let base = next;
        for j in 0..16 {
            t.push(EventData::Alloc(block(base + j * 4096, 4096)));
        }
        for j in 1..16 {
            t.push(EventData::FreeCompleted(block(base + j * 4096, 4096)));
        }
        next += 4096;
        t.push(EventData::PhaseEnd {
            name: step,
            thread: 0,
        });
    }
    t.finish()
}

/// `n` live segments in descending address order, each with one block.
pub fn descending_segments(n: usize) -> Vec<u8> {
    let mut t = Trace::new();
    for i in 0..n as u64 {
        let addr = (n as u64 - i) << 21;
        t.push(EventData::SegmentAlloc(segment(addr, 1 << 20)));
        t.push(EventData::Alloc(block(addr, 4096)));
    }
    t.finish()
}

/// `n` events, each on a device of its own (ids spread over the `u32`
/// range): a block allocated and freed on each.
pub fn many_devices(n: usize) -> Vec<u8> {
    let mut t = Trace::new();
    for i in 0..n as u32 {
        let device = i.wrapping_mul(2_654_435_761);
        let mut b = block(0, 512);
        b.device = device;
        t.push(EventData::Alloc(b));
        t.push(EventData::FreeCompleted(b));
    }
    t.finish()
}

/// `n` blocks allocated a microsecond apart (a chart column each), then
/// tagged, in the same order, a microsecond apart: every tag changes the
/// category of a block born long before.
pub fn blocks_tagged_late(n: usize) -> Vec<u8> {
    let mut t = Trace::with_segment();
    for i in 0..n as u64 {
        t.t += 999;
        t.push(EventData::Alloc(block(i * 512, 512)));
    }
    for i in 0..n as u64 {
        t.t += 999;
        t.push(EventData::Tag(vramtrace_format::TagEvent::new(
            i * 512,
            0,
            vramtrace_format::Category::Parameter,
        )));
    }
    t.finish()
}

/// `n` blocks a microsecond apart (a chart column each), each allocated
/// from a stack of its own and live to the end: issue #46's export of
/// 100,000 distinct stacks, each holding one live block.
pub fn distinct_stacks(n: usize) -> Vec<u8> {
    let mut t = Trace::with_segment();
    for i in 0..n as u64 {
        t.t += 999;
        let name = format!("layer_{i}");
        let stack = t.w.intern_symbol_stack([
            (name.as_str(), "model.py", 1 + (i % 1000) as u32),
            ("train", "train.py", 7),
        ]);
        t.push(EventData::Alloc(BlockEvent {
            stack,
            ..block(i * 512, 512)
        }));
    }
    t.finish()
}

/// `n` devices, each named by one tag event alone (an address never
/// allocated), their ids spread over the `u32` range.
pub fn tagged_devices(n: usize) -> Vec<u8> {
    let mut t = Trace::new();
    for i in 0..n as u32 {
        let device = i.wrapping_mul(2_654_435_761);
        t.push(EventData::Tag(vramtrace_format::TagEvent::new(
            0x1000,
            device,
            vramtrace_format::Category::Parameter,
        )));
    }
    t.finish()
}
