"""DLPack export of CPU memory: CPUBuffer and BufferView.__dlpack__."""

from __future__ import annotations

import ctypes
import functools
import gc
import re
import sys

import numpy as np
import pytest

import bufferext
from bufferext import CPUBuffer, get_buffer
from _helpers import (DLPACK_FLAG_IS_COPIED, DLPACK_FLAG_READ_ONLY, kDLBool,
                      kDLComplex, kDLCPU, kDLFloat, kDLInt, kDLUInt,
                      capsule_name, read_capsule, run_child)

NATIVE = "<" if sys.byteorder == "little" else ">"
OTHER = ">" if NATIVE == "<" else "<"


class Producer:
    """Hands numpy a given capsule; records the kwargs numpy passed."""

    def __init__(self, capsule):
        self.capsule = capsule
        self.kwargs = None

    def __dlpack__(self, **kwargs):
        self.kwargs = kwargs
        return self.capsule

    def __dlpack_device__(self):
        return (kDLCPU, 0)


@functools.lru_cache(maxsize=None)
def numpy_asks_versioned() -> bool:
    """Whether this numpy passes max_version to __dlpack__ (numpy >= 2.1)."""
    probe = Producer(CPUBuffer(1).__dlpack__(max_version=(1, 0)))
    try:
        np.from_dlpack(probe)
    except Exception:
        pass
    return "max_version" in (probe.kwargs or {})


# ---- zero-copy into numpy ----------------------------------------------------

def test_from_dlpack_zero_copy():
    buf = CPUBuffer((3, 4), "float32")
    arr = np.from_dlpack(buf)
    assert arr.ctypes.data == buf.ptr
    assert arr.shape == (3, 4) and arr.dtype == np.float32
    assert buf.exports == 1
    # numpy < 2.1 imports (legacy capsules) read-only
    assert arr.flags.writeable is numpy_asks_versioned()
    np.asarray(buf)[2, 3] = 4.0
    assert arr[2, 3] == 4.0
    del arr
    gc.collect()
    assert buf.exports == 0


@pytest.mark.parametrize("versioned", [True, False],
                         ids=["versioned", "legacy"])
def test_from_dlpack_capsule_kinds_zero_copy(versioned):
    if versioned and not numpy_asks_versioned():
        pytest.skip("this numpy cannot import versioned capsules")
    buf = CPUBuffer((2, 5), "int16")
    kwargs = {"max_version": (1, 0)} if versioned else {}
    capsule = buf.__dlpack__(**kwargs)
    assert capsule_name(capsule) == ("dltensor_versioned" if versioned
                                     else "dltensor")
    arr = np.from_dlpack(Producer(capsule))
    assert capsule_name(capsule) == ("used_dltensor_versioned" if versioned
                                     else "used_dltensor")
    assert arr.ctypes.data == buf.ptr
    # numpy imports legacy capsules read-only (they cannot say otherwise)
    assert arr.flags.writeable is versioned
    np.asarray(buf)[0, 0] = 7
    assert arr[0, 0] == 7
    del capsule          # consumed: the capsule must not free it again
    gc.collect()
    assert buf.exports == 1
    del arr              # numpy calls the deleter exactly once
    gc.collect()
    assert buf.exports == 0
    buf.close()


def test_from_dlpack_readonly():
    buf = CPUBuffer(4, "u1", readonly=True)
    if numpy_asks_versioned():
        arr = np.from_dlpack(buf)
        assert arr.flags.writeable is False
        assert arr.ctypes.data == buf.ptr
        del arr
    else:
        with pytest.raises(BufferError, match="max_version"):
            np.from_dlpack(buf)
    gc.collect()
    assert buf.exports == 0


# ---- capsule fields ----------------------------------------------------------

@pytest.mark.parametrize("dtype, code, bits", [
    ("float16", kDLFloat, 16), ("float32", kDLFloat, 32),
    ("float64", kDLFloat, 64), ("complex64", kDLComplex, 64),
    ("complex128", kDLComplex, 128), ("bool", kDLBool, 8),
    ("int8", kDLInt, 8), ("int16", kDLInt, 16), ("int32", kDLInt, 32),
    ("int64", kDLInt, 64), ("uint8", kDLUInt, 8), ("uint16", kDLUInt, 16),
    ("uint32", kDLUInt, 32), ("uint64", kDLUInt, 64),
])
def test_versioned_capsule_dtype(dtype, code, bits):
    buf = CPUBuffer((2, 3), dtype)
    info = read_capsule(buf.__dlpack__(max_version=(1, 0)))
    assert info["dtype"] == (code, bits, 1)


def test_versioned_capsule_fields():
    buf = CPUBuffer((2, 3, 4), "float64")
    capsule = buf.__dlpack__(max_version=(1, 0))
    info = read_capsule(capsule)
    assert info["name"] == "dltensor_versioned"
    assert info["version"] == (1, 0)
    assert info["flags"] == 0
    assert info["data"] == buf.ptr
    assert info["device"] == (kDLCPU, 0)
    assert info["ndim"] == 3
    assert info["shape"] == (2, 3, 4)
    assert info["strides"] == (12, 4, 1)           # items, not bytes
    assert info["byte_offset"] == 0
    assert info["deleter"]
    assert buf.exports == 1
    del capsule


def test_version_negotiation():
    buf = CPUBuffer(2)
    assert read_capsule(buf.__dlpack__(max_version=(1, 0)))["version"] \
        == (1, 0)
    assert read_capsule(buf.__dlpack__(max_version=(1, 1)))["version"] \
        == (1, 1)
    newest = read_capsule(buf.__dlpack__(max_version=(1, 99)))["version"]
    assert newest[0] == 1 and newest[1] >= 1
    assert read_capsule(buf.__dlpack__(max_version=(2, 0)))["version"] \
        == newest
    assert read_capsule(buf.__dlpack__(max_version=(0, 8)))["name"] \
        == "dltensor"
    assert read_capsule(buf.__dlpack__(max_version=None))["name"] \
        == "dltensor"
    gc.collect()
    assert buf.exports == 0


def test_legacy_capsule_fields():
    buf = CPUBuffer((4, 2), "int32")
    info = read_capsule(buf.__dlpack__())
    assert info["name"] == "dltensor"
    assert "flags" not in info
    assert info["data"] == buf.ptr
    assert info["shape"] == (4, 2) and info["strides"] == (2, 1)
    assert info["dtype"] == (kDLInt, 32, 1)
    assert info["device"] == (kDLCPU, 0)


def test_zero_dim_and_zero_size():
    scalar = CPUBuffer((), "float32")
    info = read_capsule(scalar.__dlpack__(max_version=(1, 0)))
    assert info["ndim"] == 0 and info["shape"] == ()
    empty = CPUBuffer((3, 0), "float32")
    info = read_capsule(empty.__dlpack__(max_version=(1, 0)))
    assert info["shape"] == (3, 0)
    arr = np.from_dlpack(empty)
    assert arr.shape == (3, 0)
    arr0 = np.from_dlpack(scalar)
    assert arr0.shape == () and arr0.ctypes.data == scalar.ptr


def test_readonly_needs_max_version():
    buf = CPUBuffer(3, readonly=True)
    with pytest.raises(BufferError, match="read-only.*max_version"):
        buf.__dlpack__()
    with pytest.raises(BufferError, match="read-only"):
        buf.__dlpack__(max_version=(0, 8))
    assert buf.exports == 0
    info = read_capsule(buf.__dlpack__(max_version=(1, 0)))
    assert info["flags"] == DLPACK_FLAG_READ_ONLY
    gc.collect()
    assert buf.exports == 0


def test_copy_true():
    buf = CPUBuffer((2, 3), "int32", readonly=True)
    buf.copy_from_host(np.arange(6, dtype=np.int32).reshape(2, 3))
    capsule = buf.__dlpack__(max_version=(1, 0), copy=True)
    info = read_capsule(capsule)
    assert info["flags"] == DLPACK_FLAG_IS_COPIED       # writable copy
    assert info["data"] != buf.ptr
    assert info["strides"] == (3, 1)
    assert buf.exports == 0                  # the copy holds no export
    if not numpy_asks_versioned():
        return                   # this numpy cannot import versioned ones
    arr = np.from_dlpack(Producer(capsule))
    assert arr.flags.writeable
    assert arr.tolist() == [[0, 1, 2], [3, 4, 5]]
    arr[0, 0] = 100
    assert np.asarray(buf)[0, 0] == 0
    buf.close()                              # allowed: nothing exported
    assert arr[1, 2] == 5                    # the copy outlives the buffer


def test_copy_true_of_non_contiguous_view():
    arr = np.arange(20, dtype=np.int64).reshape(4, 5)[::2, 1::2]
    with get_buffer(arr) as view:
        info = read_capsule(view.__dlpack__(max_version=(1, 0), copy=True))
        assert info["strides"] == (2, 1)
        assert info["shape"] == (2, 2)
        assert info["flags"] == DLPACK_FLAG_IS_COPIED


def test_copy_true_lifts_the_zero_copy_limits():
    # a copy is new writable memory with its own strides in items: a
    # read-only source needs no versioned capsule, a byte stride no item
    # multiple (both were refused; review of the exports)
    ro = CPUBuffer(3, "float64", readonly=True)
    ro.copy_from_host(np.arange(3.0))
    with pytest.raises(BufferError, match="needs a versioned"):
        ro.__dlpack__()                          # zero-copy: still refused
    capsule = ro.__dlpack__(copy=True)
    info = read_capsule(capsule)
    assert info["name"] == "dltensor" and info["data"] != ro.ptr
    assert list((ctypes.c_double * 3).from_address(info["data"])) == \
        [0.0, 1.0, 2.0]
    assert ro.exports == 0
    base = np.arange(8, dtype="<i2")
    odd = np.lib.stride_tricks.as_strided(base, shape=(3,), strides=(3,))
    with get_buffer(odd) as view:
        with pytest.raises(BufferError, match="multiple of the item size"):
            view.__dlpack__(max_version=(1, 0))
        capsule = view.__dlpack__(max_version=(1, 0), copy=True)
        info = read_capsule(capsule)
        assert info["flags"] == DLPACK_FLAG_IS_COPIED
        assert info["strides"] == (1,) and info["shape"] == (3,)
        if numpy_asks_versioned():
            assert np.from_dlpack(Producer(capsule)).tolist() == odd.tolist()


def test_copy_false_and_none():
    buf = CPUBuffer(2)
    for copy in (False, None):
        info = read_capsule(buf.__dlpack__(max_version=(1, 0), copy=copy))
        assert info["data"] == buf.ptr and info["flags"] == 0


def test_dl_device():
    buf = CPUBuffer(2)
    info = read_capsule(buf.__dlpack__(dl_device=(kDLCPU, 0)))
    assert info["device"] == (kDLCPU, 0)
    buf.__dlpack__(dl_device=None)
    for device in ((2, 0), (1, 1), (13, 0)):
        with pytest.raises(BufferError, match="dl_device"):
            buf.__dlpack__(dl_device=device)
    gc.collect()
    assert buf.exports == 0


def test_stream():
    buf = CPUBuffer(2)
    buf.__dlpack__(stream=None)
    for stream in (1, 0, -1, "s"):
        with pytest.raises(BufferError, match="stream"):
            buf.__dlpack__(stream=stream)
    gc.collect()
    assert buf.exports == 0


def test_dl_device_takes_numpy_integers():
    buf = CPUBuffer(2)
    capsule = buf.__dlpack__(dl_device=(np.int64(kDLCPU), np.int32(0)))
    assert read_capsule(capsule)["device"] == (kDLCPU, 0)


def test_dl_device_is_read_before_the_export():
    """An item's __index__ (Python code) runs before anything is exported:
    one that closes the buffer closes it (no export holds it yet) and the
    request is then refused as closed, not served from closed memory."""
    buf = CPUBuffer(2)

    class ClosesIt:
        def __index__(self) -> int:
            buf.close()
            return kDLCPU

    with pytest.raises(BufferError, match="closed"):
        buf.__dlpack__(dl_device=(ClosesIt(), 0))
    assert buf.closed and buf.exports == 0


@pytest.mark.parametrize("call, words", [
    (lambda b: b.__dlpack__(None), "keyword"),
    (lambda b: b.__dlpack__(bogus=1), "bogus"),
    (lambda b: b.__dlpack__(max_version=1), "max_version"),
    (lambda b: b.__dlpack__(max_version=(1,)), "max_version"),
    (lambda b: b.__dlpack__(max_version=("1", 0)), "max_version"),
    (lambda b: b.__dlpack__(max_version=(True, False)),
     r"max_version.*\(True, False\)"),
    (lambda b: b.__dlpack__(copy=1), "copy"),
    (lambda b: b.__dlpack__(copy="yes"), "copy"),
    (lambda b: b.__dlpack__(dl_device="cpu"), "dl_device"),
    (lambda b: b.__dlpack__(dl_device=(1,)), r"dl_device.*\(1,\)"),
    (lambda b: b.__dlpack__(dl_device=("1", 0)), r"dl_device.*'1'"),
    (lambda b: b.__dlpack__(dl_device=(True, 0)), r"dl_device.*True"),
], ids=["positional", "unknown", "version-int", "version-short",
        "version-str", "version-bool", "copy-int", "copy-str", "device-str",
        "device-short", "device-str-item", "device-bool"])
def test_bad_kwargs(call, words):
    buf = CPUBuffer(2)
    with pytest.raises(TypeError, match=words):
        call(buf)
    gc.collect()
    assert buf.exports == 0


@pytest.mark.parametrize("device", [(1, 2**31), (2**33, 0), (-2**31 - 1, 0)])
def test_dl_device_out_of_range_is_named(device):
    # PyArg_ParseTuple's OverflowError named neither argument nor value
    buf = CPUBuffer(2)
    with pytest.raises(ValueError, match=re.escape(
            f"__dlpack__: dl_device = {device!r} is out of range (32-bit "
            "ints)")):
        buf.__dlpack__(dl_device=device)
    assert buf.exports == 0


def test_dlpack_device():
    assert CPUBuffer(1).__dlpack_device__() == (kDLCPU, 0)
    with get_buffer(b"abc") as view:
        assert view.__dlpack_device__() == (kDLCPU, 0)


# ---- lifetime ----------------------------------------------------------------

def test_unconsumed_capsule_releases_export():
    buf = CPUBuffer(8)
    caps = [buf.__dlpack__(), buf.__dlpack__(max_version=(1, 0))]
    assert buf.exports == 2
    with pytest.raises(BufferError):
        buf.close()
    caps.pop()
    assert buf.exports == 1
    caps.pop()
    assert buf.exports == 0
    buf.close()


def test_capsule_keeps_buffer_alive():
    import weakref
    buf = CPUBuffer(8)
    ref = weakref.ref(buf)
    capsule = buf.__dlpack__(max_version=(1, 0) if numpy_asks_versioned()
                             else None)
    del buf
    gc.collect()
    assert ref() is not None
    arr = np.from_dlpack(Producer(capsule))
    del capsule
    gc.collect()
    assert ref() is not None and ref().exports == 1
    del arr
    gc.collect()
    assert ref() is None


def test_many_round_trips_no_drift():
    buf = CPUBuffer(16, "f8")
    before = sys.getrefcount(buf)
    for _ in range(1000):
        np.from_dlpack(buf)
        buf.__dlpack__(max_version=(1, 0))
        buf.__dlpack__()
        try:
            buf.__dlpack__(stream=1)
        except BufferError:
            pass
    gc.collect()
    assert buf.exports == 0
    assert sys.getrefcount(buf) == before


# ---- BufferView.__dlpack__ ---------------------------------------------------

def test_view_of_bytes():
    data = b"hello"
    with get_buffer(data) as view:
        with pytest.raises(BufferError, match="read-only"):
            view.__dlpack__()
        info = read_capsule(view.__dlpack__(max_version=(1, 0)))
        assert info["dtype"] == (kDLUInt, 8, 1)
        assert info["shape"] == (5,)
        assert info["flags"] == DLPACK_FLAG_READ_ONLY
        assert info["data"] == view.ptr
        if numpy_asks_versioned():
            arr = np.from_dlpack(view)
            assert arr.tobytes() == data
            assert not arr.flags.writeable
            with pytest.raises(BufferError):
                view.release()           # the array holds an export
            del arr
            gc.collect()


def test_view_of_ndarray_slices():
    base = np.arange(30, dtype=np.float64).reshape(5, 6)
    sliced = base[1::2, ::3]
    with get_buffer(sliced) as view:
        info = read_capsule(view.__dlpack__(max_version=(1, 0)))
        assert info["shape"] == (2, 2)
        assert info["strides"] == (12, 3)
        assert info["data"] == sliced.ctypes.data
        out = np.from_dlpack(view)
        assert np.array_equal(out, sliced)
        assert out.ctypes.data == sliced.ctypes.data
        del out
        gc.collect()


def test_view_negative_strides():
    arr = np.arange(6, dtype=np.int32)[::-2]
    with get_buffer(arr) as view:
        info = read_capsule(view.__dlpack__(max_version=(1, 0)))
        assert info["strides"] == (-2,)
        assert info["data"] == arr.ctypes.data
        out = np.from_dlpack(view)
        assert out.tolist() == arr.tolist()
        del out
        gc.collect()


def test_view_non_native_byte_order():
    arr = np.arange(3, dtype=OTHER + "i4")
    with get_buffer(arr) as view:
        with pytest.raises(BufferError, match="byte order"):
            view.__dlpack__(max_version=(1, 0))
    buf = CPUBuffer(3, OTHER + "f8")
    with pytest.raises(BufferError, match="byte order"):
        buf.__dlpack__(max_version=(1, 0))
    assert buf.exports == 0


def test_view_stride_not_multiple_of_itemsize():
    record = np.zeros(4, dtype=[("a", "<i4"), ("b", "u1")])
    field = record["a"]                    # stride 5, itemsize 4
    assert field.strides == (5,)
    with get_buffer(field) as view:
        with pytest.raises(BufferError, match="stride 5.*item size 4"):
            view.__dlpack__(max_version=(1, 0))
    odd = np.lib.stride_tricks.as_strided(
        np.zeros(16, dtype=np.uint8).view(np.int16), shape=(3,),
        strides=(3,))
    with get_buffer(odd) as view:
        with pytest.raises(BufferError, match="multiple of the item size"):
            view.__dlpack__(max_version=(1, 0))


def test_view_unsupported_format():
    record = np.zeros(2, dtype=[("a", "<i4"), ("b", "<f4")])
    with get_buffer(record) as view:
        with pytest.raises(BufferError, match="no DLPack data type"):
            view.__dlpack__(max_version=(1, 0))


def test_view_capsule_holds_export_of_view():
    buf = CPUBuffer(4)
    view = get_buffer(buf)
    capsule = view.__dlpack__(max_version=(1, 0))
    with pytest.raises(BufferError):
        view.release()
    del capsule
    gc.collect()
    view.release()
    assert buf.exports == 0


def test_bufferext_module_exposes_nothing_dlpack_specific():
    # the DLPack bridge is reached through the producers' methods
    assert hasattr(bufferext.CPUBuffer, "__dlpack__")
    assert hasattr(bufferext.BufferView, "__dlpack_device__")


# ---- a subclass's DLPack export reads our own (from test_boundary_c.py) ----

def test_subclass_dlpack_reads_our_own_export() -> None:
    out = run_child("""
        import bufferext, numpy as np
        class Sub(bufferext.CPUBuffer):
            def __buffer__(self, flags):
                return memoryview(b"xy")
        s = Sub(3)
        np.asarray(s.to_host())[:] = 0
        print(np.from_dlpack(s).tolist(), s.__dlpack_device__())
        class Plain(bufferext.CPUBuffer):
            pass
        p = Plain(2)
        print(np.from_dlpack(p).tolist())
    """)
    assert out.splitlines() == ["[0.0, 0.0, 0.0] (1, 0)", "[0.0, 0.0]"]
