"""Recording overhead on a GPU (see docs/performance-history.md, "Recording overhead
on a GPU"): one command, every configuration in its own process.

    VRAMTRACE_LIB=$PWD/libvramtrace_recorder.so PYTHONPATH=$PWD/python \
        python3 bench_overhead.py --bin . --out "$OUT"

Needs a CUDA GPU and PyTorch; not part of `cargo test` (CI has no GPU).

1. Allocation pairs: one ``torch.empty`` (sizes log-uniform from 512 B to
   40 MiB, fixed seed) replacing one of 32 live tensors, so one allocation
   and one free per pair, timed per pair (median of 7 runs) under
   (a) PyTorch's allocator; (b) (a) with
   ``torch.cuda.memory._record_memory_history(stacks="python")``;
   (c) vramtrace without stacks; (d) vramtrace with Python stacks;
   (e) vramtrace with native stacks. Each at a Python depth of 4 frames and
   of 34 (the loop called 30 calls deep, as in a model's ``forward``). For
   vramtrace, the library's own time per call (``vramtrace_timing``) too.
2. Training steps of a small transformer under (a), (b) and (d); each step
   also keeps a 256 KiB tensor alive at a known line (``# LEAK-LINE``), and
   ``vramtrace leaks --json`` of (d)'s trace must name that file and line.

Figures from different processes differ by up to a third on a GPU machine
(which cores, which clocks), more than the budgets' margins, so
``--rounds N`` runs the pair configurations N times each, interleaved
(a, b, c, d, e, a, b, ...), and judges the budgets on the median over
rounds of the ratio within each round; ``--cpus`` pins every child to
those cores. ``--configs ac`` runs a subset; ``--no-train`` skips part 2.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import itertools
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
# The small transformer is the GPU checks' (python/gpu/small_model.py).
sys.path.insert(0, str(HERE.parents[1] / "gpu"))

from small_model import small_transformer, token_batches  # noqa: E402 - after the path
from vramtrace.analysis import one_device  # noqa: E402 - after the path

PAIR_CONFIGS = {
    "a": "PyTorch allocator",
    "b": "PyTorch + _record_memory_history(stacks='python')",
    "c": "vramtrace, no stacks",
    "d": "vramtrace, Python stacks",
    "e": "vramtrace, native stacks",
}
VRAMTRACE_STACKS = {"c": "none", "d": "python", "e": "native"}
TRAIN_CONFIGS = ["a", "b", "d"]
LIVE = 32
REPS = 7
WARM_STEPS, TIMED_STEPS = 5, 30


def setup(config: str, trace: str):
    """Switches the allocator for `config`; returns the vramtrace module or None."""
    import torch

    if config in VRAMTRACE_STACKS:
        import vramtrace

        vramtrace.install(trace, stacks=VRAMTRACE_STACKS[config], mode="replace")
        return vramtrace
    torch.cuda.init()
    if config == "b":
        torch.cuda.memory._record_memory_history(stacks="python")
    return None


def at_depth(n: int, fn, *args):
    """Calls fn(*args) n Python calls deep."""
    if n <= 0:
        return fn(*args)
    return at_depth(n - 1, fn, *args)


def child_pairs(config: str, trace: str) -> dict:
    import torch

    vt = setup(config, trace)
    dev = torch.device("cuda", 0)
    rng = random.Random(1234)
    lo, hi = math.log(512), math.log(40 << 20)
    sizes = [int(math.exp(rng.uniform(lo, hi))) for _ in range(4096)]
    live = [None] * LIVE
    state = {"k": 0}

    def run(n: int) -> float:
        empty, u8 = torch.empty, torch.uint8
        k0 = state["k"]
        t = time.perf_counter_ns()
        for k in range(k0, k0 + n):
            i = k % LIVE
            live[i] = None
            live[i] = empty(sizes[k & 4095], dtype=u8, device=dev)
        elapsed = time.perf_counter_ns() - t
        state["k"] = k0 + n
        return elapsed / n

    result = {"config": config}
    run(5000)
    per = run(1000)
    n = max(2000, min(200_000, int(0.2e9 / max(per, 1.0))))
    result["pairs_per_run"] = n
    for depth in (0, 30):
        runs = [at_depth(depth, run, n) for _ in range(REPS)]
        result[f"depth{depth}"] = {"median_ns": statistics.median(runs), "min_ns": min(runs)}
    if vt is not None:
        lib = ctypes.CDLL(str(vt.library_path()))
        lib.vramtrace_timing.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]
        lib.vramtrace_timing.restype = None
        out = (ctypes.c_uint64 * 4)()
        for depth in (0, 30):
            lib.vramtrace_timing(1, None)
            at_depth(depth, run, n)
            lib.vramtrace_timing(0, out)
            result[f"lib_depth{depth}"] = {
                "malloc_ns": out[1] / max(out[0], 1),
                "free_ns": out[3] / max(out[2], 1),
                "calls": [int(out[0]), int(out[2])],
            }
        live[:] = [None] * LIVE
        vt.finish()
    return result


def child_train(config: str, trace: str) -> dict:
    import torch

    vt = setup(config, trace)
    torch.manual_seed(0)
    dev = torch.device("cuda", 0)
    model, opt = small_transformer(dev)
    data = list(itertools.islice(token_batches(), WARM_STEPS + TIMED_STEPS))
    retained = []

    def step(x, y):
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        retained.append(torch.empty(256 << 10, dtype=torch.uint8, device=dev))  # LEAK-LINE
        return loss

    t0 = 0
    for s, (x, y) in enumerate(data):
        if s == WARM_STEPS:
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
        with vt.phase("step") if vt else contextlib.nullcontext():
            loss = step(x, y)
    torch.cuda.synchronize()
    per_step = (time.perf_counter_ns() - t0) / TIMED_STEPS
    result = {"config": config, "step_ms": per_step / 1e6, "loss": float(loss.item())}
    if vt:
        vt.finish()
    return result


# ------------------------------------------------------------------ parent


def leak_line() -> int:
    for n, text in enumerate(HERE.read_text().splitlines(), 1):
        if text.rstrip().endswith("# LEAK-LINE") and "retained.append" in text:
            return n
    raise AssertionError("no LEAK-LINE")


def spawn(kind: str, config: str, trace: Path, cpus: set[int] | None = None) -> dict:
    cmd = [sys.executable, str(HERE), "--child", kind, "--config", config, "--trace", str(trace)]
    t = time.time()
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240, preexec_fn=pin)
    if p.returncode != 0:
        return {"config": config, "error": (p.stderr or p.stdout)[-2000:],
                "wall_s": time.time() - t}
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["wall_s"] = round(time.time() - t, 1)
    if p.stderr.strip():
        out["stderr"] = p.stderr.strip()[-500:]
    return out


def cli(binary: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=120)


def pair_table(rounds: list[dict], configs: list[str]) -> int:
    """Prints the pair table (medians over rounds) and the budgets; returns failures."""
    failures = 0

    def figure(config: str, key: str, field: str) -> float | None:
        values = [r[config][key][field] for r in rounds
                  if config in r and key in r[config]]
        return statistics.median(values) if values else None

    def ratio(num: str, den: str, dep: int) -> list[float]:
        key = f"depth{dep}"
        return [r[num][key]["median_ns"] / r[den][key]["median_ns"] for r in rounds
                if key in r.get(num, {}) and key in r.get(den, {})]

    print("| config | us per pair, depth 4 | vs (a) | us per pair, depth 34 | vs (a) "
          "| in library: malloc / free ns (depth 4) | (depth 34) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for config in configs:
        if any("error" in r[config] for r in rounds):
            errors = [r[config]["error"] for r in rounds if "error" in r[config]]
            print(f"| ({config}) {PAIR_CONFIGS[config]} | FAILED: {errors[0][-300:]!r} | | | | | |")
            failures += 1
            continue
        cells = []
        for dep in (0, 30):
            m = figure(config, f"depth{dep}", "median_ns")
            vs = ratio(config, "a", dep) if "a" in configs else []
            cells += [f"{m / 1000:.2f}", f"{statistics.median(vs):.2f}x" if vs else ""]
        for dep in (0, 30):
            mal = figure(config, f"lib_depth{dep}", "malloc_ns")
            fre = figure(config, f"lib_depth{dep}", "free_ns")
            cells.append(f"{mal:.0f} / {fre:.0f}" if mal is not None else "")
        print(f"| ({config}) {PAIR_CONFIGS[config]} | " + " | ".join(cells) + " |")
    print()
    for num, den, limit in (("c", "a", 1.15), ("d", "b", 1.0)):
        if num not in configs or den not in configs:
            continue
        for dep in (0, 30):
            rs = ratio(num, den, dep)
            if not rs:
                continue
            med = statistics.median(rs)
            ok = med <= limit
            failures += not ok
            print(f"budget depth {dep + 4}: ({num}) <= {limit} ({den}): "
                  f"{'PASS' if ok else 'FAIL'}: median ratio {med:.3f} over {len(rs)} round(s), "
                  f"range {min(rs):.3f} to {max(rs):.3f}")
    print()
    return failures


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--config")
    ap.add_argument("--trace")
    ap.add_argument("--bin", default=".")
    ap.add_argument("--out", default="/tmp/vramtrace-bench")
    ap.add_argument("--rounds", type=int, default=1, help="runs of each pair configuration")
    ap.add_argument("--configs", default="".join(PAIR_CONFIGS), help="pair configurations, e.g. ac")
    ap.add_argument("--cpus", default="", help="pin children to these cores, e.g. 2,3")
    ap.add_argument("--no-train", dest="train", action="store_false")
    ns = ap.parse_args()
    if ns.child:
        fn = child_pairs if ns.child == "pairs" else child_train
        print(json.dumps(fn(ns.config, ns.trace)))
        return 0

    cpus = {int(c) for c in ns.cpus.split(",") if c.strip()} or None
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/vramtrace-bench")
    work.mkdir(parents=True, exist_ok=True)
    binary = Path(ns.bin).resolve() / "vramtrace"
    import torch

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout
    print(f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"GPU (nvidia-smi: name, driver, memory): {smi.strip()}")
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"Python {sys.version.split()[0]}, CPU cores {os.cpu_count()}, "
          f"children pinned to {sorted(cpus) if cpus else 'none'}, {ns.rounds} round(s)")
    print()
    failures = 0
    configs = [c for c in PAIR_CONFIGS if c in ns.configs]
    # rounds[r][config]: one child's result; configs interleaved per round so
    # that slow drift of the machine hits every configuration alike.
    rounds = []
    for r in range(ns.rounds):
        rounds.append({})
        for config in configs:
            result = spawn("pairs", config, work / f"pairs-{config}.vtrace", cpus)
            rounds[r][config] = result
            print(f"pairs round {r + 1}", json.dumps(result), flush=True)
    print()
    failures += pair_table(rounds, configs)

    if not ns.train:
        print(f"{failures} failed")
        return 0
    train = {}
    for config in TRAIN_CONFIGS:
        train[config] = spawn("train", config, work / f"train-{config}.vtrace", cpus)
        print("train", json.dumps(train[config]), flush=True)
    print()
    print("| config | ms per training step | vs (a) | last loss |")
    print("| --- | --- | --- | --- |")
    for config in TRAIN_CONFIGS:
        r = train[config]
        if "error" in r:
            print(f"| ({config}) {PAIR_CONFIGS[config]} | FAILED | | |")
            failures += 1
            continue
        ratio = r["step_ms"] / train["a"]["step_ms"] if "step_ms" in train["a"] else 0
        print(f"| ({config}) {PAIR_CONFIGS[config]} | {r['step_ms']:.2f} | {ratio:.2f}x "
              f"| {r['loss']:.4f} |")
    print()

    # Site names of the recorded training run.
    trace = work / "train-d.vtrace"
    want = f"{HERE}:{leak_line()}"
    if trace.is_file() and binary.is_file():
        leaks = cli(binary, "leaks", "--json", str(trace))
        (out / "leaks.json").write_text(leaks.stdout + leaks.stderr)
        summary = cli(binary, "summary", str(trace))
        (out / "summary.txt").write_text(summary.stdout + summary.stderr)
        print("vramtrace summary (head):")
        print("\n".join(summary.stdout.splitlines()[:30]))
        print()
        try:
            report = one_device(json.loads(leaks.stdout))
            report = report[0] if isinstance(report, list) else report
            growth = [(g["phase"], g["bytes_per_repetition"], g["site"])
                      for g in report["leaks"]]
            never = [(s["site"], s["bytes"], s["count"]) for s in report["never_freed"][:8]]
        except (ValueError, KeyError, IndexError, TypeError) as e:
            growth, never = [], []
            print(f"cannot read leaks --json: {e}: {leaks.stdout[:500]} {leaks.stderr[:500]}")
        print(f"expected leak site: {want}")
        print(f"leaks: {json.dumps(growth, indent=1)}")
        print(f"leaks never_freed (top 8): {json.dumps(never, indent=1)}")
        ok_growth = any(site.endswith(f"({want})") for _, _, site in growth)
        # Parameters and optimizer state are never freed either (the trace
        # ends with the program): the retained tensors are one site of them.
        ok_never = any(site.endswith(f"({want})") and count == WARM_STEPS + TIMED_STEPS
                       for site, _, count in never)
        print(f"{'PASS' if ok_growth else 'FAIL'}: a leak names {want}")
        print(f"{'PASS' if ok_never else 'FAIL'}: a never-freed site is {want} "
              f"with {WARM_STEPS + TIMED_STEPS} blocks")
        failures += (not ok_growth) + (not ok_never)
        info = cli(binary, "info", "--json", str(trace))
        (out / "info.json").write_text(info.stdout + info.stderr)
    else:
        print(f"FAIL: no trace {trace} or no binary {binary}")
        failures += 1
    print()
    print(f"{failures} failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
