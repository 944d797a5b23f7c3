//! The what-if section: the recorded settings simulated at a range of
//! capacities, a slider to pick one, and a table of them all.

use super::escape;
use crate::simulate::what_if::WhatIf;
use crate::units;
use std::fmt::Write as _;

/// The section's HTML.
pub fn section(w: &WhatIf) -> String {
    let settings = if w.alloc_conf.is_empty() {
        "PyTorch's default settings".to_string()
    } else {
        format!("<code>{}</code>", escape(&w.alloc_conf))
    };
    let mut html = format!(
        "<p>The trace's allocation requests replayed through PyTorch's caching allocator policy with {settings}{} on devices of several sizes, each keeping {} {} off the allocator, as <code>vramtrace simulate</code> does (<code>--capacity</code> runs one size; <code>--reserve</code> states your own reserve, here and there). The smallest device that runs without running out of memory has <b>{}</b>; on a device that never runs out, the allocator's reserved memory peaks at {}.</p>",
        if w.recorded_settings {
            " (as recorded)"
        } else {
            " (the recorded settings could not be read)"
        },
        units::bytes(w.reserve.bytes),
        escape(&w.reserve.covers),
        units::bytes(w.min_capacity_bytes),
        units::bytes(w.unlimited_peak_reserved_bytes)
    );
    let default = w
        .points
        .iter()
        .position(|p| p.capacity_bytes == w.min_capacity_bytes)
        .unwrap_or(0);
    let _ = write!(
        html,
        "<div class=\"vt-whatif\"><label>Capacity: <output id=\"vt-wi-out\"></output><input type=\"range\" id=\"vt-wi\" min=\"0\" max=\"{}\" value=\"{default}\" step=\"1\"></label><p id=\"vt-wi-text\"></p></div>",
        w.points.len().saturating_sub(1)
    );
    html.push_str("<table id=\"vt-wi-table\"><tr><th class=\"num\">device memory</th><th class=\"num\">reserved peak</th><th class=\"num\">allocated peak</th><th>outcome</th></tr>");
    for p in &w.points {
        let outcome = match &p.first_oom {
            Some(o) => format!(
                "<b style=\"color:var(--alert)\">out of memory</b> at <a href=\"#explorer\" data-event=\"{}\">{}</a>, asking for {} with {} reserved",
                o.event_index,
                units::duration_ns(o.time_ns),
                units::bytes(o.requested_bytes),
                units::bytes(o.reserved_bytes)
            ),
            None => "fits".to_string(),
        };
        let mut note = String::new();
        if p.capacity_bytes == w.min_capacity_bytes {
            note.push_str(" (smallest that fits)");
        }
        if Some(p.capacity_bytes) == w.device_bytes {
            note.push_str(" (the recorded device)");
        }
        let _ = write!(
            html,
            "<tr><td class=\"num\">{}{note}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{outcome}</td></tr>",
            units::bytes(p.capacity_bytes),
            units::bytes(p.peak_reserved_bytes),
            units::bytes(p.peak_allocated_bytes)
        );
    }
    html.push_str("</table><p class=\"muted\">Up to the first OOM, the peaks are those reached before it. A run that fits a device reserves no more than it would on a larger one, less the segments it could not keep cached.</p>");
    // The slider shows one row of the table at a time.
    html.push_str(
        "<script>(function(){const s=document.getElementById('vt-wi'),o=document.getElementById('vt-wi-out'),t=document.getElementById('vt-wi-text'),rows=[...document.querySelectorAll('#vt-wi-table tr')].slice(1);function show(){const c=rows[s.value].cells;o.textContent=c[0].textContent;t.innerHTML='Reserved peak <b>'+c[1].textContent+'</b>, allocated peak '+c[2].textContent+': '+c[3].innerHTML+'.';rows.forEach((r,i)=>r.classList.toggle('vt-on',i==s.value));}s.oninput=show;show();})();</script>",
    );
    html
}
