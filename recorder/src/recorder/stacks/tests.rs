//! The caching unwinder against libgcc's. Meaningful in an optimized build
//! (`cargo test --release`), where Rust code has no frame pointers and only
//! DWARF unwind information describes the frames.

use super::*;
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
    assert!(unwind::capture(marker, depth, &mut cached));
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
