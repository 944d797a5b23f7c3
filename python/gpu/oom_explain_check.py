"""An out-of-memory error that explains itself, checked on a GPU (issue #28,
see docs/gpu-check.md).

    PYTHONPATH=python VRAMTRACE_LIB=carry/libvramtrace_recorder.so \\
        python3 python/gpu/oom_explain_check.py --bin carry --out "$OUT/oom"

Needs a CUDA GPU, PyTorch and transformers; not part of the test suite (CI
has no GPU). Each program runs unmodified under `python -m vramtrace run`;
the analyzer's answers are compared with what the card did:

a. the fragmenting program of the issue: the allocator capped at 12 GiB
   with `set_per_process_memory_fraction`, 1,434 tensors of 6 MiB made, two
   of every three freed, then 5.4 GiB asked for; with PyTorch's default
   settings and with `expandable_segments:True`;
b. a 6-layer GPT-2 (AdamW, 8 x 512, fp32) under a cap 256 MiB below the
   smallest one `simulate --min-capacity` finds for it (so it runs out of
   memory);
c. the same GPT-2 under a cap it fits in.

For each: the OOM's line in `summary`, `simulate` and the report; the
recorded limit; a waterfall at the OOM (and at the peak) that sums to the
limit; the card's memory outside the allocator against `nvidia-smi`; the
failing loop index against the iteration named; and every fix `simulate`
offers, rerun on the card with the fix applied, where it must not run out
of memory (fixes the script cannot apply to the program are SKIP, with the
reason).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import gpu_report
from gpu_report import Report, tail, vt

HERE = Path(__file__).resolve()
MIB = 1 << 20
GIB = 1 << 30
FRAG_CAP = 12 * GIB
FRAG_TENSORS = 1434
FRAG_BIG = int(5.4 * GIB)
GPT2_STEPS = 3


def result(obj) -> None:
    print("RESULT " + json.dumps(obj), flush=True)


def smi(torch) -> dict:
    """The card's memory as nvidia-smi reports it (MiB, given in bytes):
    used, and reserved by the driver (not counted as used)."""
    index = torch.cuda.current_device()
    uuid = str(torch.cuda.get_device_properties(index).uuid)
    out = subprocess.run(["nvidia-smi", "--query-gpu=uuid,memory.used,memory.reserved,memory.total",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    lines = [[x.strip() for x in line.split(",")] for line in out.splitlines() if line.strip()]
    mine = [row for row in lines if uuid in row[0]] or (lines if len(lines) == 1 else [])
    if not mine:
        return {}
    row = mine[0]
    num = lambda v: int(v) * MIB if v.isdigit() else None  # noqa: E731
    return {"used": num(row[1]), "reserved": num(row[2]), "total": num(row[3])}


def card(torch) -> dict:
    """The card against the allocator now: nvidia-smi's figures, torch's
    reserved bytes, and cudaMemGetInfo's free and total."""
    free, total = torch.cuda.mem_get_info()
    return {"smi": smi(torch), "reserved": torch.cuda.memory_reserved(),
            "free": free, "total": total}


# ------------------------------------------------------------ programs


def child_frag() -> None:
    import torch
    torch.cuda.init()
    total = torch.cuda.mem_get_info()[1]
    torch.cuda.set_per_process_memory_fraction(FRAG_CAP / total)
    kept, dropped = [], []
    for i in range(FRAG_TENSORS):
        t = torch.empty(6 * MIB, dtype=torch.uint8, device="cuda")  # the tensors
        (kept if i % 3 == 2 else dropped).append(t)
    del dropped
    if os.environ.get("VT_FIX_FREE_KEPT"):
        kept.clear()
    if os.environ.get("VT_FIX_EMPTY_CACHE"):
        torch.cuda.empty_cache()
    before = card(torch)
    print("CARD " + json.dumps(before), flush=True)
    big = torch.empty(FRAG_BIG, dtype=torch.uint8, device="cuda")  # the big request
    result({"ok": True, "card": before, "big": big.numel()})


def child_gpt2(cap: int) -> None:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    torch.cuda.init()
    total = torch.cuda.mem_get_info()[1]
    torch.cuda.set_per_process_memory_fraction(cap / total)
    model = GPT2LMHeadModel(GPT2Config(n_layer=6, n_embd=768, n_head=12)).cuda()
    if os.environ.get("VT_FIX_CHECKPOINT"):
        model.config.use_cache = False
        model.gradient_checkpointing_enable()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    empty_after = os.environ.get("VT_FIX_EMPTY_CACHE_AFTER_STEP")
    ids = torch.randint(0, 50257, (8, 512), device="cuda")
    for i in range(GPT2_STEPS):
        print(f"STEP {i}", flush=True)
        print("CARD " + json.dumps(card(torch)), flush=True)
        loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if empty_after is not None and int(empty_after) == i + 1:
            torch.cuda.empty_cache()
    end = card(torch)
    result({"ok": True, "card": end, "max_allocated": torch.cuda.max_memory_allocated(),
            "max_reserved": torch.cuda.max_memory_reserved()})


# ------------------------------------------------------------- running


def run_child(args: list, env: dict, trace: str | None = None) -> dict:
    """Runs a program; what it said: its RESULT, whether it ran out of
    memory, the loop index it was at, its last CARD line."""
    res, p = gpu_report.child(HERE, args, env, trace, timeout=900)
    out = p.stdout
    steps = re.findall(r"^STEP (\d+)$", out, re.MULTILINE)
    cards = re.findall(r"^CARD (.*)$", out, re.MULTILINE)
    return {
        "result": res,
        "oom": "OutOfMemoryError" in p.stderr,
        "code": p.returncode,
        "step": int(steps[-1]) if steps else None,
        "card": json.loads(cards[-1]) if cards else None,
        "tail": tail(p),
    }


def fix_env(fix: dict, program: str) -> tuple[dict | None, str]:
    """The environment that applies `fix` to `program`, or None and why not."""
    change = fix["change"]
    if fix["kind"] == "allocator_setting":
        return {"PYTORCH_CUDA_ALLOC_CONF": change.split("=", 1)[1]}, ""
    if fix["kind"] == "free_kept":
        if program == "frag" and "oom_explain_check.py" in change:
            return {"VT_FIX_FREE_KEPT": "1"}, ""
        return None, "frees blocks of a site this program cannot drop on its own"
    if fix["kind"] == "empty_cache":
        if program == "frag":
            return {"VT_FIX_EMPTY_CACHE": "1"}, ""
        m = re.search(r"after iter(\d+)\b", change)
        if m:
            return {"VT_FIX_EMPTY_CACHE_AFTER_STEP": str(int(m.group(1)) + 1)}, ""
        return None, "the phase is not an iteration's end"
    if fix["kind"] == "category" and "checkpointing" in change and program == "gpt2":
        return {"VT_FIX_CHECKPOINT": "1"}, ""
    return None, "needs a library this machine lacks" if "8-bit" in change else "not applicable"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="carry", help="folder with the vramtrace binary")
    ap.add_argument("--out", default=os.environ.get("OUT", "oom-check-out"))
    ns, rest = ap.parse_known_args()
    if rest and rest[0] == "child":
        if rest[1] == "frag":
            child_frag()
        elif rest[1] == "gpt2":
            child_gpt2(int(rest[2]))
        return 0

    import torch

    out = Path(ns.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    binary = Path(ns.bin).resolve() / "vramtrace"
    env = dict(os.environ)
    env["VRAMTRACE_CACHE"] = str(out / "cache")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
    rep = Report()
    started = time.time()
    name = torch.cuda.get_device_name(0)
    print(f"torch {torch.__version__}, {name}, python {sys.version.split()[0]}", flush=True)
    print("| result | check | detail |\n|---|---|---|", flush=True)

    # Find the GPT-2's smallest cap: record it under a generous one.
    fit_cap = 10 * GIB
    cases = [("frag", "fragmenting, default settings", ["frag"], {}),
             ("frag", "fragmenting, expandable segments", ["frag"],
              {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})]
    trace_fit = str(out / "gpt2-fit.vtrace")
    fit = run_child(["gpt2", str(fit_cap)], env, trace_fit)
    if rep.check(fit["result"] is not None, "GPT-2 under 10 GiB: runs recorded", fit["tail"][-300:] if not fit["result"] else ""):
        sim = vt(binary, "simulate", "--min-capacity", "--reserve", "0B", trace_fit)
        need = sim["min_capacity_bytes"]
        rep.add("INFO", "GPT-2: smallest cap (simulate --min-capacity --reserve 0B)", f"{need:,} B")
        cases.append(("gpt2", f"GPT-2 under {(need - 256 * MIB) / GIB:.3f} GiB (OOM expected)",
                      ["gpt2", str(need - 256 * MIB)], {}))
        cases.append(("gpt2", f"GPT-2 under {need / GIB:.3f} GiB (fits)", ["gpt2", str(need)], {}))
    for program, label, args, extra in cases:
        check_case(rep, binary, out, env, program, label, args, extra)
    setup = f"{name}, torch {torch.__version__}, {time.time() - started:.0f} s"
    return rep.finish("oom_explain_check.py", setup, out / "oom-check.md")


def check_case(rep: Report, binary: Path, out: Path, env: dict, program: str, label: str,
               args: list, extra: dict) -> None:
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    trace = str(out / f"{slug}.vtrace")
    run = run_child(args, {**env, **extra}, trace)
    native = run_child(args, {**env, **extra})
    rep.check(run["oom"] == native["oom"] and run["step"] == native["step"]
              and run["oom"] == (program == "frag" or "OOM expected" in label),
              f"{label}: recorded as native (OOM {native['oom']}, loop index {native['step']})",
              f"recorded: OOM {run['oom']}, index {run['step']}")
    summary = vt(binary, "summary", trace)
    check_summary(rep, label, summary, run, program)
    sim = vt(binary, "simulate", trace)
    check_simulate(rep, binary, out, env, label, sim, run, program, args, extra)


def check_summary(rep: Report, label: str, s: dict, run: dict, program: str) -> None:
    ooms = s.get("ooms", [])
    limit = s.get("limit") or {}
    rep.add("INFO", f"{label}: recorded limit",
            f"{limit.get('bytes')} B ({limit.get('source')}, {limit.get('known')}, fraction {limit.get('fraction')})")
    if run["oom"]:
        if not rep.check(len(ooms) >= 1, f"{label}: summary has the OOM"):
            return
        o = ooms[0]
        # A request of the backward pass comes from autograd's thread, which
        # has no Python frames: the recorder names its backward node.
        site = str(o.get("site"))
        rep.check("oom_explain_check.py" in site or re.fullmatch(r"\w+Backward\d+", site) is not None,
                  f"{label}: the OOM names the line (or backward node) that asked", site[:200])
        check_waterfall(rep, f"{label}: waterfall at the OOM", o.get("waterfall"), limit)
        if program == "gpt2":
            rep.check(f"iter{run['step']}" in (o.get("phase") or "").split("/")[0] + "/",
                      f"{label}: the OOM's iteration is the loop index",
                      f"phase {o.get('phase')!r}, loop index {run['step']}")
    else:
        rep.check(not ooms, f"{label}: no OOM in the summary")
    check_waterfall(rep, f"{label}: waterfall at the peak", s.get("waterfall_at_peak"), limit)
    check_outside(rep, label, s, run)


def check_waterfall(rep: Report, name: str, wf, limit: dict) -> None:
    if not rep.check(wf is not None, name + " exists"):
        return
    total = sum(t["bytes"] for t in wf["terms"])
    ok = total == wf["total_bytes"] and (wf["sums_to"] != "limit" or total == limit.get("bytes"))
    rep.check(ok, name + " sums to " + wf["sums_to"],
              f"{total:,} of {wf['total_bytes']:,} B ({wf['limit_line']}); "
              + ", ".join(f"{t['name']} {t['bytes'] / MIB:,.1f} MiB" for t in wf["terms"] + wf["beside"]))


def check_outside(rep: Report, label: str, s: dict, run: dict) -> None:
    """Memory outside the allocator at the end of the recording, against
    the card at the program's last CARD line (nvidia-smi's used less
    torch's reserved; and cudaMemGetInfo's)."""
    outside = s.get("outside_allocator")
    now = run["card"]
    if not rep.check(outside is not None, f"{label}: memory outside the allocator is measured"):
        return
    if not now or not now.get("smi"):
        rep.add("SKIP", f"{label}: outside the allocator against nvidia-smi", "no CARD line or no nvidia-smi")
        return
    by_runtime = now["total"] - now["free"] - now["reserved"]
    by_smi = now["smi"]["used"] - now["reserved"]
    ours = outside["at_end_bytes"]
    rep.check(abs(ours - by_runtime) <= 64 * MIB,
              f"{label}: outside the allocator (measured) = cudaMemGetInfo's used less reserved, to 64 MiB",
              f"vramtrace at end {ours / MIB:,.0f} MiB (start {outside['at_start_bytes'] / MIB:,.0f}, "
              f"max {outside['max_bytes'] / MIB:,.0f}); card at the last CARD line {by_runtime / MIB:,.0f} MiB; "
              f"nvidia-smi used - reserved {by_smi / MIB:,.0f} MiB (driver-reserved {now['smi']['reserved'] and now['smi']['reserved'] / MIB} MiB)")


def check_simulate(rep: Report, binary: Path, out: Path, env: dict, label: str, sim: dict,
                   run: dict, program: str, args: list, extra: dict) -> None:
    f = sim.get("fidelity") or {}
    rep.check(bool(f.get("exact")), f"{label}: simulate's fidelity check is exact under the recorded limit",
              f"capacity {f.get('capacity_bytes')}, peak {f.get('simulated_peak_reserved_bytes')} vs {f.get('recorded_peak_reserved_bytes')}")
    fixes = sim.get("fixes")
    if not run["oom"]:
        rep.check(fixes is None, f"{label}: no fixes for a run that fits")
        return
    if not rep.check(fixes is not None, f"{label}: fixes were tried", sim["verdict"]["line"]):
        return
    rep.add("INFO", f"{label}: fixes", f"passed: {[x['change'] for x in fixes['passed']]}; "
            f"failed: {[x['change'] for x in fixes['failed']]}; needs more {fixes['needs_more_bytes']}")
    for fix in fixes["passed"] + fixes["failed"]:
        fenv, why = fix_env(fix, program)
        offered = "offered" if fix["passed"] else "not offered"
        name = f"{label}: {fix['change']} ({fix['basis']}, {offered}) on the card"
        if fenv is None:
            rep.add("SKIP", name, why)
            continue
        env2 = {**env, **extra, **fenv}
        if "PYTORCH_CUDA_ALLOC_CONF" in fenv and "PYTORCH_CUDA_ALLOC_CONF" in extra:
            env2["PYTORCH_CUDA_ALLOC_CONF"] = fenv["PYTORCH_CUDA_ALLOC_CONF"]
        again = run_child(args, env2)
        detail = "no OOM" if not again["oom"] else f"OOM at loop index {again['step']}"
        if fix["passed"]:
            rep.check(not again["oom"], name + ": must not run out of memory", detail)
        else:
            agrees = again["oom"]
            rep.add("PASS" if agrees else "FAIL", name + ": the card agrees it does not help", detail)


if __name__ == "__main__":
    sys.exit(main())
