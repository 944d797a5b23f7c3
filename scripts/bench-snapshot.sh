#!/usr/bin/env bash
# Snapshot summary side by side with PyTorch's own tools, both pinned to two
# cores. Times `vramtrace summary` on a snapshot (RUNS times) and, where
# torch is installed, `python3 -m torch.cuda._memory_viz stats` in the same
# loop, alternating with it (TORCH_RUNS times, default 1: each takes seconds
# and gigabytes), and a bare `pickle.load` once. The last lines of the table
# are, for each command, the median wall and CPU (user + system) time with
# their spread (min-max over the runs), the pickle read per second of wall
# time (MB/s), the ratio of torch's median to ours, and the median of the
# ratios run by run (each torch run against the two of ours around it).
#
# Usage: scripts/bench-snapshot.sh BIN_DIR [OUT_DIR]
#   BIN_DIR holds a release build of vramtrace. From the environment:
#   SNAPSHOT=FILE  an existing snapshot pickle (plain or compressed) to time;
#                  without it, a 3-million-event snapshot (about 390 MB) is
#                  made with standard-library Python (EVENTS, default 3000000)
#   RUNS           vramtrace runs (default 5)
#   TORCH_RUNS     torch runs, alternating with the first ones (default 1);
#                  RUNS=N+1 TORCH_RUNS=N pairs every torch run (the run-by-run
#                  ratio, the figure to quote)
#   BASELINE=DIR   another build (an older commit's) timed alternately with it
#   CORES          the two cores (default: core 0 and the lowest core that is not
#                  one of its hardware threads, see `two_cores` in bench-lib.sh)
#   PHASES=N       then N runs of each build under scripts/thread-timeline.py
#                  (its sampler on core SAMPLER_CORE, default 4), alternating,
#                  split into the parse (up to the end of the logging thread,
#                  the busiest thread besides the main one that starts in the
#                  first 50 ms) and the rest (the analysis and the exit)
set -euo pipefail
bin=${1:?usage: scripts/bench-snapshot.sh BIN_DIR [OUT_DIR]}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
here=$(cd "$(dirname "$0")/.." && pwd)
source "$(dirname "$0")/bench-lib.sh"
pin_two_cores

machine_line "$cores"
if [ -n "${SNAPSHOT:-}" ]; then
  snapshot=$SNAPSHOT
else
  snapshot="$work/big.pickle"
  python3 "$here/analyzer/benches/make_big_snapshot.py" "$snapshot" --events "${EVENTS:-3000000}"
fi
echo "snapshot: $(basename "$snapshot"), $(stat -c %s "$snapshot") bytes" | tee -a "$out/table.txt"
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
# A compressed snapshot is read inflated: MB/s counts the pickle's bytes.
bytes=$(python3 - "$snapshot" << 'EOF'
import bz2, gzip, lzma, sys
path = sys.argv[1]
head = open(path, "rb").read(6)
opener = (gzip.open if head[:2] == b"\x1f\x8b" else lzma.open if head == b"\xfd7zXZ\x00"
          else bz2.open if head[:3] == b"BZh" else open)
n = 0
with opener(path, "rb") as f:
    while chunk := f.read(1 << 24):
        n += len(chunk)
print(n)
EOF
)
echo "pickle bytes: $bytes" | tee -a "$out/table.txt"
# Medians with their spread, throughput and the ratio to torch.
awk -v bytes="$bytes" "$table_stats_awk"'
  END {
    for (k in w) {
      mw[k] = median(w[k]); mc[k] = median(c[k])
      printf "median %-22s wall %6.2f s (%.2f-%.2f)  cpu %6.2f s (%.2f-%.2f)  %5.0f MB/s  %d runs\n",
        k, mw[k], lo(w[k]), hi(w[k]), mc[k], lo(c[k]), hi(c[k]), bytes / mw[k] / 1e6, n[k]
    }
    if (("torch_memory_viz_stats" in mw) && ("vramtrace_summary" in mw))
      printf "torch stats / vramtrace summary: %.1fx wall, %.1fx cpu\n",
        mw["torch_memory_viz_stats"] / mw["vramtrace_summary"], mc["torch_memory_viz_stats"] / mc["vramtrace_summary"]
    # Each torch run against the mean of the vramtrace runs just before and
    # after it: a drift of the host speed between runs cancels in each
    # ratio, and no run of ours counts without a torch run beside it.
    pairs = ""; k = 0
    for (i = 1; (("torch_memory_viz_stats_" i) in run_wall) && (("vramtrace_summary_" (i + 1)) in run_wall); i++) {
      ours = (run_wall["vramtrace_summary_" i] + run_wall["vramtrace_summary_" (i + 1)]) / 2
      pairs = pairs " " run_wall["torch_memory_viz_stats_" i] / ours; k++
    }
    if (k > 0)
      printf "torch stats / vramtrace summary, run by run: %.1fx wall (%.1f-%.1f), %d pairs\n",
        median(pairs), lo(pairs), hi(pairs), k
    if (("baseline_summary" in mw) && ("vramtrace_summary" in mw))
      printf "vramtrace / baseline: %.3fx wall, %.3fx cpu\n",
        mw["vramtrace_summary"] / mw["baseline_summary"], mc["vramtrace_summary"] / mc["baseline_summary"]
  }' "$out/table.txt" | tee -a "$out/table.txt"
# Phases from thread timelines: a "phase NAME WALL PARSE REST" line a run.
phases() {
  local name=$1; shift
  taskset -c "${SAMPLER_CORE:-4}" python3 "$here/scripts/thread-timeline.py" $two "$@" > "$work/timeline.txt"
  python3 - "$work/timeline.txt" "$name" << 'EOF' | tee -a "$out/phases.txt"
import re, sys
text = open(sys.argv[1]).read()
wall = float(re.search(r"wall ([0-9.]+) s", text).group(1))
spans = [(float(cpu), float(start), float(end), name) for name, cpu, start, end in
         re.findall(r"(t\d+) cpu ([0-9.]+) s, busy ([0-9.]+)-([0-9.]+) s", text)]
logger = max((s for s in spans if s[3] != "t0" and s[1] < 0.05), key=lambda s: s[0])
print(f"phase {sys.argv[2]} {wall:.3f} {logger[2]:.3f} {wall - logger[2]:.3f}")
EOF
}
for i in $(seq "${PHASES:-0}"); do
  phases vramtrace_summary "$bin/vramtrace" summary "$snapshot"
  if [ -n "${BASELINE:-}" ]; then
    phases baseline_summary "$BASELINE/vramtrace" summary "$snapshot"
  fi
done
if [ "${PHASES:-0}" -gt 0 ]; then
  python3 - "$out/phases.txt" << 'EOF' | tee -a "$out/table.txt"
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    _, name, *times = line.split()
    runs.setdefault(name, []).append([float(t) for t in times])
def spread(values):
    return f"{statistics.median(values):.3f} ({min(values):.2f}-{max(values):.2f})"
for name, rows in runs.items():
    wall, parse, rest = zip(*rows)
    print(f"phases {name:<22} wall {spread(wall)}  parse {spread(parse)}  rest {spread(rest)}  {len(rows)} runs")
EOF
fi
