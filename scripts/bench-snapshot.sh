#!/usr/bin/env bash
# Snapshot summary side by side with PyTorch's own tools, both pinned to two
# cores: makes a 3-million-event snapshot (about 390 MB, standard-library
# Python), then times `vramtrace summary` on it (RUNS times) and, where
# torch is installed, `python3 -m torch.cuda._memory_viz stats` and a bare
# `pickle.load` (once each: they take seconds and gigabytes).
#
# Usage: scripts/bench-snapshot.sh BIN_DIR [OUT_DIR]
#   BIN_DIR holds a release build of vramtrace. RUNS (default 5) and
#   EVENTS (default 3000000) come from the environment; BASELINE=DIR names
#   another build (an older commit's) to time alternately with it.
#   CORES (default 0,1) names the two cores.
set -euo pipefail
bin=${1:?usage: scripts/bench-snapshot.sh BIN_DIR [OUT_DIR]}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
here=$(cd "$(dirname "$0")/.." && pwd)
two="taskset -c ${CORES:-0,1}"
export RAYON_NUM_THREADS=2
snapshot="$work/big.pickle"

source "$(dirname "$0")/bench-lib.sh"

machine_line
python3 "$here/analyzer/benches/make_big_snapshot.py" "$snapshot" --events "${EVENTS:-3000000}"
ls -l "$snapshot" | awk '{print "snapshot bytes:", $5}' | tee -a "$out/table.txt"
cat "$snapshot" > /dev/null # in the page cache for every command alike
for i in $(seq "${RUNS:-5}"); do
  measure "vramtrace_summary_$i" $two "$bin/vramtrace" summary "$snapshot"
  if [ -n "${BASELINE:-}" ]; then
    measure "baseline_summary_$i" $two "$BASELINE/vramtrace" summary "$snapshot"
  fi
done
if python3 -c "import torch" 2> /dev/null; then
  measure torch_memory_viz_stats $two python3 -m torch.cuda._memory_viz stats "$snapshot"
  measure pickle_load $two python3 -c "import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))" "$snapshot"
else
  echo "torch not installed: no side-by-side figures" | tee -a "$out/table.txt"
fi
