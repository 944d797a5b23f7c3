"""``python -m vramtrace run [options] script.py args...`` (or ``-m module
args...``): runs an unmodified script or module with its GPU memory
recorded.

By default PyTorch's own allocator is observed (the script runs exactly as
without vramtrace); ``--mode replace`` runs it on vramtrace's allocator,
under ``--alloc-conf`` settings. ``--annotate KEY=VALUE`` writes a note into
the trace as ``vramtrace.annotate(KEY, VALUE)`` would (``--annotate batch=8``
tells ``vramtrace plan`` the run's batch size)."""

from __future__ import annotations

import argparse
import os
import re
import runpy
import sys
from typing import NoReturn

import vramtrace
from vramtrace import _bounded


class _Parser(argparse.ArgumentParser):
    """Usage errors on one line, as the analyzer gives them, not argparse's
    usage block above them."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see --help)\n")


def annotation(text: str) -> tuple:
    """A ``KEY=VALUE`` argument of ``--annotate``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (batch=8), got {text!r}")
    return key.strip(), value


# How the user started this module, for usage errors: `vramtrace run` runs
# it and says so in VRAMTRACE_COMMAND (taken out of the environment before
# the program runs, so that nothing the program starts inherits it).
_COMMAND = "python -m vramtrace"


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=_COMMAND,
        description="Record a PyTorch program's GPU memory with vramtrace.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="run a script or module with its GPU memory recorded",
                         description="Run SCRIPT (or, with -m, MODULE) with its GPU memory "
                         "recorded, then `vramtrace summary TRACE` or `vramtrace report TRACE`.")
    run.add_argument("--out", metavar="FILE",
                     help="trace file (%%p pid, %%r RANK, %%d device; default vramtrace-%%p.vtrace)")
    run.add_argument("--mode", choices=["observe", "replace"], default="observe",
                     help="observe PyTorch's allocator (default), or replace it with vramtrace's")
    run.add_argument("--stacks", choices=["python", "native", "all", "none"],
                     help="stacks recorded per allocation (default python)")
    run.add_argument("--alloc-conf", metavar="CONF",
                     help="allocator settings, PYTORCH_CUDA_ALLOC_CONF syntax (--mode replace)")
    run.add_argument("--keep-last", metavar="SIZE|DURATION",
                     help="keep only the last part of the trace on disk (50MiB, 10min), for "
                     "long jobs and servers; SIGUSR2 or vramtrace.dump() writes the part kept "
                     "so far, the first out-of-memory error writes TRACE-oom.vtrace")
    run.add_argument("--no-phases", action="store_true",
                     help="do not turn record_function ranges into phases")
    run.add_argument("--no-iterations", action="store_true",
                     help="do not mark an iter phase per optimizer step")
    run.add_argument("--no-categories", action="store_true",
                     help="do not tag the blocks of parameters, buffers, gradients and "
                     "optimizer state (the analyzer then infers every category)")
    run.add_argument("--annotate", metavar="KEY=VALUE", type=annotation, action="append",
                     default=[],
                     help="write a note into the trace, as vramtrace.annotate(KEY, VALUE) does "
                     "(repeatable; batch=8 or seq=512 tells `vramtrace plan` the run's value)")
    run.add_argument("--strict", action="store_true",
                     help="fail instead of running unrecorded when recording cannot start")
    run.add_argument("-m", dest="module", action="store_true",
                     help="run a module, as `python -m MODULE` does")
    run.add_argument("script", metavar="SCRIPT|MODULE", help="the Python script (or module) to run")
    run.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    return p


def run_error(message: str) -> NoReturn:
    """A usage error of `run`, on one line, naming the command typed."""
    sub = _Parser(prog=f"{_COMMAND} run")
    sub.error(message)


def _names_written(out: str, keep_last: bool) -> re.Pattern:
    """What the recording may write for the ``--out`` pattern ``out``, as a
    pattern of absolute paths: the trace of each device (``%d``, or a
    ``.devN`` suffix for devices after the first), and with ``keep_last``
    its out-of-memory and numbered dumps beside it. ``%p`` is this process
    (the script runs in it) and ``%r`` the ``RANK`` variable, as the
    recorder expands them."""
    values = {"%p": str(os.getpid()), "%r": os.environ.get("RANK", "").strip() or "0",
              "%%": "%"}

    def expand(text: str, device: str) -> list:
        """``text``'s pieces: literal text, and ``device`` for ``%d``."""
        return [device if p == "%d" else values.get(p, p) for p in re.split(r"(%.)", text)]

    folder, name = os.path.split(out)
    # The folder resolved as the file system will (links, `..`), the name
    # as a pattern.
    folder = os.path.realpath("".join(expand(folder, "0")) or ".")
    pieces = expand(name, "\0")
    has_device = "%d" in re.split(r"(%.)", name)
    literal = "".join("[0-9]+" if p == "\0" else re.escape(p) for p in pieces)
    stem, dot, ext = literal.rpartition(re.escape("."))
    dot_ext = dot + ext if dot else ""
    stem = stem if dot else literal
    names = [literal]
    if not has_device:
        names.append(stem + r"\.dev[0-9]+" + dot_ext)
    if keep_last:
        names += [stem + "-oom" + dot_ext, stem + "-dump-[0-9]+" + dot_ext]
    return re.compile(re.escape(os.path.join(folder, "")) + "(?:" + "|".join(names) + ")")


def check_out(out: str | None, inputs: list, keep_last: bool) -> None:
    """Refuses an ``--out`` that would write over an input (the script, or
    the module's file), as the analyzer refuses an output over its input:
    one line, exit status 2, before anything runs."""
    written = _names_written(out or "vramtrace-%p.vtrace", keep_last)
    for path in inputs:
        if written.fullmatch(os.path.realpath(path)):
            run_error(f"the output {out} is the input {path}: writing it would destroy the "
                      "input; choose another output")


def main(argv=None) -> int:
    global _COMMAND
    _COMMAND = os.environ.pop("VRAMTRACE_COMMAND", "") or _COMMAND
    ns = parser().parse_args(argv)
    if ns.keep_last is not None:
        try:
            ns.keep_last = _bounded.check_keep_last(ns.keep_last)
        except vramtrace.VramtraceError as e:
            run_error(str(e))
    if ns.alloc_conf is not None and ns.mode != "replace":
        run_error("--alloc-conf needs --mode replace (an observed PyTorch uses "
                       "PYTORCH_CUDA_ALLOC_CONF)")
    if ns.module:
        import importlib.util
        try:
            spec = importlib.util.find_spec(ns.script)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            run_error(f"no module named {ns.script}")
        inputs = [spec.origin] if spec.origin and os.path.isfile(spec.origin) else []
    elif not os.path.isfile(ns.script):
        run_error(f"no such script: {ns.script}")
    else:
        inputs = [ns.script]
    check_out(ns.out, inputs, ns.keep_last is not None)
    strict = ns.strict or None
    try:
        if ns.mode == "replace":
            if ns.keep_last:
                os.environ["VRAMTRACE_KEEP_LAST"] = ns.keep_last
                _bounded.install_signal_handler()
            vramtrace.install(ns.out, alloc_conf=ns.alloc_conf, stacks=ns.stacks,
                              mode="replace", strict=strict)
        else:
            vramtrace.start(ns.out, stacks=ns.stacks, phases=not ns.no_phases,
                            iterations=not ns.no_iterations, categories=not ns.no_categories,
                            strict=strict, keep_last=ns.keep_last)
        if vramtrace.installed():
            # Kept by the library until each trace begins (in observer mode,
            # when the program initializes CUDA): every trace opens with them.
            for key, value in ns.annotate:
                vramtrace.annotate(key, value)
    except vramtrace.VramtraceError as e:
        # One line, true to what happens: the program does not run.
        print(f"error: vramtrace: {e}; {ns.script} was not run", file=sys.stderr)
        return 2
    try:
        return _run(ns)
    except vramtrace.VramtraceError as e:
        if not ns.strict or "(strict)" not in str(e):
            raise
        # Recording was to start with CUDA, inside the program, and could not.
        print(f"error: vramtrace: {e}; {ns.script} was stopped", file=sys.stderr)
        return 2


def _run(ns: argparse.Namespace) -> int:
    """Runs the script or module as Python would run it."""
    sys.argv = [ns.script, *ns.args]
    if ns.module:
        # As `python -m module` would: the current folder first on the path,
        # and sys.argv[0] the module's file.
        sys.path.insert(0, os.getcwd())
        runpy.run_module(ns.script, run_name="__main__", alter_sys=True)
        return 0
    # As `python script.py` would: the script's folder first on the path.
    sys.path.insert(0, os.path.dirname(os.path.abspath(ns.script)))
    runpy.run_path(ns.script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
