"""VEBuffer through the stand-in VEO library, in one process.

Run by tests/test_ve.py in a subprocess with BUFFEREXT_VEO_LIBRARY pointing
at the stand-in (the VEO library loads once per process).  Not collected
on its own: the file name does not match test_*.py.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any, Dict, Iterator, Tuple

import numpy as np
import pytest

import bufferext
from bufferext import BufferFlags, VEBuffer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin import Counters  # noqa: E402

if "standin" not in os.environ.get("BUFFEREXT_VEO_LIBRARY", ""):
    pytest.skip("needs BUFFEREXT_VEO_LIBRARY = the stand-in VEO",
                allow_module_level=True)

INJECT = ("STANDIN_VEO_FAIL_PROC", "STANDIN_VEO_FAIL_CONTEXT",
          "STANDIN_VEO_FAIL_ALLOC", "STANDIN_VEO_FAIL_COPY")
DTYPES = ["float64", "float32", "int8", "uint16", "int32", "int64",
          "complex128", "bool", ">f8", "f2"]
SHAPES = [(), (0,), (7,), (2, 3), (3, 0, 2), (2, 3, 4)]


@pytest.fixture(scope="module")
def counters() -> Counters:
    return Counters()


@pytest.fixture(autouse=True)
def no_leaks(counters: Counters) -> Iterator[None]:
    """Every test leaves HMEM as it found it and misuses nothing."""
    for name in INJECT:
        os.environ.pop(name, None)
    gc.collect()
    before, errors = counters.hmem, counters.errors
    yield
    for name in INJECT:
        os.environ.pop(name, None)
    gc.collect()
    assert counters.hmem == before, "leaked HMEM"
    assert counters.errors == errors, "the stand-in saw a VEO misuse"


# ---- a VE Array Interface consumer, the way mpi4py-ve reads it -----------

def vai_consume(obj: Any, writable: bool = False) -> Tuple[int, int, bool]:
    """Read ``__ve_array_interface__`` as mpi4py-ve does: (address, nbytes,
    readonly).  Raises the errors a consumer raises for a bad dict."""
    vai = obj.__ve_array_interface__
    if not isinstance(vai, dict):
        raise TypeError("__ve_array_interface__ must be a dict")
    for key in ("shape", "typestr", "data", "version"):
        if key not in vai:
            raise KeyError(f"__ve_array_interface__ lacks {key!r}")
    if vai.get("mask") is not None:
        raise BufferError("VE arrays with a mask are not supported")
    if not isinstance(vai["version"], int) or vai["version"] < 1:
        raise ValueError(f"bad VAI version {vai['version']!r}")
    shape, typestr, data = vai["shape"], vai["typestr"], vai["data"]
    if not isinstance(shape, tuple) or not all(
            isinstance(n, int) and n >= 0 for n in shape):
        raise TypeError(f"bad shape {shape!r}")
    if (not isinstance(data, tuple) or len(data) != 2
            or not isinstance(data[0], int) or not isinstance(data[1], bool)):
        raise TypeError(f"data must be (int, bool), not {data!r}")
    itemsize = np.dtype(typestr).itemsize
    size = int(np.prod(shape, dtype=np.int64))
    strides = vai.get("strides")
    if strides is not None:
        expect, step = [], itemsize
        for n in reversed(shape):
            expect.insert(0, step)
            step *= n
        if size > 1 and tuple(strides) != tuple(expect):
            raise BufferError("VE array is not C-contiguous")
    address, readonly = data
    if size == 0 and address != 0:
        raise ValueError("zero-size VE array must have data address 0")
    if size > 0 and address == 0:
        raise ValueError("non-empty VE array with a NULL address")
    if writable and readonly:
        raise BufferError("VE array is read-only")
    ctxt = vai.get("veo_ctxt")
    if ctxt is not None and not isinstance(ctxt, int):
        raise TypeError(f"veo_ctxt must be None or an int, not {ctxt!r}")
    return address, size * itemsize, readonly


class FakeVAI:
    """An object exposing a given ``__ve_array_interface__`` dict."""

    def __init__(self, vai: Dict[str, Any]) -> None:
        self.__ve_array_interface__ = vai


GOOD: Dict[str, Any] = {"shape": (4,), "typestr": "<f8",
                        "data": (1 << 63, False), "version": 1}


# ---- construction and attributes ----------------------------------------

@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_attributes_match_numpy(shape: Tuple[int, ...], dtype: str,
                                counters: Counters) -> None:
    ref = np.empty(shape, dtype)
    buf = VEBuffer(shape, dtype)
    assert buf.shape == ref.shape
    if ref.size:        # numpy's strides of empty arrays vary by version
        assert buf.strides == ref.strides
    assert buf.ndim == ref.ndim and buf.nbytes == ref.nbytes
    assert buf.itemsize == ref.itemsize and buf.dtype == ref.dtype
    assert buf.node == 0 and not buf.readonly and not buf.closed
    assert buf.exports == 0
    if ref.nbytes == 0:
        assert buf.ptr == 0
    else:
        assert counters.is_ve_addr(buf.ptr), hex(buf.ptr)
    buf.close()
    assert buf.closed


def test_int_shape_and_default_dtype() -> None:
    buf = VEBuffer(5)
    assert buf.shape == (5,) and buf.dtype == np.float64
    assert "VEBuffer((5,), dtype='float64', node=0)" == repr(buf)


def test_buffers_on_a_node_share_one_process(counters: Counters) -> None:
    a, b = VEBuffer(3, node=2), VEBuffer(4, node=2)
    created = counters.calls("veo_proc_create")
    c = VEBuffer(5, node=2)
    assert counters.calls("veo_proc_create") == created
    ia, ib = bufferext.get_buffer(a), bufferext.get_buffer(c)
    assert ia.device_info.proc == ib.device_info.proc != 0
    assert ia.device_info.context == ib.device_info.context != 0
    ia.release(), ib.release()
    del a, b, c


@pytest.mark.parametrize("node", [-1, 64, 1 << 20, 1 << 40, -(1 << 70)])
def test_bad_node_is_valueerror(node: int) -> None:
    # past an int it was an OverflowError from the argument parser
    with pytest.raises(ValueError, match=rf"VEBuffer: node={node} is out of "
                                         r"range \(0 to 63\)"):
        VEBuffer(3, node=node)


@pytest.mark.parametrize("node", [True, 1.0, "1", np.int64(1)])
def test_node_that_is_not_an_int_is_typeerror(node: Any) -> None:
    # as CUDABuffer's device: True was node 1
    with pytest.raises(TypeError, match="VEBuffer: node must be an int "
                                        r"\(a VE node number\), not "
                                        rf"'(numpy\.)?{type(node).__name__}'"):
        VEBuffer(3, node=node)


def test_absent_node_is_device_unavailable() -> None:
    with pytest.raises(bufferext.DeviceUnavailableError, match="VE node 5"):
        VEBuffer(3, node=5)          # the stand-in has nodes 0..3


def test_process_creation_failure_names_node(counters: Counters) -> None:
    procs = counters.procs
    os.environ["STANDIN_VEO_FAIL_PROC"] = "1"
    with pytest.raises(bufferext.DeviceUnavailableError,
                       match=r"VE node 3: veo_proc_create\(3\) failed"):
        VEBuffer(3, node=3)
    del os.environ["STANDIN_VEO_FAIL_PROC"]
    assert counters.procs == procs
    VEBuffer(3, node=3).close()     # works once the failure is gone


def test_context_failure_destroys_the_process(counters: Counters) -> None:
    procs = counters.procs
    os.environ["STANDIN_VEO_FAIL_CONTEXT"] = "1"
    with pytest.raises(bufferext.DeviceUnavailableError,
                       match="VE node 1: veo_context_open failed"):
        VEBuffer(3, node=1)
    assert counters.procs == procs


def test_allocation_failure_is_memoryerror(counters: Counters) -> None:
    os.environ["STANDIN_VEO_FAIL_ALLOC"] = "1"
    with pytest.raises(MemoryError, match="cannot allocate 24 bytes of HMEM "
                                          "on VE node 0"):
        VEBuffer(3)


def test_zero_size_allocates_no_hmem(counters: Counters) -> None:
    allocs = counters.calls("veo_alloc_hmem")
    buf = VEBuffer((0, 4))
    assert counters.calls("veo_alloc_hmem") == allocs
    assert buf.ptr == 0 and buf.__ve_array_interface__["data"] == (0, False)
    assert buf.to_host().shape == (0, 4)
    buf.copy_from_host(b"")


@pytest.mark.parametrize("shape, exc, match", [
    (-1, ValueError, "shape\\[0\\] = -1 is negative"),
    ((2, -3), ValueError, "shape\\[1\\] = -3 is negative"),
    ("abc", TypeError, "shape\\[0\\] must be an int"),
    (2.5, TypeError, "shape must be an int or a sequence"),
    ((1,) * 65, ValueError, "at most 64"),
    ((1 << 62, 1 << 62), ValueError, "too large"),
])
def test_bad_shape(shape: Any, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        VEBuffer(shape)


def test_bad_dtype() -> None:
    with pytest.raises(TypeError):
        VEBuffer(3, "not-a-dtype")
    with pytest.raises(TypeError):
        VEBuffer(3, object)


# ---- copies --------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_roundtrip(dtype: str) -> None:
    src = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    buf = VEBuffer(src.shape, dtype)
    buf.copy_from_host(src)
    out = buf.to_host()
    assert out.dtype == src.dtype and out.shape == src.shape
    np.testing.assert_array_equal(out, src)


def test_copy_from_non_contiguous_and_raw_bytes() -> None:
    base = np.arange(40, dtype="i4").reshape(4, 10)
    view = base[:, ::2]
    buf = VEBuffer(view.shape, "i4")
    buf.copy_from_host(view)
    np.testing.assert_array_equal(buf.to_host(), view)
    buf.copy_from_host(bytes(range(buf.nbytes)))
    assert buf.to_host().tobytes() == bytes(range(buf.nbytes))


def test_copy_size_and_dtype_mismatch() -> None:
    buf = VEBuffer(4, "f8")
    with pytest.raises(ValueError, match="source has 24 bytes, the buffer 32"):
        buf.copy_from_host(np.zeros(3))
    with pytest.raises(ValueError, match="source format '[lq]' with 8-byte items does not match"):
        buf.copy_from_host(np.zeros(4, "i8"))
    with pytest.raises(TypeError):
        buf.copy_from_host(12)


@pytest.mark.parametrize("nodes", [(0, 0), (0, 3)])
def test_copy_from_other_vebuffer(nodes: Tuple[int, int]) -> None:
    src = VEBuffer((3, 2), "i2", node=nodes[0])
    src.copy_from_host(np.arange(6, dtype="i2").reshape(3, 2))
    dst = VEBuffer((3, 2), "i2", node=nodes[1])
    dst.copy_from(src)
    np.testing.assert_array_equal(dst.to_host(), src.to_host())
    assert src.exports == dst.exports == 0


def test_copy_from_mismatch() -> None:
    a = VEBuffer(4, "f8")
    with pytest.raises(ValueError, match="other holds 16 bytes"):
        a.copy_from(VEBuffer(2, "f8"))
    with pytest.raises(ValueError, match="other holds 32 bytes of"):
        a.copy_from(VEBuffer(4, "i8"))
    with pytest.raises(TypeError, match="other must be a VEBuffer"):
        a.copy_from(np.zeros(4))
    with pytest.raises(TypeError, match="other must be a VEBuffer"):
        a.copy_from(bufferext.CPUBuffer(4))


def test_copy_failure_is_runtimeerror() -> None:
    buf = VEBuffer(4)
    os.environ["STANDIN_VEO_FAIL_COPY"] = "1"
    with pytest.raises(RuntimeError, match="veo_hmemcpy of 32 bytes failed"):
        buf.copy_from_host(np.zeros(4))
    with pytest.raises(RuntimeError, match="to_host: veo_hmemcpy"):
        buf.to_host()
    assert buf.exports == 0


def test_host_to_host_copy_rejected_by_standin(counters: Counters) -> None:
    """The stand-in behaves like VEO: untagged pointers are not HMEM."""
    import ctypes
    a, b = ctypes.create_string_buffer(8), ctypes.create_string_buffer(8)
    counters.lib.veo_hmemcpy.argtypes = [ctypes.c_void_p] * 2 + [
        ctypes.c_size_t]
    errors = counters.errors
    assert counters.lib.veo_hmemcpy(ctypes.addressof(a),
                                    ctypes.addressof(b), 8) == -1
    assert counters.errors == errors + 1
    # forgive the deliberate misuse so the fixture's check stays meaningful
    counters.lib.standin_set_errors(ctypes.c_long(errors))


# ---- close and use after close -------------------------------------------

def test_use_after_close_is_valueerror() -> None:
    buf = VEBuffer(4)
    buf.close()
    buf.close()                              # harmless
    for action in (lambda: buf.ptr, buf.to_host,
                   lambda: buf.copy_from_host(np.zeros(4)),
                   lambda: buf.copy_from(VEBuffer(4)),
                   lambda: VEBuffer(4).copy_from(buf),
                   lambda: buf.__ve_array_interface__, buf.__dlpack__):
        with pytest.raises(ValueError, match="closed VEBuffer"):
            action()
    with pytest.raises(BufferError, match="buffer is closed"):
        bufferext.get_buffer(buf)
    assert buf.shape == (4,) and buf.closed


def test_close_while_exported_is_buffererror(counters: Counters) -> None:
    buf = VEBuffer(4)
    view = bufferext.get_buffer(buf)
    with pytest.raises(BufferError, match="1 export\\(s\\) are alive"):
        buf.close()
    assert not buf.closed
    view.release()
    hmem = counters.hmem
    buf.close()
    assert counters.hmem == hmem - 1


def test_context_manager_closes() -> None:
    with VEBuffer(4) as buf:
        assert not buf.closed
    assert buf.closed


def test_readonly_buffer_written_while_exported() -> None:
    buf = VEBuffer(4, readonly=True)
    buf.copy_from_host(np.ones(4))            # the owner may fill it
    with bufferext.get_buffer(buf):
        with pytest.raises(BufferError, match="read-only"):
            buf.copy_from_host(np.ones(4))
    np.testing.assert_array_equal(buf.to_host(), np.ones(4))


# ---- the extended buffer protocol ----------------------------------------

def test_get_buffer_shows_ve_device(counters: Counters) -> None:
    buf = VEBuffer((2, 3), "f4", node=1)
    with bufferext.get_buffer(buf) as view:
        assert view.device == "bufferext.ve"
        info = view.device_info
        assert isinstance(info, bufferext.VEDeviceInfo)
        assert info.version == (1 << 16) and info.node == 1
        assert info.proc != 0
        assert info.context == buf.__ve_array_interface__["veo_ctxt"]
        assert view.ptr == buf.ptr and counters.is_ve_addr(view.ptr)
        assert view.shape == (2, 3) and view.strides == (12, 4)
        assert view.format == "f" and view.nbytes == 24
        assert buf.exports == 1
        with pytest.raises(BufferError):
            view.tobytes()
    assert buf.exports == 0


@pytest.mark.parametrize("consumer", [memoryview, bytes, bytearray,
                                      np.frombuffer])
def test_cpu_consumers_refused(consumer: Any) -> None:
    buf = VEBuffer(4)
    with pytest.raises(BufferError, match="device 'bufferext.ve' can only "
                                          "be exported to consumers that "
                                          "request PyBUF_DEVICE"):
        consumer(buf)
    assert buf.exports == 0


def test_request_without_device_flag_refused() -> None:
    with pytest.raises(BufferError, match="request PyBUF_DEVICE"):
        bufferext.get_buffer(VEBuffer(4), BufferFlags.FULL_RO)


def test_request_flags_are_honoured() -> None:
    ro, rw = VEBuffer((2, 3), readonly=True), VEBuffer((2, 3))
    dev = BufferFlags.DEVICE
    with pytest.raises(BufferError, match="read-only"):
        bufferext.get_buffer(ro, BufferFlags.FULL | dev)
    bufferext.get_buffer(rw, BufferFlags.FULL | dev).release()
    with pytest.raises(BufferError, match="not Fortran contiguous"):
        bufferext.get_buffer(rw, BufferFlags.F_CONTIGUOUS | dev)
    with bufferext.get_buffer(rw, BufferFlags.SIMPLE | dev) as v:
        assert v.device == "bufferext.ve" and v.nbytes == 48


def test_supported_flags_are_precise() -> None:
    buf = VEBuffer(2)
    assert bufferext.supported_flags(buf) == (BufferFlags.LEGACY |
                                              BufferFlags.DEVICE)
    assert type(buf).__buffer_supported_flags__ == int(
        BufferFlags.LEGACY | BufferFlags.DEVICE)
    assert bufferext.check_buffer_supports(buf, BufferFlags.DEVICE)


def test_dlpack_refused_with_reason() -> None:
    buf = VEBuffer(2)
    for call in (buf.__dlpack__, buf.__dlpack_device__,
                 lambda: buf.__dlpack__(max_version=(1, 0))):
        with pytest.raises(BufferError, match="DLPack has no device type for "
                                              "NEC SX-Aurora VE memory"):
            call()
    with pytest.raises(BufferError):
        np.from_dlpack(buf)
    with bufferext.get_buffer(buf) as view:   # the generic path, too
        if hasattr(view, "__dlpack__"):
            with pytest.raises(BufferError, match="no DLPack device type"):
                view.__dlpack__()
    assert buf.exports == 0


# ---- the VE Array Interface ----------------------------------------------

@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("readonly", [False, True])
def test_vai_accepted_by_consumer(shape: Tuple[int, ...], readonly: bool,
                                  counters: Counters) -> None:
    buf = VEBuffer(shape, "i4", node=1, readonly=readonly)
    vai = buf.__ve_array_interface__
    assert set(vai) == {"shape", "typestr", "descr", "data", "version",
                        "strides", "veo_ctxt"}
    assert vai["version"] == 1 and vai["strides"] is None
    assert vai["typestr"] == np.dtype("i4").str
    assert vai["descr"] == [("", vai["typestr"])]
    assert type(vai["data"][0]) is int and type(vai["data"][1]) is bool
    address, nbytes, ro = vai_consume(buf)
    assert (address, nbytes, ro) == (buf.ptr, buf.nbytes, readonly)
    if nbytes:
        assert counters.is_ve_addr(address)
    if readonly:
        with pytest.raises(BufferError, match="read-only"):
            vai_consume(buf, writable=True)


@pytest.mark.parametrize("change, exc", [
    ({"shape": None}, KeyError), ({"typestr": None}, KeyError),
    ({"data": None}, KeyError), ({"version": None}, KeyError),
    ({"mask": FakeVAI(GOOD)}, BufferError),
    ({"version": 0}, ValueError),
    ({"data": (1 << 63, 0)}, TypeError),
    ({"data": [1 << 63, False]}, TypeError),
    ({"shape": [4]}, TypeError),
    ({"strides": (16,), "shape": (4,)}, BufferError),
    ({"shape": (0,)}, ValueError),
    ({"data": (0, False)}, ValueError),
    ({"veo_ctxt": "ctx"}, TypeError),
])
def test_vai_consumer_rejects_malformed(change: Dict[str, Any],
                                        exc: type) -> None:
    vai = dict(GOOD)
    for key, value in change.items():
        if value is None and key in ("shape", "typestr", "data", "version"):
            del vai[key]
        else:
            vai[key] = value
    with pytest.raises(exc):
        vai_consume(FakeVAI(vai))


def test_vai_consumer_accepts_explicit_c_strides() -> None:
    assert vai_consume(FakeVAI(dict(GOOD, strides=(8,), mask=None)))[1] == 32


# ---- status ----------------------------------------------------------------

def test_devices_reports_loaded_library() -> None:
    keep = VEBuffer(1, node=2)
    (ve,) = [d for d in bufferext.devices() if d["device"] == "bufferext.ve"]
    assert ve["loaded"] and ve["error"] is None
    assert ve["path"] == os.environ["BUFFEREXT_VEO_LIBRARY"]
    assert 2 in ve["open_nodes"] and ve["api_version"] == 11
    assert "test double" in ve["version_string"]
    keep.close()


def test_repeated_export_and_close_leave_nothing(counters: Counters) -> None:
    hmem = counters.hmem
    for i in range(300):
        buf = VEBuffer((i % 5 + 1, 3), node=i % 4)
        with bufferext.get_buffer(buf) as view:
            assert view.device_info.node == i % 4
        if i % 2:
            buf.close()
        del buf
    assert counters.hmem == hmem
