#!/usr/bin/env bash
# A distributed run's rank table at scale: writes RANKS synthetic rank traces
# (`synth --world-size`, the load varied by rank) at each iteration count of
# ITERS, then times `vramtrace summary DIR` on them (the rank table, read
# IN_FLIGHT traces at a time) with its peak RSS, and the merge of per-rank
# `summary --json` files. Time should grow with the total size, memory not.
#
# Usage: scripts/bench-ranks.sh BIN_DIR [OUT_DIR]
#   BIN_DIR holds a release build of vramtrace. RANKS (default 512), ITERS
#   (default "25 50 100"), IN_FLIGHT (default 4) and RUNS (default 3) come
#   from the environment.
set -euo pipefail
bin=${1:?usage: scripts/bench-ranks.sh BIN_DIR [OUT_DIR]}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ranks=${RANKS:-512}

source "$(dirname "$0")/bench-lib.sh"

machine_line
for iters in ${ITERS:-25 50 100}; do
  dir="$work/ranks-$iters"
  mkdir -p "$dir"
  "$bin/vramtrace" synth --iters "$iters" --world-size "$ranks" -o "$dir/run-%r.vtrace" | tee -a "$out/table.txt"
  du -sb "$dir" | awk -v i="$iters" '{printf "iters %s: %d bytes in all\n", i, $1}' | tee -a "$out/table.txt"
  cat "$dir"/* > /dev/null # in the page cache for every run alike
  for run in $(seq "${RUNS:-3}"); do
    measure "summary_${iters}_$run" "$bin/vramtrace" summary --in-flight "${IN_FLIGHT:-4}" "$dir"
  done
  # The batch-system way: a JSON summary per rank (here in turn), then one merge.
  mkdir -p "$work/json-$iters"
  for trace in "$dir"/*; do
    "$bin/vramtrace" summary --json "$trace" > "$work/json-$iters/$(basename "$trace").json"
  done
  measure "merge_${iters}" "$bin/vramtrace" merge "$work/json-$iters"/*.json
  rm -rf "$dir" "$work/json-$iters"
done
