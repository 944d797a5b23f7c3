#!/usr/bin/env python3
"""Writes the hostile inputs of issue #32 (snapshots, merge) into a folder, at a
size given as a scale, so that each case can be timed at two sizes:

    scripts/hostile-snapshots.py OUT_DIR [SCALE [SUMMARY_JSON]]

- device_traces.pickle.xz: a snapshot whose `device_traces` holds 100,000 × SCALE
  lists of one alloc each (a few hundred KB of xz);
- memo_bomb.pickle: 16,000 × SCALE LONG_BINPUTs, each 65,535 past the last
  (closer past 65,535 of them, to stay below 2^32): 5 bytes each, for which a
  dense memo grew by up to 256 KiB;
- none_list.pickle: a snapshot whose one device list holds 16 M × SCALE NONEs
  (uncompressed, 16 MiB per scale unit);
- merge.json: a JSON array of 100,000 × SCALE summaries (about 25 MB per scale
  unit): copies of SUMMARY_JSON (`vramtrace summary --json TRACE`) when given,
  else of a built-in one.

The `synth` cases need no input: `vramtrace synth --layers 4294967295 -o x.vtrace`
and `vramtrace synth --iters 4294967295 -o x.vtrace`.
"""
import json
import lzma
import os
import struct
import sys

PROTO4 = b"\x80\x04"
STOP = b"."
MARK, APPENDS, EMPTY_LIST, EMPTY_DICT, SETITEMS = b"(", b"e", b"]", b"}", b"u"


def short_str(s):
    b = s.encode()
    return b"\x8c" + bytes([len(b)]) + b


def long1(i):
    return b"\x8a\x08" + struct.pack("<Q", i)


def entry(addr, time_us):
    # {"action": "alloc", "addr": addr, "size": 512, "stream": 0, "time_us": t}
    return (EMPTY_DICT + MARK + short_str("action") + short_str("alloc")
            + short_str("addr") + long1(addr) + short_str("size") + long1(512)
            + short_str("stream") + long1(0) + short_str("time_us") + long1(time_us)
            + SETITEMS)


def device_traces(path, lists):
    # {"device_traces": [[alloc], [alloc], ...], "segments": []}: one list per
    # device, each holding one entry (CPython would memoize them too, which
    # changes nothing for the reader).
    with lzma.open(path, "wb", preset=9) as f:
        f.write(PROTO4 + EMPTY_DICT + MARK + short_str("device_traces") + EMPTY_LIST)
        for i in range(lists):
            f.write(EMPTY_LIST + entry(0x10000000 * (i + 1), 1000 + i) + b"a" + b"a")
        f.write(short_str("segments") + EMPTY_LIST + SETITEMS + STOP)


def memo_bomb(path, puts):
    # Indices stay below 2^32: past 65,535 stores they are closer together.
    step = min(65535, (2**32 - 1) // puts)
    with open(path, "wb") as f:
        f.write(PROTO4 + b"N")
        f.writelines(b"r" + struct.pack("<I", i * step) for i in range(1, puts + 1))
        f.write(STOP)


def none_list(path, nones):
    with open(path, "wb") as f:
        f.write(PROTO4 + EMPTY_DICT + short_str("device_traces") + EMPTY_LIST)
        f.write(EMPTY_LIST)  # device 0's list
        batch = MARK + b"N" * 1000 + APPENDS
        f.writelines(batch for _ in range(nones // 1000))
        # The device list into device_traces, then device_traces into the dict.
        f.write(b"a" + b"s" + STOP)


SUMMARY = {
    "path": "rank-0.vtrace",
    "rank": 0,
    "device": 0,
    "events": 123456,
    "peak_allocated": {"bytes": 1 << 30, "time_ns": 1000, "index": 10,
                       "replayed_events": 11, "phase": "step1"},
    "peak_reserved": {"bytes": 2 << 30, "time_ns": 1000, "index": 10,
                      "replayed_events": 11, "phase": "step1"},
    "end": {"allocated": 1 << 20, "reserved": 1 << 29},
}


def merge_json(path, count, summary):
    with open(path, "w") as f:
        f.write("[")
        for i in range(count):
            s = dict(summary)
            s["path"] = f"rank-{i}.vtrace"
            s["rank"] = i
            if i:
                f.write(",")
            json.dump(s, f)
        f.write("]")


def main():
    out = sys.argv[1]
    scale = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    os.makedirs(out, exist_ok=True)
    summary = SUMMARY
    if len(sys.argv) > 3:
        with open(sys.argv[3]) as f:
            summary = json.load(f)
    device_traces(os.path.join(out, "device_traces.pickle.xz"), 100_000 * scale)
    memo_bomb(os.path.join(out, "memo_bomb.pickle"), 16_000 * scale)
    none_list(os.path.join(out, "none_list.pickle"), 16_000_000 * scale)
    merge_json(os.path.join(out, "merge.json"), 100_000 * scale, summary)


if __name__ == "__main__":
    main()
