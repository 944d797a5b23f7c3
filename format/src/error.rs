//! Errors of reading and writing traces.

use std::io;

/// Why a trace could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The underlying reader or writer failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The input does not start with the vramtrace magic.
    #[error("not a vramtrace trace: it does not start with the vramtrace signature")]
    NotATrace,
    /// The trace's major version is not the one this build reads.
    #[error(
        "trace format version {found_major}.{found_minor} is not supported: this build reads version {supported_major}.x"
    )]
    UnsupportedVersion {
        /// The trace's major version.
        found_major: u16,
        /// The trace's minor version.
        found_minor: u16,
        /// The major version this build reads.
        supported_major: u16,
    },
    /// The trace ends before its header is complete: nothing can be read.
    #[error("trace is cut short at byte {offset}, before its header is complete")]
    TruncatedHeader {
        /// Where the data ends.
        offset: u64,
    },
    /// The bytes at `offset` are damaged or inconsistent.
    #[error("corrupt trace at byte {offset}: {reason}")]
    Corrupt {
        /// The start of the record (or the position) where the damage was found.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The producer of a trace sent through a channel stopped before the
    /// trace's end (it failed or panicked); the events it sent were read.
    #[error("the trace stopped short: its producer failed before the end")]
    ProducerStopped,
    /// Parts given to a join cannot be joined (none given, or parts of
    /// different recordings).
    #[error("cannot join the parts: {0}")]
    NotJoinable(&'static str),
    /// No part of a ring could be joined, or its parts are of two
    /// recordings in equal measure: each part, and why
    /// ([`RingError::describe`](crate::RingError::describe)).
    #[error("cannot join the ring: {0}")]
    Ring(String),
    /// The writer was used out of order (e.g. an initial state after events).
    #[error("invalid use of the trace writer: {0}")]
    InvalidUse(&'static str),
}

impl FormatError {
    pub(crate) fn corrupt(offset: u64, reason: impl Into<String>) -> Self {
        FormatError::Corrupt {
            offset,
            reason: reason.into(),
        }
    }
}
