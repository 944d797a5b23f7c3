#!/usr/bin/env bash
# Instructions (callgrind) that `vramtrace summary` takes on the same real
# snapshot in PyTorch 2.11's shape and in 2.12's (a `pool_id` pair on every
# trace entry), for two binaries: a change to the snapshot reader proves here
# that it costs the older shape little and reads the newer one as fast.
#
#   scripts/bench-snapshot-shapes.sh OLD_BINARY NEW_BINARY
#
# Needs python3 and valgrind; build both binaries with `--release`.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 OLD_BINARY NEW_BINARY" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$work" <<'PY'
import lzma, pickle, sys
work = sys.argv[1]
s = pickle.load(lzma.open("fixtures/torch/gpt2_train.pickle.xz"))
with open(f"{work}/shape-2.11.pickle", "wb") as f:
    pickle.dump(s, f, protocol=4)
for trace in s["device_traces"]:
    for e in trace:
        e["pool_id"] = (0, len(trace) * 0)  # one pair per entry, as PyTorch makes them
with open(f"{work}/shape-2.12.pickle", "wb") as f:
    pickle.dump(s, f, protocol=4)
PY
for shape in 2.11 2.12; do
  for bin in "$1" "$2"; do
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
      "$bin" summary "$work/shape-$shape.pickle" >/dev/null 2>"$work/cg.log"
    n=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$work/cg.log")
    printf '%s\t%s\t%s instructions\n' "$shape" "$bin" "$n"
  done
done
