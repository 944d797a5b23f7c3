"""What the GPU scripts (gpu_check.py, observer_check.py,
multi_gpu_check.py, categories_check.py) share: the PASS/FAIL table they
print and write for docs/gpu-check.md, and running a script's child
workloads (natively or recorded) and the analyzer."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

from vramtrace.analysis import one_device


def run(cmd, env=None, timeout=900) -> subprocess.CompletedProcess:
    """Runs `cmd`, its output captured as text."""
    return subprocess.run(cmd, env=env, timeout=timeout, capture_output=True, text=True)


def child(script: Path, args: list, env: dict, trace: str | None = None, extra=(),
          timeout: int = 900) -> tuple:
    """Runs `script child ARGS...` natively, or under `python -m vramtrace
    run --out TRACE EXTRA...` when `trace` is given; returns (the object of
    its last `RESULT {json}` line or None, the finished process)."""
    if trace is None:
        cmd = [sys.executable, str(script), "child", *args]
    else:
        cmd = [sys.executable, "-m", "vramtrace", "run", "--out", trace, *extra,
               str(script), "child", *args]
    p = run(cmd, env=env, timeout=timeout)
    found = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            found = json.loads(line[7:])
    return found, p


def child_env(out: Path, scripts: Path) -> dict:
    """The environment of a script's children: this one's, with the
    scripts' folder importable and a shim cache in `out` unless one is set
    (a cache shared between checks run side by side: its build is locked)."""
    env = dict(os.environ)
    env.setdefault("VRAMTRACE_CACHE", str(out / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(scripts), env.get("PYTHONPATH")] if p)
    return env


def tail(p: subprocess.CompletedProcess) -> str:
    """The end of a process's output, on one line."""
    return (p.stdout[-600:] + p.stderr[-1200:]).strip().replace("\n", " / ")


def vt(binary: Path, *args) -> dict:
    """What `vramtrace ARGS... --json` printed."""
    p = run([str(binary), *args, "--json"])
    if p.returncode != 0:
        raise RuntimeError(f"vramtrace {' '.join(args)}: {p.stderr.strip()[:300]}")
    return one_device(json.loads(p.stdout))


class Report:
    """Rows `| result | check | detail |`, printed as they come."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.failed = 0

    def add(self, status: str, name: str, detail: str = "") -> None:
        if status == "FAIL":
            self.failed += 1
        line = f"| {status} | {name} | {detail.replace('|', '/')} |"
        self.lines.append(line)
        print(line, flush=True)

    def check(self, ok: bool, name: str, detail: str = "") -> bool:
        self.add("PASS" if ok else "FAIL", name, detail)
        return ok

    def finish(self, script: str, setup: str, path: Path) -> int:
        """Writes the table to `path` under a heading naming the script, the
        time and `setup` (the machine and versions); prints the failures'
        count and returns the exit status."""
        now = datetime.datetime.now(datetime.timezone.utc)
        header = (f"# {script}, {now:%Y-%m-%d %H:%M} UTC\n\n{setup}, "
                  f"python {sys.version.split()[0]}\n\n| result | check | detail |\n|---|---|---|\n")
        path.write_text(header + "\n".join(self.lines) + "\n")
        print(f"\n{self.failed} failed", flush=True)
        return 1 if self.failed else 0
