"""What observer mode costs a PyTorch program, side by side with PyTorch's
own memory history (see docs/performance-history.md, "Observer mode on a GPU").

    PYTHONPATH=python VRAMTRACE_LIB=carry/libvramtrace_recorder.so \\
        python3 python/bench/bench_observer.py --processes 3 --out "$OUT"

Needs a CUDA GPU, PyTorch and transformers; a benchmark, not a test.

A GPU machine's speed drifts by a third between processes (which cores,
which clocks), more than the costs measured, so every configuration runs in
the same process, in blocks, and is compared with the native blocks of that
process. A trace tracker cannot be detached, so the process first runs its
native blocks, alternating with PyTorch's history, then starts and stops
vramtrace once per block:

- ``native``: PyTorch's allocator, nothing attached;
- ``history``: ``torch.cuda.memory._record_memory_history(stacks="python")``
  (turned off again after its block);
- ``tracker``: vramtrace's tracker attached but stopped: what PyTorch itself
  spends on an attached tracker, the floor of any tracker;
- ``observe-none``: ``vramtrace.start(stacks="none", phases=False,
  backward_names=False)``;
- ``observe-python-bare``: Python stacks, no RecordFunction callback;
- ``observe-python-phases``, ``observe-python-names``: Python stacks and
  the RecordFunction callback for ``record_function`` ranges only, for
  backward nodes only;
- ``observe-python``: ``vramtrace.start()``, the default: Python stacks,
  ``record_function`` phases, backward node names, iterations.

A block is (1) allocation pairs: one ``torch.empty`` (sizes log-uniform from
512 B to 40 MiB, fixed seed) replacing one of 32 live tensors, ns per pair
over 20,000 pairs, at a Python depth of 4, 22 and 40 frames; (2) 6 GPT-2
training steps (12 layers, batch 8 x 512, bf16 autocast, AdamW), median
step time. Each process runs every block ``--rounds`` times, in rotated
order; each figure is the median over blocks and processes of its ratio to
the native median of its process.

``--baseline-lib PATH`` compares two builds of the library in one run:
processes alternate between it and ``VRAMTRACE_LIB``, and the baseline's
configurations are labelled ``CONFIG@baseline`` (each against the native
blocks of its own process, and the fastest block against the fastest
native block of its build). ``--configs`` picks the attached
configurations to run.
"""

from __future__ import annotations

import argparse
import datetime
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
ATTACHED = ["tracker", "observe-none", "observe-python-bare", "observe-python-phases",
            "observe-python-names", "observe-python"]
LIVE = 32
PAIRS = 20_000
STEPS = 6
# Calls below the block's own frames: Python depths of 4, 22 and 40.
DEPTHS = (0, 18, 36)


def at_depth(n: int, fn, *args):
    """Calls fn(*args) n Python calls deep."""
    if n <= 0:
        return fn(*args)
    return at_depth(n - 1, fn, *args)


class Pairs:
    def __init__(self) -> None:
        import torch

        rng = random.Random(1234)
        lo, hi = math.log(512), math.log(40 << 20)
        self.sizes = [int(math.exp(rng.uniform(lo, hi))) for _ in range(4096)]
        self.live = [None] * LIVE
        self.k = 0
        self.dev = torch.device("cuda", 0)
        self.run(5000)

    def run(self, n: int) -> float:
        import torch

        empty, u8, live, sizes, dev = torch.empty, torch.uint8, self.live, self.sizes, self.dev
        k0 = self.k
        t = time.perf_counter_ns()
        for k in range(k0, k0 + n):
            i = k % LIVE
            live[i] = None
            live[i] = empty(sizes[k & 4095], dtype=u8, device=dev)
        elapsed = time.perf_counter_ns() - t
        self.k = k0 + n
        return elapsed / n

    def block(self) -> dict:
        return {f"pair_ns_depth{d + 4}": at_depth(d, self.run, PAIRS) for d in DEPTHS}


class Gpt2:
    def __init__(self) -> None:
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        self.model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12)).cuda()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.gen = torch.Generator(device="cpu").manual_seed(1)
        self.steps(3)

    def steps(self, n: int) -> list:
        import torch

        times = []
        for _ in range(n):
            ids = torch.randint(0, 50257, (8, 512), generator=self.gen).cuda()
            torch.cuda.synchronize()
            t = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = self.model(ids, labels=ids).loss
            loss.backward()
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t)
        return times

    def block(self) -> dict:
        return {"gpt2_step_ms": statistics.median(self.steps(STEPS)) * 1e3}


def child(rounds: int, trace_dir: str, gpt2: bool, seed: int, configs: list) -> None:
    import torch

    import vramtrace

    torch.cuda.init()
    if seed == 0:
        from vramtrace import _shim

        shim = _shim.load(torch)
        print(f"INFO events carry torch's counter: {shim.vramtrace_shim_counter_time()}", flush=True)
    workloads = [Pairs()] + ([Gpt2()] if gpt2 else [])

    def block(config: str) -> None:
        out = {"config": config}
        for w in workloads:
            out.update(w.block())
        print("RESULT " + json.dumps(out), flush=True)

    for _ in range(rounds):
        block("native")
        torch.cuda.memory._record_memory_history(stacks="python")
        block("history")
        torch.cuda.memory._record_memory_history(enabled=None)
    options = {
        "observe-none": {"stacks": "none", "phases": False, "backward_names": False},
        "observe-python-bare": {"stacks": "python", "phases": False, "backward_names": False},
        "observe-python-phases": {"stacks": "python", "phases": True, "backward_names": False},
        "observe-python-names": {"stacks": "python", "phases": False, "backward_names": True},
        "observe-python": {},
    }
    # Attach the tracker once, then leave it stopped for "tracker".
    vramtrace.start(os.path.join(trace_dir, "attach.vtrace"), strict=True)
    vramtrace.stop()
    order = list(configs)
    for r in range(rounds):
        k = (r + seed) % len(order)
        for config in order[k:] + order[:k]:
            if config == "tracker":
                block(config)
                continue
            vramtrace.start(os.path.join(trace_dir, f"{config}-{r}.vtrace"), strict=True,
                            **options[config])
            block(config)
            vramtrace.stop()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3, help="blocks of each config per process")
    ap.add_argument("--out", default=os.environ.get("OUT", "bench-observer-out"))
    ap.add_argument("--no-gpt2", action="store_true")
    ap.add_argument("--cpus", help="taskset CPU list for every child")
    ap.add_argument("--baseline-lib", help="another build of the library, in alternate processes")
    ap.add_argument("--configs", default=",".join(ATTACHED),
                    help="attached configurations to run, comma-separated")
    ns, rest = ap.parse_known_args()
    if rest and rest[0] == "child":
        child(int(rest[1]), rest[2], rest[3] == "gpt2", int(rest[4]), rest[5].split(","))
        return 0
    attached = ns.configs.split(",")
    if unknown := set(attached) - set(ATTACHED):
        ap.error(f"unknown configurations {sorted(unknown)}; known: {', '.join(ATTACHED)}")
    import torch

    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, VRAMTRACE_CACHE=str(out / "cache"))
    ratios: dict = {}
    values: dict = {}
    builds = [("", env)]
    if ns.baseline_lib:
        builds.append(("@baseline", dict(env, VRAMTRACE_LIB=str(Path(ns.baseline_lib).resolve()))))
    for proc in range(ns.processes * len(builds)):
        suffix, child_env = builds[proc % len(builds)]
        cmd = [sys.executable, str(HERE), "child", str(ns.rounds), str(out),
               "no" if ns.no_gpt2 else "gpt2", str(proc // len(builds)), ",".join(attached)]
        if ns.cpus:
            cmd = ["taskset", "-c", ns.cpus, *cmd]
        p = subprocess.run(cmd, capture_output=True, text=True, env=child_env, timeout=600)
        found = [json.loads(l[7:]) for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        if p.returncode != 0 or not found:
            print(f"process {proc} failed:\n{p.stdout[-1000:]}\n{p.stderr[-2000:]}", flush=True)
            return 1
        metrics = [k for k in found[0] if k != "config"]
        base = {m: statistics.median(r[m] for r in found if r["config"] == "native")
                for m in metrics}
        for line in p.stdout.splitlines():
            if line.startswith("INFO "):
                print(line, flush=True)
        for r in found:
            print(f"process {proc}: {json.dumps(r)}", flush=True)
            r["config"] += suffix
            for m in metrics:
                ratios.setdefault((r["config"], m), []).append(r[m] / base[m])
                values.setdefault((r["config"], m), []).append(r[m])
    configs = [c + suffix for suffix, _ in builds for c in ("native", "history", *attached)]
    lines = [f"# bench_observer.py, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
             "", (f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
             f"python {sys.version.split()[0]}; {ns.processes * len(builds)} processes x "
             f"{ns.rounds} blocks"), "",
             "| configuration | " + " | ".join(metrics) + " |", "|---|" + "---|" * len(metrics)]
    for c in configs:
        cells = []
        for m in metrics:
            rs, vs = ratios[(c, m)], values[(c, m)]
            q = statistics.quantiles(rs, n=4) if len(rs) > 1 else [rs[0]] * 3
            native = "native" + c[c.index("@"):] if "@" in c else "native"
            best = min(vs) / min(values[(native, m)])
            cells.append(f"{statistics.median(vs):.1f}: {statistics.median(rs):.3f}x "
                         f"({q[0]:.3f}-{q[2]:.3f}); best {best:.3f}x")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n\nEach cell: the median value, then the median ratio to " \
        "native within its process (interquartile range); then the fastest block's value " \
        "over native's fastest (noise only ever adds time).\n"
    (out / "bench-observer.md").write_text(text)
    (out / "bench-observer.json").write_text(json.dumps(
        {f"{c}|{m}": v for (c, m), v in values.items()}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
