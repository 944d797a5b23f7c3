//! Prints a trace's events one per line, tab-separated, for checks that
//! need the events themselves in order (the GPU checks, which run where
//! there is no Rust): index, time, kind, device, then the kind's fields as
//! `key=value`; block, segment and OOM events add their stack's frames,
//! innermost first, as `stack=function@file:line|...`.
//!
//! ```sh
//! cargo run --release -p vramtrace-recorder --example dump_events -- run.vtrace
//! ```

use vramtrace_recorder::format::{EventData, EventSource, StackId, SymbolTable, TraceReader};

fn stack(symbols: &SymbolTable, id: StackId) -> String {
    symbols
        .stack(id)
        .iter()
        .map(|&f| symbols.describe_frame(f))
        .collect::<Vec<_>>()
        .join("|")
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: dump_events TRACE.vtrace")?;
    let mut reader = TraceReader::open(&path)?;
    let mut index = 0u64;
    let mut lines = Vec::new();
    reader.for_each_batch(|events, symbols| {
        for e in events {
            let fields = match &e.data {
                EventData::Alloc(b) | EventData::FreeRequested(b) | EventData::FreeCompleted(b) => {
                    format!(
                        "device={}\taddr={}\tsize={}\trequested={}\tthread={}\tstack={}",
                        b.device,
                        b.addr,
                        b.size,
                        b.requested,
                        b.thread,
                        stack(symbols, b.stack)
                    )
                }
                EventData::SegmentAlloc(s)
                | EventData::SegmentFree(s)
                | EventData::SegmentMap(s)
                | EventData::SegmentUnmap(s) => format!(
                    "device={}\taddr={}\tsize={}\tthread={}",
                    s.device, s.addr, s.size, s.thread
                ),
                EventData::Oom(o) => format!(
                    "device={}\trequested={}\tfree={}\tthread={}\tstack={}",
                    o.device,
                    o.requested,
                    o.free_bytes,
                    o.thread,
                    stack(symbols, o.stack)
                ),
                EventData::Limit(l) => format!(
                    "device={}\tlimit={}\ttotal={}\tthread={}",
                    l.device, l.limit_bytes, l.total_bytes, l.thread
                ),
                EventData::DeviceMemory(m) => format!(
                    "device={}\tfree={}\ttotal={}\tthread={}",
                    m.device, m.free_bytes, m.total_bytes, m.thread
                ),
                EventData::PhaseBegin { name, thread } | EventData::PhaseEnd { name, thread } => {
                    format!("name={}\tthread={thread}", symbols.string_or_unknown(*name))
                }
                _ => String::new(),
            };
            lines.push(format!(
                "{index}\t{}\t{}\t{fields}",
                e.time_ns,
                e.kind().name()
            ));
            index += 1;
        }
    })?;
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
