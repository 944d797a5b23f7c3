//! Writes a synthetic training-loop trace, for trying and timing the
//! analyzer: `cargo run --release --example gen_training -- OUT EVENTS [LEAK_BYTES]`.
//!
//! Each iteration `iter{i}` (inside `epoch{e}`) allocates activations from a
//! few dozen torch-like stacks (C++ allocator frames below Python frames),
//! frees them in reverse order, keeps gradients until the next iteration,
//! and creates optimizer state in the first one. With `LEAK_BYTES`, every
//! iteration also keeps a tensor of that size from its own stack.

use std::io::BufWriter;
use vramtrace_format::{BlockEvent, Event, EventData, Header, SegmentEvent, StackId, TraceWriter};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: gen_training OUT EVENTS [LEAK_BYTES]");
        std::process::exit(2);
    }
    let events: u64 = args[2].parse().expect("EVENTS is a number");
    let leak: u64 = args
        .get(3)
        .map_or(0, |s| s.parse().expect("LEAK_BYTES is a number"));
    let file = std::fs::File::create(&args[1]).expect("cannot create OUT");
    let mut w = TraceWriter::new(BufWriter::with_capacity(1 << 20, file), Header::default())
        .expect("header");

    let cpp = [
        ("torch::unwind::unwind()", ""),
        ("torch::CapturedTraceback::gather(bool, bool, bool)", ""),
        (
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc",
            "",
        ),
        (
            "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc",
            "",
        ),
        ("at::native::empty_cuda", ""),
        ("at::_ops::empty_memory_format::call", ""),
        ("??", "??"),
        ("_PyEval_EvalFrameDefault", ""),
    ];
    let stack = |w: &mut TraceWriter<_>, func: &str, line: u32| -> StackId {
        let mut frames: Vec<(&str, &str, u32)> =
            cpp.iter().map(|&(f, file)| (f, file, 0)).collect();
        frames.push((
            "forward",
            "/usr/lib/python3.12/site-packages/torch/nn/modules/linear.py",
            125,
        ));
        frames.push((func, "model.py", line));
        frames.push(("train_step", "train.py", 20));
        frames.push(("main", "train.py", 90));
        w.intern_symbol_stack(frames)
    };
    let acts: Vec<StackId> = (0..40).map(|i| stack(&mut w, "forward", 40 + i)).collect();
    let grads: Vec<StackId> = (0..10)
        .map(|i| stack(&mut w, "backward", 200 + i))
        .collect();
    let optim = stack(&mut w, "step", 300);
    let leak_stack = stack(&mut w, "log_metrics", 57);
    let epoch_names: Vec<_> = (0..100)
        .map(|e| w.intern_string(&format!("epoch{e}")))
        .collect();

    let mut t = 0u64;
    let mut push = |w: &mut TraceWriter<_>, data| {
        t += 1_000;
        w.push(Event { time_ns: t, data }).expect("write");
    };
    let block = |addr, size, stack| BlockEvent {
        addr,
        size,
        requested: size - size / 64,
        stack,
        ..Default::default()
    };
    const SEG: u64 = 1 << 40;
    push(
        &mut w,
        EventData::SegmentAlloc(SegmentEvent {
            addr: SEG,
            size: 64 << 30,
            ..Default::default()
        }),
    );
    let act_base = SEG + (1 << 30);
    let grad_base = SEG + (8 << 30);
    let optim_base = SEG + (16 << 30);
    let mut leak_addr = SEG + (24 << 30);
    let iters_per_epoch = 1000;
    let mut i = 0u64;
    while w.counts().total() < events {
        let epoch = epoch_names[((i / iters_per_epoch) % 100) as usize];
        if i.is_multiple_of(iters_per_epoch) {
            push(
                &mut w,
                EventData::PhaseBegin {
                    name: epoch,
                    thread: 0,
                },
            );
        }
        let iter_name = w.intern_string(&format!("iter{}", i % iters_per_epoch));
        push(
            &mut w,
            EventData::PhaseBegin {
                name: iter_name,
                thread: 0,
            },
        );
        for (k, &s) in acts.iter().enumerate() {
            let size = (1 << 20) * (1 + k as u64 % 7);
            push(
                &mut w,
                EventData::Alloc(block(act_base + k as u64 * (8 << 20), size, s)),
            );
        }
        for (k, &s) in acts.iter().enumerate().rev() {
            let size = (1 << 20) * (1 + k as u64 % 7);
            let b = block(act_base + k as u64 * (8 << 20), size, s);
            push(&mut w, EventData::FreeRequested(b));
            push(&mut w, EventData::FreeCompleted(b));
        }
        // Gradients alternate between two address sets, freed an iteration later.
        let half = (i % 2) * (1 << 30);
        for (k, &s) in grads.iter().enumerate() {
            let b = block(grad_base + half + k as u64 * (16 << 20), 4 << 20, s);
            if i > 0 {
                let old = block(
                    grad_base + ((i + 1) % 2) * (1 << 30) + k as u64 * (16 << 20),
                    4 << 20,
                    s,
                );
                push(&mut w, EventData::FreeRequested(old));
                push(&mut w, EventData::FreeCompleted(old));
            }
            push(&mut w, EventData::Alloc(b));
        }
        if i == 0 {
            for k in 0..10 {
                push(
                    &mut w,
                    EventData::Alloc(block(optim_base + k * (8 << 20), 8 << 20, optim)),
                );
            }
        }
        if leak > 0 {
            push(
                &mut w,
                EventData::Alloc(BlockEvent {
                    addr: leak_addr,
                    size: leak,
                    requested: leak,
                    stack: leak_stack,
                    ..Default::default()
                }),
            );
            leak_addr += leak.next_multiple_of(512);
        }
        push(
            &mut w,
            EventData::PhaseEnd {
                name: iter_name,
                thread: 0,
            },
        );
        i += 1;
        if i.is_multiple_of(iters_per_epoch) {
            push(
                &mut w,
                EventData::PhaseEnd {
                    name: epoch,
                    thread: 0,
                },
            );
        }
    }
    let n = w.counts().total();
    w.finish().expect("finish");
    eprintln!("wrote {n} events, {i} iterations");
}
