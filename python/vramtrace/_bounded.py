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
import signal
import sys
import threading

from ._library import VramtraceError, load


def check_keep_last(text: str) -> str:
    """Checks a ``keep_last`` value as the recorder reads it (a size of at
    least 1 MiB, or a duration of at least 1 s: the library's own grammar,
    the one ``VRAMTRACE_KEEP_LAST`` and the analyzer read); returns it. The
    message of a bad one names the valid forms."""
    text = str(text)
    err = ctypes.create_string_buffer(512)
    if load().vramtrace_check_keep_last(text.encode(), err, len(err)) != 0:
        raise VramtraceError(f"keep_last: {err.value.decode('utf-8', 'replace')}")
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
