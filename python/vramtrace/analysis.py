"""Analyze traces from Python, in a notebook or a script.

    import vramtrace

    run = vramtrace.load("run.vtrace")      # a trace, or a PyTorch snapshot
    run.summary().peak_allocated_bytes
    run.summary().categories.dominant        # what fills the peak: activations, ...
    run.leaks().leaks[0].site                # the fastest-leaking site
    run.timeline()                          # the chart, drawn inline by Jupyter
    run.timeline(by="category")             # stacked by what the memory holds
    vramtrace.compare("base.vtrace", run, fail_on="peak_allocated:+5%").gate.passed
    vramtrace.plan(["b4.vtrace", "b8.vtrace"], gpu="h100").answer.line   # the largest batch

Each method runs the ``vramtrace`` analyzer on the trace with ``--json`` and
returns what it printed as a :class:`Result`, a ``dict`` whose fields are
exactly those of the command's JSON (docs/analysis.md, docs/compare.md,
docs/simulate.md), readable as attributes too. The analyzer is the
``vramtrace`` command installed with this package; ``VRAMTRACE_BIN`` names
another.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar, Union

__all__ = [
    "AnalyzerError",
    "AnalyzerWarning",
    "Chart",
    "Result",
    "Trace",
    "analyzer_path",
    "compare",
    "load",
    "plan",
]

ANALYZER_NAME = "vramtrace"

PathLike = Union[str, "os.PathLike[str]"]
# A bound of the analyzed window: seconds since the trace start, a time with
# its unit ("1.5s", "300ms") or a phase name.
Bound = Union[None, int, float, str]


class AnalyzerError(RuntimeError):
    """The analyzer could not be run, or refused its input (the message is
    its one-line error)."""


class AnalyzerWarning(UserWarning):
    """The analyzer read its input with a warning (a trace cut short: the
    result covers what could be read)."""


class Result(dict[str, Any]):
    """One command's result: its JSON object, as a ``dict``.

    Fields also read as attributes (``summary.peak_allocated_bytes``), and so
    do those of nested objects. A field that shares its name with a ``dict``
    method (``values``, ``items``, ``keys``) reads by key only:
    ``sample["values"]``.

    Shown in a notebook or at the prompt, a command's result is its tables,
    as the command prints them (:meth:`text`), with its chart when one was
    drawn; ``dict(result)`` or ``json.dumps(result)`` is the JSON.

    :attr:`chart` is the command's chart where one was asked for.
    """

    chart: Chart | None = None
    # The command's tables, written by the same run as its JSON.
    _text: str | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(
                f"this result has no field {name!r} (fields: {', '.join(self)})"
            ) from None

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | {k for k in self if k.isidentifier()})

    def text(self) -> str:
        """The result as the command prints its tables (written by the same
        run as the JSON, with ``--text-to``); a nested part of a result has
        none: its ``dict`` is shown."""
        if self._text is None:
            if self.chart is not None:
                return f"<vramtrace result, fields {', '.join(self)}; .chart is its chart>"
            return dict.__repr__(self)
        return self._text

    def __repr__(self) -> str:
        return self.text()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text("..." if cycle else self.text())

    def _repr_html_(self) -> str | None:
        if self._text is None:
            return None
        import html
        chart = self.chart.svg if self.chart is not None else ""
        return f"{chart}<pre>{html.escape(self.text())}</pre>"

    def _repr_svg_(self) -> str | None:
        return self.chart.svg if self.chart is not None else None


class Chart:
    """An SVG chart drawn by the analyzer; Jupyter shows it inline."""

    def __init__(self, svg: str) -> None:
        self.svg = svg

    def _repr_svg_(self) -> str:
        return self.svg

    def save(self, path: PathLike) -> Path:
        """Writes the chart to ``path`` (an ``.svg`` file) and returns it."""
        path = Path(path)
        path.write_text(self.svg, encoding="utf-8")
        return path

    def __repr__(self) -> str:
        return f"<vramtrace.Chart: SVG, {len(self.svg):,} characters>"


def analyzer_path() -> Path:
    """The ``vramtrace`` analyzer that this module runs.

    ``VRAMTRACE_BIN`` if set; else the command installed with this package
    (in the scripts folder of this interpreter's environment, which a
    notebook kernel may not have on its ``PATH``); else ``vramtrace`` on the
    ``PATH``; else one built in the source tree this package sits in.
    """
    env = os.environ.get("VRAMTRACE_BIN")
    if env:
        path = Path(env)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise AnalyzerError(f"VRAMTRACE_BIN={env} is not an executable file")
        return path
    candidates = [Path(sysconfig.get_path("scripts")) / ANALYZER_NAME]
    try:  # pip install --user
        candidates.append(Path(sysconfig.get_path("scripts", f"{os.name}_user")) / ANALYZER_NAME)
    except KeyError:  # no such scheme here
        pass
    on_path = shutil.which(ANALYZER_NAME)
    if on_path:
        candidates.append(Path(on_path))
    # A source checkout: python/vramtrace -> <workspace>/target/release.
    here = Path(__file__).resolve().parent
    candidates += [parent / "target" / "release" / ANALYZER_NAME for parent in here.parents]
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise AnalyzerError(
        "the vramtrace analyzer was not found: install vramtrace with `pip "
        "install .` from its source tree, or build it with `cargo build "
        "--release -p vramtrace`, or set VRAMTRACE_BIN to its path"
    )


def _run(args: Sequence[str], ok_codes: Iterable[int] = (0,)) -> str:
    """Runs the analyzer and returns its standard output; its warnings
    become :class:`AnalyzerWarning` and its errors :class:`AnalyzerError`."""
    command = [os.fspath(analyzer_path()), *args]
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True,
                              errors="replace")
    except OSError as e:
        raise AnalyzerError(f"cannot run {command[0]}: {e.strerror or e}") from None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("warning: "):
            warnings.warn(line[len("warning: "):], AnalyzerWarning,
                          stacklevel=_caller_stacklevel())
    if done.returncode in ok_codes:
        return done.stdout
    errors = [line[len("error: "):] for line in lines if line.startswith("error: ")]
    if errors:
        raise AnalyzerError(errors[-1])
    if done.returncode < 0:
        raise AnalyzerError(f"`vramtrace {args[0]}` was killed by signal {-done.returncode}")
    last = lines[-1] if lines else "no message"
    raise AnalyzerError(f"`vramtrace {args[0]}` failed (exit code {done.returncode}): {last}")


def _caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside this module, for
    warnings that name the caller's line (Python 3.12's
    ``skip_file_prefixes``, on every version)."""
    level = 1
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        level, frame = level + 1, frame.f_back
    return level


def _bound(value: float | str) -> str:
    if isinstance(value, bool):
        raise TypeError("a window bound is a time in seconds, a time with its unit or a phase name")
    if isinstance(value, (int, float)):
        return f"{value}s"
    return value


def _window(start: Bound, end: Bound, full_stacks: bool, skip_frames: Sequence[str]) -> list[str]:
    """The options every replaying command shares."""
    args = []
    if start is not None:
        args += ["--from", _bound(start)]
    if end is not None:
        args += ["--to", _bound(end)]
    return [*args, *_switches(full_stacks=full_stacks), *_repeated("--skip-frames", skip_frames)]


def _repeated(flag: str, values: None | str | Sequence[str]) -> list[str]:
    """``FLAG VALUE`` for one value, or for each of a list."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    return [arg for value in values for arg in (flag, value)]


def _switches(**switches: bool) -> list[str]:
    """``--name`` for each keyword that is true (``full_stacks`` gives
    ``--full-stacks``)."""
    return ["--" + name.replace("_", "-") for name, on in switches.items() if on]


def _size(value: int | str) -> str:
    if isinstance(value, bool):
        raise TypeError("a size is a number of bytes or a string such as '24GiB'")
    return f"{value}B" if isinstance(value, int) else value


def _values(flag: str, values: None | int | Sequence[int]) -> list[str]:
    """``FLAG 4,8`` for a list of whole numbers, ``FLAG 8`` for one."""
    if values is None:
        return []
    if isinstance(values, int) and not isinstance(values, bool):
        values = [values]
    elif isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{flag[2:]} is a whole number or a list of them, one per trace")
    if not values or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise TypeError(f"{flag[2:]} is a whole number or a list of them, one per trace")
    return [flag, ",".join(str(v) for v in values)]


def _picked_device(traces: Sequence[PathLike], device: int | None) -> list[str]:
    """``--device N`` for a command of several traces: the one asked for,
    else the one the traces picked as :class:`Trace` objects."""
    if device is None:
        picked = {run.device for run in traces if isinstance(run, Trace) and run.device is not None}
        if len(picked) > 1:
            raise ValueError(
                f"plan takes one device of each run, by its index: the runs pick devices "
                f"{', '.join(str(d) for d in sorted(picked))} (pass device= to pick one for all)"
            )
        device = picked.pop() if picked else None
    return [] if device is None else ["--device", str(device)]


def _compared_device(base: PathLike, new: PathLike, device: int | None) -> list[str]:
    """``--device N`` for :func:`compare`: the one asked for, else the one
    the runs picked as :class:`Trace` objects."""
    if device is None:
        picked = {run.device for run in (base, new)
                  if isinstance(run, Trace) and run.device is not None}
        if len(picked) > 1:
            raise ValueError(
                f"compare takes one device of each run, by its index: device "
                f"{getattr(base, 'device', None)} of the baseline and device "
                f"{getattr(new, 'device', None)} of the new run "
                "differ (pass device= to pick one for both)"
            )
        device = picked.pop() if picked else None
    return [] if device is None else ["--device", str(device)]


# A JSON document: a plain dict, or a Result (kept as it came).
_Document = TypeVar("_Document", bound="dict[str, Any]")


def one_device(document: _Document) -> _Document:
    """A command's JSON document in the one shape results have, whatever the
    number of devices: the first device's result at the top, beside the
    whole document's ``schema_version``, ``rank``, ``warnings``, ``devices``
    (each device's peaks) and ``by_device`` (each device's result).

    Every command that analyzes each device prints one shape (docs/json.md):
    ``{schema_version, rank, warnings, devices, by_device}``. Lifting the
    first device's result keeps code written for one GPU working on a trace
    of two (``result.peak_allocated`` is the first device's; ``result.device``
    says which), and code written for several working on one
    (``for d in result.by_device``). A document of no per-device result
    (``info``, ``plan``, a rank table) is returned as it is. Works on any
    ``dict``, so scripts reading the CLI's JSON use it too.
    """
    by_device = document.get("by_device")
    if not isinstance(by_device, list) or not by_device or not isinstance(by_device[0], dict):
        return document
    one = type(document)(by_device[0])
    for key in ("schema_version", "rank", "warnings", "devices", "by_device"):
        if key in document and key not in one:
            one[key] = document[key]
    return one


def _decode(text: str, command: str) -> Result:
    try:
        value = json.loads(text, object_hook=Result)
    except json.JSONDecodeError as e:
        raise AnalyzerError(f"`vramtrace {command} --json` printed no JSON: {e}") from None
    if not isinstance(value, Result):
        raise AnalyzerError(f"`vramtrace {command} --json` printed no JSON object")
    return one_device(value)


def _json(command: str, options: Sequence[str], inputs: Sequence[PathLike],
          chart: bool = False, ok_codes: Iterable[int] = (0,),
          tables: bool = True) -> Result:
    """``vramtrace COMMAND --json OPTIONS -- INPUTS``, with its chart
    (``-o``) when ``chart``; shown, the result prints the command's tables
    when it has any (``tables``)."""
    paths = [os.fspath(p) for p in inputs]
    with tempfile.TemporaryDirectory(prefix="vramtrace-") as tmp:
        svg = os.path.join(tmp, "chart.svg")
        text = os.path.join(tmp, "tables.txt")
        outputs = [*(["-o", svg] if chart else []), *(["--text-to", text] if tables else [])]
        result = _decode(_run([command, "--json", *outputs, *options, "--", *paths], ok_codes),
                         command)
        if chart:
            try:
                result.chart = Chart(Path(svg).read_text(encoding="utf-8"))
            except FileNotFoundError:
                # The command had nothing to draw (no repeated phase, say).
                result.chart = None
        if tables:
            try:
                result._text = Path(text).read_text(encoding="utf-8").rstrip("\n")
            except FileNotFoundError:
                # An analyzer that wrote no tables: the result shows as its dict.
                result._text = None
    return result


class Trace:
    """A trace or PyTorch memory snapshot to analyze (see :func:`load`).

    ``device`` picks one device of a trace of several (a snapshot of a
    process driving two GPUs). Every result has one shape, whatever the
    number of devices (see :func:`one_device`): the first device's result
    (or the picked one's) at the top, with ``devices`` (each one's peaks)
    and ``by_device`` (each one's result) beside it. ``start`` and ``end``
    bound the analyzed window: seconds since the trace start (``1.5``), a
    time with its unit (``"300ms"``), or a phase name
    (its first begin, its last end). ``full_stacks`` shows whole stacks
    instead of folding each to its most telling frame; ``skip_frames`` are
    regular expressions of frames also skipped when folding.
    """

    def __init__(self, path: PathLike, device: int | None = None) -> None:
        self.path = Path(path)
        self.device = device
        self._info: Result | None = None

    def _device(self) -> list[str]:
        """``--device N`` when one device was picked."""
        return [] if self.device is None else ["--device", str(self.device)]

    def __repr__(self) -> str:
        device = "" if self.device is None else f", device={self.device}"
        return f"vramtrace.Trace({os.fspath(self.path)!r}{device})"

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def info(self) -> Result:
        """Header, duration, event counts and encoding (``vramtrace info``)."""
        if self._info is None:
            self._info = _json("info", [], [self.path])
        return self._info

    def summary(self, *, top: int = 10, start: Bound = None, end: Bound = None,
                full_stacks: bool = False, skip_frames: Sequence[str] = ()) -> Result:
        """Peaks with their phase, the top sites at the peak, OOMs, and the
        allocator's state at the peak (``vramtrace summary``)."""
        options = ["--top", str(top), *_window(start, end, full_stacks, skip_frames)]
        return _json("summary", [*options, *self._device()], [self.path])

    def leaks(self, *, top: int = 10, chart: bool = False, start: Bound = None,
              end: Bound = None, full_stacks: bool = False,
              skip_frames: Sequence[str] = ()) -> Result:
        """Memory retained per phase and per repetition, and the sites that
        leak (``vramtrace leaks``). ``chart`` also draws the growth of the
        leaking (or else the most repeated) phase."""
        options = ["--top", str(top), *_window(start, end, full_stacks, skip_frames)]
        return _json("leaks", [*options, *self._device()], [self.path], chart=chart)

    def fragmentation(self, *, buckets: int = 20, chart: bool = False,
                      x: str | None = None, start: Bound = None, end: Bound = None,
                      full_stacks: bool = False,
                      skip_frames: Sequence[str] = ()) -> Result:
        """Cached free memory, largest free block and fragmentation over
        ``buckets`` spans (``vramtrace fragmentation``) of equal width along
        ``x`` (as :meth:`timeline`: by default busy time for a snapshot,
        time for a trace); ``chart`` also draws them."""
        options = ["--buckets", str(buckets), *_window(start, end, full_stacks, skip_frames),
                   *(["--x", x] if x is not None else [])]
        return _json("fragmentation", [*options, *self._device()], [self.path], chart=chart)

    def timeline(self, *, by: str = "site", top: int = 8, x: str | None = None,
                 start: Bound = None, end: Bound = None, full_stacks: bool = False,
                 skip_frames: Sequence[str] = ()) -> Result:
        """Memory over time, stacked by ``by`` (``"site"``, ``"phase"`` or
        ``"none"``) with the ``top`` largest named (``vramtrace timeline``).

        The result holds the samples (``categories``, ``samples``) and the
        chart, which Jupyter draws inline; ``.chart.save("timeline.svg")``
        writes it. Its x axis is ``x``: ``"time"``, ``"events"`` (the event
        index) or ``"busy"`` (time with idle gaps cut short); by default busy
        time for a PyTorch snapshot (its history reaches back across long
        pauses) and for a trace whose start-up and pauses take a quarter of
        its span or more (its steps would be squeezed on a time axis), else
        time; ``x="time"`` gives the wall-clock axis.
        """
        options = ["--by", by, "--top", str(top), *(["--x", x] if x is not None else []),
                   *_window(start, end, full_stacks, skip_frames)]
        # Its text is only where the chart went: the chart is what shows.
        return _json("timeline", [*options, *self._device()], [self.path], chart=True,
                     tables=False)

    def simulate(self, *, capacity: None | int | str = None,
                 gpu: str | None = None, reserve: None | int | str = None,
                 alloc_conf: None | str | Sequence[str] = None,
                 compare_policies: bool = False, min_capacity: bool = False,
                 chart: bool = False) -> Result:
        """Replays the run's requests on another GPU size or allocator
        setting (``vramtrace simulate``): the verdict in one line
        (``.verdict.line``), peaks, retries, where it runs out of memory.

        ``capacity`` is the device's memory in bytes or with a unit
        (``"24GiB"`` binary, ``"80GB"`` decimal), or ``gpu`` names a card
        (``"h100"``, ``"a100-40gb"``, ...); unlimited if neither.
        ``reserve`` is the memory kept off the allocator for the CUDA
        context (an estimate when ``None``); ``alloc_conf`` one setting or a
        list of settings in ``PYTORCH_CUDA_ALLOC_CONF`` syntax, each
        simulated; ``compare_policies`` adds PyTorch's default and common
        settings; ``min_capacity`` finds each one's smallest capacity
        without an OOM; ``chart`` draws each one's memory over time.
        """
        options = [
            *(["--capacity", _size(capacity)] if capacity is not None else []),
            *(["--gpu", gpu] if gpu is not None else []),
            *(["--reserve", _size(reserve)] if reserve is not None else []),
            *_repeated("--alloc-conf", alloc_conf),
            *_switches(compare_policies=compare_policies, min_capacity=min_capacity),
        ]
        return _json("simulate", [*options, *self._device()], [self.path], chart=chart)

    def compare(self, new: PathLike, **options: Any) -> Result:
        """This run as the baseline of ``new``: see :func:`compare`."""
        return compare(self, new, **options)

    def plan(self, *others: PathLike, **options: Any) -> Result:
        """The largest batch (or sequence length) that fits, from this run
        and ``others``, runs of the same program at other values:
        ``run.plan("b8.vtrace", batch=[4, 8], gpu="h100")``, or from this
        run alone, ``run.plan(batch=4, gpu="h100")``. See :func:`plan`."""
        return plan([self, *others], **options)

    def report(self, output: PathLike, *, baseline: PathLike | None = None,
               top: int = 10, what_if: bool = True,
               reserve: None | int | str = None, start: Bound = None,
               end: Bound = None, full_stacks: bool = False,
               skip_frames: Sequence[str] = ()) -> Path:
        """Writes every analysis into one self-contained HTML page at
        ``output`` (``vramtrace report``), with its explorer, a comparison
        against ``baseline`` if given, and unless ``what_if`` is false, the
        recorded settings simulated at a range of GPU sizes, each keeping
        ``reserve`` off the allocator as :meth:`simulate` does; returns its
        path."""
        output = Path(output)
        args = ["report", "-o", os.fspath(output), "--top", str(top),
                *_window(start, end, full_stacks, skip_frames),
                *(["--reserve", _size(reserve)] if reserve is not None else []),
                *_switches(no_what_if=not what_if)]
        if baseline is not None:
            args += ["--baseline", os.fspath(baseline)]
        _run([*args, *self._device(), "--", os.fspath(self.path)])
        return output


def load(path: PathLike, device: int | None = None) -> Trace:
    """Opens a vramtrace trace or a PyTorch memory snapshot (a pickle from
    ``torch.cuda.memory._dump_snapshot``, plain or gzip/xz/zstd) for
    analysis.

    Reads its header at once (:meth:`Trace.info`), so that a missing file or
    one of another format fails here, with :class:`AnalyzerError`.
    ``device`` picks one device of a trace of several (see :class:`Trace`).
    """
    trace = Trace(path, device)
    trace.info()
    return trace


def compare(base: PathLike, new: PathLike, *, fail_on: None | str | Sequence[str] = None,
            ignore_lines: bool = False, per_iteration: bool = False, top: int = 15,
            chart: bool = False, align: str = "time", x: str | None = None,
            device: int | None = None, start: Bound = None,
            end: Bound = None, full_stacks: bool = False,
            skip_frames: Sequence[str] = ()) -> Result:
    """What grew between two runs, and where (``vramtrace compare``).

    ``device`` compares that device of each run; without it, the device a
    loaded :class:`Trace` picked (``load(path, device=1)``) is compared, in
    both runs. Runs that pick different devices are a ``ValueError``: the
    analyzer compares one device of each, by its index.

    ``fail_on`` are gate thresholds (``"peak_allocated:+5%"``, see
    docs/compare.md); a crossed threshold is no error: ``result.gate.passed``
    is then false and ``result.gate.failed`` lists it. ``ignore_lines``
    matches sites by function and file only; ``per_iteration`` compares
    figures per repetition of each run's most repeated phase; ``chart`` draws
    both timelines and the sites that changed most, on a time axis or
    ``align="repetition"``; aligned by time, its x axis is ``x`` (as
    :meth:`Trace.timeline`).
    """
    options = [
        "--top", str(top), *_window(start, end, full_stacks, skip_frames),
        *_repeated("--fail-on", fail_on),
        *_switches(ignore_lines=ignore_lines, per_iteration=per_iteration),
        *(["--align", align] if chart else []),
        *(["--x", x] if chart and x is not None else []),
        *_compared_device(base, new, device),
    ]
    # Exit code 1 is the gate's verdict, which the result carries.
    return _json("compare", options, [base, new], chart=chart, ok_codes=(0, 1))


def plan(traces: PathLike | Sequence[PathLike], *,
         batch: None | int | Sequence[int] = None,
         seq: None | int | Sequence[int] = None, gpu: str | None = None,
         capacity: None | int | str = None, cap: None | int | str = None,
         reserve: None | int | str = None,
         alloc_conf: None | str | Sequence[str] = None, step: int | None = None,
         at: int | None = None, device: int | None = None) -> Result:
    """The largest batch size (or sequence length) that fits on a GPU,
    from runs of one program recorded at other values (``vramtrace plan``).

    ``traces`` are two or more runs of the same program that differ in the
    batch size or in the sequence length. Their allocations are lined up,
    each one's size fitted as constant, linear or quadratic in the value,
    and the requests of a run at a new value made from those laws and
    replayed through the allocator's simulator, bisecting for the largest
    value that fits. ``answer.line`` says it in one line; ``answer.largest``
    is the value (``None`` when even the smallest does not fit, or when
    memory does not grow with it: ``answer.unbounded``); ``answer.fits`` and
    ``answer.next`` are the simulated runs at it and one ``step`` past it,
    with where that one runs out of memory (``next.oom.site``). ``runs``
    says, per trace, whether the laws reproduce its recorded peak. The
    figures are ``"inferred"`` from the laws; past the recorded values
    (``answer.range == "beyond"``) they are extrapolated.

    Each run's value is the one it recorded (``vramtrace.annotate("batch",
    8)``, ``"seq"`` for a sequence length, or ``python -m vramtrace run
    --annotate batch=8``), or is given here, one per trace in their order:
    ``batch=[4, 8]`` or ``seq=[512, 1024]``. From one trace (its value
    recorded, or ``batch=8``), the answer is an ``"estimate"``: activations
    and temporaries are taken to grow linearly with the value, the rest to
    stay.

    The GPU is ``gpu`` (a preset's name, ``"h100"``) or ``capacity`` (bytes,
    or a size with its unit, ``"24GiB"``), less ``reserve`` for the CUDA
    context as in :meth:`Trace.simulate`; or ``cap``, an allocator limit
    (``set_per_process_memory_fraction``), with nothing taken off. With none
    of these, the cap the traces recorded, else the card they were recorded
    on. A convolutional network's cuDNN workspaces are left out of
    ``answer.largest`` (near the limit cuDNN falls back to algorithms that
    need less); ``answer.largest_with_workspaces`` keeps them.
    ``alloc_conf`` is the allocator setting (``PYTORCH_CUDA_ALLOC_CONF``
    syntax; a list is passed on, one ``--alloc-conf`` each); ``step`` makes
    the values searched multiples of it (default 1); ``at`` also simulates
    the run at that value in full (``result.at``); ``device`` plans one
    device of traces of several (else the one loaded :class:`Trace` objects
    picked).
    """
    if isinstance(traces, (str, bytes, os.PathLike)):
        traces = [traces]
    traces = list(traces)
    if not traces:
        raise ValueError("plan needs a trace, or several runs of one program")
    if batch is not None and seq is not None:
        raise ValueError("plan varies one value: give batch or seq, not both")
    for name, value in (("step", step), ("at", at)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{name} is a whole number")
    options = [
        *_values("--batch", batch), *_values("--seq", seq),
        *(["--gpu", gpu] if gpu is not None else []),
        *(["--capacity", _size(capacity)] if capacity is not None else []),
        *(["--cap", _size(cap)] if cap is not None else []),
        *(["--reserve", _size(reserve)] if reserve is not None else []),
        *_repeated("--alloc-conf", alloc_conf),
        *(["--step", str(step)] if step is not None else []),
        *(["--at", str(at)] if at is not None else []),
        *_picked_device(traces, device),
    ]
    return _json("plan", options, traces)
