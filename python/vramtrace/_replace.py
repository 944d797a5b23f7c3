"""Replacement mode: vramtrace's own caching allocator (PyTorch's policy,
run by ``libvramtrace_recorder.so``) becomes PyTorch's CUDA allocator through
``torch.cuda.memory.CUDAPluggableAllocator``, and records every event it
causes.

It runs the program under another allocator setting for real. It also
changes what PyTorch can do: under a pluggable allocator,
``torch.cuda.memory_allocated()`` and ``memory_stats()``, CUDA graphs
(``torch.compile(mode="reduce-overhead")``) and ``torch.cuda.memory._snapshot()``
fail, an out-of-memory error is a ``RuntimeError`` rather than
``torch.OutOfMemoryError``, and ``record_stream`` never reaches the
allocator. Observer mode, the default, changes none of that.
"""

from __future__ import annotations

import ctypes
import functools
import os

from . import _library, _observer
from ._library import VramtraceError

_installed = False


def install(out: str | None, alloc_conf: str | None, stacks: str | None,
            strict: bool | None = None) -> bool:
    """Switches PyTorch to the recorder; must run before PyTorch's first
    CUDA allocation. Calling it again does nothing. Without PyTorch or a
    CUDA device there is nothing to record: one line says so and the
    program runs unrecorded (strict: an error). Returns whether it
    records."""
    global _installed
    if _installed:
        return True
    strict = _observer._strict(strict)
    try:
        import torch
    except ImportError as e:
        return _observer._give_up("PyTorch is not installed", strict, e)
    if not torch.cuda.is_available():
        # The pluggable allocator would be installed and never called.
        return _observer._give_up("no CUDA device is available", strict)

    if out is not None:
        os.environ["VRAMTRACE_OUT"] = os.fspath(out)
    if alloc_conf is not None:
        os.environ["VRAMTRACE_ALLOC_CONF"] = alloc_conf
    if stacks is not None:
        os.environ["VRAMTRACE_STACKS"] = stacks
    path = str(_library.library_path())
    _library.load()
    allocator = torch.cuda.memory.CUDAPluggableAllocator(path, "vramtrace_malloc", "vramtrace_free")
    _enforce_memory_fraction(allocator, _library.load())
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        if "already initialized" in str(e):
            raise VramtraceError(
                "vramtrace.install(mode='replace') came too late: PyTorch's CUDA "
                "allocator is already in use (a tensor was put on the GPU, or CUDA "
                "was initialized). Call it at the very start of the program, before "
                "any CUDA work, or use `python -m vramtrace run --mode replace script.py`."
            ) from e
        raise
    # The pluggable allocator does not pass torch.cuda.empty_cache() on to a
    # library allocator: route it to ours.
    original = torch.cuda.empty_cache

    @functools.wraps(original)
    def _empty_cache() -> None:
        original()
        _library.load().vramtrace_empty_cache()

    torch.cuda.empty_cache = _empty_cache
    torch.cuda.memory.empty_cache = _empty_cache
    _installed = True
    return True


def _enforce_memory_fraction(allocator, lib) -> None:
    """Routes ``torch.cuda.set_per_process_memory_fraction`` to the
    recorder's allocator, which enforces and records it: PyTorch calls a
    pluggable allocator's ``set_memory_fraction`` function, where one is
    set, and ignores the call otherwise."""
    try:
        fn = ctypes.cast(lib.vramtrace_set_memory_fraction, ctypes.c_void_p).value
        allocator.allocator().set_memory_fraction_fn(fn)
    except Exception as e:  # noqa: BLE001 - an older torch: the limit stays unenforced
        _observer.message(f"set_per_process_memory_fraction will not limit the recorder's "
                          f"allocator: {e}")


def installed() -> bool:
    """Whether PyTorch allocates through the recorder."""
    return _installed


def memory_stats(device: int = 0) -> dict[str, int]:
    """The recorder's allocator statistics for ``device``, or ``{}`` before
    the device's first allocation."""
    out = (ctypes.c_uint64 * 6)()
    if _library.load().vramtrace_memory_stats(device, out) != 0:
        return {}
    keys = ["allocated_bytes.current", "allocated_bytes.peak",
            "reserved_bytes.current", "reserved_bytes.peak",
            "requested_bytes.current", "num_ooms"]
    return dict(zip(keys, (int(v) for v in out)))
