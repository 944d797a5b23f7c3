"""Bounded recording without a GPU (issue #33, part 5): events fed to the
library as the shim feeds them, into a recording that keeps its last
1 MiB. The ring stays within it; a dump, on demand or on SIGUSR2, and the
dump at the first out-of-memory error analyze with exact peaks, memory
allocated before the window included; the end joins the ring into the
trace and removes it."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import torch_sink
import vramtrace
from vramtrace import _bounded, _library

MiB = 1 << 20
WEIGHTS = 64 * MiB
SPIKE = 100 * MiB
BOUND = 1 * MiB


def summary(path) -> dict:
    p = subprocess.run([os.fspath(vramtrace.analyzer_path()), "summary", "--json",
                        os.fspath(path)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return vramtrace.one_device(json.loads(p.stdout))


def ring_bytes(trace) -> int:
    ring = f"{trace}.ring"
    return sum(os.path.getsize(os.path.join(ring, f)) for f in os.listdir(ring))


def wait_for(path, seconds=10.0) -> None:
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


class Serving:
    """A device with weights held from the start, and requests that each
    reserve a segment, fill it with one block and give both back."""

    def __init__(self, lib):
        self.sink = torch_sink.sink(lib)
        self.next_addr = 1 << 40

    def event(self, kind, addr, size):
        e = torch_sink.TorchEvent(kind, 0, addr, size, 0, 0, None)
        self.sink.event(ctypes.byref(e))

    def hold(self, size) -> int:
        addr = self.next_addr
        self.next_addr += size
        self.event(torch_sink.SEGMENT_ALLOC, addr, size)
        self.event(torch_sink.ALLOC, addr, size)
        return addr

    def request(self, size) -> None:
        addr = self.next_addr
        self.event(torch_sink.SEGMENT_ALLOC, addr, size)
        self.event(torch_sink.ALLOC, addr, size)
        self.event(torch_sink.FREE_REQUESTED, addr, size)
        self.event(torch_sink.FREE_COMPLETED, addr, size)
        self.event(torch_sink.SEGMENT_FREE, addr, size)


def start_bounded(lib, out) -> None:
    config = (f"out={out}\nstacks=none\nstate=empty\nkeep_last=1MiB\n"
              "device=0\t85899345920\tno GPU\n")
    assert lib.vramtrace_observe_start(config.encode()) == 0


def test_a_bounded_recording_stays_in_bounds_and_dumps_exact_windows(tmp_path):
    lib = _library.load()
    trace = tmp_path / "serve.vtrace"
    start_bounded(lib, trace)
    device = Serving(lib)
    largest = 0
    try:
        device.hold(WEIGHTS)
        for i in range(60_000):
            device.request((1 + i % 7) * 2 * MiB)
            if i == 55_000:
                device.request(SPIKE)
            if i % 5_000 == 0:
                largest = max(largest, ring_bytes(trace))
        # On demand: beside the trace, numbered.
        assert vramtrace.dump() == [str(tmp_path / "serve-dump-1.vtrace")]
        first = summary(tmp_path / "serve-dump-1.vtrace")
        # The weights came long before the window: the state it starts
        # from holds them, so the peak is exact.
        assert first["peak_allocated_bytes"] == WEIGHTS + SPIKE
        assert first["first_time_ns"] > 0 and first["events"] < 200_000
        assert first["end"]["allocated_bytes"] == WEIGHTS
        # On SIGUSR2, on a thread of the package's.
        assert _bounded.install_signal_handler()
        try:
            os.kill(os.getpid(), signal.SIGUSR2)
            wait_for(tmp_path / "serve-dump-2.vtrace")
        finally:
            signal.signal(signal.SIGUSR2, signal.SIG_DFL)
            _bounded._handler_installed = False
        # To a path of the caller's; then the first out-of-memory error.
        assert vramtrace.dump(str(tmp_path / "mine.vtrace")) == [str(tmp_path / "mine.vtrace")]
        device.event(torch_sink.OOM, 123, 1 << 40)
        assert lib.vramtrace_flush() == 0
        wait_for(tmp_path / "serve-oom.vtrace")
    finally:
        assert lib.vramtrace_observe_stop() == 0
    assert largest > BOUND // 2, largest
    assert largest <= BOUND, f"the ring held {largest} bytes"
    assert not os.path.exists(f"{trace}.ring"), "the ring is removed at the end"
    oom = summary(tmp_path / "serve-oom.vtrace")
    assert oom["oom_count"] == 1 and oom["ooms"][0]["requested_bytes"] == 1 << 40
    assert oom["ooms"][0]["allocated_bytes"] == WEIGHTS
    end = summary(trace)
    assert end["peak_allocated_bytes"] == WEIGHTS + SPIKE
    assert end["oom_count"] == 1


def test_dumping_a_recording_that_keeps_everything_says_why(tmp_path, capfd):
    lib = _library.load()
    torch_sink.start(lib, tmp_path / "whole.vtrace")
    try:
        Serving(lib).hold(2 * MiB)
        with pytest.raises(vramtrace.VramtraceError, match="dump failed"):
            vramtrace.dump()
    finally:
        assert lib.vramtrace_observe_stop() == 0
    assert "only a bounded recording" in capfd.readouterr().err


def test_keep_last_values_are_checked():
    with pytest.raises(vramtrace.VramtraceError, match="expected a size"):
        vramtrace.start(keep_last="50")
    p = subprocess.run([sys.executable, "-m", "vramtrace", "run", "--keep-last", "1KiB",
                        "--", os.devnull], capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "the least is 1MiB" in p.stderr, p.stderr
