"""Crash safety through the library: a child Python process records in
observer mode through ``libvramtrace_recorder.so`` (feeding the sink the
shim feeds, so no GPU or PyTorch is needed) and is killed with SIGKILL at a
random moment; every allocation it had recorded a second before the kill
must be in its trace (docs/recording.md, crash safety).

The child reports how many allocations it has recorded, every millisecond,
on its standard output; a count read at time t was recorded before t.
``recorder/tests/crash_safety.rs`` does the same through the Rust API, at
rates up to millions of events per second.
"""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import vramtrace

BOUND = 1.0  # seconds

CHILD = textwrap.dedent(r"""
    import ctypes, sys, time

    sys.path.insert(0, sys.argv[5])
    from torch_sink import ALLOC, FREE_COMPLETED, FREE_REQUESTED, SEGMENT_ALLOC, TorchEvent
    import torch_sink

    lib = ctypes.CDLL(sys.argv[1])
    out, rate, burst = sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    sink = torch_sink.sink(lib)
    torch_sink.start(lib, out)
    SEGMENT = 1 << 40
    event = TorchEvent(SEGMENT_ALLOC, 0, SEGMENT, 1 << 30, 0, 0, None)
    sink.event(ctypes.byref(event))
    started = last = time.monotonic()
    done = 0
    while True:
        now = time.monotonic()
        if done < burst and (rate == 0 or now >= started + done / rate):
            addr = SEGMENT + (done % 16) * 65536
            for kind in (ALLOC, FREE_REQUESTED, FREE_COMPLETED):
                event.kind, event.addr, event.size = kind, addr, 512 * (1 + done % 64)
                sink.event(ctypes.byref(event))
            done += 1
        elif rate > 0 or done >= burst:
            time.sleep(0.0005)
        if now - last >= 0.001:
            print(done, flush=True)
            last = now
""")


def kill_and_count(tmp_path: Path, rate: float, burst: int, kill_after: float):
    out = tmp_path / f"kill-{rate}-{burst}.vtrace"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(vramtrace.library_path()), str(out), str(rate),
         str(burst), str(Path(__file__).parent)],
        stdout=subprocess.PIPE, text=True)
    reports = [(time.monotonic(), 0)]

    def read():
        for line in child.stdout:
            reports.append((time.monotonic(), int(line)))

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(kill_after)
    child.kill()
    killed = time.monotonic()
    child.wait()
    reader.join()
    required = max((n for at, n in reports if at <= killed - BOUND), default=0)
    recorded = max(n for at, n in reports if at <= killed)
    # Killed: the trace has no footer (or ends inside a record), and says so.
    with pytest.warns(vramtrace.AnalyzerWarning):
        counts = vramtrace.load(out).info().counts
    survived = counts.get("alloc", 0)
    return survived, required, recorded


# ~10 events/s, thousands, as fast as ctypes goes, and a burst then silence.
@pytest.mark.parametrize("rate,burst", [(3, 10**9), (1000, 10**9), (0, 10**9), (0, 20_000)])
def test_a_killed_recording_keeps_everything_older_than_a_second(tmp_path, rate, burst):
    kill_after = random.uniform(1.3, 2.5)
    survived, required, recorded = kill_and_count(tmp_path, rate, burst, kill_after)
    assert recorded > 0
    assert survived >= required, (
        f"killed after {kill_after:.2f} s: {survived} of {recorded} allocations survived, "
        f"{required} were recorded a second before the kill")
