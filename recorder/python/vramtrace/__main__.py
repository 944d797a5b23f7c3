"""``python -m vramtrace run [--out FILE] [--alloc-conf CONF] [--stacks MODE]
script.py args...``: runs an unmodified script under the recorder."""

from __future__ import annotations

import argparse
import os
import runpy
import sys

import vramtrace


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vramtrace",
        description="Record a PyTorch program's GPU memory with vramtrace.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a script under the recorder")
    run.add_argument("--out", help="trace file (%%p pid, %%r RANK, %%d device)")
    run.add_argument("--alloc-conf", help="allocator settings "
                     "(PYTORCH_CUDA_ALLOC_CONF syntax)")
    run.add_argument("--stacks", choices=["python", "native", "all", "none"])
    run.add_argument("script")
    run.add_argument("args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    vramtrace.install(ns.out, alloc_conf=ns.alloc_conf, stacks=ns.stacks)
    sys.argv = [ns.script, *ns.args]
    # As `python script.py` would: the script's folder first on the path.
    sys.path.insert(0, os.path.dirname(os.path.abspath(ns.script)))
    runpy.run_path(ns.script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
