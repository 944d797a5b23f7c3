"""One GPU run that checks observer mode end to end (see docs/gpu-check.md).

    PYTHONPATH=python VRAMTRACE_LIB=carry/libvramtrace_recorder.so \\
        python3 python/gpu/observer_check.py --bin carry --out "$OUT"

Needs a CUDA GPU, PyTorch, torchvision and transformers; not part of the
test suite (CI has no GPU). Each check is a line PASS/FAIL/SKIP of a table,
written to OUT/observer-check.md too:

1. ordinary PyTorch features that replacement mode breaks (memory
   statistics, empty_cache, torch.compile with CUDA graphs, graph capture,
   snapshots, OutOfMemoryError, record_stream) behave the same under
   `python -m vramtrace run` as without it;
2. a DataLoader with workers and pinned memory, and ResNet-50 with AMP, run
   under it and give the same losses;
3. Hugging Face GPT-2 (12 layers, batch 8 x 512, bf16 autocast, AdamW, 30
   steps): the trace's allocated and reserved peaks equal
   `torch.cuda.max_memory_allocated()` / `max_memory_reserved()` of the same
   run to the byte, its event counts per action equal those of torch's own
   memory history in the same process, `vramtrace simulate` is exact, its
   sites name Python lines and backward nodes, and it has an `iter` phase
   per step (and one from the last step to the stop);
4. the same with expandable segments, on a smaller model;
5. recording started mid-run (`vramtrace.start()` with memory in use) and
   stopped: the trace's initial state and peaks are exact; the trace of a
   second start/stop is complete too;
6. `torchrun` with DistributedDataParallel over NCCL, one rank per GPU of
   the machine: each rank writes its own trace, with torch's peaks;
7. a recorded program killed with SIGKILL: its trace is read back
   (unfinished, not lost) and holds every allocation the program had made
   a second before the kill (the recorder's crash-safety bound).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import gpu_report
from gpu_report import Report, run, tail, vt

HERE = Path(__file__).resolve()
GPT2_STEPS = 30


def result(obj) -> None:
    print("RESULT " + json.dumps(obj), flush=True)


def under_vramtrace() -> bool:
    return "vramtrace" in sys.modules and sys.modules["vramtrace"].installed()


# ---------------------------------------------------------------- children


def child_cases() -> None:
    import torch

    out = {}

    def case(name, fn):
        try:
            fn()
            out[name] = "ok"
        except Exception as e:  # noqa: BLE001 - the case's outcome is the point
            out[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"

    x = torch.randn(1024, 1024, device="cuda")
    case("memory statistics", lambda: (
        torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated(),
        torch.cuda.memory_reserved(), torch.cuda.memory_stats(), torch.cuda.memory_summary()))

    def empty_cache():
        y = torch.randn(4096, 4096, device="cuda")
        del y
        torch.cuda.empty_cache()
        assert torch.cuda.memory_reserved() < 64 << 20

    case("empty_cache then memory_reserved", empty_cache)

    def compiled():
        m = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 256)).cuda()
        c = torch.compile(m, mode="reduce-overhead")
        inp = torch.randn(64, 256, device="cuda")
        for _ in range(5):
            y = c(inp)
        assert torch.allclose(y, m(inp), atol=1e-4)

    case("torch.compile(mode='reduce-overhead')", compiled)

    def graph():
        a = torch.randn(4096, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                b = a * 2 + 1
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            b = a * 2 + 1
        a.add_(1)
        g.replay()
        torch.cuda.synchronize()
        assert torch.allclose(b, a * 2 + 1)

    case("manual torch.cuda.graph capture", graph)
    case("torch.cuda.memory._snapshot()", lambda: torch.cuda.memory._snapshot())

    def oom():
        try:
            torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError:
            return
        raise AssertionError("no torch.OutOfMemoryError")

    case("out of memory raises torch.OutOfMemoryError", oom)

    def record_stream():
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            t = torch.empty(1 << 20, device="cuda")
        t.record_stream(torch.cuda.current_stream())
        before = torch.cuda.memory_stats()["active_bytes.all.current"]
        del t
        # Still in use on the other stream until its work is done.
        assert torch.cuda.memory_stats()["active_bytes.all.current"] == before
        torch.cuda.synchronize()

    case("tensor.record_stream(s)", record_stream)
    del x
    result(out)


def child_dataloader() -> None:
    import torch

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(1024, 3, 32, 32),
                                          torch.randint(0, 10, (1024,)))
    loader = torch.utils.data.DataLoader(data, batch_size=64, num_workers=2, pin_memory=True)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(16 * 30 * 30, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses = []
    for x, y in loader:
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(round(loss.item(), 4))
    result({"batches": len(losses), "losses": losses})


def child_resnet() -> None:
    import torch
    import torchvision

    torch.manual_seed(0)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    model = torchvision.models.resnet50(weights=None).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda")
    gen = torch.Generator(device="cpu").manual_seed(1)
    losses = []
    for _ in range(5):
        x = torch.randn(32, 3, 224, 224, generator=gen).cuda()
        y = torch.randint(0, 1000, (32,), generator=gen).cuda()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        losses.append(round(loss.item(), 3))
    result({"losses": losses, "max_allocated": torch.cuda.max_memory_allocated(),
            "max_reserved": torch.cuda.max_memory_reserved()})


def child_gpt2(layers: int, history: bool) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    if history:
        # No context: the counts are the point, and gathering stacks would
        # only slow the run.
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=4_000_000)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=layers, n_embd=768, n_head=12)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cpu").manual_seed(1)
    times, losses = [], []
    for _ in range(GPT2_STEPS):
        ids = torch.randint(0, 50257, (8, 512), generator=gen).cuda()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    out = {"max_allocated": torch.cuda.max_memory_allocated(),
           "max_reserved": torch.cuda.max_memory_reserved(),
           "step_ms": sorted(times)[len(times) // 2] * 1e3, "last_loss": losses[-1]}
    if history:
        snap = torch.cuda.memory._snapshot()
        out["torch_counts"] = dict(collections.Counter(e["action"] for e in snap["device_traces"][0]))
    if under_vramtrace():
        import vramtrace

        vramtrace.stop()
    result(out)


def child_ddp() -> None:
    """One rank of a DistributedDataParallel run (torchrun starts it)."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(rank)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 1024)).cuda(), device_ids=[rank])
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(5):
        loss = model(torch.randn(256, 1024, device="cuda")).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    stats = {"rank": rank, "max_allocated": torch.cuda.max_memory_allocated(),
             "max_reserved": torch.cuda.max_memory_reserved(), "loss": loss.item()}
    if under_vramtrace():
        import vramtrace

        vramtrace.stop()
    dist.destroy_process_group()
    result(stats)


def child_steady() -> None:
    """Allocates and frees 1 MiB tensors until killed, saying every few
    milliseconds how many it has made."""
    import torch

    torch.cuda.init()
    made, said = 0, time.monotonic()
    while True:
        t = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
        del t
        made += 1
        if time.monotonic() - said > 0.002:
            torch.cuda.synchronize()
            print(f"MADE {made}", flush=True)
            said = time.monotonic()


def check_sigkill(rep: Report, binary: Path, out: Path, env: dict) -> None:
    """Kills a recorded program 4 s in and checks that its trace holds
    what the program reported having made a second before the kill."""
    trace = str(out / "killed.vtrace")
    proc = subprocess.Popen([sys.executable, "-m", "vramtrace", "run", "--out", trace,
                             str(HERE), "child", "steady"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    reports = []  # (time read, count)

    def read() -> None:
        for line in proc.stdout:
            if line.startswith("MADE "):
                reports.append((time.monotonic(), int(line[5:])))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not reports and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)  # the first report comes once CUDA and the shim are up
    time.sleep(4)
    killed_at = time.monotonic()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    reader.join(5)
    before = [n for t, n in reports if t <= killed_at - 1.0]
    if not rep.check(bool(before), "SIGKILL: the program ran recorded",
                     f"{len(reports)} reports, exit {proc.returncode}"):
        return
    info = vt(binary, "info", trace)
    allocs = info.get("counts", {}).get("alloc", 0)
    last = max(n for _, n in reports)
    rep.check(info.get("status") in ("unfinished", "truncated") and allocs >= before[-1],
              "SIGKILL: the trace is read back and holds everything made 1 s before the kill",
              f"status {info.get('status')}; {allocs:,} allocations in the trace, "
              f"{before[-1]:,} made by 1 s before the kill, {last:,} by the kill")


def child_midrun(trace: str) -> None:
    import torch

    import vramtrace

    keep = [torch.randn(n, device="cuda") for n in (1000, 300_000, 5_000_000, 20_000_000)]
    scratch = torch.randn(8_000_000, device="cuda")
    del scratch  # cached free memory at start
    torch.cuda.reset_peak_memory_stats()
    start_allocated = torch.cuda.memory_allocated()
    assert vramtrace.start(trace, strict=True)
    with vramtrace.phase("work"):
        a = torch.randn(12_000_000, device="cuda")
        b = a * 2
        del keep[1]
        c = torch.randn(3_000_000, device="cuda")
        del a
    peak = torch.cuda.max_memory_allocated()
    reserved = torch.cuda.memory_reserved()
    vramtrace.stop()
    del b, c
    # A second recording in the same process.
    assert vramtrace.start(trace + ".second", strict=True)
    d = torch.randn(1_000_000, device="cuda")
    del d
    vramtrace.stop()
    result({"start_allocated": start_allocated, "max_allocated": peak,
            "reserved_at_stop": reserved})


# ---------------------------------------------------------------- parent


def child(args: list, env: dict, trace: str | None = None, extra=()) -> tuple:
    """This script's child workload, natively or recorded (gpu_report.child)."""
    return gpu_report.child(HERE, args, env, trace, extra, timeout=600)


def check_gpt2(rep: Report, binary: Path, out: Path, env: dict, layers: int, label: str,
               conf: str = "") -> None:
    env = dict(env)
    if conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    trace = str(out / f"gpt2-{label}.vtrace")
    res, p = child(["gpt2", str(layers), "history"], env, trace)
    if not rep.check(res is not None and p.returncode == 0, f"GPT-2 {label}: runs recorded",
                     f"step {res['step_ms']:.1f} ms" if res else tail(p)):
        return
    summary = vt(binary, "summary", trace)
    rep.check(summary["peak_allocated_bytes"] == res["max_allocated"],
              f"GPT-2 {label}: trace's allocated peak = max_memory_allocated()",
              f"{summary['peak_allocated_bytes']:,} vs {res['max_allocated']:,}")
    rep.check(summary["peak_reserved_bytes"] == res["max_reserved"],
              f"GPT-2 {label}: trace's reserved peak = max_memory_reserved()",
              f"{summary['peak_reserved_bytes']:,} vs {res['max_reserved']:,}")
    ours = vt(binary, "info", trace)["counts"]
    theirs = res["torch_counts"]
    kinds = ["alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
             "segment_map", "segment_unmap", "oom"]
    diff = {k: (ours.get(k, 0), theirs.get(k, 0)) for k in kinds
            if ours.get(k, 0) != theirs.get(k, 0)}
    rep.check(not diff, f"GPT-2 {label}: counts per action = torch's memory history",
              json.dumps({k: ours.get(k, 0) for k in kinds if ours.get(k, 0)})
              + (f"; differ (ours, torch's): {diff}" if diff else ""))
    sim = vt(binary, "simulate", trace)
    rep.check(bool(sim["fidelity"]["exact"]), f"GPT-2 {label}: vramtrace simulate is exact",
              json.dumps(sim["fidelity"])[:300])
    names = collections.Counter(p["name"] for p in vt(binary, "timeline", trace)["phases"])
    # iter0 runs from the start to the first optimizer step, iterN from step
    # N to step N+1, and the last from the last step to the stop: one more
    # than the steps (docs/recording.md).
    iters = sum(n for k, n in names.items() if re.fullmatch(r"iter\d+", k))
    rep.check(iters == GPT2_STEPS + 1 and names["Optimizer.step#AdamW.step"] == GPT2_STEPS,
              f"GPT-2 {label}: an `iterN` phase per step, and record_function ranges",
              f"{iters} iterN, " + ", ".join(f"{n} {k}" for k, n in names.most_common(3)))
    sites = summary.get("top_sites_at_peak", [])
    described = [s for s in sites if s.get("frames")]
    rep.check(bool(described), f"GPT-2 {label}: sites at the peak have stacks",
              "; ".join(f"{s['bytes'] >> 20} MiB {s['site'][:90]}" for s in sites[:6]))
    unnamed = sum(s["share"] for s in sites if not s.get("frames"))
    rep.add("INFO", f"GPT-2 {label}: share of the peak without a stack", f"{unnamed:.1%}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="carry", help="folder with the vramtrace binary")
    ap.add_argument("--out", default=os.environ.get("OUT", "observer-check-out"))
    ns, rest = ap.parse_known_args()
    if rest and rest[0] == "child":
        kind = rest[1]
        if kind == "cases":
            child_cases()
        elif kind == "dataloader":
            child_dataloader()
        elif kind == "resnet":
            child_resnet()
        elif kind == "gpt2":
            child_gpt2(int(rest[2]), len(rest) > 3 and rest[3] == "history")
        elif kind == "midrun":
            child_midrun(rest[2])
        elif kind == "ddp":
            child_ddp()
        elif kind == "steady":
            child_steady()
        return 0

    import torch

    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    binary = Path(ns.bin).resolve() / "vramtrace"
    env = dict(os.environ)
    env["VRAMTRACE_CACHE"] = str(out / "cache")
    rep = Report()
    started = time.time()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
          f"python {sys.version.split()[0]}", flush=True)
    print("| result | check | detail |\n|---|---|---|", flush=True)

    # 1. the cases replacement mode breaks
    native, p0 = child(["cases"], env)
    observed, p1 = child(["cases"], env, str(out / "cases.vtrace"))
    if native is None or observed is None:
        rep.add("FAIL", "feature cases ran", tail(p0 if native is None else p1))
    else:
        for name, outcome in native.items():
            rep.check(outcome == "ok" and observed.get(name) == outcome,
                      f"under `python -m vramtrace run`: {name}",
                      f"native {outcome}, observed {observed.get(name)}")
        info = vt(binary, "info", str(out / "cases.vtrace"))
        rep.check(info.get("status") == "complete",
                  "feature cases: the trace is complete", json.dumps(info.get("counts"))[:200])
    build = p1.stderr.count("building the PyTorch observer shim")
    rep.add("INFO", "shim built on first use", f"{build} build message(s) in the first run")

    # 2. DataLoader and ResNet-50
    for kind in ("dataloader", "resnet"):
        a, pa = child([kind], env)
        b, pb = child([kind], env, str(out / f"{kind}.vtrace"))
        same = a is not None and b is not None and a["losses"] == b["losses"]
        rep.check(same, f"{kind}: same losses natively and recorded",
                  f"{(a or {}).get('losses')} / {(b or {}).get('losses')}"
                  if a and b else tail(pa if a is None else pb))
        if kind == "resnet" and same:
            s = vt(binary, "summary", str(out / "resnet.vtrace"))
            rep.check(s["peak_allocated_bytes"] == b["max_allocated"]
                      and s["peak_reserved_bytes"] == b["max_reserved"],
                      "resnet: trace's peaks = torch's max_memory_allocated/reserved",
                      f"{s['peak_allocated_bytes']:,}/{s['peak_reserved_bytes']:,} vs "
                      f"{b['max_allocated']:,}/{b['max_reserved']:,}")

    # 3, 4. GPT-2
    check_gpt2(rep, binary, out, env, 12, "12 layers")
    check_gpt2(rep, binary, out, env, 4, "4 layers, expandable segments",
               conf="expandable_segments:True")

    # 5. mid-run start
    trace = str(out / "midrun.vtrace")
    res, p = child(["midrun", trace], env)
    if rep.check(res is not None, "mid-run start and stop", "" if res else tail(p)):
        s = vt(binary, "summary", trace)
        info = vt(binary, "info", trace)
        rep.check(s["peak_allocated_bytes"] == res["max_allocated"],
                  "mid-run: trace's allocated peak = max_memory_allocated() since start",
                  f"{s['peak_allocated_bytes']:,} vs {res['max_allocated']:,}")
        rep.check(info.get("initial_segments", 0) > 0 and info.get("status") == "complete",
                  "mid-run: the trace starts from the allocator's state",
                  f"{info.get('initial_segments')} initial segments, {info.get('status')}")
        second = vt(binary, "info", trace + ".second")
        rep.check(second.get("counts", {}).get("alloc", 0) >= 1,
                  "a second start/stop writes a complete trace", json.dumps(second.get("counts")))

    # 6. torchrun, one rank per GPU (as many as the machine has), NCCL.
    ranks = torch.cuda.device_count()
    pattern = str(out / "ddp-rank%r.vtrace")
    p = run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
             "--no-python", sys.executable, "-m", "vramtrace", "run", "--out", pattern,
             str(HERE), "child", "ddp"], env=env)
    found = [json.loads(l[7:]) for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if rep.check(p.returncode == 0 and len(found) == ranks,
                 f"torchrun, DDP over NCCL, {ranks} rank(s), recorded", "" if found else tail(p)):
        for r in found:
            trace = pattern.replace("%r", str(r["rank"]))
            s = vt(binary, "summary", trace)
            rep.check(s["peak_allocated_bytes"] == r["max_allocated"]
                      and s["peak_reserved_bytes"] == r["max_reserved"],
                      f"rank {r['rank']}: its own trace file, peaks = torch's",
                      f"{Path(trace).name}: {s['peak_allocated_bytes']:,}/{s['peak_reserved_bytes']:,}"
                      f" vs {r['max_allocated']:,}/{r['max_reserved']:,}")

    # 7. SIGKILL while recording.
    check_sigkill(rep, binary, out, env)

    rep.add("INFO", "total time", f"{time.time() - started:.0f} s")
    return rep.finish("observer_check.py", f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}",
                      out / "observer-check.md")


if __name__ == "__main__":
    sys.exit(main())
