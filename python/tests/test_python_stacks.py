"""The recorder's Python frame walk, without a GPU or PyTorch.

    VRAMTRACE_LIB=target/debug/libvramtrace_recorder.so PYTHONPATH=python \
        python3 python/tests/test_python_stacks.py

Calls the library's ``vramtrace_python_stack`` (the capture an allocation
would make) from known lines, from a thread, and with the GIL released by
the caller (as PyTorch's operators release it). Run by `cargo test -p vramtrace-recorder-ffi` when
``python3`` is on the PATH (recorder-ffi/tests/python_stacks.rs).
"""

from __future__ import annotations

import ctypes
import sys
import threading
import unittest
from pathlib import Path

import vramtrace

HERE = str(Path(__file__).resolve())


def line_of(marker: str) -> int:
    for n, text in enumerate(Path(HERE).read_text().splitlines(), 1):
        if text.rstrip().endswith("# " + marker):
            return n
    raise AssertionError(marker)


def inner():
    return vramtrace.python_stack()  # inner-call


def outer():
    return inner()  # outer-call


class Capture:
    def method(self):
        return vramtrace.python_stack()  # method-call


class PythonStacks(unittest.TestCase):
    def test_frames_innermost_first_with_lines(self):
        frames = outer()
        ours = [f for f in frames if f[1] == HERE]
        # python_stack itself (in vramtrace/__init__.py) is the innermost.
        self.assertEqual(frames[0][0], "python_stack")
        self.assertEqual(ours[0], ("inner", HERE, line_of("inner-call")))
        self.assertEqual(ours[1], ("outer", HERE, line_of("outer-call")))
        self.assertEqual(ours[2][0], "test_frames_innermost_first_with_lines")

    def test_repeated_captures_agree(self):
        self.assertEqual(outer(), outer())
        frames = Capture().method()
        self.assertIn(("method", HERE, line_of("method-call")), frames)

    def test_other_python_thread(self):
        out = []
        t = threading.Thread(target=lambda: out.append(outer()))
        t.start()
        t.join()
        funcs = [f[0] for f in out[0]]
        self.assertEqual(funcs[:3], ["python_stack", "inner", "outer"])
        self.assertIn("run", funcs)  # threading.Thread.run

    def test_with_the_gil_released_by_the_caller(self):
        # CDLL releases the GIL around the call, as PyTorch's operators do
        # before they allocate: the library takes it back for the walk.
        lib = ctypes.CDLL(str(vramtrace.library_path()))
        fn = lib.vramtrace_python_stack
        fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        fn.restype = ctypes.c_int
        buf = ctypes.create_string_buffer(4096)
        n = fn(buf, len(buf))  # released-call
        self.assertGreater(n, 0)
        first = buf.value.decode().splitlines()[0].split("\t")
        self.assertEqual(first, ["test_with_the_gil_released_by_the_caller", HERE,
                                 str(line_of("released-call"))])

    def test_lines_of_a_long_function(self):
        # Lines are cached per instruction offset: two calls of one function
        # from different lines, and calls far down a long function.
        body = "".join(f"    x{i} = {i}\n" for i in range(3000))
        src = ("def long():\n    a = cap()\n" + body + "    b = cap()\n"
               "    return a, b\n")
        env = {"cap": vramtrace.python_stack}
        exec(compile(src, "<long>", "exec"), env)
        for _ in range(2):
            a, b = env["long"]()
            self.assertEqual(a[1], ("long", "<long>", 2))
            self.assertEqual(b[1], ("long", "<long>", 3003))

    def test_deep_recursion_is_cut(self):
        def down(n):
            return down(n - 1) if n else vramtrace.python_stack()

        frames = down(500)
        self.assertEqual(len(frames), 128)

    def test_while_an_exception_is_handled(self):
        try:
            raise KeyError("x")
        except KeyError:
            # A new code object named while an exception is being handled
            # leaves it in place.
            f = eval("lambda: __import__('vramtrace').python_stack()")
            frames = f()
            self.assertEqual(frames[1][0], "<lambda>")
            self.assertIsInstance(sys.exc_info()[1], KeyError)


if __name__ == "__main__":
    unittest.main(verbosity=2)
