//! Python frames of the allocating thread, taking the GIL, for the recorder's
//! [`FrameSource`]: what `torch.cuda.memory._record_memory_history(stacks=
//! "python")` records, function, file and line of each frame.
//!
//! The CPython C API is not linked: the library must load in processes
//! without Python (a C or Rust host) and its own tests run without
//! libpython. The few functions used are looked up in the process with
//! `dlsym` on first use, all from the stable ABI except the optional
//! "current thread state, unchecked" getter; if any is missing, Python frames
//! are simply never captured.
//!
//! Hot path (allocating thread): if the thread holds the GIL, or released
//! it but has a Python thread state (PyTorch releases the GIL inside its
//! operators, so `torch.empty` allocates without it; PyTorch's own capture
//! takes it back the same way), walk the frames with the GIL held, keying each by
//! its code object's address and its line; no strings. A code object seen
//! for the first time is named once (`co_name`, `co_filename`) and kept
//! alive by one reference for the life of the process, so its address can
//! never come to mean another code object. The writer thread asks for those
//! names through [`FrameSource::describe`], which never touches Python.

use recorder::{CodeInfo, FrameSink, FrameSource};
use rustc_hash::{FxHashMap, FxHashSet};
use std::cell::RefCell;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{Arc, Mutex, OnceLock};

type Obj = *mut c_void;

/// The CPython functions used, found in the running process.
struct Api {
    is_initialized: NoArgs<c_int>,
    gil_check: NoArgs<c_int>,
    this_thread_state: NoArgs<Obj>,
    /// `PyThreadState_GetUnchecked` (3.13) or `_PyThreadState_UncheckedGet`
    /// (3.12 and before): the thread state this thread is attached with, or
    /// NULL. Preferred where present: unlike the GIL-state one it is NULL on
    /// a thread that released the GIL, whatever sub-interpreters do to
    /// `PyGILState_Check`.
    current_thread_state: Option<NoArgs<Obj>>,
    /// `Py_IsFinalizing` (3.13) or `_Py_IsFinalizing` (3.12 and before).
    is_finalizing: Option<NoArgs<c_int>>,
    gil_ensure: NoArgs<c_int>,
    gil_release: unsafe extern "C" fn(c_int),
    thread_state_get_frame: OneArg<Obj>,
    frame_get_code: OneArg<Obj>,
    frame_get_back: OneArg<Obj>,
    frame_get_line_number: OneArg<c_int>,
    /// `PyFrame_GetLasti` and `PyCode_Addr2Line` (public C API since 3.11,
    /// not in the limited API): a frame's line read through these is cached
    /// per (code, instruction offset), where `PyFrame_GetLineNumber` scans
    /// the function's line table from its start on every call (tens of
    /// microseconds deep inside a long function).
    lines: Option<(OneArg<c_int>, Addr2Line)>,
    get_attr_string: GetAttr,
    unicode_as_utf8_and_size: AsUtf8,
    err_fetch: ErrFetch,
    err_restore: ErrRestore,
    dec_ref: OneArg<()>,
}

/// The address of `name` in the process, if any object loaded defines it.
fn symbol(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym only reads the loader's tables; `name` is NUL-terminated.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

macro_rules! lookup {
    ($name:literal, $ty:ty) => {{
        let p = symbol($name)?;
        // SAFETY: the symbol is CPython's function of that name, whose C
        // signature is `$ty` (stable ABI).
        unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
    }};
}

type Addr2Line = unsafe extern "C" fn(Obj, c_int) -> c_int;
type GetAttr = unsafe extern "C" fn(Obj, *const c_char) -> Obj;
type AsUtf8 = unsafe extern "C" fn(Obj, *mut isize) -> *const c_char;
type ErrFetch = unsafe extern "C" fn(*mut Obj, *mut Obj, *mut Obj);
type ErrRestore = unsafe extern "C" fn(Obj, Obj, Obj);
type NoArgs<R> = unsafe extern "C" fn() -> R;
type OneArg<R> = unsafe extern "C" fn(Obj) -> R;

impl Api {
    fn find() -> Option<Api> {
        let current_thread_state = symbol(c"PyThreadState_GetUnchecked")
            .or_else(|| symbol(c"_PyThreadState_UncheckedGet"))
            // SAFETY: both take nothing and return a PyThreadState*.
            .map(|p| unsafe {
                std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> Obj>(p)
            });
        let is_finalizing = symbol(c"Py_IsFinalizing")
            .or_else(|| symbol(c"_Py_IsFinalizing"))
            // SAFETY: both take nothing and return an int.
            .map(|p| unsafe { std::mem::transmute::<*mut c_void, NoArgs<c_int>>(p) });
        let lines = symbol(c"PyFrame_GetLasti")
            .zip(symbol(c"PyCode_Addr2Line"))
            // SAFETY: CPython's functions of these names and signatures.
            .map(|(lasti, addr2line)| unsafe {
                (
                    std::mem::transmute::<*mut c_void, OneArg<c_int>>(lasti),
                    std::mem::transmute::<*mut c_void, Addr2Line>(addr2line),
                )
            });
        Some(Api {
            lines,
            is_finalizing,
            gil_ensure: lookup!(c"PyGILState_Ensure", NoArgs<c_int>),
            gil_release: lookup!(c"PyGILState_Release", unsafe extern "C" fn(c_int)),
            is_initialized: lookup!(c"Py_IsInitialized", NoArgs<c_int>),
            gil_check: lookup!(c"PyGILState_Check", NoArgs<c_int>),
            this_thread_state: lookup!(c"PyGILState_GetThisThreadState", NoArgs<Obj>),
            current_thread_state,
            thread_state_get_frame: lookup!(c"PyThreadState_GetFrame", OneArg<Obj>),
            frame_get_code: lookup!(c"PyFrame_GetCode", OneArg<Obj>),
            frame_get_back: lookup!(c"PyFrame_GetBack", OneArg<Obj>),
            frame_get_line_number: lookup!(c"PyFrame_GetLineNumber", OneArg<c_int>),
            get_attr_string: lookup!(c"PyObject_GetAttrString", GetAttr),
            unicode_as_utf8_and_size: lookup!(c"PyUnicode_AsUTF8AndSize", AsUtf8),
            err_fetch: lookup!(c"PyErr_Fetch", ErrFetch),
            err_restore: lookup!(c"PyErr_Restore", ErrRestore),
            dec_ref: lookup!(c"Py_DecRef", OneArg<()>),
        })
    }

    /// The thread state to walk if the calling thread holds the GIL, else
    /// NULL.
    ///
    /// # Safety
    /// The API's functions are CPython's; the interpreter is initialized.
    unsafe fn attached_thread_state(&self) -> Obj {
        // SAFETY: each of these may be called on any thread, GIL or not.
        unsafe {
            if (self.gil_check)() == 0 {
                return std::ptr::null_mut();
            }
            match self.current_thread_state {
                Some(f) => f(),
                None => (self.this_thread_state)(),
            }
        }
    }

    /// A string attribute of `obj` as UTF-8, or `None`; leaves the thread's
    /// error indicator as it found it.
    ///
    /// # Safety
    /// The GIL is held and `obj` is a live object.
    unsafe fn str_attr(&self, obj: Obj, name: &CStr) -> Option<String> {
        let (mut t, mut v, mut tb) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        // SAFETY: GIL held (caller); the error indicator is saved and
        // restored around calls that may set it (an allocation may come
        // while an exception is being handled); the attribute reference is
        // released after its UTF-8 buffer, which it owns, is copied.
        unsafe {
            (self.err_fetch)(&mut t, &mut v, &mut tb);
            let attr = (self.get_attr_string)(obj, name.as_ptr());
            let mut text = None;
            if !attr.is_null() {
                let mut len = 0isize;
                let p = (self.unicode_as_utf8_and_size)(attr, &mut len);
                if !p.is_null() && len >= 0 {
                    let bytes = std::slice::from_raw_parts(p.cast::<u8>(), len as usize);
                    text = Some(String::from_utf8_lossy(bytes).into_owned());
                }
                (self.dec_ref)(attr);
            }
            (self.err_restore)(t, v, tb);
            text
        }
    }
}

thread_local! {
    /// Code objects this thread knows to be named already: most frames are
    /// checked here, without the shared lock.
    static SEEN: RefCell<FxHashSet<usize>> = RefCell::new(FxHashSet::default());
    /// Lines by (code object, instruction offset), for codes in the map
    /// (kept alive, so the key keeps its meaning).
    static LINES: RefCell<FxHashMap<(usize, c_int), u32>> = RefCell::new(FxHashMap::default());
}

/// Python frames as a [`FrameSource`]; one per process ([`source`]).
pub struct GilFrames {
    api: Api,
    /// Names of every code object met, by address; each holds a reference.
    codes: Mutex<FxHashMap<usize, Arc<CodeInfo>>>,
}

// SAFETY: the raw function pointers are process-global and callable from any
// thread; the code objects behind the map's keys are only touched with the
// GIL held.
unsafe impl Send for GilFrames {}
// SAFETY: as above.
unsafe impl Sync for GilFrames {}

/// The process's Python frame source, or `None` where no Python runs in the
/// process (the library loaded by a C or Rust program).
pub fn source() -> Option<Arc<GilFrames>> {
    static SOURCE: OnceLock<Option<Arc<GilFrames>>> = OnceLock::new();
    SOURCE
        .get_or_init(|| {
            Api::find().map(|api| {
                Arc::new(GilFrames {
                    api,
                    codes: Mutex::new(FxHashMap::default()),
                })
            })
        })
        .clone()
}

impl GilFrames {
    /// Makes sure `code` (a new reference, which this takes over) is named,
    /// keeping the reference if it is new to the process.
    ///
    /// # Safety
    /// The GIL is held and `code` is a code object.
    unsafe fn note_code(&self, code: Obj) {
        let key = code as usize;
        let seen = SEEN
            .try_with(|s| s.try_borrow().is_ok_and(|s| s.contains(&key)))
            .unwrap_or(false);
        let known = seen || self.lock().contains_key(&key);
        if !known {
            // Named without the lock held: the attribute calls run no Python
            // code, but whatever they might re-enter must not deadlock.
            // SAFETY: forwarded contract.
            let function = unsafe { self.api.str_attr(code, c"co_name") };
            // SAFETY: forwarded contract.
            let file = unsafe { self.api.str_attr(code, c"co_filename") };
            let info = Arc::new(CodeInfo {
                function: function.unwrap_or_else(|| "?".into()),
                file: file.unwrap_or_else(|| "?".into()),
            });
            let mut codes = self.lock();
            if let std::collections::hash_map::Entry::Vacant(e) = codes.entry(key) {
                e.insert(info);
                drop(codes);
                let _ = SEEN.try_with(|s| s.try_borrow_mut().map(|mut s| s.insert(key)));
                // The map keeps the reference: the address stays this code's.
                return;
            }
        } else if !seen {
            let _ = SEEN.try_with(|s| s.try_borrow_mut().map(|mut s| s.insert(key)));
        }
        // SAFETY: GIL held; the map holds its own reference already.
        unsafe { (self.api.dec_ref)(code) };
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FxHashMap<usize, Arc<CodeInfo>>> {
        self.codes.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl GilFrames {
    /// Pushes the frames of `tstate`, innermost first.
    ///
    /// # Safety
    /// The calling thread holds the GIL and `tstate` is its thread state.
    unsafe fn walk(&self, tstate: Obj, sink: &mut FrameSink<'_>) {
        let api = &self.api;
        // SAFETY: GIL held (caller); each reference returned is released
        // (frames) or kept by the code map (new codes), and a walk cut short
        // releases the frame in hand.
        unsafe {
            let mut frame = (api.thread_state_get_frame)(tstate);
            while !frame.is_null() {
                let code = (api.frame_get_code)(frame);
                if code.is_null() {
                    (api.dec_ref)(frame);
                    break;
                }
                let lasti = api.lines.map(|(get_lasti, _)| get_lasti(frame));
                let key = code as usize;
                // Named (and kept alive) first: the line cache's key relies on it.
                self.note_code(code);
                let line = match (api.lines, lasti) {
                    (Some((_, addr2line)), Some(lasti)) => {
                        let cached = LINES
                            .try_with(|l| l.try_borrow().ok()?.get(&(key, lasti)).copied())
                            .ok()
                            .flatten();
                        cached.unwrap_or_else(|| {
                            // `code` is alive: the map holds a reference.
                            let line = addr2line(key as Obj, lasti).max(0) as u32;
                            let _ = LINES.try_with(|l| {
                                l.try_borrow_mut().map(|mut l| l.insert((key, lasti), line))
                            });
                            line
                        })
                    }
                    _ => (api.frame_get_line_number)(frame).max(0) as u32,
                };
                let more = sink.push(key, line);
                let back = if more {
                    (api.frame_get_back)(frame)
                } else {
                    std::ptr::null_mut()
                };
                (api.dec_ref)(frame);
                frame = back;
            }
        }
    }
}

impl FrameSource for GilFrames {
    fn name(&self) -> &str {
        "python"
    }

    fn capture(&self, sink: &mut FrameSink<'_>) {
        let api = &self.api;
        // SAFETY: the functions are CPython's, called once the interpreter
        // is up and not shutting down (taking the GIL while it finalizes can
        // end the thread); the GIL is held for the walk, taken back if this
        // thread has a thread state but released the GIL, and then released
        // again, as PyTorch's own stack capture does.
        unsafe {
            if (api.is_initialized)() == 0 || api.is_finalizing.is_some_and(|f| f() != 0) {
                return;
            }
            let tstate = api.attached_thread_state();
            if !tstate.is_null() {
                self.walk(tstate, sink);
            } else if !(api.this_thread_state)().is_null() {
                // PyTorch releases the GIL around its operators, so
                // `torch.empty` reaches the allocator without it: take it
                // back to read the frames the thread still has. A thread
                // that never ran Python has no thread state and is left
                // alone.
                let gil = (api.gil_ensure)();
                let tstate = api.attached_thread_state();
                if !tstate.is_null() {
                    self.walk(tstate, sink);
                }
                (api.gil_release)(gil);
            }
        }
    }

    fn describe(&self, code: usize) -> Option<CodeInfo> {
        self.lock().get(&code).map(|c| CodeInfo::clone(c))
    }
}
