"""Answers in the frameworks people use (issue #44), checked on a GPU.

    PYTHONPATH=python VRAMTRACE_LIB=carry/libvramtrace_recorder.so \\
        python3 python/gpu/frameworks_check.py --bin carry --out "$OUT/frameworks"

Needs a CUDA GPU, PyTorch, lightning (or pytorch_lightning) and accelerate
(a program whose framework is missing is a SKIP); not part of the test
suite (CI has no GPU). Five programs train one shape of model: a 6-layer
`nn.TransformerEncoder` (width 1024, 16 heads) between a token embedding
and a vocabulary head, 16 x 256 tokens, 4 optimizer steps:

- `plain`: a plain loop, bf16 autocast, AdamW;
- `lightning`: a Lightning `Trainer` with `precision="bf16-mixed"` and
  AdamW: the forward and backward run inside `optimizer.step(closure)`;
- `lbfgs`: a plain loop with `torch.optim.LBFGS` (a closure optimizer,
  several forwards and backwards in one step), fp32;
- `accelerate`: an `Accelerator(mixed_precision="bf16")` loop, AdamW;
- `hf_trainer`: an unmodified Hugging Face `Trainer` (bf16) training a
  GPT-2 of the same width, depth and vocabulary.

Each program runs three times, side by side on the card (each process's
allocator is its own, and a single-stream program's requests do not depend
on timing): natively, recorded by `python -m vramtrace run` (categories
on), and recorded with `--no-categories`. For each:

a. recording changes nothing: the program's own `max_memory_allocated()`
   and `max_memory_reserved()` are the native run's, to the byte, in both
   recorded runs;
b. with tags: parameters and optimizer state at the allocated peak are
   PyTorch's (each tensor counted at the size of its block, from the
   allocator's snapshot); the categories at the allocated peak add up to
   the peak, which is `max_memory_allocated()`; for the programs that keep
   their gradients to the end, gradients at the end are the gradients'
   blocks;
c. without tags (the categories inferred from what autograd does):
   parameters and optimizer state at the allocated peak are PyTorch's too,
   and gradients are a row of their own;
d. the forward's saved activations read as activations, not temporaries,
   at the allocated peak, with tags and without, and the summary offers
   activation checkpointing when activations lead.

Each check is a row PASS/FAIL/SKIP/INFO, written to
OUT/frameworks-check.md too; the traces stay in OUT.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gpu_report
from categories_check import Categories, figures, mib, result, stop_recording
from gpu_report import Report, tail, vt

HERE = Path(__file__).resolve()
WIDTH, HEADS, LAYERS, VOCAB = 1024, 16, 6, 8192
BATCH, SEQ, STEPS = 16, 256, 4
PROGRAMS = ["plain", "lightning", "lbfgs", "accelerate", "hf_trainer"]
# How each program is run: natively, recorded, recorded without categories.
MODES = {"native": None, "recorded": (), "no-categories": ("--no-categories",)}


# ------------------------------------------------------------- programs


def model_and_data(torch):
    """The model, on the GPU, and BATCH x SEQ tokens (STEPS batches)."""
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    layer = torch.nn.TransformerEncoderLayer(WIDTH, HEADS, 4 * WIDTH, dropout=0.1,
                                             batch_first=True)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, WIDTH),
                                torch.nn.TransformerEncoder(layer, LAYERS,
                                                            enable_nested_tensor=False),
                                torch.nn.Linear(WIDTH, VOCAB))
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (STEPS * BATCH, SEQ), generator=g)
    return model, ids


def loss_of(torch, model, ids):
    logits = model(ids)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), ids.flatten())


def peaks(torch) -> dict:
    return {"max_allocated": torch.cuda.max_memory_allocated(),
            "max_reserved": torch.cuda.max_memory_reserved()}


def taken_at_end(torch, model, opt) -> dict:
    """PyTorch's figures at the end, then the recording stopped while the
    program's tensors are alive (its end is the trace's)."""
    res = {**figures(torch, model, opt), **peaks(torch), "where": "at_end"}
    stop_recording()
    return res


def child_plain(torch) -> dict:
    model, ids = model_and_data(torch)
    model = model.cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for i in range(STEPS):
        batch = ids[i * BATCH:(i + 1) * BATCH].cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_of(torch, model, batch)
        loss.backward()
        opt.step()
        if i < STEPS - 1:
            opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return taken_at_end(torch, model, opt)


def child_lbfgs(torch) -> dict:
    model, ids = model_and_data(torch)
    model = model.cuda()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=3, history_size=4)
    for i in range(STEPS):
        batch = ids[i * BATCH:(i + 1) * BATCH].cuda()

        def closure(batch=batch):
            opt.zero_grad(set_to_none=True)
            loss = loss_of(torch, model, batch)
            loss.backward()
            return loss

        opt.step(closure)
    torch.cuda.synchronize()
    return taken_at_end(torch, model, opt)


def child_accelerate(torch) -> dict:
    try:
        from accelerate import Accelerator
    except ImportError:
        return {"skip": "accelerate is not installed"}
    model, ids = model_and_data(torch)
    accelerator = Accelerator(mixed_precision="bf16")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=BATCH)
    model, opt, data = accelerator.prepare(model, opt, data)
    for i, (batch,) in enumerate(data):
        loss = loss_of(torch, model, batch)
        accelerator.backward(loss)
        opt.step()
        if i < STEPS - 1:
            opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return taken_at_end(torch, accelerator.unwrap_model(model), opt)


def child_hf_trainer(torch, workdir: str) -> dict:
    try:
        from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
    except ImportError:
        return {"skip": "transformers is not installed"}
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (STEPS * BATCH, SEQ), generator=g)

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return len(ids)

        def __getitem__(self, i):
            return {"input_ids": ids[i], "labels": ids[i]}

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=LAYERS, n_embd=WIDTH, n_head=HEADS,
                                       vocab_size=VOCAB, n_positions=SEQ))
    args = TrainingArguments(output_dir=workdir, max_steps=STEPS, per_device_train_batch_size=BATCH,
                             bf16=True, report_to="none", save_strategy="no",
                             logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=Data())
    trainer.train()
    torch.cuda.synchronize()
    return taken_at_end(torch, trainer.model, trainer.optimizer)


def child_lightning(torch, workdir: str) -> dict:
    try:
        import lightning.pytorch as pl
    except ImportError:
        try:
            import pytorch_lightning as pl
        except ImportError:
            return {"skip": "neither lightning nor pytorch_lightning is installed"}
    model, ids = model_and_data(torch)

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model

        def training_step(self, batch, _i):
            return loss_of(torch, self.model, batch[0])

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    taken: dict = {}

    class Take(pl.Callback):
        # Before Lightning's teardown moves the model to the CPU.
        def on_train_end(self, trainer, module):
            torch.cuda.synchronize()
            taken.update(figures(torch, module, trainer.optimizers[0]))
            taken.update(peaks(torch))

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids), batch_size=BATCH)
    trainer = pl.Trainer(max_steps=STEPS, accelerator="gpu", devices=1, precision="bf16-mixed",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[Take()],
                         default_root_dir=workdir)
    trainer.fit(Module(), data)
    # Lightning's gradients were zeroed inside the last step's closure and
    # made again by its backward: at the end they are the last step's.
    return {**taken, "where": "at_allocated_peak"}


def child(program: str, workdir: str) -> int:
    import torch
    torch.cuda.init()
    runs = {"plain": child_plain, "lbfgs": child_lbfgs, "accelerate": child_accelerate,
            "lightning": lambda t: child_lightning(t, workdir),
            "hf_trainer": lambda t: child_hf_trainer(t, workdir)}
    res = runs[program](torch)
    stop_recording()
    result(res)
    return 0


# ---------------------------------------------------------------- parent


def run_child(program: str, mode: str, env: dict, out: Path, work: str) -> tuple:
    trace = None if MODES[mode] is None else str(out / f"{program}-{mode}.vtrace")
    started = time.time()
    try:
        res, p = gpu_report.child(HERE, [program, work], env, trace, MODES[mode] or (),
                                  timeout=420)
    except subprocess.TimeoutExpired:
        return None, None, trace, time.time() - started
    return res, p, trace, time.time() - started


def check_program(rep: Report, binary: Path, program: str, runs: dict) -> None:
    native, recorded, bare = runs["native"], runs["recorded"], runs["no-categories"]
    for mode, (res, p, _trace, secs) in runs.items():
        if res is not None and "skip" in res:
            rep.add("SKIP", f"{program}", res["skip"])
            return
        if not rep.check(res is not None and p is not None and p.returncode == 0,
                         f"{program}: runs {mode}",
                         f"{secs:.0f} s" if res else (tail(p) if p else "timed out")):
            return
    n = native[0]
    # a. Recording changes nothing.
    for mode in ("recorded", "no-categories"):
        r = runs[mode][0]
        rep.check(r["max_allocated"] == n["max_allocated"] and r["max_reserved"] == n["max_reserved"],
                  f"{program}: {mode}: the program's own peaks are the native run's",
                  f"max_memory_allocated {r['max_allocated']:,} / native {n['max_allocated']:,}; "
                  f"max_memory_reserved {r['max_reserved']:,} / native {n['max_reserved']:,}")
    # b, c. Categories against PyTorch, with tags and inferred.
    for mode, (res, _p, trace, _s) in (("recorded", recorded), ("no-categories", bare)):
        label = f"{program} ({'tags' if mode == 'recorded' else 'inferred'})"
        s = vt(binary, "summary", trace)
        cats = Categories(s)
        if not rep.check(cats.data is not None, f"{label}: the summary has categories"):
            continue
        want = "tags" if mode == "recorded" else "inferred"
        source = cats.data.get("source")
        rep.check(source == want or (want == "inferred" and source != "tags"),
                  f"{label}: categories come from {want}", f"source {source!r}")
        at_peak = cats.at("at_allocated_peak")
        # PyTorch's figures are taken at the end; Lightning's teardown moves
        # the model to the CPU, so its are compared at the allocated peak
        # (parameters and optimizer state are the same there).
        where = res["where"]
        for name in ("parameters", "optimizer_state"):
            theirs = res.get(name)
            if theirs is None:
                continue
            ours = cats.bytes(where, name)
            rep.check(ours == theirs["bytes"] and theirs["missing"] == 0,
                      f"{label}: {name} {where} = PyTorch's blocks",
                      f"trace {ours:,} B; PyTorch {theirs['bytes']:,} B in "
                      f"{theirs['tensors']} tensors' blocks")
        if res.get("where") == "at_end":
            ours = cats.bytes("at_end", "gradients")
            theirs = res["gradients"]
            rep.check(ours == theirs["bytes"] and theirs["missing"] == 0,
                      f"{label}: gradients at the end = PyTorch's blocks",
                      f"trace {ours:,} B; PyTorch {theirs['bytes']:,} B")
        total = sum(e.get("bytes", 0) for e in at_peak.values())
        peak = s.get("peak_allocated", {}).get("bytes", s.get("peak_allocated_bytes"))
        rep.check(total == peak == res["max_allocated"],
                  f"{label}: categories at the allocated peak add up to it, = "
                  "max_memory_allocated()",
                  f"sum {total:,}, peak {peak:,}, torch {res['max_allocated']:,}")
        acts = cats.bytes("at_allocated_peak", "activations")
        temps = cats.bytes("at_allocated_peak", "temporaries")
        grads = cats.bytes("at_allocated_peak", "gradients")
        shares = ", ".join(f"{e['category']} {mib(e.get('bytes', 0))}"
                           for e in (cats.data.get("at_allocated_peak") or []) if e.get("bytes"))
        rep.add("INFO", f"{label}: at the allocated peak", shares)
        # d. Saved activations are activations.
        rep.check(acts > temps, f"{label}: activations outweigh temporaries at the allocated peak",
                  f"activations {mib(acts)}, temporaries {mib(temps)}, gradients {mib(grads)}")
        lead = (cats.data.get("dominant") or {}).get("category")
        if lead == "activations":
            text = subprocess.run([str(binary), "summary", trace], capture_output=True,
                                  text=True).stdout
            rep.check("checkpointing" in text, f"{label}: the summary offers activation "
                      "checkpointing, activations leading", f"dominant {lead}")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "child":
        return child(argv[1], argv[2])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="carry", help="folder with the vramtrace binary")
    ap.add_argument("--out", default=os.environ.get("OUT", "frameworks-check-out"))
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    ns = ap.parse_args(argv)
    import torch

    out = Path(ns.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    binary = Path(ns.bin).resolve() / "vramtrace"
    env = gpu_report.child_env(out, HERE.parent)
    work = tempfile.mkdtemp(prefix="frameworks-", dir=out)
    programs = [p for p in ns.programs.split(",") if p]
    started = time.time()
    rep = Report()
    setup = f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}"
    print(f"{setup}, python {sys.version.split()[0]}", flush=True)
    print("| result | check | detail |\n|---|---|---|", flush=True)
    jobs = [(p, m) for p in programs for m in MODES]
    with ThreadPoolExecutor(len(jobs)) as pool:
        done = dict(zip(jobs, pool.map(lambda j: run_child(j[0], j[1], env, out, work), jobs)))
    for program in programs:
        try:
            check_program(rep, binary, program, {m: done[(program, m)] for m in MODES})
        except Exception as e:  # noqa: BLE001 - the next program is still checked
            rep.add("FAIL", f"{program}: checked", f"{type(e).__name__}: {e}")
    rep.add("INFO", "total time", f"{time.time() - started:.0f} s")
    return rep.finish("frameworks_check.py", setup, out / "frameworks-check.md")


if __name__ == "__main__":
    sys.exit(main())
