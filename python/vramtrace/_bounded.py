"""Bounded recording: ``keep_last`` (a size or a duration), dumps of the
kept window on demand, and on ``SIGUSR2``.

The recorder keeps each trace as a ring of parts beside it
(``TRACE.ring/``), deletes the oldest past the bound, and joins what is
left into ``TRACE`` at the end; a dump joins the parts kept so far into a
trace of its own, which starts mid-run with the allocator's state then, so
its peaks are exact (docs/keep-last.md).
"""
from __future__ import annotations

import ctypes
import re
import signal
import sys
import threading

from ._library import VramtraceError, load

_UNITS = {
    "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
    "kB": 1000, "KB": 1000, "MB": 10**6, "GB": 10**9, "TB": 10**12,
}
_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
_FORM = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*$")


def check_keep_last(text: str) -> str:
    """Checks a ``keep_last`` value as the recorder reads it (a size of at
    least 1 MiB, or a duration of at least 1 s); returns it. The message of
    a bad one names the valid forms."""
    text = str(text)
    m = _FORM.match(text)
    unit = m.group(2) if m else None
    if m is None or (unit not in _UNITS and unit not in _SECONDS) or float(m.group(1)) <= 0:
        raise VramtraceError(
            f"invalid keep_last {text!r}: expected a size (50MiB, 2GiB, 500MB) "
            "or a duration (90s, 10min, 2h, 1d)")
    number = float(m.group(1))
    if unit in _UNITS and number * _UNITS[unit] < (1 << 20):
        raise VramtraceError(f"keep_last {text!r} is too small to keep: the least is 1MiB")
    if unit in _SECONDS and number * _SECONDS[unit] < 1:
        raise VramtraceError(f"keep_last {text!r} is too short to keep: the least is 1s")
    return text.strip()


def dump(path: str | None = None) -> list[str]:
    """Writes the kept window of each bounded recording (``keep_last``) to a
    trace of its own, and returns the paths written. ``path``: where (``%d``
    for the device where several are recorded); by default beside the
    trace, numbered (``serve-dump-1.vtrace``). The program goes on while
    the parts are joined; this call waits for them."""
    lib = load()
    out = ctypes.create_string_buffer(1 << 16)
    arg = None if path is None else str(path).encode()
    n = lib.vramtrace_dump(arg, out, len(out))
    if n < 0:
        raise VramtraceError("the dump failed (see standard error)")
    return [p for p in out.value.decode("utf-8", "replace").split("\n") if p]


_handler_installed = False


def install_signal_handler() -> bool:
    """``SIGUSR2`` dumps the kept window (beside each trace), on a thread of
    its own so the program is not held up. Only from the main thread, and
    only where the program has no handler of its own; returns whether it
    was installed."""
    global _handler_installed
    sigusr2 = getattr(signal, "SIGUSR2", None)
    if _handler_installed or sigusr2 is None:
        return _handler_installed
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(sigusr2) not in (signal.SIG_DFL, None):
        return False

    def on_signal(signum, frame):
        threading.Thread(target=_dump_and_say, name="vramtrace-dump", daemon=True).start()

    signal.signal(sigusr2, on_signal)
    _handler_installed = True
    return True


def _dump_and_say() -> None:
    try:
        for p in dump():
            print(f"vramtrace: dumped the kept window to {p}", file=sys.stderr)
    except VramtraceError as e:
        print(f"vramtrace: {e}", file=sys.stderr)
