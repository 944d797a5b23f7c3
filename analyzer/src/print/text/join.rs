//! A join's outcome as text.

use crate::command::join::JoinResult;
use crate::units;

/// What a join read and wrote.
pub fn join(r: &JoinResult) -> String {
    let mut text = format!(
        "joined {} parts ({} events) into {}\n",
        r.parts.len(),
        units::count(r.events),
        r.output
    );
    if r.damaged_parts > 0 {
        text.push_str(&format!(
            "  {} part(s) could not be read whole (the last, cut off by the kill, as a rule): their readable events are joined\n",
            r.damaged_parts
        ));
    }
    if !r.left_out.is_empty() {
        text.push_str(&format!("  {} part(s) left out:\n", r.left_out.len()));
        for l in &r.left_out {
            text.push_str(&format!("    {}: {}\n", l.part, l.why));
        }
    }
    for part in &r.forged_preambles {
        text.push_str(&format!(
            "  {part}: its header claims more restating events than it begins with; only those it begins with were left out\n"
        ));
    }
    if r.reordered {
        text.push_str("  the parts were joined in the order they were recorded, not as given\n");
    }
    text
}
