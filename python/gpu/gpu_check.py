"""One GPU run that checks replacement mode (vramtrace's allocator as PyTorch's, `mode="replace"`) end to end (see docs/gpu-check.md).

    VRAMTRACE_LIB=carry/libvramtrace_recorder.so PYTHONPATH=python \
        python3 python/gpu/gpu_check.py --bin carry --out "$OUT"

Needs a CUDA GPU and PyTorch; not part of `cargo test` (CI has no GPU).
Checks, each a line PASS/FAIL/SKIP in the report:

1. a small transformer trained for a few steps with PyTorch's allocator and
   with vramtrace's (default and expandable segments), same seed, each in its
   own process: the losses are equal; the peak reserved memory of ours
   equals PyTorch's `max_memory_reserved()`;
2. the trace is complete (`vramtrace info --json`), and `vramtrace summary`,
   `leaks`, `fragmentation`, `report`, `simulate` run where the binary has them;
3. an allocation larger than the card raises (its exception type is reported),
   the process goes on, and its trace is complete with an `oom` event;
4. SIGTERM leaves a complete trace; `python -m vramtrace run` works; a late
   `install()` gives the helpful error;
5. the Rust example on CudaDevice, and the `#[ignore]` GPU unit tests.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpu_report import Report
from small_model import small_transformer, token_batches
from vramtrace.analysis import one_device

HERE = Path(__file__).resolve()
STEPS = 12


# ---------------------------------------------------------------- children


def child_train(mode: str, trace: str, conf: str) -> None:
    import torch

    if mode == "vramtrace":
        import vramtrace

        vramtrace.install(trace, alloc_conf=conf, mode="replace")
    elif conf:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda", 0)
    model, opt = small_transformer(dev)
    batches = token_batches()
    losses = []
    ctx = None
    if mode == "vramtrace":
        import vramtrace

        ctx = vramtrace
    for step in range(STEPS):
        x, y = (t.to(dev) for t in next(batches))
        if ctx:
            ctx.annotate("step", step)
            with ctx.phase("forward"):
                loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            with ctx.phase("backward"):
                loss.backward()
            with ctx.phase("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
        else:
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    torch.cuda.synchronize()
    if mode == "vramtrace":
        stats = ctx.memory_stats(0)
        peak, allocated = stats["reserved_bytes.peak"], stats["allocated_bytes.peak"]
    else:
        peak, allocated = torch.cuda.max_memory_reserved(), torch.cuda.max_memory_allocated()
    print(json.dumps({"losses": [repr(v) for v in losses], "peak_reserved": peak,
                      "peak_allocated": allocated}))


def child_oom(trace: str) -> None:
    import torch

    import vramtrace

    vramtrace.install(trace, mode="replace")
    a = torch.ones(1 << 20, device="cuda")
    total = torch.cuda.get_device_properties(0).total_memory
    result = {"raised": None}
    try:
        t = torch.empty(2 * total, dtype=torch.uint8, device="cuda")
        result["data_ptr"] = t.data_ptr()
        del t
    except Exception as e:  # noqa: BLE001 - reporting whatever comes
        result["raised"] = type(e).__module__ + "." + type(e).__qualname__
        result["is_runtime_error"] = isinstance(e, RuntimeError)
        result["is_torch_oom"] = isinstance(e, torch.OutOfMemoryError)
        result["message"] = str(e).splitlines()[0][:300]
    # The process must go on working after the failure.
    b = (a * 2).sum().item()
    result["after"] = b
    result["stats"] = vramtrace.memory_stats(0)
    print(json.dumps(result))


def child_sigterm(trace: str) -> None:
    import torch

    import vramtrace

    vramtrace.install(trace, mode="replace")
    x = torch.ones(1 << 22, device="cuda")
    with vramtrace.phase("waiting"):
        vramtrace.flush()
        print("ready", flush=True)
        time.sleep(60)
    del x


def child_late(trace: str) -> None:
    import torch

    import vramtrace

    torch.ones(1, device="cuda")
    try:
        vramtrace.install(trace, mode="replace")
    except vramtrace.VramtraceError as e:
        print(json.dumps({"error": str(e)}))
        return
    print(json.dumps({"error": None}))


RUN_SCRIPT = """
import sys, torch
x = torch.randn(1024, 1024, device="cuda")
print("args", sys.argv[1:], float((x @ x).sum().item()) != 0.0)
"""


# ---------------------------------------------------------------- parent


def run(cmd, env=None, timeout=300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, timeout=timeout, capture_output=True, text=True, **kw)


def child(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return run([sys.executable, str(HERE), *args], env=env)


def last_json(out: str):
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in child output:\n" + out[-2000:])


def tail(p: subprocess.CompletedProcess) -> str:
    return (p.stdout[-800:] + p.stderr[-1500:]).strip()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="carry", help="folder with vramtrace, cuda_record, tests")
    ap.add_argument("--out", default=os.environ.get("OUT", "gpu-check-out"))
    ns, rest = ap.parse_known_args()
    if rest and rest[0] == "child":
        kind = rest[1]
        {"train": lambda: child_train(rest[2], rest[3], rest[4] if len(rest) > 4 else ""),
         "oom": lambda: child_oom(rest[2]),
         "sigterm": lambda: child_sigterm(rest[2]),
         "late": lambda: child_late(rest[2])}[kind]()
        return 0

    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp/vramtrace-gpu-check")
    work.mkdir(parents=True, exist_ok=True)
    bindir = Path(ns.bin).resolve()
    vt = bindir / "vramtrace"
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    env["PYTHONPATH"] = str(HERE.parent.parent) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("VRAMTRACE_LIB", str(bindir / "libvramtrace_recorder.so"))
    rep = Report()

    import torch

    smi = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
               "--format=csv,noheader"]).stdout.strip()
    header = [
        f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
        f"GPU (nvidia-smi: name, driver, memory): {smi}",
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, Python {sys.version.split()[0]}",
        "",
        "| result | check | detail |",
        "| --- | --- | --- |",
    ]
    print("\n".join(header), flush=True)

    def info(trace: Path) -> dict:
        p = run([str(vt), "info", "--json", str(trace)])
        if p.returncode != 0:
            raise RuntimeError(f"vramtrace info failed: {tail(p)}")
        return json.loads(p.stdout)

    # 1. training: native vs vramtrace, same seed.
    results = {}
    for label, mode, conf in [("native", "native", ""), ("vramtrace", "vramtrace", ""),
                              ("native-expandable", "native", "expandable_segments:True"),
                              ("vramtrace-expandable", "vramtrace", "expandable_segments:True")]:
        trace = work / f"train-{label}.vtrace"
        t0 = time.time()
        p = child(["child", "train", mode, str(trace), conf], env)
        if p.returncode != 0:
            rep.add("FAIL", f"train ({label})", tail(p))
            continue
        results[label] = last_json(p.stdout)
        results[label]["seconds"] = round(time.time() - t0, 1)
    for suffix in ["", "-expandable"]:
        a, b = results.get("native" + suffix), results.get("vramtrace" + suffix)
        if not (a and b):
            continue
        rep.check(a["losses"] == b["losses"], f"losses equal{suffix or ' (default)'}",
                  f"{STEPS} steps; first {a['losses'][0]}, last native {a['losses'][-1]} / "
                  f"vramtrace {b['losses'][-1]}")
        rep.check(a["peak_reserved"] == b["peak_reserved"],
                  f"peak reserved equals PyTorch's{suffix}",
                  f"PyTorch {a['peak_reserved']} B, vramtrace {b['peak_reserved']} B; "
                  f"peak allocated {a['peak_allocated']} / {b['peak_allocated']} B")
    trace = work / "train-vramtrace.vtrace"
    commands = run([str(vt), "--help"]).stdout
    if trace.exists():
        try:
            i = info(trace)
            rep.check(i.get("status") == "complete", "training trace complete",
                      f"status {i.get('status')}, counts {json.dumps(i.get('counts'))}")
        except Exception as e:  # noqa: BLE001
            rep.add("FAIL", "vramtrace info on the training trace", str(e))
        for cmd in ["summary", "leaks", "fragmentation", "report", "simulate"]:
            if f"\n  {cmd} " not in commands:
                rep.add("SKIP", f"vramtrace {cmd}", "not in this build of the CLI")
                continue
            extra = ["-o", str(work / "report.html")] if cmd == "report" else []
            p = run([str(vt), cmd, str(trace), *extra])
            detail = " / ".join(p.stdout.strip().splitlines()[:6])[:400]
            rep.check(p.returncode == 0, f"vramtrace {cmd}", detail or tail(p)[:400])
            (work / f"{cmd}.txt").write_text(p.stdout + p.stderr)
            if cmd == "simulate" and p.returncode == 0:
                # The text output is in human units: compare bytes from --json.
                peak = results.get("vramtrace", {}).get("peak_reserved")
                sim = one_device(json.loads(run([str(vt), cmd, str(trace), "--json"]).stdout))
                rep.check(sim.get("peak_reserved_bytes") == peak,
                          "simulate reproduces the reserved peak",
                          f"PyTorch-side peak {peak} B, simulated {sim.get('peak_reserved_bytes')} B")

    # 3. OOM.
    trace = work / "oom.vtrace"
    p = child(["child", "oom", str(trace)], env)
    if p.returncode != 0:
        rep.add("FAIL", "OOM child", tail(p))
    else:
        r = last_json(p.stdout)
        rep.check(r["raised"] is not None and r.get("is_runtime_error", False),
                  "OOM raises an exception", f"{r['raised']}: {r.get('message')}")
        rep.add("INFO", "OOM exception is torch.OutOfMemoryError",
                str(r.get("is_torch_oom")))
        rep.check(r["after"] == float(2 * (1 << 20)), "process works on after the OOM",
                  f"stats {r['stats']}")
        try:
            i = info(trace)
            n = (i.get("counts") or {}).get("oom", 0)
            rep.check(i.get("status") == "complete" and n >= 1, "OOM trace complete with oom event",
                      f"status {i.get('status')}, oom events {n}")
        except Exception as e:  # noqa: BLE001
            rep.add("FAIL", "vramtrace info on the OOM trace", str(e))

    # 4a. SIGTERM.
    trace = work / "sigterm.vtrace"
    proc = subprocess.Popen([sys.executable, str(HERE), "child", "sigterm", str(trace)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if line.strip() == "ready":
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
    try:
        i = info(trace)
        rep.check(proc.returncode == -signal.SIGTERM and i.get("status") == "complete",
                  "SIGTERM: dies of the signal, trace complete",
                  f"returncode {proc.returncode}, status {i.get('status')}, "
                  f"counts {json.dumps(i.get('counts'))}")
    except Exception as e:  # noqa: BLE001
        rep.add("FAIL", "SIGTERM trace", f"{e}; returncode {proc.returncode}; "
                f"{proc.stderr.read()[-500:] if proc.stderr else ''}")

    # 4b. python -m vramtrace run.
    script = work / "script.py"
    script.write_text(RUN_SCRIPT)
    trace = work / "run-%p.vtrace"
    p = run([sys.executable, "-m", "vramtrace", "run", "--mode", "replace", "--out", str(trace), str(script), "a", "b"],
            env=env)
    made = sorted(work.glob("run-*.vtrace"))
    ok = p.returncode == 0 and "args ['a', 'b'] True" in p.stdout and len(made) == 1
    detail = p.stdout.strip()[-200:]
    if ok:
        i = info(made[0])
        ok = i.get("status") == "complete"
        detail += f"; {made[0].name} status {i.get('status')}"
    rep.check(ok, "python -m vramtrace run", detail if ok else tail(p))

    # 4c. late install.
    p = child(["child", "late", str(work / "late.vtrace")], env)
    r = last_json(p.stdout) if p.returncode == 0 else {"error": None}
    rep.check(bool(r["error"]) and "too late" in r["error"], "late install() explains itself",
              (r["error"] or tail(p))[:200])

    # 5. Rust example and GPU unit tests.
    example = bindir / "cuda_record"
    for conf in ["", "expandable_segments:True"]:
        trace = work / f"rust{'-expandable' if conf else ''}.vtrace"
        if not example.exists():
            rep.add("SKIP", "Rust example", "no cuda_record binary carried")
            break
        p = run([str(example), str(trace), conf])
        ok = p.returncode == 0
        detail = " / ".join(p.stdout.strip().splitlines())
        if ok:
            i = info(trace)
            ok = i.get("status") == "complete" and (i.get("counts") or {}).get("oom", 0) == 1
            detail += f"; status {i.get('status')}, counts {json.dumps(i.get('counts'))}"
        rep.check(ok, f"Rust CudaDevice example {conf or '(default)'}", detail if ok else tail(p))
    tests = sorted(bindir.glob("recorder-tests*"))
    if tests:
        p = run([str(tests[0]), "--ignored", "--test-threads=1", "device::cuda"], timeout=300)
        summary = [ln for ln in p.stdout.splitlines() if ln.startswith(("test ", "test result"))]
        rep.check(p.returncode == 0, "#[ignore] GPU unit tests", " / ".join(summary)[:500])
    else:
        rep.add("SKIP", "#[ignore] GPU unit tests", "no test binary carried")

    for label, r in results.items():
        rep.add("INFO", f"train {label}", f"{r['seconds']} s, peak reserved {r['peak_reserved']} B")
    text = "\n".join(header + rep.lines) + f"\n\n{rep.failed} failed\n"
    (out / "gpu-check.md").write_text(text)
    for name in ["train-vramtrace.vtrace", "oom.vtrace", "summary.txt", "leaks.txt"]:
        src = work / name
        if src.exists():
            (out / name).write_bytes(src.read_bytes())
    print(f"\n{rep.failed} failed")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
