"""The notebook magics (vramtrace/_jupyter.py) in a real IPython shell,
without a GPU: recording is stood in for by copying a bundled trace, so the
cell's summary and timeline, the report, and the messages are what a
notebook shows."""

import shutil
from pathlib import Path

import pytest

IPython = pytest.importorskip("IPython")

import vramtrace  # noqa: E402
from vramtrace._jupyter import MagicUsage, ReportFrame, parse_cell_line  # noqa: E402

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "leak.vtrace"


@pytest.fixture
def shell(monkeypatch):
    """An IPython shell with the extension loaded; what it displays is kept."""
    from IPython.testing.globalipapp import get_ipython
    ip = get_ipython()
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj: shown.append(obj))
    ip.run_line_magic("load_ext", "vramtrace")
    ip.shown = shown
    yield ip
    ip.run_line_magic("reload_ext", "vramtrace")


def fake_recording(monkeypatch, calls):
    def start(out, **options):
        calls.append(("start", out, options))
        shutil.copy(FIXTURE, out)
        return True

    monkeypatch.setattr(vramtrace, "start", start)
    monkeypatch.setattr(vramtrace, "stop", lambda: calls.append(("stop",)))


def test_a_recorded_cell_runs_then_shows_its_summary_and_timeline(shell, monkeypatch, tmp_path):
    calls = []
    fake_recording(monkeypatch, calls)
    out = tmp_path / "cell.vtrace"
    shell.run_cell(f"%%vramtrace --out {out} --by phase --top 3\nran = 6 * 7\n")
    assert shell.user_ns["ran"] == 42
    assert [c[0] for c in calls] == ["start", "stop"]
    assert calls[0][1] == str(out)
    summary, chart = shell.shown
    assert summary.peak_allocated_bytes > 0
    assert "top sites live at the allocated peak" in summary.text()
    assert chart.svg.lstrip().startswith("<svg") or "<svg" in chart.svg[:400]
    # The report of that cell, inline.
    shell.shown.clear()
    shell.run_line_magic("vramtrace_report", "")
    (frame,) = shell.shown
    assert isinstance(frame, ReportFrame)
    assert frame._repr_html_().startswith('<iframe src="data:text/html;base64,')
    assert frame.page == out.with_suffix(".html")


def test_a_cell_that_raises_still_stops_recording(shell, monkeypatch, tmp_path):
    calls = []
    fake_recording(monkeypatch, calls)
    shell.run_cell(f"%%vramtrace --out {tmp_path / 'c.vtrace'}\nraise ValueError('in the cell')\n")
    assert [c[0] for c in calls] == ["start", "stop"]


def test_without_recording_the_cell_runs_and_one_line_says_why(shell, monkeypatch, capsys):
    def start(out, **options):
        raise vramtrace.VramtraceError("no CUDA device\nmore detail")

    monkeypatch.setattr(vramtrace, "start", start)
    shell.run_cell("%%vramtrace\nran = 1\n")
    assert shell.user_ns["ran"] == 1
    assert shell.shown == []
    assert "vramtrace: the cell runs unrecorded: no CUDA device" in capsys.readouterr().out


def test_a_cell_unrecorded_says_why_without_a_strictness_it_did_not_ask_for(
        shell, monkeypatch, capsys):
    # The magic starts strictly to learn why recording cannot start; the
    # user asked for nothing strict, so the line says only why.
    from vramtrace import _observer

    def start(out, strict=None, **options):
        return _observer._give_up("no CUDA device", _observer._strict(strict))

    monkeypatch.setattr(vramtrace, "start", start)
    shell.run_cell("%%vramtrace\nran = 1\n")
    assert shell.user_ns["ran"] == 1
    out = capsys.readouterr().out
    assert out.strip() == "vramtrace: the cell runs unrecorded: no CUDA device", out


def test_a_report_before_any_cell_says_what_to_do(shell, capsys):
    shell.run_line_magic("vramtrace_report", "")
    assert "no cell recorded yet" in capsys.readouterr().out


def test_bad_options_are_one_line_naming_the_valid_ones():
    assert parse_cell_line("--by category --top 2").by == "category"
    for bad in ["--by color", "--top 0", "--bogus", "--top x"]:
        with pytest.raises(MagicUsage) as e:
            parse_cell_line(bad)
        assert "\n" not in str(e.value)
