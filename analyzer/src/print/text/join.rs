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
    text
}
