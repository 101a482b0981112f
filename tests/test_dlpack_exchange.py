"""The DLPack 1.3 C exchange API on our producer types, called through
ctypes the way a framework's C code would (PYFUNCTYPE: the GIL is held and
a Python error set by the callee is raised here)."""

from __future__ import annotations

import ctypes
import gc
from typing import Any

import numpy as np
import pytest

import bufferext

from _dlpack_ctypes import (DLDataType, DLDevice, DLManagedTensorVersioned,
                            DLPackVersion, DLTensor, PyCapsule_GetName,
                            PyCapsule_GetPointer)

P_MANAGED = ctypes.POINTER(DLManagedTensorVersioned)
SET_ERROR = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p,
                             ctypes.c_char_p)


class Header(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("prev_api", ctypes.c_void_p)]


class ExchangeAPI(ctypes.Structure):
    _fields_ = [
        ("header", Header),
        ("managed_tensor_allocator", ctypes.PYFUNCTYPE(
            ctypes.c_int, ctypes.POINTER(DLTensor), ctypes.POINTER(P_MANAGED),
            ctypes.c_void_p, SET_ERROR)),
        ("managed_tensor_from_py_object_no_sync", ctypes.PYFUNCTYPE(
            ctypes.c_int, ctypes.py_object, ctypes.POINTER(P_MANAGED))),
        ("managed_tensor_to_py_object_no_sync", ctypes.PYFUNCTYPE(
            ctypes.c_int, P_MANAGED, ctypes.POINTER(ctypes.c_void_p))),
        ("dltensor_from_py_object_no_sync", ctypes.PYFUNCTYPE(
            ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))),
        ("current_work_stream", ctypes.PYFUNCTYPE(
            ctypes.c_int, ctypes.c_int32, ctypes.c_int32,
            ctypes.POINTER(ctypes.c_void_p))),
    ]


def api_of(cls: type) -> ExchangeAPI:
    capsule = cls.__dict__.get("__dlpack_c_exchange_api__") or getattr(
        cls, "__dlpack_c_exchange_api__")
    assert PyCapsule_GetName(capsule) == b"dlpack_exchange_api"
    return ExchangeAPI.from_address(
        PyCapsule_GetPointer(capsule, b"dlpack_exchange_api"))


def fill(obj: Any) -> DLTensor:
    out = DLTensor()
    assert api_of(type(obj)).dltensor_from_py_object_no_sync(
        obj, ctypes.byref(out)) == 0
    return out


@pytest.mark.parametrize("cls", [bufferext.CPUBuffer, bufferext.CUDABuffer,
                                 bufferext.BufferAdapter])
def test_table_on_every_producer_type(cls: type) -> None:
    api = api_of(cls)
    assert (api.header.version.major, api.header.version.minor) == (1, 3)
    assert api.header.prev_api is None
    for name, _ in ExchangeAPI._fields_[1:]:
        assert ctypes.cast(getattr(api, name), ctypes.c_void_p).value


def test_our_reading_of_the_table_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
    out = fill(t)
    assert out.data == t.data_ptr() and out.ndim == 2
    assert [out.shape[i] for i in range(2)] == [4, 3]
    assert [out.strides[i] for i in range(2)] == list(t.stride())


def test_fill_describes_a_cpubuffer_without_owning_it() -> None:
    buf = bufferext.CPUBuffer((3, 5), "int16")
    out = fill(buf)
    assert out.data == buf.ptr and buf.exports == 0
    assert (out.device.device_type, out.device.device_id) == (1, 0)
    assert (out.dtype.code, out.dtype.bits, out.dtype.lanes) == (0, 16, 1)
    assert [out.shape[i] for i in range(2)] == [3, 5]
    assert [out.strides[i] for i in range(2)] == [5, 1]
    assert out.byte_offset == 0


def test_fill_refuses_what_dlpack_cannot_express() -> None:
    record = np.zeros(4, dtype=[("a", "<i4"), ("b", "u1")])
    adapter = bufferext.as_buffer(record["a"], readonly=True)
    with pytest.raises(BufferError, match="not a multiple of the item size"):
        fill(adapter)
    swapped = bufferext.CPUBuffer(3, ">i4")
    with pytest.raises(BufferError, match="native byte order"):
        fill(swapped)


def test_fill_of_a_closed_buffer_is_a_buffer_error() -> None:
    buf = bufferext.CPUBuffer(3)
    buf.close()
    with pytest.raises(BufferError, match="closed"):
        fill(buf)


def described(t: DLTensor) -> tuple:
    ndim = t.ndim
    return (t.data, t.device.device_type, t.device.device_id, ndim,
            t.dtype.code, t.dtype.bits, t.dtype.lanes,
            [t.shape[i] for i in range(ndim)] if ndim else None,
            [t.strides[i] for i in range(ndim)] if ndim else None,
            t.byte_offset)


class CPUBufferSubclass(bufferext.CPUBuffer):
    pass


@pytest.mark.parametrize("shape,dtype,readonly", [
    ((), "float64", False), (0, "int8", False), ((3, 0, 2), "uint16", False),
    ((2, 3, 4), "complex64", True), (7, "?", False), ((1, 1), "int64", True)])
@pytest.mark.parametrize("cls", [bufferext.CPUBuffer, CPUBufferSubclass])
def test_fill_of_a_cpubuffer_matches_the_export_path(
        cls: type, shape: Any, dtype: str, readonly: bool) -> None:
    # CPUBuffer's fill reads the layout without an export (a subclass with
    # a generic slot, 3.12+, takes the export path): the owning tensor,
    # made from an export, must describe the same memory the same way.
    buf = cls(shape, dtype, readonly=readonly)
    out = fill(buf)
    assert buf.exports == 0
    managed = P_MANAGED()
    assert api_of(cls).managed_tensor_from_py_object_no_sync(
        buf, ctypes.byref(managed)) == 0
    try:
        assert described(out) == described(managed.contents.dl_tensor)
        assert out.ndim == len(np.shape(np.empty(shape)))
        if out.ndim == 0:
            assert not out.shape and not out.strides
    finally:
        managed.contents.deleter(managed)
    assert buf.exports == 0


def test_managed_tensor_holds_an_export_until_deleted() -> None:
    buf = bufferext.CPUBuffer((2, 2), "float64", readonly=True)
    out = P_MANAGED()
    api = api_of(bufferext.CPUBuffer)
    assert api.managed_tensor_from_py_object_no_sync(buf, ctypes.byref(out)) == 0
    managed = out.contents
    assert (managed.version.major, managed.version.minor) == (1, 3)
    assert managed.flags & 1                      # READ_ONLY
    assert managed.dl_tensor.data == buf.ptr
    assert buf.exports == 1
    managed.deleter(out)
    assert buf.exports == 0


def test_to_py_object_steals_the_tensor_into_an_adapter() -> None:
    buf = bufferext.CPUBuffer(4, "uint8")
    api = api_of(bufferext.CPUBuffer)
    out = P_MANAGED()
    assert api.managed_tensor_from_py_object_no_sync(buf, ctypes.byref(out)) == 0
    obj = ctypes.c_void_p()
    assert api.managed_tensor_to_py_object_no_sync(out, ctypes.byref(obj)) == 0
    adapter = ctypes.cast(obj, ctypes.py_object).value
    ctypes.pythonapi.Py_DecRef(ctypes.py_object(adapter))   # the new ref
    assert isinstance(adapter, bufferext.BufferAdapter)
    assert adapter.ptr == buf.ptr and adapter.protocol == "dlpack"
    assert buf.exports == 1
    del adapter
    gc.collect()
    assert buf.exports == 0


def test_allocator_makes_zeroed_cpu_tensors_and_reports_errors() -> None:
    api = api_of(bufferext.CPUBuffer)
    shape = (ctypes.c_int64 * 2)(2, 3)
    proto = DLTensor()
    proto.device = DLDevice(1, 0)
    proto.ndim = 2
    proto.dtype = DLDataType(2, 32, 1)
    proto.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    errors = []
    on_error = SET_ERROR(lambda ctx, kind, msg: errors.append((kind, msg)))
    out = P_MANAGED()
    assert api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out),
                                        None, on_error) == 0
    tensor = out.contents.dl_tensor
    assert tensor.data % 64 == 0 and tensor.ndim == 2
    assert (tensor.dtype.code, tensor.dtype.bits) == (2, 32)
    data = (ctypes.c_float * 6).from_address(tensor.data)
    assert list(data) == [0.0] * 6
    out.contents.deleter(out)
    proto.device = DLDevice(2, 0)
    assert api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out),
                                        None, on_error) == -1
    assert errors and errors[-1][0] == b"BufferError"


def test_allocator_error_kind_is_the_exceptions() -> None:
    # every failure was reported as kind "MemoryError", a bad dtype with
    # CPUBuffer's "dtype 'c4' is not understood" (review of the exports)
    api = api_of(bufferext.CPUBuffer)
    errors = []
    on_error = SET_ERROR(lambda ctx, kind, msg: errors.append((kind, msg)))

    def allocate(code, bits, lanes, shape):
        dims = (ctypes.c_int64 * len(shape))(*shape)
        proto = DLTensor()
        proto.device = DLDevice(1, 0)
        proto.ndim = len(shape)
        proto.dtype = DLDataType(code, bits, lanes)
        proto.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
        out = P_MANAGED()
        assert api.managed_tensor_allocator(
            ctypes.byref(proto), ctypes.byref(out), None, on_error) == -1
        return errors[-1]

    for code, bits, lanes in ((5, 32, 1), (2, 8, 1), (0, 24, 1), (6, 16, 1),
                              (4, 32, 1), (2, 32, 4)):
        kind, message = allocate(code, bits, lanes, (2,))
        assert kind == b"BufferError"
        assert message.startswith(b"unsupported dtype (code=%d, bits=%d, "
                                  b"lanes=%d)" % (code, bits, lanes)), message
    assert allocate(0, 8, 1, (-1,)) == (
        b"ValueError", b"CPUBuffer: shape[0] = -1 is negative")
    kind, message = allocate(0, 8, 1, (2**62, 2**62))
    assert kind == b"ValueError" and b"too large" in message, message


def test_allocator_keeps_the_error_the_consumers_set_error_sets(
        c99: Any) -> None:
    # DLPack's header expects a Python consumer's SetError to set a Python
    # error: the allocator cleared it after the call (rc -1, no exception)
    api = api_of(bufferext.CPUBuffer)
    dims = (ctypes.c_int64 * 1)(4)
    proto = DLTensor()
    proto.device = DLDevice(2, 0)               # CUDA: refused
    proto.ndim = 1
    proto.dtype = DLDataType(2, 32, 1)
    proto.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
    out = P_MANAGED()
    on_error = SET_ERROR(c99.set_error_address())
    # a PYFUNCTYPE call raises the Python error it finds set
    with pytest.raises(RuntimeError, match=r"^BufferError: "):
        api.managed_tensor_allocator(ctypes.byref(proto), ctypes.byref(out),
                                     None, on_error)


def test_current_work_stream() -> None:
    api = api_of(bufferext.CPUBuffer)
    stream = ctypes.c_void_p(123)
    assert api.current_work_stream(1, 0, ctypes.byref(stream)) == 0
    assert stream.value is None                   # CPU: no stream
    assert api.current_work_stream(2, 0, ctypes.byref(stream)) == 0
    assert stream.value == 1                      # the legacy default stream


# a foreign object given to the exchange API (from test_boundary_c.py)

def test_exchange_api_refuses_a_foreign_object() -> None:
    # the C exchange API is reached through a type's attribute, but is called
    # with any object: one that is not ours gets TypeError, not our layout
    # read from its view
    out = DLTensor()
    api = api_of(bufferext.CPUBuffer)
    with pytest.raises(TypeError, match="bytearray is not a bufferext "
                                        "exporter"):
        api.dltensor_from_py_object_no_sync(bytearray(8), ctypes.byref(out))
