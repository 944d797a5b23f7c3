"""GPU memory checks for pytest, installed with vramtrace (a ``pytest11``
entry point: nothing to configure).

Markers:

- ``@pytest.mark.limit_gpu_memory("2 GiB")`` fails a test whose peak
  allocated memory passes the limit; ``kind="reserved"`` checks the
  allocator's reserved memory instead.
- ``@pytest.mark.no_gpu_leak`` fails a test that leaves more memory
  allocated after it than before it; ``tolerance="1 MiB"`` allows that much.

The figures are PyTorch's own (``torch.cuda.max_memory_allocated()`` after
``reset_peak_memory_stats()``, ``memory_allocated()`` before and after the
test): exact. While a marked test runs, vramtrace records it, so that a
failure names the sites at the peak (or the sites of the blocks left
behind) and the categories, from the trace, and keeps the trace.

``pytest --vramtrace[=DIR]`` records every test to a trace of its own in
DIR (default ``vramtrace-tests``) and prints each test's peaks at the end.

Without CUDA (no torch, or no device) the checks are skipped, and the
session says so once; a test never fails for lack of a GPU.
"""

from __future__ import annotations

import gc
import hashlib
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from . import _library

_SIZE_FORMS = "an int of bytes, or a number with a unit: '2 GiB', '512MiB', '1.5 GB'"
_KINDS = ("allocated", "reserved")
_DEFAULT_DIR = "vramtrace-tests"


class SizeError(ValueError):
    """A size a marker cannot use; its message names the valid forms."""


def parse_size(value) -> int:
    """Bytes from an int or a string with a unit (``"2 GiB"``, ``"1.5GB"``),
    in the grammar every part of vramtrace reads sizes with (the library's).

    A bare number in a string is refused: "2" could mean bytes or GiB.
    """
    if isinstance(value, bool):
        raise SizeError(f"{value!r} is not a size: write {_SIZE_FORMS}")
    if isinstance(value, int):
        if value < 0:
            raise SizeError(f"{value} is negative: write {_SIZE_FORMS}")
        return value
    if isinstance(value, str):
        try:
            return _library.parse_size(value)
        except ValueError as e:
            raise SizeError(f"{value!r}: {e}; write {_SIZE_FORMS}") from None
    raise SizeError(f"{value!r} is not a size: write {_SIZE_FORMS}")


def human(n: int) -> str:
    """Bytes in binary units, as the analyzer prints them."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{sign}{n / scale:.1f} {unit}"
    return f"{sign}{n} B"


@dataclass
class Limit:
    """A ``limit_gpu_memory`` marker, read."""
    bytes: int
    kind: str


@dataclass
class Measure:
    """One test's memory, from PyTorch's counters on its current device."""
    device: int
    before_allocated: int
    after_allocated: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0


@dataclass
class TestRecord:
    """What the plugin saw of one test."""
    nodeid: str
    measure: Measure | None = None
    trace: Path | None = None
    keep_trace: bool = False


class Cuda:
    """PyTorch's CUDA counters, or None where there is no torch or no device.

    Tests replace it with a fake (the plugin reads the counters through it
    only)."""

    def __init__(self) -> None:
        self.why_not: str | None = None
        # torch, once imported and CUDA found (untyped: torch is optional).
        self.torch: Any = None
        try:
            import torch  # the program's own torch
        except Exception as e:  # noqa: BLE001 - ImportError, or a broken install
            self.why_not = f"torch cannot be imported ({type(e).__name__})"
            return
        try:
            available = torch.cuda.is_available()
        except Exception as e:  # noqa: BLE001 - whatever a broken CUDA raises
            self.why_not = f"CUDA cannot be queried ({type(e).__name__}: {e})"
            return
        if not available:
            self.why_not = "no CUDA device"
            return
        self.torch = torch

    @property
    def available(self) -> bool:
        return self.torch is not None

    def begin(self) -> Measure:
        t = self.torch
        gc.collect()
        t.cuda.synchronize()
        device = t.cuda.current_device()
        t.cuda.reset_peak_memory_stats(device)
        return Measure(device=device, before_allocated=t.cuda.memory_allocated(device))

    def end(self, m: Measure) -> None:
        t = self.torch
        # What the test still references is gone once it returned: collect
        # cycles so that only what it left behind counts.
        gc.collect()
        t.cuda.synchronize()
        m.after_allocated = t.cuda.memory_allocated(m.device)
        m.peak_allocated = t.cuda.max_memory_allocated(m.device)
        m.peak_reserved = t.cuda.max_memory_reserved(m.device)


def _safe_name(nodeid: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_.")
    return (name or "test")[:150]


class Plugin:
    """The session's state: the option, where traces go, what was seen."""

    def __init__(self, config) -> None:
        self.config = config
        option = config.getoption("vramtrace")
        self.record_all = option is not None
        self.trace_dir = Path(option) if option else None
        self.scratch: Path | None = None
        self._cuda: Cuda | None = None
        self.records: list[TestRecord] = []
        self.skipped_checks = 0
        self.recording_failed: str | None = None
        # The trace names given, and to which test: none is given twice.
        self.names: dict[str, str] = {}

    # What is made lazily: torch is imported only once a test needs it.
    @property
    def cuda(self) -> Cuda:
        if self._cuda is None:
            self._cuda = Cuda()
        return self._cuda

    def trace_path(self, nodeid: str) -> Path:
        if self.record_all:
            assert self.trace_dir is not None
            self.trace_dir.mkdir(parents=True, exist_ok=True)
            folder = self.trace_dir
        else:
            if self.scratch is None:
                self.scratch = Path(tempfile.mkdtemp(prefix="vramtrace-pytest-"))
            folder = self.scratch
        return folder / f"{self._unique_name(nodeid)}.vtrace"

    def _unique_name(self, nodeid: str) -> str:
        """The test's file name, readable, and no other test's of the
        session: two node ids can make one safe name (characters replaced,
        names cut at 150), so the second gets its id's hash beside it."""
        name = _safe_name(nodeid)
        owner = self.names.setdefault(name, nodeid)
        if owner != nodeid:
            digest = hashlib.sha256(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:12]
            name = f"{name[:137]}-{digest}"
            self.names[name] = nodeid
        return name

    def start_recording(self, path: Path) -> bool:
        import vramtrace
        try:
            return bool(vramtrace.start(str(path), strict=True))
        except Exception as e:  # noqa: BLE001 - VramtraceError: no shim, an unsupported torch
            self.recording_failed = str(e).splitlines()[0] if str(e) else type(e).__name__
            return False

    @staticmethod
    def stop_recording() -> None:
        import vramtrace
        vramtrace.stop()

    def cleanup(self) -> None:
        if self.scratch is None:
            return
        kept = {r.trace for r in self.records if r.keep_trace}
        for path in self.scratch.glob("*"):
            if path not in kept:
                path.unlink(missing_ok=True)
        if not any(self.scratch.iterdir()):
            shutil.rmtree(self.scratch, ignore_errors=True)


_KEY = pytest.StashKey[Plugin]() if hasattr(pytest, "StashKey") else "vramtrace_plugin"


def _plugin(config) -> Plugin:
    if isinstance(_KEY, str):
        return getattr(config, _KEY)
    return config.stash[_KEY]


def pytest_addoption(parser) -> None:
    group = parser.getgroup("vramtrace", "GPU memory (vramtrace)")
    group.addoption(
        "--vramtrace", nargs="?", const=_DEFAULT_DIR, default=None, metavar="DIR",
        help=f"record every test's GPU memory to a trace of its own in DIR (default {_DEFAULT_DIR}) "
             "and print each test's peaks at the end",
    )


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers",
        "limit_gpu_memory(limit, kind='allocated'): fail the test if its peak GPU memory "
        "(allocated, or reserved) passes the limit ('2 GiB', '512 MiB', or bytes)",
    )
    config.addinivalue_line(
        "markers",
        "no_gpu_leak(tolerance=0): fail the test if it leaves more GPU memory allocated "
        "after it than before it, beyond the tolerance",
    )
    plugin = Plugin(config)
    if isinstance(_KEY, str):
        setattr(config, _KEY, plugin)
    else:
        config.stash[_KEY] = plugin


def _limit_of(item) -> Limit | None:
    marker = item.get_closest_marker("limit_gpu_memory")
    if marker is None:
        return None
    if len(marker.args) != 1:
        raise SizeError(f"limit_gpu_memory takes one limit: write {_SIZE_FORMS}")
    kind = marker.kwargs.get("kind", "allocated")
    if kind not in _KINDS:
        raise SizeError(f"limit_gpu_memory: kind={kind!r} is not one of {', '.join(_KINDS)}")
    return Limit(parse_size(marker.args[0]), kind)


def _tolerance_of(item) -> int | None:
    marker = item.get_closest_marker("no_gpu_leak")
    if marker is None:
        return None
    value = marker.kwargs.get("tolerance", marker.args[0] if marker.args else 0)
    return parse_size(value)


def _trace_facts(trace: Path, *, leaks: bool) -> str:
    """The sites and categories a failure names, from the test's trace; a
    note instead when the trace cannot be read."""
    import vramtrace
    try:
        t = vramtrace.load(trace)
        lines = []
        if leaks:
            result = t.leaks(top=5)
            sites = result.get("never_freed") or []
            if sites:
                lines.append("left behind, by site (exact, from the trace):")
                for s in sites[:5]:
                    lines.append(f"  {human(s['bytes']):>10}  {s['count']:>5} blocks  {s['site']}")
        else:
            result = t.summary(top=5)
            sites = result.get("top_sites_at_peak") or []
            if sites:
                lines.append("live at the allocated peak, by site (exact, from the trace):")
                for s in sites[:5]:
                    lines.append(
                        f"  {human(s['bytes']):>10}  {s['count']:>5} blocks  {s.get('category', ''):<16} {s['site']}")
            cats = (result.get("categories") or {}).get("at_allocated_peak") or []
            cats = [c for c in cats if c.get("bytes")]
            if cats:
                source = (result.get("categories") or {}).get("source", "")
                how = "exact where tagged, else inferred" if source == "tags" else "inferred"
                lines.append(f"by category ({how}): " + ", ".join(
                    f"{c['category']} {human(c['bytes'])}" for c in cats))
        lines.append(f"trace: {trace}")
        return "\n".join(lines)
    except Exception as e:  # noqa: BLE001 - the report goes on without this trace
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        return f"(the trace {trace} could not be analyzed: {first})"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    plugin = _plugin(item.config)
    bad_marker = None
    try:
        limit = _limit_of(item)
        tolerance = _tolerance_of(item)
    except SizeError as e:
        bad_marker = str(e)
    if bad_marker is not None:
        # The marker is wrong: the test fails with one line naming the forms
        # (outside the except block, where pytest would print the
        # SizeError again as the failure's context).
        pytest.fail(bad_marker, pytrace=False)
    wanted = limit is not None or tolerance is not None
    if not (wanted or plugin.record_all):
        yield
        return
    cuda = plugin.cuda
    if not cuda.available:
        if wanted:
            plugin.skipped_checks += 1
        yield
        return
    record = TestRecord(item.nodeid)
    plugin.records.append(record)
    path = plugin.trace_path(item.nodeid)
    # PyTorch's peak is reset first, then the trace begins: the trace's peak
    # is the test's, as max_memory_allocated() reads it.
    record.measure = cuda.begin()
    recording = plugin.start_recording(path)
    outcome = yield
    try:
        cuda.end(record.measure)
    finally:
        if recording:
            plugin.stop_recording()
            record.trace = path
    if outcome.excinfo is not None:
        return
    m = record.measure
    failures = []
    if limit is not None:
        peak = m.peak_allocated if limit.kind == "allocated" else m.peak_reserved
        if peak > limit.bytes:
            failures.append((
                (f"peak {limit.kind} GPU memory {human(peak)} passed the limit of {human(limit.bytes)} "
                f"by {human(peak - limit.bytes)} (exact: torch.cuda.max_memory_{limit.kind}(), device {m.device})"),
                False))
    if tolerance is not None:
        grown = m.after_allocated - m.before_allocated
        if grown > tolerance:
            failures.append((
                (f"{human(grown)} more GPU memory allocated after the test than before it "
                f"({human(m.before_allocated)} -> {human(m.after_allocated)}; tolerance {human(tolerance)}; "
                f"exact: torch.cuda.memory_allocated(), device {m.device})"),
                True))
    if not failures:
        return
    parts = []
    for message, leaks in failures:
        parts.append(message)
        if record.trace is not None:
            parts.append(_trace_facts(record.trace, leaks=leaks))
        elif plugin.recording_failed:
            parts.append(f"(no sites: recording could not start: {plugin.recording_failed})")
    record.keep_trace = True
    failed = pytest.fail.Exception("\n".join(parts), pytrace=False)
    if hasattr(outcome, "force_exception"):
        outcome.force_exception(failed)
    else:  # pluggy before 1.1: an exception after the yield is the test's
        raise failed


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    plugin = _plugin(config)
    tr = terminalreporter
    if plugin.skipped_checks:
        why = plugin.cuda.why_not or "no CUDA device"
        tr.write_line(
            f"vramtrace: GPU memory checks of {plugin.skipped_checks} test(s) skipped: {why}",
            yellow=True)
    elif plugin.record_all and not plugin.cuda.available:
        tr.write_line(f"vramtrace: nothing recorded: {plugin.cuda.why_not}", yellow=True)
    if plugin.record_all and plugin.records:
        tr.section("GPU memory per test (vramtrace)")
        for line in peak_table(plugin.records):
            tr.write_line(line)
    kept = [r.trace for r in plugin.records if r.keep_trace and r.trace is not None]
    if kept and not plugin.record_all:
        tr.write_line(f"vramtrace: traces of the failing GPU memory checks kept in {kept[0].parent}")
    plugin.cleanup()


def peak_table(records: list[TestRecord]) -> list[str]:
    """Each recorded test's peaks, largest allocated peak first: an aligned
    table, figures exact (PyTorch's counters)."""
    rows: list[tuple[str, ...]] = [("peak allocated", "peak reserved", "left allocated", "test")]
    measured = [(r, r.measure) for r in records if r.measure is not None]
    measured.sort(key=lambda rm: -rm[1].peak_allocated)
    for r, m in measured:
        rows.append((human(m.peak_allocated), human(m.peak_reserved),
                     human(m.after_allocated - m.before_allocated), r.nodeid))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [
        "  ".join(cell.rjust(w) for cell, w in zip(row[:3], widths)) + "  " + row[3]
        for row in rows
    ]
    lines.append("figures exact (torch.cuda.max_memory_allocated/reserved and memory_allocated); "
                 "one trace per test in the --vramtrace folder")
    return lines
