"""The source distribution builds on its own: it carries every member of the
Cargo workspace (cargo loads all of their manifests and targets before it
builds one), the lockfile and the license files.

CI builds the sdist once, builds the wheel it tests from it, and names it in
VRAMTRACE_SDIST; elsewhere these tests build one from the checkout with
setup.py, which needs setuptools-rust (skipped without it, failed without it
under CI's VRAMTRACE_TEST_INSTALLED=1).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CI = bool(os.environ.get("VRAMTRACE_TEST_INSTALLED"))


def unavailable(why: str) -> None:
    """Skips, except under CI, where each of these is there and a missing
    one means the check did not run."""
    if CI:
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory) -> Path:
    """The source distribution, unpacked: CI's own (VRAMTRACE_SDIST), or one
    built from the checkout."""
    if shutil.which("cargo") is None:
        unavailable("no cargo on the PATH to read the workspace with")
    work = tmp_path_factory.mktemp("sdist")
    given = os.environ.get("VRAMTRACE_SDIST")
    if given:
        archive = Path(given)
    else:
        if not (ROOT / "setup.py").is_file():
            unavailable(f"{ROOT} is not a vramtrace checkout")
        try:
            import setuptools_rust  # noqa: F401
        except ImportError:
            unavailable("setuptools-rust is not installed (pip install setuptools-rust)")
        # egg_info's folder goes to the temporary folder, not the checkout.
        subprocess.run(
            [sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(work),
             "sdist", "-d", str(work)],
            cwd=ROOT, check=True, capture_output=True)
        (archive,) = work.glob("vramtrace-*.tar.gz")
    with tarfile.open(archive) as tar:
        # The "data" filter (refuse links and paths out of the folder) is in
        # every Python since 3.12, and in the 3.9 to 3.11 security releases.
        if hasattr(tarfile, "data_filter"):
            tar.extractall(work / "unpacked", filter="data")
        else:
            tar.extractall(work / "unpacked")
    (top,) = (work / "unpacked").iterdir()
    return top


def workspace(root: Path) -> dict:
    """`cargo metadata` of the workspace at root, without its dependencies
    (no network): fails as a build would when a member's manifest is absent."""
    out = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--offline", "--format-version", "1"],
        cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, f"cargo cannot load the workspace at {root}: {out.stderr}"
    return json.loads(out.stdout)


def targets(meta: dict) -> dict[str, set[str]]:
    """Each member's targets' source files, relative to the workspace root."""
    root = Path(meta["workspace_root"])
    return {
        package["name"]: {
            str(Path(target["src_path"]).relative_to(root)) for target in package["targets"]
        }
        for package in meta["packages"]
    }


def test_every_workspace_member_and_target_is_in_the_sdist(unpacked):
    if not (ROOT / "Cargo.toml").is_file():
        unavailable(f"{ROOT} is not a vramtrace checkout")
    checkout = targets(workspace(ROOT))
    assert targets(workspace(unpacked)) == checkout
    for files in checkout.values():
        for path in files:
            assert (unpacked / path).is_file(), f"{path} is missing from the sdist"
    assert (unpacked / "Cargo.lock").is_file(), "the lockfile (--locked builds) is missing"


def test_the_sdist_carries_its_licenses(unpacked):
    for name in ("LICENSE-MIT", "LICENSE-APACHE"):
        assert (unpacked / name).is_file(), f"{name} is missing from the sdist"
    info = (unpacked / "PKG-INFO").read_text()
    assert "License-Expression: MIT OR Apache-2.0" in info
    assert "License-File: LICENSE-MIT" in info
    assert "License-File: LICENSE-APACHE" in info
