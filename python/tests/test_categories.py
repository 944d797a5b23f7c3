"""The categories walker (``vramtrace/_categories.py``) without a GPU or
PyTorch: duck-typed tensors, modules and optimizers, a sink that collects
what a walk would tag, and one walk through the library into a trace.

What must hold: each block is tagged once with what it holds, and again only
when it is a new block (a new gradient object, even at the last one's
address; a parameter whose storage moved); nothing is kept alive; what
cannot be read is skipped and reported once; one emit per device per walk.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import json
import os
import subprocess
import weakref
from typing import ClassVar

import pytest

import torch_sink
import vramtrace
from vramtrace import _library
from vramtrace._categories import BUFFER, GRADIENT, OPTIMIZER_STATE, PARAMETER, Walker


class T:
    """A tensor as the walker reads it. Methods are C callables, as a real
    tensor's are, so the cost test measures the walker's own work."""

    def __init__(self, addr: int, device: int = 0, cuda: bool = True, offset: int = 0,
                 itemsize: int = 4) -> None:
        self.grad = None
        self.is_cuda = cuda
        self.moved_to(addr, device, offset, itemsize)

    def moved_to(self, addr: int, device: int = 0, offset: int = 0, itemsize: int = 4) -> None:
        """The storage changes under the same object (``param.data = ...``)."""
        self.data_ptr = itertools.repeat(addr + offset * itemsize).__next__
        self.storage_offset = itertools.repeat(offset).__next__
        self.element_size = itertools.repeat(itemsize).__next__
        self.get_device = itertools.repeat(device if self.is_cuda else -1).__next__


class P(T):
    """A parameter."""


class Counted(T):
    """Counts reads of its storage."""

    reads = 0

    def __init__(self, *a, **k) -> None:
        super().__init__(*a, **k)
        ptr = self.data_ptr

        def data_ptr():
            Counted.reads += 1
            return ptr()

        self.data_ptr = data_ptr


class Broken(T):
    """A tensor without storage (a fake or functional tensor)."""

    def __init__(self) -> None:
        super().__init__(0)

        def data_ptr():
            raise RuntimeError("Cannot access data pointer of Tensor that doesn't have storage")

        self.data_ptr = data_ptr


class DTensor(P):
    """FSDP2's sharded parameter: the local shard holds the memory."""

    def __init__(self, local: T) -> None:
        self._local_tensor = local
        self.grad = None

    def to_local(self):
        return self._local_tensor


class Module:
    def __init__(self, params=(), buffers=()) -> None:
        self._parameters = {f"p{i}": p for i, p in enumerate(params)}
        self._buffers = {f"b{i}": b for i, b in enumerate(buffers)}


class Optimizer:
    def __init__(self, params, state_per_param=2, base=0x9000_0000) -> None:
        self.param_groups = [{"params": list(params)}]
        self.state = {}
        self._base = base
        self._per = state_per_param

    def init_state(self) -> None:
        """What the first step does: state per parameter, and a CPU step."""
        addr = itertools.count(self._base, 0x1000)
        for p in self.param_groups[0]["params"]:
            self.state[p] = {"step": T(0, cuda=False)}
            for k in range(self._per):
                self.state[p][f"m{k}"] = T(next(addr))


class Sink:
    def __init__(self) -> None:
        self.calls = []

    def __call__(self, device, addrs, codes) -> None:
        self.calls.append((device, list(addrs), list(codes)))

    def take(self) -> list:
        """The (device, addr, code) tagged since the last take, sorted."""
        tags = sorted((d, a, c) for d, addrs, codes in self.calls for a, c in zip(addrs, codes))
        self.calls = []
        return tags


PLAIN = [T, P]


def walker(report=None):
    sink = Sink()
    return Walker(sink, PLAIN, report), sink


def model(n=4, base=0x1000_0000):
    params = [P(base + i * 0x10_0000) for i in range(n)]
    return Module(params), params


def give_grads(params, base=0x5000_0000):
    for i, p in enumerate(params):
        p.grad = T(base + i * 0x1000)


def test_a_step_tags_parameters_gradients_and_state_once():
    w, sink = walker()
    m, params = model()
    w.add_module(m)
    opt = Optimizer(params)
    give_grads(params)
    opt.init_state()
    w.step(opt)
    tags = sink.take()
    assert [c for _, _, c in tags].count(PARAMETER) == 4
    assert [c for _, _, c in tags].count(GRADIENT) == 4
    assert [c for _, _, c in tags].count(OPTIMIZER_STATE) == 8, "the CPU step is not tagged"
    assert (0, 0x1000_0000, PARAMETER) in tags
    assert (0, 0x5000_0000, GRADIENT) in tags
    assert len(sink.calls) == 0
    # Nothing changed (zero_grad(set_to_none=False)): nothing to tag.
    w.step(opt)
    assert sink.take() == []
    w.final()
    assert sink.take() == []
    assert w.walks == 3


def test_new_gradients_at_the_same_addresses_are_tagged_again():
    """zero_grad(set_to_none=True): each iteration's gradients are new
    blocks, often where the last ones were. Object identity tells them
    apart, addresses cannot (and ids of dead objects are reused)."""
    w, sink = walker()
    m, params = model()
    w.add_module(m)
    opt = Optimizer(params)
    opt.init_state()
    for _ in range(5):
        give_grads(params)  # same addresses every time
        w.step(opt)
        tags = sink.take()
        assert [t for t in tags if t[2] == GRADIENT] == [
            (0, 0x5000_0000 + i * 0x1000, GRADIENT) for i in range(4)]
        for p in params:
            p.grad = None  # zero_grad(set_to_none=True)
        gc.collect()


def test_the_same_gradient_object_is_not_read_again():
    w, sink = walker()
    p = Counted(0x1000)
    p.grad = Counted(0x2000)
    m = Module([p])
    w.add_module(m)
    opt = Optimizer([p])
    opt.init_state()
    w.step(opt)
    assert len(sink.take()) == 1 + 1 + 2
    Counted.reads = 0
    for _ in range(10):
        w.step(opt)
    assert sink.take() == []
    # Neither is read again: the gradient is the same object, and the
    # parameter's storage (it may move) is checked on the modules' turn.
    assert Counted.reads == 0


def test_a_parameter_whose_storage_moved_is_tagged_again_with_its_gradient():
    w, sink = walker()
    m, params = model(2)
    w.add_module(m)
    give_grads(params)
    w.final()
    assert len(sink.take()) == 4
    params[1].moved_to(0x7000_0000)  # module.to(): param.data = new storage
    w.final()
    assert sink.take() == [(0, 0x5000_1000, GRADIENT), (0, 0x7000_0000, PARAMETER)]


def test_frozen_modules_buffers_and_views_are_tagged_at_the_final_walk():
    w, sink = walker()
    # A view's block starts storage_offset elements before its data.
    view = P(0x2000_0000, offset=16, itemsize=2)
    running = T(0x3000_0000)
    m = Module([view], [running, T(0x3100_0000, cuda=False), None])
    w.add_module(m)
    w.final()
    assert sink.take() == [(0, 0x2000_0000, PARAMETER), (0, 0x3000_0000, BUFFER)]


def test_cpu_meta_and_unreadable_tensors_are_skipped_and_reported_once():
    reports = []
    w, sink = walker(reports.append)
    broken = [Broken(), Broken()]
    cpu = P(0x1234, cuda=False)
    m = Module([cpu, *broken, P(0x4000_0000)])
    w.add_module(m)
    w.final()
    w.final()
    assert sink.take() == [(0, 0x4000_0000, PARAMETER)]
    assert len(reports) == 1 and "data pointer" in reports[0], reports
    # A CPU parameter moved to the GPU under the same object is found.
    cpu.is_cuda = True
    cpu.moved_to(0x4100_0000)
    w.final()
    assert sink.take() == [(0, 0x4100_0000, PARAMETER)]


def test_dtensor_parameters_are_tagged_by_their_local_shard():
    w, sink = walker()
    shard = DTensor(P(0x6000_0000, device=1))
    shard.grad = DTensor(T(0x6100_0000, device=1))
    opt = Optimizer([shard])
    opt.state[shard] = {"exp_avg": DTensor(T(0x6200_0000, device=1))}
    w.step(opt)  # a parameter in no registered module: the optimizer's
    assert sink.take() == [(1, 0x6000_0000, PARAMETER), (1, 0x6100_0000, GRADIENT),
                           (1, 0x6200_0000, OPTIMIZER_STATE)]


def test_one_emit_per_device_per_walk():
    w, sink = walker()
    params = [P(0x1000 * (i + 1), device=i % 3) for i in range(9)]
    m = Module(params)
    w.add_module(m)
    w.final()
    assert sorted(d for d, _, _ in sink.calls) == [0, 1, 2]
    assert all(len(a) == 3 for _, a, _ in sink.calls)


def test_optimizer_state_replaced_grown_or_loaded_is_tagged():
    w, sink = walker()
    m, params = model(3)
    w.add_module(m)
    opt = Optimizer(params[:2], state_per_param=1)
    opt.init_state()
    w.step(opt)
    assert [t for t in sink.take() if t[2] == OPTIMIZER_STATE] == [
        (0, 0x9000_0000, OPTIMIZER_STATE), (0, 0x9000_1000, OPTIMIZER_STATE)]
    # A state tensor replaced (the old one dies).
    opt.state[params[0]]["m0"] = T(0xA000_0000)
    gc.collect()
    w.step(opt)
    assert sink.take() == [(0, 0xA000_0000, OPTIMIZER_STATE)]
    # The state grows (a parameter stepped for the first time).
    opt.param_groups[0]["params"].append(params[2])
    opt.state[params[2]] = {"m0": T(0xB000_0000)}
    w.step(opt)
    assert sink.take() == [(0, 0xB000_0000, OPTIMIZER_STATE)]
    # load_state_dict: a new state, new tensors at the same addresses.
    opt.state = {p: {"m0": T(0x9000_0000 + i)} for i, p in enumerate(params)}
    gc.collect()
    w.step(opt)
    assert sink.take() == [(0, 0x9000_0000 + i, OPTIMIZER_STATE) for i in range(3)]
    w.step(opt)
    assert sink.take() == []


def test_nothing_is_kept_alive():
    w, sink = walker()
    m, params = model(2)
    give_grads(params)
    opt = Optimizer(params)
    opt.init_state()
    w.add_module(m)
    w.step(opt)
    assert len(sink.take()) == 2 + 2 + 4
    refs = [weakref.ref(x) for x in (m, opt, params[0], params[0].grad,
                                     opt.state[params[0]]["m0"])]
    del m, params, opt
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)
    w.final()  # the dead are gone: nothing to tag, nothing fails
    assert sink.take() == []


def test_forget_tags_everything_again_for_a_new_recording():
    w, sink = walker()
    m, _ = model(2)
    w.add_module(m)
    w.final()
    assert len(sink.take()) == 2
    w.final()
    assert sink.take() == []
    w.forget()
    w.final()
    assert len(sink.take()) == 2


def test_a_known_module_registering_again_costs_a_lookup():
    """FSDP2 registers its modules' parameters anew at every unshard and
    reshard: a module already known is not added again (nor its walk
    redone), a new one at a dead one's address is."""
    w, sink = walker()
    m, _ = model(1)
    w.add_module(m)
    generation = w._generation
    for _ in range(100):
        w.add_module(m)
    assert w._generation == generation
    w.final()
    assert len(sink.take()) == 1
    del m
    gc.collect()
    m2, _ = model(1, base=0x2000_0000)
    w.add_module(m2)
    assert w._generation == generation + 1
    w.final()
    assert sink.take() == [(0, 0x2000_0000, PARAMETER)]


def test_modules_that_exist_are_found_by_a_scan():
    w, sink = walker()
    m, _ = model(1)
    assert w.scan_modules(Module) >= 1
    w.final()
    assert sink.take() == [(0, 0x1000_0000, PARAMETER)]
    del m


def test_a_step_reads_only_the_gradients():
    """A step's walk (148 parameters, new gradients every step, AdamW's 296
    state tensors) reads each parameter's storage only on the modules' turn
    (every MODULE_WALK_EVERY steps): the rest of the time it reads each
    gradient once. What that costs on a GPU is categories_check.py's."""
    from vramtrace._categories import MODULE_WALK_EVERY
    w, sink = walker()
    params = [Counted(0x1000_0000 + i * 0x10_0000) for i in range(148)]
    w.add_module(Module(params))
    opt = Optimizer(params)
    opt.init_state()
    give_grads(params)
    w.step(opt)
    assert len(sink.take()) == 148 * 3 + 296 - 148
    for step in range(1, 2 * MODULE_WALK_EVERY + 1):
        give_grads(params)
        Counted.reads = 0
        w.step(opt)
        assert len(sink.calls) == 1 and len(sink.calls[0][1]) == 148
        sink.calls = []
        on_turn = step % MODULE_WALK_EVERY == 0
        assert Counted.reads == (148 if on_turn else 0), step


class Watch:
    """A gradient watch as the shim keeps one: tags each new gradient of
    its parameters itself (here, into `sink` directly)."""

    made: ClassVar[list[Watch]] = []

    def __init__(self, params, sink) -> None:
        self.params = [weakref.ref(p) for p in params]
        self.last = [None] * len(params)
        self.sink = sink
        Watch.made.append(self)

    def tag_new(self) -> int:
        n = 0
        for i, r in enumerate(self.params):
            p = r()
            g = p.grad if p is not None else None
            if g is None or (self.last[i] is not None and self.last[i]() is g):
                continue
            self.last[i] = weakref.ref(g)
            self.sink(g.get_device(), [g.data_ptr()], [GRADIENT])
            n += 1
        return n


def test_a_watch_takes_the_plain_parameters_gradients():
    """With the shim's watch, a step reads no gradient in Python but a
    DTensor's; the watch is made once per parameter list."""
    sink = Sink()
    Watch.made = []
    w = Walker(sink, PLAIN, None, lambda params: Watch(params, sink))
    m, params = model(3)
    shard = DTensor(P(0x6000_0000))
    w.add_module(m)
    opt = Optimizer([*params, shard])
    for step in range(3):
        give_grads(params, base=0x5000_0000 + step)
        shard.grad = DTensor(T(0x6100_0000 + step))
        w.step(opt)
        # (The modules' walk of the first step tags the gradients of the
        # parameters it meets too: a tag repeated is harmless.)
        grads = sorted({a for _, a, c in sink.take() if c == GRADIENT})
        assert grads == sorted([0x5000_0000 + step + i * 0x1000 for i in range(3)]
                               + [0x6100_0000 + step])
    assert len(Watch.made) == 1 and len(Watch.made[0].params) == 3
    assert w.tags >= 3 * 3
    # A new parameter list makes a new watch.
    opt.param_groups.append({"params": [P(0x7000_0000)]})
    w.step(opt)
    assert len(Watch.made) == 2


# ------------------------------------------------------- through the library

def test_a_walk_tags_blocks_of_a_trace_through_the_library(tmp_path):
    """The walker's emit is one vramtrace_observe_tag call per device; the
    trace holds the tags and the header says categories are tagged."""
    lib = _library.load()
    sink = torch_sink.sink(lib)
    out = tmp_path / "tags.vtrace"
    config = (f"out={out}\nstacks=none\nstate=empty\ndevice=0\t85899345920\tno GPU\n"
              "meta.categories=tags\n")
    assert lib.vramtrace_observe_start(config.encode()) == 0
    calls = []

    def emit(device, addrs, codes):
        calls.append(device)
        n = lib.vramtrace_observe_tag(device, addrs.buffer_info()[0], codes.buffer_info()[0],
                                      len(addrs))
        assert n == len(addrs)

    try:
        base = 1 << 40
        for kind, addr, size in [(torch_sink.SEGMENT_ALLOC, base, 20 << 20),
                                 (torch_sink.ALLOC, base, 1 << 20),
                                 (torch_sink.ALLOC, base + (1 << 20), 1 << 20),
                                 (torch_sink.ALLOC, base + (2 << 20), 2 << 20)]:
            event = torch_sink.TorchEvent(kind, 0, addr, size, 0, 0, None)
            sink.event(ctypes.byref(event))
        p = P(base)
        p.grad = T(base + (1 << 20))
        opt = Optimizer([p], state_per_param=1, base=base + (2 << 20))
        opt.init_state()
        w = Walker(emit, PLAIN)
        m = Module([p])
        w.add_module(m)
        w.step(opt)
        assert calls == [0]
        # The shim's way: through the sink (tags since ABI 3), its gradient watch's tags.
        assert sink.abi == 5
        grad = (ctypes.c_uint64 * 1)(base + (1 << 20)), (ctypes.c_uint8 * 1)(GRADIENT)
        assert sink.tag(0, grad[0], grad[1], 1) == 1
        # A code of no category is refused whole.
        bad = (ctypes.c_uint64 * 1)(base), (ctypes.c_uint8 * 1)(9)
        assert lib.vramtrace_observe_tag(0, ctypes.addressof(bad[0]),
                                         ctypes.addressof(bad[1]), 1) == -1
        # A device not recorded: nothing to tag.
        assert lib.vramtrace_observe_tag(5, ctypes.addressof(bad[0]),
                                         ctypes.addressof(bad[1]), 0) == 0
    finally:
        assert lib.vramtrace_observe_stop() == 0
    p = subprocess.run([os.fspath(vramtrace.analyzer_path()), "info", os.fspath(out), "--json"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    text = json.dumps(info)
    assert '"categories": "tags"' in text, text
    assert '"tag": 4' in text, text


@pytest.mark.parametrize("flag", [[], ["--no-categories"]])
def test_the_run_command_takes_no_categories(flag):
    from vramtrace import __main__ as main

    ns = main.parser().parse_args(["run", *flag, "script.py"])
    assert ns.no_categories == bool(flag)


def test_categories_line_in_the_recorders_configuration():
    from vramtrace import _observer

    class Cuda:
        @staticmethod
        def device_count():
            return 0

        class memory:  # torch's name
            @staticmethod
            def _snapshot():
                return {}

    class Torch:
        cuda = Cuda
        __version__ = "0"

    assert "meta.categories=tags\n" in _observer._config(Torch, None, "none", False, True)
    assert "categories" not in _observer._config(Torch, None, "none", False, False)


# ------------------------------------------------------- categories of your own

class Stored:
    """A tensor as ``vramtrace.tag`` reads it: its storage's address."""

    def __init__(self, addr: int, device: int = 0, cuda: bool = True) -> None:
        self.is_cuda = cuda
        self.get_device = itertools.repeat(device if cuda else -1).__next__
        storage = type("S", (), {"data_ptr": itertools.repeat(addr).__next__})()
        self.untyped_storage = itertools.repeat(storage).__next__


class Holder:
    """A module as ``vramtrace.tag`` reads it."""

    def __init__(self, params, buffers=()) -> None:
        self._p, self._b = list(params), list(buffers)

    def parameters(self):
        return iter(self._p)

    def buffers(self):
        return iter(self._b)


@pytest.mark.parametrize("bad", ["", "x" * 65, "kv\ncache", "bell\a"])
def test_a_category_name_is_short_printable_text(bad):
    with pytest.raises(ValueError):
        vramtrace.tag([], bad)


def test_tag_takes_tensors_modules_and_containers_only():
    with pytest.raises(TypeError):
        vramtrace.tag(42, "kv_cache")
    with pytest.raises(TypeError):
        vramtrace.tag([], b"kv_cache")  # type: ignore[arg-type]
    # Nothing on a GPU: nothing to tag, and the library is not asked.
    assert vramtrace.tag([Stored(0x1000, cuda=False)], "kv_cache") == 0


def test_user_tags_reach_the_summary_as_rows_of_their_own(tmp_path):
    """``vramtrace.tag`` through the library into a trace: the summary shows
    the category exact, as its own row; views of one storage count once; a
    built-in name records a built-in tag."""
    lib = _library.load()
    sink = torch_sink.sink(lib)
    out = tmp_path / "user.vtrace"
    config = f"out={out}\nstacks=none\nstate=empty\ndevice=0\t85899345920\tno GPU\n"
    assert lib.vramtrace_observe_start(config.encode()) == 0
    base = 1 << 40
    try:
        for kind, addr, size in [(torch_sink.SEGMENT_ALLOC, base, 64 << 20),
                                 (torch_sink.ALLOC, base, 32 << 20),
                                 (torch_sink.ALLOC, base + (32 << 20), 8 << 20),
                                 (torch_sink.ALLOC, base + (40 << 20), 2 << 20)]:
            event = torch_sink.TorchEvent(kind, 0, addr, size, 0, 0, None)
            sink.event(ctypes.byref(event))
        kv = [Stored(base), Stored(base)]  # a tensor and a view of it
        assert vramtrace.tag({"k": kv[0], "v": kv[1]}, "kv_cache") == 1
        assert vramtrace.tag(Holder([Stored(base + (32 << 20))]), "lora") == 1
        assert vramtrace.tag(Stored(base + (40 << 20)), "activations") == 1
        # A refused name from C: nothing recorded.
        addrs = (ctypes.c_uint64 * 1)(base)
        assert lib.vramtrace_observe_tag_user(0, b"", ctypes.addressof(addrs), 1) == -1
        assert lib.vramtrace_observe_tag_user(0, None, ctypes.addressof(addrs), 1) == -1
    finally:
        assert lib.vramtrace_observe_stop() == 0
    p = subprocess.run([os.fspath(vramtrace.analyzer_path()), "summary", os.fspath(out),
                        "--json"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    summary = vramtrace.one_device(json.loads(p.stdout))
    cats = summary["categories"]
    user = {u["name"]: u["at_end"] for u in cats["user"]}
    assert user == {"kv_cache": 32 << 20, "lora": 8 << 20}, cats
    at_end = {c["category"]: (c["bytes"], c["exact_bytes"]) for c in cats["at_end"]}
    assert at_end["other"] == (40 << 20, 40 << 20), at_end
    assert at_end["activations"] == (2 << 20, 2 << 20), at_end
