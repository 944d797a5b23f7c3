"""What the categories walker costs a GPT-2 step, part by part (see
docs/performance-history.md, "Categories").

    PYTHONPATH=python VRAMTRACE_LIB=carry/libvramtrace_recorder.so \\
        python3 python/bench/bench_categories.py

Needs a CUDA GPU, PyTorch and transformers; a benchmark, not a test. Builds
Hugging Face GPT-2 (12 layers, AdamW), runs steps so that its parameters,
gradients and optimizer state exist, then times, each as the median of many
repetitions: the operations a walk is made of on the real tensors (reading
``.grad``, ``data_ptr()``, ``storage_offset()``, ``get_device()``, making a
weak reference), the walker's step with every gradient new (what
``zero_grad(set_to_none=True)`` makes each step) and with none new, and the
library call that records a step's tags, with a recording started.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import weakref
from pathlib import Path


def timed(f, repeat: int = 200) -> float:
    """Median seconds of `f()` over `repeat` calls (after a few warm ones)."""
    for _ in range(5):
        f()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    import vramtrace
    from vramtrace import _categories

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 50257, (8, 512)).cuda()

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            model(ids, labels=ids).loss.backward()
        opt.step()

    step()
    step()
    params = list(model.parameters())
    grads = [p.grad for p in params]
    n = len(params)
    rows = []

    def row(what: str, seconds: float, per: int = n) -> None:
        rows.append((what, seconds * 1e6, seconds * 1e9 / per if per else 0.0))

    row("p.grad, every parameter", timed(lambda: [p.grad for p in params]))
    row("p.data_ptr(), every parameter", timed(lambda: [p.data_ptr() for p in params]))
    row("g.data_ptr(), every gradient", timed(lambda: [g.data_ptr() for g in grads]))
    row("g.storage_offset(), every gradient", timed(lambda: [g.storage_offset() for g in grads]))
    row("g.get_device(), every gradient", timed(lambda: [g.get_device() for g in grads]))
    row("g.is_cuda, every gradient", timed(lambda: [g.is_cuda for g in grads]))
    row("weakref.ref(g), every gradient", timed(lambda: [weakref.ref(g) for g in grads]))
    row("g.untyped_storage().data_ptr(), every gradient",
        timed(lambda: [g.untyped_storage().data_ptr() for g in grads]))

    # The walker, recording: its step with every gradient new, and with none.
    out = Path(tempfile.mkdtemp()) / "bench.vtrace"
    assert vramtrace.start(out, strict=True)
    walker = _categories.walker()
    assert walker is not None, "categories are off"
    walker.step(opt)  # the first walk: parameters, state, modules

    def renew() -> None:
        # New gradient objects where the old ones were, as a step makes.
        for p in params:
            p.grad = p.grad.detach().clone()

    fresh = []
    for _ in range(60):
        renew()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        walker.step(opt)
        fresh.append(time.perf_counter() - t0)
    row("walker step, every gradient new (incl. modules' turns)", statistics.median(fresh))
    row("walker step, nothing new", timed(lambda: walker.step(opt)))
    module_turns = []
    for _ in range(20):
        walker._modules_changed = True  # forces the modules' walk
        t0 = time.perf_counter()
        walker.step(opt)
        module_turns.append(time.perf_counter() - t0)
    row("walker step on the modules' turn, nothing new", statistics.median(module_turns))
    vramtrace.stop()

    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, python "
          f"{sys.version.split()[0]}; GPT-2, {n} parameters, "
          f"{sum(len(s) for s in opt.state.values())} state tensors")
    print("| what | us | ns per parameter |\n|---|---:|---:|")
    for what, us, ns in rows:
        print(f"| {what} | {us:,.1f} | {ns:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
