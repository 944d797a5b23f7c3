"""Several GPUs: Hugging Face GPT-2 under torchrun, with DDP and with FSDP2,
recorded rank by rank (see docs/gpu-check.md).

    PYTHONPATH=python VRAMTRACE_LIB=carry/libvramtrace_recorder.so \\
        python3 python/gpu/multi_gpu_check.py --bin carry --out "$OUT/multi"

Needs two or more CUDA GPUs, PyTorch 2.6+ (``fully_shard``) and
transformers; not part of the test suite (CI has no GPU). NVLink multicast
stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1), here and in every child.

For each strategy, GPT-2 (random init from its config, 12 layers, 8 x 512
tokens per rank, bf16 autocast, AdamW) trains under torchrun, one rank per
GPU, natively and under `python -m vramtrace run --out
STRATEGY-rank%r.vtrace`, in turn, twice (the first round's traces are
kept). Checks, as rows PASS/FAIL/INFO of a table also
written to OUT/multi-gpu-check.md:

- each rank's trace has that rank's `max_memory_allocated()` and
  `max_memory_reserved()` as its peaks, to the byte, and names its rank;
- recording changes no loss; the step time, recorded with the defaults,
  is at most 1.03 x native (issue #31), measured in one torchrun job:
  native blocks of 8 steps, then blocks recorded and blocks with the
  tracker attached but stopped, alternating (runs of separate processes
  differ by more than that; their ratio is shown too);
- FSDP2 shards: per rank, parameters and optimizer state are about half
  of DDP's (PyTorch's own count), and so is the memory that stays
  allocated between steps (the traces' live memory at the end);
- categories (issue #27): per rank, the trace's parameters and optimizer
  state at its end are the blocks of PyTorch's parameters (local shards
  for FSDP2) and CUDA state tensors (categories_check.figures); the
  gradients (DDP's buckets: the analyzer's inference) are shown.

The traces stay in OUT for `vramtrace summary OUT/*.vtrace` and the like.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from categories_check import Categories, figures
from gpu_report import Report, tail, vt

HERE = Path(__file__).resolve()
STEPS = 20
TIMED_FROM = 5  # steps before this one warm up and are not timed
ROUNDS = 2
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}
# A GPT-2 step recorded with Python stacks costs at most this much more than
# natively (bench_observer.py, docs/performance.md: 0.998 to 1.038), with
# the machine's noise on top.
STEP_TIME_BOUND = 1.05
# The in-process comparison (child_bench): blocks of steps, rounds of
# blocks, and its bound (issue #31).
BENCH_BLOCK = 8
BENCH_ROUNDS = 4
BENCH_BOUND = 1.03
# What `vramtrace.start` is given in each configuration of the in-process
# comparison: the defaults first (the one checked), then each feature off.
BENCH_CONFIGS = {
    "defaults": {},
    "no-stacks": {"stacks": "none"},
    "no-phases": {"phases": False},
    "no-backward-names": {"backward_names": False},
    "no-iterations": {"iterations": False},
    "no-categories": {"categories": False},
    "bare": {"stacks": "none", "phases": False, "backward_names": False,
             "iterations": False, "categories": False},
}


def result(obj) -> None:
    print("RESULT " + json.dumps(obj), flush=True)


def local_bytes(t) -> int:
    """Bytes this rank holds of a tensor (its shard, for a DTensor)."""
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def setup_training(strategy: str):
    """One rank's GPT-2 under DDP or FSDP2 (torchrun starts it): the rank,
    the model, its optimizer and a function that trains one step and
    returns its loss (a tensor, not synchronized)."""
    import torch
    import torch.distributed as dist
    from transformers import GPT2Config, GPT2LMHeadModel

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same initial weights on every rank
    model = GPT2LMHeadModel(GPT2Config()).cuda()
    if strategy == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    else:
        from torch.distributed.fsdp import fully_shard

        for block in model.transformer.h:
            fully_shard(block)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(1000 + rank)

    def step():
        ids = torch.randint(0, 50257, (8, 512), device="cuda", generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return rank, model, opt, step


def child_train(strategy: str) -> None:
    """One rank of GPT-2 training, DDP or FSDP2 (torchrun starts it)."""
    import torch
    import torch.distributed as dist

    rank, model, opt, step = setup_training(strategy)
    losses, times = [], []
    for i in range(STEPS):
        torch.cuda.synchronize()
        began = time.perf_counter()
        losses.append(step().item())  # synchronizes
        if i >= TIMED_FROM:
            times.append(time.perf_counter() - began)
    torch.cuda.synchronize()
    stats = {
        "rank": rank, "strategy": strategy, "losses": losses,
        "step_s": statistics.median(times),
        "max_allocated": torch.cuda.max_memory_allocated(),
        "max_reserved": torch.cuda.max_memory_reserved(),
        "allocated_at_end": torch.cuda.memory_allocated(),
        "param_bytes": sum(local_bytes(p) for p in model.parameters()),
        "optimizer_bytes": sum(local_bytes(v) for s in opt.state.values()
                               for v in s.values() if torch.is_tensor(v)),
    }
    # The blocks of the parameters and the optimizer state, as the trace's
    # end should have them.
    stats["categories"] = figures(torch, model, opt)
    if "vramtrace" in sys.modules and sys.modules["vramtrace"].installed():
        sys.modules["vramtrace"].stop()
    dist.destroy_process_group()
    result(stats)


def child_bench(strategy: str, out: str, configs: list, rounds: int) -> None:
    """One rank's step time natively and recorded with the defaults, in one
    process: runs of different processes differ by more than the cost
    measured. Native blocks come first (a tracker, once attached, stays);
    then blocks with vramtrace started (each of `configs` in turn) alternate
    with blocks where it is attached but stopped (PyTorch's own cost of any
    tracker)."""
    import torch
    import torch.distributed as dist

    import vramtrace

    rank, _model, _opt, step = setup_training(strategy)

    def block() -> float:
        times = []
        for _ in range(BENCH_BLOCK):
            torch.cuda.synchronize()
            began = time.perf_counter()
            step().item()
            times.append(time.perf_counter() - began)
        return statistics.median(times)

    block()  # warm-up
    native = [block() for _ in range(rounds)]
    vramtrace.start(os.path.join(out, f"bench-{strategy}-attach-%r.vtrace"))
    vramtrace.stop()
    times: dict = {"stopped": []}
    for r in range(rounds):
        for name in configs:
            times["stopped"].append(block())
            vramtrace.start(os.path.join(out, f"bench-{strategy}-{name}-{r}-%r.vtrace"),
                            **BENCH_CONFIGS[name])
            times.setdefault(name, []).append(block())
            vramtrace.stop()
    dist.destroy_process_group()
    result({"rank": rank, "native": native, **times})


def torchrun(ranks: int, env: dict, trace: str | None, child_args: list, run_args=()):
    """Runs this script's `child CHILD_ARGS` under torchrun, recorded when
    `trace` is given; returns the ranks' results by rank, and the process."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={ranks}", "--no-python", sys.executable]
    if trace is not None:
        cmd += ["-m", "vramtrace", "run", "--out", trace, *run_args]
    cmd += [str(HERE), "child", *child_args]
    p = subprocess.run(cmd, env=env, timeout=480, capture_output=True, text=True)
    found = {}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            found[r["rank"]] = r
    return found, p


def check_traces(rep: Report, binary: Path, label: str, pattern: str, found: dict,
                 ranks: int) -> dict:
    """Checks each rank's trace against the rank's own figures; returns the
    memory each trace holds allocated at its end, by rank."""
    at_end = {}
    for rank in range(ranks):
        r = found[rank]
        trace = pattern.replace("%r", str(rank))
        s = vt(binary, "summary", trace)
        process = vt(binary, "info", trace).get("process", {})
        at_end[rank] = s["end"]["allocated_bytes"]
        rep.check(s["peak_allocated_bytes"] == r["max_allocated"]
                  and s["peak_reserved_bytes"] == r["max_reserved"],
                  f"{label} rank {rank}: trace's peaks = torch's max allocated/reserved",
                  f"{s['peak_allocated_bytes']:,}/{s['peak_reserved_bytes']:,} vs "
                  f"{r['max_allocated']:,}/{r['max_reserved']:,}")
        # iter0 runs from the optimizer's making to the first step, iterN
        # from step N to step N+1, and the last from the last step to the
        # stop: one more than the steps (docs/recording.md).
        iters = {p["name"] for p in vt(binary, "timeline", trace)["phases"]
                 if re.fullmatch(r"iter\d+", p["name"])}
        rep.check(iters == {f"iter{i}" for i in range(STEPS + 1)},
                  f"{label} rank {rank}: an `iterN` phase per step",
                  f"{len(iters)} (iter0 to iter{len(iters) - 1}; {STEPS} steps)")
        rep.check(process.get("rank") == rank and process.get("world_size") == ranks,
                  f"{label} rank {rank}: the trace names its rank",
                  f"rank {process.get('rank')}, world_size {process.get('world_size')}")
        check_categories(rep, label, rank, s, r["categories"])
    return at_end


def check_categories(rep: Report, label: str, rank: int, summary: dict, theirs: dict) -> None:
    """Parameters and optimizer state at the trace's end = PyTorch's blocks;
    gradients shown."""
    cats = Categories(summary)
    if not rep.check(cats.data is not None and cats.data.get("source") == "tags",
                     f"{label} rank {rank}: categories from tags",
                     f"source {(cats.data or {}).get('source')!r}"):
        return
    end = cats.at("at_end")
    for name in ("parameters", "optimizer_state"):
        ours, t = end.get(name, {}), theirs[name]
        rep.check(ours.get("bytes") == t["bytes"] and t["missing"] == 0,
                  f"{label} rank {rank}: {name} at the end = PyTorch's blocks",
                  f"trace {ours.get('bytes', 0):,} B in {ours.get('blocks', 0)} blocks; PyTorch "
                  f"{t['bytes']:,} B in {t['tensors']} tensors' blocks (sizes rounded to 512 B: "
                  f"{t['rounded']:,})")
    rep.add("INFO", f"{label} rank {rank}: gradients (at the end, at the allocated peak)",
            f"{gib(cats.bytes('at_end', 'gradients'))}, "
            f"{gib(cats.bytes('at_allocated_peak', 'gradients'))}; parameters "
            f"{gib(cats.bytes('at_end', 'parameters'))}")


def bench_step_time(rep: Report, ranks: int, env: dict, label: str, strategy: str,
                    out: Path, configs: list, rounds: int) -> None:
    """The step time recorded / native of each rank, measured in one
    process (child_bench), for each configuration of `configs`; the first
    is checked."""
    found, p = torchrun(ranks, env, None, ["bench", strategy, str(out), ",".join(configs),
                                           str(rounds)])
    if not rep.check(len(found) == ranks, f"{label}: step time in one process, {ranks} ranks",
                     "" if len(found) == ranks else tail(p)):
        return
    for stale in out.glob(f"bench-{strategy}-*.vtrace"):
        stale.unlink()
    ms = lambda xs: ", ".join(f"{x * 1e3:.1f}" for x in xs)  # noqa: E731
    for rank in range(ranks):
        r = found[rank]
        native, stopped = statistics.median(r["native"]), statistics.median(r["stopped"])
        for i, name in enumerate(configs):
            recorded = statistics.median(r[name])
            # Each recorded block against the stopped block just before it.
            before = r["stopped"][i::len(configs)]
            paired = statistics.median(b / a for a, b in zip(before, r[name]))
            detail = (f"{recorded * 1e3:.2f} / {native * 1e3:.2f} ms = {recorded / native:.3f} "
                      f"(medians of {rounds} blocks of {BENCH_BLOCK} steps); recorded / "
                      f"attached but stopped, the blocks alternating: {paired:.3f}; blocks "
                      f"{ms(r[name])} ms")
            what = f"{label} rank {rank}: step time, {name}, recorded / native"
            if i == 0:
                rep.check(recorded / native <= BENCH_BOUND, f"{what} <= {BENCH_BOUND}, one process",
                          detail + f"; native {ms(r['native'])} ms; attached but stopped "
                          f"{stopped / native:.3f}, {ms(r['stopped'])} ms")
            else:
                rep.add("INFO", what, detail)


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="carry", help="folder with the vramtrace binary")
    ap.add_argument("--out", default=os.environ.get("OUT", "multi-gpu-check-out"))
    ap.add_argument("--run-args", default="", help="more options of `vramtrace run`, as one string")
    ap.add_argument("--strategies", default="ddp,fsdp", help="ddp, fsdp or both")
    ap.add_argument("--step-time-only", action="store_true",
                    help="only the in-process step-time comparison, no separate runs")
    ap.add_argument("--bench-rounds", type=int, default=BENCH_ROUNDS,
                    help="rounds of blocks of the in-process comparison")
    ap.add_argument("--bench-configs", default="defaults",
                    help="configurations of the in-process step-time comparison, comma-"
                    f"separated, defaults first: {', '.join(BENCH_CONFIGS)}")
    ns, rest = ap.parse_known_args()
    if rest[:2] == ["child", "train"]:
        child_train(rest[2])
        return 0
    if rest[:2] == ["child", "bench"]:
        child_bench(rest[2], rest[3], rest[4].split(","), int(rest[5]))
        return 0

    import torch

    binary = Path(ns.bin).resolve() / "vramtrace"
    out = Path(ns.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rep = Report()
    started = time.time()
    ranks = torch.cuda.device_count()
    env = dict(os.environ, **NO_MULTICAST)
    env["VRAMTRACE_CACHE"] = str(out / "cache")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
    if ranks < 2:
        rep.add("SKIP", "several GPUs", f"{ranks} GPU(s) on this machine")
    runs = {}
    for strategy in ns.strategies.split(",") if ranks >= 2 else ():
        label = {"ddp": "DDP", "fsdp": "FSDP2"}[strategy]
        pattern = str(out / f"{strategy}-rank%r.vtrace")
        # Native and recorded alternate, ROUNDS times: the machine's noise
        # shows between rounds of one mode.
        native_runs, recorded_runs = [], []
        if ns.step_time_only:
            bench_step_time(rep, ranks, env, label, strategy, out, ns.bench_configs.split(","),
                            ns.bench_rounds)
            continue
        for round_, mode in ((r, m) for r in range(ROUNDS) for m in ("native", "recorded")):
            # Only the first round's traces are kept.
            trace = None if mode == "native" else pattern if round_ == 0 else str(out / "again-%r.vtrace")
            found, p = torchrun(ranks, env, trace, ["train", strategy], ns.run_args.split())
            if not rep.check(len(found) == ranks, f"{label}, {ranks} ranks, {mode}, round {round_ + 1}",
                             "" if len(found) == ranks else tail(p)):
                break
            if mode == "native":
                native_runs.append(found)
            else:
                recorded_runs.append(found)
            if trace == pattern:
                at_end = check_traces(rep, binary, label, pattern, found, ranks)
        for stale in out.glob("again-*.vtrace"):
            stale.unlink()
        if len(native_runs) != ROUNDS or len(recorded_runs) != ROUNDS:
            continue
        native, recorded = native_runs[0], recorded_runs[0]
        for rank in range(ranks):
            n, r = native[rank], recorded[rank]
            # The first loss comes before any backward and must be equal to
            # the bit; later ones may differ as much as two native runs do
            # (attention's backward adds in a varying order).
            diff = max(abs(a - b) / abs(a) for a, b in zip(n["losses"], r["losses"]))
            rep.check(n["losses"][0] == r["losses"][0] and diff <= 1e-3,
                      f"{label} rank {rank}: same losses",
                      f"first {n['losses'][0]:.6f} / {r['losses'][0]:.6f}, last native "
                      f"{n['losses'][-1]:.6f}, recorded {r['losses'][-1]:.6f}; "
                      + ("identical" if n["losses"] == r["losses"] else f"largest relative difference {diff:.1e}"))
            nt = [run[rank]["step_s"] for run in native_runs]
            rt = [run[rank]["step_s"] for run in recorded_runs]
            ratio = min(rt) / min(nt)
            rep.add("PASS" if ratio <= STEP_TIME_BOUND else "INFO",
                    f"{label} rank {rank}: step time, separate runs, recorded / native <= "
                    f"{STEP_TIME_BOUND}",
                      f"fastest round {min(rt) * 1e3:.1f} / {min(nt) * 1e3:.1f} ms = {ratio:.3f}; rounds: "
                      f"native {', '.join(f'{t * 1e3:.1f}' for t in nt)} ms, recorded "
                      f"{', '.join(f'{t * 1e3:.1f}' for t in rt)} ms (median of steps {TIMED_FROM}..{STEPS - 1})")
            rep.add("INFO", f"{label} rank {rank}: memory",
                    f"params {gib(r['param_bytes'])}, optimizer state {gib(r['optimizer_bytes'])}, "
                    f"allocated at end {gib(r['allocated_at_end'])} (trace: "
                    f"{gib(at_end[rank])}), peak {gib(r['max_allocated'])}")
        runs[strategy] = recorded
        bench_step_time(rep, ranks, env, label, strategy, out, ns.bench_configs.split(","),
                        ns.bench_rounds)
    if "ddp" in runs and "fsdp" in runs:
        for rank in range(ranks):
            d, f = runs["ddp"][rank], runs["fsdp"][rank]
            state = (f["param_bytes"] + f["optimizer_bytes"]) / (d["param_bytes"] + d["optimizer_bytes"])
            rep.check(abs(state - 1 / ranks) < 0.1 / ranks,
                      f"rank {rank}: FSDP2 holds about 1/{ranks} of DDP's parameters and optimizer state",
                      f"{gib(f['param_bytes'] + f['optimizer_bytes'])} vs "
                      f"{gib(d['param_bytes'] + d['optimizer_bytes'])} = {state:.3f}")
            d_end = vt(binary, "summary", str(out / f"ddp-rank{rank}.vtrace"))["end"]["allocated_bytes"]
            f_end = vt(binary, "summary", str(out / f"fsdp-rank{rank}.vtrace"))["end"]["allocated_bytes"]
            # DDP also keeps its gradient buckets (one more copy of the
            # parameters) between steps: FSDP2's share is below 1/ranks.
            rep.check(f_end < d_end / ranks * 1.1,
                      f"rank {rank}: the FSDP2 trace keeps at most about 1/{ranks} of DDP's memory between steps",
                      f"{gib(f_end)} vs {gib(d_end)} = {f_end / d_end:.3f}")
    rep.add("INFO", "total time", f"{time.time() - started:.0f} s")
    return rep.finish("multi_gpu_check.py",
                      f"torch {torch.__version__}, {ranks} x {torch.cuda.get_device_name(0)}, "
                      f"`vramtrace run {ns.run_args}`", out / "multi-gpu-check.md")


if __name__ == "__main__":
    sys.exit(main())
