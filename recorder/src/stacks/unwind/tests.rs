//! The caching unwinder against libgcc's. Meaningful in an optimized build
//! (`cargo test --release`), where Rust code has no frame pointers and only
//! DWARF unwind information describes the frames.

use super::super::{MAX_STACK_DEPTH, capture_libgcc};
use super::*;
use rustc_hash::FxHashMap;
use std::hint::black_box;

/// Runs `f` `depth` calls deeper; a frame of its own each call.
#[inline(never)]
fn recurse(depth: u32, f: &mut dyn FnMut()) -> u32 {
    if depth == 0 {
        f();
        0
    } else {
        // Work after the call keeps it from becoming a tail call.
        black_box(recurse(black_box(depth - 1), f)) + 1
    }
}

/// Captures the caller's stack with both unwinders, from the same frame.
#[inline(never)]
fn capture_both(depth: usize) -> (Vec<usize>, Vec<usize>) {
    let marker = black_box(0u8);
    let marker = &marker as *const u8 as usize;
    let mut cached = StackBuf::new();
    assert!(capture(marker, depth, &mut cached));
    let mut libgcc = StackBuf::new();
    capture_libgcc(marker, depth, &mut libgcc);
    (cached.as_slice().to_vec(), libgcc.as_slice().to_vec())
}

/// The stacks of `capture_both` run `depth` calls deep, captured twice (the
/// second time from the rule cache).
fn deep_stacks(depth: u32, max: usize) -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut stacks = Vec::new();
    recurse(depth, &mut || {
        for _ in 0..2 {
            stacks.push(capture_both(max));
        }
    });
    stacks
}

/// How often the most frequent address occurs: the recursion's return
/// address, once per level.
fn most_repeated(ips: &[usize]) -> usize {
    let mut counts = FxHashMap::default();
    for &ip in ips {
        *counts.entry(ip).or_insert(0usize) += 1;
    }
    counts.into_values().max().unwrap_or(0)
}

#[test]
fn agrees_with_libgcc_on_a_whole_stack() {
    for (cached, libgcc) in deep_stacks(40, MAX_STACK_DEPTH) {
        assert!(cached.len() < MAX_STACK_DEPTH, "{} frames", cached.len());
        assert_eq!(cached, libgcc);
        assert!(most_repeated(&cached) >= 40);
    }
}

#[test]
fn agrees_with_libgcc_up_to_the_depth_limit() {
    for (cached, libgcc) in deep_stacks(300, MAX_STACK_DEPTH) {
        assert_eq!(cached.len(), MAX_STACK_DEPTH);
        assert_eq!(cached, libgcc);
        assert!(most_repeated(&cached) >= MAX_STACK_DEPTH - 2);
    }
    for (cached, libgcc) in deep_stacks(50, 7) {
        assert_eq!(cached.len(), 7);
        assert_eq!(cached, libgcc);
    }
    let mut none = StackBuf::new();
    super::super::capture(0, 0, &mut none);
    assert!(none.as_slice().is_empty());
}

#[test]
fn agrees_with_libgcc_on_other_threads() {
    let threads: Vec<_> = (0..4)
        .map(|i| std::thread::spawn(move || deep_stacks(20 + i * 10, MAX_STACK_DEPTH)))
        .collect();
    for thread in threads {
        for (cached, libgcc) in thread.join().unwrap() {
            assert!(!cached.is_empty());
            assert_eq!(cached, libgcc);
        }
    }
}

thread_local! {
    static FROM_CALLBACK: std::cell::RefCell<Option<(Vec<usize>, Vec<usize>)>> =
        const { std::cell::RefCell::new(None) };
}

#[test]
fn walks_out_of_libc_callbacks() {
    // qsort calls back into Rust: a frame of libc's own (built without
    // frame pointers) lies on the stack, unwound through its .eh_frame.
    extern "C" fn compare(a: *const c_void, b: *const c_void) -> std::ffi::c_int {
        FROM_CALLBACK.with(|stacks| {
            let mut stacks = stacks.borrow_mut();
            if stacks.is_none() {
                *stacks = Some(capture_both(MAX_STACK_DEPTH));
            }
        });
        // SAFETY: qsort passes pointers to two elements of the array below.
        unsafe { (*a.cast::<u32>()).cmp(&*b.cast::<u32>()) as std::ffi::c_int }
    }
    let mut values = [3u32, 1, 2];
    // SAFETY: a valid array, its length and element size, and a comparison
    // that keeps no pointer.
    unsafe { libc::qsort(values.as_mut_ptr().cast(), 3, 4, Some(compare)) };
    assert_eq!(values, [1, 2, 3]);
    let (cached, libgcc) = FROM_CALLBACK.with(|s| s.borrow_mut().take()).unwrap();
    assert!(cached.len() > 3, "{cached:x?}");
    assert_eq!(cached, libgcc);
}

thread_local! {
    static FROM_ZLIB: std::cell::RefCell<Option<(Vec<usize>, Vec<usize>)>> =
        const { std::cell::RefCell::new(None) };
}

/// zlib's `z_stream` (x86_64 layout), for its allocator callbacks.
#[repr(C)]
struct ZStream {
    next_in: *const u8,
    avail_in: u32,
    total_in: u64,
    next_out: *mut u8,
    avail_out: u32,
    total_out: u64,
    msg: *const std::ffi::c_char,
    state: *mut c_void,
    zalloc: extern "C" fn(*mut c_void, u32, u32) -> *mut c_void,
    zfree: extern "C" fn(*mut c_void, *mut c_void),
    opaque: *mut c_void,
    data_type: std::ffi::c_int,
    adler: u64,
    reserved: u64,
}

#[test]
fn finds_modules_loaded_after_the_first_capture() {
    extern "C" fn zalloc(_: *mut c_void, items: u32, size: u32) -> *mut c_void {
        FROM_ZLIB.with(|stacks| {
            let mut stacks = stacks.borrow_mut();
            if stacks.is_none() {
                *stacks = Some(capture_both(MAX_STACK_DEPTH));
            }
        });
        // SAFETY: plain allocation, freed by `zfree`.
        unsafe { libc::calloc(items as usize, size as usize) }
    }
    extern "C" fn zfree(_: *mut c_void, p: *mut c_void) {
        // SAFETY: `p` came from `zalloc`.
        unsafe { libc::free(p) }
    }
    // The module list exists before zlib is loaded.
    drop(capture_both(8));
    // SAFETY: loads zlib (no constructors of note); looks up two symbols
    // whose C types are those given to them below.
    let (init, end) = unsafe {
        let lib = libc::dlopen(c"libz.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if lib.is_null() {
            eprintln!("libz.so.1 not found: skipped");
            return;
        }
        let version = libc::dlsym(lib, c"zlibVersion".as_ptr());
        let init = libc::dlsym(lib, c"deflateInit_".as_ptr());
        let end = libc::dlsym(lib, c"deflateEnd".as_ptr());
        assert!(!version.is_null() && !init.is_null() && !end.is_null());
        let version: extern "C" fn() -> *const std::ffi::c_char = std::mem::transmute(version);
        let init: extern "C" fn(
            *mut ZStream,
            std::ffi::c_int,
            *const std::ffi::c_char,
            std::ffi::c_int,
        ) -> std::ffi::c_int = std::mem::transmute(init);
        let end: extern "C" fn(*mut ZStream) -> std::ffi::c_int = std::mem::transmute(end);
        (
            move |s: *mut ZStream| init(s, 6, version(), size_of::<ZStream>() as std::ffi::c_int),
            end,
        )
    };
    let mut stream = ZStream {
        next_in: std::ptr::null(),
        avail_in: 0,
        total_in: 0,
        next_out: std::ptr::null_mut(),
        avail_out: 0,
        total_out: 0,
        msg: std::ptr::null(),
        state: std::ptr::null_mut(),
        zalloc,
        zfree,
        opaque: std::ptr::null_mut(),
        data_type: 0,
        adler: 0,
        reserved: 0,
    };
    // deflateInit_ calls `zalloc` from inside zlib: its frame is in a module
    // the list did not have.
    assert_eq!(init(&mut stream), 0);
    assert_eq!(end(&mut stream), 0);
    let (cached, libgcc) = FROM_ZLIB.with(|s| s.borrow_mut().take()).unwrap();
    assert!(cached.len() > 3, "{cached:x?}");
    assert_eq!(cached, libgcc);
}
