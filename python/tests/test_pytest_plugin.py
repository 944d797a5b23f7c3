"""The pytest plugin (vramtrace/pytest_plugin.py) without a GPU: its markers
and --vramtrace over a fake of PyTorch's counters, the session without
CUDA, and bad markers. The GPU half is pytest_plugin_check.py
(docs/gpu-check.md)."""

import os
from importlib import metadata

import pytest

from vramtrace import pytest_plugin
from vramtrace.pytest_plugin import SizeError, human, parse_size

pytest_plugins = ["pytester"]


def plugin_loads_itself() -> bool:
    """Whether pytest loads the plugin by itself in the inner sessions: the
    package is installed (its ``pytest11`` entry point is there) and plugin
    autoloading is on. Naming it with ``-p`` as well would register it twice,
    under two names, which pytest refuses ("Plugin already registered under
    a different name"); the inner sessions import whichever vramtrace comes
    first on their path, so this depends on the entry point alone."""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    eps = metadata.entry_points()
    # (Python 3.9's entry_points() is a dict of groups; 3.10 has select().)
    group = eps.select(group="pytest11") if hasattr(eps, "select") else eps.get("pytest11", ())
    return any(ep.value == "vramtrace.pytest_plugin" for ep in group)


# Installed (as the README's `pip install . pytest` does, or CI's wheel), the
# plugin is loaded by its entry point; from the source tree alone, by name.
LOAD = [] if plugin_loads_itself() else ["-p", "vramtrace.pytest_plugin"]

# A conftest for the inner sessions: PyTorch's counters faked by a `gpu`
# fixture that allocates and frees, and recording off (no GPU to record).
FAKE_GPU = """
import pytest
import vramtrace.pytest_plugin as vp

STATE = {"allocated": 0, "peak": 0, "reserved": 0}

class FakeCuda:
    why_not = None
    available = True
    def begin(self):
        STATE["peak"] = STATE["allocated"]
        return vp.Measure(device=0, before_allocated=STATE["allocated"])
    def end(self, m):
        m.after_allocated = STATE["allocated"]
        m.peak_allocated = STATE["peak"]
        m.peak_reserved = STATE["reserved"]

vp.Cuda = FakeCuda
vp.Plugin.start_recording = lambda self, path: False

class Gpu:
    def alloc(self, n):
        STATE["allocated"] += n
        STATE["peak"] = max(STATE["peak"], STATE["allocated"])
        STATE["reserved"] = max(STATE["reserved"], STATE["allocated"])
    def free(self, n):
        STATE["allocated"] -= n

@pytest.fixture
def gpu():
    return Gpu()
"""

NO_GPU = """
import vramtrace.pytest_plugin as vp

class NoCuda:
    why_not = "no CUDA device"
    available = False

vp.Cuda = NoCuda
"""


@pytest.fixture
def inner(pytester, monkeypatch):
    """A pytester whose sessions (run in another folder) find this vramtrace."""
    import vramtrace
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(vramtrace.__file__)))
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", package_root + (os.pathsep + path if path else ""))
    return pytester


def run(pytester, conftest, test, *args):
    pytester.makeconftest(conftest)
    pytester.makepyfile(test)
    return pytester.runpytest_subprocess(*LOAD, *args)


def test_sizes_need_a_unit_or_an_int():
    assert parse_size("2 GiB") == 2 << 30
    assert parse_size("512MiB") == 512 << 20
    assert parse_size("1.5 GB") == 1_500_000_000
    assert parse_size(" 3 kib ") == 3 << 10
    assert parse_size(4096) == 4096
    # The analyzer's grammar: initials, decimal units in any case, underscores.
    assert parse_size("512M") == 512 << 20
    assert parse_size("1_000 mb") == 1_000_000_000
    for bad in ["2", "2 GiBs", "", "-1 GiB", "GiB", True, 1.5, -3]:
        with pytest.raises(SizeError, match="write an int of bytes, or a number with a unit"):
            parse_size(bad)
    assert human(3 << 30) == "3.0 GiB"
    assert human(-(5 << 20)) == "-5.0 MiB"
    assert human(12) == "12 B"


def test_a_peak_past_the_limit_fails_and_one_under_passes(inner):
    result = run(inner, FAKE_GPU, """
        import pytest

        @pytest.mark.limit_gpu_memory("2 GiB")
        def test_over(gpu):
            gpu.alloc(3 << 30)
            gpu.free(3 << 30)

        @pytest.mark.limit_gpu_memory("2 GiB")
        def test_under(gpu):
            gpu.alloc(1 << 30)
            gpu.free(1 << 30)

        @pytest.mark.limit_gpu_memory("512 MiB", kind="reserved")
        def test_reserved(gpu):
            pass
    """)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines([
        "*peak allocated GPU memory 3.0 GiB passed the limit of 2.0 GiB by 1.0 GiB (exact:*",
        "*peak reserved GPU memory 3.0 GiB passed the limit of 512.0 MiB*",
    ])


def test_memory_left_behind_fails_beyond_the_tolerance(inner):
    result = run(inner, FAKE_GPU, """
        import pytest

        @pytest.mark.no_gpu_leak
        def test_leaks(gpu):
            gpu.alloc(100 << 20)

        @pytest.mark.no_gpu_leak(tolerance="200 MiB")
        def test_within_tolerance(gpu):
            gpu.alloc(100 << 20)

        @pytest.mark.no_gpu_leak
        def test_clean(gpu):
            gpu.alloc(100 << 20)
            gpu.free(100 << 20)
    """)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "*100.0 MiB more GPU memory allocated after the test than before it (0 B -> 100.0 MiB; tolerance 0 B;*",
    ])


def test_a_test_that_fails_by_itself_keeps_its_own_failure(inner):
    result = run(inner, FAKE_GPU, """
        import pytest

        @pytest.mark.limit_gpu_memory("1 MiB")
        def test_raises(gpu):
            gpu.alloc(2 << 20)
            raise ValueError("its own")
    """)
    result.assert_outcomes(failed=1)
    assert "its own" in result.stdout.str()
    assert "passed the limit" not in result.stdout.str()


def test_a_limit_without_a_unit_is_one_line_naming_the_forms(inner):
    result = run(inner, FAKE_GPU, """
        import pytest

        @pytest.mark.limit_gpu_memory("2")
        def test_bad(gpu):
            pass

        @pytest.mark.limit_gpu_memory("2 GiB", kind="peak")
        def test_bad_kind(gpu):
            pass
    """)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*'2': a size needs a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB or TB); write an int of bytes, or a number with a unit: '2 GiB', '512MiB', '1.5 GB'*",
        "*kind='peak' is not one of allocated, reserved*",
    ])
    out = result.stdout.str()
    assert "Traceback" not in out
    # Said once per test, not again as the context of the failure (the
    # short summary pytest prints at the end repeats each failure's line).
    assert "During handling" not in out, out
    failures = out.split("short test summary info")[0]
    assert failures.count("'2': a size needs a unit") == 1, out


def test_without_a_gpu_checks_are_skipped_and_said_once(inner):
    result = run(inner, NO_GPU, """
        import pytest

        @pytest.mark.limit_gpu_memory("1 B")
        def test_one():
            pass

        @pytest.mark.no_gpu_leak
        def test_two():
            pass
    """)
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert out.count("vramtrace: GPU memory checks of 2 test(s) skipped: no CUDA device") == 1, out


def test_record_every_test_prints_a_table_of_peaks(inner):
    result = run(inner, FAKE_GPU, """
        def test_small(gpu):
            gpu.alloc(1 << 20)
            gpu.free(1 << 20)

        def test_large(gpu):
            gpu.alloc(3 << 30)
            gpu.free(3 << 30)
    """, "--vramtrace=traces")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*GPU memory per test (vramtrace)*",
        "*peak allocated*peak reserved*left allocated*test",
        "*3.0 GiB*test_record_every_test_prints_a_table_of_peaks.py::test_large",
        "*1.0 MiB*test_record_every_test_prints_a_table_of_peaks.py::test_small",
        "figures exact*",
    ])


def test_the_option_is_offered():
    # The plugin's own hooks, as pytest reads them.
    assert hasattr(pytest_plugin, "pytest_addoption")
    assert hasattr(pytest_plugin, "pytest_runtest_call")


def test_trace_names_never_collide(tmp_path):
    """Two tests whose ids make one safe name (parametrized tests of the
    same name, ids differing only in the characters replaced) get two
    traces; the same test gets its own name back."""
    class Config:
        def getoption(self, name):
            return str(tmp_path)

    plugin = pytest_plugin.Plugin(Config())
    a = plugin.trace_path("tests/a/test_m.py::test_f[x/y]")
    b = plugin.trace_path("tests/a/test_m.py::test_f[x-y]")
    c = plugin.trace_path("tests_a/test_m.py::test_f[x/y]")
    assert len({a, b, c}) == 3
    assert a.name == "tests_a_test_m.py_test_f_x_y.vtrace"
    assert plugin.trace_path("tests/a/test_m.py::test_f[x/y]") == a
    assert plugin.trace_path("tests/a/test_m.py::test_f[x-y]") == b
    long = "t/test_m.py::test_f[" + "x" * 200
    assert plugin.trace_path(long + "1]") != plugin.trace_path(long + "2]")
