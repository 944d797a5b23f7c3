"""Two GPUs, one process per rank: DDP and FSDP2 recorded (docs/gpu-check.md).

    PYTHONPATH=recorder/python VRAMTRACE_LIB=carry/libvramtrace_recorder.so \\
        python3 recorder/python/tests/multi_gpu_check.py --bin carry --out "$OUT"

Needs two CUDA GPUs, PyTorch (2.6 or newer, for `fully_shard`) and
transformers; not part of the test suite. Runs Hugging Face GPT-2 (random
init from its config) under `torchrun --nproc_per_node 2`, with DDP and then
with FSDP2 (`fully_shard` on each block, then on the model), each once as is
and once under `python -m vramtrace run --out run-%r.vtrace`, with NVLink
multicast off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1). Each rank writes its figures to a JSON side file.
Checks, a PASS/FAIL line each, written to OUT/multi-gpu-check.md too:

1. each rank's trace peaks equal that rank's `max_memory_allocated()` and
   `max_memory_reserved()`, to the byte;
2. `vramtrace summary` of the run's folder is a rank table of both ranks;
   FSDP's memory left at the end (parameters and optimizer state) is about
   half of DDP's on every rank, and so are the traces' own figures;
3. recording changes neither the losses nor the step time (median) beyond
   the overhead bench's figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gpu_report import Report

HERE = Path(__file__).resolve()
STEPS = 20
WARMUP = 5
RANKS = 2
# Step time under recording, against without: the overhead bench's bound on
# GPU runs (docs/performance.md, "Recording overhead on a GPU"), with noise.
STEP_TIME_SLACK = 0.05


def child(mode: str, side: str) -> None:
    """One rank of GPT-2 training, DDP or FSDP2 (torchrun starts it)."""
    import torch
    import torch.distributed as dist
    from transformers import GPT2Config, GPT2LMHeadModel

    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).cuda()
    if mode == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[torch.cuda.current_device()])
    else:
        from torch.distributed.fsdp import fully_shard

        for block in model.transformer.h:
            fully_shard(block)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(1 + rank)
    losses, times = [], []
    for step in range(STEPS):
        batch = torch.randint(0, 50257, (8, 512), device="cuda", generator=gen)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    del loss, batch
    torch.cuda.synchronize()
    figures = {
        "rank": rank,
        "max_allocated": torch.cuda.max_memory_allocated(),
        "max_reserved": torch.cuda.max_memory_reserved(),
        # Parameters and optimizer state: what is left between steps.
        "state_bytes": torch.cuda.memory_allocated(),
        "losses": losses,
        "step_ms": 1e3 * statistics.median(times[WARMUP:]),
    }
    Path(side.replace("%r", str(rank))).write_text(json.dumps(figures))
    if "vramtrace" in sys.modules and sys.modules["vramtrace"].installed():
        sys.modules["vramtrace"].stop()
    dist.destroy_process_group()


def vt(binary: Path, *args) -> dict:
    p = subprocess.run([str(binary), *args, "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"vramtrace {' '.join(args)}: {p.stderr.strip()[:300]}")
    return json.loads(p.stdout)


def torchrun(mode: str, folder: Path, record: bool, env: dict) -> tuple[list[dict], str]:
    """Runs both ranks; returns their side files' figures (rank order) and a tail of the output."""
    folder.mkdir(parents=True, exist_ok=True)
    side = str(folder / "rank%r.json")
    run = ([sys.executable, "-m", "vramtrace", "run", "--out", str(folder / "run-%r.vtrace")]
           if record else [sys.executable])
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={RANKS}",
                        "--no-python", *run, str(HERE), "child", mode, side],
                       capture_output=True, text=True, env=env)
    figures = []
    for r in range(RANKS):
        f = Path(side.replace("%r", str(r)))
        if f.exists():
            figures.append(json.loads(f.read_text()))
    return figures, (p.stdout[-600:] + p.stderr[-1200:]).replace("\n", " / ")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="carry", help="folder with the vramtrace binary")
    ap.add_argument("--out", default=os.environ.get("OUT", "multi-gpu-check-out"))
    ns, rest = ap.parse_known_args()
    if rest and rest[0] == "child":
        child(rest[1], rest[2])
        return 0

    import torch

    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    binary = Path(ns.bin).resolve() / "vramtrace"
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               NVSHMEM_DISABLE_NVLS="1", VRAMTRACE_CACHE=str(out / "cache"))
    rep = Report()
    started = time.time()
    where = (f"torch {torch.__version__}, {torch.cuda.device_count()} x "
             f"{torch.cuda.get_device_name(0)}, python {sys.version.split()[0]}")
    print(where + "\n| result | check | detail |\n|---|---|---|", flush=True)
    if torch.cuda.device_count() < RANKS:
        rep.add("FAIL", f"{RANKS} GPUs", f"{torch.cuda.device_count()} found")
        return 1

    state = {}
    for mode in ("ddp", "fsdp"):
        native, tail_n = torchrun(mode, out / f"{mode}-native", False, env)
        recorded, tail_r = torchrun(mode, out / mode, True, env)
        if not rep.check(len(native) == RANKS and len(recorded) == RANKS,
                         f"{mode}: both ranks ran, natively and recorded",
                         "" if len(native) == len(recorded) == RANKS else tail_n + " // " + tail_r):
            continue
        # 1. each rank's trace against its own torch figures
        for r in recorded:
            s = vt(binary, "summary", str(out / mode / f"run-{r['rank']}.vtrace"))
            rep.check(s["peak_allocated_bytes"] == r["max_allocated"]
                      and s["peak_reserved_bytes"] == r["max_reserved"],
                      f"{mode} rank {r['rank']}: trace peaks = max_memory_allocated/reserved()",
                      f"{s['peak_allocated_bytes']:,}/{s['peak_reserved_bytes']:,} vs "
                      f"{r['max_allocated']:,}/{r['max_reserved']:,}")
            state[(mode, r["rank"])] = (r["state_bytes"], s["end"]["allocated"])
        # 2. the rank table of the run's folder
        table = vt(binary, "summary", str(out / mode))
        rows = table.get("rows", [])
        rep.check([row["rank"] for row in rows] == list(range(RANKS))
                  and table.get("ranks_from") == "header",
                  f"{mode}: summary of the folder is a rank table of every rank",
                  "; ".join(f"rank {row['rank']} dev {row['device']}: "
                            f"{row['peak_allocated']['bytes'] / 2**30:.2f} GiB at "
                            f"{row['peak_allocated']['phase'] or 'no phase'}" for row in rows)
                  + f"; spread {table.get('allocated', {}).get('fraction', 0):.1%}")
        # 3. recording changes neither losses nor step time
        for n, r in zip(native, recorded):
            rep.check(n["losses"] == r["losses"], f"{mode} rank {r['rank']}: same losses recorded",
                      f"last {n['losses'][-1]:.6f} / {r['losses'][-1]:.6f}")
            slower = r["step_ms"] / n["step_ms"] - 1
            rep.check(slower <= STEP_TIME_SLACK, f"{mode} rank {r['rank']}: step time recorded",
                      f"{n['step_ms']:.1f} ms natively, {r['step_ms']:.1f} ms recorded ({slower:+.1%})")
    for r in range(RANKS):
        if ("ddp", r) in state and ("fsdp", r) in state:
            torch_ratio = state[("fsdp", r)][0] / state[("ddp", r)][0]
            trace_ratio = state[("fsdp", r)][1] / state[("ddp", r)][1]
            rep.check(0.4 <= torch_ratio <= 0.65 and abs(trace_ratio - torch_ratio) < 0.02,
                      f"rank {r}: FSDP's parameters + optimizer state about half DDP's",
                      f"torch {torch_ratio:.2f} ({state[('fsdp', r)][0]:,} / {state[('ddp', r)][0]:,}),"
                      f" traces' end {trace_ratio:.2f}")

    rep.add("INFO", "total time", f"{time.time() - started:.0f} s")
    header = (f"# multi_gpu_check.py, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}"
              f" UTC\n\n{where}\n\n| result | check | detail |\n|---|---|---|\n")
    (out / "multi-gpu-check.md").write_text(header + "\n".join(rep.lines) + "\n")
    print(f"\n{rep.failed} failed", flush=True)
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
