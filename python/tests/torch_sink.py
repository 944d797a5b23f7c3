"""The C structures through which the shim feeds the library in observer
mode (`recorder-ffi/src/observe/abi.rs`, `SINK_ABI` 4): tests feed the library
events the way the shim would, without a GPU or PyTorch. A mirror of
vramtrace/shim/vramtrace_sink.h, which test_sink_layout.py checks it against.
"""

import ctypes

ALLOC, FREE_REQUESTED, FREE_COMPLETED, SEGMENT_ALLOC, SEGMENT_FREE = 0, 1, 2, 3, 4
OOM = 7


class TorchEvent(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_uint32), ("device", ctypes.c_int32),
                ("addr", ctypes.c_uint64), ("size", ctypes.c_uint64),
                ("stream", ctypes.c_uint64), ("counter", ctypes.c_uint64),
                ("context", ctypes.c_char_p), ("pool", ctypes.c_uint64 * 2)]


# Returns 1 when the library wants the device's memory sampled next.
EVENT = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.POINTER(TorchEvent))
TAG = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64),
                       ctypes.POINTER(ctypes.c_uint8), ctypes.c_size_t)
DEVICE_MEMORY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64)


class Sink(ctypes.Structure):
    _fields_ = [("abi", ctypes.c_uint32), ("event", EVENT), ("segment", ctypes.c_void_p),
                ("snapshot_done", ctypes.c_void_p), ("phase", ctypes.c_void_p), ("tag", TAG),
                ("device_memory", DEVICE_MEMORY)]


def sink(lib: ctypes.CDLL) -> Sink:
    """The library's sink, as the shim gets it."""
    lib.vramtrace_torch_sink.restype = ctypes.POINTER(Sink)
    return lib.vramtrace_torch_sink().contents


def start(lib: ctypes.CDLL, out) -> None:
    """Starts observer mode writing `out`, on a device 0 with no stacks."""
    config = f"out={out}\nstacks=none\nstate=empty\ndevice=0\t85899345920\tno GPU\n"
    assert lib.vramtrace_observe_start(config.encode()) == 0
