//! Encode and decode throughput and bytes per event of the trace format on a
//! 10-million-event training-like stream, and encode throughput on a stream
//! shaped like a converted PyTorch snapshot.
//!
//! `cargo bench -p vramtrace-format --bench format`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use vramtrace_format::*;

const EVENTS: usize = 10_000_000;

/// A deterministic stream shaped like a training loop under a caching
/// allocator: per iteration, each layer allocates activations (sizes from a
/// fixed set, addresses reused iteration after iteration), frees them in
/// reverse, with stacks from a few hundred call sites and microsecond gaps.
fn training_stream(writer: &mut TraceWriter<Vec<u8>>) -> Vec<Event> {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let stacks: Vec<StackId> = (0..300)
        .map(|i| {
            let frames: Vec<(String, String, u32)> = (0..24)
                .map(|d| {
                    (
                        format!("fn_{}_{}", i % 40, d),
                        format!("model_{}.py", d % 7),
                        10 + d,
                    )
                })
                .collect();
            writer.intern_symbol_stack(frames.iter().map(|(f, m, l)| (f.as_str(), m.as_str(), *l)))
        })
        .collect();
    let sizes: Vec<u64> = (0..48).map(|i| 4096 + (i * i * 37_000) as u64).collect();
    let mut events = Vec::with_capacity(EVENTS);
    let mut time = 0u64;
    let mut live: Vec<BlockEvent> = Vec::new();
    while events.len() < EVENTS {
        for layer in 0..48u64 {
            let requested = sizes[layer as usize] - next() % 512;
            let block = BlockEvent {
                addr: 0x7f00_0000_0000 + layer * (64 << 20) + (next() % 4) * (8 << 20),
                size: requested.div_ceil(512) * 512,
                requested,
                stream: 0,
                device: 0,
                stack: stacks[(layer as usize * 6 + (next() % 6) as usize) % stacks.len()],
                thread: 0,
            };
            time += 300 + next() % 3000;
            events.push(Event {
                time_ns: time,
                data: EventData::Alloc(block),
            });
            live.push(block);
        }
        while let Some(block) = live.pop() {
            time += 300 + next() % 3000;
            events.push(Event {
                time_ns: time,
                data: EventData::FreeRequested(block),
            });
            events.push(Event {
                time_ns: time,
                data: EventData::FreeCompleted(block),
            });
        }
    }
    events.truncate(EVENTS);
    events
}

const SNAPSHOT_EVENTS: usize = 3_000_000;

/// A deterministic stream with the variety of a large model's snapshot,
/// which the training stream lacks: thousands of distinct addresses, sizes
/// and stacks in every chunk, blocks freed in no particular order, time
/// gaps of up to 50 µs, and an occasional segment.
fn snapshot_stream() -> Vec<Event> {
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let addrs: Vec<u64> = (0..6000)
        .map(|_| 0x7f00_0000_0000 + (next() % (1 << 22)) * 512)
        .collect();
    let sizes: Vec<(u64, u64)> = (0..3000)
        .map(|_| {
            let requested = 1 + next() % (64 << 20);
            (requested.div_ceil(512) * 512, requested)
        })
        .collect();
    let mut pick = |n: usize| (next() % n as u64) as usize;
    let mut events = Vec::with_capacity(SNAPSHOT_EVENTS);
    let mut live: Vec<BlockEvent> = Vec::new();
    let mut time = 0u64;
    while events.len() < SNAPSHOT_EVENTS {
        time += 100 + pick(50_000) as u64;
        let roll = pick(1000);
        if roll < 2 {
            let segment = SegmentEvent {
                addr: addrs[pick(addrs.len())],
                size: (2 + pick(20) as u64) << 20,
                stream: 0,
                device: 0,
                stack: StackId(pick(4000) as u32),
                thread: 0,
            };
            events.push(Event {
                time_ns: time,
                data: EventData::SegmentAlloc(segment),
            });
        } else if live.len() < 100 || (live.len() < 4000 && roll % 2 == 0) {
            let (size, requested) = sizes[pick(sizes.len())];
            let block = BlockEvent {
                addr: addrs[pick(addrs.len())],
                size,
                requested,
                stream: if roll % 64 == 1 { 7 } else { 0 },
                device: 0,
                stack: StackId(pick(4000) as u32),
                thread: 0,
            };
            live.push(block);
            events.push(Event {
                time_ns: time,
                data: EventData::Alloc(block),
            });
        } else {
            let block = live.swap_remove(pick(live.len()));
            for data in [
                EventData::FreeRequested(block),
                EventData::FreeCompleted(block),
            ] {
                events.push(Event {
                    time_ns: time,
                    data,
                });
            }
        }
    }
    events.truncate(SNAPSHOT_EVENTS);
    events
}

fn encode(events: &[Event]) -> Vec<u8> {
    let mut writer =
        TraceWriter::new(Vec::with_capacity(events.len() * 8), Header::default()).expect("header");
    let _ = training_stream(&mut writer); // same interned stacks as the stream
    writer.push_all(events.iter().copied()).expect("push");
    writer.finish().expect("finish")
}

fn bench_format(c: &mut Criterion) {
    let mut scratch = TraceWriter::new(Vec::new(), Header::default()).expect("header");
    let events = training_stream(&mut scratch);
    let bytes = encode(&events);
    println!(
        "trace: {} events, {} bytes, {:.2} bytes per event",
        events.len(),
        bytes.len(),
        bytes.len() as f64 / events.len() as f64
    );
    let chunks = {
        let mut reader = TraceReader::new(&bytes[..]).expect("reader");
        let mut chunks = Vec::new();
        while let Some(c) = reader.next_chunk().expect("chunk") {
            chunks.push(c);
        }
        chunks
    };

    let mut group = c.benchmark_group("format");
    group.sample_size(10);
    group.throughput(Throughput::Elements(events.len() as u64));
    group.bench_function("encode", |b| b.iter(|| black_box(encode(&events))));
    group.bench_function("decode_one_core", |b| {
        let mut out = Vec::with_capacity(70_000);
        b.iter(|| {
            let mut n = 0;
            for chunk in &chunks {
                out.clear();
                chunk.decode_into(&mut out).expect("decode");
                n += out.len();
            }
            black_box(n)
        })
    });
    group.bench_function("read_and_decode_all_cores", |b| {
        b.iter(|| {
            let mut reader = TraceReader::new(&bytes[..]).expect("reader");
            let mut n = 0usize;
            reader
                .for_each_batch(|events, _| n += events.len())
                .expect("read");
            black_box(n)
        })
    });
    group.finish();

    let events = snapshot_stream();
    let mut group = c.benchmark_group("format");
    group.sample_size(10);
    group.throughput(Throughput::Elements(events.len() as u64));
    group.bench_function("encode_many_addresses", |b| {
        b.iter(|| {
            let mut writer =
                TraceWriter::new(Vec::with_capacity(events.len() * 10), Header::default())
                    .expect("header");
            writer.push_all(events.iter().copied()).expect("push");
            black_box(writer.finish().expect("finish"))
        })
    });
    group.finish();
}

criterion_group!(benches, bench_format);
criterion_main!(benches);
