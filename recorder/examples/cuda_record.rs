//! Records a small allocation pattern on a real GPU with [`CudaDevice`]:
//!
//! ```text
//! cargo run --release -p vramtrace-recorder --features cuda --example cuda_record -- out.vtrace [ALLOC_CONF]
//! ```
//!
//! Allocates and frees blocks of many sizes in two phases on two streams,
//! empties the cache, tries an allocation larger than the card (recorded as
//! an `oom` event), and finishes the trace. Exits 1 with a message when there
//! is no GPU.

use std::process::ExitCode;
use vramtrace_recorder::allocator::{AllocError, AllocatorConfig, CachingAllocator};
use vramtrace_recorder::device::{CudaDevice, DeviceMemory};
use vramtrace_recorder::{Recorder, RecorderOptions, Trace};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let out = args.next().unwrap_or_else(|| "cuda_record.vtrace".into());
    let conf = args.next().unwrap_or_default();
    let device = CudaDevice::new(0)?;
    println!(
        "device 0: {}, {:.1} GiB, {:.1} GiB free, granularity {} KiB",
        device.name(),
        device.total_memory() as f64 / (1u64 << 30) as f64,
        device.free_memory() as f64 / (1u64 << 30) as f64,
        device.granularity() >> 10
    );
    let total = device.total_memory();
    let allocator = CachingAllocator::new(device, AllocatorConfig::parse(&conf)?);
    let rec = Recorder::create(&out, allocator, RecorderOptions::default())?;

    let mut live = Vec::new();
    for (phase, stream) in [("small", 0u64), ("large", 7u64)] {
        let _phase = rec.phase(phase);
        for i in 0..256u64 {
            let size = if phase == "small" {
                (i % 64 + 1) * 4096
            } else {
                (i % 16 + 1) << 21
            };
            live.push(rec.malloc(size, stream)?.addr);
            if i % 4 == 3 {
                for addr in live.drain(..2) {
                    rec.free(addr)?;
                }
            }
        }
        rec.annotate("live_blocks", &live.len().to_string());
    }
    let stats = rec.stats();
    println!(
        "peak allocated {:.1} MiB, peak reserved {:.1} MiB",
        stats.allocated_bytes.all.peak as f64 / (1u64 << 20) as f64,
        stats.reserved_bytes.all.peak as f64 / (1u64 << 20) as f64
    );
    for addr in live {
        rec.free(addr)?;
    }
    rec.empty_cache();
    match rec.malloc(total * 2, 0) {
        Err(AllocError::OutOfMemory { requested, .. }) => {
            println!("an allocation of {requested} bytes failed as expected")
        }
        other => return Err(format!("expected an OOM, got {other:?}").into()),
    }
    let summary = rec.finish()?;
    let released = rec.with_allocator(|a| a.stats().reserved_bytes.all.current);
    println!(
        "wrote {out}: {} events, {} bytes; reserved at the end {released}",
        summary.trace.events, summary.trace.bytes
    );
    Ok(())
}
