//! A synthetic run as text.

use crate::command::synth::SynthResult;
use crate::units;

/// What a synthetic run wrote, as a paragraph.
pub fn synth(r: &SynthResult) -> String {
    let config = &r.config;
    let range = |(lo, hi): (u64, u64)| {
        if lo == hi {
            lo.to_string()
        } else {
            format!("{lo} to {hi}")
        }
    };
    let mut text = format!(
        "Wrote {}: {} iterations of a {}-layer synthetic transformer (hidden {}, batch {}, \
         sequence length {}, {} stream{}, seed {}){} on {} with {}: {} events \
         in {} ({:.1} bytes per event), spanning {} of simulated time. Parameters take {}, \
         optimizer state {} (from the first step{}); peak allocated {}, peak reserved {}; \
         at the end {} allocated and {} reserved.",
        r.path,
        units::count(r.iterations),
        config.layers,
        config.hidden,
        range(config.batch),
        range(config.seq_len),
        config.streams,
        if config.streams == 1 { "" } else { "s" },
        config.seed,
        config
            .rank
            .map_or(String::new(), |rank| format!(" as rank {rank}")),
        if config.devices == 1 {
            "a simulated device".to_string()
        } else {
            format!(
                "{} simulated devices (figures of the busiest)",
                config.devices
            )
        },
        config
            .capacity
            .map_or("unlimited memory".to_string(), units::bytes),
        units::count(r.events),
        units::bytes(r.bytes),
        r.bytes as f64 / r.events.max(1) as f64,
        units::duration_ns(r.duration_ns),
        units::bytes(r.parameter_bytes),
        units::bytes(r.optimizer_state_bytes),
        // Requested bytes; `summary` counts blocks, which the allocator
        // rounds up (or hands out whole): both figures, so they can be told
        // apart rather than seem to disagree.
        if (r.parameter_block_bytes, r.optimizer_state_block_bytes)
            == (r.parameter_bytes, r.optimizer_state_bytes)
        {
            String::new()
        } else {
            format!(
                "; both as requested, {} and {} in the allocator's blocks, as summary counts them",
                units::bytes(r.parameter_block_bytes),
                units::bytes(r.optimizer_state_block_bytes)
            )
        },
        units::bytes(r.peak_allocated),
        units::bytes(r.peak_reserved),
        units::bytes(r.final_allocated),
        units::bytes(r.final_reserved),
    );
    if r.leaked_bytes > 0 {
        text.push_str(&format!(
            " A leak at log_metrics (train.py:120) retained {} ({} per iteration).",
            units::bytes(r.leaked_bytes),
            units::bytes(config.leak_bytes)
        ));
    }
    if let Some(k) = config.empty_cache_every {
        text.push_str(&format!(" empty_cache() ran every {k} iterations."));
    }
    if let Some(oom) = r.oom {
        text.push_str(&format!(
            " The device ran out of memory in iteration {} (a request of {} with {} free); \
             the run ended there.",
            oom.iteration,
            units::bytes(oom.requested),
            units::bytes(oom.free_bytes)
        ));
    }
    text.push_str(&format!(
        " Generated in {:.2} s ({} events/s).\n",
        r.elapsed_s,
        units::count(r.events_per_second as u64)
    ));
    text
}
