//! Printers: the [commands](crate::command)' results as people and
//! programs read them, side by side in one layer. None of them reads an
//! input or replays anything.
//!
//! - [`text`]: aligned tables with human units, for terminals.
//! - [`json`], [`json_each`] and [`json_sorted`]: the results as serde
//!   serializes them, each document versioned ([`JSON_SCHEMA_VERSION`]).
//! - [`svg`]: charts, drawn with plotters.
//! - [`html`]: the self-contained report page, charts inline.
//!
//! [`labels`] and [`table`] are what the printers share: how figures and
//! sites read, and tables whose columns line up; [`printable`], how a name
//! from the input is shown without its control characters acting.

mod by_device;
pub mod html;
pub mod labels;
pub mod merge;
pub mod perfetto;
pub mod pprof;
mod printable;
pub mod svg;
pub mod table;
pub mod text;
pub mod words;

pub use printable::{printable, printable_cut};

use serde::Serialize;

/// Why a chart cannot be drawn.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChartError {
    /// The drawing library failed.
    #[error("cannot draw the chart: {0}")]
    Draw(String),
    /// Runs aligned by repetition, with one that repeats no phase (its name).
    #[error(
        "aligning runs by repetition needs a phase repeated three times or more in both runs; {0} has none"
    )]
    NoRepetitions(String),
    /// Nothing to draw: no phase repeats (the leak chart).
    #[error("no phase repeats three times or more: there is no growth to draw")]
    NoRepeatedPhase,
}

/// The version of the JSON the commands print, which their results' shapes
/// make (defined beside them; [`merge`] reads documents back).
pub use crate::command::JSON_SCHEMA_VERSION;

/// A document: the version first, then the result's own keys.
#[derive(Serialize)]
struct Versioned<'a, T: ?Sized> {
    schema_version: u32,
    #[serde(flatten)]
    result: &'a T,
}

fn pretty<T: Serialize + ?Sized>(value: &T) -> Result<String, serde_json::Error> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    // Names from the input may hold characters a terminal obeys.
    Ok(printable::json_safe(text))
}

/// A result as one pretty JSON document: `schema_version` first, then its
/// keys in the order of its fields, with a final newline.
pub fn json<T: Serialize + ?Sized>(result: &T) -> String {
    pretty(&Versioned {
        schema_version: JSON_SCHEMA_VERSION,
        result,
    })
    // Only an object takes a version: anything else prints as it is.
    .or_else(|_| pretty(result))
    .expect("results serialize to JSON")
}

/// Results of several inputs (one document each, see [`json`]) as an array.
pub fn json_each<T: Serialize>(results: &[T]) -> String {
    let documents: Vec<Versioned<'_, T>> = (results.iter())
        .map(|result| Versioned {
            schema_version: JSON_SCHEMA_VERSION,
            result,
        })
        .collect();
    pretty(&documents).expect("results serialize to JSON")
}

/// A result as a JSON document with every object's keys in alphabetical
/// order (after `schema_version`, first as in every document), with a final
/// newline: the order `info`, `import`, `synth` and `simulate` have always
/// printed. An array of results is an array of documents.
pub fn json_sorted<T: Serialize + ?Sized>(result: &T) -> String {
    // `serde_json::Value` keeps its objects' keys sorted.
    match serde_json::to_value(result).expect("results serialize to JSON") {
        serde_json::Value::Array(results) => json_each(&results),
        value => json(&value),
    }
}
