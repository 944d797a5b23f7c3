#!/usr/bin/env bash
# `vramtrace summary` of a large synthetic trace, several builds side by side
# on two pinned cores: the rate behind performance.md's "summary, 100 M
# events, 2 cores" row. Makes the trace once (`synth --events EVENTS --seed
# 1` with the first build), puts it in the page cache, then runs each
# build's `summary` in turn, RUNS rounds, so that a change of the machine's
# state falls on every build alike. Prints, per build, the median wall and
# CPU (user + system) time with their spread (min-max), the peak RSS, and
# events per second of median wall time; then each build against the first.
#
# Usage: scripts/bench-summary-rate.sh OUT_DIR NAME=BIN_DIR [NAME=BIN_DIR ...]
#   BIN_DIR holds a release build of vramtrace. From the environment:
#   EVENTS   events of the trace (default 100M; any size `synth` reads)
#   RUNS     rounds (default 5)
#   CORES    the two cores (default: core 0 and the lowest core that is not
#            one of its hardware threads, see `two_cores` in bench-lib.sh)
#   TRACE    an existing trace to read instead of a synthetic one
set -euo pipefail
out=${1:?usage: scripts/bench-summary-rate.sh OUT_DIR NAME=BIN_DIR [NAME=BIN_DIR ...]}
shift
[ $# -ge 1 ] || { echo "usage: scripts/bench-summary-rate.sh OUT_DIR NAME=BIN_DIR ..." >&2; exit 2; }
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/bench-lib.sh"
pin_two_cores

machine_line "$cores"
first=${1#*=}
if [ -n "${TRACE:-}" ]; then
  trace=$TRACE
else
  trace="$work/synth.vtrace"
  "$first/vramtrace" synth --events "${EVENTS:-100M}" --seed 1 -o "$trace" > /dev/null
fi
events=$("$first/vramtrace" info --json "$trace" | python3 -c "import json, sys; print(json.load(sys.stdin)['events'])")
echo "trace: $(basename "$trace"), $(stat -c %s "$trace") bytes, $events events" | tee -a "$out/table.txt"
cat "$trace" > /dev/null # in the page cache for every build alike
for i in $(seq "${RUNS:-5}"); do
  for build in "$@"; do
    measure "${build%%=*}_$i" $two "${build#*=}/vramtrace" summary "$trace"
  done
done
names=""
for build in "$@"; do names="$names ${build%%=*}"; done
awk -v events="$events" -v names="$names" "$table_stats_awk"'
  END {
    k = split(names, order, " ")
    for (i = 1; i <= k; i++) {
      b = order[i]; mw[b] = median(w[b]); mc[b] = median(c[b])
      printf "median %-12s wall %6.2f s (%.2f-%.2f)  cpu %6.2f s (%.2f-%.2f)  peak RSS %6.1f MiB  %5.1f M events/s  %d runs\n",
        b, mw[b], lo(w[b]), hi(w[b]), mc[b], lo(c[b]), hi(c[b]), r[b], events / mw[b] / 1e6, n[b]
    }
    for (i = 2; i <= k; i++)
      printf "%s / %s: %.3fx wall, %.3fx cpu\n", order[i], order[1], mw[order[i]] / mw[order[1]], mc[order[i]] / mc[order[1]]
  }' "$out/table.txt" | tee -a "$out/table.txt"
