#!/usr/bin/env bash
# Runs GPU checks of python/gpu/ in one call of the device machine, each
# under its own time limit, and packs their reports for the trip back.
#
#   CHECKS="observer:240 categories:190" scripts/gpu-checks.sh
#
# CHECKS: NAME:SECONDS pairs, each running python/gpu/NAME_check.py --bin
# carry --out /tmp/gpu/NAME under `timeout SECONDS` (without --bin for a
# check that takes none). Expects the stripped release binaries in carry/
# (docs/gpu-check.md says how to build them). Prints the machine, then per
# check its exit status, time and PASS / FAIL / SKIP counts with the first
# failing lines; writes every report and log to $OUT/gpu.tgz (the device
# tool brings back 8 files at most). The checks write their verdicts in one
# of two forms, counted alike: a table row (`| PASS | what | detail |`) or
# a line (`ok   what detail`, `FAIL what detail`).
set -u
cd "$(dirname "$0")/.."
: "${CHECKS:?set CHECKS, e.g. CHECKS=\"observer:240 categories:190\"}"
: "${OUT:?set OUT to the folder the reports go to}"
export PYTHONPATH=python VRAMTRACE_LIB=$PWD/carry/libvramtrace_recorder.so \
    VRAMTRACE_BIN=$PWD/carry/vramtrace PATH=$PWD/carry:$PATH
work=/tmp/gpu
mkdir -p "$work"
# The report lines of a check's log that give a verdict (PASS, FAIL, SKIP),
# as a table row or as a line (`ok` for PASS).
verdicts() {
  local word=$1
  [ "$1" = PASS ] && word=ok
  grep -cE "^(\| $1 \||$word +[^ ])" "$2"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
for spec in $CHECKS; do
  name=${spec%%:*}
  limit=${spec##*:}
  log=$work/$name.log
  start=$SECONDS
  bin=(--bin carry)
  grep -q -- '"--bin"' "python/gpu/${name}_check.py" || bin=()
  timeout "$limit" python3 "python/gpu/${name}_check.py" "${bin[@]}" --out "$work/$name" > "$log" 2>&1
  rc=$?
  echo "=== $name: exit $rc after $((SECONDS - start)) s; $(verdicts PASS "$log") pass, $(verdicts FAIL "$log") fail, $(verdicts SKIP "$log") skipped"
  grep -E "^(\| FAIL \||FAIL )|Traceback|Error" "$log" | head -8
done
tar czf "$OUT/gpu.tgz" -C "$(dirname "$work")" "$(basename "$work")"
