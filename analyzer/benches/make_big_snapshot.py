#!/usr/bin/env python3
"""Writes a large, realistic PyTorch memory snapshot pickle for benchmarking imports.

    python3 analyzer/benches/make_big_snapshot.py OUT.pickle [--events 3000000] [--seed 1]

The pickle is written opcode by opcode (standard library only, constant memory) the
way CPython's pickle.dump(protocol=4) writes a real snapshot: every dict, list and str
memoized, frame dicts shared between stacks through the memo (LONG_BINGET), frames
lists shared between entries with the same traceback, ~30-50 frames per stack with
PyTorch-like names, one `N/A` string per entry, in frames of 64 KiB (the FRAME
opcodes CPython begins before an object once a frame holds that much). The ring
buffer starts mid-run (the
first events of the simulated run are dropped), so the importer must rebuild the
initial state. `pickle.load` reads the result. Never commit the output (~425 MB).
"""
import argparse
import random
import struct

MEMOIZE = b"\x94"
MARK = b"("


FRAME_SIZE = 64 * 1024  # pickle's _FRAME_SIZE_TARGET


class W:
    def __init__(self, f):
        self.f = f
        self.memo = 0
        self.buf = bytearray()
        self.frame = bytearray()

    def put(self, b):
        self.frame += b

    def obj(self):
        """An object begins: as CPython's framer, end the frame here once it is full."""
        if len(self.frame) >= FRAME_SIZE:
            self.commit()

    def commit(self):
        if self.frame:
            self.buf += b"\x95" + struct.pack("<Q", len(self.frame)) + self.frame
            self.frame = bytearray()
        if len(self.buf) > 1 << 20:
            self.flush()

    def flush(self):
        self.f.write(self.buf)
        self.buf = bytearray()

    def memoize(self):
        self.put(MEMOIZE)
        self.memo += 1
        return self.memo - 1

    def val(self, b):
        self.obj()
        self.put(b)

    def s(self, text):
        self.obj()
        b = text.encode()
        if len(b) < 256:
            self.put(b"\x8c" + bytes([len(b)]) + b)
        else:
            self.put(b"X" + struct.pack("<I", len(b)) + b)
        return self.memoize()


def get(i):
    return (b"h" + bytes([i])) if i < 256 else (b"j" + struct.pack("<I", i))


def int_op(v):
    if 0 <= v < 256:
        return b"K" + bytes([v])
    if 0 <= v < 65536:
        return b"M" + struct.pack("<H", v)
    if -(2**31) <= v < 2**31:
        return b"J" + struct.pack("<i", v)
    n = (v.bit_length() + 8) // 8
    return b"\x8a" + bytes([n]) + v.to_bytes(n, "little", signed=True)


CPP = [
    "at::native::empty_cuda", "at::native::add_out", "at::native::mm_out_cuda",
    "at::native::layer_norm_cuda", "at::native::softmax_cuda", "at::_ops::empty_strided::call",
    "at::native::cudnn_convolution", "at::native::gelu_out", "at::_ops::addmm::redispatch",
    "torch::autograd::VariableType::addmm", "torch::autograd::Engine::evaluate_function",
    "c10::impl::wrap_kernel_functor_unboxed_::call", "at::native::index_select_out_cuda",
]
PY = [
    ("forward", "torch/nn/modules/linear.py"), ("forward", "torch/nn/modules/conv.py"),
    ("_call_impl", "torch/nn/modules/module.py"), ("_wrapped_call_impl", "torch/nn/modules/module.py"),
    ("forward", "model/transformer.py"), ("attention", "model/attention.py"),
    ("step", "torch/optim/adamw.py"), ("backward", "torch/_tensor.py"), ("train_step", "train.py"),
]
PREFIX = [
    ("torch::unwind::unwind()", "??"),
    ("torch::CapturedTraceback::gather(bool, bool, bool)", "??"),
    ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(unsigned long, CUstream_st*)",
     "CUDACachingAllocator.cpp"),
]
SUFFIX = [("<module>", "train.py"), ("Py_RunMain", "??"), ("Py_BytesMain", "??"),
          ("__libc_start_main", "??"), ("_start", "??")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--events", type=int, default=3_000_000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rnd = random.Random(a.seed)

    frames = list(PREFIX) + list(SUFFIX)
    for i in range(2500):
        if i % 2:
            n = rnd.choice(CPP)
            frames.append((f"{n}<T{i}>(at::Tensor const&, c10::Scalar const&)", "??"))
        else:
            n, f = rnd.choice(PY)
            frames.append((f"{n}_{i}", f"/opt/venv/lib/python3.12/site-packages/{f}"))
    frame_lines = [rnd.randrange(0, 2000) for _ in frames]
    nfix = len(PREFIX) + len(SUFFIX)
    stacks = []
    for _ in range(6000):
        mid = [rnd.randrange(nfix, len(frames)) for _ in range(rnd.randrange(22, 42))]
        stacks.append(list(range(len(PREFIX))) + mid + list(range(len(PREFIX), nfix)))

    # Simulate: 48 segments of 64 MiB, 1024 slots of 64 KiB each.
    seg_base = [0x7F0000000000 + i * (1 << 27) for i in range(48)]
    slots = [(b, k) for b in seg_base for k in range(1024)]
    rnd.shuffle(slots)
    free_slots = slots[:]
    live = {}  # addr -> (requested, stack)
    t = 1_795_000_000_000_000
    events = []  # (action, addr, size, time, stack)
    skip = a.events // 20  # the ring buffer lost the start of the run
    total = a.events + skip
    for b in seg_base:
        events.append(("segment_alloc", b, 1 << 26, t, rnd.randrange(len(stacks))))
    while len(events) < total:
        t += rnd.randrange(1, 40)
        if free_slots and (len(live) < 5000 or rnd.random() < 0.5):
            j = rnd.randrange(len(free_slots))
            free_slots[j], free_slots[-1] = free_slots[-1], free_slots[j]
            b, k = free_slots.pop()
            addr = b + k * 65536
            req = rnd.randrange(1, 65536)
            st = rnd.randrange(len(stacks))
            live[addr] = (req, st)
            events.append(("alloc", addr, req, t, st))
        else:
            addr = rnd.choice(list(live)) if len(live) < 64 else next(iter(live))
            req, st = live.pop(addr)
            free_slots.append(((addr // (1 << 27)) * (1 << 27), (addr % (1 << 27)) // 65536))
            fs = rnd.randrange(len(stacks))
            events.append(("free_requested", addr, req, t, fs))
            events.append(("free_completed", addr, req, t + 1, fs))
    events = events[len(events) - a.events:]

    with open(a.out, "wb") as f:
        w = W(f)
        w.buf += b"\x80\x04"  # PROTO comes before the first frame
        w.put(b"}")
        w.memoize()
        w.put(MARK)
        keys = {}

        def key(k):
            if k in keys:
                w.val(get(keys[k]))
            else:
                keys[k] = w.s(k)

        frame_memo = {}
        stack_memo = {}
        stack_bytes = {}  # a stack's frames as memo references, once all are memoized

        def frames_list(si, share):
            w.obj()
            if share and si in stack_memo:
                w.put(get(stack_memo[si]))
                return
            w.put(b"]")
            m = w.memoize()
            w.put(MARK)
            if si in stack_bytes:
                w.put(stack_bytes[si])
                w.put(b"e")
                stack_memo[si] = m
                return
            for fi in stacks[si]:
                w.obj()
                if fi in frame_memo:
                    w.put(get(frame_memo[fi]))
                else:
                    w.put(b"}")
                    frame_memo[fi] = w.memoize()
                    w.put(MARK)
                    key("name")
                    w.s(frames[fi][0])
                    key("filename")
                    w.s(frames[fi][1])
                    key("line")
                    w.val(int_op(frame_lines[fi]))
                    w.put(b"u")
            w.put(b"e")
            stack_memo[si] = m
            if all(fi in frame_memo for fi in stacks[si]):
                stack_bytes[si] = b"".join(get(frame_memo[fi]) for fi in stacks[si])

        def seg_of(addr):
            return (addr // (1 << 27)) * (1 << 27)

        # segments: the end state
        key("segments")
        w.put(b"]")
        w.memoize()
        w.put(MARK)
        by_seg = {}
        for addr, (req, st) in live.items():
            by_seg.setdefault(seg_of(addr), []).append((addr, req, st))
        for b in seg_base:
            w.put(b"}")
            w.memoize()
            w.put(MARK)
            for k, v in [("device", 0), ("address", b), ("total_size", 1 << 26), ("stream", 0)]:
                key(k)
                w.put(int_op(v))
            key("is_expandable")
            w.put(b"\x89")
            key("frames")
            frames_list(0, True)
            key("blocks")
            w.put(b"]")
            w.memoize()
            w.put(MARK)
            at = b
            blocks = sorted(by_seg.get(b, []))
            for addr, req, st in blocks + [(b + (1 << 26), 0, None)]:
                if addr > at:
                    w.put(b"}")
                    w.memoize()
                    w.put(MARK)
                    for k, v in [("address", at), ("size", addr - at), ("requested_size", 0)]:
                        key(k)
                        w.put(int_op(v))
                    key("state")
                    w.s("inactive")
                    key("frames")
                    frames_list(0, True)
                    w.put(b"u")
                if st is None:
                    break
                size = max(512, (req + 511) // 512 * 512)
                w.put(b"}")
                w.memoize()
                w.put(MARK)
                for k, v in [("address", addr), ("size", size), ("requested_size", req)]:
                    key(k)
                    w.put(int_op(v))
                key("state")
                w.s("active_allocated")
                key("frames")
                frames_list(st, True)
                w.put(b"u")
                at = addr + size
            w.put(b"e")
            w.put(b"u")
        w.put(b"e")

        key("device_traces")
        w.put(b"]")
        w.memoize()
        w.put(b"]")
        w.memoize()
        actions = {}
        for i in range(0, len(events), 1000):
            w.put(MARK)
            for action, addr, size, tt, st in events[i:i + 1000]:
                w.obj()
                w.put(b"}")
                w.memoize()
                w.put(MARK)
                key("action")
                if action in actions:
                    w.val(get(actions[action]))
                else:
                    actions[action] = w.s(action)
                key("addr")
                w.val(int_op(addr))
                key("size")
                w.val(int_op(size))
                key("stream")
                w.val(b"K\x00")
                key("time_us")
                w.val(int_op(tt))
                key("compile_context")
                w.s("N/A")
                key("user_metadata")
                key("")  # the empty string, shared
                key("frames")
                frames_list(st, rnd.random() < 0.7)
                w.put(b"u")
            w.put(b"e")
        w.put(b"a")

        key("allocator_settings")
        w.put(b"}")
        w.memoize()
        w.put(MARK)
        key("expandable_segments")
        w.put(b"\x89")
        key("max_split_size")
        w.put(int_op(-1))
        w.put(b"u")

        key("external_annotations")
        w.put(b"]")
        w.memoize()
        step = max(1, len(events) // 200)
        w.put(MARK)
        for i in range(0, len(events) - step, step):
            for stage, tt in (("START", events[i][3]), ("END", events[i + step - 1][3])):
                w.put(b"}")
                w.memoize()
                w.put(MARK)
                key("stage")
                w.s(stage)
                key("name")
                w.s(f"step{i // step}")
                key("device")
                w.put(b"K\x00")
                key("time_us")
                w.put(int_op(tt))
                w.put(b"u")
        w.put(b"e")
        w.put(b"u.")
        w.commit()
        w.flush()


if __name__ == "__main__":
    main()
