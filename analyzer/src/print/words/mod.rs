//! Words: every sentence a result's facts are told in, in one place.
//!
//! The commands' results hold typed facts (an outcome, the policy that
//! fits, the bytes needed, a note as an enum); the functions here word
//! them, for the text and HTML printers alike. The JSON keys that have
//! always carried those sentences (`line`, `notes`, `basis_note`,
//! `limit_line`) are kept: the results' `Serialize` impls that write them
//! live here too, beside the words, so that JSON and text say the same
//! thing and the library's layers below `print` hold no sentences of
//! theirs.

pub mod kv;
pub mod plan;
pub mod report;
pub mod simulate;
pub mod warning;
pub mod waterfall;
