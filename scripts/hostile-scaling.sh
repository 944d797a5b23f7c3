#!/usr/bin/env bash
# Times the binary on the crafted traces of issue #32 (each family at two
# sizes): 10x the input should cost about 10x the time, never 100x.
#
#   scripts/hostile-scaling.sh [VRAMTRACE_BINARY] [DIR]
#
# The traces are written into DIR (default target/hostile) by the scaling
# test's writer; each run is limited to LIMIT seconds (default 300) and its peak memory shown.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/vramtrace}
dir=${2:-target/hostile}
if [ ! -e "$dir/distinct-stacks-100000.vtrace" ]; then
    VRAMTRACE_HOSTILE_DIR="$PWD/$dir" cargo test --release -p vramtrace --test scaling \
        -- --ignored write_hostile_inputs >/dev/null
fi
out=$(mktemp -d)
run() { # family size label command...
    local family=$1 n=$2 label=$3
    shift 3
    local t0 t1 rc=0
    t0=$(date +%s.%N)
    /usr/bin/time -f %M -o "$out/mem" timeout "${LIMIT:-300}" "$bin" "$@" >/dev/null 2>"$out/err" || rc=$?
    t1=$(date +%s.%N)
    printf '%-22s %8s %-9s %8.2f s %7d MB%s\n' "$family" "$n" "$label" "$(echo "$t1 - $t0" | bc)" \
        "$(( $(tail -1 "$out/mem" 2>/dev/null || echo 0) / 1024 ))" "$([ $rc = 0 ] || echo " (exit $rc)")"
}
family() { # name command sizes...
    local name=$1 command=$2
    shift 2
    for n in "$@"; do
        local trace="$dir/$name-$n.vtrace"
        case $command in
        report) run "$name" "$n" "$command" report "$trace" -o "$out/r.html" --no-what-if ;;
        export) run "$name" "$n" "$command" export "$trace" --format perfetto -o "$out/p.json" ;;
        *) run "$name" "$n" "$command" "$command" "$trace" --json ;;
        esac
    done
}
family deep-phases report 50000 200000
family unclosed-phases leaks 100000 200000
family overlapping-segments report 5000 20000
family expandable-churn simulate 10000 60000
family zero-size-segments summary 10000 100000
family leaking-steps report 10000 50000
family descending-segments report 100000 400000
family many-devices summary 10000 100000
family distinct-stacks export 10000 100000
family distinct-stacks report 10000 100000
rm -rf "$out"
