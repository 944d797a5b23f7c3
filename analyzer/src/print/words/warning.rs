//! The sentences of a pass's warnings (their `Display`: the binary's
//! messages, and the `message` of each warning in JSON).

use crate::analysis::warning::Warning;
use std::fmt;

/// A warning as one sentence.
impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::Truncated(t) => write!(f, "{t}"),
            Warning::Damaged(d) => write!(f, "{d}; the rest was read"),
            Warning::MoreDamage(n) => write!(f, "{n} more damaged places were skipped"),
            Warning::Unfinished => f.write_str(
                "the trace has no footer: the recording process did not close it (killed?)",
            ),
            Warning::EventsDropped(d) => write!(f, "{d}"),
            Warning::EmptyWindow => f.write_str("no event lies inside the window"),
            Warning::Memory(why) | Warning::Conversion(why) => f.write_str(why),
            Warning::Impossible(values) => write!(f, "{values}"),
            Warning::UnreadableSettings(why) => {
                write!(f, "the recorded allocator settings cannot be read ({why})")
            }
            Warning::OtherThreadPhases { shown, others } => {
                let threads: Vec<String> = others
                    .iter()
                    .map(|(t, n)| format!("thread {t} began {n}"))
                    .collect();
                write!(
                    f,
                    "the phases of other threads are hidden ({}; most likely the autograd engine's backward-pass phases); shown are thread {shown}'s",
                    threads.join(", ")
                )
            }
            Warning::TooManyDevices { devices, events } => write!(
                f,
                "{devices} devices past the first {} were left out ({events} events): no machine has that many, the device ids are likely bad",
                crate::bounds::MAX_DEVICES
            ),
        }
    }
}
