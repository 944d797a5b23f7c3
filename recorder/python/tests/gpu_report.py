"""The PASS/FAIL table the GPU scripts (gpu_check.py, observer_check.py,
multi_gpu_check.py) print and write for docs/gpu-check.md."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path


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
