"""GPU check for the pytest plugin (issue #33): an inner pytest session on a
real card, with real PyTorch. Checks that a test past its limit fails naming
its own line as the site at the peak, that a leaking test fails naming the
line that leaked, that passing tests pass, and that each recorded trace's
peak equals PyTorch's `max_memory_allocated()` for that test, to the byte.
Prints each check and exits non-zero if one fails.

    PYTHONPATH=python VRAMTRACE_LIB=.../libvramtrace_recorder.so \\
        VRAMTRACE_BIN=.../vramtrace python3 python/gpu/pytest_plugin_check.py --out OUTDIR
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from vramtrace.analysis import one_device

FAILED = []


def check(what: str, ok: bool, detail="") -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {what} {detail}", flush=True)
    if not ok:
        FAILED.append(what)


TESTS = '''
import json
import os
import pytest
import torch

MIB = 1 << 20
KEPT = []
PEAKS = {}


@pytest.fixture(autouse=True)
def truth(request):
    # PyTorch's own peak, kept for the outer check (what the plugin reads too).
    yield
    PEAKS[request.node.nodeid] = torch.cuda.max_memory_allocated()
    with open(os.environ["PEAKS_OUT"], "w") as f:
        json.dump(PEAKS, f)


@pytest.mark.limit_gpu_memory("256 MiB")
def test_over_the_limit():
    a = torch.empty(300 * MIB, dtype=torch.uint8, device="cuda")  # LINE_OVER
    del a


@pytest.mark.limit_gpu_memory("256 MiB")
def test_under_the_limit():
    a = torch.empty(100 * MIB, dtype=torch.uint8, device="cuda")
    del a


@pytest.mark.no_gpu_leak
def test_leaks():
    KEPT.append(torch.empty(64 * MIB, dtype=torch.uint8, device="cuda"))  # LINE_LEAK


@pytest.mark.no_gpu_leak(tolerance="1 MiB")
def test_clean():
    a = torch.ones(32 * MIB, dtype=torch.uint8, device="cuda")
    b = a * 2
    del a, b


def test_unmarked():
    x = torch.randn(1024, 1024, device="cuda")
    y = x @ x
    del x, y
'''


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    (out / "test_gpu_memory.py").write_text(textwrap.dedent(TESTS))
    env = dict(os.environ)
    root = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    env["PEAKS_OUT"] = str(out / "peaks.json")
    traces = out / "traces"
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "vramtrace.pytest_plugin", "-q", "-rf",
         f"--vramtrace={traces}", "test_gpu_memory.py"],
        cwd=out, env=env, capture_output=True, text=True, timeout=600)
    (out / "session.txt").write_text(p.stdout + p.stderr)
    print(p.stdout[-6000:], p.stderr[-2000:], flush=True)
    text = p.stdout
    check("two tests fail, three pass", "2 failed, 3 passed" in text)
    check("the limit failure is exact and names the excess",
          "peak allocated GPU memory 300.0 MiB passed the limit of 256.0 MiB by 44.0 MiB" in text)
    source = (out / "test_gpu_memory.py").read_text().splitlines()
    line_of = {tag: i + 1 for i, l in enumerate(source) for tag in ("LINE_OVER", "LINE_LEAK")
               if tag in l}
    test_file = out / "test_gpu_memory.py"
    check("the limit failure names the test's own line at the peak",
          f"test_over_the_limit ({test_file}:{line_of['LINE_OVER']})" in text,
          f"(line {line_of['LINE_OVER']})")
    check("the leak failure names the 64 MiB left behind",
          "64.0 MiB more GPU memory allocated after the test than before it" in text)
    check("the leak failure names the line that leaked",
          f"test_leaks ({test_file}:{line_of['LINE_LEAK']})" in text,
          f"(line {line_of['LINE_LEAK']})")
    check("the session shows no warning from vramtrace's own scans", "_categories.py" not in text)
    check("the table of peaks is printed", "GPU memory per test (vramtrace)" in text)
    peaks = json.loads((out / "peaks.json").read_text())
    vramtrace_bin = env.get("VRAMTRACE_BIN", "vramtrace")
    for nodeid, torch_peak in sorted(peaks.items()):
        from vramtrace.pytest_plugin import _safe_name
        candidates = [t for t in traces.glob("*.vtrace") if t.stem == _safe_name(nodeid)]
        if len(candidates) != 1:
            check(f"one trace for {nodeid}", False, f"{[c.name for c in candidates]}")
            continue
        s = subprocess.run([vramtrace_bin, "summary", "--json", str(candidates[0])],
                           capture_output=True, text=True)
        if s.returncode != 0:
            check(f"{nodeid}: trace readable", False, s.stderr.strip())
            continue
        peak = one_device(json.loads(s.stdout))["peak_allocated_bytes"]
        check(f"{nodeid}: trace peak = torch.cuda.max_memory_allocated()", peak == torch_peak,
              f"({peak} vs {torch_peak})")
    print(f"{len(FAILED)} failed", flush=True)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
