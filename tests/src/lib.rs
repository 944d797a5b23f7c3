//! Helpers for the end-to-end tests of the `vramtrace` binary.
