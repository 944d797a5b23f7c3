#!/usr/bin/env python3
"""What observer mode's Python stacks cost the allocating thread, without a
GPU or PyTorch (docs/performance-history.md, "Recording as cheap as PyTorch's own
hook"): the library's sink is fed alloc, free_requested and free_completed
as PyTorch's tracker feeds the shim, at Python depths of 4, 22 and 40
frames, with `stacks=python` and with `stacks=none`; the figure is the
difference, ns per pair.

    python3 scripts/bench-python-stacks.py NAME=LIB [NAME=LIB ...] \\
        [--rounds 6] [--pairs 20000] [--thrash 1MiB]

Each LIB is a built `libvramtrace_recorder.so`; the builds run in
alternating processes, round after round, and each figure is the median
over rounds of the fastest of 5 loops. ``--thrash N`` writes N bytes of
other memory before each pair, so that the frames are no longer in the
nearest caches when they are walked (as in a training step, where much
runs between two allocations).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

DEPTHS = (4, 22, 40)

CHILD = rf'''
import ctypes, json, os, sys, time
sys.path.insert(0, sys.argv[4])
from torch_sink import TorchEvent, sink, ALLOC, FREE_REQUESTED, FREE_COMPLETED
lib = ctypes.CDLL(sys.argv[1])
pairs, thrash, out_dir = int(sys.argv[2]), int(sys.argv[3]), sys.argv[5]
buf = ctypes.create_string_buffer(max(thrash, 1))
memset = ctypes.memset

def at(depth, fn):
    return fn() if depth <= 0 else at(depth - 1, fn)

result = {{}}
for stacks in ("none", "python"):
    out = os.path.join(out_dir, f"bench-{{os.getpid()}}-{{stacks}}.vtrace")
    config = f"out={{out}}\nstacks={{stacks}}\nstate=empty\ndevice=0\t85899345920\tno GPU\n"
    assert lib.vramtrace_observe_start(config.encode()) == 0
    event = sink(lib).event
    alloc, requested, completed = (TorchEvent(k, 0, 0x10000, 512, 0, 0, None)
                                   for k in (ALLOC, FREE_REQUESTED, FREE_COMPLETED))
    pa, pr, pc = ctypes.pointer(alloc), ctypes.pointer(requested), ctypes.pointer(completed)

    def loop():
        began = time.perf_counter_ns()
        for _ in range(pairs):
            if thrash:
                memset(buf, 1, thrash)
            event(pa); event(pr); event(pc)
        return (time.perf_counter_ns() - began) / pairs

    # The loop's own frames (module, at, loop) are the first 3.
    for depth in {DEPTHS}:
        at(depth - 4, loop)
        result[f"{{stacks}}{{depth}}"] = min(at(depth - 4, loop) for _ in range(5))
    lib.vramtrace_observe_stop()
    os.unlink(out)
print(json.dumps(result))
'''


def size(text: str) -> int:
    units = {"": 1, "KiB": 1 << 10, "MiB": 1 << 20}
    number = text.rstrip("KMiB")
    return int(float(number) * units[text[len(number):]])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("builds", nargs="+", help="NAME=PATH of a libvramtrace_recorder.so")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--pairs", type=int, default=20_000)
    ap.add_argument("--thrash", default="0", help="bytes written before each pair (1MiB, 512KiB)")
    ns = ap.parse_args()
    builds = [b.split("=", 1) for b in ns.builds]
    if any(len(b) != 2 or not os.path.isfile(b[1]) for b in builds):
        ap.error("each build is NAME=PATH of an existing libvramtrace_recorder.so")
    tests = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests")
    rows: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(ns.rounds):
            for name, lib in builds:
                p = subprocess.run([sys.executable, "-c", CHILD, lib, str(ns.pairs),
                                    str(size(ns.thrash)), tests, tmp],
                                   capture_output=True, text=True)
                if p.returncode != 0:
                    print(p.stderr[-2000:], file=sys.stderr)
                    return 1
                r = json.loads(p.stdout.strip().splitlines()[-1])
                for d in DEPTHS:
                    rows.setdefault((name, d), []).append(r[f"python{d}"] - r[f"none{d}"])
                rows.setdefault((name, "none"), []).append(r[f"none{DEPTHS[0]}"])
    print(f"python {sys.version.split()[0]}, {ns.rounds} rounds of {ns.pairs} pairs, thrash "
          f"{ns.thrash}; ns per pair added by Python stacks (median over rounds)\n")
    print("| build | " + " | ".join(f"depth {d}" for d in DEPTHS) + " | pair without stacks, harness included |")
    print("|---|" + "---|" * (len(DEPTHS) + 1))
    for name, _ in builds:
        cells = [f"{statistics.median(rows[(name, d)]):.0f}" for d in DEPTHS]
        cells.append(f"{statistics.median(rows[(name, 'none')]):.0f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
