#!/usr/bin/env bash
# Every comparison of issue #31 in one run on a GPU machine, alternating,
# with the table written to OUT/table.md (docs/performance-history.md, "Recording
# as cheap as PyTorch's own hook"):
#
# - pairs: observer mode's cost per `torch.empty` + free pair at Python
#   depths of 4, 22 and 40 frames, and on a GPT-2 step, against native and
#   PyTorch's history (python/bench/bench_observer.py), this build
#   and BASELINE's in alternate processes;
# - multi: DDP and FSDP2 GPT-2 steps on every GPU under torchrun, native
#   and recorded with the defaults in turn, with the traces' peaks checked
#   against PyTorch's (python/gpu/multi_gpu_check.py); skipped
#   with fewer than two GPUs;
# - snapshot: `vramtrace summary` of a 3 M-event snapshot against PyTorch's
#   `_memory_viz stats`, both on the same two pinned cores
#   (scripts/bench-snapshot.sh), and BASELINE's build.
#
# Usage: scripts/bench-recording.sh DIR OUT [BASELINE_DIR]
#   DIR (and BASELINE_DIR) hold a release `vramtrace` and
#   `libvramtrace_recorder.so`. PARTS (default pairs,multi,snapshot) picks
#   the parts; PROCESSES, ROUNDS, CONFIGS, CPUS (bench_observer.py),
#   STRATEGIES, MULTI_ARGS (multi_gpu_check.py), RUNS and TORCH_RUNS
#   (bench-snapshot.sh) come from the environment.
set -euo pipefail
dir=$(cd "${1:?usage: scripts/bench-recording.sh DIR OUT [BASELINE_DIR]}" && pwd)
out=${2:?usage: scripts/bench-recording.sh DIR OUT [BASELINE_DIR]}
base=${3:+$(cd "$3" && pwd)}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
parts=",${PARTS:-pairs,multi,snapshot},"
export PYTHONPATH="$here/python${PYTHONPATH:+:$PYTHONPATH}"
export VRAMTRACE_LIB="$dir/libvramtrace_recorder.so"
table="$out/table.md"
{
  echo "# scripts/bench-recording.sh, $(date -u '+%F %H:%M') UTC"
  echo
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2> /dev/null | sed 's/^/GPU: /' || true
  echo "CPU: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo
} > "$table"
if [[ $parts == *,pairs,* ]]; then
  python3 "$here/python/bench/bench_observer.py" --out "$out/pairs" \
    --processes "${PROCESSES:-2}" --rounds "${ROUNDS:-3}" \
    --configs "${CONFIGS:-tracker,observe-none,observe-python}" ${CPUS:+--cpus "$CPUS"} \
    ${base:+--baseline-lib "$base/libvramtrace_recorder.so"}
  cat "$out/pairs/bench-observer.md" >> "$table"
fi
if [[ $parts == *,multi,* ]]; then
  python3 "$here/python/gpu/multi_gpu_check.py" --bin "$dir" --out "$out/multi" \
    --strategies "${STRATEGIES:-ddp,fsdp}" ${MULTI_ARGS:-} || true
  { echo; cat "$out/multi/multi-gpu-check.md"; } >> "$table" 2> /dev/null || true
fi
if [[ $parts == *,snapshot,* ]]; then
  RUNS=${RUNS:-5} TORCH_RUNS=${TORCH_RUNS:-3} BASELINE=$base \
    bash "$here/scripts/bench-snapshot.sh" "$dir" "$out/snapshot"
  { echo; echo '```'; cat "$out/snapshot/table.txt"; echo '```'; } >> "$table"
fi
rm -rf "$out/multi/cache" "$out/pairs/cache"
find "$out" -name '*.vtrace' -size +20M -delete
cat "$table"
