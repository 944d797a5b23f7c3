"""Bounded recording checked on a GPU (issue #33, part 5; docs/gpu-check.md).

    PYTHONPATH=python VRAMTRACE_LIB=carry/libvramtrace_recorder.so \\
        python3 python/gpu/bounded_check.py --bin carry --out "$OUT/bounded" \\
        --seconds 480

Needs a CUDA GPU and PyTorch; not part of the test suite (CI has no GPU).

A synthetic inference server (an 8-layer fp16 transformer encoder, requests
of random batch and length, the last outputs kept) runs for `--seconds`
under `python -m vramtrace run --keep-last 50MiB`. Checked:

- the ring folder, sampled every 0.2 s, never holds more than 50 MiB, and
  the run records several times that in all;
- three checkpoints: at a quiet moment the program resets PyTorch's peak
  (`reset_peak_memory_stats`) and begins a phase, serves requests (one of
  them large) for 20 s, and dumps the kept window with `vramtrace.dump()`.
  The dump, analyzed from that phase's start (`--from PHASE`), has the
  allocated peak `max_memory_allocated()` gives, to the byte; its end
  state is `memory_allocated()` and `memory_reserved()` at the dump; and
  it starts mid-run (its initial state holds the weights, allocated
  minutes before);
- `SIGUSR2` writes a dump beside the trace;
- the first out-of-memory error writes `serve-oom.vtrace`, whose OOM
  names the request and whose allocated bytes at the OOM are
  `memory_allocated()`;
- at exit the ring is joined into the trace and removed, and the trace is
  within the bound.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

import gpu_report
from gpu_report import Report, tail, vt

HERE = Path(__file__).resolve()
MIB = 1 << 20
BOUND = 50 * MIB
CHECKPOINT_SECONDS = 20
HUGE = 1 << 44  # 16 TiB: no card has it


def ring_bytes(folder: str) -> tuple:
    """The bytes in the ring folder, and the highest part number in it."""
    total, last = 0, -1
    try:
        with os.scandir(folder) as entries:
            for e in entries:
                try:
                    total += e.stat().st_size
                except FileNotFoundError:
                    continue  # deleted as the ring moved on
                if e.name.startswith("part-"):
                    last = max(last, int(e.name[5:11]))
    except FileNotFoundError:
        pass
    return total, last


def child(seconds: float, trace: str, out_dir: str) -> None:
    import torch

    import vramtrace

    folder = trace + ".ring"
    largest = [0]
    parts = [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            size, last = ring_bytes(folder)
            largest[0] = max(largest[0], size)
            parts[0] = max(parts[0], last + 1)
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    rng = random.Random(33)
    layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096,
                                             batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=8).cuda().half().eval()
    kept = collections.deque(maxlen=6)
    served = [0]

    def request(batch=None, length=None):
        b = batch or rng.randint(1, 8)
        s = length or rng.choice([64, 128, 256, 512])
        x = torch.randn(b, s, 1024, device="cuda", dtype=torch.half)
        with torch.inference_mode():
            y = model(x)
        kept.append(y[:, -1].clone())
        del x, y
        torch.cuda.synchronize()
        served[0] += 1

    began = time.monotonic()
    checkpoints = []
    signalled = None
    starts = [seconds * f for f in (0.35, 0.6, 0.85)]
    while time.monotonic() - began < seconds:
        elapsed = time.monotonic() - began
        if starts and elapsed >= starts[0]:
            starts.pop(0)
            n = len(checkpoints) + 1
            name = f"checkpoint{n}"
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            with vramtrace.phase(name):
                until = time.monotonic() + CHECKPOINT_SECONDS
                big_at = time.monotonic() + CHECKPOINT_SECONDS / 2
                big_done = False
                while time.monotonic() < until:
                    if not big_done and time.monotonic() >= big_at:
                        request(batch=16, length=1024)
                        big_done = True
                    else:
                        request()
                torch.cuda.synchronize()
                expected = torch.cuda.max_memory_allocated()
                allocated = torch.cuda.memory_allocated()
                reserved = torch.cuda.memory_reserved()
                path = os.path.join(out_dir, f"{name}.vtrace")
                t0 = time.monotonic()
                written = vramtrace.dump(path)
                took = time.monotonic() - t0
            checkpoints.append({"name": name, "path": path, "written": written, "expected": expected,
                                    "allocated": allocated, "reserved": reserved,
                                    "dump_seconds": took})
            continue
        if signalled is None and elapsed >= seconds * 0.2:
            os.kill(os.getpid(), signal.SIGUSR2)
            signalled = elapsed
        request()
    torch.cuda.synchronize()
    before_oom = torch.cuda.memory_allocated()
    try:
        torch.empty(HUGE, dtype=torch.uint8, device="cuda")
        oom = False
    except torch.OutOfMemoryError:
        oom = True
    vramtrace.flush()
    oom_path = trace[: -len(".vtrace")] + "-oom.vtrace"
    deadline = time.monotonic() + 60
    while not os.path.exists(oom_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    watcher.join()
    print("RESULT " + json.dumps({
        "served": served[0], "seconds": time.monotonic() - began, "largest_ring": largest[0],
        "parts": parts[0],
        "checkpoints": checkpoints, "oom": oom, "before_oom": before_oom, "oom_path": oom_path,
        "oom_dump_written": os.path.exists(oom_path)}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("child")
    c.add_argument("--seconds", type=float, required=True)
    c.add_argument("--trace", required=True)
    c.add_argument("--dir", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=480)
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        ns = c.parse_args(sys.argv[2:])
        child(ns.seconds, ns.trace, ns.dir)
        return 0
    ns = ap.parse_args()
    import torch

    binary = Path(ns.bin).resolve() / "vramtrace"
    out = Path(ns.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    trace = str(out / "serve.vtrace")
    report = Report()
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "vramtrace", "run", "--keep-last", "50MiB", "--out", trace,
           str(HERE), "child", "--seconds", str(ns.seconds), "--trace", trace,
           "--dir", str(out)]
    p = gpu_report.run(cmd, env=env, timeout=int(ns.seconds) + 300)
    found = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            found = json.loads(line[7:])
    (out / "child.log").write_text(p.stdout[-20000:] + "\n--- stderr ---\n" + p.stderr[-20000:])
    if not report.check(p.returncode == 0 and found is not None, "the server ran recorded",
                        tail(p) if found is None else
                        f"{found['served']:,} requests in {found['seconds']:.0f} s"):
        return report.finish("bounded_check.py", "", out / "table.md")
    report.check(0 < found["largest_ring"] <= BOUND, "the ring stays within 50 MiB",
                 f"largest {found['largest_ring']:,} B (sampled every 0.2 s) of {BOUND:,} B")
    # Parts are ended at an eighth of the bound: the numbering tells how
    # much the run recorded in all.
    report.check(found["parts"] > 2 * 8, "the run recorded several times the bound",
                 f"{found['parts']} parts of about {BOUND // 8 // MIB} MiB")
    for cp in found["checkpoints"]:
        name = cp["name"]
        report.check(cp["written"] == [cp["path"]], f"{name}: vramtrace.dump() wrote the window",
                     f"{cp['written']} in {cp['dump_seconds']:.2f} s")
        whole = vt(binary, "summary", cp["path"])
        window = vt(binary, "summary", cp["path"], "--from", name)
        info = vt(binary, "info", cp["path"])
        report.check(window["peak_allocated_bytes"] == cp["expected"],
                     f"{name}: peak from the phase's start = max_memory_allocated() (exact)",
                     f"{window['peak_allocated_bytes']:,} vs {cp['expected']:,}")
        report.check(whole["end"]["allocated_bytes"] == cp["allocated"]
                     and whole["end"]["reserved_bytes"] == cp["reserved"],
                     f"{name}: end state = memory_allocated(), memory_reserved() (exact)",
                     f"{whole['end']['allocated_bytes']:,} / {whole['end']['reserved_bytes']:,} vs "
                     f"{cp['allocated']:,} / {cp['reserved']:,}")
        report.check(info["initial_segments"] > 0 and whole["first_time_ns"] > 0
                     and info["bytes"] <= BOUND,
                     f"{name}: the window starts mid-run, from the allocator's state",
                     f"{info['initial_segments']} segments at its start, "
                     f"{whole['first_time_ns'] / 1e9:.1f} s into the run, "
                     f"{whole['duration_ns'] / 1e9:.1f} s long, {info['bytes']:,} B, "
                     f"{info['events']:,} events")
    signalled = sorted(out.glob("serve-dump-*.vtrace"))
    ok = bool(signalled)
    detail = ", ".join(f.name for f in signalled)
    if ok:
        s = vt(binary, "summary", str(signalled[0]))
        detail += f" ({s['events']:,} events, peak {s['peak_allocated_bytes']:,} B)"
    report.check(ok, "SIGUSR2 wrote a dump beside the trace", detail)
    ok = found["oom"] and found["oom_dump_written"]
    detail = ""
    if ok:
        s = vt(binary, "summary", found["oom_path"])
        o = s["ooms"][0] if s["ooms"] else {}
        ok = (s["oom_count"] == 1 and o.get("requested_bytes") == HUGE
              and o.get("allocated_bytes") == found["before_oom"])
        detail = (f"OOM of {o.get('requested_bytes', 0):,} B asked with "
                  f"{o.get('allocated_bytes', 0):,} B allocated (memory_allocated() "
                  f"{found['before_oom']:,})")
    report.check(ok, "the first OOM wrote serve-oom.vtrace, exact at the OOM", detail)
    final = Path(trace)
    ok = final.exists() and not Path(trace + ".ring").exists()
    detail = ""
    if ok:
        info = vt(binary, "info", trace)
        ok = info["bytes"] <= BOUND
        detail = (f"{info['bytes']:,} B, {info['events']:,} events, "
                  f"{info['duration_ns'] / 1e9:.0f} s kept of {found['seconds']:.0f} s")
    report.check(ok, "at exit the ring is joined into the trace and removed", detail)
    setup = (f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
             f"{ns.seconds:.0f} s of serving")
    return report.finish("bounded_check.py", setup, out / "table.md")


if __name__ == "__main__":
    sys.exit(main())
