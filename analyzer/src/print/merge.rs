//! Rank tables merged from the JSON the printers wrote: the per-rank work
//! of a run of thousands of ranks can be spread over machines (`vramtrace
//! summary --json TRACE` on each), and its results, or tables of groups of
//! ranks, merged in one place. It reads back the shape [`super::json`]
//! writes (its `schema_version` checked), beside the printer.

use crate::analysis::peaks::DevicePeaks;
use crate::analysis::ranks::{RankTable, RankTrace, rank_table};
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
    /// Takes in one summary or rank table, through its type.
    fn add(&mut self, value: serde_json::Value) -> Result<(), String> {
        let version = value
            .get("schema_version")
            .and_then(serde_json::Value::as_u64);
        if value.get("rows").is_some() {
            // A table's rows read the same in every version.
            let table: RankTable =
                serde_json::from_value(value).map_err(|e| format!("not a rank table: {e}"))?;
            self.tables.push(table);
            return Ok(());
        }
        let summary: SummaryDocument = serde_json::from_value(value).map_err(|_| {
            "neither a summary (vramtrace summary --json) nor a rank table".to_string()
        })?;
        if version != Some(u64::from(crate::command::JSON_SCHEMA_VERSION)) {
            return Err(format!(
                "a summary of JSON version {} (this vramtrace reads version {}): run its summary --json again",
                version.map_or_else(|| "1".to_string(), |v| v.to_string()),
                crate::command::JSON_SCHEMA_VERSION
            ));
        }
        let path = (summary.by_device.first())
            .map(|d| PathBuf::from(&d.path))
            .ok_or_else(|| "a summary of no device".to_string())?;
        self.traces.push(RankTrace {
            path,
            header_rank: summary.rank,
            devices: summary.devices,
            warnings: Vec::new(),
        });
        Ok(())
    }
}

/// What a merge reads of a summary (`summary --json` of one trace): its
/// rank, each device's peaks, and its path (each device's result names it).
#[derive(Deserialize)]
struct SummaryDocument {
    rank: Option<u32>,
    devices: Vec<DevicePeaks>,
    by_device: Vec<SummaryPath>,
}

#[derive(Deserialize)]
struct SummaryPath {
    path: String,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::summary::Peak;

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
        let peak = |bytes, time_ns, phase: Option<&str>| serde_json::json!({"bytes": bytes, "time_ns": time_ns, "index": 1, "replayed_events": 2, "phase": phase});
        let one = serde_json::json!({
            "schema_version": crate::print::JSON_SCHEMA_VERSION, "rank": 3, "warnings": [],
            "devices": [{"device": 0, "peak_allocated": peak(10, 5, Some("step1")), "peak_reserved": peak(20, 6, None), "end_allocated_bytes": 4}],
            "by_device": [{"path": "run-3.vtrace", "device": 0}],
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
        assert_eq!(merged.rows[1].peak_reserved.phase, "", "null: no phase");
        assert_eq!(merged.rows[1].end_allocated, 4);
        assert_eq!(merged.allocated.unwrap().highest.rank, 3);
        let bad = merge(&[(PathBuf::from("c.json"), "{\"x\": 1}".into())]).unwrap_err();
        assert!(bad.to_string().starts_with("c.json: neither"), "{bad}");
        // A summary of version 1 (one device's result alone) is named as such.
        let old = serde_json::json!({"devices": [], "by_device": [{"path": "x"}]});
        let bad = merge(&[(PathBuf::from("d.json"), old.to_string())]).unwrap_err();
        assert!(bad.to_string().contains("JSON version 1"), "{bad}");
    }
}
