"""Builds the two Rust artifacts of the wheel with setuptools-rust (metadata
is in pyproject.toml; docs/packaging.md says why this backend):

- the analyzer, ``vramtrace``, installed as a command (the wheel's scripts);
- the recorder library, installed inside the package as
  ``vramtrace/libvramtrace_recorder.so``, where ``vramtrace.library_path()``
  finds it.

The source distribution carries the whole Cargo workspace (cargo loads
every member's manifest and targets before it builds one), with the member
list read from the workspace's own Cargo.toml, so that it cannot drift.
"""

import glob
import os
import sys

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.sdist import sdist
from setuptools_rust import Binding, RustBin, RustExtension, Strip, build_rust

if sys.version_info >= (3, 11):
    import tomllib
else:  # pyproject.toml's build requirements add tomli before 3.11
    import tomli as tomllib

LIBRARY = "libvramtrace_recorder.so"

# Folders inside a workspace member that are never sources: build output,
# caches, and what tools install beside the explorer's script.
NOT_SOURCES = {"target", "__pycache__", "node_modules"}


def workspace_members(root="."):
    """The workspace's member folders, relative to ``root``, as its
    Cargo.toml's ``[workspace] members`` lists them (globs expanded,
    ``exclude`` honoured, folders without a Cargo.toml left out as cargo
    does for globs)."""
    with open(os.path.join(root, "Cargo.toml"), "rb") as f:
        workspace = tomllib.load(f)["workspace"]
    excluded = {os.path.normpath(path) for path in workspace.get("exclude", [])}
    members = []
    for pattern in workspace.get("members", []):
        for path in sorted(glob.glob(os.path.join(root, pattern))):
            member = os.path.normpath(os.path.relpath(path, root))
            if member not in excluded and member not in members and \
                    os.path.isfile(os.path.join(path, "Cargo.toml")):
                members.append(member)
    return members


def workspace_files(root="."):
    """Every file cargo may read to build the workspace, relative to
    ``root`` with ``/`` separators: the root manifest and lockfile, and each
    member's folder whole (sources, build scripts, benches and tests that
    its manifest declares or cargo discovers), less build output."""
    files = ["Cargo.toml", "Cargo.lock"]
    for member in workspace_members(root):
        for folder, subfolders, names in os.walk(os.path.join(root, member)):
            subfolders[:] = sorted(d for d in subfolders
                                   if d not in NOT_SOURCES and not d.startswith("."))
            for name in sorted(names):
                if not name.endswith((".pyc", ".pyo", ".so")):
                    path = os.path.relpath(os.path.join(folder, name), root)
                    files.append(path.replace(os.sep, "/"))
    return files


class Sdist(sdist):
    """Adds the Cargo workspace to the source distribution (MANIFEST.in
    holds the Python side only)."""

    def make_distribution(self):
        self.filelist.extend(workspace_files())
        self.filelist.sort()
        self.filelist.remove_duplicates()
        super().make_distribution()


class BuildRust(build_rust):
    """Installs the recorder library under its own file name.

    setuptools-rust names a library like a Python extension module
    (``libvramtrace_recorder.cpython-311-x86_64-linux-gnu.so``), but this
    one is not an extension: it is loaded by path (ctypes, PyTorch, the
    observer shim), under the name the docs give.
    """

    def run(self):
        # setuptools runs every command at verbosity 1 (pip's -v does not
        # change it, only whether the output is shown), which setuptools-rust
        # turns into `cargo -v`: a full rustc command line per crate. Cargo's
        # own progress, a "Compiling" line per crate, is what `pip install -v`
        # promises.
        self.verbose = 0
        super().run()

    def get_dylib_ext_path(self, ext, target_fname):
        path = super().get_dylib_ext_path(ext, target_fname)
        return os.path.join(os.path.dirname(path), LIBRARY)


class BdistWheel(bdist_wheel):
    """Tags the wheel ``py3-none-<platform>``: neither artifact links
    libpython (the library looks the CPython API up in the running process),
    so one wheel serves every CPython 3 on the platform."""

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(
    rust_extensions=[
        RustBin(
            "vramtrace",
            path="analyzer/Cargo.toml",
            cargo_manifest_args=["--locked"],
            strip=Strip.Debug,
        ),
        RustExtension(
            "vramtrace.libvramtrace_recorder",
            path="recorder-ffi/Cargo.toml",
            binding=Binding.NoBinding,
            cargo_manifest_args=["--locked"],
            strip=Strip.Debug,
            py_limited_api=False,
        ),
    ],
    cmdclass={"build_rust": BuildRust, "bdist_wheel": BdistWheel, "sdist": Sdist},
)
