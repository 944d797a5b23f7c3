//! The JSON shape every command's result takes whatever the number of
//! devices ([`ByDevice`]: `{rank, warnings, devices, by_device}`, see
//! docs/json.md), and an input's warning in it (`{path, kind, message}`,
//! the message [worded](super::words::warning)).

use crate::command::{ByDevice, InputWarning, OnDevice};
use serde::ser::{Serialize, SerializeStruct, Serializer};

/// As JSON: the input's rank and warnings, each device's peaks, then each
/// device's result with its device first.
impl<T: Serialize> Serialize for ByDevice<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Each result with its device first, unless it names a `device` of
        // its own (the summary's index, the simulated GPU); its keys then
        // in the order the result declares them.
        struct Entry<'a, T>(&'a OnDevice<T>);
        #[derive(serde::Serialize)]
        struct WithDevice<'a, T> {
            device: u32,
            #[serde(flatten)]
            result: &'a T,
        }
        #[derive(serde::Serialize)]
        struct NotAnObject<'a> {
            device: u32,
            result: &'a serde_json::Value,
        }
        impl<T: Serialize> Serialize for Entry<'_, T> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::Error as _;
                let device = self.0.peaks.device;
                let result = &self.0.result;
                match serde_json::to_value(result).map_err(S::Error::custom)? {
                    serde_json::Value::Object(fields) if fields.contains_key("device") => {
                        result.serialize(serializer)
                    }
                    serde_json::Value::Object(_) => {
                        WithDevice { device, result }.serialize(serializer)
                    }
                    other => NotAnObject {
                        device,
                        result: &other,
                    }
                    .serialize(serializer),
                }
            }
        }
        let mut s = serializer.serialize_struct("ByDevice", 4)?;
        s.serialize_field("rank", &self.rank)?;
        s.serialize_field("warnings", &self.warnings)?;
        s.serialize_field("devices", &self.peaks())?;
        let entries: Vec<Entry<'_, T>> = self.devices.iter().map(Entry).collect();
        s.serialize_field("by_device", &entries)?;
        s.end()
    }
}

/// As JSON: `{"path", "kind", "message"}`, the kind a stable name to match
/// on and the message the sentence the CLI prints.
impl Serialize for InputWarning {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("InputWarning", 3)?;
        s.serialize_field("path", &self.path.display().to_string())?;
        s.serialize_field("kind", self.warning.kind())?;
        s.serialize_field("message", &self.warning.to_string())?;
        s.end()
    }
}
