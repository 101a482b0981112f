"""The consumer helper against every stdlib and numpy exporter.

For each exporter and each PEP 3118 request value ``f`` (all OR-ed subsets
of WRITABLE, FORMAT, ND, STRIDES, C/F/ANY_CONTIGUOUS, INDIRECT), with and
without PyBUF_DEVICE:

* ``get_buffer(obj, f | DEVICE)`` succeeds exactly when a plain
  ``PyObject_GetBuffer(obj, f)`` (made through ctypes) succeeds;
* when both fail, with the same exception type and message;
* when both succeed, with the same fields (read the PEP 3118 way: a NULL
  shape means bytes, NULL strides mean C order, a NULL format means 'B');
* legacy exporters never leave anything in the extension fields, and
  bufferext's own producers answer a DEVICE request with CPU memory.
"""

from __future__ import annotations

import array
import mmap
import os
import sys
import tempfile

import numpy as np
import pytest

import bufferext
from bufferext import BufferFlags as F
from bufferext import get_buffer
from _helpers import flag_name, legacy_requests, plain_get_buffer

OTHER = ">" if sys.byteorder == "little" else "<"


def _readonly(a):
    a.flags.writeable = False
    return a


def _file_mmap(access):
    fd, path = tempfile.mkstemp()
    try:
        os.write(fd, bytes(range(64)))
        return mmap.mmap(fd, 64, access=access)
    finally:
        os.close(fd)
        os.unlink(path)


LEGACY_EXPORTERS = {
    "bytes": lambda: b"abcdefgh",
    "bytes-empty": lambda: b"",
    "bytearray": lambda: bytearray(b"0123456789"),
    "bytearray-empty": lambda: bytearray(),
    "memoryview": lambda: memoryview(bytearray(b"abcdef")),
    "memoryview-readonly": lambda: memoryview(b"abcdef"),
    "memoryview-slice": lambda: memoryview(bytearray(range(12)))[1::3],
    "memoryview-2d-cast": lambda: memoryview(bytearray(24)).cast("i", (2, 3)),
    "memoryview-2d-slice": lambda: memoryview(
        np.arange(20, dtype=np.int16).reshape(4, 5))[::2],
    "memoryview-F": lambda: memoryview(
        np.asfortranarray(np.arange(6.0).reshape(2, 3))),
    "array.array-d": lambda: array.array("d", [1.0, 2.0, 3.0]),
    "array.array-b-empty": lambda: array.array("b"),
    "ndarray-C": lambda: np.arange(12, dtype=np.int32).reshape(3, 4),
    "ndarray-F": lambda: np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    "ndarray-strided": lambda: np.arange(30.0).reshape(5, 6)[::2, 1::2],
    "ndarray-negative-stride": lambda: np.arange(6, dtype=np.int64)[::-1],
    "ndarray-1d-contiguous": lambda: np.arange(5, dtype=np.uint8),
    "ndarray-0d": lambda: np.array(3.5),
    "ndarray-zero-size": lambda: np.zeros((2, 0, 3), dtype=np.float32),
    "ndarray-readonly": lambda: _readonly(np.arange(4, dtype=np.int16)),
    "ndarray-non-native": lambda: np.arange(4, dtype=OTHER + "i4"),
    "ndarray-structured": lambda: np.zeros(
        3, dtype=[("a", "<i4"), ("b", "<f8")]),
    "ndarray-bool": lambda: np.array([True, False]),
    "numpy-scalar": lambda: np.float32(1.5),
    "mmap-anonymous": lambda: mmap.mmap(-1, 4096),
    "mmap-file-write": lambda: _file_mmap(mmap.ACCESS_WRITE),
    "mmap-file-read": lambda: _file_mmap(mmap.ACCESS_READ),
    "mmap-file-copy": lambda: _file_mmap(mmap.ACCESS_COPY),
}

# bufferext's producers and views: CPU memory, answering DEVICE explicitly.
OUR_EXPORTERS = {
    "CPUBuffer-2d": lambda: bufferext.CPUBuffer((3, 4), "i2"),
    "CPUBuffer-0d": lambda: bufferext.CPUBuffer((), "f8"),
    "CPUBuffer-zero-size": lambda: bufferext.CPUBuffer((0, 3), "u1"),
    "CPUBuffer-readonly": lambda: bufferext.CPUBuffer(5, "f4",
                                                      readonly=True),
    "CPUBuffer-non-native": lambda: bufferext.CPUBuffer(3, OTHER + "i8"),
    "BufferView-of-ndarray-strided": lambda: get_buffer(
        np.arange(30.0).reshape(5, 6)[::2, 1::2], F.FULL),
    "BufferView-of-bytes": lambda: get_buffer(b"xyz"),
    "BufferView-of-CPUBuffer": lambda: get_buffer(
        bufferext.CPUBuffer((2, 2), "u2"), F.FULL | F.DEVICE),
}

REQUESTS = legacy_requests()

#: Tests comparing sys.getrefcount of an exporter run in one thread under
#: pytest-run-parallel: the other threads' copies hold the same object too
#: (bytes of a literal are one constant, b"" one object per interpreter).
SHARED_EXPORTER = pytest.mark.thread_unsafe(
    reason="it compares sys.getrefcount of the exporter, which the other "
    "threads' copies of this test hold too")


def expected_fields(raw, flags):
    """What a BufferView shows for the raw Py_buffer of a request."""
    if raw["shape"] is None and not (raw["ndim"] == 0
                                     and flags & F.ND == F.ND):
        # PEP 3118: no shape -> one dimension of len unsigned bytes
        return {"ptr": raw["buf"], "nbytes": raw["len"], "itemsize": 1,
                "format": "B", "ndim": 1, "shape": (raw["len"],),
                "strides": (1,), "readonly": raw["readonly"],
                "suboffsets": None}
    shape = raw["shape"] or ()
    strides = raw["strides"]
    if strides is None:
        strides, step = [], raw["itemsize"]
        for dim in reversed(shape):
            strides.insert(0, step)
            step *= dim or 1
        strides = tuple(strides)
    # no format: bytes 'B' where the items are bytes, else unknown (None)
    fmt = raw["format"]
    if fmt is None and raw["itemsize"] == 1:
        fmt = "B"
    return {"ptr": raw["buf"], "nbytes": raw["len"],
            "itemsize": raw["itemsize"], "format": fmt,
            "ndim": raw["ndim"], "shape": shape, "strides": strides,
            "readonly": raw["readonly"], "suboffsets": raw["suboffsets"]}


def actual_fields(view):
    return {"ptr": view.ptr,
            "nbytes": view.nbytes, "itemsize": view.itemsize,
            "format": view.format, "ndim": view.ndim, "shape": view.shape,
            "strides": view.strides, "readonly": view.readonly,
            "suboffsets": view.suboffsets}


def _outcome(fn):
    """(type, message) of what fn raised, or (None, result).

    Only the type and message are kept: a kept exception would hold the
    frames (and so references to the exporter) through its traceback."""
    try:
        return None, fn()
    except Exception as exc:          # noqa: BLE001 - compared by the caller
        return (type(exc), str(exc)), None


def compare(obj, flags, extra, device_answer):
    """Check get_buffer(obj, flags | extra) against the plain request."""
    before = sys.getrefcount(obj)
    plain_error, raw = _outcome(lambda: plain_get_buffer(obj, flags))
    ours_error, view = _outcome(lambda: get_buffer(obj, flags | extra))
    what = f"{flag_name(flags | extra)} on {type(obj).__name__}"
    assert ours_error == plain_error, what
    if view is not None:
        with view:
            assert view.obj is obj
            assert view.request_flags == flags | extra
            assert actual_fields(view) == expected_fields(raw, flags), what
            assert view.flags == (F.DEVICE if extra and device_answer
                                  else 0), what
            assert view.device is None
            assert view.device_info is None
        del view
    assert sys.getrefcount(obj) == before, what


@pytest.fixture(params=sorted(LEGACY_EXPORTERS))
def legacy_exporter(request):
    obj = LEGACY_EXPORTERS[request.param]()
    yield obj
    if isinstance(obj, mmap.mmap):
        obj.close()


@pytest.fixture(params=sorted(OUR_EXPORTERS))
def our_exporter(request):
    obj = OUR_EXPORTERS[request.param]()
    yield obj


@SHARED_EXPORTER
@pytest.mark.parametrize("extra", [0, F.DEVICE], ids=["plain", "DEVICE"])
def test_legacy_exporter_matrix(legacy_exporter, extra):
    assert bufferext.check_buffer_supports(legacy_exporter, F.LEGACY)
    assert not bufferext.check_buffer_supports(legacy_exporter, F.DEVICE)
    for flags in REQUESTS:
        compare(legacy_exporter, flags, extra, device_answer=False)


@SHARED_EXPORTER
@pytest.mark.parametrize("extra", [0, F.DEVICE], ids=["plain", "DEVICE"])
def test_our_exporter_matrix(our_exporter, extra):
    assert bufferext.check_buffer_supports(our_exporter, F.LEGACY | F.DEVICE)
    for flags in REQUESTS:
        compare(our_exporter, flags, extra, device_answer=True)
    if isinstance(our_exporter, bufferext.CPUBuffer):
        assert our_exporter.exports == 0


def test_requests_cover_every_combination():
    assert len(REQUESTS) == 72
    assert REQUESTS[0] == F.SIMPLE
    assert F.FULL in REQUESTS and F.RECORDS_RO in REQUESTS
    assert all(r & ~F.LEGACY == 0 for r in REQUESTS)
    assert 0x100 not in REQUESTS and 0x200 not in REQUESTS


def test_matrix_detects_a_misbehaving_exporter():
    """The comparison can fail: a view that lies about its shape is caught.

    (A control for the matrix itself, using a BufferView of a different
    object than the one the plain request sees.)"""
    raw = plain_get_buffer(np.arange(6, dtype=np.int16).reshape(2, 3),
                           F.FULL_RO)
    with get_buffer(np.arange(6, dtype=np.int16)) as view:
        assert actual_fields(view) != expected_fields(raw, F.FULL_RO)


@SHARED_EXPORTER
@pytest.mark.parametrize("name", sorted(LEGACY_EXPORTERS))
def test_repeated_acquire_release_no_drift(name):
    obj = LEGACY_EXPORTERS[name]()
    before = sys.getrefcount(obj)
    for _ in range(500):
        view = get_buffer(obj, F.FULL_RO | F.DEVICE)
        view.release()
    assert sys.getrefcount(obj) == before
    if isinstance(obj, mmap.mmap):
        obj.close()      # would raise BufferError if an export leaked
    elif isinstance(obj, bytearray):
        obj.append(1)    # likewise
