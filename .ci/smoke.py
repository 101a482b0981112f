"""A short smoke run of the C paths of bufferext, for valgrind in .ci/run
when tests/test_capi*.py do not exist.  Every check asserts; exit 0 = ok.

Exercises: CPUBuffer construction for every dtype, export/release through
get_buffer with and without PyBUF_DEVICE, numpy zero-copy both ways, DLPack,
consumers over stdlib exporters, and the error paths (each must raise the
documented exception, never crash)."""

from __future__ import annotations

import array
import mmap
import sys

import numpy as np

import bufferext
from bufferext import BufferFlags as F


def expect(exc: type, func: object, *args: object) -> None:
    """Call func(*args) and require it to raise exc."""
    try:
        func(*args)  # type: ignore[operator]
    except exc:
        return
    raise AssertionError(f"{func!r}{args!r} did not raise {exc.__name__}")


def producers() -> None:
    for dtype in ("bool", "int8", "uint16", "<i4", ">u8", "float16",
                  "float32", "d", "complex64", "Zd"):
        buf = bufferext.CPUBuffer((3, 5), dtype)
        assert buf.ptr % 64 == 0 and buf.shape == (3, 5)
        with bufferext.get_buffer(buf) as view:
            assert view.device is None and view.device_info is None
            assert view.nbytes == 15 * buf.itemsize
            assert len(view.tobytes()) == view.nbytes
        arr = np.asarray(buf)
        arr[...] = 1
        assert np.asarray(buf).sum() == 15
        del arr
        assert buf.exports == 0
        buf.close()
    buf = bufferext.CPUBuffer(8, "float64")
    buf.copy_from_host(np.arange(8, dtype=np.float64))
    assert list(buf.to_host()) == list(range(8))
    out = np.from_dlpack(buf)
    assert out.sum() == 28 and buf.exports == 1
    del out
    assert buf.exports == 0
    view = bufferext.get_buffer(buf, F.FULL_RO | F.DEVICE)
    mv = view.memoryview()
    expect(BufferError, view.release)
    mv.release()
    view.release()
    view.release()
    expect(ValueError, lambda: view.shape)
    buf.resize((2, 2))
    assert buf.shape == (2, 2) and buf.to_host().ravel().tolist() == [0, 1, 2, 3]


def consumers() -> None:
    with mmap.mmap(-1, 64) as mm:
        exporters = [b"abc", bytearray(8), memoryview(b"xyz"),
                     array.array("i", [1, 2, 3]), np.zeros((4, 3))[::2, ::-1],
                     np.zeros((3, 4), order="F"), mm]
        for obj in exporters:
            for flags in (F.SIMPLE, F.FULL_RO, F.FULL_RO | F.DEVICE,
                          F.STRIDES, F.C_CONTIGUOUS, F.WRITABLE):
                if bufferext.check_buffer_supports(obj, flags):
                    try:
                        with bufferext.get_buffer(obj, flags) as view:
                            assert view.device is None
                    except (BufferError, ValueError):
                        pass    # numpy: ValueError for C_CONTIGUOUS of a strided array
            assert isinstance(bufferext.supported_flags(obj), F)


def errors() -> None:
    expect(TypeError, bufferext.get_buffer, object())
    expect(TypeError, bufferext.supported_flags, 1.5)
    expect(OverflowError, bufferext.get_buffer, b"x", 1 << 40)
    expect(OverflowError, bufferext.check_buffer_supports, b"x", -(1 << 40))
    assert bufferext.check_buffer_supports(object(), 0) is False
    expect(BufferError, bufferext.get_buffer, b"x", F.WRITABLE)
    expect(ValueError, bufferext.CPUBuffer, (-1,))
    expect(ValueError, bufferext.CPUBuffer, (1 << 62, 1 << 62))
    expect(ValueError, bufferext.CPUBuffer, (1,) * 65)
    expect(TypeError, bufferext.CPUBuffer, "shape")
    expect(TypeError, bufferext.CPUBuffer, (2,), "object")
    expect(TypeError, bufferext.CPUBuffer, (2,), "S5")
    buf = bufferext.CPUBuffer(4, "uint8")
    with bufferext.get_buffer(buf):
        expect(BufferError, buf.close)
        expect(BufferError, buf.resize, 8)
    expect(ValueError, buf.copy_from_host, b"too long")
    buf.close()
    buf.close()
    expect(ValueError, lambda: buf.ptr)


def refcounts() -> None:
    if not hasattr(sys, "getrefcount"):
        return
    buf = bufferext.CPUBuffer(16, "int32")
    before = sys.getrefcount(buf)
    for _ in range(2000):
        with bufferext.get_buffer(buf, F.FULL_RO | F.DEVICE):
            pass
    assert sys.getrefcount(buf) == before and buf.exports == 0


def main() -> None:
    producers()
    consumers()
    errors()
    refcounts()
    print("smoke: ok")


if __name__ == "__main__":
    main()
