"""Observer mode without a GPU: Python frames read without the GIL (in this
interpreter and in every other CPython found on the PATH), the messages and
the strictness of ``vramtrace.start`` where recording cannot start, the
shim's build inputs, and ``python -m vramtrace run``'s arguments.

The GPU half is observer_check.py (docs/gpu-check.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
import types
from pathlib import Path

import pytest

import vramtrace
from vramtrace import _observer, _shim

HERE = str(Path(__file__).resolve())
PACKAGE_DIR = str(Path(vramtrace.__file__).resolve().parent)


def line_of(marker: str) -> int:
    for n, text in enumerate(Path(HERE).read_text().splitlines(), 1):
        if text.rstrip().endswith("# " + marker):
            return n
    raise AssertionError(marker)


def released_capture() -> list:
    """The frames as an observed allocation reads them, called the way
    PyTorch's operators call the allocator: with the GIL released (CDLL)."""
    return vramtrace.python_stack(observer=True)  # released-call


def inner():
    return released_capture()  # inner-call


class Model:
    def forward(self):
        return inner()  # forward-call


def test_frames_innermost_first_with_lines():
    frames = Model().forward()
    assert frames[0] == ("released_capture", HERE, line_of("released-call"))
    assert frames[1] == ("inner", HERE, line_of("inner-call"))
    assert frames[2] == ("forward", HERE, line_of("forward-call"))
    assert frames[3][0] == "test_frames_innermost_first_with_lines"


def test_a_walk_seen_before_gives_the_same_frames_and_a_new_line_its_own():
    for _ in range(3):
        a = inner()  # first-site
        b = inner()  # second-site
        assert a[2] == ("test_a_walk_seen_before_gives_the_same_frames_and_a_new_line_its_own",
                        HERE, line_of("first-site"))
        assert b[2][2] == line_of("second-site")
        assert a[:2] == b[:2]


def test_a_code_freed_and_another_made_at_its_address_is_named_anew():
    # Functions of one shape made and freed in turn: their code objects
    # come back at addresses freed before, and the walk (same caller, same
    # instruction) is one remembered. Each capture must still name its own
    # function (checked codes before CPython 3.12, a code watcher after).
    seen, reused = set(), 0
    for i in range(300):
        env = {"cap": released_capture}
        exec(compile(f"def f{i}():\n    return cap()\n", f"<made {i}>", "exec"), env)
        f = env[f"f{i}"]
        reused += id(f.__code__) in seen
        seen.add(id(f.__code__))
        frames = f()
        assert frames[1] == (f"f{i}", f"<made {i}>", 2)
        env.clear()  # the function and its globals hold each other
        del f, env
    assert reused > 0, "no code object came back at a freed one's address"


def test_vramtraces_own_frames_are_left_out():
    # python_stack itself lives in the vramtrace package.
    assert all(not f[1].startswith(PACKAGE_DIR) for f in released_capture())


def test_from_another_thread_and_a_generator():
    out = []

    def gen():
        yield inner()

    t = threading.Thread(target=lambda: out.append(next(gen())))
    t.start()
    t.join()
    names = [f[0] for f in out[0]]
    assert names[:3] == ["released_capture", "inner", "gen"]
    assert "run" in names  # threading.Thread.run


def test_names_that_are_not_ascii():
    def größe_名前():
        return released_capture()

    assert größe_名前()[1][0] == "größe_名前"


def test_deep_recursion_is_cut():
    def down(n):
        return down(n - 1) if n else released_capture()

    assert len(down(500)) == 128


def test_a_code_object_made_again_is_named_again():
    # Two functions compiled from the same text at (possibly) the same
    # address once the first is freed: each gets its own name.
    for name in ("first_one", "second_one"):
        env = {"cap": released_capture}
        exec(compile(f"def {name}():\n    return cap()\n", "<made>", "exec"), env)
        frames = env[name]()
        assert frames[1] == (name, "<made>", 2)
        del env


def test_this_interpreter_passes_the_check_observer_mode_makes():
    ok, reason = _observer.python_frames_usable(vramtrace._load())
    assert ok, reason


WALK = textwrap.dedent("""
    import ctypes, sys
    lib = ctypes.CDLL(sys.argv[1])
    fn = lib.vramtrace_observe_python_stack
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    fn.restype = ctypes.c_int
    def capture():
        buf = ctypes.create_string_buffer(1 << 16)
        n = fn(buf, len(buf))
        return n, buf.value.decode()
    def outer():
        return capture()
    n, text = outer()
    print(n)
    print(text)
""")


def other_pythons() -> list:
    """CPython interpreters to read frames of: those named in
    VRAMTRACE_TEST_PYTHONS (CI lists every version pyenv has), and the
    python3.X on the PATH that run."""
    named = [p for p in os.environ.get("VRAMTRACE_TEST_PYTHONS", "").split(os.pathsep) if p]
    on_path = [shutil.which(f"python3.{minor}") for minor in range(8, 16)]
    found = []
    for path in named + [p for p in on_path if p]:
        if path not in found and subprocess.run([path, "-c", "pass"],
                                                capture_output=True).returncode == 0:
            found.append(path)
    return found


@pytest.mark.parametrize("python", other_pythons() or [sys.executable])
def test_frames_of_every_cpython_on_the_path(python, tmp_path):
    script = tmp_path / "walk.py"
    script.write_text(WALK)
    version = subprocess.run([python, "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip()
    p = subprocess.run([python, str(script), str(vramtrace.library_path())],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    count, *lines = p.stdout.splitlines()
    if version in ("(3, 10)", "(3, 11)", "(3, 12)", "(3, 13)"):
        assert int(count) == 3, p.stdout
        assert [l.split("\t")[0] for l in lines[:3]] == ["capture", "outer", "<module>"]
        assert lines[0].split("\t")[2] == "9"
    else:
        # A version whose frames are not read says so instead.
        assert int(count) == -1 and "Python stacks without the GIL" in p.stdout


def test_without_torch_start_runs_unrecorded_with_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch fails
    assert vramtrace.start("x.vtrace") is False
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["vramtrace: PyTorch is not installed: running without recording"]
    assert not vramtrace.installed()
    with pytest.raises(vramtrace.VramtraceError, match="PyTorch is not installed"):
        vramtrace.start("x.vtrace", strict=True)
    monkeypatch.setenv("VRAMTRACE_STRICT", "1")
    with pytest.raises(vramtrace.VramtraceError):
        vramtrace.start("x.vtrace")


def fake_torch(cuda: bool) -> types.SimpleNamespace:
    props = types.SimpleNamespace(total_memory=85899345920, name="Fake H100")
    snapshot = {"allocator_settings": {
        "max_split_size": -1, "expandable_segments": True,
        "roundup_power2_divisions": {"1": 0, "2": 4}, "garbage_collection_threshold": 0.0}}
    return types.SimpleNamespace(
        __version__="2.11.0+fake",
        __file__=str(Path("/nonexistent/torch/__init__.py")),
        _C=types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=True),
        cuda=types.SimpleNamespace(
            is_available=lambda: cuda, device_count=lambda: 1,
            get_device_properties=lambda i: props,
            memory=types.SimpleNamespace(_snapshot=lambda: snapshot)))


def test_without_a_cuda_device_start_says_so(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", fake_torch(cuda=False))
    assert vramtrace.start() is False
    assert "no CUDA device is available" in capsys.readouterr().err


def test_replacement_mode_without_a_cuda_device_says_so_and_records_nothing(monkeypatch, capsys):
    # The pluggable allocator would be installed and never called: no trace,
    # while installed() said True.
    monkeypatch.setitem(sys.modules, "torch", fake_torch(cuda=False))
    vramtrace.install("x.vtrace", mode="replace")
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["vramtrace: no CUDA device is available: running without recording"]
    assert not vramtrace.installed()
    with pytest.raises(vramtrace.VramtraceError, match="no CUDA device is available: not recording"):
        vramtrace.install("x.vtrace", mode="replace", strict=True)
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch fails
    vramtrace.install("x.vtrace", mode="replace")
    assert "PyTorch is not installed: running without recording" in capsys.readouterr().err


def test_the_recorder_is_told_the_devices_and_allocator_settings(tmp_path):
    text = _observer._config(fake_torch(cuda=True), "run-%d.vtrace", "python", pending=True)
    lines = text.splitlines()
    assert "state=pending" in lines and "stacks=python" in lines
    assert "out=run-%d.vtrace" in lines
    assert "device=0\t85899345920\tFake H100" in lines
    assert "setting.expandable_segments=True" in lines
    assert "setting.roundup_power2_divisions=[1:0,2:4]" in lines
    assert "setting.max_split_size=-1" in lines
    # The library accepts it.
    lib = vramtrace._load()
    assert lib.vramtrace_observe_start(text.replace("state=pending", "state=empty")
                                       .replace("out=run-%d.vtrace", f"out={tmp_path / 'x'}")
                                       .encode()) == 0
    assert lib.vramtrace_observe_active() == 1
    assert lib.vramtrace_observe_stop() == 0
    assert lib.vramtrace_observe_start(b"colour=blue\n") == -1


def test_the_shim_needs_a_compiler_and_says_which(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(_shim.ShimError, match="no C\\+\\+ compiler found"):
        _shim.compiler()


def test_the_shim_finds_cuda_headers_in_a_wheel_layout(monkeypatch, tmp_path):
    include = tmp_path / "site" / "nvidia" / "cu13" / "include"
    include.mkdir(parents=True)
    (include / "cuda_runtime_api.h").write_text("")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    assert _shim.cuda_include() in (include, Path("/usr/local/cuda/include"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "site" / "nvidia" / "cu13"))
    assert _shim.cuda_include() == include


def test_the_shim_is_built_against_torchs_headers_and_abi(tmp_path):
    cmd = _shim.build_command(fake_torch(cuda=True), "g++", tmp_path, tmp_path / "out.so")
    assert "-D_GLIBCXX_USE_CXX11_ABI=1" in cmd
    assert "/nonexistent/torch/include" in cmd and str(tmp_path) in cmd
    assert str(_shim.SOURCE) in cmd and _shim.SOURCE.is_file()
    assert "-lc10_cuda" in cmd and "-ltorch_cpu" in cmd


def run_main(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vramtrace", *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(Path(PACKAGE_DIR).parent)})


def test_run_arguments_are_checked():
    p = run_main("run", "--alloc-conf", "expandable_segments:True", HERE)
    assert p.returncode == 2 and "--alloc-conf needs --mode replace" in p.stderr
    p = run_main("run", "/nonexistent/train.py")
    assert p.returncode == 2 and "no such script: /nonexistent/train.py" in p.stderr
    p = run_main("run", "--stacks", "pyhton", HERE)
    assert p.returncode == 2 and "invalid choice" in p.stderr


def test_run_refuses_an_out_that_is_the_script(tmp_path):
    """No output may replace an input (issue #46): an --out that names the
    script, under any name or through its pattern, is refused on one line
    before anything runs, and the script is left as it was."""
    script = tmp_path / "train0.py"
    text = "print('ran')\n"
    script.write_text(text)
    (tmp_path / "sub").mkdir()
    (tmp_path / "link").symlink_to(tmp_path)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{Path(PACKAGE_DIR).parent}"}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "vramtrace", "run", *args],
                              capture_output=True, text=True, cwd=tmp_path, env=env)

    for out, extra in [(str(script), []), ("train0.py", []), ("sub/../train0.py", []),
                       (str(tmp_path / "link" / "train0.py"), []), ("train%d.py", []),
                       ("train0.py", ["--mode", "replace"]),
                       ("train.py", ["--keep-last", "1MiB"])]:
        if "keep-last" in " ".join(extra):
            victim = tmp_path / "train-oom.py"
            victim.write_text(text)
        else:
            victim = script
        p = run("--out", out, *extra, str(victim))
        assert p.returncode == 2, (out, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "would destroy the input" in lines[0], (out, p.stderr)
        assert "ran" not in p.stdout
        assert victim.read_text() == text
    # A module's file is its input too.
    (tmp_path / "trainer.py").write_text(text)
    p = run("--out", "trainer.py", "-m", "trainer")
    assert p.returncode == 2 and "would destroy the input" in p.stderr, p.stderr
    assert (tmp_path / "trainer.py").read_text() == text
    # Another output is fine (without PyTorch here, the script runs
    # unrecorded).
    (tmp_path / "torch.py").write_text("raise ImportError('no torch here')\n")
    p = run("--out", "train0.vtrace", str(script))
    assert p.returncode == 0 and "ran" in p.stdout, p.stderr


def test_run_runs_the_script_with_its_arguments_when_recording_cannot_start(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint('args', sys.argv[1:])\n")
    blocker = tmp_path / "torch.py"  # `import torch` fails: no recording
    blocker.write_text("raise ImportError('no torch here')\n")
    p = subprocess.run([sys.executable, "-m", "vramtrace", "run", str(script), "--epochs", "1"],
                       capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": f"{tmp_path}:{Path(PACKAGE_DIR).parent}"})
    assert p.returncode == 0, p.stderr
    assert "args ['--epochs', '1']" in p.stdout
    assert "running without recording" in p.stderr
    # Strict: one line, true to what happens: the script does not run.
    for mode in ("observe", "replace"):
        p = subprocess.run([sys.executable, "-m", "vramtrace", "run", "--strict", "--mode", mode,
                            str(script)],
                           capture_output=True, text=True, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": f"{tmp_path}:{Path(PACKAGE_DIR).parent}"})
        assert p.returncode == 2, p.stderr
        assert p.stderr.strip().splitlines() == [
            f"error: vramtrace: PyTorch is not installed: not recording (strict); {script} was not run"
        ], p.stderr
        assert "args" not in p.stdout
    # Replacement mode without PyTorch runs the script unrecorded, saying so.
    p = subprocess.run([sys.executable, "-m", "vramtrace", "run", "--mode", "replace", str(script)],
                       capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": f"{tmp_path}:{Path(PACKAGE_DIR).parent}"})
    assert p.returncode == 0 and "args []" in p.stdout, p.stderr
    assert p.stderr.strip().splitlines() == [
        "vramtrace: PyTorch is not installed: running without recording"]


def test_run_runs_a_module_as_python_m_does(tmp_path):
    package = tmp_path / "trainer"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(
        "import sys\nprint('module', __name__, sys.argv[1:])\n")
    env = {**os.environ, "PYTHONPATH": str(Path(PACKAGE_DIR).parent)}
    p = subprocess.run([sys.executable, "-m", "vramtrace", "run", "-m", "trainer", "--epochs", "1"],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    assert "module __main__ ['--epochs', '1']" in p.stdout
    p = subprocess.run([sys.executable, "-m", "vramtrace", "run", "-m", "no_such_module"],
                       capture_output=True, text=True, cwd=tmp_path, env=env)
    assert p.returncode == 2 and "no module named no_such_module" in p.stderr


def test_install_modes():
    with pytest.raises(vramtrace.VramtraceError, match="alloc_conf applies to mode='replace'"):
        vramtrace.install("x.vtrace", alloc_conf="expandable_segments:True")
    with pytest.raises(vramtrace.VramtraceError, match="invalid mode"):
        vramtrace.install("x.vtrace", mode="swap")




def test_a_trace_that_cannot_be_created_fails_start_or_stop(tmp_path):
    import ctypes

    import torch_sink
    from vramtrace import _library

    lib = _library.load()
    sink = torch_sink.sink(lib)
    config = "out={}\nstacks=none\nstate=empty\ndevice=0\t85899345920\tno GPU\n"
    # No such folder: refused at start, not at the first allocation.
    missing = tmp_path / "missing" / "run.vtrace"
    assert lib.vramtrace_observe_start(config.format(missing).encode()) == -1
    # The folder goes away after the start: the trace cannot be created at
    # the device's first event, and stop says so.
    folder = tmp_path / "gone"
    folder.mkdir()
    assert lib.vramtrace_observe_start(config.format(folder / "run.vtrace").encode()) == 0
    folder.rmdir()
    event = torch_sink.TorchEvent(torch_sink.ALLOC, 0, 1 << 40, 512, 0, 0, None)
    sink.event(ctypes.byref(event))
    assert lib.vramtrace_observe_stop() == -1
    # The next recording starts afresh.
    folder.mkdir()
    assert lib.vramtrace_observe_start(config.format(folder / "run.vtrace").encode()) == 0
    sink.event(ctypes.byref(event))
    assert lib.vramtrace_observe_stop() == 0
    assert (folder / "run.vtrace").exists()
