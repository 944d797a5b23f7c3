"""The fit planner (`vramtrace plan`, issue #30) checked on a GPU: its answer
against what the card does at the value it names and one step past it.

    PYTHONPATH=python VRAMTRACE_LIB=carry/libvramtrace_recorder.so \\
        python3 python/gpu/plan_check.py --bin carry --out "$OUT/plan"

Needs a CUDA GPU, PyTorch, transformers and torchvision; not part of the
test suite (CI has no GPU). One invocation, under 9 minutes on an H100.
Three training programs, each run for 3 steps under an allocator cap of
20 GiB (`set_per_process_memory_fraction(20 GiB / total)`, set as the
program initializes CUDA, before its first allocation, so that the trace
records the cap and `plan` plans under it):

a. GPT-2 (12 layers, 768 wide, random init, eager attention so that its
   attention's memory grows with the square of the sequence), bf16
   autocast, AdamW; the batch varied at sequence 512, recorded at 4 and 8,
   searched in steps of 1;
b. the same GPT-2 at batch 4, the sequence length varied, recorded at 512
   and 1024, searched in steps of 64 (a sequence length is most often a
   multiple of 64);
c. torchvision's ResNet-50 (random init, fp32, SGD with momentum,
   224 x 224 inputs); the batch varied, recorded at 32 and 64, searched in
   steps of 1;

and, for model families no one tuned the planner on (issue #44), each with
its batch varied, recorded at two sizes, searched in steps of 1:

d. torchvision's ViT-B/16 (fp32, AdamW, 224 x 224; its attention is
   `nn.MultiheadAttention`, PyTorch's fused attention kernels);
e. a BERT-base encoder (transformers `BertForMaskedLM`, bf16 autocast,
   AdamW, sequence 512);
f. a diffusion UNet (written here: ResNet blocks with GroupNorm and a time
   embedding, self-attention at the two lowest resolutions, skip
   connections; 4 x 64 x 64 latents, bf16 autocast, AdamW, the noise
   regression loss);
g. a mixture of experts (written here: 6 transformer blocks whose MLP is 8
   experts with top-2 routing and a capacity factor of 1.25, as GShard and
   Switch do, so each expert's batch follows the tokens; bf16 autocast,
   AdamW, sequence 512).

Each program is recorded with `python -m vramtrace run --annotate KEY=VALUE`
(`batch=8`, `seq=512`), which tells `plan` each run's value. For each case:
`vramtrace plan A B --json --step S`; when the plan names a third run to
record (a size that stops growing past the two runs would show only then),
it is recorded and the plan made again from all three; every recorded run must be reproduced
(`runs[].reproduced`); then the program runs on the card at `largest`,
where it must finish, and at `largest + step`, where it must raise
`torch.OutOfMemoryError` (caught, a RESULT line printed, exit code 3, so the
trace is complete). A prediction one step off (the card's largest is one
step away; found by one more run) passes, with its distance said; more
fails. The OOM's site recorded at the first value that fails on the card
(`summary --json`'s last OOM, the one not survived) must be the one `plan` predicted
(`answer.next.oom.site`). The predicted peaks at `largest` are printed
beside the card's `max_memory_reserved()` and `max_memory_allocated()`.

Every child runs under a timeout drawn from one budget for the whole
script: a case that cannot finish in it is a FAIL that says so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from vramtrace.analysis import one_device

HERE = Path(__file__).resolve()
MIB = 1 << 20
GIB = 1 << 30
CAP = 20 * GIB
STEPS = 3
OOM_EXIT = 3
# The whole script's time, and the most one child or plan may take of it.
BUDGET_S = 8 * 60 + 30
CHILD_TIMEOUT_S = 240
PLAN_TIMEOUT_S = 150


def result(obj) -> None:
    print("RESULT " + json.dumps(obj), flush=True)


# ------------------------------------------------------------ programs


def setup_torch():
    """The program's start: a fixed seed, no autotuning, the cap set as
    CUDA starts (recording begins there), before any allocation."""
    import torch
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.cuda.init()
    total = torch.cuda.mem_get_info()[1]
    torch.cuda.set_per_process_memory_fraction(CAP / total)
    return torch


def gpt2(torch, batch: int, seq: int):
    """GPT-2 small, eager attention, its optimizer and one batch of tokens
    (the same every step); the step as a function."""
    from transformers import GPT2Config, GPT2LMHeadModel
    config = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=8192, use_cache=False,
                        attn_implementation="eager")
    model = GPT2LMHeadModel(config)
    if getattr(model.config, "_attn_implementation", "eager") != "eager" and hasattr(
            model, "set_attn_implementation"):
        model.set_attn_implementation("eager")
    model = model.cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (batch, seq), generator=g).cuda()

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, {"attn": getattr(model.config, "_attn_implementation", None)}


def resnet50(torch, batch: int):
    """ResNet-50, fp32, SGD with momentum, one batch of 224 x 224 images
    (the same every step); the step as a function."""
    import torchvision
    model = torchvision.models.resnet50(weights=None, num_classes=1000).cuda().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, 224, 224, generator=g).cuda()
    y = torch.randint(0, 1000, (batch,), generator=g).cuda()
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, {}


def vit_b16(torch, batch: int):
    """torchvision's ViT-B/16, fp32, AdamW, one batch of 224 x 224 images."""
    import torchvision
    model = torchvision.models.vit_b_16(weights=None, num_classes=1000).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, 224, 224, generator=g).cuda()
    y = torch.randint(0, 1000, (batch,), generator=g).cuda()

    def step() -> None:
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, {}


def bert(torch, batch: int, seq: int):
    """A BERT-base encoder with its masked-LM head, bf16 autocast, AdamW."""
    from transformers import BertConfig, BertForMaskedLM
    config = BertConfig(max_position_embeddings=max(512, seq))
    model = BertForMaskedLM(config).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (batch, seq), generator=g).cuda()

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, {"attn": getattr(model.config, "_attn_implementation", None)}


def unet(torch, batch: int):
    """A diffusion UNet (Stable Diffusion's shape, smaller), bf16 autocast,
    AdamW, trained to predict the noise of 4 x 64 x 64 latents."""
    nn = torch.nn
    F = torch.nn.functional

    class Res(nn.Module):
        def __init__(self, cin, cout, temb):
            super().__init__()
            self.n1, self.c1 = nn.GroupNorm(32, cin), nn.Conv2d(cin, cout, 3, padding=1)
            self.t = nn.Linear(temb, cout)
            self.n2, self.c2 = nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, padding=1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x, t):
            h = self.c1(F.silu(self.n1(x))) + self.t(t)[:, :, None, None]
            return self.skip(x) + self.c2(F.silu(self.n2(h)))

    class Attn(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.n, self.qkv, self.o = nn.GroupNorm(32, c), nn.Linear(c, 3 * c), nn.Linear(c, c)
            self.heads = 8

        def forward(self, x):
            b, c, hh, ww = x.shape
            q, k, v = self.qkv(self.n(x).flatten(2).transpose(1, 2)).chunk(3, dim=-1)
            q, k, v = (z.unflatten(-1, (self.heads, -1)).transpose(1, 2) for z in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)
            return x + self.o(a).transpose(1, 2).reshape(b, c, hh, ww)

    class UNet(nn.Module):
        def __init__(self, ch=(128, 256, 512, 512), temb=512):
            super().__init__()
            self.temb = nn.Sequential(nn.Linear(128, temb), nn.SiLU(), nn.Linear(temb, temb))
            self.inp = nn.Conv2d(4, ch[0], 3, padding=1)
            self.down, self.up = nn.ModuleList(), nn.ModuleList()
            c = ch[0]
            skips = [c]
            for i, co in enumerate(ch):
                attn = i >= len(ch) - 2
                for _ in range(2):
                    self.down.append(nn.ModuleList([Res(c, co, temb),
                                                    Attn(co) if attn else nn.Identity()]))
                    c = co
                    skips.append(c)
                if i < len(ch) - 1:
                    self.down.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
                    skips.append(c)
            self.mid = nn.ModuleList([Res(c, c, temb), Attn(c), Res(c, c, temb)])
            for i, co in reversed(list(enumerate(ch))):
                attn = i >= len(ch) - 2
                for _ in range(3):
                    self.up.append(nn.ModuleList([Res(c + skips.pop(), co, temb),
                                                  Attn(co) if attn else nn.Identity()]))
                    c = co
                if i > 0:
                    self.up.append(nn.Upsample(scale_factor=2, mode="nearest"))
            self.out = nn.Sequential(nn.GroupNorm(32, c), nn.SiLU(), nn.Conv2d(c, 4, 3, padding=1))

        def forward(self, x, t):
            half = torch.exp(-torch.arange(64, device=x.device) * (9.21 / 64))
            t = self.temb(torch.cat([torch.sin(t[:, None] * half), torch.cos(t[:, None] * half)], 1))
            h = self.inp(x)
            hs = [h]
            for m in self.down:
                h = m[1](m[0](h, t)) if isinstance(m, nn.ModuleList) else m(h)
                hs.append(h)
            h = self.mid[2](self.mid[1](self.mid[0](h, t)), t)
            for m in self.up:
                if isinstance(m, nn.ModuleList):
                    h = m[1](m[0](torch.cat([h, hs.pop()], 1), t))
                else:
                    h = m(h)
            return self.out(h)

    model = UNet().cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 4, 64, 64, generator=g).cuda()
    noise = torch.randn(batch, 4, 64, 64, generator=g).cuda()
    t = torch.randint(0, 1000, (batch,), generator=g).float().cuda()

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.mse_loss(model(x + noise, t).float(), noise)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, {}


def moe(torch, batch: int, seq: int):
    """A mixture-of-experts decoder: 6 blocks, width 1024, each MLP 8
    experts with top-2 routing and a capacity factor of 1.25 (tokens past an
    expert's capacity are dropped, as GShard and Switch do), bf16 autocast,
    AdamW."""
    nn = torch.nn
    F = torch.nn.functional
    width, experts, top, factor, vocab = 1024, 8, 2, 1.25, 32000

    class Experts(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = nn.Linear(width, experts, bias=False)
            self.w1 = nn.Parameter(torch.randn(experts, width, 4 * width) * 0.02)
            self.w2 = nn.Parameter(torch.randn(experts, 4 * width, width) * 0.02)

        def forward(self, x):
            b, s, d = x.shape
            tokens = x.reshape(-1, d)
            n = tokens.shape[0]
            capacity = int(factor * n * top / experts)
            weights, chosen = self.router(tokens).float().softmax(-1).topk(top, dim=-1)
            out = torch.zeros_like(tokens)
            for e in range(experts):
                rows, which = (chosen == e).nonzero(as_tuple=True)
                rows, which = rows[:capacity], which[:capacity]
                # A fixed-size slot per expert (capacity): the dispatch of
                # GShard-style MoE layers, whatever the routing chose.
                slot = tokens.new_zeros(capacity, d)
                slot[: rows.shape[0]] = tokens[rows]
                h = F.gelu(slot @ self.w1[e]) @ self.w2[e]
                h = h[: rows.shape[0]] * weights[rows, which, None].to(h.dtype)
                out.index_add_(0, rows, h.to(out.dtype))
            return out.reshape(b, s, d)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.attn = nn.MultiheadAttention(width, 16, batch_first=True)
            self.moe = Experts()

        def forward(self, x, mask):
            h = self.n1(x)
            x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False, is_causal=True)[0]
            return x + self.moe(self.n2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, width)
            self.blocks = nn.ModuleList(Block() for _ in range(6))
            self.norm = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab, bias=False)

        def forward(self, ids):
            mask = nn.Transformer.generate_square_subsequent_mask(ids.shape[1], device=ids.device)
            x = self.emb(ids)
            for b in self.blocks:
                x = b(x, mask)
            return self.head(self.norm(x))

    model = Model().cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, seq), generator=g).cuda()

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(ids)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), ids.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, {}


PROGRAMS = {
    "gpt2": lambda torch, ns: gpt2(torch, ns.batch, ns.seq),
    "resnet50": lambda torch, ns: resnet50(torch, ns.batch),
    "vit_b16": lambda torch, ns: vit_b16(torch, ns.batch),
    "bert": lambda torch, ns: bert(torch, ns.batch, ns.seq),
    "unet": lambda torch, ns: unet(torch, ns.batch),
    "moe": lambda torch, ns: moe(torch, ns.batch, ns.seq),
}


def child(argv: list) -> int:
    """`plan_check.py child PROGRAM --batch B [--seq S]`: STEPS
    training steps; a RESULT line either way; exit code 3 on running out of
    memory."""
    ap = argparse.ArgumentParser(prog="plan_check.py child")
    ap.add_argument("program", choices=sorted(PROGRAMS))
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, default=512)
    ns = ap.parse_args(argv)
    torch = setup_torch()
    oom_type = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    i, where, extra = -1, "setup", {}

    def peaks() -> dict:
        return {"max_reserved": torch.cuda.max_memory_reserved(),
                "max_allocated": torch.cuda.max_memory_allocated(),
                "limit_fraction": CAP / torch.cuda.mem_get_info()[1]}

    try:
        step, extra = PROGRAMS[ns.program](torch, ns)
        for i in range(STEPS):
            where = f"step {i}"
            print(f"STEP {i}", flush=True)
            step()
        torch.cuda.synchronize()
    except oom_type as e:
        message = str(e).splitlines()[0][:300] if str(e) else ""
        result({"ok": False, "oom": True, "step": i, "where": where, "message": message,
                **peaks(), **extra})
        return OOM_EXIT
    result({"ok": True, "oom": False, **peaks(), **extra})
    return 0


# ------------------------------------------------------------- running


@dataclass
class Case:
    slug: str
    name: str
    program: str
    varied: str  # "batch" or "seq"
    recorded: tuple
    step: int
    fixed: dict = field(default_factory=dict)

    def args(self, value: int) -> list:
        values = {**self.fixed, self.varied: value}
        args = [self.program, "--batch", str(values["batch"])]
        if "seq" in values:
            args += ["--seq", str(values["seq"])]
        return args


CASES = [
    Case("gpt2-batch", "GPT-2 12 layers, bf16, AdamW, sequence 512: batch", "gpt2", "batch",
         (4, 8), 1, {"seq": 512}),
    Case("gpt2-seq", "GPT-2 12 layers, bf16, AdamW, batch 4: sequence length", "gpt2", "seq",
         (512, 1024), 64, {"batch": 4}),
    Case("resnet50-batch", "ResNet-50, fp32, SGD, 224x224: batch", "resnet50", "batch",
         (32, 64), 1),
    Case("vit-batch", "ViT-B/16, fp32, AdamW, 224x224: batch", "vit_b16", "batch", (16, 32), 1),
    Case("bert-batch", "BERT-base MLM, bf16, AdamW, sequence 512: batch", "bert", "batch",
         (8, 16), 1, {"seq": 512}),
    Case("unet-batch", "diffusion UNet, bf16, AdamW, 4x64x64 latents: batch", "unet", "batch",
         (8, 16), 1),
    Case("moe-batch", "MoE 8 experts top-2, bf16, AdamW, sequence 512: batch", "moe", "batch",
         (4, 8), 1, {"seq": 512}),
]


class OutOfTime(Exception):
    """The script's budget is spent."""


class Clock:
    """The script's budget: each child or plan gets what is left, at most
    its own limit."""

    def __init__(self, budget: float) -> None:
        self.deadline = time.time() + budget

    def left(self) -> float:
        return self.deadline - time.time()

    def timeout(self, most: float) -> float:
        left = self.left()
        if left < 15:
            raise OutOfTime(f"the script's {BUDGET_S} s were spent")
        return min(most, left)


@dataclass
class Run:
    """What one run of a program said."""
    value: int
    trace: str
    code: int | None
    result: dict | None
    tail: str
    seconds: float

    @property
    def fits(self) -> bool:
        return self.code == 0 and bool(self.result and self.result.get("ok"))

    @property
    def oom(self) -> bool:
        return self.code == OOM_EXIT and bool(self.result and self.result.get("oom"))

    def outcome(self) -> str:
        if self.fits:
            attn = f", {self.result['attn']} attention" if self.result.get("attn") else ""
            return (f"fits (max reserved {gib(self.result['max_reserved'])}, "
                    f"allocated {gib(self.result['max_allocated'])}{attn})")
        if self.oom:
            return f"out of memory at {self.result.get('where')}"
        return f"failed (exit code {self.code}): {self.tail[-300:]}"


def gib(n) -> str:
    return "?" if n is None else f"{n / GIB:.2f} GiB"


def tail(stdout: str, stderr: str) -> str:
    return (stdout[-600:] + stderr[-1200:]).strip().replace("\n", " / ")


def run_program(case: Case, value: int, env: dict, out: Path, clock: Clock,
                tag: str = "") -> Run:
    """The case's program at `value`, recorded under `python -m vramtrace
    run --annotate VARIED=VALUE`."""
    trace = str(out / f"{case.slug}-{value}{tag}.vtrace")
    cmd = [sys.executable, "-m", "vramtrace", "run", "--out", trace,
           "--annotate", f"{case.varied}={value}", str(HERE), "child", *case.args(value)]
    started = time.time()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                           timeout=clock.timeout(CHILD_TIMEOUT_S))
    except subprocess.TimeoutExpired as e:
        out_text = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return Run(value, trace, None, None, f"timed out after {time.time() - started:.0f} s: "
                   + out_text[-300:].replace("\n", " / "), time.time() - started)
    found = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            try:
                found = json.loads(line[7:])
            except json.JSONDecodeError:
                pass
    return Run(value, trace, p.returncode, found, tail(p.stdout, p.stderr),
               time.time() - started)


def analyzer(binary: Path, args: list, clock: Clock, most: float = PLAN_TIMEOUT_S) -> dict:
    """What `vramtrace ARGS... --json` printed; RuntimeError with its
    message otherwise."""
    try:
        p = subprocess.run([str(binary), *args, "--json"], capture_output=True, text=True,
                           timeout=clock.timeout(most))
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"vramtrace {args[0]} timed out") from None
    if p.returncode != 0:
        raise RuntimeError(f"vramtrace {args[0]} exited {p.returncode}: "
                           f"{p.stderr.strip()[-300:]}")
    try:
        return one_device(json.loads(p.stdout))
    except json.JSONDecodeError as e:
        raise RuntimeError(f"vramtrace {args[0]} printed no JSON: {e}") from None


THIRD = re.compile(r"record one more run, at [a-z ]+? (\d+) \(nine tenths of the answer")
SITE = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?):(?P<line>\d+)\)$")


def site_key(site: str) -> str:
    """A site as both printers may name it, however much of its file's path
    each keeps: each frame's function, its file's name, its line (`USER via
    LIBRARY` each part)."""
    parts = []
    for part in str(site).split(" via "):
        m = SITE.match(part.strip())
        if m:
            file = Path(m["file"]).name
            parts.append(f"{m['function']} ({file}:{m['line']})")
        else:
            parts.append(part.strip())
    return " via ".join(parts)


def plan(binary: Path, case: Case, traces: list, clock: Clock, rep) -> dict | None:
    """`vramtrace plan` of the case's runs; their values from the
    annotations (else, a FAIL said, given on the command line)."""
    args = ["plan", *traces, "--step", str(case.step)]
    started = time.time()
    try:
        answer = analyzer(binary, args, clock)
        rep.check(True, f"{case.name}: plan reads each run's {case.varied} from its annotation",
                  f"{time.time() - started:.1f} s")
        return answer
    except RuntimeError as e:
        first = str(e)
    values = ",".join(str(v) for v in case.recorded)
    try:
        answer = analyzer(binary, [*args, f"--{case.varied}", values], clock)
    except RuntimeError as e:
        rep.add("FAIL", f"{case.name}: vramtrace plan", f"{first}; with --{case.varied} "
                f"{values}: {e}")
        return None
    rep.add("FAIL", f"{case.name}: plan reads each run's {case.varied} from its annotation",
            f"{first}; planned with --{case.varied} {values}")
    return answer


def check_case(rep, binary: Path, out: Path, env: dict, case: Case, clock: Clock) -> None:
    # The runs plan learns from.
    traces = []
    for value in case.recorded:
        run = run_program(case, value, env, out, clock)
        if not rep.check(run.fits, f"{case.name}: recorded at {value}",
                         f"{run.outcome()}, {run.seconds:.0f} s"):
            return
        traces.append(run.trace)
    result_ = plan(binary, case, traces, clock, rep)
    if result_ is None:
        return
    # The planner names a third run when two cannot show a size that stops
    # growing past them: record it, as a user would, and plan from all three.
    third = next((int(m[1]) for m in (THIRD.search(str(n)) for n in result_.get("notes", []))
                  if m), None)
    if third is not None:
        rep.add("INFO", f"{case.name}: the two runs' answer",
                str((result_.get("answer") or {}).get("line")))
        run = run_program(case, third, env, out, clock)
        if not rep.check(run.fits, f"{case.name}: recorded at {third}, the third run the plan "
                         "named", f"{run.outcome()}, {run.seconds:.0f} s"):
            return
        traces.append(run.trace)
        result_ = plan(binary, case, traces, clock, rep)
        if result_ is None:
            return
    (out / f"{case.slug}-plan.json").write_text(json.dumps(result_, indent=1))
    answer = result_.get("answer") or {}
    rep.add("INFO", f"{case.name}: the answer", str(answer.get("line")))
    for r in result_.get("runs", []):
        rep.check(r.get("reproduced") is True, f"{case.name}: the laws reproduce the run at "
                  f"{r.get('value')}",
                  f"peak reserved recorded {gib(r.get('peak_reserved_bytes'))}, model "
                  f"{gib(r.get('model_peak_reserved_bytes'))}; allocated recorded "
                  f"{gib(r.get('peak_allocated_bytes'))}, model "
                  f"{gib(r.get('model_peak_allocated_bytes'))}; {r.get('allocations')} allocations")
    rep.add("INFO", f"{case.name}: laws", "; ".join(
        f"{x.get('law')}: {x.get('setup_allocations', 0) + x.get('steady_allocations', 0)} "
        f"allocations, {gib(x.get('bytes'))}"
        for x in result_.get("laws", [])) + (f"; no law: {len(result_.get('no_law', []))} sites"
                                              if result_.get("no_law") else ""))
    for note in result_.get("notes", []):
        rep.add("INFO", f"{case.name}: plan's note", str(note))
    largest = answer.get("largest")
    if not rep.check(isinstance(largest, int) and not isinstance(largest, bool),
                     f"{case.name}: plan names a largest {case.varied}",
                     f"largest {largest!r}, unbounded {answer.get('unbounded')}, "
                     f"range {answer.get('range')}, cap {result_.get('cap_bytes')}"):
        return
    step = case.step
    predicted = ((answer.get("next") or {}).get("oom")) or {}
    fits_point = answer.get("fits") or {}

    # The card at `largest` and one step past it.
    at = run_program(case, largest, env, out, clock, "-card")
    past = run_program(case, largest + step, env, out, clock, "-card")
    for run in (at, past):
        rep.add("INFO", f"{case.name}: on the card at {run.value}",
                f"{run.outcome()}, {run.seconds:.0f} s")
    if not (at.fits or at.oom) or not (past.fits or past.oom):
        rep.add("FAIL", f"{case.name}: the runs at {largest} and {largest + step} finish or "
                "run out of memory", f"{at.outcome()}; {past.outcome()}")
        return
    failing: Run | None = None
    if at.fits and past.oom:
        real, failing = largest, past
    elif at.oom:
        below = (run_program(case, largest - step, env, out, clock, "-card")
                 if largest - step > 0 else None)
        if below is not None:
            rep.add("INFO", f"{case.name}: on the card at {below.value}", below.outcome())
        real = largest - step if below is not None and below.fits else None
        failing = at
    else:  # both fit
        beyond = run_program(case, largest + 2 * step, env, out, clock, "-card")
        rep.add("INFO", f"{case.name}: on the card at {beyond.value}", beyond.outcome())
        real = largest + step if beyond.oom else None
        failing = beyond if beyond.oom else None
    if real == largest:
        distance = "exact"
    elif real is not None:
        distance = f"one step off: the card's largest is {real}"
    else:
        distance = "more than one step off"
    rep.check(real is not None and abs(real - largest) <= step,
              f"{case.name}: largest {case.varied} {largest} (step {step}) against the card",
              f"{distance}; at {largest}: {at.outcome()}; at {largest + step}: {past.outcome()}")

    # Predicted against real figures at `largest`.
    if at.fits:
        r = at.result
        pr, pa = fits_point.get("peak_reserved_bytes"), fits_point.get("peak_allocated_bytes")
        diff = (f" ({(pr - r['max_reserved']) / r['max_reserved']:+.1%} reserved)"
                if isinstance(pr, int) and r.get("max_reserved") else "")
        rep.add("INFO", f"{case.name}: peaks at {largest}, predicted / card",
                f"reserved {gib(pr)} / {gib(r['max_reserved'])}, allocated {gib(pa)} / "
                f"{gib(r['max_allocated'])}{diff}")

    # The OOM's site: predicted against recorded at the first value that fails.
    if failing is None:
        rep.add("FAIL", f"{case.name}: the OOM's site", "no run on the card ran out of memory")
        return
    try:
        summary = analyzer(binary, ["summary", failing.trace], clock, most=90)
    except (RuntimeError, OutOfTime) as e:
        rep.add("FAIL", f"{case.name}: summary of the run at {failing.value}", str(e))
        return
    ooms = summary.get("ooms") or []
    if not rep.check(bool(ooms), f"{case.name}: the trace at {failing.value} has the OOM",
                     f"oom_count {summary.get('oom_count')}"):
        return
    # The last: the failure the run did not survive (a cuDNN workspace's
    # comes first and is survived: PyTorch tries the next algorithm).
    recorded = ooms[-1]
    same = (str(recorded.get("site")) == str(predicted.get("site"))
            or site_key(recorded.get("site", "")) == site_key(predicted.get("site", "")))
    detail = (f"predicted at {largest + step}: {predicted.get('site')!r} in "
              f"{predicted.get('phase')!r} asking {gib(predicted.get('requested_bytes'))}; "
              f"recorded at {failing.value}: {recorded.get('site')!r} in "
              f"{recorded.get('phase')!r} asking {gib(recorded.get('requested_bytes'))}")
    rep.check(same, f"{case.name}: the OOM's site as predicted", detail)


def setup_line(torch) -> str:
    versions = [f"torch {torch.__version__}"]
    for name in ("transformers", "torchvision"):
        try:
            versions.append(f"{name} {__import__(name).__version__}")
        except Exception as e:  # noqa: BLE001 - said in the setup line
            versions.append(f"{name} missing ({type(e).__name__})")
    return f"{torch.cuda.get_device_name(0)}, {', '.join(versions)}"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "child":
        return child(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="carry", help="folder with the vramtrace binary")
    ap.add_argument("--out", default=os.environ.get("OUT", "plan-check-out"))
    ap.add_argument("--cases", default=",".join(c.slug for c in CASES),
                    help="the cases to run, by name (default all)")
    ns = ap.parse_args(argv)
    clock = Clock(BUDGET_S)
    started = time.time()

    sys.path.insert(0, str(HERE.parent))
    import torch

    import gpu_report
    from gpu_report import Report

    out = Path(ns.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    binary = Path(ns.bin).resolve() / "vramtrace"
    env = gpu_report.child_env(out, HERE.parent)
    rep = Report()
    setup = setup_line(torch)
    print(f"{setup}, python {sys.version.split()[0]}; cap {CAP / GIB:.0f} GiB", flush=True)
    print("| result | check | detail |\n|---|---|---|", flush=True)
    wanted = set(ns.cases.split(","))
    unknown = wanted - {c.slug for c in CASES}
    if unknown:
        ap.error(f"unknown cases: {', '.join(sorted(unknown))}")
    for case in [c for c in CASES if c.slug in wanted]:
        try:
            check_case(rep, binary, out, env, case, clock)
        except OutOfTime as e:
            rep.add("FAIL", f"{case.name}: finished in time", str(e))
        except Exception as e:  # noqa: BLE001 - the next case still runs
            rep.add("FAIL", f"{case.name}: ran", f"{type(e).__name__}: {e}")
    return rep.finish("plan_check.py", f"{setup}, {time.time() - started:.0f} s",
                      out / "plan-check.md")


if __name__ == "__main__":
    sys.exit(main())
