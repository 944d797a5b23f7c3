//! Reads a trace and prints what any program built on this crate alone can
//! learn from it: the header, events by kind, the peak of allocated bytes,
//! and the stack that allocated most at that peak.
//!
//! ```sh
//! cargo run -p vramtrace-format --example read_trace -- fixtures/leak.vtrace
//! ```

use std::collections::HashMap;
use vramtrace_format::{EventData, EventSource, KindCounts, StackId, TraceReader};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: read_trace TRACE.vtrace")?;
    let mut reader = TraceReader::open(&path)?;
    let header = reader.header();
    println!(
        "{path}: written by {} {}",
        header.producer, header.producer_version
    );
    for device in &header.devices {
        println!("device {}: {}", device.index, device.name);
    }

    // Live blocks by address, and the allocated bytes they add up to.
    let mut live: HashMap<u64, (u64, StackId)> = HashMap::new();
    let (mut allocated, mut peak, mut peak_time) = (0u64, 0u64, 0u64);
    let mut at_peak: HashMap<StackId, u64> = HashMap::new();
    let mut counts = KindCounts::default();
    reader.for_each_batch(|events, _symbols| {
        for event in events {
            counts.add(event.kind());
            match event.data {
                EventData::Alloc(b) => {
                    live.insert(b.addr, (b.size, b.stack));
                    allocated += b.size;
                    if allocated > peak {
                        (peak, peak_time) = (allocated, event.time_ns);
                        at_peak.clear();
                        for &(size, stack) in live.values() {
                            *at_peak.entry(stack).or_default() += size;
                        }
                    }
                }
                EventData::FreeRequested(b) => {
                    if let Some((size, _)) = live.remove(&b.addr) {
                        allocated -= size;
                    }
                }
                _ => {}
            }
        }
    })?;
    if let Some(cut) = reader.truncation() {
        println!("warning: {cut}");
    }
    for (kind, n) in counts.nonzero() {
        println!("{:>14} {}", n, kind.name());
    }
    println!("peak allocated: {peak} bytes at {peak_time} ns");
    if let Some((&stack, bytes)) = at_peak.iter().max_by_key(|(_, b)| **b) {
        let symbols = reader.symbols();
        println!("largest at the peak: {bytes} bytes from");
        for &frame in symbols.stack(stack) {
            println!("    {}", symbols.describe_frame(frame));
        }
    }
    Ok(())
}
