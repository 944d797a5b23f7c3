//! Live memory by stack as a pprof profile (`profile.proto`, gzip-compressed):
//! what `go tool pprof`, speedscope and other pprof readers open. Two sample
//! values per stack: `inuse_space` (bytes) and `inuse_objects` (blocks),
//! as Go's heap profiles name them (a pair per device when there are
//! several: see [`profile`]); one label, the device.
//!
//! The messages are declared here from the format's published schema
//! (github.com/google/pprof, proto/profile.proto), with the fields this
//! export writes.

use crate::command::ByDevice;
use crate::command::flamegraph::FlameGraph;
use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;
use rustc_hash::FxHashMap;
use std::io::Write;

/// `perftools.profiles.Profile`.
#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    /// What each sample value is.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples: one per stack and device.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Locations, by id.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Functions, by id.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string, the first empty.
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// When the profile was taken (Unix ns).
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// Notes (string table indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The sample type shown first (a string table index of its type).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `perftools.profiles.ValueType`.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    /// Its name (string index).
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// Its unit (string index).
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `perftools.profiles.Sample`.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// The stack, innermost (leaf) first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels.
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// `perftools.profiles.Label`.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    /// Its key (string index).
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// A text value (string index).
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// A number value.
    #[prost(int64, tag = "3")]
    pub num: i64,
}

/// `perftools.profiles.Location`.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    /// Its id (from 1).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// The function and line.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
}

/// `perftools.profiles.Line`.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    /// The function's id.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// The line number (0: unknown).
    #[prost(int64, tag = "2")]
    pub line: i64,
}

/// `perftools.profiles.Function`.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    /// Its id (from 1).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its name (string index).
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// Its name as the system knows it (string index).
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// Its file (string index).
    #[prost(int64, tag = "4")]
    pub filename: i64,
}

/// A frame `function (file:line)` in its parts; a frame of another shape is
/// all function.
fn frame_parts(frame: &str) -> (&str, &str, i64) {
    let Some(inner) = frame.strip_suffix(')') else {
        return (frame, "", 0);
    };
    let Some(open) = inner.rfind(" (") else {
        return (frame, "", 0);
    };
    let (function, location) = (&inner[..open], &inner[open + 2..]);
    match location.rsplit_once(':') {
        Some((file, line)) if line.parse::<i64>().is_ok() => {
            (function, file, line.parse().unwrap_or(0))
        }
        _ => (function, location, 0),
    }
}

#[derive(Default)]
struct Builder {
    profile: Profile,
    strings: FxHashMap<String, i64>,
    functions: FxHashMap<(i64, i64), u64>,
    locations: FxHashMap<(u64, i64), u64>,
}

impl Builder {
    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.profile.string_table.len() as i64;
        self.profile.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn location(&mut self, frame: &str) -> u64 {
        let (function, file, line) = frame_parts(frame);
        let (name, filename) = (self.string(function), self.string(file));
        let next_function = self.profile.function.len() as u64 + 1;
        let function_id = *self
            .functions
            .entry((name, filename))
            .or_insert(next_function);
        if function_id == next_function {
            self.profile.function.push(Function {
                id: function_id,
                name,
                system_name: name,
                filename,
            });
        }
        let next_location = self.profile.location.len() as u64 + 1;
        let id = *self
            .locations
            .entry((function_id, line))
            .or_insert(next_location);
        if id == next_location {
            self.profile.location.push(Location {
                id,
                line: vec![Line { function_id, line }],
            });
        }
        id
    }
}

/// The profile of live memory by stack on every device (a `device` label on
/// each sample), taken at `start_unix_ns` plus the first device's moment.
///
/// A reader totals a sample type over every sample, so with several
/// devices each has its own pair of sample types (`inuse_space_device1`,
/// `inuse_objects_device1`), zero on the other devices' samples: one
/// `inuse_space` would add peaks of different devices, reached at different
/// times, into a total that never happened.
pub fn profile(graphs: &ByDevice<FlameGraph>, start_unix_ns: u64) -> Profile {
    let mut b = Builder::default();
    b.string("");
    let bytes = b.string("bytes");
    let count = b.string("count");
    let device_key = b.string("device");
    let several = graphs.devices.len() > 1;
    for d in &graphs.devices {
        let suffix = if several {
            format!("_device{}", d.peaks.device)
        } else {
            String::new()
        };
        let space = b.string(&format!("inuse_space{suffix}"));
        let objects = b.string(&format!("inuse_objects{suffix}"));
        b.profile.sample_type.extend([
            ValueType {
                r#type: space,
                unit: bytes,
            },
            ValueType {
                r#type: objects,
                unit: count,
            },
        ]);
    }
    b.profile.default_sample_type = b.profile.sample_type.first().map_or(0, |t| t.r#type);
    let note = b.string(if several {
        "GPU memory live at each device's own allocated peak, by the stack that \
         allocated it, one sample type per device (vramtrace; exact)"
    } else {
        "GPU memory live at the allocated peak, by the stack that allocated it (vramtrace; exact)"
    });
    b.profile.comment = vec![note];
    let values = b.profile.sample_type.len();
    for (i, d) in graphs.devices.iter().enumerate() {
        let graph = &d.result;
        if b.profile.time_nanos == 0 {
            b.profile.time_nanos = start_unix_ns.saturating_add(graph.at.time_ns) as i64;
        }
        for stack in &graph.stacks.stacks {
            let location_id = stack.frames.iter().rev().map(|f| b.location(f)).collect();
            let mut value = vec![0; values];
            value[2 * i] = stack.bytes as i64;
            value[2 * i + 1] = stack.blocks as i64;
            b.profile.sample.push(Sample {
                location_id,
                value,
                label: vec![Label {
                    key: device_key,
                    str: 0,
                    num: d.peaks.device as i64,
                }],
            });
        }
    }
    b.profile
}

/// The profile as a file: the message, gzip-compressed (what pprof writes).
pub fn encode(profile: &Profile) -> std::io::Result<Vec<u8>> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&profile.encode_to_vec())?;
    gz.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_into_function_file_and_line() {
        assert_eq!(
            frame_parts("forward (model.py:12)"),
            ("forward", "model.py", 12)
        );
        assert_eq!(
            frame_parts("<no stack captured>"),
            ("<no stack captured>", "", 0)
        );
        assert_eq!(
            frame_parts("Backward0 (autograd)"),
            ("Backward0", "autograd", 0)
        );
    }
}
