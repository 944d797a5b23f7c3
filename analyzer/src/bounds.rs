//! The bounds every layer holds hostile input to: the largest byte figure
//! and the most devices. They live at the bottom of the crate so that the
//! snapshot reader, the replay and the analyses all use the same numbers
//! without one layer reaching into another for them.

/// The most bytes any figure of one device may hold: 1 PiB, a thousand times
/// the largest GPU memory made so far, and small enough that sums of
/// millions of such figures stay far inside 64 bits.
pub const MAX_BYTES: u64 = 1 << 50;

/// Device indices an input may use, from 0: tables are kept per device, so
/// an index from a damaged or hostile file must not size them.
pub const MAX_DEVICES: u32 = 1024;
