"""Observer mode: PyTorch's own caching allocator, recorded as it runs.

PyTorch calls every trace tracker attached to its CUDA caching allocator for
each allocation, free and segment event. The shim (``shim/``, built against
the installed torch on first use) attaches one and forwards the events to
``libvramtrace_recorder.so``, which writes one trace per device. Nothing
about PyTorch changes: its allocator, statistics, CUDA graphs and
``torch.compile`` behave as without vramtrace.

Recording starts when CUDA is initialized (or at once, if it is already:
then the allocator's snapshot gives the memory already in use), and records
phases from ``record_function`` ranges, an ``iterN`` phase per iteration of
the training loop (``iter0`` from the start, or from the first optimizer's
making, to the first step; ``iterN`` from step N to step N+1), and, for
allocations of the autograd engine's threads, the backward node that made
them. It also records the allocator's limit
(``set_per_process_memory_fraction``, and the one in force at the start) and
the card's memory as the driver reports it (at the start, after each segment
event and out-of-memory error, and at the stop).
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import sys
import threading
import warnings
import weakref
from pathlib import Path
from types import FrameType

from . import _bounded, _categories, _library, _pools, _shim
from ._library import VramtraceError

PACKAGE_DIR = str(Path(__file__).resolve().parent) + os.sep

_lock = threading.RLock()
_active = False
_pending_start: dict | None = None
_hooks_installed = False
_optimizer_init_wrapped = False
_step_hook = None
_first_optimizer: weakref.ref | None = None
# What the step hook does in the recording in progress.
_iterations = False
_categories_on = False
_python_frames: tuple | None = None  # (usable, reason), checked once
_hidden = False


def message(text: str) -> None:
    print(f"vramtrace: {text}", file=sys.stderr, flush=True)


def _settings_text(value) -> str:
    """An allocator setting as the library reads it (PyTorch's snapshot
    values: bools, numbers, and a dict for roundup_power2_divisions)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, dict):
        return "[" + ",".join(f"{k}:{_settings_text(v)}" for k, v in value.items()) + "]"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_settings_text(v) for v in value) + "]"
    return str(value)


def allocator_settings(torch) -> dict:
    """PyTorch's allocator settings now, as its snapshot reports them."""
    try:
        settings = torch.cuda.memory._snapshot().get("allocator_settings", {})
    except Exception:  # noqa: BLE001 - an older torch: the library assumes the defaults
        return {}
    return {str(k): _settings_text(v) for k, v in settings.items()}


def hide_own_frames(lib) -> None:
    """Leaves this package's frames out of recorded stacks (before any frame
    is read: a code already met keeps whether it was hidden)."""
    global _hidden
    if not _hidden:
        lib.vramtrace_observe_hide(PACKAGE_DIR.encode())
        _hidden = True


def frames_read_without_the_gil(lib: ctypes.CDLL) -> list[tuple[str, str, int]]:
    """The calling thread's frames as an observed allocation would record
    them: ``[(function, file, line), ...]``, innermost first."""
    hide_own_frames(lib)
    buf = ctypes.create_string_buffer(1 << 16)
    if lib.vramtrace_observe_python_stack(buf, len(buf)) < 0:
        raise VramtraceError(buf.value.decode("utf-8", "replace"))
    frames: list[tuple[str, str, int]] = []
    for line in buf.value.decode("utf-8", "replace").splitlines():
        function, file, lineno = line.split("\t")
        frames.append((function, file, int(lineno)))
    return frames


# Compiled outside the package, so that its frame is one the check can see.
_CHECK_SOURCE = "def check(capture, lib):\n    return capture(lib)\n"


def python_frames_usable(lib) -> tuple:
    """Whether the library reads this interpreter's frames right without the
    GIL: the frames it reads must be the interpreter's own."""
    global _python_frames
    if _python_frames is None:
        namespace: dict = {}
        exec(compile(_CHECK_SOURCE, "<vramtrace frame check>", "exec"), namespace)
        try:
            got = namespace["check"](frames_read_without_the_gil, lib)
        except VramtraceError as e:
            _python_frames = (False, str(e))
            return _python_frames
        expected = [("check", "<vramtrace frame check>", 2)]
        frame: FrameType | None = sys._getframe(0)
        while frame is not None and len(expected) < 8:
            code = frame.f_code
            if not code.co_filename.startswith(PACKAGE_DIR) and not code.co_filename.endswith(
                    ("runpy.py", "<frozen runpy>")):
                expected.append((code.co_name, code.co_filename, frame.f_lineno))
            frame = frame.f_back
        ok = got[:len(expected)] == expected
        _python_frames = (ok, "" if ok else
                          "this interpreter's frames are laid out differently than expected")
    return _python_frames


def memory_limit(torch, fraction: float, device: int) -> tuple:
    """What PyTorch's allocator enforces on ``device`` once
    ``set_per_process_memory_fraction(fraction)`` succeeded: ``(limit, total)``
    in bytes, ``limit == total`` for no cap. PyTorch computes
    ``static_cast<size_t>(fraction * total)`` from the device's total memory
    (``cudaDeviceProp::totalGlobalMem``), and sets no cap for a fraction of 1."""
    total = int(torch.cuda.get_device_properties(device).total_memory)
    fraction = float(fraction)
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"invalid fraction {fraction}")
    if fraction >= 1.0:
        return total, total
    # Python's float product is the C++ double product; int() truncates as
    # the cast does.
    return int(fraction * float(total)), total


def _device_index(torch, device) -> int:
    """``device`` as ``set_per_process_memory_fraction`` resolves it."""
    if device is None:
        return int(torch.cuda.current_device())
    try:
        from torch.cuda._utils import _get_device_index
    except ImportError:  # pragma: no cover - every torch 2.x has it
        return int(device.index if hasattr(device, "index") else device)
    return int(_get_device_index(device))


def _record_start_limits(torch, lib) -> None:
    """The limit in force on each device as recording begins, where there is
    one (a fraction below 1): from ``get_per_process_memory_fraction`` (torch
    2.9 and later), which also reflects a limit set through the allocator's
    settings. An older torch cannot say, and nothing is recorded."""
    get = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if get is None:
        return
    for device in range(torch.cuda.device_count()):
        try:
            fraction = float(get(device))
            if not 0.0 <= fraction < 1.0:
                continue
            total = int(torch.cuda.get_device_properties(device).total_memory)
            # PyTorch returns limit / total: the product rounds back to the
            # whole number of bytes it holds.
            limit = round(fraction * total)
            lib.vramtrace_observe_limit(device, min(limit, total), total)
        except Exception as e:  # noqa: BLE001 - recording goes on without it
            message(f"the memory limit of device {device} could not be read: {e}")


def recorded_devices(lib) -> list:
    """The devices that have a trace now."""
    out = (ctypes.c_int * 256)()
    n = lib.vramtrace_observe_devices(out, len(out))
    return list(out[:max(0, min(n, len(out)))])


def _sample_device_memory(torch, lib) -> None:
    """The card's free and total memory now, for each device being recorded
    (``torch.cuda.mem_get_info``, which is ``cudaMemGetInfo``)."""
    for device in recorded_devices(lib):
        try:
            free, total = torch.cuda.mem_get_info(device)
            lib.vramtrace_observe_device_memory(device, int(free), int(total))
        except Exception as e:  # noqa: BLE001 - never break the program
            message(f"the memory of device {device} could not be read: {e}")


def _optimizer_exists(torch) -> bool:
    """Whether the program holds an optimizer now (one pass over the objects,
    once per start)."""
    optimizer = getattr(getattr(torch, "optim", None), "Optimizer", None)
    if optimizer is None:
        return False
    with warnings.catch_warnings():
        # Deprecated module attributes warn when isinstance looks at them.
        warnings.simplefilter("ignore")
        return any(isinstance(o, optimizer) for o in gc.get_objects())


def _config(torch, out: str | None, stacks: str, pending: bool,
            categories: bool = False, keep_last: str | None = None) -> str:
    lines = [f"state={'pending' if pending else 'empty'}", f"stacks={stacks}"]
    if out:
        lines.append(f"out={out}")
    if keep_last:
        lines.append(f"keep_last={keep_last}")
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        lines.append(f"device={i}\t{p.total_memory}\t{p.name}")
    for key, value in allocator_settings(torch).items():
        lines.append(f"setting.{key}={value}")
    lines.append(f"meta.torch={torch.__version__}")
    lines.append(f"meta.python={sys.version.split()[0]}")
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
    if conf:
        lines.append(f"meta.PYTORCH_CUDA_ALLOC_CONF={conf}")
    if categories:
        # Parameters, buffers, gradients and optimizer state are tagged
        # (_categories.py): the analyzer takes untagged blocks for none of them.
        lines.append("meta.categories=tags")
    if any("\n" in line[:-1] or "\r" in line for line in lines):
        raise VramtraceError("a setting holds a line break: cannot pass it to the recorder")
    return "\n".join(lines) + "\n"


def _begin(torch, out, stacks, phases, backward_names, iterations, categories,
           pending, keep_last=None) -> None:
    """Starts recording; CUDA is initialized."""
    global _active
    lib = _library.load()
    shim = _shim.load(torch)
    hide_own_frames(lib)
    if stacks in ("python", "all"):
        ok, reason = python_frames_usable(lib)
        if not ok:
            message(f"recording without Python stacks: {reason}")
            stacks = "native" if stacks == "all" else "none"
    config = _config(torch, out, stacks, pending, categories, keep_last)
    if lib.vramtrace_observe_start(config.encode()) != 0:
        raise VramtraceError("the recorder refused to start (see the message above)")
    status = shim.vramtrace_shim_attach(lib.vramtrace_torch_sink(), int(phases), int(backward_names))
    if status != 0:
        lib.vramtrace_observe_stop()
        raise VramtraceError(f"cannot observe PyTorch's allocator: {_shim.error(shim)}")
    if pending and shim.vramtrace_shim_snapshot() != 0:
        message(f"the allocator's state at start could not be read ({_shim.error(shim)}): "
                "memory in use before now is missing from the trace")
    # The limit in force, recorded first in each device's trace, and the
    # memory of the cards that hold some already (a device's first event
    # samples the others' as it comes).
    _record_start_limits(torch, lib)
    _sample_device_memory(torch, lib)
    _install_hooks(torch, lib, iterations, deferred=phases, categories=categories)
    _active = True
    if iterations:
        try:
            # A program that has its optimizer already trains from here on:
            # iter0 begins with the recording (else with the first optimizer).
            if _optimizer_exists(torch):
                lib.vramtrace_iteration_begin()
        except Exception as e:  # noqa: BLE001 - never break the program
            message(f"iterations: looking for an optimizer failed ({e})")


def _install_hooks(torch, lib, iterations: bool, deferred: bool,
                   categories: bool = False) -> None:
    """The optimizer-step hook (iterations, categories) and the empty_cache
    wrapper, once per process; both do nothing while not recording."""
    global _hooks_installed, _step_hook, _first_optimizer, _iterations, _categories_on
    _first_optimizer = None
    _iterations = iterations
    _categories_on = categories and _categories.walker() is not None
    if (iterations or _categories_on) and _step_hook is None:
        try:
            # A submodule that `torch.optim` does not bind as an attribute
            # (torch 2.11): imported by name.
            from torch.optim.optimizer import (
                register_optimizer_step_post_hook as register,
            )
        except ImportError:
            register = None
            message("this PyTorch has no optimizer step hooks: no iteration phases, and "
                    "gradients and optimizer state are not tagged")
        if register is not None:
            # Optimizer.step runs inside a record_function range; with
            # phases on, the iteration ends when that range does.
            wraps_step = deferred and hasattr(torch.optim.Optimizer, "profile_hook_step")

            def after_step(optimizer, args, kwargs):
                global _first_optimizer
                if not _active:
                    return
                # Inside the step's range: its tags come before the
                # iteration ends.
                if _categories_on:
                    walker = _categories.walker()
                    try:
                        if walker is not None:
                            walker.step(optimizer)
                    except Exception as e:  # noqa: BLE001 - never break the step
                        walker.fail(e)
                if not _iterations:
                    return
                # One iteration per step of the first optimizer to step (a
                # GAN's second optimizer does not cut iterations in two).
                if _first_optimizer is None or _first_optimizer() is None:
                    _first_optimizer = weakref.ref(optimizer)
                if _first_optimizer() is optimizer:
                    lib.vramtrace_iteration_end(int(wraps_step))

            _step_hook = register(after_step)
    if iterations:
        _wrap_optimizer_init(torch, lib)
    if not _hooks_installed:
        _wrap_memory_fraction(torch, lib)
        _pools.install(torch, lib, lambda: _active, message)
        original = torch.cuda.empty_cache

        @functools.wraps(original)
        def empty_cache() -> None:
            if _active:
                lib.vramtrace_observe_empty_cache()
            original()

        torch.cuda.empty_cache = empty_cache
        torch.cuda.memory.empty_cache = empty_cache
        _hooks_installed = True


def _wrap_optimizer_init(torch, lib) -> None:
    """Begins ``iter0`` when the first optimizer is made while recording (an
    inference program, with none, gets no iteration). Once per process; does
    nothing while not recording, and never fails the constructor."""
    global _optimizer_init_wrapped
    optimizer = getattr(getattr(torch, "optim", None), "Optimizer", None)
    if _optimizer_init_wrapped or optimizer is None:
        return
    original = optimizer.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        if _active and _iterations:
            try:
                lib.vramtrace_iteration_begin()
            except Exception:  # noqa: BLE001 - never break the program
                pass

    optimizer.__init__ = __init__
    _optimizer_init_wrapped = True


def _wrap_memory_fraction(torch, lib) -> None:
    """Records ``torch.cuda.set_per_process_memory_fraction`` (both names of
    it) as a limit, after PyTorch took it: a call PyTorch refuses raises as
    always and records nothing."""
    original = getattr(torch.cuda, "set_per_process_memory_fraction", None)
    if original is None:
        return

    @functools.wraps(original)
    def set_per_process_memory_fraction(fraction, device=None):
        result = original(fraction, device)
        if _active:
            try:
                index = _device_index(torch, device)
                limit, total = memory_limit(torch, fraction, index)
                lib.vramtrace_observe_limit(index, limit, total)
            except Exception as e:  # noqa: BLE001 - never break the program
                message(f"the memory limit set could not be recorded: {e}")
        return result

    torch.cuda.set_per_process_memory_fraction = set_per_process_memory_fraction
    memory = getattr(torch.cuda, "memory", None)
    if memory is not None and getattr(memory, "set_per_process_memory_fraction", None) is original:
        memory.set_per_process_memory_fraction = set_per_process_memory_fraction


def start(out=None, stacks=None, *, phases=True, backward_names=True, iterations=True,
          categories=True, strict=None, keep_last=None) -> bool:
    """Starts recording PyTorch's CUDA allocator. See ``vramtrace.start``."""
    global _pending_start
    strict = _strict(strict)
    keep_last = keep_last or os.environ.get("VRAMTRACE_KEEP_LAST") or None
    if keep_last is not None:
        keep_last = _bounded.check_keep_last(keep_last)
    stacks = stacks or os.environ.get("VRAMTRACE_STACKS") or "python"
    if stacks not in ("python", "native", "all", "none"):
        raise VramtraceError(f"invalid stacks {stacks!r}: expected python, native, all or none")
    out = os.fspath(out) if out is not None else os.environ.get("VRAMTRACE_OUT")
    with _lock:
        if _active or _pending_start is not None:
            raise VramtraceError("vramtrace is already recording: call vramtrace.stop() first")
        try:
            import torch
        except ImportError as e:
            return _give_up("PyTorch is not installed", strict, e)
        if not torch.cuda.is_available():
            return _give_up("no CUDA device is available", strict)
        try:
            # Build (or find) the shim now, not inside CUDA's initialization.
            shim = _shim.load(torch)
            lib = _library.load()
        except VramtraceError as e:
            return _give_up(str(e), strict, e)
        if categories:
            categories = _start_categories(torch, lib, shim)
        args = {"out": out, "stacks": stacks, "phases": phases, "backward_names": backward_names,
                    "iterations": iterations, "categories": categories, "keep_last": keep_last}
        if keep_last:
            # Here, on the caller's thread (the main one, as a rule), not
            # where CUDA happens to be initialized: only the main thread
            # may set a signal handler.
            _bounded.install_signal_handler()
        if torch.cuda.is_initialized():
            _begin_or_report(torch, args, pending=True, strict=strict)
        else:
            # A tracker attached before CUDA's initialization is lost, and
            # initializing CUDA here would change the program (its device
            # and allocator settings are read then): start at its own.
            _pending_start = args
            torch.cuda._lazy_call(functools.partial(_start_at_init, torch, args, strict))
    return True


def _start_categories(torch, lib, shim) -> bool:
    """Sets up the walker now (not at CUDA's start), so that modules made
    from here on are found as they register their parameters, and those
    that exist already by one pass over the objects; the stepping
    parameters' gradients are watched in the shim. Returns whether
    categories are on."""
    try:
        walker = _categories.install(torch, lib, message, shim=shim)
        walker.forget()
        return True
    except Exception as e:  # noqa: BLE001 - recording goes on without tags
        message(f"categories are off: {e}")
        return False


def _start_at_init(torch, args, strict) -> None:
    global _pending_start
    with _lock:
        if _pending_start is not args:
            return  # stopped before CUDA started
        _pending_start = None
        _begin_or_report(torch, args, pending=False, strict=strict)


def _begin_or_report(torch, args, pending: bool, strict: bool) -> None:
    try:
        _begin(torch, **args, pending=pending)
    except Exception as e:  # noqa: BLE001 - recording must never break the program
        _give_up(str(e), strict, e)


class NotRecording(VramtraceError):
    """Recording could not start, under ``strict``; ``reason`` says why,
    without the words about strictness (for callers that start strictly
    only to learn why, as the notebook magic does)."""

    def __init__(self, reason: str):
        super().__init__(f"{reason}: not recording (strict)")
        self.reason = reason


def _give_up(reason: str, strict: bool, cause: BaseException | None = None) -> bool:
    """Recording cannot start, for `reason`. Strict, that is an error: the
    program must not go on unrecorded. Otherwise one line says so, and the
    program runs unrecorded."""
    if strict:
        raise NotRecording(reason) from cause
    message(f"{reason}: running without recording")
    return False


def _strict(strict) -> bool:
    if strict is not None:
        return bool(strict)
    return os.environ.get("VRAMTRACE_STRICT", "") not in ("", "0", "false", "False")


def stop() -> None:
    """Stops recording: the traces are complete. See ``vramtrace.stop``."""
    global _active, _pending_start
    with _lock:
        _pending_start = None
        if not _active:
            return
        lib = _library.load()
        if _categories_on:
            # What is live now is tagged for its whole life (a program
            # without optimizer steps gets its weights tagged here).
            walker = _categories.walker()
            try:
                if walker is not None:
                    walker.final()
            except Exception as e:  # noqa: BLE001 - stopping must go on
                message(f"categories: the last walk failed ({e})")
        # The cards' memory at the end.
        _sample_device_memory(sys.modules["torch"], lib)
        _active = False
        shim = _shim.load(sys.modules["torch"])
        shim.vramtrace_shim_detach()
        if lib.vramtrace_observe_stop() != 0:
            raise VramtraceError("finishing a trace failed (see standard error)")


def active() -> bool:
    """Whether observer mode is recording now (or will at CUDA's start)."""
    return _active or _pending_start is not None
