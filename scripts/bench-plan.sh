#!/usr/bin/env bash
# The fit planner at scale (issue #30): `vramtrace plan` over two
# 1-million-event synthetic runs at batch 4 and 8, on 2 pinned cores, three
# times each under a cap the runs fit far below (the search doubles, then
# bisects; every simulation replays every request) and under one that cuts
# the search short.
#
# Usage: scripts/bench-plan.sh BIN_DIR [OUT_DIR]
#   BIN_DIR holds a release build of vramtrace.
#   CORES (from the environment): the two cores (default: core 0 and the
#   lowest core that is not one of its hardware threads, see `two_cores` in
#   bench-lib.sh).
# Writes a log per step into OUT_DIR (default: a temporary directory) and
# prints a table at the end.
set -euo pipefail
bin=${1:?usage: scripts/bench-plan.sh BIN_DIR [OUT_DIR]}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
vt="$bin/vramtrace"
# shellcheck source=scripts/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
pin_two_cores

machine_line "$cores"
for b in 4 8; do
  "$vt" synth --events 1M --batch "$b" --seq-len 256 --annotate -o "$work/b$b.vtrace" > /dev/null
done
ls -l "$work"/b4.vtrace "$work"/b8.vtrace | awk '{print $9, $5, "bytes"}' | tee -a "$out/table.txt"
for round in 1 2 3; do
  measure "plan_80GiB_$round" $two "$vt" plan "$work/b4.vtrace" "$work/b8.vtrace" --cap 80GiB --timing
  grep -h "^timing" "$out/plan_80GiB_$round.log" | tee -a "$out/table.txt"
  measure "plan_2GiB_$round" $two "$vt" plan "$work/b4.vtrace" "$work/b8.vtrace" --cap 2GiB --timing
done
grep -h "^answer" "$out/plan_80GiB_1.log" | cut -c1-160 | tee -a "$out/table.txt"
echo "logs in $out"
