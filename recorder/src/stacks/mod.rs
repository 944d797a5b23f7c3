//! Stack capture (hot path) and symbolization (writer thread): native
//! frames, and frames of a [`FrameSource`] (an interpreter's).

use crate::format::{Frame, FrameId, StringId, TraceWriter};
use rustc_hash::FxHashMap;
use std::ffi::c_void;
use std::io::Write;
use std::mem::MaybeUninit;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod unwind;

/// The most frames a native stack keeps, and the most frames a
/// [`FrameSource`] may add to it.
pub const MAX_STACK_DEPTH: usize = 128;

/// Words of a stack key: native addresses, then two words per source frame
/// (code, line), then the count of native addresses (only when the recorder
/// has a frame source, so that the writer can tell the two parts apart).
const KEY_WORDS: usize = MAX_STACK_DEPTH * 3 + 1;

/// The code and file of a source frame's function (see
/// [`FrameSource::describe`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CodeInfo {
    /// The function's name.
    pub function: String,
    /// Its source file.
    pub file: String,
}

/// Frames of an interpreted language (Python, say) that a [`Recorder`]
/// captures on each allocation, after (outside) the native frames if those
/// are on.
///
/// The recorder knows nothing of the language: a frame is an opaque *code*
/// key and a line. The hot path interns stacks by these keys alone; the names
/// behind a code key are asked for once, on the writer thread.
///
/// [`Recorder`]: super::Recorder
pub trait FrameSource: Send + Sync + 'static {
    /// A short name for the trace header's `stacks` entry (`python`).
    fn name(&self) -> &str;

    /// Pushes the calling thread's frames, innermost first, until the sink is
    /// full. Pushes nothing where the thread runs no such code. Runs on the
    /// allocating thread, before the allocator lock is taken: it must be
    /// cheap, and it must not allocate through the recorder it serves.
    fn capture(&self, frames: &mut FrameSink<'_>);

    /// The function and file of a code key that [`capture`](Self::capture)
    /// pushed; called on the writer thread, once per distinct key. A key
    /// must keep meaning the same code for the life of the recorder.
    fn describe(&self, code: usize) -> Option<CodeInfo>;

    /// A code key for a frame that is only a name, `label` (no file, no
    /// line): it stands for the stack of an event whose thread runs no code
    /// of this source but whose context is known, such as the autograd node
    /// a backward thread is running. [`describe`](Self::describe) names it.
    /// `None` (the default) where the source makes no such frames.
    fn label(&self, label: &str) -> Option<usize> {
        let _ = label;
        None
    }
}

impl std::fmt::Debug for dyn FrameSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FrameSource({})", self.name())
    }
}

/// A name a [`FrameSource`] gives to one sequence of frames that it
/// pushes again and again (a walk it remembers): every capture that names
/// a walk pushes the same frames. Unique in the process.
///
/// With it, a recorder finds the stack it interned for these frames the
/// last time by one lookup of a word, rather than by hashing the frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WalkId(NonZeroU64);

impl WalkId {
    /// A walk id never given before in this process.
    pub fn fresh() -> WalkId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        WalkId(NonZeroU64::new(id).expect("2^64 walks"))
    }
}

/// Where a [`FrameSource`] puts the frames it captures.
pub struct FrameSink<'a> {
    buf: &'a mut StackBuf,
    end: usize,
}

impl FrameSink<'_> {
    /// Adds a frame (outer to the ones pushed before). Returns `false` once
    /// the sink is full: further frames are dropped, so stop walking.
    #[inline]
    pub fn push(&mut self, code: usize, line: u32) -> bool {
        if self.buf.len + 2 > self.end {
            return false;
        }
        self.buf.words[self.buf.len] = MaybeUninit::new(code);
        self.buf.words[self.buf.len + 1] = MaybeUninit::new(line as usize);
        self.buf.len += 2;
        self.buf.walk = None;
        self.buf.len + 2 <= self.end
    }

    /// Adds the frames of the walk `walk`, given as `push` would write
    /// them: code and line, code and line, innermost first. What does not
    /// fit is dropped, as by [`push`](Self::push).
    ///
    /// Where these frames are the whole stack (nothing captured before
    /// them, and all of them fit), the stack is known by `walk` too, and
    /// the recorder interns it by that alone once it has seen it.
    #[inline]
    pub fn push_walk(&mut self, walk: WalkId, frames: &[usize]) {
        let whole = self.buf.len == 0;
        let room = self.end.saturating_sub(self.buf.len) & !1;
        let n = frames.len().min(room) & !1;
        let slots = &mut self.buf.words[self.buf.len..self.buf.len + n];
        // SAFETY: `slots` and `frames[..n]` are `n` words each, apart;
        // `MaybeUninit<usize>` has the layout of `usize`.
        unsafe {
            std::ptr::copy_nonoverlapping(frames.as_ptr(), slots.as_mut_ptr().cast::<usize>(), n);
        }
        self.buf.len += n;
        self.buf.walk = (whole && n == frames.len()).then_some(walk);
    }
}

/// Runs `source.capture` as a recorder would and returns the frames it
/// pushed as `(code, line)`, innermost first (for tests and diagnostics of
/// a source; allocates).
pub fn capture_frames(source: &dyn FrameSource, max_depth: usize) -> Vec<(usize, u32)> {
    let mut buf = StackBuf::new();
    buf.capture_external(source, max_depth);
    buf.as_slice()
        .chunks_exact(2)
        .map(|w| (w[0], w[1] as u32))
        .collect()
}

/// The key of one stack (see `KEY_WORDS`), on the stack: no heap allocation
/// on the hot path. Left uninitialized past `len`: zeroing 1 KiB per call
/// showed up in profiles of recording without stacks.
pub(crate) struct StackBuf {
    words: [MaybeUninit<usize>; KEY_WORDS],
    len: usize,
    native: usize,
    /// The walk the whole key is, if a frame source said so.
    walk: Option<WalkId>,
}

/// A stack as the recorder interns it: the key's words, and the walk they
/// are, where a frame source named one (see [`FrameSink::push_walk`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct StackKey<'a> {
    pub words: &'a [usize],
    pub walk: Option<WalkId>,
}

impl StackKey<'_> {
    /// No stack.
    pub const NONE: StackKey<'static> = StackKey {
        words: &[],
        walk: None,
    };
}

impl StackBuf {
    #[inline(always)]
    pub fn new() -> Self {
        StackBuf {
            words: [const { MaybeUninit::uninit() }; KEY_WORDS],
            len: 0,
            native: 0,
            walk: None,
        }
    }

    pub fn as_slice(&self) -> &[usize] {
        // SAFETY: the first `len` entries were written by the captures.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<usize>(), self.len) }
    }

    /// The key to intern: the words, and the walk they are if a source
    /// named one and nothing else went into the key.
    pub fn key(&self) -> StackKey<'_> {
        StackKey {
            words: self.as_slice(),
            walk: self.walk,
        }
    }

    /// Appends up to `depth` frames of `source`; after any native capture.
    #[inline]
    pub fn capture_external(&mut self, source: &dyn FrameSource, depth: usize) {
        let end = (self.len + 2 * depth.min(MAX_STACK_DEPTH)).min(KEY_WORDS - 1);
        source.capture(&mut FrameSink { buf: self, end });
    }

    /// Appends one source frame, as a [`FrameSource`] would.
    #[inline]
    pub fn push_external(&mut self, code: usize, line: u32) {
        let end = KEY_WORDS - 1;
        FrameSink { buf: self, end }.push(code, line);
    }

    /// Ends the key of a recorder with a frame source: appends the count of
    /// native addresses. An empty stack stays empty ([`StackId::NONE`]).
    ///
    /// [`StackId::NONE`]: crate::format::StackId::NONE
    #[inline]
    pub fn seal(&mut self) {
        if self.len > 0 {
            self.words[self.len] = MaybeUninit::new(self.native);
            self.len += 1;
        }
    }
}

/// A stack key split into its parts: native addresses and source frames.
pub(crate) fn split_key(key: &[usize], sealed: bool) -> (&[usize], &[usize]) {
    match key.split_last() {
        Some((&native, rest)) if sealed && native <= rest.len() => rest.split_at(native),
        _ => (key, &[]),
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
///
/// Uses the caching unwinder where it can run (see [`unwind`]), else
/// libgcc's.
#[inline(never)]
pub(crate) fn capture(marker: usize, depth: usize, buf: &mut StackBuf) {
    let depth = depth.min(MAX_STACK_DEPTH);
    // Both unwinders push a frame before checking the depth.
    if depth == 0 {
        return;
    }
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    if unwind::capture(marker, depth, buf) {
        return;
    }
    capture_libgcc(marker, depth, buf);
}

/// [`capture`] through libgcc's unwinder, which interprets each frame's
/// unwind rules anew (about 200 ns a frame).
#[inline(never)]
pub(crate) fn capture_libgcc(marker: usize, depth: usize, buf: &mut StackBuf) {
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
            buf.words[buf.len] = MaybeUninit::new(ip);
            buf.len += 1;
            buf.native = buf.len;
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

/// Turns a [`FrameSource`]'s `(code, line)` frames into interned frames, on
/// the writer thread: each code's names asked for once, each frame built once.
pub(crate) struct SourceFrames {
    source: std::sync::Arc<dyn FrameSource>,
    codes: FxHashMap<usize, (StringId, StringId)>,
    frames: FxHashMap<(usize, u32), FrameId>,
}

impl SourceFrames {
    pub fn new(source: std::sync::Arc<dyn FrameSource>) -> Self {
        SourceFrames {
            source,
            codes: FxHashMap::default(),
            frames: FxHashMap::default(),
        }
    }

    /// Appends the frames of `words` (pairs of code and line) to `out`.
    pub fn extend<W: Write>(
        &mut self,
        words: &[usize],
        trace: &mut TraceWriter<W>,
        out: &mut Vec<FrameId>,
    ) {
        for pair in words.chunks_exact(2) {
            let (code, line) = (pair[0], pair[1] as u32);
            if let Some(&id) = self.frames.get(&(code, line)) {
                out.push(id);
                continue;
            }
            let source = &self.source;
            let &mut (function, file) = self.codes.entry(code).or_insert_with(|| {
                // A code the source cannot name still gets a frame, so the
                // stack keeps its depth; "?" is what the analyzer shows for
                // unknown names.
                let info = source.describe(code).unwrap_or_else(|| CodeInfo {
                    function: "?".into(),
                    file: "?".into(),
                });
                (
                    trace.intern_string(&info.function),
                    trace.intern_string(&info.file),
                )
            });
            let id = trace.intern_frame(Frame::Symbol {
                function,
                file,
                line,
            });
            self.frames.insert((code, line), id);
            out.push(id);
        }
    }

    /// Distinct codes described so far.
    pub fn codes(&self) -> u64 {
        self.codes.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(buf: &mut StackBuf, depth: usize) -> FrameSink<'_> {
        let end = (buf.len + 2 * depth).min(KEY_WORDS - 1);
        FrameSink { buf, end }
    }

    #[test]
    fn a_walk_that_is_the_whole_stack_names_the_key() {
        let walk = WalkId::fresh();
        let mut buf = StackBuf::new();
        sink(&mut buf, 8).push_walk(walk, &[1, 10, 2, 20]);
        assert_eq!(buf.key().words, &[1, 10, 2, 20]);
        assert_eq!(buf.key().walk, Some(walk));
        buf.seal();
        assert_eq!(buf.key().words, &[1, 10, 2, 20, 0]);
        assert_eq!(buf.key().walk, Some(walk));
    }

    #[test]
    fn a_walk_cut_short_or_after_other_frames_names_nothing() {
        let walk = WalkId::fresh();
        // Room for one frame of two: the frame is kept, the walk is not.
        let mut buf = StackBuf::new();
        sink(&mut buf, 1).push_walk(walk, &[1, 10, 2, 20]);
        assert_eq!(buf.key().words, &[1, 10]);
        assert_eq!(buf.key().walk, None);
        // After a frame pushed alone.
        let mut buf = StackBuf::new();
        let mut s = sink(&mut buf, 8);
        s.push(7, 70);
        s.push_walk(walk, &[1, 10]);
        assert_eq!(buf.key().words, &[7, 70, 1, 10]);
        assert_eq!(buf.key().walk, None);
        // A frame pushed after the walk.
        let mut buf = StackBuf::new();
        let mut s = sink(&mut buf, 8);
        s.push_walk(walk, &[1, 10]);
        s.push(7, 70);
        assert_eq!(buf.key().walk, None);
    }

    #[test]
    fn walk_ids_are_never_given_twice() {
        let a = WalkId::fresh();
        let b = WalkId::fresh();
        assert_ne!(a, b);
    }
}
