"""Record a PyTorch program's GPU memory with vramtrace.

    import vramtrace
    vramtrace.install("run.vtrace")        # before the first CUDA allocation

    with vramtrace.phase("forward"):
        ...

switches PyTorch to vramtrace's caching allocator (PyTorch's policy, run by
``libvramtrace_recorder.so`` through ``torch.cuda.memory.CUDAPluggableAllocator``),
which records every allocator event to the trace file. ``python -m vramtrace
run script.py`` does the same for an unmodified script.

The library is found through ``VRAMTRACE_LIB``, else next to this package,
else in a ``target/release/`` of the source tree this package sits in.
"""

from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path
from typing import Optional

__all__ = [
    "install",
    "installed",
    "library_path",
    "phase",
    "annotate",
    "empty_cache",
    "flush",
    "finish",
    "memory_stats",
    "python_stack",
    "VramtraceError",
]

LIBRARY_NAME = "libvramtrace_recorder.so"

_lib: Optional[ctypes.CDLL] = None
_installed = False


class VramtraceError(RuntimeError):
    """vramtrace could not be set up."""


def library_path() -> Path:
    """The path of ``libvramtrace_recorder.so`` this package would load."""
    env = os.environ.get("VRAMTRACE_LIB")
    if env:
        path = Path(env)
        if not path.is_file():
            raise VramtraceError(f"VRAMTRACE_LIB={env} is not a file")
        return path
    here = Path(__file__).resolve().parent
    candidates = [here / LIBRARY_NAME, here.parent / LIBRARY_NAME]
    # A source checkout: recorder/python/vramtrace -> <workspace>/target/release.
    for parent in here.parents:
        candidates.append(parent / "target" / "release" / LIBRARY_NAME)
    for path in candidates:
        if path.is_file():
            return path
    raise VramtraceError(
        f"{LIBRARY_NAME} not found: set VRAMTRACE_LIB, put it next to the "
        "vramtrace package, or build it with `cargo build --release -p "
        "vramtrace-recorder-ffi`"
    )


def _load() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(str(library_path()))
        lib.vramtrace_phase_begin.argtypes = [ctypes.c_char_p]
        lib.vramtrace_phase_begin.restype = None
        lib.vramtrace_phase_end.argtypes = []
        lib.vramtrace_phase_end.restype = ctypes.c_int
        lib.vramtrace_annotate.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        lib.vramtrace_annotate.restype = None
        lib.vramtrace_empty_cache.argtypes = []
        lib.vramtrace_empty_cache.restype = None
        lib.vramtrace_flush.argtypes = []
        lib.vramtrace_flush.restype = ctypes.c_int
        lib.vramtrace_finish.argtypes = []
        lib.vramtrace_finish.restype = ctypes.c_int
        lib.vramtrace_device_count.argtypes = []
        lib.vramtrace_device_count.restype = ctypes.c_int
        lib.vramtrace_memory_stats.argtypes = [
            ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]
        lib.vramtrace_memory_stats.restype = ctypes.c_int
        _lib = lib
    return _lib


def install(out: Optional[str] = None, alloc_conf: Optional[str] = None,
            stacks: Optional[str] = None) -> None:
    """Makes PyTorch allocate CUDA memory through vramtrace's recorder.

    ``out`` names the trace file (``%p`` pid, ``%r`` RANK, ``%d`` device; see
    docs/recording.md); default ``VRAMTRACE_OUT`` or ``vramtrace-<pid>.vtrace``.
    ``alloc_conf`` sets the allocator (``PYTORCH_CUDA_ALLOC_CONF`` syntax);
    default ``VRAMTRACE_ALLOC_CONF``, else ``PYTORCH_CUDA_ALLOC_CONF``.
    ``stacks`` says which stacks each allocation gets: ``"python"`` (the
    default: the allocating thread's Python frames, as
    ``torch.cuda.memory._record_memory_history(stacks="python")``),
    ``"native"`` (C++/Rust frames), ``"all"`` (both) or ``"none"``; default
    ``VRAMTRACE_STACKS``, else ``"python"``.

    Must run before PyTorch's first CUDA allocation. Calling it again does
    nothing.
    """
    global _installed
    if _installed:
        return
    import torch

    if out is not None:
        os.environ["VRAMTRACE_OUT"] = os.fspath(out)
    if alloc_conf is not None:
        os.environ["VRAMTRACE_ALLOC_CONF"] = alloc_conf
    if stacks is not None:
        os.environ["VRAMTRACE_STACKS"] = stacks
    path = str(library_path())
    _load()
    allocator = torch.cuda.memory.CUDAPluggableAllocator(
        path, "vramtrace_malloc", "vramtrace_free")
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        if "already initialized" in str(e):
            raise VramtraceError(
                "vramtrace.install() came too late: PyTorch's CUDA allocator is "
                "already in use (a tensor was put on the GPU, or CUDA was "
                "initialized). Call vramtrace.install() at the very start of "
                "the program, before any CUDA work, or use `python -m "
                "vramtrace run script.py`."
            ) from e
        raise
    # The pluggable allocator does not pass torch.cuda.empty_cache() on to a
    # library allocator: route it to ours.
    original = torch.cuda.empty_cache

    @functools.wraps(original)
    def _empty_cache() -> None:
        original()
        empty_cache()

    torch.cuda.empty_cache = _empty_cache
    torch.cuda.memory.empty_cache = _empty_cache
    _installed = True


def installed() -> bool:
    """Whether :func:`install` switched PyTorch to the recorder."""
    return _installed


class phase:
    """A named phase of the program, recorded on every device.

    As a context manager (``with vramtrace.phase("forward"): ...``) or a
    decorator (``@vramtrace.phase("step")``). Phases nest.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> "phase":
        _load().vramtrace_phase_begin(self.name.encode())
        return self

    def __exit__(self, *exc) -> None:
        _load().vramtrace_phase_end()

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with phase(self.name):
                return fn(*args, **kwargs)

        return wrapper


def annotate(key: str, value) -> None:
    """Records a key/value note (a step number, a setting) on every device."""
    _load().vramtrace_annotate(str(key).encode(), str(value).encode())


def empty_cache() -> None:
    """Returns the recorder's cached memory to the driver (recorded)."""
    _load().vramtrace_empty_cache()


def flush() -> None:
    """Writes everything recorded so far to the trace files."""
    if _load().vramtrace_flush() != 0:
        raise VramtraceError("flushing a trace failed (see standard error)")


def memory_stats(device: int = 0) -> dict:
    """The recorder's allocator statistics for ``device`` (what
    ``torch.cuda.memory_stats()`` would say of PyTorch's own), or ``{}``
    before the device's first allocation."""
    out = (ctypes.c_uint64 * 6)()
    if _load().vramtrace_memory_stats(device, out) != 0:
        return {}
    keys = ["allocated_bytes.current", "allocated_bytes.peak",
            "reserved_bytes.current", "reserved_bytes.peak",
            "requested_bytes.current", "num_ooms"]
    return dict(zip(keys, (int(v) for v in out)))


def python_stack() -> list:
    """The calling thread's Python frames as the recorder captures them for
    an allocation made now: ``[(function, file, line), ...]``, innermost
    first (for tests and diagnostics)."""
    # PyDLL keeps the GIL during the call, as an allocation from Python does;
    # CDLL would release it and the recorder would see no frames.
    lib = ctypes.PyDLL(str(library_path()))
    fn = lib.vramtrace_python_stack
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    fn.restype = ctypes.c_int
    buf = ctypes.create_string_buffer(1 << 16)
    if fn(buf, len(buf)) < 0:
        raise VramtraceError("the library found no Python API in this process")
    frames = []
    for line in buf.value.decode("utf-8", "replace").splitlines():
        function, file, lineno = line.split("\t")
        frames.append((function, file, int(lineno)))
    return frames


def finish() -> None:
    """Completes the trace files now (exit does it otherwise); allocation goes
    on, unrecorded."""
    if _load().vramtrace_finish() != 0:
        raise VramtraceError("finishing a trace failed (see standard error)")
