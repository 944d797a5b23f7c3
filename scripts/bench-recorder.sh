#!/usr/bin/env bash
# The recorder's criterion benchmark (alloc+free pairs: raw, recording without
# stacks, with native stacks), on one core and on two, optionally side by side
# with an older build run alternately with it.
#
# Usage: scripts/bench-recorder.sh EXE [BASELINE_EXE]
#   EXE: the criterion executable of `cargo bench --no-run -p vramtrace-recorder
#   --bench recorder` (it names it: target/release/deps/recorder-<hash>).
#   CORES1 and CORES2 (default 2 and 2,3) choose the cores.
set -euo pipefail
new=${1:?usage: scripts/bench-recorder.sh EXE [BASELINE_EXE]}
old=${2:-}
one=${CORES1:-2}
two=${CORES2:-2,3}
# shellcheck source=scripts/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
machine_info "$two"
for cores in "$one" "$two"; do
  for exe in ${old:+"$old"} "$new"; do
    echo "== $(basename "$exe") on cores $cores"
    taskset -c "$cores" "$exe" --bench --warm-up-time 1 --measurement-time 3 --noplot 2>&1 \
      | grep -E "^alloc|time:"
  done
done
