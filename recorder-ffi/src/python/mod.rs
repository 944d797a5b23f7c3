//! Python frames for the recorder's [`FrameSource`], read two ways:
//!
//! - [`gil`]: through CPython's C API, taking the GIL when the allocating
//!   thread released it, as PyTorch's own stack capture does; for
//!   replacement mode, where the library is the allocator and no lock of
//!   PyTorch's is held when it is called. Any CPython 3.
//! - [`nogil`]: read in place, never taking the GIL; for observer mode,
//!   where PyTorch calls with its allocator lock held and taking the GIL
//!   could deadlock. The CPython versions of [`layout`].
//!
//! Neither links libpython: the functions are looked up in the process, so
//! the library loads in processes without Python too (a C or Rust host),
//! which then get no Python frames.
//!
//! [`FrameSource`]: recorder::FrameSource

pub mod gil;
pub mod layout;
pub mod nogil;
