"""Builds the two Rust artifacts of the wheel with setuptools-rust (metadata
is in pyproject.toml; docs/packaging.md says why this backend):

- the analyzer, ``vramtrace``, installed as a command (the wheel's scripts);
- the recorder library, installed inside the package as
  ``vramtrace/libvramtrace_recorder.so``, where ``vramtrace.library_path()``
  finds it.
"""

import os

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools_rust import Binding, RustBin, RustExtension, Strip, build_rust

LIBRARY = "libvramtrace_recorder.so"


class BuildRust(build_rust):
    """Installs the recorder library under its own file name.

    setuptools-rust names a library like a Python extension module
    (``libvramtrace_recorder.cpython-311-x86_64-linux-gnu.so``), but this
    one is not an extension: it is loaded by path (ctypes, PyTorch, the
    observer shim), under the name the docs give.
    """

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
    cmdclass={"build_rust": BuildRust, "bdist_wheel": BdistWheel},
)
