"""Memory pools, recorded: CUDA graph captures, ``use_mem_pool`` blocks and
the life of graphs and ``MemPool`` objects (``pool`` events, trace format
1.6).

PyTorch's trace tracker says which pool each segment it reserves belongs to
(the shim passes it on), but not when a capture begins or ends, nor when a
pool's users let it go: those happen in ``torch.cuda.CUDAGraph`` and
``torch.cuda.MemPool``, whose Python classes are wrapped here, once per
process. The wrappers record after PyTorch acted, so a call PyTorch refuses
raises as always and records nothing; they record nothing while nothing is
being recorded, and never fail the program.

A pool's users, as PyTorch counts them: each capture into it and each
``use_mem_pool`` block adds one, as a ``MemPool`` does for its life; a graph
destroyed or reset, a block ended and a ``MemPool`` deleted take one away.
Once none is left, the pool's free segments can go back to the device
(docs/pools.md).
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable

# PoolAction codes (vramtrace_format::PoolAction).
CAPTURE_BEGIN = 0
CAPTURE_END = 1
USE_BEGIN = 2
USE_END = 3
RELEASE = 4
HOLD = 5

_installed = False


def _pool_pair(pool) -> tuple[int, int] | None:
    """A ``MempoolId_t`` as Python gives it (a tuple of two ints), else None."""
    try:
        first, second = pool
        return int(first), int(second)
    except (TypeError, ValueError):
        return None


def install(torch, lib, active: Callable[[], bool], message: Callable[[str], None]) -> None:
    """Wraps ``torch.cuda.CUDAGraph``'s ``capture_begin``, ``capture_end``
    and ``reset``, ``torch.cuda.MemPool``'s making, and ``use_mem_pool``,
    to record ``pool`` events through ``lib`` while ``active()``."""
    global _installed
    if _installed:
        return
    _installed = True

    def record(device: int, action: int, pool, stream: int = 0) -> None:
        pair = _pool_pair(pool)
        if pair is None or not active():
            return
        if pair == (0, 0) and action != CAPTURE_BEGIN:
            return
        try:
            lib.vramtrace_observe_pool(device, action, pair[0], pair[1], stream)
        except Exception as e:  # noqa: BLE001 - never break the program
            message(f"a memory pool's event could not be recorded: {e}")

    graph_class = getattr(getattr(torch.cuda, "graphs", None), "CUDAGraph", None)
    if graph_class is not None and hasattr(graph_class, "capture_begin"):
        _wrap_graph(torch, graph_class, record)
    pool_class = getattr(torch.cuda, "MemPool", None)
    if pool_class is not None:
        _wrap_mem_pool(torch, pool_class, record)
    use = getattr(torch.cuda, "use_mem_pool", None)
    if use is not None:
        _wrap_use_mem_pool(torch, use, record)


def _wrap_graph(torch, graph_class, record) -> None:
    original_begin = graph_class.capture_begin
    original_end = graph_class.capture_end
    original_reset = getattr(graph_class, "reset", None)

    def release(device: int, pool) -> None:
        record(device, RELEASE, pool)

    @functools.wraps(original_begin)
    def capture_begin(self, *args, **kwargs):
        result = original_begin(self, *args, **kwargs)
        try:
            device = torch.cuda.current_device()
            stream = torch.cuda.current_stream().cuda_stream
            # The pool given (a handle, another graph's pool), else one of
            # the graph's own, whose id PyTorch tells (`pool()`) only once
            # the capture has ended: (0, 0) until then.
            given = args[0] if args else kwargs.get("pool")
            record(device, CAPTURE_BEGIN, given if given is not None else (0, 0), stream)
            self._vramtrace_capture = (device, stream)
        except Exception:  # noqa: BLE001 - never break a capture
            pass
        return result

    @functools.wraps(original_end)
    def capture_end(self, *args, **kwargs):
        result = original_end(self, *args, **kwargs)
        capture = getattr(self, "_vramtrace_capture", None)
        if capture is not None:
            try:
                device, stream = capture
                pool = self.pool()
                record(device, CAPTURE_END, pool, stream)
                # The graph's hold on the pool ends with it (or its reset).
                finalizer = getattr(self, "_vramtrace_release", None)
                if finalizer is not None:
                    finalizer.detach()
                self._vramtrace_release = weakref.finalize(self, release, device, pool)
            except Exception:  # noqa: BLE001 - never break a capture
                pass
        return result

    graph_class.capture_begin = capture_begin
    graph_class.capture_end = capture_end
    if original_reset is not None:

        @functools.wraps(original_reset)
        def reset(self, *args, **kwargs):
            finalizer = getattr(self, "_vramtrace_release", None)
            if finalizer is not None:
                # Released now, once: not again when the graph goes.
                finalizer()
            return original_reset(self, *args, **kwargs)

        graph_class.reset = reset


def _wrap_mem_pool(torch, pool_class, record) -> None:
    original_init = pool_class.__init__

    @functools.wraps(original_init)
    def __init__(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        try:
            device = torch.cuda.current_device()
            pool = self.id
            record(device, HOLD, pool)
            weakref.finalize(self, record, device, RELEASE, pool)
        except Exception:  # noqa: BLE001 - never break the program
            pass

    pool_class.__init__ = __init__


def _wrap_use_mem_pool(torch, original, record) -> None:
    @functools.wraps(original)
    @contextlib.contextmanager
    def use_mem_pool(pool, device=None):
        with original(pool, device) as value:
            try:
                index = (torch.cuda.current_device() if device is None
                         else torch.cuda._utils._get_device_index(device))
            except Exception:  # noqa: BLE001 - never break the program
                index = None
            if index is not None:
                record(index, USE_BEGIN, pool.id)
            try:
                yield value
            finally:
                if index is not None:
                    record(index, USE_END, pool.id)

    torch.cuda.use_mem_pool = use_mem_pool
    memory = getattr(torch.cuda, "memory", None)
    if memory is not None and getattr(memory, "use_mem_pool", None) is original:
        memory.use_mem_pool = use_mem_pool
