"""The PASS/FAIL table the GPU scripts (gpu_check.py, observer_check.py)
print and write to docs/gpu-check.md."""

from __future__ import annotations


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
