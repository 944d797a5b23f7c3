"""What fills the GPU, checked on one (issue #27, see docs/gpu-check.md).

    PYTHONPATH=python VRAMTRACE_LIB=carry/libvramtrace_recorder.so \\
        python3 python/gpu/categories_check.py --bin carry --out "$OUT/categories"

Needs a CUDA GPU, PyTorch, torchvision and transformers (lightning or
pytorch_lightning for its row, else SKIP); not part of the test suite (CI
has no GPU). Programs run under `python -m vramtrace run` with its default
settings (categories on), and the categories of `vramtrace summary --json`
are compared with PyTorch's own figures, computed in the same process from
the model and the optimizer, each tensor counted at the size of the block
the allocator gave its storage (read from `torch.cuda.memory._snapshot()`:
the allocator's rounding, and a block handed out whole when the rest was
too small to split). The 512-byte rounding of the tensors' sizes is shown
beside it. Each check is a row PASS/FAIL/SKIP/INFO of a table, written to
OUT/categories-check.md too:

a. Hugging Face GPT-2 (random init, 12 layers, fp32 weights, bf16
   autocast, AdamW, 8 x 512, 6 steps with zero_grad(set_to_none=True), then
   a forward and backward without a step, then stop): at the end,
   parameters (all of them exact: tagged) = the parameters' blocks,
   optimizer state = its CUDA state tensors' blocks, gradients = the
   gradients' blocks (as many bytes as the parameters); at the allocated
   peak, the categories add up to the trace's peak, which is
   `torch.cuda.max_memory_allocated()`;
b. torchvision ResNet-50, SGD with momentum: the same, and its BatchNorm
   buffers = the buffers' blocks;
c. an unmodified Hugging Face `Trainer` (tiny GPT-2) and a PyTorch
   Lightning `Trainer` (an MLP with BatchNorm): categories come from tags,
   and parameters and optimizer state are PyTorch's (Hugging Face: at the
   end; Lightning moves the model to the CPU when it is done: at the
   allocated peak, with the figures taken in `on_train_end`);
d. overhead: GPT-2's step recorded with the categories walk / without it,
   step by step in one recording (the walk turned on and off between steps,
   in alternating order), median step times, and the walker's own time per
   step; and the alternative exact signal for activations, a global
   `saved_tensors_hooks` whose pack hook reads each saved tensor's storage
   address, against no hooks (unrecorded).

The traces stay in OUT for `vramtrace summary OUT/*.vtrace` and the like.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import gpu_report
from gpu_report import Report, tail, vt

HERE = Path(__file__).resolve()
GPT2_STEPS = 6
PAIRS = 60
WARM_STEPS = 2
TIMED_STEPS = 10
STEP_RATIO_BOUND = 1.01
CATEGORIES = ["parameters", "buffers", "gradients", "optimizer_state", "activations",
              "temporaries", "other"]


def result(obj) -> None:
    print("RESULT " + json.dumps(obj), flush=True)


# ------------------------------------------------- PyTorch's own figures


def block_sizes(torch) -> dict:
    """The allocator's live blocks of the current device: address -> size."""
    device = torch.cuda.current_device()
    sizes = {}
    for seg in torch.cuda.memory._snapshot()["segments"]:
        if seg.get("device", device) != device:
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                sizes[addr] = b["size"]
            addr += b["size"]
    return sizes


def local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def figure(tensors, sizes: dict) -> dict:
    """Bytes of the blocks holding `tensors` (each block once), the sum of
    their sizes rounded up to 512 B, and how many tensors had no live block."""
    seen, blocks, rounded, missing, count = set(), 0, 0, 0, 0
    for t in tensors:
        if t is None:
            continue
        t = local(t)
        if not t.is_cuda:
            continue
        addr = t.untyped_storage().data_ptr()
        if addr in seen:
            continue
        seen.add(addr)
        count += 1
        rounded += -(-t.untyped_storage().nbytes() // 512) * 512
        if addr in sizes:
            blocks += sizes[addr]
        else:
            missing += 1
    return {"bytes": blocks, "rounded": rounded, "missing": missing, "tensors": count}


def state_tensors(opt):
    opt = getattr(opt, "optimizer", opt)  # accelerate's AcceleratedOptimizer
    for s in opt.state.values():
        for v in s.values():
            for t in (v if isinstance(v, (list, tuple)) else (v,)):
                if hasattr(t, "untyped_storage"):
                    yield t


def figures(torch, model, opt) -> dict:
    sizes = block_sizes(torch)
    params = list(model.parameters())
    return {
        "parameters": figure(params, sizes),
        "buffers": figure(model.buffers(), sizes),
        "gradients": figure((p.grad for p in params), sizes),
        "optimizer_state": figure(state_tensors(opt), sizes) if opt is not None else None,
        "max_allocated": torch.cuda.max_memory_allocated(),
    }


def stop_recording() -> None:
    if "vramtrace" in sys.modules and sys.modules["vramtrace"].installed():
        sys.modules["vramtrace"].stop()


# ---------------------------------------------------------------- children


def gpt2(torch, layers=12):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=layers, n_embd=768, n_head=12)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cpu").manual_seed(1)

    def batch():
        return torch.randint(0, 50257, (8, 512), generator=gen).cuda()

    return model, opt, batch


def forward_backward(torch, model, ids, hooks=None):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        if hooks is None:
            loss = model(ids, labels=ids).loss
        else:
            with torch.autograd.graph.saved_tensors_hooks(*hooks):
                loss = model(ids, labels=ids).loss
    loss.backward()
    return loss


def child_gpt2() -> None:
    import torch

    model, opt, batch = gpt2(torch)
    for _ in range(GPT2_STEPS):
        forward_backward(torch, model, batch())
        opt.step()
        opt.zero_grad(set_to_none=True)
    # The gradients of a last backward stay to the end of the trace.
    loss = forward_backward(torch, model, batch())
    torch.cuda.synchronize()
    out = figures(torch, model, opt)
    del loss
    stop_recording()
    result(out)


def child_resnet() -> None:
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator(device="cpu").manual_seed(1)

    def step():
        x = torch.randn(32, 3, 224, 224, generator=gen).cuda()
        y = torch.randint(0, 1000, (32,), generator=gen).cuda()
        torch.nn.functional.cross_entropy(model(x), y).backward()

    for _ in range(4):
        step()
        opt.step()
        opt.zero_grad(set_to_none=True)
    step()
    torch.cuda.synchronize()
    out = figures(torch, model, opt)
    stop_recording()
    result(out)


def child_hf_trainer(workdir: str) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 256

        def __getitem__(self, i):
            ids = torch.randint(0, 1000, (128,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=128, n_head=2, vocab_size=1000,
                                       n_positions=128))
    args = TrainingArguments(output_dir=workdir, max_steps=5, per_device_train_batch_size=8,
                             report_to="none", save_strategy="no", logging_strategy="no",
                             disable_tqdm=True, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=Data())
    trainer.train()
    torch.cuda.synchronize()
    out = figures(torch, trainer.model, trainer.optimizer)
    stop_recording()
    result(out)


def child_lightning(workdir: str) -> None:
    import torch

    try:
        import lightning.pytorch as pl
    except ImportError:
        try:
            import pytorch_lightning as pl
        except ImportError:
            result({"skip": "neither lightning nor pytorch_lightning is installed"})
            return

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.BatchNorm1d(4096),
                                           torch.nn.ReLU(), torch.nn.Linear(4096, 10))

        def training_step(self, batch, _i):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    taken = {}

    class Take(pl.Callback):
        # Before Lightning's teardown moves the model to the CPU.
        def on_train_end(self, trainer, module):
            torch.cuda.synchronize()
            taken.update(figures(torch, module, trainer.optimizers[0]))

    gen = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(1024, 1024, generator=gen),
                                          torch.randint(0, 10, (1024,), generator=gen))
    torch.manual_seed(0)
    trainer = pl.Trainer(max_steps=5, accelerator="gpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[Take()], default_root_dir=workdir)
    trainer.fit(Net(), torch.utils.data.DataLoader(data, batch_size=256))
    stop_recording()
    result(taken)


def child_overhead(out_dir: str) -> None:
    """Step times with the categories walk and without it, step by step in
    one recording (the walk turned on and off between steps, in alternating
    order: a GPU host's step time drifts by several percent between rounds,
    more than the walk costs); the walk's own time; then a global
    saved_tensors_hooks reading each saved tensor's address / none."""
    import torch

    import vramtrace
    from vramtrace import _observer

    model, opt, batch = gpt2(torch)
    inputs = [batch() for _ in range(4)]
    walk_times: list = []

    def step(i: int, hooks=None) -> float:
        ids = inputs[i % len(inputs)]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        forward_backward(torch, model, ids, hooks)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    for i in range(WARM_STEPS):
        step(i)  # unrecorded: kernels chosen, optimizer state made
    times = {"categories": [], "plain": [], "hooks": [], "nohooks": []}
    assert vramtrace.start(str(Path(out_dir) / "overhead.vtrace"), strict=True)
    walker = vramtrace._categories.walker()
    real_step = walker.step

    def timed(optimizer):
        t0 = time.perf_counter()
        real_step(optimizer)
        walk_times.append(time.perf_counter() - t0)

    walker.step = timed
    for i in range(WARM_STEPS):
        step(i)
    for pair in range(PAIRS):
        for mode in ("categories", "plain") if pair % 2 == 0 else ("plain", "categories"):
            _observer._categories_on = mode == "categories"
            times[mode].append(step(pair))
    _observer._categories_on = True
    vramtrace.stop()
    saved: list = []

    def pack(t):
        saved.append(t.untyped_storage().data_ptr())
        return t

    def unpack(t):
        return t

    for pair in range(PAIRS // 2):
        for mode in ("hooks", "nohooks") if pair % 2 == 0 else ("nohooks", "hooks"):
            saved.clear()
            times[mode].append(step(pair, (pack, unpack) if mode == "hooks" else None))
            if mode == "hooks":
                saved_per_step = len(saved)
    result({"median_ms": {k: statistics.median(v) * 1e3 for k, v in times.items()},
            "steps": {k: len(v) for k, v in times.items()},
            "walk_us": statistics.median(walk_times[WARM_STEPS:] or [0]) * 1e6,
            "walks": len(walk_times), "tags": walker.tags,
            "saved_per_step": saved_per_step})


# ---------------------------------------------------------------- parent


def child(args: list, env: dict, trace: str | None = None, extra=()) -> tuple:
    """This script's child workload, natively or recorded (gpu_report.child)."""
    return gpu_report.child(HERE, args, env, trace, extra, timeout=900)


def mib(n) -> str:
    return f"{n / 2**20:,.2f} MiB"


class Categories:
    """A trace's categories, as `vramtrace summary --json` gives them."""

    def __init__(self, summary: dict) -> None:
        if "categories" not in summary and "by_device" in summary:
            devices = summary["by_device"]
            first = devices[0] if isinstance(devices, list) else next(iter(devices.values()))
            summary = first.get("summary", first) if isinstance(first, dict) else summary
        self.summary = summary
        self.data = summary.get("categories")

    def at(self, where: str) -> dict:
        """`where` (at_allocated_peak, at_reserved_peak, at_end): name -> entry."""
        return {e["category"]: e for e in (self.data or {}).get(where, [])}

    def bytes(self, where: str, name: str) -> int:
        return self.at(where).get(name, {}).get("bytes", 0)


def check_model(rep: Report, binary: Path, label: str, trace: str, res: dict,
                where: str = "at_end", grads: bool = True, buffers: bool = False,
                peak_sum: bool = True) -> list:
    """The checks of a model's categories against PyTorch's figures; returns
    rows for the closing table."""
    s = vt(binary, "summary", trace)
    cats = Categories(s)
    if not rep.check(cats.data is not None, f"{label}: the summary has categories",
                     "" if cats.data else f"keys: {sorted(s)[:20]}"):
        return []
    rep.check(cats.data.get("source") == "tags", f"{label}: categories come from tags",
              f"source {cats.data.get('source')!r}")
    at = cats.at(where)
    rows = []

    def compare(name: str, theirs: dict | None, what: str) -> None:
        if theirs is None:
            return
        ours = at.get(name, {})
        ok = ours.get("bytes") == theirs["bytes"] and theirs["missing"] == 0
        rep.check(ok, f"{label}: {name} {where} = {what}",
                  f"trace {ours.get('bytes', 0):,} B in {ours.get('blocks', 0)} blocks; PyTorch "
                  f"{theirs['bytes']:,} B in {theirs['tensors']} tensors' blocks "
                  f"(sizes rounded to 512 B: {theirs['rounded']:,}"
                  + (f"; {theirs['missing']} without a live block" if theirs["missing"] else "")
                  + ")")
        rows.append((label, name, where, ours.get("bytes", 0), theirs["bytes"]))

    compare("parameters", res["parameters"], "the parameters' blocks")
    p = at.get("parameters", {})
    rep.check(p.get("bytes", 0) > 0 and p.get("exact_bytes") == p.get("bytes"),
              f"{label}: every parameter byte {where} is tagged (exact_bytes = bytes)",
              f"{p.get('exact_bytes', 0):,} of {p.get('bytes', 0):,}")
    compare("optimizer_state", res.get("optimizer_state"), "the CUDA state tensors' blocks")
    if buffers:
        compare("buffers", res["buffers"], "the buffers' blocks")
    else:
        rep.add("INFO", f"{label}: buffers {where}",
                f"trace {cats.bytes(where, 'buffers'):,} B; PyTorch {res['buffers']['bytes']:,} B")
    if grads:
        compare("gradients", res["gradients"], "the gradients' blocks")
        rep.add("INFO", f"{label}: gradients / parameters {where}",
                f"{cats.bytes(where, 'gradients'):,} / {cats.bytes(where, 'parameters'):,} B")
    peak = s.get("peak_allocated", {}).get("bytes", s.get("peak_allocated_bytes"))
    total = sum(e.get("bytes", 0) for e in cats.at("at_allocated_peak").values())
    if peak_sum:
        rep.check(total == peak == res["max_allocated"],
                  f"{label}: categories at the allocated peak add up to it, = max_memory_allocated()",
                  f"sum {total:,}, peak {peak:,}, torch {res['max_allocated']:,}")
    shares = ", ".join(f"{e['category']} {mib(e.get('bytes', 0))}"
                       for e in (cats.data.get("at_allocated_peak") or []) if e.get("bytes"))
    dom = cats.data.get("dominant") or {}
    rep.add("INFO", f"{label}: at the allocated peak",
            f"{shares}; dominant {dom.get('category')} ({dom.get('share', 0):.0%})")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="carry", help="folder with the vramtrace binary")
    ap.add_argument("--out", default=os.environ.get("OUT", "categories-check-out"))
    ns, rest = ap.parse_known_args()
    if rest and rest[0] == "child":
        kind = rest[1]
        if kind == "gpt2":
            child_gpt2()
        elif kind == "resnet":
            child_resnet()
        elif kind == "hf_trainer":
            child_hf_trainer(rest[2])
        elif kind == "lightning":
            child_lightning(rest[2])
        elif kind == "overhead":
            child_overhead(rest[2])
        return 0

    import torch

    out = Path(ns.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    binary = Path(ns.bin).resolve() / "vramtrace"
    env = dict(os.environ)
    env["VRAMTRACE_CACHE"] = str(out / "cache")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
    work = tempfile.mkdtemp(prefix="categories-", dir=out)
    rep = Report()
    started = time.time()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
          f"python {sys.version.split()[0]}", flush=True)
    print("| result | check | detail |\n|---|---|---|", flush=True)
    table = []

    # a, b. GPT-2 and ResNet-50 under `python -m vramtrace run`.
    for kind, label, buffers in (("gpt2", "GPT-2", False), ("resnet", "ResNet-50", True)):
        trace = str(out / f"{kind}.vtrace")
        res, p = child([kind], env, trace)
        if rep.check(res is not None and p.returncode == 0, f"{label}: runs recorded",
                     "" if res else tail(p)):
            table += check_model(rep, binary, label, trace, res, buffers=buffers)

    # c. Unmodified trainers.
    trace = str(out / "hf-trainer.vtrace")
    res, p = child(["hf_trainer", work], env, trace)
    if rep.check(res is not None and p.returncode == 0, "Hugging Face Trainer: runs recorded",
                 "" if res else tail(p)):
        table += check_model(rep, binary, "HF Trainer", trace, res, grads=False)
    trace = str(out / "lightning.vtrace")
    res, p = child(["lightning", work], env, trace)
    if res is not None and "skip" in res:
        rep.add("SKIP", "PyTorch Lightning Trainer", res["skip"])
    elif rep.check(bool(res) and p.returncode == 0, "PyTorch Lightning Trainer: runs recorded",
                   "" if res else tail(p)):
        table += check_model(rep, binary, "Lightning", trace, res, where="at_allocated_peak",
                             grads=False, buffers=True)

    # d. Overhead.
    res, p = child(["overhead", str(out)], env)
    if rep.check(res is not None and p.returncode == 0, "overhead: GPT-2 steps timed",
                 "" if res else tail(p)):
        m, n = res["median_ms"], res["steps"]
        ratio = m["categories"] / m["plain"]
        rep.check(ratio <= STEP_RATIO_BOUND,
                  f"overhead: step recorded with categories / without <= {STEP_RATIO_BOUND}",
                  f"{m['categories']:.2f} / {m['plain']:.2f} ms = {ratio:.4f} (medians of "
                  f"{n['categories']} and {n['plain']} steps, alternating in one recording)")
        rep.add("INFO", "overhead: the walker's own time per optimizer step",
                f"{res['walk_us']:.0f} us = {res['walk_us'] / 1e3 / m['plain']:.2%} of a step "
                f"(median of {res['walks']} walks; {res['tags']:,} tags in all)")
        hooks = m["hooks"] / m["nohooks"]
        rep.add("INFO", "overhead: saved_tensors_hooks reading each saved tensor's address / none",
                f"{m['hooks']:.2f} / {m['nohooks']:.2f} ms = {hooks:.4f} "
                f"({res['saved_per_step']} saved tensors per step; medians of {n['hooks']} "
                f"and {n['nohooks']} steps, alternating, unrecorded)")
        table.append(("GPT-2 step", "with categories / without", "median",
                      f"{m['categories']:.2f} ms", f"{m['plain']:.2f} ms ({ratio:.4f})"))
        table.append(("GPT-2 step", "saved_tensors_hooks / none", "median",
                      f"{m['hooks']:.2f} ms", f"{m['nohooks']:.2f} ms ({hooks:.4f})"))

    rep.add("INFO", "total time", f"{time.time() - started:.0f} s")
    print("\n| run | what | where | trace | PyTorch |\n|---|---|---|---|---|")
    for label, name, where, ours, theirs in table:
        fmt = (lambda v: f"{v:,}") if isinstance(ours, int) else str
        print(f"| {label} | {name} | {where} | {fmt(ours)} | {fmt(theirs)} |")
    return rep.finish("categories_check.py",
                      f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}",
                      out / "categories-check.md")


if __name__ == "__main__":
    sys.exit(main())
