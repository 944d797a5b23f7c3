//! Native stack capture (hot path) and symbolization (writer thread).

use crate::format::{Frame, FrameId, TraceWriter};
use rustc_hash::FxHashMap;
use std::ffi::c_void;
use std::io::Write;
use std::mem::MaybeUninit;

/// The most frames a native stack keeps.
pub const MAX_STACK_DEPTH: usize = 128;

/// Instruction pointers of one stack, innermost first, on the stack (no heap
/// allocation on the hot path). Left uninitialized past `len`: zeroing 1 KiB
/// per call showed up in profiles of recording without stacks.
pub(crate) struct StackBuf {
    ips: [MaybeUninit<usize>; MAX_STACK_DEPTH],
    len: usize,
}

impl StackBuf {
    #[inline(always)]
    pub fn new() -> Self {
        StackBuf {
            ips: [const { MaybeUninit::uninit() }; MAX_STACK_DEPTH],
            len: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[usize] {
        // SAFETY: the first `len` entries were written by `capture`.
        unsafe { std::slice::from_raw_parts(self.ips.as_ptr().cast::<usize>(), self.len) }
    }
}

/// Captures up to `depth` return addresses of the callers of the recorder's
/// entry point whose local lies at `marker`.
///
/// Frames are told apart by the stack pointer the unwinder reports for them
/// (the bottom of each frame): the unwinder's, the recorder's helpers' and
/// the entry point's own lie at or below `marker`, a local of the entry
/// point; its callers' lie above. This holds whatever the optimizer inlined,
/// unlike a fixed count of frames to skip.
#[inline(never)]
pub(crate) fn capture(marker: usize, depth: usize, buf: &mut StackBuf) {
    let depth = depth.min(MAX_STACK_DEPTH);
    // SAFETY: the callback neither panics nor calls back into the unwinder;
    // `trace_unsynchronized` is only unsafe where the platform's unwinder is
    // not thread-safe (Windows' dbghelp), and libgcc's is.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            if (frame.sp() as usize) <= marker {
                return true;
            }
            let ip = frame.ip() as usize;
            if ip == 0 {
                return false;
            }
            buf.ips[buf.len] = MaybeUninit::new(ip);
            buf.len += 1;
            buf.len < depth
        });
    }
}

/// Turns instruction addresses into interned frames, each address once.
#[derive(Default)]
pub(crate) struct Symbolizer {
    frames: FxHashMap<usize, Vec<FrameId>>,
    scratch: Vec<FrameId>,
}

impl Symbolizer {
    /// Interns a stack of return addresses as frames; an address inside
    /// inlined code becomes several frames, innermost first.
    pub fn stack<W: Write>(&mut self, ips: &[usize], trace: &mut TraceWriter<W>) -> Vec<FrameId> {
        self.scratch.clear();
        for &ip in ips {
            let frames = self
                .frames
                .entry(ip)
                .or_insert_with(|| symbolize(ip, trace));
            self.scratch.extend_from_slice(frames);
        }
        self.scratch.clone()
    }

    /// Distinct addresses symbolized so far.
    pub fn addresses(&self) -> u64 {
        self.frames.len() as u64
    }
}

fn symbolize<W: Write>(ip: usize, trace: &mut TraceWriter<W>) -> Vec<FrameId> {
    let mut frames = Vec::new();
    // `resolve` looks up the call instruction (ip - 1), as a return address
    // may already belong to the next line or function.
    backtrace::resolve(ip as *mut c_void, |symbol| {
        let Some(name) = symbol.name() else {
            return;
        };
        // `{:#}` drops the hash suffix of Rust's mangled names.
        let function = format!("{name:#}");
        let file = symbol
            .filename()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let frame = Frame::Symbol {
            function: trace.intern_string(&function),
            file: trace.intern_string(&file),
            line: symbol.lineno().unwrap_or(0),
        };
        frames.push(trace.intern_frame(frame));
    });
    if frames.is_empty() {
        let (module, offset) = module_of(ip).unwrap_or_default();
        let frame = Frame::Native {
            address: ip as u64,
            module: trace.intern_string(&module),
            offset,
        };
        frames.push(trace.intern_frame(frame));
    }
    frames
}

/// The shared object holding `ip` and the offset of `ip` within it.
#[cfg(unix)]
fn module_of(ip: usize) -> Option<(String, u64)> {
    // SAFETY: dladdr only reads the dynamic loader's tables and writes the
    // out-parameter, which is a valid, zeroed Dl_info.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    if unsafe { libc::dladdr(ip as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returned a NUL-terminated path owned by the loader.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    Some((
        name.to_string_lossy().into_owned(),
        (ip as u64).wrapping_sub(info.dli_fbase as u64),
    ))
}

#[cfg(not(unix))]
fn module_of(_ip: usize) -> Option<(String, u64)> {
    None
}
