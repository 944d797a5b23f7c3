"""Finding and loading ``libvramtrace_recorder.so``, with the C signatures of
the functions the package calls (recorder-ffi/src)."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

LIBRARY_NAME = "libvramtrace_recorder.so"

_lib: ctypes.CDLL | None = None


class VramtraceError(RuntimeError):
    """vramtrace could not be set up."""


def library_path() -> Path:
    """The path of ``libvramtrace_recorder.so`` this package would load:
    ``VRAMTRACE_LIB`` if set, else the one installed inside this package
    (``pip install``), else one built in the source tree it sits in."""
    env = os.environ.get("VRAMTRACE_LIB")
    if env:
        path = Path(env)
        if not path.is_file():
            raise VramtraceError(f"VRAMTRACE_LIB={env} is not a file")
        return path
    here = Path(__file__).resolve().parent
    candidates = [here / LIBRARY_NAME, here.parent / LIBRARY_NAME]
    # A source checkout: python/vramtrace -> <workspace>/target/release.
    for parent in here.parents:
        candidates.append(parent / "target" / "release" / LIBRARY_NAME)
    for path in candidates:
        if path.is_file():
            return path
    raise VramtraceError(
        f"{LIBRARY_NAME} not found: install vramtrace with `pip install .` "
        "from its source tree, or build it with `cargo build --release -p "
        "vramtrace-recorder-ffi`, or set VRAMTRACE_LIB to its path"
    )


_SIGNATURES = {
    # traces.rs: both modes
    "vramtrace_phase_begin": ([ctypes.c_char_p], None),
    "vramtrace_phase_end": ([], ctypes.c_int),
    "vramtrace_phase_end_named": ([ctypes.c_char_p], ctypes.c_int),
    "vramtrace_annotate": ([ctypes.c_char_p, ctypes.c_char_p], None),
    "vramtrace_flush": ([], ctypes.c_int),
    "vramtrace_finish": ([], ctypes.c_int),
    "vramtrace_device_count": ([], ctypes.c_int),
    # path (NULL: beside each trace), out, length: the kept windows dumped
    "vramtrace_dump": ([ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int),
    # units.rs: text, uint64_t* out, error out, its length (vramtrace-units' grammar)
    "vramtrace_parse_size": ([ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64), ctypes.c_char_p,
                              ctypes.c_size_t], ctypes.c_int),
    # text, error out, its length: VRAMTRACE_KEEP_LAST's grammar and bounds
    "vramtrace_check_keep_last": ([ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t],
                                  ctypes.c_int),
    # replace.rs
    "vramtrace_empty_cache": ([], None),
    "vramtrace_memory_stats": ([ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)], ctypes.c_int),
    "vramtrace_tag": ([ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t],
                      ctypes.c_int),
    # device, name, addresses (uint64_t*), count (format 1.7's user tags)
    "vramtrace_tag_user": ([ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t],
                           ctypes.c_int),
    "vramtrace_set_memory_fraction": ([ctypes.c_double, ctypes.c_int], None),
    # observe/ (recorder-ffi/src/observe/)
    "vramtrace_torch_sink": ([], ctypes.c_void_p),
    "vramtrace_observe_start": ([ctypes.c_char_p], ctypes.c_int),
    "vramtrace_observe_stop": ([], ctypes.c_int),
    "vramtrace_observe_active": ([], ctypes.c_int),
    "vramtrace_observe_empty_cache": ([], None),
    "vramtrace_observe_python_stack": ([ctypes.c_char_p, ctypes.c_size_t], ctypes.c_int),
    "vramtrace_observe_hide": ([ctypes.c_char_p], None),
    "vramtrace_iteration_end": ([ctypes.c_int], None),
    "vramtrace_iteration_begin": ([], ctypes.c_int),
    # device, free bytes, total bytes (format 1.3)
    "vramtrace_observe_device_memory": ([ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64],
                                        ctypes.c_int),
    # device, limit bytes, total bytes (format 1.3)
    "vramtrace_observe_limit": ([ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64], ctypes.c_int),
    # device, action, pool's first and second id, stream (format 1.6)
    "vramtrace_observe_pool": ([ctypes.c_int, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64,
                                ctypes.c_uint64], ctypes.c_int),
    # int* out, length: the devices being recorded
    "vramtrace_observe_devices": ([ctypes.c_void_p, ctypes.c_size_t], ctypes.c_int),
    # addresses (uint64_t*), category codes (uint8_t*), count
    "vramtrace_observe_tag": ([ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t],
                              ctypes.c_int),
    # device, name, addresses (uint64_t*), count (format 1.7's user tags)
    "vramtrace_observe_tag_user": ([ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p,
                                    ctypes.c_size_t], ctypes.c_int),
}


def load() -> ctypes.CDLL:
    """The library, loaded once, its functions typed."""
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(str(library_path()))
        for name, (args, result) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = result
        _lib = lib
    return _lib


def parse_size(text: str) -> int:
    """Bytes from a size as every part of vramtrace reads one (``"64MiB"``,
    ``"1.5 GB"``, ``"512M"``: the grammar of the ``vramtrace-units`` crate,
    through the library). A ``ValueError`` says why one is not a size."""
    lib = load()
    out = ctypes.c_uint64()
    err = ctypes.create_string_buffer(256)
    if lib.vramtrace_parse_size(str(text).encode(), ctypes.byref(out), err, len(err)) != 0:
        raise ValueError(err.value.decode("utf-8", "replace"))
    return out.value
