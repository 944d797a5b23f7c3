"""The fit planner from Python (issue #30), without a GPU: ``vramtrace.plan``
passes its options as the command line takes them; on synthetic traces its
answer is checked against synthetic runs at the values it names;
``python -m vramtrace run --annotate KEY=VALUE`` and notes made before
recording begins reach the trace.

The planner's tests need an analyzer with the ``plan`` command, and are
skipped where it has none. The GPU half is plan_check.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import vramtrace
from vramtrace import __main__ as cli

HERE = Path(__file__).resolve()
PACKAGE_PARENT = str(Path(vramtrace.__file__).resolve().parents[1])


def analyzer_has(*args: str) -> str:
    """The help of ``vramtrace ARGS --help``, or '' where the analyzer lacks it."""
    try:
        binary = vramtrace.analyzer_path()
    except vramtrace.AnalyzerError:
        return ""
    p = subprocess.run([os.fspath(binary), *args, "--help"], capture_output=True, text=True)
    return p.stdout if p.returncode == 0 else ""


needs_plan = pytest.mark.skipif(not analyzer_has("plan"),
                                reason="this analyzer has no `plan` command yet")


# -------------------------------------------------- options, without the planner


@pytest.fixture
def echo_analyzer(tmp_path, monkeypatch):
    """An analyzer that prints its arguments as JSON."""
    fake = tmp_path / "vramtrace"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    "print(json.dumps({'argv': sys.argv[1:]}))\n")
    fake.chmod(0o755)
    monkeypatch.setenv("VRAMTRACE_BIN", str(fake))


def options(argv: list) -> list:
    """The arguments less ``--text-to FILE`` (a temporary file)."""
    i = argv.index("--text-to")
    return argv[:i] + argv[i + 2:]


def test_plan_passes_its_options_as_the_command_line_takes_them(echo_analyzer):
    got = vramtrace.plan(["a.vtrace", Path("b.vtrace")], batch=[4, 8], capacity="20GiB",
                         reserve=0, alloc_conf=["expandable_segments:True"], step=2, at=30)
    assert options(got.argv) == [
        "plan", "--json", "--batch", "4,8", "--capacity", "20GiB", "--reserve", "0B",
        "--alloc-conf", "expandable_segments:True", "--step", "2", "--at", "30",
        "--", "a.vtrace", "b.vtrace"]
    got = vramtrace.plan("a.vtrace", seq=512, cap=1 << 30, gpu="h100")
    assert options(got.argv) == ["plan", "--json", "--seq", "512", "--gpu", "h100",
                                 "--cap", "1073741824B", "--", "a.vtrace"]


def test_a_trace_plans_with_others_and_its_device(echo_analyzer):
    run = vramtrace.Trace("a.vtrace", device=1)
    got = run.plan("b.vtrace", seq=[512, 1024])
    assert options(got.argv) == ["plan", "--json", "--seq", "512,1024", "--device", "1",
                                 "--", "a.vtrace", "b.vtrace"]
    assert options(run.plan(batch=4, device=0).argv)[-4:] == ["--device", "0", "--", "a.vtrace"]
    with pytest.raises(ValueError, match="one device of each run"):
        vramtrace.plan([run, vramtrace.Trace("b.vtrace", device=0)])


def test_plan_refuses_values_it_cannot_pass(echo_analyzer):
    for bad in ([4, True], "4,8", [4.0, 8], []):
        with pytest.raises(TypeError, match="batch is a whole number"):
            vramtrace.plan(["a", "b"], batch=bad)
    with pytest.raises(ValueError, match="batch or seq"):
        vramtrace.plan(["a", "b"], batch=[4, 8], seq=[1, 2])
    with pytest.raises(TypeError, match="step is a whole number"):
        vramtrace.plan(["a", "b"], step=1.5)
    with pytest.raises(ValueError, match="needs a trace"):
        vramtrace.plan([])


# -------------------------------------------------- the planner on synthetic runs


def synth(path: Path, batch: int, capacity=None, annotate=False) -> dict:
    """``vramtrace synth --json`` of the workload the tests plan."""
    args = [os.fspath(vramtrace.analyzer_path()), "synth", "--batch", str(batch),
            "--seq-len", "256", "--iters", "3", "--seed", "1", "-o", os.fspath(path), "--json"]
    if capacity is not None:
        args += ["--capacity", f"{capacity}B"]
    if annotate:
        args.append("--annotate")
    p = subprocess.run(args, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def capacity(tmp_path_factory) -> int:
    """A device size between the peaks of batch 16 and 17, unlimited: the
    answer lies past the recorded runs (4 and 8)."""
    tmp = tmp_path_factory.mktemp("capacity")
    at16 = synth(tmp / "16.vtrace", 16)["peak_reserved"]
    at17 = synth(tmp / "17.vtrace", 17)["peak_reserved"]
    assert at17 > at16, "the synthetic run grows with the batch"
    return (at16 + at17) // 2


def check_answer(result, capacity: int, tmp_path: Path, values=(4, 8)) -> None:
    """The answer's shape, and the answer against synthetic runs at the
    largest batch it names and one past it."""
    assert result.varied == "batch" and result.basis == "runs"
    assert [r.value for r in result.runs] == list(values)
    assert all(r.reproduced for r in result.runs), result.runs
    assert result.step == 1
    answer = result.answer
    largest = answer.largest
    assert isinstance(largest, int) and not isinstance(largest, bool), answer
    assert answer.unbounded is False
    assert answer.range == "beyond", answer.line
    assert isinstance(answer.line, str) and str(largest) in answer.line
    assert answer.fits.value == largest and answer.fits.fits is True
    assert answer.fits.oom is None
    assert answer.next.value == largest + 1 and answer.next.fits is False
    oom = answer.next.oom
    assert isinstance(oom.site, str) and oom.site, oom
    assert oom.requested_bytes > 0
    assert [p.value for p in result.points] == sorted(p.value for p in result.points)
    assert {largest, largest + 1} <= {p.value for p in result.points}
    # The answer, for real: the workload at `largest` fits, one more does not.
    fits = synth(tmp_path / "largest.vtrace", largest, capacity)
    assert fits["oom"] is None, (largest, fits)
    past = synth(tmp_path / "past.vtrace", largest + 1, capacity)
    assert past["oom"] is not None, (largest + 1, past)


@needs_plan
def test_plan_from_two_runs_given_their_batch(tmp_path, capacity):
    runs = [tmp_path / "b4.vtrace", tmp_path / "b8.vtrace"]
    for path, batch in zip(runs, (4, 8)):
        synth(path, batch)
    result = vramtrace.plan(runs, capacity=capacity, reserve=0, batch=[4, 8])
    assert result.capacity_bytes == capacity
    check_answer(result, capacity, tmp_path)
    # A value past the answer, in full.
    at = vramtrace.load(runs[0]).plan(runs[1], capacity=capacity, reserve=0, batch=[4, 8],
                                       at=result.answer.largest + 1).at
    assert at.value == result.answer.largest + 1 and at.fits is False
    assert at.oom.site == result.answer.next.oom.site


@needs_plan
@pytest.mark.skipif("--annotate" not in analyzer_has("synth"),
                    reason="this analyzer's synth writes no annotations yet")
def test_plan_from_two_runs_that_say_their_batch(tmp_path, capacity):
    runs = [tmp_path / "b4.vtrace", tmp_path / "b8.vtrace"]
    for path, batch in zip(runs, (4, 8)):
        synth(path, batch, annotate=True)
    check_answer(vramtrace.plan(runs, capacity=capacity, reserve=0), capacity, tmp_path)


@needs_plan
def test_plan_from_one_run_is_an_estimate(tmp_path, capacity):
    run = tmp_path / "b8.vtrace"
    synth(run, 8)
    result = vramtrace.plan(run, capacity=capacity, reserve=0, batch=8)
    assert result.basis == "one_run" and result.figures == "estimate"
    assert [r.value for r in result.runs] == [8]
    assert isinstance(result.answer.largest, int)


@needs_plan
def test_values_that_do_not_match_the_runs_are_an_analyzer_error(tmp_path):
    runs = [tmp_path / "b4.vtrace", tmp_path / "b8.vtrace"]
    for path, batch in zip(runs, (4, 8)):
        synth(path, batch)
    with pytest.raises(vramtrace.AnalyzerError):
        vramtrace.plan(runs, capacity="8GiB", batch=[4, 8, 16])


# ------------------------------------------------------------- annotations


def run_main(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vramtrace", *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": PACKAGE_PARENT})


def test_a_bad_annotation_is_a_one_line_usage_error(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('ran')\n")
    for bad in ("batch8", "=8"):
        p = run_main("run", "--annotate", bad, str(script))
        assert p.returncode == 2, p
        assert p.stderr.strip().splitlines() == [
            (f"error: python -m vramtrace run: argument --annotate: expected KEY=VALUE "
            f"(batch=8), got {bad!r} (see --help)")], p.stderr
        assert "ran" not in p.stdout


def test_run_annotates_once_recording_is_set_up(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint('args', sys.argv[1:])\n")
    calls = []
    monkeypatch.setattr(vramtrace, "start", lambda *a, **k: calls.append("start") or True)
    monkeypatch.setattr(vramtrace, "installed", lambda: True)
    monkeypatch.setattr(vramtrace, "annotate", lambda k, v: calls.append((k, v)))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert cli.main(["run", "--annotate", "batch=8", "--annotate", "note=a=b", str(script),
                     "--annotate", "x=1"]) == 0
    # The script's own `--annotate` is its argument.
    assert calls == ["start", ("batch", "8"), ("note", "a=b")]
    # Unrecorded (recording could not start), nothing is annotated.
    calls.clear()
    monkeypatch.setattr(vramtrace, "installed", lambda: False)
    assert cli.main(["run", "--annotate", "batch=8", str(script)]) == 0
    assert calls == ["start"]


# Notes made before recording begins, during it, and a trace begun later.
BEFORE_RECORDING = textwrap.dedent("""
    import ctypes, sys
    import vramtrace, torch_sink
    from vramtrace import _library
    lib = _library.load()
    vramtrace.annotate("batch", 8)  # before recording begins
    torch_sink.start(lib, sys.argv[1])
    sink = torch_sink.sink(lib)
    vramtrace.annotate("seq", 256)  # recording, before the device's trace begins
    event = torch_sink.TorchEvent(torch_sink.SEGMENT_ALLOC, 0, 1 << 40, 1 << 30, 0, 0, None)
    sink.event(ctypes.byref(event))
    vramtrace.annotate("step", 1)  # into the trace
    assert lib.vramtrace_observe_stop() == 0
""")


def test_notes_made_before_recording_begins_reach_the_trace(tmp_path):
    program = tmp_path / "notes.py"
    program.write_text(BEFORE_RECORDING)
    out = tmp_path / "notes.vtrace"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([PACKAGE_PARENT, str(HERE.parent)])}
    p = subprocess.run([sys.executable, str(program), str(out)], capture_output=True,
                       text=True, env=env)
    assert p.returncode == 0, p.stderr
    info = subprocess.run([os.fspath(vramtrace.analyzer_path()), "info", "--json", str(out)],
                          capture_output=True, text=True)
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["counts"].get("annotation") == 3, info.stdout
