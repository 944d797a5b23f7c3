//! The Rust grammars of sizes and recording bounds, for the Python package:
//! its `keep_last` and its pytest plugin's limits read them here, so that a
//! value means the same in Python, in `VRAMTRACE_KEEP_LAST` and on the
//! analyzer's command line (`vramtrace_units`).

use crate::{c_str, write_c};
use recorder::KeepLast;
use std::ffi::{c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Reads `text` as a size (`64MiB`, `1.5 GB`, `512B`: the grammar of
/// `vramtrace_units::parse_size`) into `*bytes`. Returns 0; or -1, with
/// `*bytes` untouched and why in `err` (NUL-terminated, cut to `len`
/// bytes), when it is not a size.
///
/// # Safety
/// `text` is NULL or a valid NUL-terminated string; `bytes` is NULL or
/// points to a writable `uint64_t`; `err` is NULL or points to `len`
/// writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_parse_size(
    text: *const c_char,
    bytes: *mut u64,
    err: *mut c_char,
    len: usize,
) -> c_int {
    // SAFETY: forwarded contract.
    let text = unsafe { c_str(text) };
    let parsed = catch_unwind(AssertUnwindSafe(|| vramtrace_units::parse_size(&text)));
    let why = match parsed {
        Ok(Ok(n)) if !bytes.is_null() => {
            // SAFETY: the caller's contract: a writable `uint64_t`.
            unsafe { *bytes = n };
            return 0;
        }
        Ok(Ok(_)) => "nowhere to write the size (a NULL pointer)".to_string(),
        Ok(Err(e)) => e.to_string(),
        Err(_) => "internal error (panic) in vramtrace_parse_size".to_string(),
    };
    // SAFETY: forwarded contract.
    unsafe { write_c(&why, err, len) };
    -1
}

/// Checks `text` as the recorder reads `VRAMTRACE_KEEP_LAST` (a size of at
/// least 1 MiB, or a duration of at least 1 s: `50MiB`, `10min`). Returns
/// 0; or -1, with why in `err` (NUL-terminated, cut to `len` bytes).
///
/// # Safety
/// `text` is NULL or a valid NUL-terminated string; `err` is NULL or points
/// to `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn vramtrace_check_keep_last(
    text: *const c_char,
    err: *mut c_char,
    len: usize,
) -> c_int {
    // SAFETY: forwarded contract.
    let text = unsafe { c_str(text) };
    let why = match catch_unwind(AssertUnwindSafe(|| text.parse::<KeepLast>())) {
        Ok(Ok(_)) => return 0,
        Ok(Err(why)) => why,
        Err(_) => "internal error (panic) in vramtrace_check_keep_last".to_string(),
    };
    // SAFETY: forwarded contract.
    unsafe { write_c(&why, err, len) };
    -1
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn parse(text: &str) -> Result<u64, String> {
        let text = CString::new(text).unwrap();
        let mut bytes = 0u64;
        let mut err = [0 as c_char; 128];
        // SAFETY: a valid string, a writable u64 and 128 writable bytes.
        let rc = unsafe { vramtrace_parse_size(text.as_ptr(), &mut bytes, err.as_mut_ptr(), 128) };
        if rc == 0 {
            Ok(bytes)
        } else {
            // SAFETY: `write_c` wrote a NUL-terminated string.
            Err(unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) }
                .to_string_lossy()
                .into_owned())
        }
    }

    #[test]
    fn sizes_read_as_the_analyzer_reads_them() {
        assert_eq!(parse("2 GiB"), Ok(2 << 30));
        assert_eq!(parse("1.5gb"), Ok(1_500_000_000));
        assert_eq!(parse("512M"), Ok(512 << 20));
        assert!(parse("2").unwrap_err().contains("needs a unit"));
        assert!(
            parse("3 parsecs")
                .unwrap_err()
                .contains("unknown size unit 'parsecs'")
        );
        // A message longer than the buffer is cut, still NUL-terminated.
        let text = CString::new("x".repeat(300)).unwrap();
        let mut err = [1 as c_char; 8];
        // SAFETY: a valid string and 8 writable bytes; NULL for the size.
        let rc = unsafe {
            vramtrace_parse_size(text.as_ptr(), std::ptr::null_mut(), err.as_mut_ptr(), 8)
        };
        assert_eq!((rc, err[7]), (-1, 0));
    }

    #[test]
    fn keep_last_is_checked_as_the_recorder_reads_it() {
        let check = |t: &str| {
            let text = CString::new(t).unwrap();
            let mut err = [0 as c_char; 256];
            // SAFETY: a valid string and 256 writable bytes.
            let rc = unsafe { vramtrace_check_keep_last(text.as_ptr(), err.as_mut_ptr(), 256) };
            // SAFETY: NUL-terminated (zeroed, or written by `write_c`).
            let why = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) };
            (rc, why.to_string_lossy().into_owned())
        };
        assert_eq!(check("50MiB").0, 0);
        assert_eq!(check("10m").0, 0);
        assert!(check("512KiB").1.contains("the least is 1MiB"));
        assert!(check("5 parsecs").1.contains("expected a size"));
    }
}
