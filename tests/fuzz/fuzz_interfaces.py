"""Fuzz the interface-dict parsers behind bufferext.as_buffer: the CUDA
Array Interface v3, the VE Array Interface v1 and NumPy's array interface
v3 (Lib/bufferext/_bridges.py, then _adapter_from_layout in C).

Dicts are drawn mostly well-formed with one or more fields broken (missing,
wrong type, out of range, absurd shapes and strides, odd typestrs), plus
arbitrary values.  Rules: a rejection is BufferError, TypeError or
DeviceUnavailableError; an accepted adapter is self-consistent; memory is
never read (pointers are arbitrary).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Source, main  # noqa: E402

bufferext: Any = None
CLEAN: Tuple[type, ...] = ()

NAMES = ["__cuda_array_interface__", "__ve_array_interface__",
         "__array_interface__"]
TYPESTRS = ["<f8", "<f4", "|u1", "|i1", "<i8", ">i4", "|b1", "<c16", "<c8",
            "<f2", ">f8", "|V8", "<M8", "|O", "<U3", "|S4", "<f16", "<i16",
            "f8", "d", "<u0", "|V0", "<m8[s]", "()f8", "(2,)i4", "<f8x",
            "\x00", "", "<" * 9, "i" * 40]
VERSIONS = {"__cuda_array_interface__": 3, "__ve_array_interface__": 1,
            "__array_interface__": 3}
BACKING = bytearray(256)


class Speaker:
    """An object with one interface attribute."""

    def __init__(self, name: str, value: Any) -> None:
        setattr(self, name, value)


def _shape(src: Source) -> Any:
    if src.chance(8):
        return src.value()
    return tuple(src.byte() % 5 if not src.chance(6) else src.small_int()
                 for _ in range(src.pick([1, 2, 0, 3, 4, 64, 65])))


def _strides(src: Source, ndim: int) -> Any:
    kind = src.byte() % 6
    if kind < 3:
        return None
    if kind == 5:
        return src.value()
    return tuple(src.small_int() for _ in range(ndim + (src.byte() % 5 == 0)))


def _typestr(src: Source) -> Any:
    b = src.byte() % 8
    if b < 6:
        return src.pick(TYPESTRS)
    if b == 6:
        return src.text(6)
    return src.value()


def _data(src: Source, name: str) -> Any:
    b = src.byte() % 10
    if b < 5:
        return (src.pick([0, 4096, 1 << 40, 2**64 - 1, 2**64, -1, 8,
                          src.uint(8)]), src.pick([False, True, 0, None]))
    if b == 5 and name == "__array_interface__":
        return src.pick([BACKING, bytes(16), memoryview(BACKING)[::2]])
    return src.value()


def make(src: Source) -> Tuple[str, Any]:
    name = src.pick(NAMES)
    if src.chance(16):
        return name, src.value()
    d: Dict[str, Any] = {}
    fields = {
        "version": lambda: (VERSIONS[name] if not src.chance(4)
                            else src.value()),
        "shape": lambda: _shape(src),
        "typestr": lambda: _typestr(src),
        "data": lambda: _data(src, name),
        "strides": lambda: _strides(src, len(d.get("shape", ())
                                             if isinstance(d.get("shape"),
                                                           tuple) else ())),
        "mask": lambda: None if not src.chance(4) else src.value(),
        "stream": lambda: src.pick([None, 1, 2, 0, -1, 2**64, 7, "x"]),
        "veo_ctxt": lambda: src.pick([None, 0, 1, 2**64, -3, "x"]),
        "offset": lambda: src.pick([0, 8, -1, 2**64, 2**63, None, "x"]),
        "descr": lambda: src.value(),
    }
    for key, draw in fields.items():
        if key in ("version", "shape", "typestr", "data"):
            if not src.chance(12):          # required: mostly present
                d[key] = draw()
        elif src.chance(3):
            d[key] = draw()
    return name, d


def test_one_input(data: bytes) -> None:
    src = Source(data)
    name, interface = make(src)
    readonly = src.pick([None, None, True, False, 1])
    try:
        adapter = bufferext.as_buffer(Speaker(name, interface),
                                      readonly=readonly)
    except CLEAN:
        return
    assert adapter.nbytes >= 0
    assert len(adapter.shape) == len(adapter.strides)
    repr(adapter)
    try:
        view = bufferext.get_buffer(adapter)
    except BufferError:
        return
    assert view.shape == adapter.shape
    view.device_info
    view.release()


def prepare() -> Callable[[bytes], None]:
    """Import bufferext (after atheris.Setup when fuzzing)."""
    global bufferext, CLEAN
    import bufferext as module
    bufferext = module
    CLEAN = (BufferError, TypeError, module.DeviceUnavailableError)
    return test_one_input


if __name__ == "__main__":
    main(prepare, lambda: [test_one_input, make, _shape, _data])
