"""GPU check for `vramtrace export --format perfetto` (issue #33): does the
memory line up with a torch.profiler trace of the same run on wall-clock
time? Records a small training loop with vramtrace while torch.profiler
records it too, with a `record_function` range per step (a vramtrace phase,
and a profiler slice), exports both, and compares each step's start in the
two files. Also checks that the export's counters peak at PyTorch's
`max_memory_allocated()`. Prints each check and a JSON line of figures;
exits non-zero if a check fails.

    PYTHONPATH=python VRAMTRACE_LIB=.../libvramtrace_recorder.so \\
        python3 python/gpu/export_check.py --bin DIR --out OUTDIR
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path

FAILED = []


def check(what: str, ok: bool, detail="") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {what} {detail}", flush=True)
    if not ok:
        FAILED.append(what)


SCRIPT = '''
import json, sys, torch
from torch.profiler import profile, ProfilerActivity, record_function

out = sys.argv[1]
model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 2048)).cuda()
opt = torch.optim.Adam(model.parameters())
x = torch.randn(256, 2048, device="cuda")
torch.cuda.reset_peak_memory_stats()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for step in range(6):
        with record_function(f"step{step}"):
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        torch.cuda.synchronize()
prof.export_chrome_trace(out + "/torch_profiler.json")
json.dump({"max_memory_allocated": torch.cuda.max_memory_allocated()}, open(out + "/truth.json", "w"))
'''


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    script = out / "loop.py"
    script.write_text(textwrap.dedent(SCRIPT))
    trace = out / "loop.vtrace"
    p = subprocess.run([sys.executable, "-m", "vramtrace", "run", "--out", str(trace), str(script),
                        str(out)], capture_output=True, text=True)
    print(p.stdout[-2000:], p.stderr[-3000:], flush=True)
    check("the loop ran recorded", p.returncode == 0)
    if p.returncode != 0:
        return 1
    exported = out / "loop.perfetto.json"
    e = subprocess.run([str(args.bin / "vramtrace"), "export", "--format", "perfetto", str(trace),
                        "-o", str(exported)], capture_output=True, text=True)
    print(e.stdout, e.stderr, flush=True)
    check("export ran", e.returncode == 0)
    ours = json.loads(exported.read_text())["traceEvents"]
    theirs = json.loads((out / "torch_profiler.json").read_text())
    truth = json.loads((out / "truth.json").read_text())
    peak = max(ev["args"]["allocated"] for ev in ours
               if ev["ph"] == "C" and ev["name"].endswith("memory"))
    check("the counters peak at torch.cuda.max_memory_allocated()",
          peak == truth["max_memory_allocated"], f"({peak} vs {truth['max_memory_allocated']})")
    our_steps = {ev["name"]: ev["ts"] for ev in ours if ev["ph"] == "X" and ev["name"].startswith("step")}
    their_events = theirs["traceEvents"] if isinstance(theirs, dict) else theirs
    their_steps = {}
    for ev in their_events:
        name = ev.get("name", "")
        if ev.get("ph") == "X" and name.startswith("step") and name[4:].isdigit():
            their_steps.setdefault(name, ev["ts"])
    base = theirs.get("baseTimeNanoseconds") if isinstance(theirs, dict) else None
    common = sorted(set(our_steps) & set(their_steps))
    check("both traces have the steps", len(common) >= 5, f"{common}")
    offsets = [our_steps[s] - their_steps[s] for s in common]
    # Joined: the memory added to the profiler's own trace, on its clock.
    joined_path = out / "joined.json"
    j = subprocess.run([str(args.bin / "vramtrace"), "export", "--format", "perfetto", str(trace),
                        "--beside", str(out / "torch_profiler.json"), "-o", str(joined_path)],
                       capture_output=True, text=True)
    print(j.stdout, j.stderr, flush=True)
    check("export --beside ran", j.returncode == 0)
    joined = json.loads(joined_path.read_text())["traceEvents"]
    joined_ours = {ev["name"]: ev["ts"] for ev in joined
                   if ev.get("ph") == "X" and ev.get("cat") == "phase" and ev["name"].startswith("step")}
    joined_offsets = [joined_ours[s] - their_steps[s] for s in common if s in joined_ours]
    figures = {"offsets_us": offsets, "joined_offsets_us": joined_offsets,
               "baseTimeNanoseconds": base,
               "their_first_ts": their_steps.get("step0"), "our_first_ts": our_steps.get("step0"),
               "peak": peak, "truth": truth}
    if offsets:
        spread = max(offsets) - min(offsets)
        check("the offset between the two clocks is the same at every step (within 1 ms)",
              spread < 1000, f"(spread {spread:.1f} us)")
        check("standalone, Unix time: the profiler's ts plus its baseTimeNanoseconds is ours (within 1 ms)",
              base is not None and max(abs(o - base / 1000) for o in offsets) < 1000,
              f"(offsets less the base: {[round(o - (base or 0) / 1000, 1) for o in offsets]} us)")
    check("joined (--beside): each step starts within 1 ms in both, on the profiler's clock",
          len(joined_offsets) >= 5 and max(abs(o) for o in joined_offsets) < 1000,
          f"({[round(o, 1) for o in joined_offsets]} us)")
    print(json.dumps(figures), flush=True)
    print(f"{len(FAILED)} failed", flush=True)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
