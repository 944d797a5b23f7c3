//! Python frames of the allocating thread read in place, without the GIL:
//! the frame source of observer mode.
//!
//! PyTorch calls its allocator's trace trackers with its allocator lock
//! held, and documents that taking the GIL there can deadlock (a thread
//! holding the GIL may be waiting for that lock). So this source never takes
//! it. It does not need to: the frames it reads are the calling thread's
//! own, and that thread is stopped inside native code (PyTorch releases the
//! GIL around its operators, or the thread holds the GIL and is in the
//! allocator), so nothing changes them while they are read, and every code
//! object on them is alive. What is read (frame links, code objects, their
//! names and line tables) is immutable or only changed by the thread itself;
//! no reference count is touched and nothing is allocated through Python.
//!
//! Per frame: the code object's address, checked against the
//! thread's cache of codes seen (by the address and the addresses of its
//! name, file name and line table, so that a code object freed and another
//! made at its address is told apart), and the line, from
//! `PyCode_Addr2Line` (a pure function of the code object's line table)
//! cached per instruction offset. A code met for the first time is named
//! once, its strings read in place, and given an id: the key the recorder
//! stores, valid for the life of the process.
//!
//! The structures read are CPython's internal ones, at the offsets of
//! [`super::layout`]; a layout is used only for its version, and
//! `vramtrace` checks it against the running interpreter first.

use super::layout::{
    self, Current, FRAME_OWNED_BY_CSTACK, Lasti, Layout, OB_TYPE, UNICODE_HASH, UNICODE_LENGTH,
    UNICODE_STATE,
};
use recorder::{CodeInfo, FrameSink, FrameSource, WalkId};
use rustc_hash::{FxHashMap, FxHasher};
use std::cell::RefCell;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::hash::Hasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

type Obj = *mut c_void;

/// What identifies a code object beyond its address: the addresses of its
/// name, file name and line table, and a hash of the name's and file
/// name's text. A code object made at the address of a freed one may have
/// its strings at the freed strings' addresses too (functions of one shape
/// made and freed in turn do), so the text is part of it.
type Check = [usize; 4];

/// The CPython functions and types used, found in the running process.
struct Api {
    is_initialized: unsafe extern "C" fn() -> c_int,
    is_finalizing: Option<unsafe extern "C" fn() -> c_int>,
    this_thread_state: unsafe extern "C" fn() -> Obj,
    addr2line: unsafe extern "C" fn(Obj, c_int) -> c_int,
    /// `PyCode_AddWatcher` (CPython 3.12 and later) and what calling it
    /// needs: the GIL, and clearing the error it may set.
    add_code_watcher: Option<unsafe extern "C" fn(extern "C" fn(c_int, Obj) -> c_int) -> c_int>,
    gil_ensure: unsafe extern "C" fn() -> c_int,
    gil_release: unsafe extern "C" fn(c_int),
    err_clear: unsafe extern "C" fn(),
    code_type: usize,
    unicode_type: usize,
}

fn symbol(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym only reads the loader's tables; `name` is NUL-terminated.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// Why there is no source of Python frames without the GIL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// No Python interpreter in the process.
    NoPython,
    /// A Python version whose frames this build cannot read.
    Version(String),
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unavailable::NoPython => f.write_str("no Python interpreter in this process"),
            Unavailable::Version(v) => write!(
                f,
                "Python {v}: Python stacks without the GIL are read for CPython {} only",
                layout::known_versions()
            ),
        }
    }
}

impl Api {
    fn find() -> Result<(Api, &'static Layout), Unavailable> {
        // SAFETY: each symbol is CPython's function or type object of that
        // name, with the signature given.
        unsafe {
            let get_version = symbol(c"Py_GetVersion").ok_or(Unavailable::NoPython)?;
            let get_version: unsafe extern "C" fn() -> *const c_char =
                std::mem::transmute(get_version);
            let text = CStr::from_ptr(get_version()).to_string_lossy().into_owned();
            let version = text.split_whitespace().next().unwrap_or("?").to_string();
            let layout = layout::parse_version(&text)
                .and_then(|(major, minor)| layout::for_version(major, minor))
                .ok_or_else(|| Unavailable::Version(version.clone()))?;
            let f = |name: &CStr| symbol(name).ok_or(Unavailable::Version(version.clone()));
            let api = Api {
                is_initialized: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(
                    f(c"Py_IsInitialized")?,
                ),
                is_finalizing: symbol(c"Py_IsFinalizing")
                    .or_else(|| symbol(c"_Py_IsFinalizing"))
                    .map(|p| {
                        std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(p)
                    }),
                this_thread_state: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> Obj>(
                    f(c"PyGILState_GetThisThreadState")?,
                ),
                addr2line: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(Obj, c_int) -> c_int,
                >(f(c"PyCode_Addr2Line")?),
                add_code_watcher: symbol(c"PyCode_AddWatcher").map(|p| {
                    std::mem::transmute::<
                        *mut c_void,
                        unsafe extern "C" fn(extern "C" fn(c_int, Obj) -> c_int) -> c_int,
                    >(p)
                }),
                gil_ensure: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(f(
                    c"PyGILState_Ensure",
                )?),
                gil_release: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int)>(f(
                    c"PyGILState_Release",
                )?),
                err_clear: std::mem::transmute::<*mut c_void, unsafe extern "C" fn()>(f(
                    c"PyErr_Clear",
                )?),
                code_type: f(c"PyCode_Type")? as usize,
                unicode_type: f(c"PyUnicode_Type")? as usize,
            };
            Ok((api, layout))
        }
    }
}

/// Reads a `T` at `addr`.
///
/// # Safety
/// `addr` points into live memory holding a `T`.
#[inline(always)]
unsafe fn read<T: Copy>(addr: usize) -> T {
    // SAFETY: the caller's contract; CPython's structures are not packed,
    // but a misaligned address is no reason to fault.
    unsafe { std::ptr::read_unaligned(addr as *const T) }
}

/// The registry of codes and labels: ids, and what they are called.
#[derive(Default)]
struct Registry {
    /// Code (address, check) -> (id, hidden).
    codes: FxHashMap<(usize, Check), (usize, bool)>,
    labels: FxHashMap<String, usize>,
    /// By id; id 0 is never given.
    names: Vec<Arc<CodeInfo>>,
    /// Files whose frames are left out: those starting with one of these.
    hidden: Vec<String>,
}

impl Registry {
    fn add(&mut self, info: CodeInfo) -> usize {
        self.names.push(Arc::new(info));
        self.names.len()
    }
}

/// The most frames of a walk remembered as one [`Chain`]; deeper walks are
/// resolved frame by frame.
const MAX_CACHED_FRAMES: usize = 256;

/// The most walks a thread remembers (it forgets them all past this).
const MAX_CHAINS: usize = 4096;

/// A walk remembered: its raw frames (code address, instruction offset),
/// the checks of their codes, the frames it gave (hidden ones left out) as
/// code and line words, and the id the recorder knows them by.
struct Chain {
    raw: Box<[[usize; 2]]>,
    checks: Box<[Check]>,
    frames: Box<[usize]>,
    walk: WalkId,
    /// The [`CODE_GENERATION`] at which the checks last held.
    checked: u64,
}

/// Counts code objects freed, where the interpreter tells (a code watcher,
/// CPython 3.12 and later): while it stands still, a code address seen
/// before is the same code, and a remembered walk needs no checks.
static CODE_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Whether [`CODE_GENERATION`] is kept (a code watcher is installed).
static CODE_WATCHED: AtomicBool = AtomicBool::new(false);

/// The code watcher: called by CPython, GIL held, as code objects are made
/// and freed (`PyCodeEvent`: 0 made, 1 freed).
extern "C" fn on_code_event(event: c_int, _code: Obj) -> c_int {
    if event == 1 {
        CODE_GENERATION.fetch_add(1, Ordering::Release);
    }
    0
}

/// The raw frames of a walk in progress (code address, instruction
/// offset), in a buffer a thread keeps.
type Scratch = [[usize; 2]; MAX_CACHED_FRAMES];

/// What a thread remembers of the codes and walks it met, so that a walk
/// seen before costs one lookup, and other frames two lookups in maps of
/// its own.
#[derive(Default)]
struct Caches {
    /// Walks by the hash of their raw frames.
    chains: FxHashMap<u64, Chain>,
    /// Code address -> (check, id, hidden).
    codes: FxHashMap<usize, (Check, usize, bool)>,
    /// Lines by (code id, instruction offset).
    lines: FxHashMap<(usize, c_int), u32>,
    /// Label text -> id.
    labels: FxHashMap<Box<str>, usize>,
    /// The raw frames of the walk in progress (kept to reuse its memory).
    scratch: Option<Box<Scratch>>,
}

thread_local! {
    static CACHES: RefCell<Caches> = RefCell::new(Caches::default());
}

/// Python frames read without the GIL. See the [module docs](self).
pub struct NoGilFrames {
    api: Api,
    layout: &'static Layout,
    registry: Mutex<Registry>,
}

// SAFETY: the function pointers are process-global and callable from any
// thread; the registry is behind a mutex; nothing else is shared.
unsafe impl Send for NoGilFrames {}
// SAFETY: as above.
unsafe impl Sync for NoGilFrames {}

/// The process's source, or why there is none.
pub fn source() -> Result<Arc<NoGilFrames>, Unavailable> {
    static SOURCE: OnceLock<Result<Arc<NoGilFrames>, Unavailable>> = OnceLock::new();
    SOURCE
        .get_or_init(|| {
            Api::find().map(|(api, layout)| {
                Arc::new(NoGilFrames {
                    api,
                    layout,
                    registry: Mutex::new(Registry::default()),
                })
            })
        })
        .clone()
}

impl NoGilFrames {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The innermost frame of the thread state `tstate`, or 0.
    ///
    /// # Safety
    /// `tstate` is a live thread state of this layout's interpreter.
    unsafe fn current_frame(&self, tstate: usize) -> usize {
        // SAFETY: the caller's contract; a thread state's frame pointers are
        // set while it is alive (the C frame is the root one outside the
        // evaluation loop).
        unsafe {
            match self.layout.current {
                Current::Direct(offset) => read(tstate + offset),
                Current::ThroughCFrame {
                    cframe,
                    current_frame,
                } => {
                    let c: usize = read(tstate + cframe);
                    if c == 0 { 0 } else { read(c + current_frame) }
                }
            }
        }
    }

    /// A string object's text, read in place; `None` unless it is a compact
    /// `str` of sane length.
    ///
    /// # Safety
    /// `obj` is 0 or a live object.
    unsafe fn text(&self, obj: usize) -> Option<String> {
        if obj == 0 {
            return None;
        }
        // SAFETY: a live object has its type at OB_TYPE; a str's fields are
        // at the layout's offsets and its text is immutable.
        unsafe {
            if read::<usize>(obj + OB_TYPE) != self.api.unicode_type {
                return None;
            }
            let len: isize = read(obj + UNICODE_LENGTH);
            if !(0..=1 << 20).contains(&len) {
                return None;
            }
            let len = len as usize;
            let state: u32 = read(obj + UNICODE_STATE);
            let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1);
            if compact == 0 {
                return None;
            }
            if ascii == 1 {
                let bytes =
                    std::slice::from_raw_parts((obj + self.layout.ascii_size) as *const u8, len);
                return Some(String::from_utf8_lossy(bytes).into_owned());
            }
            let data = obj + self.layout.compact_size;
            let char_at = |i: usize| -> u32 {
                match kind {
                    1 => read::<u8>(data + i) as u32,
                    2 => read::<u16>(data + 2 * i) as u32,
                    _ => read::<u32>(data + 4 * i),
                }
            };
            if !matches!(kind, 1 | 2 | 4) {
                return None;
            }
            Some(
                (0..len)
                    .map(|i| char::from_u32(char_at(i)).unwrap_or(char::REPLACEMENT_CHARACTER))
                    .collect(),
            )
        }
    }

    /// The id of the code object at `code`, naming it if it is new, and
    /// whether its frames are hidden.
    ///
    /// # Safety
    /// `code` is a live code object.
    unsafe fn code_id(&self, caches: &mut Caches, code: usize) -> (usize, bool) {
        // SAFETY: the caller's contract.
        let check = unsafe { self.check_of(code) };
        if let Some(&(known, id, hidden)) = caches.codes.get(&code)
            && known == check
        {
            return (id, hidden);
        }
        let (id, hidden) = {
            let mut r = self.registry();
            match r.codes.get(&(code, check)) {
                Some(&known) => known,
                None => {
                    // SAFETY: the code's strings are alive with it.
                    let (function, file) = unsafe { (self.text(check[0]), self.text(check[1])) };
                    let file = file.unwrap_or_else(|| "?".into());
                    let hidden = r.hidden.iter().any(|h| file.starts_with(h.as_str()))
                        || file.ends_with("/runpy.py")
                        || file == "<frozen runpy>";
                    let id = r.add(CodeInfo {
                        function: function.unwrap_or_else(|| "?".into()),
                        file,
                    });
                    r.codes.insert((code, check), (id, hidden));
                    (id, hidden)
                }
            }
        };
        caches.codes.insert(code, (check, id, hidden));
        (id, hidden)
    }

    /// Installs a code watcher where the interpreter has them (CPython 3.12
    /// and later), so that a remembered walk is trusted without reading
    /// its codes while no code object was freed since it was last checked.
    /// Returns whether one is installed (once per process).
    ///
    /// Takes the GIL: call it from a thread that may (never from an
    /// allocator's trace tracker).
    pub fn watch_codes(&self) -> bool {
        static INSTALLED: OnceLock<bool> = OnceLock::new();
        let Some(add) = self.api.add_code_watcher else {
            return false;
        };
        *INSTALLED.get_or_init(|| {
            // SAFETY: the GIL is taken around the call, as it requires; a
            // failure sets an error, which is cleared.
            unsafe {
                if (self.api.is_initialized)() == 0 {
                    return false;
                }
                let gil = (self.api.gil_ensure)();
                let ok = add(on_code_event) >= 0;
                if !ok {
                    (self.api.err_clear)();
                }
                (self.api.gil_release)(gil);
                CODE_WATCHED.store(ok, Ordering::Release);
                ok
            }
        })
    }

    /// Leaves out, from now on, the frames of files whose path starts with
    /// `prefix` (vramtrace's own package), as it leaves out `runpy`'s.
    pub fn hide(&self, prefix: &str) {
        let mut r = self.registry();
        if !r.hidden.iter().any(|h| h == prefix) {
            r.hidden.push(prefix.to_string());
        }
    }

    /// The line of instruction offset `lasti` (code units) of the code at
    /// `code`, whose id is `id`.
    ///
    /// # Safety
    /// `code` is a live code object.
    unsafe fn line(&self, caches: &mut Caches, code: usize, id: usize, lasti: c_int) -> u32 {
        *caches.lines.entry((id, lasti)).or_insert_with(|| {
            // SAFETY: PyCode_Addr2Line only reads the live code object's
            // line table (a negative offset gives its first line).
            unsafe { (self.api.addr2line)(code as Obj, lasti.saturating_mul(2)) }.max(0) as u32
        })
    }

    /// Pushes the frames of the thread state `tstate`, innermost first.
    ///
    /// # Safety
    /// `tstate` is the calling thread's thread state, and the thread runs
    /// no Python code meanwhile (it is in this call).
    unsafe fn walk(&self, tstate: usize, sink: &mut FrameSink<'_>, caches: &mut Caches) {
        // The raw frames first: code addresses and instruction offsets, and
        // their hash. A walk seen before (allocations repeat along the same
        // paths) then costs one lookup and a comparison of its raw frames,
        // and its frames are copied out as one block with the walk's id.
        let mut raw = caches
            .scratch
            .take()
            .unwrap_or_else(|| Box::new([[0; 2]; MAX_CACHED_FRAMES]));
        let mut n = 0;
        let mut deep = false;
        let mut hasher = FxHasher::default();
        // SAFETY: the calling thread's frames (the caller's contract).
        unsafe {
            self.for_each_frame(tstate, |code, lasti| {
                if n == MAX_CACHED_FRAMES {
                    deep = true;
                    return false;
                }
                let lasti = lasti as usize;
                raw[n] = [code, lasti];
                n += 1;
                hasher.write_usize(code ^ lasti.rotate_right(16));
                true
            });
            if deep {
                // Too deep to remember: resolve the frames one by one.
                self.for_each_frame(tstate, |code, lasti| {
                    let (id, hidden) = self.code_id(caches, code);
                    hidden || sink.push(id, self.line(caches, code, id, lasti))
                });
            } else {
                self.walk_remembered(&raw[..n], hasher.finish(), sink, caches);
            }
        }
        caches.scratch = Some(raw);
    }

    /// Pushes the frames of the walk whose raw frames are `raw` (of hash
    /// `hash`), remembering it if it is new.
    ///
    /// # Safety
    /// `raw` was just read from the calling thread's frames: its codes are
    /// alive.
    unsafe fn walk_remembered(
        &self,
        raw: &[[usize; 2]],
        hash: u64,
        sink: &mut FrameSink<'_>,
        caches: &mut Caches,
    ) {
        // Read before the checks: a code freed after this reading makes the
        // next walk check again.
        let generation = CODE_GENERATION.load(Ordering::Acquire);
        let watched = CODE_WATCHED.load(Ordering::Relaxed);
        if let Some(chain) = caches.chains.get_mut(&hash)
            && chain.raw.as_flattened() == raw.as_flattened()
        {
            // SAFETY: the caller's contract.
            let same = (watched && chain.checked == generation)
                || raw
                    .iter()
                    .zip(chain.checks.iter())
                    .all(|(&[code, _], check)| unsafe { self.check_of(code) } == *check);
            if same {
                chain.checked = generation;
                sink.push_walk(chain.walk, &chain.frames);
                return;
            }
        }
        let mut frames = Vec::with_capacity(2 * raw.len());
        let mut checks = Vec::with_capacity(raw.len());
        for &[code, lasti] in raw {
            // SAFETY: the caller's contract.
            let (id, hidden) = unsafe { self.code_id(caches, code) };
            checks.push(unsafe { self.check_of(code) });
            if !hidden {
                let line = unsafe { self.line(caches, code, id, lasti as c_int) };
                frames.extend([id, line as usize]);
            }
        }
        let walk = WalkId::fresh();
        sink.push_walk(walk, &frames);
        if caches.chains.len() >= MAX_CHAINS {
            caches.chains.clear();
        }
        caches.chains.insert(
            hash,
            Chain {
                raw: raw.into(),
                checks: checks.into(),
                frames: frames.into(),
                walk,
                checked: generation,
            },
        );
    }

    /// Calls `f(code, lasti)` for each frame of `tstate` that runs a code
    /// object, innermost first, while it returns true: the code's address and
    /// the instruction offset in code units.
    ///
    /// # Safety
    /// As [`walk`](Self::walk).
    #[inline(always)]
    unsafe fn for_each_frame(&self, tstate: usize, mut f: impl FnMut(usize, c_int) -> bool) {
        let l = self.layout;
        // SAFETY: the frames of the calling thread, which only it changes,
        // are read while it is here; each is checked to hold a code object
        // before anything of the code is read.
        unsafe {
            let mut frame = self.current_frame(tstate);
            // A bound on the walk whatever the links say.
            let mut budget = 4096;
            while frame != 0 && budget > 0 {
                budget -= 1;
                let previous: usize = read(frame + l.frame_previous);
                let owned_by_c = l
                    .frame_owner
                    .is_some_and(|owner| read::<u8>(frame + owner) == FRAME_OWNED_BY_CSTACK);
                let code: usize = if owned_by_c {
                    0
                } else {
                    read(frame + l.frame_code)
                };
                if code != 0 && read::<usize>(code + OB_TYPE) == self.api.code_type {
                    let lasti: c_int = match l.frame_lasti {
                        Lasti::Field(offset) => read(frame + offset),
                        Lasti::Pointer {
                            offset,
                            code_adaptive,
                        } => {
                            let ip: usize = read(frame + offset);
                            (ip as isize - (code + code_adaptive) as isize)
                                .div_euclid(2)
                                .clamp(-1, c_int::MAX as isize) as c_int
                        }
                    };
                    if !f(code, lasti) {
                        return;
                    }
                }
                frame = previous;
            }
        }
    }

    /// The check of the code object at `code` (see [`Check`]).
    ///
    /// # Safety
    /// `code` is a live code object.
    #[inline(always)]
    unsafe fn check_of(&self, code: usize) -> Check {
        let l = self.layout;
        // SAFETY: the caller's contract; a live code's strings are alive.
        unsafe {
            let name: usize = read(code + l.code_name);
            let file: usize = read(code + l.code_filename);
            let mut hasher = FxHasher::default();
            self.hash_text(name, &mut hasher);
            self.hash_text(file, &mut hasher);
            [
                name,
                file,
                read(code + l.code_linetable),
                hasher.finish() as usize,
            ]
        }
    }

    /// Feeds the text of the string object at `obj` to `hasher`: its hash
    /// where the string has one cached (interned names do), else the text
    /// as stored (nothing, unless it is a compact `str` of sane length).
    ///
    /// # Safety
    /// `obj` is 0 or a live object.
    #[inline(always)]
    unsafe fn hash_text(&self, obj: usize, hasher: &mut FxHasher) {
        if obj == 0 {
            return;
        }
        // SAFETY: as in `text`.
        unsafe {
            if read::<usize>(obj + OB_TYPE) != self.api.unicode_type {
                return;
            }
            let cached: isize = read(obj + UNICODE_HASH);
            if cached != -1 {
                hasher.write_isize(cached);
                return;
            }
            let len: isize = read(obj + UNICODE_LENGTH);
            let state: u32 = read(obj + UNICODE_STATE);
            let (kind, compact, ascii) = ((state >> 2) & 7, (state >> 5) & 1, (state >> 6) & 1);
            if !(0..=1 << 20).contains(&len) || compact == 0 || !matches!(kind, 1 | 2 | 4) {
                return;
            }
            let data = obj
                + if ascii == 1 {
                    self.layout.ascii_size
                } else {
                    self.layout.compact_size
                };
            hasher.write(std::slice::from_raw_parts(
                data as *const u8,
                len as usize * kind as usize,
            ));
        }
    }
}

impl FrameSource for NoGilFrames {
    fn name(&self) -> &str {
        "python"
    }

    fn capture(&self, sink: &mut FrameSink<'_>) {
        let api = &self.api;
        // SAFETY: these may be called from any thread, GIL or not; the walk
        // runs only once the interpreter is up, not shutting down, and on a
        // thread that has a thread state.
        unsafe {
            if (api.is_initialized)() == 0 || api.is_finalizing.is_some_and(|f| f() != 0) {
                return;
            }
            let tstate = (api.this_thread_state)() as usize;
            if tstate != 0 {
                let _ = CACHES.try_with(|c| {
                    if let Ok(mut caches) = c.try_borrow_mut() {
                        self.walk(tstate, sink, &mut caches);
                    }
                });
            }
        }
    }

    fn describe(&self, code: usize) -> Option<CodeInfo> {
        let r = self.registry();
        let info = r.names.get(code.checked_sub(1)?)?;
        Some(CodeInfo::clone(info))
    }

    fn label(&self, label: &str) -> Option<usize> {
        let cached = CACHES
            .try_with(|c| c.try_borrow().ok()?.labels.get(label).copied())
            .ok()
            .flatten();
        if cached.is_some() {
            return cached;
        }
        let id = {
            let mut r = self.registry();
            match r.labels.get(label) {
                Some(&id) => id,
                None => {
                    let id = r.add(CodeInfo {
                        function: label.to_string(),
                        file: String::new(),
                    });
                    r.labels.insert(label.to_string(), id);
                    id
                }
            }
        };
        let _ = CACHES.try_with(|c| {
            c.try_borrow_mut()
                .map(|mut c| c.labels.insert(label.into(), id))
        });
        Some(id)
    }
}
