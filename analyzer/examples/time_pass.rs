//! Times the parts of a summary pass on one thread, to see where the time
//! goes: `cargo run --release --example time_pass -- TRACE`.
//!
//! Prints the time to decode every chunk, and to decode and replay with the
//! summary analysis; replay alone is their difference. Times are the CPU
//! time of the thread (from `/proc/thread-self/schedstat` when readable),
//! so a busy machine does not inflate them as much as wall-clock time.

use std::time::Instant;

/// Seconds this thread has run on a CPU (wall-clock time when unknown).
fn cpu_seconds(since: Instant) -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or_else(|| since.elapsed().as_secs_f64(), |ns| ns / 1e9)
}
use vramtrace::analysis::summary::Summary;
use vramtrace::analysis::window::Window;
use vramtrace::analysis::{Analysis, Step};
use vramtrace::replay::ReplayState;
use vramtrace_format::{Event, TraceReader};

fn main() {
    let path = std::env::args().nth(1).expect("usage: time_pass TRACE");
    let mut reader = TraceReader::open(&path).expect("a trace");
    let mut buf: Vec<Event> = Vec::new();
    let clock = Instant::now();
    let started = cpu_seconds(clock);
    let mut events = 0u64;
    while let Some(chunk) = reader.next_chunk().expect("readable") {
        buf.clear();
        chunk.decode_into(&mut buf).expect("decodable");
        events += buf.len() as u64;
    }
    let decode = cpu_seconds(clock) - started;

    let mut reader = TraceReader::open(&path).expect("a trace");
    let mut state = ReplayState::default();
    let mut summary = Summary::new(10);
    let window = Window::ALL;
    let started = cpu_seconds(clock);
    let mut index = 0u64;
    summary.begin(&state, reader.symbols());
    while let Some(chunk) = reader.next_chunk().expect("readable") {
        buf.clear();
        chunk.decode_into(&mut buf).expect("decodable");
        for event in &buf {
            if window.is_after(index, event.time_ns) {
                break;
            }
            let applied = state.apply(index, event, reader.symbols());
            let step = Step {
                index,
                event,
                applied: &applied,
                symbols: reader.symbols(),
            };
            summary
                .event(&step, &state)
                .expect("the summary takes any event");
            index += 1;
        }
    }
    summary.finish(&state, reader.symbols()).expect("finished");
    let both = cpu_seconds(clock) - started;
    let replay = both - decode;
    let m = events as f64 / 1e6;
    println!("{events} events");
    println!(
        "decode          {decode:.2} s  {:.1} M events/s",
        m / decode
    );
    println!("decode + replay {both:.2} s  {:.1} M events/s", m / both);
    println!(
        "replay alone    {replay:.2} s  {:.1} M events/s",
        m / replay
    );
    println!(
        "two cores, decoding overlapped with replay: at best {:.1} M events/s",
        m / replay.max(both / 2.0)
    );
}
