"""Building the observer shim (``shim/torch_observer.cpp``) against the
installed torch, once per torch install, and loading it.

The shim is C++ compiled against torch's headers, so it must be built where
torch is installed: a C++ compiler (``CXX``, else ``c++``, ``g++`` or
``clang++``), torch's headers and libraries (in the torch wheel), and the
CUDA runtime headers, found in ``CUDA_HOME``/``CUDA_PATH``, in the
``nvidia-*`` wheels that torch depends on (``nvidia/cu13/include``,
``nvidia/cuda_runtime/include``), or in ``/usr/local/cuda``: no CUDA toolkit
is needed. Built shims are kept in ``VRAMTRACE_CACHE``, else
``$XDG_CACHE_HOME/vramtrace``, else ``~/.cache/vramtrace``, one per source,
torch and compiler; a lock file keeps the processes of a ``torchrun`` job
from building it side by side.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ._library import VramtraceError

SOURCE = Path(__file__).resolve().parent / "shim" / "torch_observer.cpp"
# The sink's structures, which SOURCE includes (generated from the library's
# Rust by cbindgen).
HEADER = SOURCE.parent / "vramtrace_sink.h"
SHIM_ABI = 5


class ShimError(VramtraceError):
    """The observer shim could not be built or loaded."""


def compiler() -> str:
    """The C++ compiler to build with."""
    names = [os.environ["CXX"]] if os.environ.get("CXX") else ["c++", "g++", "clang++"]
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise ShimError(
        "no C++ compiler found to build vramtrace's PyTorch shim: install one "
        "(`apt install g++`, `conda install gxx`) or set CXX, or record with "
        "mode='replace'"
    )


def cuda_include() -> Path:
    """A folder holding ``cuda_runtime_api.h``."""
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "include")
    for entry in sys.path:
        nvidia = Path(entry or ".") / "nvidia"
        if nvidia.is_dir():
            candidates.extend(sorted(nvidia.glob("*/include")))
    candidates.append(Path("/usr/local/cuda/include"))
    for folder in candidates:
        if (folder / "cuda_runtime_api.h").is_file():
            return folder
    raise ShimError(
        "the CUDA runtime headers (cuda_runtime_api.h) were not found to build "
        "vramtrace's PyTorch shim: install the CUDA runtime wheel torch was "
        "built for (`pip install nvidia-cuda-runtime-cu12`), or set CUDA_HOME"
    )


def cache_dir() -> Path:
    if os.environ.get("VRAMTRACE_CACHE"):
        return Path(os.environ["VRAMTRACE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vramtrace"


def build_command(torch, cxx: str, include: Path, out: Path) -> list:
    """The compiler command that builds the shim into ``out``."""
    root = Path(torch.__file__).resolve().parent
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    return [
        cxx, "-O2", "-shared", "-fPIC", "-std=c++17", "-w",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        "-I", str(root / "include"), "-I", str(include),
        str(SOURCE),
        "-L", str(root / "lib"), "-lc10", "-lc10_cuda", "-ltorch_cpu",
        f"-Wl,-rpath,{root / 'lib'}",
        "-o", str(out),
    ]


def build(torch, quiet: bool = False) -> Path:
    """The shim built for this torch, building it if needed."""
    cxx = compiler()
    include = cuda_include()
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), HEADER.read_bytes(), torch.__version__.encode(),
                 torch.__file__.encode(), cxx.encode(), str(include).encode(),
                 sys.platform.encode()):
        key.update(part)
        key.update(b"\0")
    folder = cache_dir()
    target = folder / f"torch_observer-{torch.__version__.split('+')[0]}-{key.hexdigest()[:16]}.so"
    if target.is_file():
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # Opened here, held by the `with` below: the error of opening it is the cache's.
        lock = open(folder / (target.name + ".lock"), "w")  # noqa: SIM115
    except OSError as e:
        raise ShimError(f"cannot write vramtrace's cache {folder}: {e} (set VRAMTRACE_CACHE)") from e
    with lock:
        # Whoever held the lock may have built it meanwhile.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return target
        if not quiet:
            print(f"vramtrace: building the PyTorch observer shim for torch {torch.__version__} "
                  "(once; a few seconds)", file=sys.stderr, flush=True)
        with tempfile.NamedTemporaryFile(dir=folder, suffix=".so", delete=False) as tmp:
            partial = Path(tmp.name)
        try:
            proc = subprocess.run(build_command(torch, cxx, include, partial),
                                  check=False, capture_output=True, text=True)
            if proc.returncode != 0:
                first = next((l for l in proc.stderr.splitlines() if "error" in l),
                             proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "")
                raise ShimError(
                    f"building vramtrace's PyTorch shim failed with torch {torch.__version__} "
                    f"({first.strip()}); record with mode='replace', or report this torch version"
                )
            os.replace(partial, target)
        finally:
            if partial.exists():
                partial.unlink()
    return target


_shim: ctypes.CDLL | None = None


def load(torch, quiet: bool = False) -> ctypes.CDLL:
    """The shim, built if needed and loaded once, its functions typed."""
    global _shim
    if _shim is None:
        path = build(torch, quiet)
        try:
            shim = ctypes.CDLL(str(path))
        except OSError as e:
            raise ShimError(f"cannot load vramtrace's PyTorch shim {path}: {e}") from e
        shim.vramtrace_shim_abi.restype = ctypes.c_uint32
        shim.vramtrace_shim_error.restype = ctypes.c_char_p
        shim.vramtrace_shim_attach.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        shim.vramtrace_shim_attach.restype = ctypes.c_int
        shim.vramtrace_shim_detach.restype = None
        shim.vramtrace_shim_snapshot.restype = ctypes.c_int
        shim.vramtrace_shim_watch_gradients.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                                                        ctypes.c_uint64]
        shim.vramtrace_shim_watch_gradients.restype = ctypes.c_void_p
        shim.vramtrace_shim_unwatch.argtypes = [ctypes.c_void_p]
        shim.vramtrace_shim_unwatch.restype = None
        shim.vramtrace_shim_tag_new_gradients.argtypes = [ctypes.c_void_p]
        shim.vramtrace_shim_tag_new_gradients.restype = ctypes.c_int64
        if shim.vramtrace_shim_abi() != SHIM_ABI:
            raise ShimError(f"{path} speaks another ABI than this vramtrace; delete it to rebuild")
        _shim = shim
    return _shim


def error(shim: ctypes.CDLL) -> str:
    """The shim's message for its last failed call."""
    return (shim.vramtrace_shim_error() or b"").decode("utf-8", "replace")
