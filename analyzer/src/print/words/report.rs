//! The report's sentences that are not another command's: why it has no
//! what-if section (`what_if_left_out` in JSON).

use crate::command::report::{LeftOut, WHAT_IF_MAX_EVENTS};
use crate::units;
use serde::{Serialize, Serializer};

/// Why a report has no what-if section, in words.
pub fn left_out(left_out: &LeftOut) -> String {
    match left_out {
        LeftOut::Window => {
            "a report of a window has none: the simulation replays the whole run".to_string()
        }
        LeftOut::TooManyEvents => format!(
            "the trace has more than {} events, too many to simulate within a report (vramtrace simulate --min-capacity runs it on its own)",
            units::count(WHAT_IF_MAX_EVENTS)
        ),
    }
}

/// As JSON: the sentence.
impl Serialize for LeftOut {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&left_out(self))
    }
}
