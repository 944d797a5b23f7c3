//! Helpers shared by the analyzer's integration tests.

pub mod scaling;
