"""What `pip install` gives: the recorder library found without environment
variables, the analyzer command beside the interpreter, the observer shim's
sources, and one version for all three. No GPU or PyTorch needed.

Run against an installed package (CI installs the wheel into a fresh
virtual environment and sets VRAMTRACE_TEST_INSTALLED=1, which turns "not
installed" from a skip into a failure):

    pip install . && python -m pytest python/tests
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

import vramtrace

ROOT = Path(__file__).resolve().parents[2]
SOURCE_PACKAGE = ROOT / "python" / "vramtrace"
PACKAGE = Path(vramtrace.__file__).resolve().parent
INSTALLED = PACKAGE != SOURCE_PACKAGE.resolve()

needs_install = pytest.mark.skipif(
    not INSTALLED and not os.environ.get("VRAMTRACE_TEST_INSTALLED"),
    reason="vramtrace is imported from its source tree, not installed",
)


def clean_env(**extra) -> dict:
    """The environment less every vramtrace and Python path variable."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("VRAMTRACE_") and k != "PYTHONPATH"}
    env.update(extra)
    return env


@needs_install
def test_imported_from_the_installation():
    assert INSTALLED, f"vramtrace was imported from {PACKAGE}, the source tree"


@needs_install
def test_library_found_without_environment(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", "import vramtrace; print(vramtrace.library_path())"],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, check=True)
    path = Path(out.stdout.strip())
    assert path == PACKAGE / "libvramtrace_recorder.so"
    assert path.is_file()


@needs_install
def test_analyzer_installed_beside_the_interpreter(monkeypatch):
    monkeypatch.delenv("VRAMTRACE_BIN", raising=False)
    # Found without the environment's scripts folder on the PATH, as in a
    # notebook kernel started from the environment's interpreter.
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert vramtrace.analyzer_path() == Path(sysconfig.get_path("scripts")) / "vramtrace"


@needs_install
def test_one_version_for_package_command_and_workspace():
    cargo = (ROOT / "Cargo.toml").read_text()
    workspace = re.search(r'(?m)^\[workspace\.package\][^\[]*?^version\s*=\s*"([^"]+)"', cargo)
    assert workspace, "no version in the workspace's Cargo.toml"
    command = subprocess.run([os.fspath(vramtrace.analyzer_path()), "--version"],
                             capture_output=True, text=True, check=True).stdout.split()
    assert command == ["vramtrace", workspace.group(1)]
    assert metadata.version("vramtrace") == workspace.group(1)


@needs_install
def test_shim_sources_are_installed():
    shim = SOURCE_PACKAGE / "shim"
    sources = sorted(p.name for p in shim.glob("*") if p.suffix in (".cpp", ".h"))
    if not sources:
        pytest.skip("the source tree has no observer shim sources")
    installed = sorted(p.name for p in (PACKAGE / "shim").glob("*"))
    assert installed == sources
    for name in sources:
        assert (PACKAGE / "shim" / name).read_bytes() == (shim / name).read_bytes()


@needs_install
def test_type_hints_are_installed():
    # PEP 561: type checkers read the package's hints only with this marker.
    assert (PACKAGE / "py.typed").is_file()


@needs_install
def test_the_license_is_in_the_metadata():
    meta = metadata.metadata("vramtrace")
    assert meta["License-Expression"] == "MIT OR Apache-2.0"
    files = {Path(f).name for f in metadata.files("vramtrace") or ()}
    assert {"LICENSE-MIT", "LICENSE-APACHE"} <= files


@pytest.mark.skipif(not os.environ.get("VRAMTRACE_TEST_INSTALLED"),
                    reason="only CI installs the auditwheel-repaired wheel "
                           "(`pip install .` builds a linux_* one)")
def test_the_installed_wheel_is_manylinux():
    # Package indexes refuse a plain linux_* wheel, and another
    # distribution's pip may not install it.
    wheel = metadata.distribution("vramtrace").read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines()
            if line.startswith("Tag:")]
    assert tags, "the installed wheel names no tag"
    assert all(tag.startswith("py3-none-manylinux") for tag in tags), tags


def test_library_override(tmp_path, monkeypatch):
    lib = tmp_path / "libother.so"
    lib.write_bytes(b"")
    monkeypatch.setenv("VRAMTRACE_LIB", os.fspath(lib))
    assert vramtrace.library_path() == lib
    monkeypatch.setenv("VRAMTRACE_LIB", os.fspath(tmp_path / "missing.so"))
    with pytest.raises(vramtrace.VramtraceError, match="VRAMTRACE_LIB=.*missing.so is not a file"):
        vramtrace.library_path()


def test_importing_needs_no_torch(tmp_path):
    # A notebook that only analyzes traces imports vramtrace without torch.
    code = "import sys, vramtrace; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True,
                   env=clean_env(PYTHONPATH=os.fspath(PACKAGE.parent)))
