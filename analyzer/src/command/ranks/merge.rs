//! Rank tables merged from JSON: the per-rank work of a run of thousands
//! of ranks can be spread over machines (`vramtrace summary --json TRACE` on
//! each), and its results, or tables of groups of ranks, merged in one place.

use super::{RankTable, RankTrace, rank_table};
use crate::analysis::peaks::DevicePeaks;
use crate::analysis::summary::Peak;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Why JSON could not be merged into a rank table.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {why}")]
pub struct MergeError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub why: String,
}

/// Merges the JSON that `summary --json` printed, of single traces (one
/// device or several) or of rank sets (their tables), into one rank table:
/// so the per-rank work of a run of thousands of ranks can be spread over
/// machines, and its results, or tables of groups of ranks, merged in one
/// place. A trace's rank is its `rank` (from its header), else the number
/// in its file name, else its order; a table's rows keep theirs.
pub fn merge(documents: &[(PathBuf, String)]) -> Result<RankTable, MergeError> {
    let paths: Vec<PathBuf> = documents.iter().map(|(path, _)| path.clone()).collect();
    let mut texts = documents.iter().map(|(_, text)| text.as_bytes());
    merge_from(&paths, |_| Ok(texts.next().unwrap_or_default()))
}

/// [`merge`] over files, each opened in turn by `open` (wrap a file in a
/// `BufReader`) and read as a stream: a JSON array is taken one element at
/// a time, so memory holds one summary and the table being made, never the
/// whole document.
pub fn merge_from<R: std::io::Read>(
    paths: &[PathBuf],
    mut open: impl FnMut(&Path) -> std::io::Result<R>,
) -> Result<RankTable, MergeError> {
    let mut parts = Parts::default();
    for path in paths {
        let error = |why: String| MergeError {
            path: path.clone(),
            why,
        };
        let read = open(path).map_err(|e| error(format!("cannot open: {e}")))?;
        let mut why = None;
        let mut de = serde_json::Deserializer::from_reader(read);
        let result = serde::de::DeserializeSeed::deserialize(
            Document {
                parts: &mut parts,
                why: &mut why,
            },
            &mut de,
        )
        .and_then(|()| de.end());
        if let Err(e) = result {
            // What the visitor found wrong with a well-formed value, else the
            // JSON's own error (with its line and column).
            return Err(error(why.unwrap_or_else(|| {
                if e.is_io() {
                    format!("cannot read: {e}")
                } else {
                    format!("not JSON: {e}")
                }
            })));
        }
    }
    let Parts { traces, tables } = parts;
    let mut table = rank_table(&traces);
    let mut rows = std::mem::take(&mut table.rows);
    let mut source = table.ranks_from;
    for t in tables {
        if rows.is_empty() {
            source = t.ranks_from;
        }
        rows.extend(t.rows);
    }
    Ok(RankTable::of(source, rows))
}

/// What the documents of a merge hold so far.
#[derive(Default)]
struct Parts {
    traces: Vec<RankTrace>,
    tables: Vec<RankTable>,
}

impl Parts {
    /// Takes in one summary or rank table.
    fn add(&mut self, value: serde_json::Value) -> Result<(), String> {
        if value.get("rows").is_some() {
            let table: RankTable =
                serde_json::from_value(value).map_err(|e| format!("not a rank table: {e}"))?;
            self.tables.push(table);
        } else {
            self.traces.push(trace_of_summary(&value).ok_or_else(|| {
                "neither a summary (vramtrace summary --json) nor a rank table".to_string()
            })?);
        }
        Ok(())
    }
}

/// One JSON document of a merge, as it streams by: an array's elements are
/// built and taken in one at a time, any other value whole.
struct Document<'a> {
    parts: &'a mut Parts,
    // Why a well-formed value was refused (the deserializer's error then only
    // carries where).
    why: &'a mut Option<String>,
}

impl Document<'_> {
    fn add<E: serde::de::Error>(&mut self, value: serde_json::Value) -> Result<(), E> {
        self.parts.add(value).map_err(|why| {
            let e = E::custom(&why);
            *self.why = Some(why);
            e
        })
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Document<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Document<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a summary, a rank table, or an array of them")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        while let Some(value) = seq.next_element::<serde_json::Value>()? {
            self.add(value)?;
        }
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(mut self, map: A) -> Result<(), A::Error> {
        let value =
            serde_json::Value::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
        self.add(value)
    }

    // Anything else (a number, a string, null) is one value that is neither.
    fn visit_bool<E: serde::de::Error>(mut self, v: bool) -> Result<(), E> {
        self.add(v.into())
    }

    fn visit_i64<E: serde::de::Error>(mut self, v: i64) -> Result<(), E> {
        self.add(v.into())
    }

    fn visit_u64<E: serde::de::Error>(mut self, v: u64) -> Result<(), E> {
        self.add(v.into())
    }

    fn visit_f64<E: serde::de::Error>(mut self, v: f64) -> Result<(), E> {
        self.add(v.into())
    }

    fn visit_str<E: serde::de::Error>(mut self, v: &str) -> Result<(), E> {
        self.add(v.into())
    }

    fn visit_unit<E: serde::de::Error>(mut self) -> Result<(), E> {
        self.add(serde_json::Value::Null)
    }
}

/// A trace's peaks from its `summary --json`: `{path, rank?, peak_allocated,
/// peak_reserved}` for one device, `{devices: [...], by_device: [{path,
/// rank?}, ...]}` for several.
fn trace_of_summary(value: &serde_json::Value) -> Option<RankTrace> {
    let peak = |v: &serde_json::Value, key: &str| -> Option<Peak> {
        serde_json::from_value(v.get(key)?.clone()).ok()
    };
    let rank = |v: &serde_json::Value| {
        v.get("rank")
            .and_then(serde_json::Value::as_u64)
            .and_then(|r| u32::try_from(r).ok())
    };
    let path = |v: &serde_json::Value| v.get("path")?.as_str().map(PathBuf::from);
    if let Some(devices) = value.get("devices") {
        let devices: Vec<DevicePeaks> = serde_json::from_value(devices.clone()).ok()?;
        let first = value.get("by_device")?.get(0)?;
        return Some(RankTrace {
            path: path(first)?,
            header_rank: rank(first),
            devices,
            warnings: Vec::new(),
        });
    }
    Some(RankTrace {
        path: path(value)?,
        header_rank: rank(value),
        devices: vec![DevicePeaks {
            device: value
                .get("device")
                .and_then(serde_json::Value::as_u64)
                .and_then(|d| u32::try_from(d).ok())
                .unwrap_or(0),
            peak_allocated: peak(value, "peak_allocated")?,
            peak_reserved: peak(value, "peak_reserved")?,
            end_allocated: (value.get("end"))
                .and_then(|e| e.get("allocated"))
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0),
            categories_at_peak: (value.get("categories"))
                .and_then(|c| c.get("at_allocated_peak"))
                .and_then(|t| serde_json::from_value(t.clone()).ok())
                .unwrap_or_default(),
        }],
        warnings: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank_zero() -> RankTrace {
        let peak = |bytes| Peak {
            bytes,
            ..Peak::default()
        };
        RankTrace {
            path: PathBuf::from("run-0.vtrace"),
            header_rank: Some(0),
            devices: vec![DevicePeaks {
                device: 0,
                peak_allocated: peak(7),
                peak_reserved: peak(14),
                end_allocated: 3,
                categories_at_peak: Default::default(),
            }],
            warnings: Vec::new(),
        }
    }

    #[test]
    fn summaries_and_tables_merge_into_one_table() {
        let one = serde_json::json!({
            "path": "run-3.vtrace", "rank": 3,
            "peak_allocated": {"bytes": 10, "time_ns": 5, "index": 1, "replayed_events": 2, "phase": "step1"},
            "peak_reserved": {"bytes": 20, "time_ns": 6, "index": 2, "replayed_events": 3, "phase": ""},
        });
        let table = serde_json::to_string(&rank_table(&[rank_zero()])).unwrap();
        let merged = merge(&[
            (PathBuf::from("a.json"), one.to_string()),
            (PathBuf::from("b.json"), table),
        ])
        .unwrap();
        assert_eq!(
            merged.rows.iter().map(|r| r.rank).collect::<Vec<_>>(),
            vec![0, 3]
        );
        assert_eq!(merged.rows[1].peak_allocated.phase, "step1");
        assert_eq!(merged.allocated.unwrap().highest.rank, 3);
        let bad = merge(&[(PathBuf::from("c.json"), "{\"x\": 1}".into())]).unwrap_err();
        assert!(bad.to_string().starts_with("c.json: neither"), "{bad}");
    }
}
