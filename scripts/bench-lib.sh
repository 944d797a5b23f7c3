# Shared by the bench scripts (sourced, after `out` names the output folder):
# the machine line that heads a table, and one timed command.

# Prints the machine (cores, CPU model) and the time, and starts
# $out/table.txt with it.
machine_line() {
  echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(date -u '+%F %H:%M') UTC" | tee "$out/table.txt"
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
