"""GPU check for issue #28 (recording side): the stack of an OOM, the
allocator's limit, the card's memory, and iterations as the loop counts
them, in observer mode. Needs a CUDA GPU and PyTorch; prints each check and
a JSON line of figures, and exits non-zero if a check fails.

    PYTHONPATH=python VRAMTRACE_LIB=.../libvramtrace_recorder.so \\
        python3 python/gpu/oom_check.py --bin DIR --out OUTDIR

DIR holds the `vramtrace` binary and `dump_events` (the recorder's example
that prints a trace's events one per line).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from vramtrace.analysis import one_device

FAILED = []


def check(what: str, ok: bool, detail="") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {what} {detail}", flush=True)
    if not ok:
        FAILED.append(what)


def events(bin_dir: Path, trace: Path) -> list:
    out = subprocess.run([str(bin_dir / "dump_events"), str(trace)], capture_output=True,
                         text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split("\t")
        row = {"index": int(parts[0]), "time": int(parts[1]), "kind": parts[2]}
        for p in parts[3:]:
            k, _, v = p.partition("=")
            row[k] = int(v) if v.isdigit() else v
        rows.append(row)
    return rows


def record(script: Path, trace: Path, env=None) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "vramtrace", "run", "--out", str(trace),
                        str(script)], capture_output=True, text=True, env=env)
    print(p.stdout[-3000:], p.stderr[-3000:], flush=True)
    return p


OOM_PROGRAM = '''
import json, sys, torch
MiB = 1 << 20
keep = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
fraction = FRACTION
torch.cuda.set_per_process_memory_fraction(fraction)
total = torch.cuda.get_device_properties(0).total_memory
reserved = torch.cuda.memory_reserved()
limit = int(fraction * total)
fits = (limit - reserved) // (2 * MiB) * (2 * MiB)
ok = torch.empty(fits, dtype=torch.uint8, device="cuda")
del ok
failed = False
for i in range(3):
    if i == 1:
        try:
            big = torch.empty(fits + 2 * MiB, dtype=torch.uint8, device="cuda")  # OOM-LINE
        except torch.OutOfMemoryError:
            failed = True
print("FIGURES " + json.dumps({"total": total, "memget_total": torch.cuda.mem_get_info()[1],
      "fraction": fraction, "limit": limit, "reserved_before": reserved, "fits": fits,
      "oom": failed, "get_fraction": getattr(torch.cuda, "get_per_process_memory_fraction",
      lambda: None)(), "num_ooms": torch.cuda.memory_stats()["num_ooms"]}))
'''

TRAIN_PROGRAM = '''
import torch
EARLY = EARLY_FLAG
model = torch.nn.Linear(1024, 1024)
if EARLY:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)   # before CUDA starts
model = model.cuda()
if not EARLY:
    x0 = torch.randn(8, 1024, device="cuda")              # CUDA started, no optimizer yet
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(3):
    x = torch.randn(64, 1024, device="cuda")
    if i == 1:
        try:
            torch.empty(1 << 50, dtype=torch.uint8, device="cuda")  # OOM-LINE
        except torch.OutOfMemoryError:
            pass
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
'''


REPLACE_PROGRAM = '''
import torch
torch.cuda.set_per_process_memory_fraction(0.25)
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
try:
    y = torch.empty(int(0.3 * torch.cuda.get_device_properties(0).total_memory), dtype=torch.uint8, device="cuda")  # OOM-LINE
    print("NOT ENFORCED")
except RuntimeError as e:
    print("ENFORCED" if "out of memory" in str(e) else "OTHER " + str(e)[:200])
'''


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    bin_dir, out = Path(args.bin).resolve(), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch
    figures = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
    inc = Path(torch.__file__).parent / "include"
    grep = subprocess.run(["grep", "-rl", "per_process_memory_fraction", str(inc)],
                          capture_output=True, text=True).stdout.split()
    figures["alloc_conf_fraction_option_in_headers"] = [os.path.relpath(g, inc) for g in grep]
    # The cost of one sample, as Python sees it (an upper bound of the
    # shim's cudaMemGetInfo call).
    torch.cuda.init()
    torch.cuda.mem_get_info(0)
    n = 2000
    t = time.perf_counter()
    for _ in range(n):
        torch.cuda.mem_get_info(0)
    figures["mem_get_info_us"] = (time.perf_counter() - t) / n * 1e6

    # (a) a limit, then an OOM at a known line.
    fraction = 0.3
    script = out / "oom_child.py"
    script.write_text(OOM_PROGRAM.replace("FRACTION", repr(fraction)))
    oom_line = next(i for i, l in enumerate(script.read_text().splitlines(), 1) if "OOM-LINE" in l)
    trace = out / "oom.vtrace"
    p = record(script, trace)
    check("(a) program ran", p.returncode == 0)
    child = json.loads(next(l for l in p.stdout.splitlines() if l.startswith("FIGURES "))[8:])
    figures["a"] = child
    ev = events(bin_dir, trace)
    kinds = [e["kind"] for e in ev]
    figures["a_counts"] = {k: kinds.count(k) for k in sorted(set(kinds))}
    ooms = [e for e in ev if e["kind"] == "oom"]
    check("(a) torch raised OutOfMemoryError", child["oom"])
    check("(a) one oom event", len(ooms) == 1, len(ooms))
    if ooms:
        check("(a) the oom's stack names the script's line",
              f"oom_child.py:{oom_line})" in str(ooms[0].get("stack", "")), ooms[0].get("stack"))
        figures["a_oom_stack"] = ooms[0].get("stack")
    limits = [e for e in ev if e["kind"] == "limit"]
    check("(a) one limit event", len(limits) == 1, limits)
    if limits:
        figures["a_limit_event"] = limits[0]
        check("(a) limit == int(fraction * total)", limits[0]["limit"] == child["limit"],
              (limits[0]["limit"], child["limit"]))
        # Torch's own enforcement brackets it: reserved + fits succeeded, one
        # 2 MiB page more failed.
        lo = child["reserved_before"] + child["fits"]
        check("(a) limit within what torch allowed and refused",
              lo <= limits[0]["limit"] < lo + (2 << 20), (lo, limits[0]["limit"]))
        if child["get_fraction"] is not None:
            check("(a) limit == torch's get_per_process_memory_fraction * total",
                  round(child["get_fraction"] * child["total"]) == limits[0]["limit"])
    samples = [i for i, e in enumerate(ev) if e["kind"] == "device_memory"]
    seg = [i for i, e in enumerate(ev) if e["kind"].startswith("segment_") or e["kind"] == "oom"]
    check("(a) a device_memory sample right after each segment event and the oom",
          all(i + 1 < len(ev) and ev[i + 1]["kind"] == "device_memory" for i in seg),
          [(ev[i]["kind"], ev[i + 1]["kind"] if i + 1 < len(ev) else None) for i in seg])
    check("(a) samples at the end", bool(samples) and samples[-1] == len(ev) - 1 or
          (bool(samples) and all(e["kind"].startswith("phase") for e in ev[samples[-1] + 1:])),
          kinds[-4:])
    check("(a) totals == mem_get_info's", all(ev[i]["total"] == child["memget_total"]
                                              for i in samples))
    figures["a_samples"] = [(ev[i - 1]["kind"], ev[i]["free"]) for i in samples]
    # The big segment's free gives back what its alloc took: the samples
    # around it are the driver's, to the byte.
    pairs = [(ev[i - 1]["kind"], ev[i]["free"]) for i in samples]
    frees = [f for k, f in pairs if k == "segment_free"]
    allocs = [f for k, f in pairs if k == "segment_alloc"]
    check("(a) after the segment_free the card is back where it was before that segment",
          len(allocs) >= 2 and bool(frees) and frees[-1] == allocs[0], pairs)
    figures["a_first_events"] = kinds[:4]

    # (b) iterations: optimizer made before CUDA starts, and after.
    for early in (True, False):
        script = out / f"train_{'early' if early else 'late'}.py"
        script.write_text(TRAIN_PROGRAM.replace("EARLY_FLAG", repr(early)))
        line = next(i for i, l in enumerate(script.read_text().splitlines(), 1) if "OOM-LINE" in l)
        trace = out / f"train_{'early' if early else 'late'}.vtrace"
        p = record(script, trace)
        check(f"(b) early={early} ran", p.returncode == 0)
        ev = events(bin_dir, trace)
        opened, order = [], []
        phase_at_oom = None
        for e in ev:
            if e["kind"] == "phase_begin" and str(e["name"]).startswith("iter"):
                opened.append(e["name"])
                order.append((e["index"], e["name"]))
            elif e["kind"] == "phase_end" and str(e["name"]).startswith("iter"):
                if e["name"] in opened:
                    opened.remove(e["name"])
            elif e["kind"] == "oom":
                phase_at_oom = list(opened)
                check(f"(b) early={early} oom stack names the line",
                      f"train_{'early' if early else 'late'}.py:{line})" in str(e.get("stack")),
                      e.get("stack"))
        names = [n for _, n in order]
        first_index = order[0][0] if order else None
        first_alloc = next((e["index"] for e in ev if e["kind"] == "alloc"), None)
        figures[f"b_{'early' if early else 'late'}"] = {"iterations": names,
                                                         "phase_at_oom": phase_at_oom,
                                                         "iter0_at": first_index,
                                                         "first_alloc_at": first_alloc}
        check(f"(b) early={early} iterations", names == ["iter0", "iter1", "iter2", "iter3"], names)
        check(f"(b) early={early} oom at loop index 1 in iter1", phase_at_oom == ["iter1"],
              phase_at_oom)
        if early:
            check("(b) early: iter0 begins with the recording (before the first alloc)",
                  first_index is not None and first_alloc is not None and first_index < first_alloc)
        else:
            check("(b) late: iter0 begins at the optimizer's making (after CUDA's first allocs)",
                  first_index is not None and first_alloc is not None and first_index > first_alloc)
        s = subprocess.run([str(bin_dir / "vramtrace"), "summary", str(trace), "--json"],
                           capture_output=True, text=True)
        if s.returncode == 0:
            ooms = one_device(json.loads(s.stdout)).get("ooms", [])
            figures[f"b_{'early' if early else 'late'}"]["summary_oom"] = [
                {k: o.get(k) for k in ("phase", "site")} for o in ooms]
            check(f"(b) early={early} summary's oom phase is iter1",
                  bool(ooms) and str(ooms[0].get("phase")).split("/")[0] == "iter1",
                  [o.get("phase") for o in ooms])

    # (c) replacement mode: the limit enforced and recorded, the oom's stack,
    # samples after segment events.
    script = out / "replace_child.py"
    script.write_text(REPLACE_PROGRAM)
    line = next(i for i, l in enumerate(script.read_text().splitlines(), 1) if "OOM-LINE" in l)
    trace = out / "replace.vtrace"
    p = subprocess.run([sys.executable, "-m", "vramtrace", "run", "--mode", "replace", "--out",
                        str(trace), str(script)], capture_output=True, text=True)
    print(p.stdout[-2000:], p.stderr[-2000:], flush=True)
    check("(c) replace: ran", p.returncode == 0)
    ev = events(bin_dir, trace)
    kinds = [e["kind"] for e in ev]
    figures["c_counts"] = {k: kinds.count(k) for k in sorted(set(kinds))}
    figures["c_stdout"] = p.stdout.strip().splitlines()[-3:]
    limits = [e for e in ev if e["kind"] == "limit"]
    check("(c) replace: limit recorded", len(limits) == 1, limits)
    ooms = [e for e in ev if e["kind"] == "oom"]
    check("(c) replace: oom stack names the line", bool(ooms) and
          f"replace_child.py:{line})" in str(ooms[0].get("stack")), ooms[:1])
    check("(c) replace: enforced (the oom came below the card's size)", "ENFORCED" in p.stdout)
    seg = [i for i, e in enumerate(ev) if e["kind"].startswith("segment_") or e["kind"] == "oom"]
    check("(c) replace: a sample after each segment event and the oom",
          bool(seg) and all(i + 1 < len(ev) and ev[i + 1]["kind"] == "device_memory"
                            for i in seg))
    print("FIGURES " + json.dumps(figures, default=str), flush=True)
    (out / "figures.json").write_text(json.dumps(figures, indent=1, default=str))
    print("FAILED: " + ", ".join(FAILED) if FAILED else "ALL OK")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
