"""The notebook magics: ``%load_ext vramtrace``, then

- ``%%vramtrace`` on a cell records its GPU memory and shows the cell's
  summary table and timeline below it (the cell's own output first);
- ``%vramtrace_report`` shows the last recorded cell's report (the HTML
  explorer) inline.

``%%vramtrace --out cell.vtrace --by phase --top 5`` keeps the trace at
``cell.vtrace`` and stacks the timeline by phase with the 5 largest named.
Without a GPU (or where recording cannot start) the cell runs unrecorded
and one line says why.
"""

from __future__ import annotations

import argparse
import base64
import html
import shlex
import tempfile
from pathlib import Path

_BY = ("site", "phase", "category", "none")


class MagicUsage(ValueError):
    """Arguments a magic cannot use; the message is one line."""


class _Parser(argparse.ArgumentParser):
    # An error is the magic's one line, never an exit of the kernel.
    def error(self, message: str):
        raise MagicUsage(message)


def _parser(name: str) -> argparse.ArgumentParser:
    p = _Parser(prog=f"%%{name}", add_help=False)
    p.add_argument("--out", default=None)
    p.add_argument("--by", default="site", choices=_BY)
    p.add_argument("--top", type=int, default=8)
    p.add_argument("--stacks", default=None, choices=("python", "native", "all", "none"))
    return p


def parse_cell_line(line: str) -> argparse.Namespace:
    """The options of ``%%vramtrace``; :class:`MagicUsage` names the valid
    ones when a word is not one."""
    try:
        words = shlex.split(line)
        args, extra = _parser("vramtrace").parse_known_args(words)
    except (argparse.ArgumentError, ValueError) as e:  # MagicUsage is a ValueError
        raise MagicUsage(f"%%vramtrace: {e}; options: --out PATH, --by {'|'.join(_BY)}, "
                         "--top N, --stacks python|native|all|none") from None
    if extra:
        raise MagicUsage(f"%%vramtrace: unknown {' '.join(extra)!r}; options: --out PATH, "
                         f"--by {'|'.join(_BY)}, --top N, --stacks python|native|all|none")
    if args.top < 1:
        raise MagicUsage("%%vramtrace: --top must be at least 1")
    return args


class CellRecorder:
    """Records cells and keeps the last one's trace (the magics' state)."""

    def __init__(self) -> None:
        self.last: Path | None = None
        self._scratch: tempfile.TemporaryDirectory | None = None

    def _path(self, out: str | None) -> Path:
        if out:
            return Path(out)
        if self._scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="vramtrace-cells-")
        cell = len(list(Path(self._scratch.name).glob("cell-*.vtrace"))) + 1
        return Path(self._scratch.name) / f"cell-{cell}.vtrace"

    def record(self, run_cell, line: str, display) -> None:
        """Runs the cell through ``run_cell`` while recording, then shows its
        summary and timeline with ``display``."""
        import vramtrace
        try:
            args = parse_cell_line(line)
        except MagicUsage as e:
            print(e)
            return
        path = self._path(args.out)
        try:
            started = vramtrace.start(str(path), stacks=args.stacks, strict=True)
        except Exception as e:  # noqa: BLE001 - no CUDA, no compiler for the shim, already recording
            # Started strictly only to learn why: the user asked for
            # nothing strict, so the line gives the reason alone.
            why = getattr(e, "reason", None) or str(e)
            first = why.splitlines()[0] if why else type(e).__name__
            print(f"vramtrace: the cell runs unrecorded: {first}")
            run_cell()
            return
        try:
            run_cell()
        finally:
            if started:
                vramtrace.stop()
        self.last = path
        trace = vramtrace.load(path)
        display(trace.summary(top=args.top))
        display(trace.timeline(by=args.by, top=args.top).chart)

    def report(self, line: str, display) -> None:
        """Shows the last recorded cell's report inline."""
        import vramtrace
        if line.strip():
            print("%vramtrace_report takes no arguments: it shows the last %%vramtrace cell's report")
            return
        if self.last is None:
            print("%vramtrace_report: no cell recorded yet: run one under %%vramtrace first")
            return
        page = self.last.with_suffix(".html")
        vramtrace.load(self.last).report(page)
        display(ReportFrame(page))


class ReportFrame:
    """A report page shown in an iframe of the notebook (its scripts run in
    the frame, apart from the notebook's)."""

    def __init__(self, page: Path, height: int = 900) -> None:
        self.page = page
        self.height = height

    def _repr_html_(self) -> str:
        data = base64.b64encode(self.page.read_bytes()).decode("ascii")
        return (f'<iframe src="data:text/html;base64,{data}" width="100%" '
                f'height="{self.height}" style="border:1px solid #ccc" '
                f'title="{html.escape(self.page.name)}"></iframe>')

    def __repr__(self) -> str:
        return f"<vramtrace report {self.page}>"


def load_ipython_extension(ipython) -> None:
    """``%load_ext vramtrace``: registers ``%%vramtrace`` and ``%vramtrace_report``."""
    from IPython.display import display

    cells = CellRecorder()

    def cell_magic(line: str, cell: str) -> None:
        cells.record(lambda: ipython.run_cell(cell), line, display)

    def report_magic(line: str) -> None:
        cells.report(line, display)

    ipython.register_magic_function(cell_magic, "cell", "vramtrace")
    ipython.register_magic_function(report_magic, "line", "vramtrace_report")
