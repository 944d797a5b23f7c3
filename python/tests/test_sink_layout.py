"""The ctypes mirror of the sink (torch_sink.py, through which the tests feed
the library as the shim would) against the C header the shim is built with
(vramtrace/shim/vramtrace_sink.h, generated from the library's Rust by
cbindgen): same fields, same offsets, same size, same ABI version.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import torch_sink
import vramtrace
from vramtrace import _shim

HEADER = Path(vramtrace.__file__).resolve().parent / "shim" / "vramtrace_sink.h"

SCALARS = {"uint32_t": ctypes.c_uint32, "int32_t": ctypes.c_int32, "uint64_t": ctypes.c_uint64,
           "uint8_t": ctypes.c_uint8, "size_t": ctypes.c_size_t, "int": ctypes.c_int}


def header_structs() -> dict[str, type[ctypes.Structure]]:
    """Each ``typedef struct`` of the header, as a ctypes structure laid out
    by ctypes from the header's own field types."""
    text = re.sub(r"//[^\n]*", "", HEADER.read_text())
    structs: dict[str, type[ctypes.Structure]] = {}
    for name, body in re.findall(r"typedef struct (\w+) \{(.*?)\} \1;", text, re.DOTALL):
        fields = []
        for decl in (d.strip() for d in body.split(";")):
            if not decl:
                continue
            pointer = re.match(r".*\(\*(\w+)\)\(", decl)  # a function pointer
            if pointer:
                fields.append((pointer.group(1), ctypes.c_void_p))
                continue
            kind, field = decl.rsplit(None, 1)
            array = re.fullmatch(r"(\w+)\[(\d+)\]", field)  # an array field
            if field.startswith("*") or kind.endswith("*"):
                fields.append((field.lstrip("*"), ctypes.c_void_p))
            elif array:
                fields.append((array.group(1), SCALARS[kind] * int(array.group(2))))
            else:
                fields.append((field, SCALARS[kind]))
        structs[name] = type(name, (ctypes.Structure,), {"_fields_": fields})
    return structs


def layout(struct: type[ctypes.Structure]) -> tuple[int, list[tuple[str, int, int]]]:
    return ctypes.sizeof(struct), [(name, getattr(struct, name).offset, getattr(struct, name).size)
                                   for name, *_ in struct._fields_]


def test_the_header_has_the_sink_structures():
    assert set(header_structs()) == {"vt_event", "vt_block", "vt_segment", "vt_sink"}


def test_the_mirror_of_an_event_is_the_headers():
    assert layout(torch_sink.TorchEvent) == layout(header_structs()["vt_event"])


def test_the_mirror_of_the_sink_is_the_headers():
    assert layout(torch_sink.Sink) == layout(header_structs()["vt_sink"])


def test_one_abi_version_for_the_header_the_package_and_the_library():
    abi = re.search(r"#define VT_SINK_ABI (\d+)", HEADER.read_text())
    assert abi, "no VT_SINK_ABI in the header"
    assert int(abi.group(1)) == _shim.SHIM_ABI
