"""Fuzz struct format strings: bufferext._dtypes.resolve, the producers'
dtype argument, and the format handling of BufferView and the DLPack export
(format -> DLPack dtype) over an exporter with an arbitrary format/itemsize.

Rules: resolve() and the producers reject with TypeError (ValueError for a
shape); an exporter with any format is exported, viewed and re-exported as
DLPack or refused with BufferError; memory reads stay inside a real block.
"""

from __future__ import annotations

import os
import struct
import sys
from typing import Any, Callable, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Source, main  # noqa: E402

bufferext: Any = None
resolve: Any = None

PIECES = ["@", "=", "<", ">", "!", "?", "b", "B", "h", "H", "i", "I", "l",
          "L", "q", "Q", "n", "N", "e", "f", "d", "Z", "Zf", "Zd", "Ze", "x",
          "s", "p", "P", "O", "T{", "}", "(2,3)", "3", "0", "&", ":a:", "g",
          "Zg", "w", "u", "c", "V", "\x00", "\xff", " "]
DTYPES = ["float64", "f4", "<i8", ">u2", "|b1", "c16", "M8[s]", "O", "V4",
          "U3", "f16", "int128", "", "i0", "S", "float", "complex", "bool"]
MEMORY = bytearray(4096)


def fmt_string(src: Source) -> str:
    if src.chance(6):
        return src.text(8)
    return "".join(src.pick(PIECES) for _ in range(src.byte() % 4 + 1))


def check_resolve(src: Source) -> None:
    spelling: Any = (fmt_string(src) if not src.chance(3)
                     else src.pick(DTYPES) if not src.chance(4)
                     else src.value())
    try:
        fmt, itemsize, dtype, typestr = resolve(spelling)
    except TypeError:
        return
    assert itemsize == dtype.itemsize and 1 <= itemsize <= 16, spelling
    # the resolved format reads back as the same type
    assert resolve(fmt)[1] == itemsize and resolve(typestr)[1] == itemsize


def check_producer(src: Source) -> None:
    spelling = fmt_string(src) if src.chance() else src.pick(DTYPES)
    try:
        buf = bufferext.CPUBuffer((src.byte() % 4,), spelling)
    except (TypeError, ValueError):
        return
    with bufferext.get_buffer(buf) as view:
        assert view.itemsize == buf.itemsize
        view.tobytes()
    try:
        capsule = buf.__dlpack__(max_version=(1, 0))
    except BufferError as exc:      # non-native byte order
        assert "byte order" in str(exc), exc
    else:
        del capsule
    buf.close()


def check_layout(src: Source) -> None:
    """An exporter whose format and itemsize are arbitrary."""
    fmt = fmt_string(src)
    itemsize = src.pick([1, 2, 4, 8, 16, 3, 0, -1, 32, 33, 2**62,
                         src.small_int()])
    n = src.byte() % 8
    ndim = src.byte() % 3
    shape = (n,) * ndim
    if itemsize <= 0 or itemsize > 64:
        strides: Tuple[int, ...] = (0,) * ndim
    else:
        strides = tuple(itemsize * n ** (ndim - 1 - i) for i in range(ndim))
    ptr = bufferext.get_buffer(MEMORY).ptr
    try:
        adapter = bufferext._bufferext._adapter_from_layout(
            None, "fuzz", ptr, shape, strides, fmt, itemsize,
            src.chance(), None, 0, None)
    except (BufferError, ValueError, TypeError, OverflowError):
        return
    with bufferext.get_buffer(adapter) as view:
        assert view.format == fmt
        repr(view)
        if view.nbytes <= len(MEMORY):
            view.tobytes()
        try:
            capsule = view.__dlpack__(max_version=(1, 0))
        except BufferError:
            capsule = None
        if capsule is not None:
            # what we export, we import: the round trip always works
            try:
                again = bufferext._bufferext._adapter_from_dlpack(
                    None, capsule, None)
            finally:
                del capsule         # never mask an error with release()
            assert again.shape == shape
            del again
    for kwargs in ({"max_version": (1, 0)}, {}, {"copy": True,
                                                   "max_version": (1, 0)}):
        try:
            capsule = adapter.__dlpack__(**kwargs)
        except BufferError:
            continue
        del capsule
    try:
        memoryview(adapter).tolist()
    except (NotImplementedError, ValueError, TypeError, BufferError,
            struct.error):
        pass


def test_one_input(data: bytes) -> None:
    src = Source(data)
    which = src.byte() % 3
    (check_resolve, check_producer, check_layout)[which](src)


def prepare() -> Callable[[bytes], None]:
    """Import bufferext (after atheris.Setup when fuzzing)."""
    global bufferext, resolve
    import bufferext as module
    from bufferext._dtypes import resolve as resolve_
    bufferext, resolve = module, resolve_
    return test_one_input


if __name__ == "__main__":
    main(prepare, lambda: [test_one_input, check_resolve, check_producer,
                           check_layout, fmt_string])
