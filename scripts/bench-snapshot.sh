#!/usr/bin/env bash
# Snapshot summary side by side with PyTorch's own tools, both pinned to two
# cores: makes a 3-million-event snapshot (about 390 MB, standard-library
# Python), then times `vramtrace summary` on it (RUNS times) and, where
# torch is installed, `python3 -m torch.cuda._memory_viz stats` in the
# same loop, alternating with it (TORCH_RUNS times, default 1: each takes
# seconds and gigabytes), and a bare `pickle.load` once. The last lines of
# the table are the medians and the ratio of torch's median to ours.
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
have_torch=$(python3 -c "import torch" 2> /dev/null && echo yes || true)
for i in $(seq "${RUNS:-5}"); do
  measure "vramtrace_summary_$i" $two "$bin/vramtrace" summary "$snapshot"
  if [ -n "${BASELINE:-}" ]; then
    measure "baseline_summary_$i" $two "$BASELINE/vramtrace" summary "$snapshot"
  fi
  if [ -n "$have_torch" ] && [ "$i" -le "${TORCH_RUNS:-1}" ]; then
    measure "torch_memory_viz_stats_$i" $two python3 -m torch.cuda._memory_viz stats "$snapshot"
  fi
done
if [ -n "$have_torch" ]; then
  measure pickle_load $two python3 -c "import pickle, sys; pickle.load(open(sys.argv[1], 'rb'))" "$snapshot"
else
  echo "torch not installed: no side-by-side figures" | tee -a "$out/table.txt"
fi
# Medians, throughput and the ratio to torch.
bytes=$(stat -c %s "$snapshot")
awk -v bytes="$bytes" '
  / wall / { name = $1; sub(/_[0-9]+$/, "", name); t[name] = t[name] " " $3 }
  function median(list,   a, n, i, j, x) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    for (k in t) { m[k] = median(t[k]); printf "median %-22s %7.2f s  %6.2f GB/s\n", k, m[k], bytes / m[k] / 1e9 }
    if (("torch_memory_viz_stats" in m) && ("vramtrace_summary" in m))
      printf "torch stats / vramtrace summary: %.1fx\n", m["torch_memory_viz_stats"] / m["vramtrace_summary"]
  }' "$out/table.txt" | tee -a "$out/table.txt"
