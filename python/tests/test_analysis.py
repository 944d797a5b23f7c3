"""The notebook API (vramtrace/analysis.py) on the bundled fixtures, without
a GPU or PyTorch: results as Python objects, charts, errors.

Needs the analyzer: the installed `vramtrace` command, one built in this
source tree (`cargo build --release -p vramtrace`), or VRAMTRACE_BIN.

    python -m pytest python/tests
"""

from __future__ import annotations

import json
import os
import pickle
import stat
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import vramtrace

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
CLEAN = FIXTURES / "clean.vtrace"
LEAK = FIXTURES / "leak.vtrace"
FRAGMENTING = FIXTURES / "fragmenting.vtrace"
SNAPSHOT = FIXTURES / "torch" / "mlp_expandable.pickle.xz"
# What fixtures/README.md says leak.vtrace leaks, every iteration.
LEAK_SITE = "log_metrics (train.py:120)"
MIB = 1 << 20


def cli_json(*args) -> dict:
    """What the command line prints for the same question, one device's
    result at the top (as the package reads it)."""
    out = subprocess.run([os.fspath(vramtrace.analyzer_path()), *args, "--json"],
                         capture_output=True, text=True)
    return vramtrace.one_device(json.loads(out.stdout))


def test_one_device_lifts_the_first_devices_result_whatever_the_count():
    one = {"schema_version": 2, "rank": None, "warnings": [{"kind": "truncated"}],
           "devices": [{"device": 0}], "by_device": [{"device": 0, "events": 5}]}
    assert vramtrace.one_device(one) == {
        "device": 0, "events": 5, "schema_version": 2, "rank": None,
        "warnings": [{"kind": "truncated"}], "devices": [{"device": 0}],
        "by_device": [{"device": 0, "events": 5}]}
    # Two devices: the same keys, the first device's at the top.
    two = dict(one, devices=[{"device": 0}, {"device": 1}],
               by_device=[{"device": 0, "events": 5}, {"device": 1, "events": 7}])
    lifted = vramtrace.one_device(two)
    assert set(lifted) == set(vramtrace.one_device(one))
    assert (lifted["events"], len(lifted["by_device"])) == (5, 2)
    assert vramtrace.one_device({"rows": []}) == {"rows": []}
    assert vramtrace.one_device({"by_device": []}) == {"by_device": []}
    # The CLI's document itself: one shape, versioned.
    out = subprocess.run([os.fspath(vramtrace.analyzer_path()), "summary", "--json",
                          os.fspath(LEAK)], capture_output=True, text=True)
    document = json.loads(out.stdout)
    assert list(document)[:3] == ["schema_version", "rank", "warnings"]
    assert len(document["by_device"]) == 1


def svg_root(chart: vramtrace.Chart) -> ET.Element:
    root = ET.fromstring(chart.svg)
    assert root.tag.endswith("svg")
    return root


# --------------------------------------------------------------- results


def test_load_reads_the_header():
    run = vramtrace.load(LEAK)
    info = run.info()
    assert info.status == "complete"
    assert info.events == sum(info.counts.values())
    assert run.path == LEAK and os.fspath(run) == os.fspath(LEAK)


def test_devices_apart_or_one_picked():
    two = FIXTURES / "two-devices.vtrace"
    both = vramtrace.load(two).summary()
    assert [d.device for d in both.devices] == [0, 1]
    one = vramtrace.load(two, device=1)
    assert "device=1" in repr(one)
    summary = one.summary()
    assert summary.device == 1
    assert summary.peak_allocated_bytes == both.devices[1].peak_allocated.bytes
    assert one.simulate().recorded.peak_allocated_bytes == summary.peak_allocated_bytes


def test_summary_is_the_commands_json_as_objects():
    summary = vramtrace.load(LEAK).summary(top=3)
    assert summary == cli_json("summary", "--top", "3", os.fspath(LEAK))
    assert isinstance(summary, dict) and isinstance(summary.at_peak, vramtrace.Result)
    assert summary.peak_allocated_bytes == summary["peak_allocated_bytes"]
    assert summary.peak_allocated_bytes <= summary.peak_reserved_bytes
    assert len(summary.top_sites_at_peak) == 3
    assert summary.oom_count == 0
    # Results stay plain JSON data.
    assert json.loads(json.dumps(summary)) == summary
    assert pickle.loads(pickle.dumps(summary)) == summary


def test_result_fields_as_attributes():
    summary = vramtrace.load(LEAK).summary()
    assert "peak_phase" in dir(summary)
    with pytest.raises(AttributeError, match="no field 'peak_bytes'.*peak_allocated_bytes"):
        _ = summary.peak_bytes
    assert summary.chart is None and summary._repr_svg_() is None


def test_leaks_find_the_leaking_site():
    leaks = vramtrace.load(LEAK).leaks()
    assert len(leaks.leaks) == 1, "leak.vtrace leaks from one site"
    assert leaks.leaks[0].site == LEAK_SITE
    assert leaks.leaks[0].bytes_per_repetition == MIB
    assert leaks.leaks[0].phase == "iter#"


def test_no_leak_in_the_clean_run():
    leaks = vramtrace.load(CLEAN).leaks()
    assert not leaks.leaks
    assert all(p.trend == "steady" for p in leaks.repeated_phases)


def test_window_bounds_by_phase_and_time():
    run = vramtrace.load(LEAK)
    whole = run.summary().events
    by_phase = run.summary(start="iter2", end="iter3").events
    by_time = run.summary(start=0.002, end="5ms").events
    assert 0 < by_phase < whole and 0 < by_time < whole
    assert by_time == cli_json("summary", "--from", "0.002s", "--to", "5ms", os.fspath(LEAK))["events"]


def test_site_options():
    run = vramtrace.load(LEAK)
    top = run.summary().top_sites_at_peak[0].site
    # The optimizer's state, named by the program's line that steps it
    # (PyTorch's own frames are looked past).
    assert top == "train_step (train.py:92)"
    # Skipping the frame that names it folds its stacks to their callers.
    folded = run.summary(skip_frames=[r"\(train\.py:92\)"]).top_sites_at_peak[0]
    assert folded.site == "main (train.py:140)"
    assert run.summary(skip_frames=r"train\.py:92").top_sites_at_peak[0].site != top


def test_fragmentation_over_buckets():
    frag = vramtrace.load(FRAGMENTING).fragmentation(buckets=5)
    assert len(frag.buckets) == 5
    worst = frag.buckets[frag.worst_cached_free]
    assert worst.cached_free_bytes == max(b.cached_free_bytes for b in frag.buckets)
    # The fixture's reserved memory ends far above what is allocated.
    assert frag.buckets[-1].reserved_bytes > 2 * frag.buckets[-1].allocated_bytes


def test_compare_names_what_grew_and_gates():
    result = vramtrace.compare(CLEAN, LEAK, fail_on="peak_allocated:+1%")
    assert result.sites[0].site == LEAK_SITE and result.sites[0].presence == "new"
    assert result.gate.passed is False
    assert result.gate.failed == ["peak_allocated:+1%"]
    relaxed = vramtrace.load(CLEAN).compare(LEAK, fail_on=["peak_allocated:+50%", "ooms:+1"])
    assert relaxed.gate.passed is True
    assert relaxed.headline == result.headline
    assert (result.ignore_lines, result.per_iteration) == (False, False)
    options = vramtrace.compare(CLEAN, LEAK, ignore_lines=True, per_iteration=True)
    assert (options.ignore_lines, options.per_iteration) == (True, True)


def test_a_notebook_for_one_gpu_runs_on_two_and_back():
    """One result shape whatever the number of devices: code written on
    one GPU reads the first device's fields on two, and code written on two
    iterates `by_device` on one."""
    two = vramtrace.load(FIXTURES / "two-devices.vtrace").summary()
    one = vramtrace.load(LEAK).summary()
    for result in (one, two):
        assert result.peak_allocated.bytes == result.by_device[0].peak_allocated.bytes
        assert result.device == result.by_device[0].device
        assert [d.device for d in result.devices] == [d.device for d in result.by_device]
    assert (len(one.by_device), len(two.by_device)) == (1, 2)
    assert set(one) == set(two)


def test_compare_keeps_the_device_picked():
    two = FIXTURES / "two-devices.vtrace"
    # A trace loaded with one device picked compares that device, against
    # the same device of the other run, which may have only that one.
    picked = vramtrace.compare(vramtrace.load(two, device=0), LEAK)
    assert len(picked.by_device) == 1
    assert picked.base.name == "two-devices.vtrace"
    assert vramtrace.load(two, device=0).compare(LEAK).headline == picked.headline
    # Or picked for both runs by keyword.
    assert vramtrace.compare(two, LEAK, device=0).headline == picked.headline
    one = vramtrace.compare(two, two, device=1)
    assert [d.device for d in one.devices] == [1]
    both = vramtrace.compare(two, two)
    assert [d.device for d in both.devices] == [0, 1]
    with pytest.raises(ValueError, match="device 0 of the baseline and device 1 of the new run"):
        vramtrace.compare(vramtrace.load(two, device=0), vramtrace.load(two, device=1))


def test_simulate_a_smaller_gpu():
    run = vramtrace.load(LEAK)
    unlimited = run.simulate()
    assert unlimited.oom is None
    peak = unlimited.peak_reserved_bytes
    # The capacity is the device's; the allocator gets it less the reserve.
    small = run.simulate(capacity=peak // 2, reserve=0)
    assert small.capacity_bytes == peak // 2
    assert small.oom is not None and small.oom.requested_bytes > 0
    assert small.verdict.outcome == "out_of_memory"
    assert small.verdict.line.startswith("runs out of memory on ")
    half = run.simulate(capacity=f"{peak // 2 // MIB}MiB", reserve="64MiB")
    assert half.capacity_bytes == (peak // 2 // MIB - 64) * MIB
    h100 = run.simulate(gpu="h100")
    assert h100.verdict.outcome == "fits" and h100.device.name == "H100 80GB"


def test_simulate_several_policies():
    sim = vramtrace.load(FRAGMENTING).simulate(
        alloc_conf=["expandable_segments:True", "max_split_size_mb:128"], min_capacity=True)
    confs = [p.alloc_conf for p in sim.policies]
    assert confs == ["expandable_segments:True", "max_split_size_mb:128"]
    assert all(p.min_capacity_bytes > 0 for p in sim.policies)


def test_categories_tell_what_fills_the_peak():
    c = vramtrace.load(LEAK).summary().categories
    # The synthetic run's recorder tagged parameters and optimizer state.
    assert c.source == "tags"
    peak = {row.category: row for row in c.at_allocated_peak}
    assert list(peak) == ["parameters", "buffers", "gradients", "optimizer_state",
                          "activations", "temporaries", "other"]
    end = {row.category: row for row in c.at_end}
    # Parameters are the same blocks from start to end, all tagged.
    assert peak["parameters"] == end["parameters"] and peak["parameters"].bytes > 60 * MIB
    assert peak["parameters"].bytes == peak["parameters"].exact_bytes
    assert peak["optimizer_state"].bytes == peak["optimizer_state"].exact_bytes > 0
    assert peak["activations"].exact_bytes == 0 < peak["activations"].bytes
    assert sum(r.bytes for r in c.at_allocated_peak) == vramtrace.load(LEAK).summary().peak_allocated_bytes
    assert c.dominant.category == "activations"
    # What leaks is what the program keeps: other.
    assert vramtrace.load(LEAK).leaks().leaks[0].category == "other"


def test_a_snapshot_s_categories_are_inferred():
    c = vramtrace.load(SNAPSHOT).summary().categories
    assert c.source == "inferred"
    assert all(r.exact_bytes == 0 for r in c.at_end)
    end = {r.category: r.bytes for r in c.at_end}
    assert end["parameters"] > 0 and end["optimizer_state"] == 2 * end["parameters"]


def test_a_pytorch_snapshot_reads_like_a_trace():
    snapshot = vramtrace.load(SNAPSHOT)
    summary = snapshot.summary()
    assert summary.peak_reserved_bytes > 0
    assert summary == cli_json("summary", os.fspath(SNAPSHOT))


# ---------------------------------------------------------------- charts


def test_timeline_is_drawn_inline():
    timeline = vramtrace.load(LEAK).timeline(top=4)
    assert len(timeline.categories) == 5 and timeline.categories[-1] == "other"
    assert all(len(s["values"]) == len(timeline.categories) for s in timeline.samples)
    # Jupyter shows the result as its chart.
    assert timeline._repr_svg_() == timeline.chart.svg
    svg_root(timeline.chart)
    assert "log_metrics" in timeline.chart.svg or "other" in timeline.chart.svg


def test_timeline_by_phase():
    timeline = vramtrace.load(LEAK).timeline(by="phase")
    assert "iter#/forward" in timeline.categories


def test_timeline_by_category():
    timeline = vramtrace.load(LEAK).timeline(by="category")
    assert timeline.grouped_by == "category"
    # Fixed order, parameters at the bottom; `other` last.
    assert timeline.categories == ["parameters", "gradients", "optimizer state",
                                   "activations", "temporaries", "other"]
    assert all(sum(s["values"]) == s["allocated"] for s in timeline.samples)


def test_charts_on_request(tmp_path):
    run = vramtrace.load(LEAK)
    for result in (run.leaks(chart=True), run.fragmentation(chart=True),
                   run.simulate(capacity="300MiB", reserve=0, chart=True),
                   run.compare(CLEAN, chart=True, align="repetition")):
        svg_root(result.chart)
    saved = run.leaks(chart=True).chart.save(tmp_path / "leaks.svg")
    assert saved.read_text().startswith("<svg")


def test_charts_along_events_or_busy_time():
    run = vramtrace.load(LEAK)
    assert "event index" in run.timeline(x="events").chart.svg
    assert "busy time" in run.fragmentation(chart=True, x="busy").chart.svg
    assert "event index" in run.compare(CLEAN, chart=True, x="events").chart.svg


def test_a_snapshots_charts_default_to_busy_time():
    # A snapshot's history reaches back across long pauses: on a time axis
    # its work would be squeezed into a sliver.
    snapshot = vramtrace.load(SNAPSHOT)
    assert "busy time" in snapshot.timeline().chart.svg
    assert "busy time" in snapshot.fragmentation(chart=True).chart.svg
    assert "busy time" not in snapshot.timeline(x="time").chart.svg
    assert "busy time" not in vramtrace.load(LEAK).timeline().chart.svg


def test_results_show_as_the_commands_tables():
    run = vramtrace.load(LEAK)
    summary = run.summary()
    shown = repr(summary)
    assert "top sites live at the allocated peak:" in shown
    assert LEAK_SITE in shown and len(shown.splitlines()) < 60
    assert summary._repr_html_().startswith("<pre>")
    # A part of a result is its dict.
    assert repr(summary.peak_allocated).startswith("{")
    # A gate that fails is no error to show.
    gated = vramtrace.compare(CLEAN, LEAK, fail_on="peak_allocated:+1%")
    assert "FAILED" in repr(gated) or "failed" in repr(gated)
    leaks = run.leaks(chart=True)
    assert leaks._repr_html_().startswith("<svg")
    assert "<pre>" in leaks._repr_html_()
    # The timeline is its chart.
    assert repr(run.timeline()).startswith("<vramtrace result")
    assert pickle.loads(pickle.dumps(summary)) == summary


def test_showing_a_result_runs_nothing_more(tmp_path, monkeypatch):
    # The tables come from the run that made the JSON: with the analyzer
    # gone, a result still shows.
    summary = vramtrace.load(LEAK).summary()
    monkeypatch.setenv("VRAMTRACE_BIN", os.fspath(tmp_path / "gone"))
    assert "top sites live at the allocated peak:" in repr(summary)
    assert LEAK_SITE in summary._repr_html_()


def test_report_writes_html(tmp_path):
    out = vramtrace.load(LEAK).report(tmp_path / "report.html", baseline=CLEAN)
    text = out.read_text()
    assert text.lstrip().lower().startswith("<!doctype html")
    assert LEAK_SITE.split(" ")[0] in text
    assert 'id="vt-chart"' in text and "smallest that fits" in text
    quick = vramtrace.load(LEAK).report(tmp_path / "quick.html", what_if=False)
    assert "smallest that fits" not in quick.read_text()


# ---------------------------------------------------------------- errors


def one_line(error: Exception) -> str:
    text = str(error)
    assert "\n" not in text and text
    return text


def test_missing_file():
    with pytest.raises(vramtrace.AnalyzerError) as e:
        vramtrace.load(FIXTURES / "missing.vtrace")
    assert "missing.vtrace" in one_line(e.value)


def test_not_a_trace(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("not a trace\n")
    with pytest.raises(vramtrace.AnalyzerError, match="not a vramtrace trace"):
        vramtrace.load(path)


def test_a_path_that_looks_like_a_flag(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "--json").write_bytes(LEAK.read_bytes())
    assert vramtrace.load("--json").summary().events == vramtrace.load(LEAK).summary().events


def test_truncated_trace_warns_and_keeps_what_was_read(tmp_path):
    # A trace of several chunks (64 Ki events each), cut in its last one.
    whole = tmp_path / "whole.vtrace"
    subprocess.run([os.fspath(vramtrace.analyzer_path()), "synth", "--events", "150000",
                    "-o", os.fspath(whole)], check=True, capture_output=True)
    assert vramtrace.load(whole).info().chunks >= 3
    cut = tmp_path / "cut.vtrace"
    data = whole.read_bytes()
    cut.write_bytes(data[: len(data) * 9 // 10])
    with pytest.warns(vramtrace.AnalyzerWarning, match="cut short"):
        summary = vramtrace.load(cut).summary()
    assert 0 < summary.events < vramtrace.load(whole).summary().events


def test_bad_values_are_one_line_errors():
    run = vramtrace.load(LEAK)
    with pytest.raises(vramtrace.AnalyzerError) as e:
        run.simulate(capacity="12XB")
    assert "unknown size unit" in one_line(e.value)
    with pytest.raises(vramtrace.AnalyzerError, match="nope"):
        run.timeline(by="nope")
    with pytest.raises(vramtrace.AnalyzerError, match="no-such-phase"):
        run.summary(start="no-such-phase")
    with pytest.raises(TypeError):
        run.simulate(capacity=True)


def test_analyzer_override(tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMTRACE_BIN", os.fspath(tmp_path / "nothing"))
    with pytest.raises(vramtrace.AnalyzerError, match="VRAMTRACE_BIN=.*nothing"):
        vramtrace.analyzer_path()
    # An override is what runs: a stand-in that answers every command.
    fake = tmp_path / "fake-vramtrace"
    fake.write_text('#!/bin/sh\necho \'{"answered_by": "fake"}\'\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("VRAMTRACE_BIN", os.fspath(fake))
    assert vramtrace.analyzer_path() == fake
    assert vramtrace.load(LEAK).summary() == {"answered_by": "fake"}


def test_analyzer_failures_without_a_message(tmp_path, monkeypatch):
    fake = tmp_path / "crashing-vramtrace"
    fake.write_text("#!/bin/sh\nkill -9 $$\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("VRAMTRACE_BIN", os.fspath(fake))
    with pytest.raises(vramtrace.AnalyzerError, match="killed by signal 9"):
        vramtrace.Trace(LEAK).summary()
    fake.write_text("#!/bin/sh\necho 'not json'\n")
    with pytest.raises(vramtrace.AnalyzerError, match="printed no JSON"):
        vramtrace.Trace(LEAK).summary()
