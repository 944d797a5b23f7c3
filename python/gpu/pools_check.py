"""CUDA graphs, memory pools and an inference server, checked on a GPU
(issue #43, see docs/gpu-check.md and docs/pools.md).

    PYTHONPATH=python VRAMTRACE_LIB=carry/libvramtrace_recorder.so \\
        python3 python/gpu/pools_check.py --bin carry --out "$OUT/pools"

Needs a CUDA GPU and PyTorch (torch.compile's rows need Triton, else SKIP);
not part of the test suite (CI has no GPU). Three programs with the memory
patterns of the issue, in plain PyTorch, each run natively and under
`python -m vramtrace run`:

a. `serve`: an inference server as vLLM lays one out: a small decoder's
   fp16 weights, a paged KV cache (1 MiB blocks) sized from what is left
   under a cap after a profiling forward, decode steps captured as CUDA
   graphs for batch sizes 1, 2, 4, ... 256 (largest first) into one pool
   (`graph_pool_handle()`), then replayed with varying batches, and the
   eager sampling between replays;
b. `compile`: a `torch.compile(mode="reduce-overhead")` training step (CUDA
   graph trees, forward and backward) and an inference step;
c. `mempool`: tensors made in a `torch.cuda.MemPool` under `use_mem_pool`,
   others in the default pools, then the pool deleted.

For each: the recorded peaks are the program's own
(`max_memory_allocated()`, `max_memory_reserved()`) and equal to its native
run's; the summary's pools are PyTorch's (the segments `_snapshot()` puts in
private pools at the end); `simulate` is exact on the recorded run;
`simulate --min-capacity` is exact to 2 MiB against a real cap
(`set_per_process_memory_fraction`): the program fits at the answer and
runs out 2 MiB below it. Rows are PASS/FAIL/SKIP/INFO, written to
OUT/pools-check.md too.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

from gpu_report import Report, child, tail, vt

HERE = Path(__file__).resolve()
MIB = 1 << 20
KV_BLOCK_TOKENS = 16


def result(obj) -> None:
    print("RESULT " + json.dumps(obj), flush=True)


# ------------------------------------------------------------ the programs


def private_pool_bytes(torch) -> dict:
    """What PyTorch's snapshot puts in private pools now: bytes of segments
    and of blocks in use, by pool id."""
    pools: dict = {}
    for seg in torch.cuda.memory._snapshot()["segments"]:
        pid = tuple(seg.get("segment_pool_id", (0, 0)))
        if pid == (0, 0):
            continue
        p = pools.setdefault(f"{pid[0]},{pid[1]}", {"reserved": 0, "live": 0, "states": {}})
        p["reserved"] += seg["total_size"]
        p["live"] += sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
        for b in seg["blocks"]:
            p["states"][b["state"]] = p["states"].get(b["state"], 0) + b["size"]
    return pools


def cap_memory(torch, cap_bytes: int) -> None:
    if cap_bytes:
        total = torch.cuda.get_device_properties(0).total_memory
        # PyTorch caps at int(fraction x total): half a byte keeps the
        # float's rounding from taking one off.
        torch.cuda.set_per_process_memory_fraction((cap_bytes + 0.5) / total)


def finish(torch, extra: dict) -> None:
    torch.cuda.synchronize()
    # Recorded: the trace ends here, where the program's figures are taken
    # (not after its tensors went at exit).
    if "vramtrace" in sys.modules:
        sys.modules["vramtrace"].stop()
    result({
        "max_allocated": torch.cuda.max_memory_allocated(),
        "max_reserved": torch.cuda.max_memory_reserved(),
        "reserved": torch.cuda.memory_reserved(),
        "allocated": torch.cuda.memory_allocated(),
        "pools": private_pool_bytes(torch),
        **extra,
    })


def serve(args) -> None:
    import torch

    torch.manual_seed(0)
    random.seed(0)
    cap_memory(torch, args.cap_bytes)
    layers, hidden, vocab = 8, 2048, 32000
    dtype = torch.float16
    dev = "cuda"
    # Weights, as a loader makes them: one tensor each.
    embed = torch.randn(vocab, hidden, device=dev, dtype=dtype) * 0.02
    weights = [
        [torch.randn(hidden, 3 * hidden, device=dev, dtype=dtype) * 0.02,
         torch.randn(hidden, hidden, device=dev, dtype=dtype) * 0.02,
         torch.randn(hidden, 4 * hidden, device=dev, dtype=dtype) * 0.02,
         torch.randn(4 * hidden, hidden, device=dev, dtype=dtype) * 0.02]
        for _ in range(layers)
    ]
    # One KV block: 16 tokens x K and V x every layer x hidden, fp16 = 1 MiB
    # (the cache is laid out layer, K or V, block, token, hidden).
    block_bytes = KV_BLOCK_TOKENS * 2 * layers * hidden * 2
    context_blocks = 8  # 128 tokens of context per sequence

    def step(tokens, kv, tables):
        x = embed[tokens]
        b = tokens.shape[0]
        for i, (wqkv, wo, wup, wdown) in enumerate(weights):
            q, k, v = (x @ wqkv).chunk(3, dim=-1)
            keys = kv[i, 0][tables].view(b, context_blocks * KV_BLOCK_TOKENS, hidden)
            values = kv[i, 1][tables].view(b, context_blocks * KV_BLOCK_TOKENS, hidden)
            scores = torch.softmax((keys @ q.unsqueeze(-1)).squeeze(-1) / 45.0, dim=-1)
            att = (scores.unsqueeze(1) @ values).squeeze(1) + v + k
            x = x + att @ wo
            x = x + torch.relu(x @ wup) @ wdown
        return x @ embed.t()

    max_batch = max(args.batches)
    # Profile: one eager step at the largest batch on a tiny cache, as
    # servers do before sizing theirs.
    probe = torch.zeros(layers, 2, max_batch * context_blocks, KV_BLOCK_TOKENS, hidden,
                        device=dev, dtype=dtype)
    tables = torch.arange(max_batch * context_blocks, device=dev).view(max_batch, context_blocks)
    tokens = torch.randint(0, vocab, (max_batch,), device=dev)
    step(tokens, probe, tables)
    del probe
    torch.cuda.synchronize()
    if args.kv_blocks:
        blocks = args.kv_blocks
    else:
        budget = args.cap_bytes or torch.cuda.get_device_properties(0).total_memory
        left = int(budget * args.utilization) - torch.cuda.max_memory_allocated()
        blocks = max(left // block_bytes, max_batch * context_blocks)
    try:
        kv = torch.zeros(layers, 2, blocks, KV_BLOCK_TOKENS, hidden, device=dev, dtype=dtype)
        if "vramtrace" in sys.modules:
            # A category of the program's own (format 1.7): no device memory.
            sys.modules["vramtrace"].tag(kv, "kv_cache")
        kv_block = next(b["size"] for seg in torch.cuda.memory._snapshot()["segments"]
                        for a, b in _blocks(seg) if a == kv.data_ptr())
        graphs = {}
        pool = torch.cuda.graph_pool_handle() if args.shared else None
        for b in sorted(args.batches, reverse=True):
            static_tokens = torch.zeros(b, dtype=torch.long, device=dev)
            static_tables = tables[:b].clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                step(static_tokens, kv, static_tables)  # warm-up, eager
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                out = step(static_tokens, kv, static_tables)
            graphs[b] = (g, static_tokens, static_tables, out)
        for _ in range(args.steps):
            n = random.randint(1, max_batch)
            b = min(x for x in graphs if x >= n)
            g, static_tokens, _, out = graphs[b]
            static_tokens.copy_(torch.randint(0, vocab, (b,), device=dev))
            g.replay()
            tokens = torch.argmax(out[:n].float(), dim=-1)
        # A server keeps its graphs: empty_cache() leaves their pool alone.
        torch.cuda.empty_cache()
    except torch.OutOfMemoryError as e:
        finish(torch, {"oom": str(e).split("\n")[0][:200], "kv_blocks": blocks})
        return
    finish(torch, {"kv_blocks": blocks, "block_bytes": block_bytes, "graphs": len(graphs),
                   "kv_block_size": kv_block})


def _blocks(seg):
    """(address, block) of each block of a `_snapshot()` segment."""
    addr = seg["address"]
    for b in seg["blocks"]:
        yield addr, b
        addr += b["size"]


def compiled(args) -> None:
    import torch

    torch.manual_seed(0)
    cap_memory(torch, args.cap_bytes)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096),
        torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    @torch.compile(mode="reduce-overhead")
    def train_step(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    @torch.compile(mode="reduce-overhead")
    def infer(x):
        with torch.no_grad():
            return model(x)

    try:
        for i in range(8):
            x = torch.randn(256, 1024, device="cuda")
            y = torch.randn(256, 1024, device="cuda")
            torch.compiler.cudagraph_mark_step_begin()
            loss = train_step(x, y)
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss = loss.item()
        for i in range(4):
            torch.compiler.cudagraph_mark_step_begin()
            out = infer(torch.randn(512, 1024, device="cuda")).clone()
        del out
    except torch.OutOfMemoryError as e:
        finish(torch, {"oom": str(e).split("\n")[0][:200]})
        return
    finish(torch, {})


def mempool(args) -> None:
    import torch

    cap_memory(torch, args.cap_bytes)
    keep = [torch.empty(30 * MIB, dtype=torch.uint8, device="cuda")]
    try:
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            a = torch.empty(64 * MIB, dtype=torch.uint8, device="cuda")
            b = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
            c = torch.empty(100 * 1024, dtype=torch.uint8, device="cuda")
            del b
        d = torch.empty(2 * MIB, dtype=torch.uint8, device="cuda")
        keep.append(torch.empty(48 * MIB, dtype=torch.uint8, device="cuda"))
        with torch.cuda.use_mem_pool(pool):
            e = torch.empty(2 * MIB, dtype=torch.uint8, device="cuda")
        del a, c, d, e
        mid = private_pool_bytes(torch)
        del pool
        import gc
        gc.collect()
        keep.append(torch.empty(96 * MIB, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError as e:
        finish(torch, {"oom": str(e).split("\n")[0][:200]})
        return
    torch.cuda.empty_cache()
    finish(torch, {"pools_mid": mid})


PROGRAMS = {"serve": serve, "compile": compiled, "mempool": mempool}


def child_main(argv) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("program", choices=sorted(PROGRAMS))
    ap.add_argument("--cap-bytes", type=int, default=0)
    ap.add_argument("--kv-blocks", type=int, default=0)
    ap.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")],
                    default=[1, 2, 4, 8, 16, 32, 64, 128, 256])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--utilization", type=float, default=0.9)
    ap.add_argument("--separate", dest="shared", action="store_false")
    args = ap.parse_args(argv)
    PROGRAMS[args.program](args)


# ------------------------------------------------------------ the checks


def check_program(rep: Report, binary: Path, out: Path, env: dict, name: str, args: list,
                  min_capacity: bool) -> dict | None:
    native, p = child(HERE, [name, *args], env)
    if native is None or "oom" in native:
        rep.add("FAIL", f"{name}: native run", tail(p) if native is None else native["oom"])
        return None
    again, _ = child(HERE, [name, *args], env)
    natives = {(native["max_allocated"], native["max_reserved"])}
    if again is not None and "oom" not in again:
        natives.add((again["max_allocated"], again["max_reserved"]))
    if len(natives) > 1:
        rep.add("INFO", f"{name}: the program's own peaks vary between native runs",
                ", ".join(f"{a:,} / {r:,} B" for a, r in sorted(natives)))
    trace = str(out / f"{name}.vtrace")
    recorded, p = child(HERE, [name, *args], env, trace=trace)
    if recorded is None or "oom" in recorded:
        rep.add("FAIL", f"{name}: recorded run", tail(p) if recorded is None else recorded["oom"])
        return None
    same = (recorded["max_allocated"], recorded["max_reserved"]) in natives
    rep.check(same, f"{name}: recording changes nothing (native and recorded peaks)",
              f"native {native['max_allocated']:,} / {native['max_reserved']:,} B, recorded "
              f"{recorded['max_allocated']:,} / {recorded['max_reserved']:,} B")
    s = vt(binary, "summary", trace)
    rep.check(s["peak_allocated_bytes"] == recorded["max_allocated"]
              and s["peak_reserved_bytes"] == recorded["max_reserved"],
              f"{name}: summary peaks are PyTorch's to the byte",
              f"summary {s['peak_allocated_bytes']:,} / {s['peak_reserved_bytes']:,} B, torch "
              f"{recorded['max_allocated']:,} / {recorded['max_reserved']:,} B")
    pools = s.get("pools") or {"pools": []}
    ours = {f"{p['id'][0]},{p['id'][1]}": (p["reserved_at_end_bytes"], p["live_at_end_bytes"])
            for p in pools["pools"] if p["reserved_at_end_bytes"]}
    torchs = {k: (v["reserved"], v["live"]) for k, v in recorded["pools"].items()}
    states = {k: v["states"] for k, v in recorded["pools"].items()}
    rep.check(ours == torchs, f"{name}: pools at the end are PyTorch's (segments and blocks)",
              f"vramtrace {ours}, torch {torchs} (blocks by state {states}); captures "
              f"{pools.get('captures')}, followed {pools.get('followed')}")
    if pools["pools"]:
        rep.add("INFO", f"{name}: pools at the allocated peak",
                f"{len(pools['pools'])} pools, {pools['reserved_at_peak_bytes']:,} B reserved, "
                f"{pools['live_at_peak_bytes']:,} B in use")
    if pools["pools"]:
        t = vt(binary, "timeline", trace)
        at_end = t["samples"][-1].get("pools") if t.get("samples") else None
        torch_end = sum(v["reserved"] for v in recorded["pools"].values())
        rep.check(at_end == torch_end, f"{name}: the timeline's bytes in private pools at the end "
                  "are PyTorch's", f"timeline {at_end}, torch {torch_end:,} B")
    if "kv_block_size" in recorded:
        user = {u["name"]: u for u in s["categories"].get("user", [])}
        kv = user.get("kv_cache", {})
        rep.check(kv.get("at_end") == recorded["kv_block_size"],
                  f"{name}: vramtrace.tag(kv, 'kv_cache') is a category of its own, exact",
                  f"summary {kv.get('at_end')}, PyTorch's block {recorded['kv_block_size']:,} B; "
                  f"at the allocated peak {kv.get('at_allocated_peak')}")
    sim = vt(binary, "simulate", trace)
    fid = sim.get("fidelity") or {}
    rep.check(bool(fid.get("exact")), f"{name}: simulate is exact on the recorded run",
              json.dumps(fid)[:300] + " / " + sim["verdict"]["line"][:200])
    if not min_capacity:
        return recorded
    # The allocator's smallest cap: no reserve for memory outside it, which
    # a cap does not bound.
    m = vt(binary, "simulate", trace, "--min-capacity", "--reserve", "0B")
    answer = m.get("min_capacity_bytes")
    if not answer:
        rep.add("FAIL", f"{name}: simulate --min-capacity", json.dumps(m.get("verdict"))[:300])
        return recorded
    fits, p1 = child(HERE, [name, *args, "--cap-bytes", str(answer)], env)
    below, _ = child(HERE, [name, *args, "--cap-bytes", str(answer - 2 * MIB)], env)
    ok_fit = fits is not None and "oom" not in fits
    ok_below = below is not None and "oom" in below
    rep.check(ok_fit and ok_below, f"{name}: --min-capacity exact to 2 MiB on the card",
              f"answer {answer:,} B: fits {ok_fit} ({tail(p1)[-120:] if fits is None else ''}), "
              f"2 MiB below runs out {ok_below}")
    return recorded


def check_kv_plan(rep: Report, binary: Path, out: Path, env: dict, cap: int) -> None:
    """`plan --kv-cache` on the recorded server under `cap`: the server with
    that many blocks fits under the cap on the card, one block more runs
    out."""
    trace = str(out / "serve.vtrace")
    if not Path(trace).exists():
        return
    plan = vt(binary, "plan", trace, "--kv-cache", "--kv-block", "1MiB", "--cap", f"{cap}B")
    blocks = plan.get("largest_blocks")
    if blocks:
        check_capture_plan(rep, binary, out, env, cap, blocks)
    rep.add("INFO", "serve: plan --kv-cache under the cap", plan.get("line", "")[:300])
    if not blocks:
        rep.add("FAIL", "serve: plan --kv-cache gave no answer", json.dumps(plan)[:300])
        return
    fits, p1 = child(HERE, ["serve", "--cap-bytes", str(cap), "--kv-blocks", str(blocks)], env)
    more, p2 = child(HERE, ["serve", "--cap-bytes", str(cap), "--kv-blocks", str(blocks + 1)], env)
    ok_fit = fits is not None and "oom" not in fits
    ok_more = more is not None and "oom" in more
    rep.check(ok_fit and ok_more, "serve: the KV-cache plan fits on the card, one block more runs out",
              f"{blocks:,} blocks under {cap:,} B: fits {ok_fit}"
              f"{'' if fits is not None else ' (' + tail(p1)[-120:] + ')'}, "
              f"{blocks + 1:,} runs out {ok_more}"
              f"{'' if more is not None else ' (' + tail(p2)[-120:] + ')'}")


def check_capture_plan(rep: Report, binary: Path, out: Path, env: dict, cap: int,
                       largest: int) -> None:
    """`plan --kv-cache --kv-size`: with a KV cache 256 MiB past the largest
    that fits beside every graph, the largest batch size to capture; a
    server capturing up to it fits under the cap on the card, one capturing
    the next batch size too runs out. The answer is an estimate (the
    warm-ups of the graphs left out stay in the replay)."""
    trace = str(out / "serve.vtrace")
    batches = [256, 128, 64, 32, 16, 8, 4, 2, 1]
    kv_bytes = (largest + 256) * MIB
    plan = vt(binary, "plan", trace, "--kv-cache", "--kv-block", "1MiB", "--cap", f"{cap}B",
              "--kv-size", f"{kv_bytes}B", "--captured-batches", ",".join(map(str, batches)))
    c = plan.get("captures") or {}
    kept = (c.get("fit") or {}).get("kept")
    rep.add("INFO", "serve: plan --kv-size (the largest batch to capture)", plan.get("line", "")[:300])
    if not kept or kept >= len(batches):
        rep.add("FAIL", "serve: plan --kv-size gave no partial answer", json.dumps(c)[:300])
        return
    keep = batches[len(batches) - kept:]
    more = batches[len(batches) - kept - 1:]
    blocks = kv_bytes // MIB

    def run(b):
        return child(HERE, ["serve", "--cap-bytes", str(cap), "--kv-blocks", str(blocks),
                            "--batches", ",".join(map(str, b))], env)

    fits, p1 = run(keep)
    over, p2 = run(more)
    ok_fit = fits is not None and "oom" not in fits
    ok_over = over is not None and "oom" in over
    rep.check(ok_fit and ok_over,
              "serve: the largest batch to capture beside a given KV cache holds on the card",
              f"KV {blocks:,} blocks, capture up to {max(keep)} ({c.get('basis')}): fits {ok_fit}"
              f"{'' if fits is not None else ' (' + tail(p1)[-120:] + ')'}; up to {max(more)} "
              f"runs out {ok_over}{'' if over is not None else ' (' + tail(p2)[-120:] + ')'}")


def check_capture_oom(rep: Report, binary: Path, out: Path, env: dict, blocks: int) -> None:
    """A server whose graphs each have a pool, under a cap halfway between
    the smallest caps of the shared and the separate pools (from
    `simulate --min-capacity`): it runs out of memory; `simulate` names a
    fix that shares one pool, and the server with one pool fits under that
    cap on the card."""
    caps = {}
    for name in ("serve", "serve-separate"):
        trace = out / f"{name}.vtrace"
        if not trace.exists():
            return
        m = vt(binary, "simulate", str(trace), "--min-capacity", "--reserve", "0B")
        caps[name] = m.get("min_capacity_bytes") or 0
    if not caps["serve"] or caps["serve-separate"] <= caps["serve"] + 4 * MIB:
        rep.add("INFO", "serve: capture OOM check skipped", f"smallest caps {caps}")
        return
    cap = (caps["serve"] + caps["serve-separate"]) // 2 // MIB * MIB
    trace = str(out / "serve-oom.vtrace")
    got, p = child(HERE, ["serve", "--kv-blocks", str(blocks), "--separate",
                          "--cap-bytes", str(cap)], env, trace=trace)
    if got is None or "oom" not in got:
        rep.add("FAIL", "serve, a pool per graph, capped: runs out", tail(p) if got is None else "it fit")
        return
    sim = vt(binary, "simulate", trace)
    fixes = (sim.get("fixes") or {}).get("passed", [])
    one_pool = [f for f in fixes if f["kind"] == "graphs" and "one pool" in f["change"]]
    kv = [f for f in fixes if f["kind"] == "kv_cache"]
    rep.add("INFO", "serve, a pool per graph, capped: simulate's verdict and fixes",
            sim["verdict"]["line"][:250] + " / " + "; ".join(f["change"][:80] for f in fixes)[:400])
    shared, p2 = child(HERE, ["serve", "--kv-blocks", str(blocks), "--cap-bytes", str(cap)], env)
    fits = shared is not None and "oom" not in shared
    rep.check(bool(one_pool) and fits,
              "serve: a capture that runs out is fixed by one pool, as the card confirms",
              f"cap {cap:,} B: fix offered {bool(one_pool)} ({one_pool[0]['basis'] if one_pool else ''}),"
              f" one pool fits on the card {fits}{'' if shared is not None else ' ' + tail(p2)[-100:]};"
              f" a smaller KV cache offered {bool(kv)}")


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child_main(sys.argv[2:])
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True, help="folder with the vramtrace binary")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="serve,compile,mempool")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    binary = Path(args.bin).resolve() / "vramtrace"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE.parent), str(HERE.parents[1]), env.get("PYTHONPATH", "")])
    rep = Report()
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    only = args.only.split(",")
    if "serve" in only:
        # A fixed cache for the capacity check, as sized under a 24 GiB cap.
        sized, p = child(HERE, ["serve", "--cap-bytes", str(24 << 30), "--steps", "2"], env)
        if sized is None or "oom" in sized:
            rep.add("FAIL", "serve: sizing the KV cache under 24 GiB", tail(p))
        else:
            rep.add("INFO", "serve: KV cache sized under a 24 GiB cap",
                    f"{sized['kv_blocks']:,} blocks of 1 MiB")
            check_program(rep, binary, out, env, "serve",
                          ["--kv-blocks", str(sized["kv_blocks"])], min_capacity=True)
            check_kv_plan(rep, binary, out, env, 24 << 30)
            kv_blocks = sized["kv_blocks"]
            apart = str(out / "serve-separate.vtrace")
            got, p = child(HERE, ["serve", "--kv-blocks", str(sized["kv_blocks"]), "--separate"],
                           env, trace=apart)
            if got is not None and "oom" not in got:
                s = vt(binary, "summary", apart)
                sim = vt(binary, "simulate", apart)
                rep.check(bool((sim.get("fidelity") or {}).get("exact"))
                          and s["peak_reserved_bytes"] == got["max_reserved"],
                          "serve, a pool per graph: peaks and simulate exact",
                          f"reserved {got['max_reserved']:,} B (shared pool: see above)")
                check_capture_oom(rep, binary, out, env, kv_blocks)
    try:
        import triton  # noqa: F401
        has_triton = True
    except ImportError:
        has_triton = False
    if "compile" in only:
        if has_triton:
            check_program(rep, binary, out, env, "compile", [], min_capacity=True)
        else:
            rep.add("SKIP", "compile: torch.compile needs Triton")
    if "mempool" in only:
        check_program(rep, binary, out, env, "mempool", [], min_capacity=True)
    setup = (f"{torch.cuda.get_device_name(0)}, {total // MIB:,} MiB, torch {torch.__version__}")
    return rep.finish("pools_check.py", setup, out / "pools-check.md")


if __name__ == "__main__":
    sys.exit(main())
