"""Record a PyTorch program's GPU memory with vramtrace.

    import vramtrace
    vramtrace.start("run.vtrace")          # anywhere in the program
    ...
    vramtrace.stop()                        # or at exit

    with vramtrace.recording("run.vtrace"):
        ...

or ``python -m vramtrace run train.py`` for an unmodified script. By default
vramtrace *observes* PyTorch's own CUDA caching allocator (observer mode):
the program runs exactly as without it. ``mode="replace"`` runs the program
on vramtrace's caching allocator instead (see ``install``).

``phase(name)`` and ``annotate(key, value)`` mark the trace (``python -m
vramtrace run --annotate batch=8`` annotates too); ``record_function``
ranges and optimizer steps are marked without asking (an ``iterN`` phase per
step). Then ``vramtrace summary run.vtrace``, ``vramtrace report ...``.

The library is found through ``VRAMTRACE_LIB``, else next to this package,
else in a ``target/release/`` of the source tree this package sits in.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
from typing import Any, Callable, TypeVar, cast

from . import _bounded, _observer, _replace
from ._library import VramtraceError, library_path
from ._library import load as _load
from .analysis import (
    AnalyzerError,
    AnalyzerWarning,
    Chart,
    Result,
    Trace,
    analyzer_path,
    compare,
    load,
    one_device,
    plan,
)

__all__ = [
    "start",
    "stop",
    "recording",
    "install",
    "installed",
    "phase",
    "annotate",
    "tag",
    "empty_cache",
    "flush",
    "dump",
    "finish",
    "memory_stats",
    "python_stack",
    "library_path",
    "VramtraceError",
    # Analysis (vramtrace/analysis.py)
    "load",
    "compare",
    "plan",
    "one_device",
    "analyzer_path",
    "Trace",
    "Result",
    "Chart",
    "AnalyzerError",
    "AnalyzerWarning",
]


def start(out: str | None = None, *, stacks: str | None = None, phases: bool = True,
          backward_names: bool = True, iterations: bool = True, categories: bool = True,
          strict: bool | None = None, keep_last: str | None = None) -> bool:
    """Starts recording PyTorch's CUDA caching allocator, unchanged.

    ``out`` names the trace file (``%p`` pid, ``%r`` the ``RANK`` variable,
    ``%d`` the device; a process using several devices writes one file per
    device); default ``VRAMTRACE_OUT`` or ``vramtrace-<pid>.vtrace``.
    ``stacks``: ``"python"`` (default, ``VRAMTRACE_STACKS``): each allocation
    carries its thread's Python frames, read without taking the GIL;
    ``"native"``, ``"all"`` or ``"none"``. ``phases``: ``record_function``
    ranges (and ``torch.profiler``'s steps) become phases. ``backward_names``:
    allocations of the autograd engine's threads, which have no Python
    frames, are named after the backward node that made them.
    ``iterations``: a phase ``iter0``, ``iter1``, ... from each optimizer step to the next.
    ``categories``: the blocks holding parameters, buffers, gradients and
    optimizer state are tagged, at each optimizer step and at the stop
    (activations and temporaries are told by the analyzer from lifetimes).
    ``keep_last``: a size (``"50MiB"``) or a duration (``"10min"``), default
    ``VRAMTRACE_KEEP_LAST``: keep only the last part of each trace on disk,
    in a ring beside it, for a job or a server that runs for days; the
    trace is written at the end, ``dump()`` (or ``SIGUSR2``) writes the part
    kept so far, and the first out-of-memory error dumps to
    ``TRACE-oom.vtrace``.

    Before CUDA is initialized, recording begins when the program
    initializes it; afterwards, at once, with the memory already in use
    taken from the allocator's own snapshot. Notes made with ``annotate``
    before then are recorded as the traces begin.

    If recording cannot start (no CUDA device, no compiler to build the
    shim, an unsupported torch), one line on standard error says why and
    what to do, and the program runs unrecorded; returns False. With
    ``strict`` (default ``VRAMTRACE_STRICT``) that raises ``VramtraceError``.
    """
    return _observer.start(out, stacks, phases=phases, backward_names=backward_names,
                           iterations=iterations, categories=categories, strict=strict,
                           keep_last=keep_last)


def dump(path: str | None = None) -> list[str]:
    """Writes the kept window of a bounded recording (``start(keep_last=...)``)
    to a trace of its own, and returns the paths written (one per device).
    ``path``: where (``%d`` for the device when several are recorded); by
    default beside the trace, numbered (``serve-dump-1.vtrace``). The window
    starts mid-run with the allocator's state then, so its peaks are exact.
    The program goes on meanwhile; this call waits for the dump."""
    return _bounded.dump(path)


def stop() -> None:
    """Stops recording: every trace file is complete. PyTorch cannot detach
    its trace tracker: it stays, and does nothing until the next ``start``.
    Exit stops recording too."""
    _observer.stop()


class recording:
    """``with vramtrace.recording("run.vtrace"): ...`` records the block (the
    arguments are ``start``'s)."""

    def __init__(self, out: str | None = None, **options: Any) -> None:
        self.out = out
        self.options = options

    def __enter__(self) -> recording:
        start(self.out, **self.options)
        return self

    def __exit__(self, *exc: object) -> None:
        stop()


def install(out: str | None = None, alloc_conf: str | None = None,
            stacks: str | None = None, mode: str = "observe",
            strict: bool | None = None, categories: bool = True) -> None:
    """Records the program from now on, in one of two modes.

    ``mode="observe"`` (the default) is ``start(out, stacks=stacks,
    categories=categories)``.

    ``mode="replace"`` makes vramtrace's own caching allocator (PyTorch's
    policy) PyTorch's allocator, through ``CUDAPluggableAllocator``: for
    running a program under another allocator setting for real
    (``alloc_conf``, ``PYTORCH_CUDA_ALLOC_CONF`` syntax; default
    ``VRAMTRACE_ALLOC_CONF``, else ``PYTORCH_CUDA_ALLOC_CONF``). It must come
    before the first CUDA allocation, and it changes PyTorch: its memory
    statistics, CUDA graphs and snapshots stop working, and an
    out-of-memory error becomes a ``RuntimeError`` (see docs/recording.md).
    """
    if mode == "observe":
        if alloc_conf is not None:
            raise VramtraceError(
                "alloc_conf applies to mode='replace': an observed PyTorch uses its own "
                "settings (PYTORCH_CUDA_ALLOC_CONF)")
        start(out, stacks=stacks, strict=strict, categories=categories)
    elif mode == "replace":
        _replace.install(out, alloc_conf, stacks, strict)
    else:
        raise VramtraceError(f"invalid mode {mode!r}: expected 'observe' or 'replace'")


def installed() -> bool:
    """Whether vramtrace records (or will at CUDA's start), in either mode."""
    return _observer.active() or _replace.installed()


# A function `phase` wraps, whose signature the wrapper keeps.
_F = TypeVar("_F", bound=Callable[..., Any])


class phase:
    """A named phase of the program, recorded on every device.

    As a context manager (``with vramtrace.phase("forward"): ...``) or a
    decorator (``@vramtrace.phase("step")``). A phase belongs to the thread
    that opens it: each thread's phases nest, and no thread ends another's
    (the analyzer shows the main thread's unless asked for another's).
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> phase:
        _load().vramtrace_phase_begin(self.name.encode())
        return self

    def __exit__(self, *exc: object) -> None:
        _load().vramtrace_phase_end_named(self.name.encode())

    def __call__(self, fn: _F) -> _F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with phase(self.name):
                return fn(*args, **kwargs)

        return cast(_F, wrapper)


def annotate(key: str, value: object) -> None:
    """Records a key/value note (a step number, a setting) on every device.

    A note made before recording begins (before ``start``, or, in observer
    mode, before the program initializes CUDA, where recording begins) is
    not lost: the library keeps every note of the process and opens each
    trace begun later with them, as it does for a device first used later.
    ``annotate("batch", 8)`` (or ``"seq"``) tells ``vramtrace plan`` the
    run's batch size (sequence length), wherever the program makes it."""
    _load().vramtrace_annotate(str(key).encode(), str(value).encode())


# A user category's longest name, in bytes (the format's MAX_USER_CATEGORY_LEN).
_MAX_CATEGORY_LEN = 64


def tag(obj: object, category: str) -> int:
    """Names what a tensor's memory holds, in a category of your own:
    ``vramtrace.tag(kv_cache, "kv_cache")``. The analyses show it beside the
    built-in categories (parameters, gradients, ...), exact, in every
    category table, for the block's whole life.

    ``obj`` is a tensor, a module (its parameters and buffers), or a list,
    tuple or dict of these. Each CUDA tensor's storage (the allocation
    behind it, so views and slices count once) is tagged; tensors on other
    devices are skipped. A built-in category's name (``"activations"``)
    records that category. ``category`` is 1 to 64 bytes, without control
    characters. Returns the number of allocations tagged: 0 when nothing is
    being recorded. Tagging an allocation again replaces its category."""
    if not isinstance(category, str):
        raise TypeError(f"a category is a str, not {type(category).__name__}")
    raw = category.encode()
    if not raw or len(raw) > _MAX_CATEGORY_LEN or not category.isprintable():
        raise ValueError(f"a category is 1 to {_MAX_CATEGORY_LEN} bytes of printable text: "
                         f"{category!r}")
    by_device: dict[int, list[int]] = {}
    seen: set[tuple[int, int]] = set()
    for t in _tensors_of(obj):
        if not getattr(t, "is_cuda", False):
            continue
        try:
            addr = t.untyped_storage().data_ptr()
        except (AttributeError, RuntimeError):
            continue
        device = t.get_device()
        if addr and device >= 0 and (device, addr) not in seen:
            seen.add((device, addr))
            by_device.setdefault(device, []).append(addr)
    if not by_device:
        return 0
    import array
    import ctypes

    lib = _load()
    fn = lib.vramtrace_tag_user if _replace.installed() else lib.vramtrace_observe_tag_user
    tagged = 0
    for device, addrs in sorted(by_device.items()):
        buf = array.array("Q", addrs)
        n = fn(device, raw, ctypes.c_void_p(buf.buffer_info()[0]), len(buf))
        if n < 0:
            raise VramtraceError(f"tagging {category!r} failed (see standard error)")
        tagged += n
    return tagged


def _tensors_of(obj: object):
    """The tensors ``tag`` takes from ``obj``: itself, a module's parameters
    and buffers, or those of each item of a list, tuple, set or dict. Read
    by their shape (``untyped_storage``; ``parameters`` and ``buffers``), so
    that this never imports torch itself."""
    if hasattr(obj, "untyped_storage"):
        yield obj
    elif callable(getattr(obj, "parameters", None)) and callable(getattr(obj, "buffers", None)):
        yield from obj.parameters()  # type: ignore[attr-defined]
        yield from obj.buffers()  # type: ignore[attr-defined]
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors_of(v)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for v in obj:
            yield from _tensors_of(v)
    else:
        raise TypeError(f"vramtrace.tag takes a tensor, a module, or a list, tuple or dict of "
                        f"them, not {type(obj).__name__}")


def empty_cache() -> None:
    """Returns the cached memory to the driver (recorded):
    ``torch.cuda.empty_cache()``, or the recorder's own cache under
    ``mode="replace"``."""
    if _replace.installed():
        _load().vramtrace_empty_cache()
    else:
        import torch

        torch.cuda.empty_cache()


def flush() -> None:
    """Writes everything recorded so far to the trace files."""
    if _load().vramtrace_flush() != 0:
        raise VramtraceError("flushing a trace failed (see standard error)")


def finish() -> None:
    """Completes the trace files now (exit does it otherwise)."""
    stop()
    if _load().vramtrace_finish() != 0:
        raise VramtraceError("finishing a trace failed (see standard error)")


def memory_stats(device: int = 0) -> dict[str, int]:
    """Allocated and reserved bytes (current, peak), requested bytes and OOMs
    of ``device``: PyTorch's own (``torch.cuda.memory_stats``) in observer
    mode, the recorder's allocator's under ``mode="replace"`` (where
    PyTorch's are not available); ``{}`` before the device's first
    allocation there."""
    if _replace.installed():
        return _replace.memory_stats(device)
    import torch

    stats = torch.cuda.memory_stats(device)
    keys = ["allocated_bytes.all.current", "allocated_bytes.all.peak",
            "reserved_bytes.all.current", "reserved_bytes.all.peak",
            "requested_bytes.all.current", "num_ooms"]
    return {k.replace(".all", ""): int(stats.get(k, 0)) for k in keys}


def python_stack(observer: bool = False) -> list[tuple[str, str, int]]:
    """The calling thread's Python frames as the recorder captures them for
    an allocation made now: ``[(function, file, line), ...]``, innermost
    first (for tests and diagnostics). ``observer``: as observer mode reads
    them (without the GIL, vramtrace's own frames left out), else as
    ``mode="replace"`` does."""
    if observer:
        return _observer.frames_read_without_the_gil(_load())
    # PyDLL keeps the GIL during the call, as an allocation from Python
    # does; CDLL would release it and the recorder would see no frames.
    lib = ctypes.PyDLL(str(library_path()))
    fn = lib.vramtrace_python_stack
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    fn.restype = ctypes.c_int
    buf = ctypes.create_string_buffer(1 << 16)
    if fn(buf, len(buf)) < 0:
        raise VramtraceError("the library found no Python API in this process")
    frames: list[tuple[str, str, int]] = []
    for line in buf.value.decode("utf-8", "replace").splitlines():
        function, file, lineno = line.split("\t")
        frames.append((function, file, int(lineno)))
    return frames


@atexit.register
def _stop_at_exit() -> None:
    # While Python is still up: the iteration ends and the traces complete.
    # (The library finishes them at exit in any case.)
    try:
        _observer.stop()
    except Exception:  # noqa: BLE001 - exit must go on
        pass



def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext vramtrace`` in IPython or Jupyter: the ``%%vramtrace``
    cell magic records a cell and shows its summary and timeline;
    ``%vramtrace_report`` shows the last recorded cell's report inline."""
    from ._jupyter import load_ipython_extension as load
    load(ipython)
