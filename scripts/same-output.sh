#!/usr/bin/env bash
# Runs every command of two `vramtrace` binaries on the bundled fixtures, in
# every output (text, JSON, SVG, HTML), and says whether each output is
# byte-identical. A refactor that should change no output proves it here:
#
#   scripts/same-output.sh OLD_BINARY NEW_BINARY
#
# (build OLD_BINARY from the commit before, e.g. with `git worktree add`).
# Exits non-zero when any output differs, and lists the ones that do. The
# outputs stay in a temporary folder when they differ, to be diffed.
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 OLD_BINARY NEW_BINARY" >&2
  exit 2
fi
old=$(realpath "$1")
new=$(realpath "$2")
cd "$(dirname "$0")/.."
work=$(mktemp -d)
# Runs at two batch sizes, and a rank set, for `plan` and the rank tables.
"$old" synth --iters 3 --layers 2 --batch 4 --annotate -o "$work/b4.vtrace" >/dev/null
"$old" synth --iters 3 --layers 2 --batch 8 --annotate -o "$work/b8.vtrace" >/dev/null
"$old" synth --iters 3 --layers 2 --world-size 3 -o "$work/rank%r.vtrace" >/dev/null
f=fixtures
t=$f/torch

# Each line: a name for the output, then the arguments. `OUT` is replaced by
# a file of the run's own, whose content is compared too.
cases=(
  "info-clean info $f/clean.vtrace"
  "info-json info --json $f/oom.vtrace"
  "summary-clean summary $f/clean.vtrace"
  "summary-oom summary $f/oom.vtrace"
  "summary-oom-json summary --json $f/oom.vtrace"
  "summary-two summary $f/two-devices.vtrace"
  "summary-two-json summary --json $f/two-devices.vtrace"
  "summary-gpt2 summary $t/gpt2_train.pickle.xz"
  "summary-gpt2-json summary --json $t/gpt2_train.pickle.xz"
  "summary-midrun summary $t/gpt2_midrun.pickle.xz"
  "summary-ranks summary --ranks $work/rank0.vtrace $work/rank1.vtrace $work/rank2.vtrace"
  "summary-ranks-json summary --json --ranks $work/rank0.vtrace $work/rank1.vtrace $work/rank2.vtrace"
  "leaks-ranks leaks --ranks $work/rank0.vtrace $work/rank1.vtrace $work/rank2.vtrace"
  "compare-ranks compare $work/rank0.vtrace $work/rank1.vtrace"
  "frag fragmentation $f/fragmenting.vtrace"
  "frag-json fragmentation --json $f/fragmenting.vtrace"
  "frag-svg fragmentation $f/fragmenting.vtrace -o OUT.svg"
  "leaks leaks $f/leak.vtrace"
  "leaks-json leaks --json $f/leak.vtrace"
  "leaks-svg leaks $f/leak.vtrace -o OUT.svg"
  "leaks-compat leaks $f/compat/leak-1.0.vtrace"
  "timeline-svg timeline $f/clean.vtrace -o OUT.svg"
  "timeline-cat timeline --by category $t/gpt2_train.pickle.xz -o OUT.svg"
  "timeline-json timeline --json $f/two-devices.vtrace"
  "timeline-oom timeline $f/oom.vtrace -o OUT.svg"
  "timeline-pools timeline $t/synthetic/torch_2_12_p4.pickle -o OUT.svg"
  "flame-svg flamegraph $f/oom.vtrace -o OUT.svg"
  "flame-json flamegraph --json $t/gpt2_train.pickle.xz"
  "export-perfetto export --format perfetto $f/clean.vtrace -o OUT.json"
  "report-oom report $f/oom.vtrace -o OUT.html"
  "report-gpt2 report $t/gpt2_train.pickle.xz -o OUT.html"
  "report-two report $f/two-devices.vtrace -o OUT.html"
  "report-pools report $t/synthetic/torch_2_12_p4.pickle -o OUT.html"
  "report-baseline report $f/leak.vtrace --baseline $f/clean.vtrace -o OUT.html"
  "report-json report --json $f/oom.vtrace -o OUT.html"
  "compare compare $f/clean.vtrace $f/leak.vtrace"
  "compare-json compare --json $f/clean.vtrace $f/leak.vtrace"
  "compare-gate compare $f/clean.vtrace $f/leak.vtrace --fail-on peak_allocated:+1%"
  "compare-svg compare $f/clean.vtrace $f/leak.vtrace -o OUT.svg"
  "simulate simulate --gpu l4 $f/oom.vtrace"
  "simulate-json simulate --json --compare-policies $t/mlp_expandable.pickle.xz"
  "simulate-min simulate --min-capacity $t/cnn_eval_accumulate.pickle.xz"
  "simulate-svg simulate --compare-policies $f/fragmenting.vtrace -o OUT.svg"
  "simulate-oom-svg simulate $t/synthetic/capped_oom_p4.pickle -o OUT.svg"
  "plan plan $work/b4.vtrace $work/b8.vtrace --gpu l4"
  "plan-json plan --json $work/b4.vtrace $work/b8.vtrace --gpu l4"
  "plan-at plan $work/b4.vtrace $work/b8.vtrace --gpu l4 --at 6 --alloc-conf expandable_segments:False --alloc-conf expandable_segments:True"
  "plan-one plan $work/b8.vtrace --gpu t4"
  "import import $t/mlp_empty_cache.pickle.xz -o OUT.vtrace"
  "synth synth --seed 7 -o OUT.vtrace"
)

differ=()
for case in "${cases[@]}"; do
  read -r name args <<<"$case"
  for side in old new; do
    bin=$old
    [ "$side" = new ] && bin=$new
    dir=$work/$side
    mkdir -p "$dir"
    # shellcheck disable=SC2086
    (set -f; "$bin" ${args//OUT/$dir/$name} >"$dir/$name.stdout" 2>"$dir/$name.stderr"; echo $? >"$dir/$name.rc")
  done
  for file in "$work"/old/"$name".*; do
    other=$work/new/${file##*/}
    # Messages name the output's folder, and synth says how fast it ran.
    if ! cmp -s <(sed -e "s#$work/old#OUT#g" -e 's/Generated in .*//' "$file") \
                <(sed -e "s#$work/new#OUT#g" -e 's/Generated in .*//' "$other"); then
      differ+=("${file##*/}")
    fi
  done
done

failed=$(grep -L '^0$' "$work"/old/*.rc | sed 's#.*/##; s#\.rc$##' | tr '\n' ' ')
[ -n "$failed" ] && echo "note: these exit non-zero with the old binary: $failed"
echo "${#cases[@]} commands compared"
if [ ${#differ[@]} -gt 0 ]; then
  echo "differ (outputs kept in $work):"
  printf '  %s\n' "${differ[@]}"
  exit 1
fi
echo "every output byte-identical"
rm -rf "$work"
