//! Helpers shared by the analyzer's integration tests.

pub mod hostile;
pub mod pickle;
pub mod scaling;
