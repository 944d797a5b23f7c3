# Shared by the bench scripts (sourced, after `out` names the output folder):
# the machine line that heads a table, one timed command, and the awk rules
# that sum the table up.

# machine_info [CORES]: prints the machine (cores, CPU model), the time, the
# load average and, for a benchmark pinned to CORES (comma-separated), the
# hardware threads that share each of those cores, then on a line of its own
# the first of those cores' speed (`core_speed`). A lent host's speed varies
# from call to call (a 3 M-event snapshot's `summary` took 0.56 s on one H200
# host and 1.0 s on another); two pinned cores that are one core's two
# threads, or a busy host, are the first things to rule out.
machine_info() {
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u '+%F %H:%M') UTC, load $(cut -d' ' -f1-3 /proc/loadavg)${1:+, $(core_siblings "$1")}"
  if [ -n "${1:-}" ]; then
    core_speed "${1%%,*}"
  fi
}

# machine_line [CORES]: `machine_info`, printed and starting $out/table.txt.
machine_line() {
  machine_info "$@" | tee "$out/table.txt"
}

# core_speed CORE: how fast one core of this machine runs plain compute, for
# telling hosts apart: the fastest of three runs of a 30 M-step Python loop
# pinned to CORE (nothing where python3 is missing; a line saying so where
# CORE cannot be pinned, so that a benchmark under `set -e` goes on). On 2026-12-04 it took
# 0.31 s on the dev CPU and 0.45 to 0.89 s on the H200 hosts lent in four
# calls. `vramtrace summary`, bound by one thread's instructions, follows it;
# `pickle.load`, which allocates 1.6 GiB, does not (8.7 s on the host whose
# loop took 0.89 s, 12.6 s on the dev CPU), and neither, as much, does
# `stats`, the ratio's other side, two fifths of which is that load.
core_speed() {
  command -v python3 > /dev/null || return 0
  taskset -c "$1" python3 -c '
import time
def once():
    start = time.perf_counter()
    sum(range(30_000_000))
    return time.perf_counter() - start
best = min(once() for _ in range(3))
print(f"core speed: a 30 M-step Python loop in {best:.3f} s on core '"$1"' (fastest of 3)")' \
    2> /dev/null || echo "core speed: not measured (core $1 cannot be pinned)"
}

# thread_siblings CORE: the other hardware threads of CORE's physical core,
# separated by spaces (nothing when it has none), from the kernel's topology,
# whose list is ranges and single cores ("0-1", "0,8"); fails where the
# kernel does not say.
thread_siblings() {
  local list
  list=$(cat "/sys/devices/system/cpu/cpu$1/topology/thread_siblings_list" 2> /dev/null) || return 1
  echo "$list" | awk -v c="$1" -F, '{
    for (i = 1; i <= NF; i++) { n = split($i, r, "-"); for (x = r[1]; x <= r[n]; x++) if (x != c) o = o (o == "" ? "" : " ") x }
    print o }'
}

# two_cores: the two cores a two-core benchmark is pinned to when CORES is
# not given: core 0 and the lowest online core that is not a hardware thread
# of core 0's physical core (two threads of one core are not two cores: they
# share its execution units and caches); "0,1" where the kernel does not
# say. (A virtual machine shows its own topology, which need not be the
# host's.)
two_cores() {
  local siblings cpu n second=""
  siblings=" $(thread_siblings 0 || true) "
  for cpu in /sys/devices/system/cpu/cpu[0-9]*; do
    n=${cpu##*cpu}
    if [ "$n" -eq 0 ] || [ "$(cat "$cpu/online" 2> /dev/null || echo 1)" != 1 ] \
      || [[ "$siblings" == *" $n "* ]]; then
      continue
    fi
    if [ -z "$second" ] || [ "$n" -lt "$second" ]; then
      second=$n
    fi
  done
  echo "0,${second:-1}"
}

# pin_two_cores: sets `cores` (CORES from the environment, else `two_cores`)
# and `two`, the `taskset` prefix that pins a command to them, and gives
# rayon two threads: the set-up every two-core benchmark shares.
pin_two_cores() {
  cores=${CORES:-$(two_cores)}
  two="taskset -c $cores"
  export RAYON_NUM_THREADS=2
}

# core_siblings LIST: for each core of a comma-separated LIST, the other
# hardware threads of its physical core ("alone" where there are none, "?"
# where the kernel does not say).
core_siblings() {
  local core others out=""
  for core in ${1//,/ }; do
    if others=$(thread_siblings "$core"); then
      others=${others:+shares with $others}
      others=${others:-alone}
    else
      others="?"
    fi
    out="$out${out:+; }core $core $others"
  done
  echo "pinned: $out"
}

# measure NAME COMMAND...: runs the command (its output in $out/NAME.log) and
# adds its wall time, user CPU time, peak RSS and system CPU time
# (/usr/bin/time) to the table.
measure() {
  local name=$1; shift
  /usr/bin/time -f "%e %U %M %S" -o "$out/$name.time" "$@" > "$out/$name.log" 2>&1
  read -r wall user rss sys < "$out/$name.time"
  printf '%-24s wall %7.2f s  user %7.2f s  peak RSS %6.1f MiB  sys %7.2f s\n' \
    "$name" "$wall" "$user" "$(awk "BEGIN{print $rss/1024}")" "$sys" | tee -a "$out/table.txt"
}

# The awk rules and functions the summaries of a table share (awk's program
# is "$table_stats_awk" followed by the script's own END block): the lines
# `measure` wrote, collected by command name (NAME_3 counts as NAME) into
# the wall times w[NAME], the CPU times (user + system) c[NAME], the runs
# n[NAME], the highest peak RSS r[NAME] (MiB) and each run's wall time by
# its own name (NAME_3) in run_wall[]; and the median, lowest and highest
# of such a list of times.
table_stats_awk='
  / wall / {
    name = $1; sub(/_[0-9]+$/, "", name)
    for (i = 2; i < NF; i++) {
      if ($i == "wall") wall = $(i + 1)
      if ($i == "user") user = $(i + 1)
      if ($i == "sys") sys = $(i + 1)
      if ($i == "RSS") rss = $(i + 1)
    }
    w[name] = w[name] " " wall; c[name] = c[name] " " (user + sys); n[name]++
    run_wall[$1] = wall
    if (rss > r[name]) r[name] = rss
  }
  function sorted(list, a,   k, i, j, x) {
    k = split(list, a, " ")
    for (i = 2; i <= k; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return k
  }
  function median(list,   a, k) { k = sorted(list, a); return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
  function lo(list,   a) { sorted(list, a); return a[1] }
  function hi(list,   a, k) { k = sorted(list, a); return a[k] }
'
