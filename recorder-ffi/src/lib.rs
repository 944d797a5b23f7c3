//! `libvramtrace_recorder.so`: vramtrace's PyTorch recording behind a C
//! ABI, driven by the `vramtrace` Python package. Two modes:
//!
//! - **Observer** ([`observe`], the default): PyTorch's own caching
//!   allocator keeps running unchanged; a small C++ shim, built against the
//!   installed torch, attaches an allocator trace tracker and hands every
//!   entry to [`observe::vramtrace_torch_sink`]'s functions, which record
//!   them per device with an [`Observer`](recorder::Observer).
//! - **Replacement** ([`replace`]): the library *is* the allocator, through
//!   PyTorch's pluggable-allocator hook, running vramtrace's caching
//!   allocator on the GPU: for running a program under another allocator
//!   setting for real.
//!
//! Either way each CUDA device gets its own trace file. Phases and
//! annotations ([`traces`]) go to every device's trace; traces are finished
//! (footer written) at process exit and when SIGTERM or SIGINT would kill
//! the process.
//!
//! No function here lets a Rust panic out: each catches it, reports it on
//! standard error and fails the call.

use recorder::StackMode;
use recorder::format::Category;
use std::ffi::{CStr, c_char, c_int};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

pub mod observe;
pub mod python;
pub mod replace;
pub mod traces;
pub mod units;

/// Devices a process may record (CUDA ordinals below this).
const MAX_DEVICES: usize = 64;

/// Reports a problem on standard error, the only channel a C caller that
/// ignores return values is sure to see. At most 20 reports per process, so
/// a repeated failure cannot flood the output.
fn report(msg: &str) {
    static COUNT: AtomicU32 = AtomicU32::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    if n < 20 {
        eprintln!("vramtrace: {msg}");
    } else if n == 20 {
        eprintln!("vramtrace: further messages suppressed");
    }
}

/// Expands `VRAMTRACE_OUT`'s pattern for `device`. `first` says whether this
/// is the first device the process records.
fn trace_path(pattern: &str, device: u32, first: bool, pid: u32, rank: &str) -> PathBuf {
    let mut out = String::new();
    let mut has_device = false;
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&pid.to_string()),
            Some('r') => out.push_str(rank),
            Some('d') => {
                has_device = true;
                out.push_str(&device.to_string());
            }
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    if has_device || first {
        return PathBuf::from(out);
    }
    let path = Path::new(&out);
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
    let name = match (stem, path.extension()) {
        (Some(stem), Some(ext)) => format!("{stem}.dev{device}.{}", ext.to_string_lossy()),
        _ => format!("{out}.dev{device}"),
    };
    path.with_file_name(name)
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Reads `VRAMTRACE_STACKS`: the native stack mode, and whether Python
/// frames are wanted.
fn stack_setting(value: Option<&str>) -> Result<(StackMode, bool), String> {
    match value.map(str::trim) {
        None | Some("python") => Ok((StackMode::None, true)),
        Some("none") => Ok((StackMode::None, false)),
        Some("native") => Ok((StackMode::Native, false)),
        Some("all") => Ok((StackMode::Native, true)),
        Some(other) => Err(format!(
            "invalid VRAMTRACE_STACKS {other:?}: expected python, native, all or none"
        )),
    }
}

/// Reads a C string argument; NULL reads as empty.
///
/// # Safety
/// `s` is NULL or a valid NUL-terminated string.
unsafe fn c_str(s: *const c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

/// Writes `text` to a C caller's buffer of `len` bytes, cut to fit and
/// NUL-terminated (nothing when `out` is NULL or `len` is 0).
///
/// # Safety
/// `out` is NULL or points to `len` writable bytes.
unsafe fn write_c(text: &str, out: *mut c_char, len: usize) {
    if out.is_null() || len == 0 {
        return;
    }
    let n = text.len().min(len - 1);
    // SAFETY: the caller's contract: `len` writable bytes; n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), out.cast::<u8>(), n);
        *out.add(n) = 0;
    }
}

/// A C caller's tags: `count` addresses and as many category codes. `None`
/// when a pointer is NULL (with `count` > 0) or a code is not a
/// [`Category`]'s (then nothing is recorded).
///
/// # Safety
/// `addrs` and `codes` are NULL or point to `count` readable values each,
/// valid for `'a`.
unsafe fn tag_arrays<'a>(
    addrs: *const u64,
    codes: *const u8,
    count: usize,
) -> Option<impl Iterator<Item = (u64, Category)> + 'a> {
    let (addrs, codes): (&[u64], &[u8]) = if count == 0 {
        (&[], &[])
    } else if addrs.is_null() || codes.is_null() {
        return None;
    } else {
        // SAFETY: the caller's contract.
        unsafe {
            (
                std::slice::from_raw_parts(addrs, count),
                std::slice::from_raw_parts(codes, count),
            )
        }
    };
    if codes.iter().any(|&c| Category::from_code(c).is_none()) {
        return None;
    }
    Some(
        addrs
            .iter()
            .zip(codes)
            .map(|(&a, &c)| (a, Category::from_code(c).unwrap_or(Category::Other))),
    )
}

/// What a C caller's user tag names: a built-in category (the name of one,
/// as `vramtrace_format::Category::name` spells it, is recorded as a plain
/// tag) or a category of the program's own.
pub(crate) enum TagName {
    Builtin(Category),
    Own(String),
}

impl TagName {
    /// Records `addrs` as holding this category in `trace`; the number
    /// recorded, as the C functions return it.
    pub(crate) fn record(self, trace: &impl recorder::Trace, addrs: &[u64]) -> c_int {
        let n = match self {
            TagName::Builtin(c) => trace.tag_all(addrs.iter().map(|&a| (a, c))),
            TagName::Own(name) => trace.tag_user(&name, addrs.iter().copied()),
        };
        c_int::try_from(n).unwrap_or(c_int::MAX)
    }
}

/// A C caller's user tags: a category name and `count` addresses. `None`
/// when a pointer is NULL (with `count` > 0 for `addrs`) or the name is not
/// one [`recorder::format::user_category_name_ok`] accepts.
///
/// # Safety
/// `name` is NULL or a valid NUL-terminated string; `addrs` is NULL or
/// points to `count` readable values, valid for `'a`.
unsafe fn user_tag_args<'a>(
    name: *const c_char,
    addrs: *const u64,
    count: usize,
) -> Option<(TagName, &'a [u64])> {
    if name.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    let name = unsafe { c_str(name) };
    let addrs: &[u64] = if count == 0 {
        &[]
    } else if addrs.is_null() {
        return None;
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(addrs, count) }
    };
    if let Some(c) = Category::ALL.into_iter().find(|c| c.name() == name) {
        return Some((TagName::Builtin(c), addrs));
    }
    recorder::format::user_category_name_ok(&name).then_some((TagName::Own(name), addrs))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held by tests that use the process-wide state (traces, slots), which
    /// the test harness would otherwise share between threads.
    pub(crate) static GLOBALS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn trace_names() {
        let p = |pat: &str, dev, first| trace_path(pat, dev, first, 42, "3");
        assert_eq!(
            p("vramtrace-%p.vtrace", 0, true),
            PathBuf::from("vramtrace-42.vtrace")
        );
        assert_eq!(p("out/r%r.vtrace", 5, true), PathBuf::from("out/r3.vtrace"));
        assert_eq!(
            p("out/r%r.vtrace", 1, false),
            PathBuf::from("out/r3.dev1.vtrace")
        );
        assert_eq!(p("t-%d.vtrace", 2, false), PathBuf::from("t-2.vtrace"));
        assert_eq!(p("trace", 2, false), PathBuf::from("trace.dev2"));
        assert_eq!(p("100%%-%x%", 0, true), PathBuf::from("100%-%x%"));
    }

    #[test]
    fn stack_settings() {
        assert_eq!(stack_setting(None), Ok((StackMode::None, true)));
        assert_eq!(stack_setting(Some(" python")), Ok((StackMode::None, true)));
        assert_eq!(stack_setting(Some("none")), Ok((StackMode::None, false)));
        assert_eq!(
            stack_setting(Some("native")),
            Ok((StackMode::Native, false))
        );
        assert_eq!(stack_setting(Some("all")), Ok((StackMode::Native, true)));
        assert!(
            stack_setting(Some("pyhton"))
                .unwrap_err()
                .contains("python, native")
        );
    }
}
