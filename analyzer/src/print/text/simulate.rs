//! The what-if simulation as text.

use crate::command::simulate::{OomDescription, PolicyResult, SimulateResult};
use crate::print::labels::site_label;
use crate::print::table::{Align, Table};
use crate::units;

/// The simulation of every policy as text: the recorded run, the fidelity of
/// its settings, a table of policies, and where each ran out of memory.
pub fn simulate(r: &SimulateResult) -> String {
    let mut text = format!(
        "trace      {}: {} events, {} requests\n",
        r.path,
        units::count(r.events),
        units::count(r.requests as u64)
    );
    text.push_str(&format!(
        "recorded   peak reserved {}, peak allocated {}, {}\n",
        units::bytes(r.recorded.peak_reserved_bytes),
        units::bytes(r.recorded.peak_allocated_bytes),
        units::counted(r.recorded.ooms, "OOM", "OOMs")
    ));
    text.push_str(&fidelity(r));
    text.push_str(&device(r));
    text.push_str(&format!(
        "\nverdict    {}\nbasis      {}\n\n",
        crate::print::words::simulate::verdict(&r.verdict),
        crate::print::words::simulate::basis(&r.verdict)
    ));
    text.push_str(&policy_table(r));
    for p in &r.policies {
        if let Some(o) = &p.oom {
            text.push_str(&policy_oom(r, p, o));
        }
    }
    if let Some(f) = &r.fixes {
        text.push('\n');
        text.push_str(&super::fixes(f));
    }
    if !r.notes.is_empty() {
        text.push('\n');
        for n in &r.notes {
            let n = crate::print::words::simulate::note(n);
            text.push_str(&format!("note: {n}\n"));
        }
    }
    text
}

/// Whether the recorded settings reproduce the run, and the caveats.
fn fidelity(r: &SimulateResult) -> String {
    let mut text = String::new();
    if let Some(f) = &r.fidelity {
        let on = f.capacity_bytes.map_or_else(
            || "a device without limit".into(),
            |c| match &r.limit {
                Some(l) if l.bytes == c => format!("the {}", l.noun()),
                _ => format!("the recorded {}", units::bytes(c)),
            },
        );
        if f.exact {
            text.push_str(&format!(
                "fidelity   exact: the recorded settings on {on} reproduce all {} device actions and the peak reserved {}\n",
                f.recorded_segment_actions,
                units::bytes(f.recorded_peak_reserved_bytes)
            ));
        } else {
            text.push_str(&format!(
                "fidelity   not exact: with the recorded settings on {on}, {} device actions against {} recorded (first difference at action {}), peak reserved {} against {}\n",
                f.simulated_segment_actions,
                f.recorded_segment_actions,
                f.first_difference.map_or_else(|| "none".into(), |i| i.to_string()),
                units::bytes(f.simulated_peak_reserved_bytes),
                units::bytes(f.recorded_peak_reserved_bytes)
            ));
        }
        for c in &f.caveats {
            text.push_str(&format!("           {c}\n"));
        }
    }
    text
}

/// The device simulated: a named one less its reserve, the recorded cap, or none.
fn device(r: &SimulateResult) -> String {
    let mut text = String::new();
    match &r.device {
        Some(d) => text.push_str(&format!(
            "device     {}, less {} reserved {} = {} for the allocator\n",
            if d.source.is_some() {
                format!("{}: {}", d.name, units::capacity(d.total_bytes))
            } else {
                d.name.clone()
            },
            units::capacity(r.reserve.bytes),
            r.reserve.covers,
            units::capacity(r.capacity_bytes.unwrap_or(0))
        )),
        None => match (&r.limit, r.capacity_bytes) {
            (Some(limit), Some(capacity)) if limit.is_cap() => text.push_str(&format!(
                "device     the {}: {} for the allocator{}, no reserve taken off (the cap bounds reserved memory only)\n",
                limit.noun(),
                units::capacity(capacity),
                if limit.low_bytes.is_some() {
                    " (the cap's low end: the most the run reserved, which reproduces the run)"
                } else {
                    ""
                }
            )),
            _ => text.push_str(&format!(
                "device     without limit; {} reserved {}\n",
                units::capacity(r.reserve.bytes),
                r.reserve.covers
            )),
        },
    }
    text
}

/// One row per policy, and what its columns mean.
fn policy_table(r: &SimulateResult) -> String {
    let mut text = String::new();
    let mut t = Table::new(&[
        ("policy", Align::Left),
        ("peak reserved", Align::Right),
        ("peak allocated", Align::Right),
        ("cached at peak", Align::Right),
        ("retries", Align::Right),
        ("flushes", Align::Right),
        ("OOMs", Align::Right),
        ("min capacity", Align::Right),
    ]);
    for p in &r.policies {
        let s = &p.scenario.result;
        t.row([
            p.scenario.policy.clone(),
            units::bytes(s.peak_reserved_bytes),
            units::bytes(s.peak_allocated_bytes),
            format!(
                "{} ({})",
                units::bytes(s.cached_at_peak_bytes),
                units::percent(s.fragmentation)
            ),
            units::count(s.alloc_retries),
            units::count(s.cache_flushes),
            units::count(s.ooms),
            p.min_capacity_bytes
                .map_or_else(|| "-".into(), units::capacity),
        ]);
    }
    text.push_str(&t.render(0));
    text.push_str(
        "\ncached at peak: reserved memory holding no allocation at the peak of reserved memory\n",
    );
    // Under a cap the verdict's one figure is the cap it needs: the column
    // is device memory, so it says it is that cap and the reserve.
    match (&r.limit, r.verdict.needs_bytes) {
        (Some(limit), Some(cap)) if limit.is_cap() && r.device.is_none() => {
            text.push_str(&format!(
                "min capacity: the smallest device memory without an OOM: the cap it needs ({}) and the {} reserve\n",
                units::capacity(cap),
                units::capacity(r.reserve.bytes)
            ))
        }
        _ => text.push_str(
            "min capacity: the smallest device memory without an OOM, the reserve included\n",
        ),
    }
    text
}

/// Where one policy ran out of memory, and what was allocated then.
fn policy_oom(r: &SimulateResult, p: &PolicyResult, o: &OomDescription) -> String {
    let mut text = String::new();
    text.push_str(&format!(
        "\n{}: out of memory at event {} ({}){}, site {}: requested {} with {} free {} after flushing the cache and {} cached free (largest block {}); this request alone was {} short{}\n",
        p.scenario.policy,
        units::count(o.event_index),
        units::duration_ns(o.time_ns),
        if o.phase.is_empty() { String::new() } else { format!(" in {}", o.phase) },
        site_label(&o.site),
        units::bytes(o.requested_bytes),
        units::bytes(o.free_bytes),
        match (&r.device, r.limit) {
            (None, Some(l)) if l.is_cap() => "under the cap",
            // The device without limit is a simulated 1 PiB one.
            (None, None) => "on a device without limit (simulated as 1 PiB)",
            _ => "on the device",
        },
        units::bytes(o.cached_free_bytes),
        units::bytes(o.largest_free_block),
        units::bytes(o.shortfall_bytes),
        if o.recorded { " (the recorded run ran out of memory here too)" } else { "" }
    ));
    let mix: Vec<String> = (o.categories.0.iter())
        .filter(|c| c.bytes > 0)
        .map(|c| format!("{} {}", c.category.label(), units::bytes(c.bytes)))
        .collect();
    if !mix.is_empty() {
        text.push_str(&format!("  allocated then: {}\n", mix.join(", ")));
    }
    if p.scenario.result.ooms > 1 {
        text.push_str(&format!(
            "  {} OOMs in all; the run was replayed on as recorded, skipping the frees of failed allocations\n",
            p.scenario.result.ooms
        ));
    }
    text
}
