#!/usr/bin/env bash
# CPU benchmarks of vramtrace at scale: the 100-million-event synthetic trace
# (summary, timeline, report, info: speed, peak memory, output sizes) and the
# criterion benchmarks of the trace format and the recorder, each pinned to
# the cores a target names (taskset), so a busy or larger machine gives
# comparable figures.
#
# Usage: scripts/bench-cpu.sh BIN_DIR [OUT_DIR]
#   BIN_DIR holds release builds: vramtrace, and optionally the criterion
#   executables format-bench and recorder-bench
#   (cargo bench --no-run -p vramtrace-recorder names them).
#   CORES (from the environment): the two cores (default: core 0 and the
#   lowest core that is not one of its hardware threads, see `two_cores` in
#   bench-lib.sh); one-core runs take the first of them.
# Writes a log per step into OUT_DIR (default: a temporary directory) and
# prints a table at the end.
set -euo pipefail
bin=${1:?usage: scripts/bench-cpu.sh BIN_DIR [OUT_DIR]}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
vt="$bin/vramtrace"
# shellcheck source=scripts/bench-lib.sh
source "$(dirname "$0")/bench-lib.sh"
pin_two_cores
one="taskset -c ${cores%%,*}"

# Its own `measure`, in place of bench-lib's: wall seconds and peak RSS only.
measure() { # name, command...: wall seconds and peak RSS via /usr/bin/time
  local name=$1; shift
  /usr/bin/time -f "%e %M" -o "$out/$name.time" "$@" > "$out/$name.log" 2>&1
  read -r wall rss < "$out/$name.time"
  printf '%-28s %8.2f s  %8.0f MiB\n' "$name" "$wall" "$(awk "BEGIN{print $rss/1024}")" | tee -a "$out/table.txt"
}

machine_line "$cores"
measure synth_100M        $two "$vt" synth --events 100M --seed 1 -o "$work/100m.vtrace"
ls -l "$work/100m.vtrace" | awk '{print "trace bytes:", $5}' | tee -a "$out/table.txt"
measure info_100M         $two "$vt" info "$work/100m.vtrace"
measure summary_100M      $two "$vt" summary "$work/100m.vtrace"
measure timeline_100M     $two "$vt" timeline "$work/100m.vtrace" -o "$work/timeline.svg"
measure report_100M       $two "$vt" report "$work/100m.vtrace" -o "$work/report.html"
ls -l "$work/timeline.svg" "$work/report.html" | awk '{print $9, $5, "bytes"}' | tee -a "$out/table.txt"
grep -h "events" "$out/summary_100M.log" | head -2 | tee -a "$out/table.txt"
if [ -x "$bin/format-bench" ]; then
  $one "$bin/format-bench" --bench --warm-up-time 1 --measurement-time 5 > "$out/format-bench.log" 2>&1 || true
  grep -E "bytes per event|thrpt|^format" "$out/format-bench.log" | tee -a "$out/table.txt"
fi
if [ -x "$bin/recorder-bench" ]; then
  # Twice: on one core the writer thread's encoding competes with the
  # allocating thread; on two it runs beside it, as in a real process.
  for cores in one two; do
    echo "recorder-bench, taskset ${!cores#taskset }" | tee -a "$out/table.txt"
    ${!cores} "$bin/recorder-bench" --bench --warm-up-time 1 --measurement-time 4 \
      > "$out/recorder-bench-$cores.log" 2>&1 || true
    grep -E "time:|^recorder|^alloc" "$out/recorder-bench-$cores.log" | tee -a "$out/table.txt"
  done
fi
