//! In-process DWARF unwinding with cached rules (Linux, x86_64), through
//! `framehop`.
//!
//! libgcc's unwinder interprets a frame's CFI program on every visit (about
//! 200 ns a frame). framehop turns the CFI row of an address into a small
//! rule once and caches it by address, so a stack seen before costs a cache
//! lookup and a load or two per frame. It reads `.eh_frame_hdr` and
//! `.eh_frame` in place, from the loaded modules' memory, so code built
//! without frame pointers (libtorch, CPython) unwinds as with libgcc.
//!
//! Safety rests on three rules:
//!
//! - stack memory is read only between the capture's own stack pointer and
//!   the top of the current thread's stack, so a wrong rule (or a frame
//!   without unwind information, which framehop walks by frame pointer) ends
//!   the walk instead of faulting;
//! - the unwind tables read are those of modules pinned with
//!   `dlopen(RTLD_NOLOAD)`, so no `dlclose` can unmap them under a walk;
//! - a module list is never changed, only replaced (`Arc`), so threads never
//!   wait on one another on the hot path.

use super::StackBuf;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{
    ExplicitModuleSectionInfo, FrameAddress, Module, MustNotAllocateDuringUnwind, Unwinder,
};
use rustc_hash::FxHashSet;
use std::cell::RefCell;
use std::ffi::{CStr, CString, c_int, c_void};
use std::mem::MaybeUninit;
use std::ops::{Deref, Range};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Rules are evaluated into fixed-size storage: a walk never allocates.
type Policy = MustNotAllocateDuringUnwind;
type Cache = CacheX86_64<Policy>;

/// Unwind steps allowed beyond the requested depth: the recorder's own
/// frames, which are walked and skipped. A bound on the walk whatever the
/// rules say.
const SKIPPED_FRAMES_LIMIT: usize = 32;

/// Bytes of a loaded module's section, read in place.
#[derive(Clone, Copy)]
struct Mapped {
    ptr: *const u8,
    len: usize,
}

impl Default for Mapped {
    fn default() -> Self {
        Mapped {
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            len: 0,
        }
    }
}

// SAFETY: the bytes are read-only loader mappings of pinned modules (see
// `pin`): valid from any thread for the life of the process.
unsafe impl Send for Mapped {}
// SAFETY: as above; nothing writes through the pointer.
unsafe impl Sync for Mapped {}

impl Deref for Mapped {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: see `Send`: the range lies in a mapped, pinned segment.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// One immutable view of the process's modules.
struct Modules {
    unwinder: UnwinderX86_64<Mapped, Policy>,
    /// Executable segments, sorted: an address outside all of them is code
    /// the list does not know (a module loaded since, or JIT code).
    code: Vec<Range<u64>>,
    generation: u64,
}

impl Modules {
    fn knows(&self, address: u64) -> bool {
        let i = self.code.partition_point(|r| r.end <= address);
        self.code.get(i).is_some_and(|r| r.start <= address)
    }
}

/// The current module list, and what is needed to tell when it is stale.
struct Registry {
    current: Option<Arc<Modules>>,
    /// The loader's (loads, unloads) counts when `current` was built.
    counts: (u64, u64),
    /// Link maps already holding a pin of ours (one each).
    pinned: FxHashSet<usize>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    current: None,
    counts: (0, 0),
    pinned: FxHashSet::with_hasher(rustc_hash::FxBuildHasher),
});

/// The generation of `REGISTRY.current`, read without the lock on each
/// capture.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// What one thread keeps between captures: the rule cache is per thread, so
/// the hot path takes no lock.
struct Local {
    modules: Arc<Modules>,
    cache: Box<Cache>,
    /// This thread's stack.
    stack: Range<u64>,
}

/// A thread's unwinder: set up on its first capture, once.
enum State {
    New,
    Ready(Local),
    /// Its stack bounds are unknown: libgcc's unwinder serves it.
    Unavailable,
}

thread_local! {
    static LOCAL: RefCell<State> = const { RefCell::new(State::New) };
}

/// Captures return addresses as [`super::capture`] does. Returns `false`
/// where this unwinder cannot run here (the thread's stack bounds are
/// unknown, the capture is on another stack, the thread is exiting), and the
/// caller falls back to libgcc's unwinder.
#[inline(never)]
pub(super) fn capture(marker: usize, depth: usize, buf: &mut StackBuf) -> bool {
    LOCAL
        .try_with(|local| {
            let Ok(mut state) = local.try_borrow_mut() else {
                return false;
            };
            if let State::New = *state {
                *state = Local::new().map_or(State::Unavailable, State::Ready);
            }
            let State::Ready(local) = &mut *state else {
                return false;
            };
            let start = buf.len;
            for attempt in 0..2 {
                local.update();
                let (ip, sp, bp) = registers();
                // On another stack (a signal's, a fiber's) the bounds do
                // not hold.
                if !local.stack.contains(&sp) {
                    return false;
                }
                buf.len = start;
                let unknown = walk(local, (ip, sp, bp), marker as u64, depth, buf);
                // An address outside every known module: a module loaded
                // since the list was built, most likely. Walk again with a
                // fresh list, once, if the loader's counts moved.
                if !unknown || attempt == 1 || !refresh_if_changed() {
                    break;
                }
            }
            buf.native = buf.len;
            true
        })
        .unwrap_or(false)
}

/// The instruction pointer, stack pointer and frame pointer of the caller.
///
/// Inlined into the walker's frame: the unwinder's first step starts from
/// this very instruction, with the registers as they are there.
#[inline(always)]
fn registers() -> (u64, u64, u64) {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers; touches neither memory nor the stack.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    (ip, sp, bp)
}

/// Walks from `(ip, sp, bp)` and appends up to `depth` return addresses of
/// frames above `marker`. Returns whether it met code outside every known
/// module.
#[inline(always)]
fn walk(
    local: &mut Local,
    (ip, sp, bp): (u64, u64, u64),
    marker: u64,
    depth: usize,
    buf: &mut StackBuf,
) -> bool {
    let top = local.stack.end;
    let mut read_stack = |address: u64| {
        if address >= sp && address <= top - 8 && address.is_multiple_of(8) {
            // SAFETY: an aligned word of this thread's stack, between the
            // live stack pointer and the stack's top: mapped and readable.
            Ok(unsafe { std::ptr::read_volatile(address as *const u64) })
        } else {
            Err(())
        }
    };
    let modules = &*local.modules;
    let cache = &mut *local.cache;
    let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
    let mut frame = FrameAddress::from_instruction_pointer(ip);
    let mut misses = cache.stats().misses();
    let mut unknown = false;
    let end = buf.len + depth;
    for _ in 0..depth + SKIPPED_FRAMES_LIMIT {
        let next = modules
            .unwinder
            .unwind_frame(frame, &mut regs, cache, &mut read_stack);
        // The rule of an address is looked up in the module list only on a
        // cache miss: that is when to check the address is known at all.
        let now = cache.stats().misses();
        if now != misses {
            misses = now;
            unknown |= !modules.knows(frame.address_for_lookup());
        }
        let Ok(Some(return_address)) = next else {
            break;
        };
        let Some(caller) = FrameAddress::from_return_address(return_address) else {
            break;
        };
        frame = caller;
        if regs.sp() <= marker {
            continue;
        }
        buf.words[buf.len] = MaybeUninit::new(return_address as usize);
        buf.len += 1;
        if buf.len >= end {
            break;
        }
    }
    unknown
}

impl Local {
    /// Sets up this thread's unwinder; `None` where its stack is unknown.
    fn new() -> Option<Local> {
        let stack = thread_stack()?;
        let modules = current_modules()?;
        Some(Local {
            modules,
            cache: Box::new(Cache::new_in()),
            stack,
        })
    }

    /// Takes up the current module list if another thread replaced it.
    #[inline(always)]
    fn update(&mut self) {
        if GENERATION.load(Ordering::Acquire) != self.modules.generation
            && let Some(modules) = current_modules()
        {
            self.modules = modules;
        }
    }
}

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// The current module list, built on first use.
fn current_modules() -> Option<Arc<Modules>> {
    if let Some(modules) = registry().current.clone() {
        return Some(modules);
    }
    rebuild();
    registry().current.clone()
}

/// Rebuilds the module list if modules were loaded or unloaded since it was
/// built. Returns whether it did.
#[cold]
fn refresh_if_changed() -> bool {
    let counts = loader_counts();
    let registry = registry();
    if registry.current.is_some() && counts == Some(registry.counts) {
        return false;
    }
    drop(registry);
    rebuild();
    true
}

/// Lists the loaded modules and makes them the current list.
///
/// The registry's lock is not held across calls into the loader: a thread
/// holding the loader's lock (running a library's constructor) may be
/// waiting for it in a capture. Two threads may then rebuild at once; either
/// list is valid, and the counts kept with it make a stale one rebuilt on
/// the next unknown address.
#[cold]
fn rebuild() {
    // The counts first: a module loaded while the list is built makes the
    // next check rebuild again, rather than be missed.
    let counts = loader_counts().unwrap_or_default();
    let mut unwinder = UnwinderX86_64::new();
    let mut code = Vec::new();
    for object in loaded_objects() {
        if !pin(&object) {
            continue;
        }
        code.extend(object.code.iter().cloned());
        if let Some(module) = object.module() {
            unwinder.add_module(module);
        }
    }
    code.sort_by_key(|r| r.start);
    let mut registry = registry();
    let generation = registry.current.as_ref().map_or(0, |m| m.generation) + 1;
    registry.current = Some(Arc::new(Modules {
        unwinder,
        code,
        generation,
    }));
    registry.counts = counts;
    GENERATION.store(generation, Ordering::Release);
}

/// Keeps `object` loaded for good, so that its unwind tables stay mapped
/// while any thread may read them. Returns `false` where it cannot be pinned
/// (it was unloaded meanwhile): it is left out of the list.
fn pin(object: &LoadedObject) -> bool {
    // The main program and the vDSO are never unloaded; dlopen knows neither
    // by name.
    if object.name.is_empty() || object.is_vdso() {
        return true;
    }
    // SAFETY: a NUL-terminated name; RTLD_NOLOAD only takes a reference to
    // an object already loaded, running no constructor.
    let handle = unsafe { libc::dlopen(object.name.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if handle.is_null() {
        return false;
    }
    let mut map: *mut c_void = std::ptr::null_mut();
    // SAFETY: RTLD_DI_LINKMAP writes a `struct link_map *`, whose first
    // field is the load bias `l_addr`.
    let bias = unsafe {
        (libc::dlinfo(handle, libc::RTLD_DI_LINKMAP, (&raw mut map).cast()) == 0 && !map.is_null())
            .then(|| *(map as *const u64))
    };
    // The same name may now be another object: only the one listed counts.
    let same = bias == Some(object.bias);
    // One pin per object is enough.
    if !(same && registry().pinned.insert(map as usize)) {
        // SAFETY: drops the reference taken above.
        unsafe { libc::dlclose(handle) };
    }
    same
}

/// A loaded ELF object, as `dl_iterate_phdr` reports it.
struct LoadedObject {
    name: CString,
    bias: u64,
    /// The span of its loadable segments (absolute addresses).
    span: Range<u64>,
    /// Its executable segments.
    code: Vec<Range<u64>>,
    /// Its loadable segments, to bound `.eh_frame`.
    segments: Vec<Range<u64>>,
    /// Its `PT_GNU_EH_FRAME` segment: `.eh_frame_hdr`.
    eh_frame_hdr: Option<Range<u64>>,
}

impl LoadedObject {
    fn is_vdso(&self) -> bool {
        // SAFETY: getauxval reads the auxiliary vector.
        let vdso = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
        vdso != 0 && self.span.contains(&vdso)
    }

    /// The framehop module of this object (pinned by now), with its unwind
    /// tables read in place; `None` without `.eh_frame_hdr`, where framehop
    /// walks by frame pointer.
    fn module(&self) -> Option<Module<Mapped>> {
        let hdr = self.eh_frame_hdr.clone()?;
        // SAFETY: the segment is mapped for as long as the object is loaded.
        let eh_frame = unsafe { eh_frame_address(hdr.start, hdr.end)? };
        // `.eh_frame` has no length of its own outside the section headers,
        // which are not loaded: its segment's end bounds it.
        let segment = self.segments.iter().find(|s| s.contains(&eh_frame))?;
        let mapped = |r: &Range<u64>| Mapped {
            ptr: r.start as *const u8,
            len: (r.end - r.start) as usize,
        };
        let svma = |r: &Range<u64>| r.start - self.bias..r.end - self.bias;
        let eh_frame = eh_frame..segment.end;
        let text = self.code.first().map(svma);
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: text,
            eh_frame_svma: Some(svma(&eh_frame)),
            eh_frame: Some(mapped(&eh_frame)),
            eh_frame_hdr_svma: Some(svma(&hdr)),
            eh_frame_hdr: Some(mapped(&hdr)),
            ..Default::default()
        };
        let name = self.name.to_string_lossy().into_owned();
        Some(Module::new(name, self.span.clone(), self.bias, info))
    }
}

/// The address of `.eh_frame`, read from the header of `.eh_frame_hdr`
/// (`start..end`): version 1, then the encoding of the pointer, then the
/// pointer.
///
/// # Safety
///
/// `start..end` must be mapped and readable.
unsafe fn eh_frame_address(start: u64, end: u64) -> Option<u64> {
    const ABSPTR: u8 = 0x00;
    const UDATA4: u8 = 0x03;
    const UDATA8: u8 = 0x04;
    const SDATA4: u8 = 0x0b;
    const SDATA8: u8 = 0x0c;
    const PCREL: u8 = 0x10;
    const DATAREL: u8 = 0x30;
    if end < start + 4 {
        return None;
    }
    // SAFETY: within `start..end`, per the caller; lengths checked.
    unsafe {
        let hdr = start as *const u8;
        if *hdr != 1 {
            return None;
        }
        let encoding = *hdr.add(1);
        let field = hdr.add(4);
        let size = match encoding & 0x0f {
            ABSPTR | UDATA8 | SDATA8 => 8,
            UDATA4 | SDATA4 => 4,
            _ => return None,
        };
        if end < start + 4 + size {
            return None;
        }
        let value = match encoding & 0x0f {
            UDATA4 => u64::from(field.cast::<u32>().read_unaligned()),
            SDATA4 => field.cast::<i32>().read_unaligned() as i64 as u64,
            _ => field.cast::<u64>().read_unaligned(),
        };
        match encoding & 0x70 {
            0 => Some(value),
            PCREL => Some((start + 4).wrapping_add(value)),
            DATAREL => Some(start.wrapping_add(value)),
            _ => None,
        }
    }
}

/// The loaded objects and their segments.
fn loaded_objects() -> Vec<LoadedObject> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        out: *mut c_void,
    ) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid entry, and `out` is the
        // vector below; the callback does not unwind (nothing in it panics
        // but allocation failure, which aborts).
        let (info, out) = unsafe { (&*info, &mut *out.cast::<Vec<LoadedObject>>()) };
        let name = if info.dlpi_name.is_null() {
            CString::default()
        } else {
            // SAFETY: a NUL-terminated name owned by the loader.
            unsafe { CStr::from_ptr(info.dlpi_name) }.to_owned()
        };
        let bias = info.dlpi_addr;
        let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
            &[]
        } else {
            // SAFETY: the loader's program headers of this object.
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
        };
        let range = |p: &libc::Elf64_Phdr| {
            let start = bias.wrapping_add(p.p_vaddr);
            start..start.wrapping_add(p.p_memsz)
        };
        let mut object = LoadedObject {
            name,
            bias,
            span: 0..0,
            code: Vec::new(),
            segments: Vec::new(),
            eh_frame_hdr: None,
        };
        for p in phdrs {
            match p.p_type {
                libc::PT_LOAD => {
                    let r = range(p);
                    if p.p_flags & libc::PF_X != 0 {
                        object.code.push(r.clone());
                    }
                    object.segments.push(r);
                }
                libc::PT_GNU_EH_FRAME => object.eh_frame_hdr = Some(range(p)),
                _ => {}
            }
        }
        let starts = object.segments.iter().map(|s| s.start);
        let ends = object.segments.iter().map(|s| s.end);
        if let (Some(start), Some(end)) = (starts.min(), ends.max()) {
            object.span = start..end;
            out.push(object);
        }
        0
    }
    let mut objects: Vec<LoadedObject> = Vec::new();
    // SAFETY: the callback matches dl_iterate_phdr's contract and only
    // touches `objects`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&raw mut objects).cast()) };
    objects
}

/// The loader's counts of objects loaded and unloaded so far; `None` where
/// it does not report them.
fn loader_counts() -> Option<(u64, u64)> {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        size: usize,
        out: *mut c_void,
    ) -> c_int {
        let end = std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + size_of::<u64>();
        if size >= end {
            // SAFETY: a valid entry, large enough to hold both counts.
            let info = unsafe { &*info };
            // SAFETY: `out` is the option below.
            unsafe { *out.cast::<Option<(u64, u64)>>() = Some((info.dlpi_adds, info.dlpi_subs)) };
        }
        1
    }
    let mut counts: Option<(u64, u64)> = None;
    // SAFETY: as in `loaded_objects`; the callback stops after one entry.
    unsafe { libc::dl_iterate_phdr(Some(first), (&raw mut counts).cast()) };
    counts
}

/// The calling thread's stack.
fn thread_stack() -> Option<Range<u64>> {
    let mut attr = MaybeUninit::<libc::pthread_attr_t>::uninit();
    // SAFETY: pthread_getattr_np initializes `attr` on success, which is
    // destroyed after use; getstack writes the two out-parameters.
    unsafe {
        if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
            return None;
        }
        let mut low: *mut c_void = std::ptr::null_mut();
        let mut size = 0usize;
        let ok = libc::pthread_attr_getstack(attr.as_ptr(), &mut low, &mut size) == 0;
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        (ok && !low.is_null()).then(|| low as u64..low as u64 + size as u64)
    }
}

#[cfg(test)]
mod tests;
