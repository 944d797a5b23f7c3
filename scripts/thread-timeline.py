#!/usr/bin/env python3
"""Where a command's threads spend their time, without perf.

    scripts/thread-timeline.py [--bucket SECONDS] COMMAND [ARG...]

Runs COMMAND (its stdout discarded) and reads each of its threads' CPU time
(the first field of /proc/PID/task/TID/schedstat, in nanoseconds) every 2 ms.
Prints the wall time, then each thread in the order it was created with its
CPU time and the span it was busy in, then one row per bucket (25 ms by
default): each thread's share of a core in percent. Linux only. Pin the
command and the sampler apart, so that sampling takes no time from the
command:

    taskset -c 4 scripts/thread-timeline.py taskset -c 0,1 vramtrace summary SNAPSHOT

Shares read a little over 100 now and then: the sampler's reads are not
exactly 2 ms apart.
"""
import os
import signal
import subprocess
import sys
import time


def main(argv):
    bucket = 0.025
    if len(argv) >= 2 and argv[0] == "--bucket":
        bucket = float(argv[1])
        argv = argv[2:]
    if not argv or argv[0] in ("-h", "--help"):
        sys.exit(__doc__.strip().splitlines()[2].strip())
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    t0 = time.perf_counter()
    samples = []  # (seconds since start, thread id, CPU ns)
    while child.poll() is None:
        t = time.perf_counter() - t0
        try:
            tids = os.listdir(f"/proc/{child.pid}/task")
        except OSError:
            tids = []
        for tid in tids:
            try:
                with open(f"/proc/{child.pid}/task/{tid}/schedstat") as f:
                    samples.append((t, int(tid), int(f.read().split()[0])))
            except (OSError, ValueError, IndexError):
                pass  # the thread ended between the listing and the read
        time.sleep(0.002)
    wall = time.perf_counter() - t0
    tids = sorted({tid for _, tid, _ in samples})
    last, busy, rows = {}, {}, {}
    for t, tid, ns in samples:
        prev = last.get(tid)
        if prev is not None and ns > prev[1]:
            row = rows.setdefault(int(t / bucket), {})
            row[tid] = row.get(tid, 0) + ns - prev[1]
            start, _ = busy.get(tid, (prev[0], t))
            busy[tid] = (start, t)
        last[tid] = (t, ns)
    print(f"wall {wall:.3f} s, exit status {child.returncode}; threads in order of creation:")
    for i, tid in enumerate(tids):
        start, end = busy.get(tid, (0.0, 0.0))
        print(f"  t{i} cpu {last[tid][1] / 1e9:.3f} s, busy {start:.3f}-{end:.3f} s")
    print("from (s) " + " ".join(f"{'t' + str(i):>4}" for i in range(len(tids))))
    for b in sorted(rows):
        shares = (100 * rows[b].get(tid, 0) / (bucket * 1e9) for tid in tids)
        print(f"{b * bucket:8.3f} " + " ".join(f"{share:4.0f}" for share in shares))


if __name__ == "__main__":
    # Piped into `head`, end quietly when the reader stops reading.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main(sys.argv[1:])
