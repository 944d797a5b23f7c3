"""Phases per thread through the library: ``vramtrace.phase`` on many
threads at once, and the ``iter`` phase cut at an optimizer step, in
observer mode (fed the events the shim would feed: no GPU or PyTorch). Each
thread's phases nest on their own, no thread ends another's, and the
analyzer shows the main thread's unless asked for another's.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import threading

import torch_sink
import vramtrace
from vramtrace import _library


def analyze(command: str, path, *flags: str) -> tuple[dict, str]:
    p = subprocess.run([os.fspath(vramtrace.analyzer_path()), command, os.fspath(path), "--json",
                        *flags], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return vramtrace.one_device(json.loads(p.stdout)), p.stderr


def test_threads_phases_nest_apart_and_the_main_threads_are_shown(tmp_path):
    lib = _library.load()
    lib.vramtrace_iteration_end.argtypes = [ctypes.c_int]
    sink = torch_sink.sink(lib)
    out = tmp_path / "phases.vtrace"
    torch_sink.start(lib, out)
    try:
        # The first event creates the device's trace.
        event = torch_sink.TorchEvent(torch_sink.SEGMENT_ALLOC, 0, 1 << 40, 1 << 30, 0, 0, None)
        sink.event(ctypes.byref(event))
        workers_ready = threading.Barrier(9)
        iterations_done = threading.Event()

        def worker(n: int):
            for _ in range(200):
                with vramtrace.phase("worker"), vramtrace.phase(f"inner{n}"):
                    pass
            # A phase named like the iterations, open while the main thread
            # cuts them: it must stay open.
            with vramtrace.phase("iter0"):
                workers_ready.wait()
                iterations_done.wait()

        with vramtrace.phase("setup"):
            threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
            for t in threads:
                t.start()
            workers_ready.wait()
        # The optimizer is made: iter0 begins; each step ends one and begins
        # the next.
        assert lib.vramtrace_iteration_begin() == 1
        for _ in range(3):
            lib.vramtrace_iteration_end(0)
        iterations_done.set()
        for t in threads:
            t.join()
    finally:
        # Stopping ends the main thread's last iteration.
        assert lib.vramtrace_observe_stop() == 0

    summary, _ = analyze("summary", out)
    assert summary["inconsistencies"]["total"] == 0
    timeline, _ = analyze("timeline", out)
    assert [p["name"] for p in timeline["phases"]] == ["setup", "iter0", "iter1", "iter2", "iter3"]
    # Told once, in the summary: each worker began 401 phases.
    others = [t["thread"] for t in summary["hidden_phases"] if t["phases"] == 401]
    assert len(others) == 8, summary["hidden_phases"]
    leaks, _ = analyze("leaks", out)
    # The main thread's: `setup`, and the four iterations (the last from the
    # third step to the stop).
    assert leaks["phase_instances"] == 1 + 4
    for thread in others:
        summary, _ = analyze("summary", out, "--phase-thread", str(thread))
        assert summary["inconsistencies"]["total"] == 0
        leaks, _ = analyze("leaks", out, "--phase-thread", str(thread))
        assert leaks["phase_instances"] == 200 * 2 + 1
        assert thread not in [t["thread"] for t in summary["hidden_phases"]]


def test_an_iteration_ends_with_the_optimizer_steps_range(tmp_path):
    """With phases on, the optimizer-step hook only marks the iteration's
    end, which comes with the `Optimizer.step#...` range that encloses the
    hook: the iterations then nest the ranges as they nest in time."""
    lib = _library.load()
    lib.vramtrace_iteration_end.argtypes = [ctypes.c_int]
    sink = torch_sink.sink(lib)
    phase = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p)(sink.phase)
    out = tmp_path / "steps.vtrace"
    torch_sink.start(lib, out)
    try:
        event = torch_sink.TorchEvent(torch_sink.SEGMENT_ALLOC, 0, 1 << 40, 1 << 30, 0, 0, None)
        sink.event(ctypes.byref(event))
        assert lib.vramtrace_iteration_begin() == 1
        for _ in range(3):
            phase(1, b"Optimizer.step#AdamW.step")
            lib.vramtrace_iteration_end(1)
            phase(0, b"Optimizer.step#AdamW.step")
            phase(1, b"Optimizer.zero_grad#AdamW.zero_grad")
            phase(0, b"Optimizer.zero_grad#AdamW.zero_grad")
    finally:
        assert lib.vramtrace_observe_stop() == 0
    timeline, _ = analyze("timeline", out)
    names = [(p["name"], p["depth"]) for p in timeline["phases"]]
    zero = ("Optimizer.zero_grad#AdamW.zero_grad", 1)
    step = ("Optimizer.step#AdamW.step", 1)
    # Loop index i runs in iter<i>: the step that ends it runs inside it.
    assert names == [("iter0", 0), step, ("iter1", 0), zero, step, ("iter2", 0), zero, step,
                     ("iter3", 0), zero], names
    leaks, _ = analyze("leaks", out)
    assert any(p["phase"] == "iter#" and p["repetitions"] == 4 for p in leaks["repeated_phases"]), \
        leaks["repeated_phases"]
