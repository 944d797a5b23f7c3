//! Where CPython keeps a thread's frames, per minor version: the byte
//! offsets [`NoGilFrames`](super::nogil::NoGilFrames) reads them at.
//!
//! These are CPython's internal structures (`PyThreadState`,
//! `_PyInterpreterFrame`, `PyFrameObject`, `PyCodeObject`, `PyASCIIObject`),
//! fixed within a minor version of a default (GIL, non-debug, 64-bit) build.
//! The numbers come from `scripts/python-frame-layout.c`, compiled against
//! each version's headers (the script says how); a layout is also checked
//! against the running interpreter before use (see `vramtrace.start`), so
//! a build that differs (free-threaded, debug, a patched interpreter) gets no
//! Python frames rather than wrong ones.

/// How a thread state leads to its innermost frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Current {
    /// `tstate->frame` (3.10: a `PyFrameObject`).
    Direct(usize),
    /// `tstate->cframe->current_frame` (3.11, 3.12).
    ThroughCFrame { cframe: usize, current_frame: usize },
}

/// How a frame gives its instruction offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lasti {
    /// An `int` field counting code units (3.10's `f_lasti`).
    Field(usize),
    /// A pointer to an instruction (3.11/3.12 `prev_instr`, 3.13
    /// `instr_ptr`), counted from the code object's bytecode, which starts
    /// `code_adaptive` bytes into the code object.
    Pointer { offset: usize, code_adaptive: usize },
}

/// The offsets of one CPython minor version. See the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub version: (u32, u32),
    pub current: Current,
    /// The frame's code object (`f_code`; 3.13's `f_executable`).
    pub frame_code: usize,
    /// The calling frame (`f_back`, `previous`).
    pub frame_previous: usize,
    pub frame_lasti: Lasti,
    /// The frame's `owner` byte, where frames owned by the C stack (entry
    /// shims, 3.12 on) are to be skipped.
    pub frame_owner: Option<usize>,
    pub code_name: usize,
    pub code_filename: usize,
    pub code_linetable: usize,
    /// `sizeof(PyASCIIObject)`: where a compact ASCII string's text starts.
    pub ascii_size: usize,
    /// `sizeof(PyCompactUnicodeObject)`: where other compact strings' text
    /// starts.
    pub compact_size: usize,
}

/// The `owner` value of a frame owned by the C stack (3.12, 3.13).
pub const FRAME_OWNED_BY_CSTACK: u8 = 3;

/// `PyObject`'s `ob_type`, in every default build.
pub const OB_TYPE: usize = 8;
/// `PyASCIIObject`'s `length` (code points).
pub const UNICODE_LENGTH: usize = 16;
/// Offset of a `str`'s cached hash (`-1` until computed), in every
/// version read.
pub const UNICODE_HASH: usize = 24;
/// `PyASCIIObject`'s `state` bit field: `interned:2, kind:3, compact:1,
/// ascii:1` from the low bit up, in every supported version.
pub const UNICODE_STATE: usize = 32;

const LAYOUTS: [Layout; 4] = [
    Layout {
        version: (3, 10),
        current: Current::Direct(24),
        frame_code: 32,
        frame_previous: 24,
        frame_lasti: Lasti::Field(96),
        frame_owner: None,
        code_name: 112,
        code_filename: 104,
        code_linetable: 120,
        ascii_size: 48,
        compact_size: 72,
    },
    Layout {
        version: (3, 11),
        current: Current::ThroughCFrame {
            cframe: 56,
            current_frame: 8,
        },
        frame_code: 32,
        frame_previous: 48,
        frame_lasti: Lasti::Pointer {
            offset: 56,
            code_adaptive: 184,
        },
        frame_owner: None,
        code_name: 120,
        code_filename: 112,
        code_linetable: 136,
        ascii_size: 48,
        compact_size: 72,
    },
    Layout {
        version: (3, 12),
        current: Current::ThroughCFrame {
            cframe: 56,
            current_frame: 0,
        },
        frame_code: 0,
        frame_previous: 8,
        frame_lasti: Lasti::Pointer {
            offset: 56,
            code_adaptive: 192,
        },
        frame_owner: Some(70),
        code_name: 120,
        code_filename: 112,
        code_linetable: 136,
        ascii_size: 40,
        compact_size: 56,
    },
    Layout {
        version: (3, 13),
        current: Current::Direct(72),
        frame_code: 0,
        frame_previous: 8,
        frame_lasti: Lasti::Pointer {
            offset: 56,
            code_adaptive: 200,
        },
        frame_owner: Some(70),
        code_name: 120,
        code_filename: 112,
        code_linetable: 136,
        ascii_size: 40,
        compact_size: 56,
    },
];

/// The layout of CPython `major.minor`, if known.
pub fn for_version(major: u32, minor: u32) -> Option<&'static Layout> {
    LAYOUTS.iter().find(|l| l.version == (major, minor))
}

/// The versions with a layout, for messages.
pub fn known_versions() -> String {
    let v: Vec<String> = LAYOUTS
        .iter()
        .map(|l| format!("{}.{}", l.version.0, l.version.1))
        .collect();
    v.join(", ")
}

/// `major.minor` of a `Py_GetVersion()` text ("3.12.3 (main, ...)").
pub fn parse_version(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_version("3.12.3 (main, Apr 10 2024)"), Some((3, 12)));
        assert_eq!(parse_version("3.10.13"), Some((3, 10)));
        assert_eq!(parse_version("x"), None);
        assert!(for_version(3, 12).is_some());
        assert!(for_version(3, 14).is_none());
        assert_eq!(known_versions(), "3.10, 3.11, 3.12, 3.13");
    }
}
