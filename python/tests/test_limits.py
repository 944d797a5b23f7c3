"""The recording side of issue #28 without a GPU: the limit PyTorch
enforces for a memory fraction, the wrapper of
``set_per_process_memory_fraction`` (records after PyTorch took the call,
never breaks it), the optimizer-constructor hook that begins ``iter0``, and
the device-memory samples and limits through the library as the shim and
the package feed them. A fake ``torch`` stands in for PyTorch."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import types

import pytest

import torch_sink
import vramtrace
from vramtrace import _library, _observer

GiB = 1 << 30
TOTAL = 150109880320  # an H200's totalGlobalMem


def fake_torch(current=0, fail=False):
    calls = []

    def set_fraction(fraction, device=None):
        if not isinstance(fraction, float) or not 0 <= fraction <= 1:
            raise ValueError(f"Invalid fraction value: {fraction}")
        if fail:
            raise RuntimeError("CUDA error")
        calls.append((fraction, device))

    class Optimizer:
        def __init__(self, params, defaults=None):
            self.params = list(params)

    cuda = types.SimpleNamespace(
        set_per_process_memory_fraction=set_fraction,
        current_device=lambda: current,
        get_device_properties=lambda d: types.SimpleNamespace(total_memory=TOTAL),
        memory=types.SimpleNamespace(set_per_process_memory_fraction=set_fraction),
        empty_cache=lambda: None,
    )
    return types.SimpleNamespace(cuda=cuda, optim=types.SimpleNamespace(Optimizer=Optimizer)), calls


def test_the_limit_is_what_pytorch_computes():
    torch, _ = fake_torch()
    # static_cast<size_t>(fraction * double(total)): truncated, as in C++.
    assert _observer.memory_limit(torch, 0.3, 0) == (45032964096, TOTAL)
    assert _observer.memory_limit(torch, 0.1, 0) == (int(0.1 * float(TOTAL)), TOTAL)
    assert _observer.memory_limit(torch, 1.0, 0) == (TOTAL, TOTAL), "no cap"
    assert _observer.memory_limit(torch, 0.0, 0) == (0, TOTAL)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError):
            _observer.memory_limit(torch, bad, 0)


def info(path) -> dict:
    p = subprocess.run([os.fspath(vramtrace.analyzer_path()), "info", os.fspath(path), "--json"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_limits_and_samples_reach_the_trace(tmp_path, monkeypatch):
    lib = _library.load()
    sink = torch_sink.sink(lib)
    out = tmp_path / "limits.vtrace"
    torch, calls = fake_torch(current=0)
    monkeypatch.setattr(_observer, "_hooks_installed", False)
    original = torch.cuda.set_per_process_memory_fraction
    _observer._wrap_memory_fraction(torch, lib)
    wrapped = torch.cuda.set_per_process_memory_fraction
    assert wrapped is not original and torch.cuda.memory.set_per_process_memory_fraction is wrapped
    torch_sink.start(lib, out)
    monkeypatch.setattr(_observer, "_active", True)
    try:
        # Before the device's first event: kept, recorded first in its trace.
        wrapped(0.5)
        # PyTorch refuses: raised as always, nothing recorded.
        with pytest.raises(ValueError):
            wrapped(1.5)
        event = torch_sink.TorchEvent(torch_sink.SEGMENT_ALLOC, 0, 1 << 40, 1 << 30, 0, 0, None)
        assert sink.event(ctypes.byref(event)) == 1, "a segment event asks for a sample"
        assert sink.device_memory(0, 100 * GiB, TOTAL) == 1
        event = torch_sink.TorchEvent(torch_sink.ALLOC, 0, 1 << 40, 512, 0, 0, None)
        assert sink.event(ctypes.byref(event)) == 0, "a block event does not"
        wrapped(0.25, device=0)
        assert _observer.recorded_devices(lib) == [0]
    finally:
        monkeypatch.setattr(_observer, "_active", False)
        assert lib.vramtrace_observe_stop() == 0
    assert calls == [(0.5, None), (0.25, 0)]
    counts = info(out)["counts"]
    assert counts["limit"] == 2 and counts["device_memory"] == 1, counts
    # Not recording: the call goes through, nothing is recorded.
    wrapped(0.75)
    assert calls[-1] == (0.75, None)


def test_a_failing_recording_never_breaks_the_call(monkeypatch, capsys):
    torch, calls = fake_torch()

    class Broken:
        def vramtrace_observe_limit(self, *args):
            raise OSError("library gone")

    _observer._wrap_memory_fraction(torch, Broken())
    monkeypatch.setattr(_observer, "_active", True)
    torch.cuda.set_per_process_memory_fraction(0.5)
    assert calls == [(0.5, None)]
    assert "could not be recorded" in capsys.readouterr().err


def test_the_first_optimizer_begins_iter0(monkeypatch):
    torch, _ = fake_torch()
    begun = []

    class Lib:
        def vramtrace_iteration_begin(self):
            begun.append(1)
            return 1

    monkeypatch.setattr(_observer, "_optimizer_init_wrapped", False)
    _observer._wrap_optimizer_init(torch, Lib())
    monkeypatch.setattr(_observer, "_active", False)
    torch.optim.Optimizer([1, 2])
    assert begun == [], "not recording"
    monkeypatch.setattr(_observer, "_active", True)
    monkeypatch.setattr(_observer, "_iterations", True)
    opt = torch.optim.Optimizer([1, 2])
    assert opt.params == [1, 2] and begun == [1]
    monkeypatch.setattr(_observer, "_iterations", False)
    torch.optim.Optimizer([3])
    assert begun == [1], "--no-iterations"
    assert _observer._optimizer_exists(torch), "the optimizer made above is alive"
