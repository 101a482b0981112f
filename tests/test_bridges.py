"""as_buffer(): every protocol in, zero-copy, lifetimes, and the way out."""

from __future__ import annotations

import gc
import re
import sys
import types
import weakref
from typing import Any, Dict

import numpy as np
import pytest

import bufferext
from bufferext import BufferFlags as F

from _dlpack_ctypes import Crafted, PyCapsule_GetName, read_versioned
from _helpers import run_child


class DLPackOnly:
    """Speaks only DLPack (1.x with keywords), forwarding to an array."""

    def __init__(self, array: Any) -> None:
        self.array = array

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self.array.__dlpack_device__()


class LegacyDLPack(DLPackOnly):
    """A pre-1.0 producer: __dlpack__ takes no max_version."""

    def __dlpack__(self, stream: Any = None) -> Any:  # type: ignore[override]
        return self.array.__dlpack__(stream=stream)


class Interface:
    """Speaks one interface dict."""

    def __init__(self, name: str, value: Any, keep: Any = None) -> None:
        setattr(self, name, value)
        self.keep = keep


def _numpy_exports_versioned() -> bool:
    """numpy >= 2.1 takes max_version; 2.0 (on 3.9 here) only the legacy call."""
    try:
        np.arange(1).__dlpack__(max_version=(1, 0))
    except TypeError:
        return False
    return True


NUMPY_VERSIONED = _numpy_exports_versioned()
needs_versioned = pytest.mark.skipif(
    not NUMPY_VERSIONED, reason="numpy before 2.1 exports legacy capsules only")


def ptr(obj: Any) -> int:
    with bufferext.get_buffer(obj, F.FULL_RO | F.DEVICE) as view:
        return view.ptr


# ---- order and pass-through -------------------------------------------------

def test_buffer_exporters_pass_through() -> None:
    a = np.arange(6.0)
    assert bufferext.as_buffer(a) is a
    b = bufferext.CPUBuffer(4)
    assert bufferext.as_buffer(b) is b
    assert bufferext.as_buffer(b"abc") == b"abc"


def test_readonly_policy_on_pass_through() -> None:
    a = np.arange(6.0)
    ro = bufferext.as_buffer(a, readonly=True)
    assert isinstance(ro, bufferext.BufferAdapter) and ro.readonly
    assert ptr(ro) == a.ctypes.data
    with pytest.raises(BufferError):
        bufferext.get_buffer(ro, F.WRITABLE)
    with pytest.raises(BufferError):
        bufferext.as_buffer(b"abc", readonly=False)
    assert not bufferext.as_buffer(bytearray(3), readonly=False).readonly


def test_readonly_must_be_bool() -> None:
    with pytest.raises(TypeError, match="readonly"):
        bufferext.as_buffer(b"x", readonly=1)  # type: ignore[arg-type]


def test_non_exporter_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="'object' object speaks none"):
        bufferext.as_buffer(object())


def refused_as_cuda(with_driver: str) -> Any:
    """pytest.raises for host memory that claims to be CUDA memory: refused,
    never handed on as CPU memory.  Without a CUDA driver the import says
    so; with one (a GPU machine, or the stand-in loaded by an earlier test)
    the lie is named (``with_driver``)."""
    cuda = next(d for d in bufferext.devices() if d["device"] == "bufferext.cuda")
    if cuda["loaded"] and cuda.get("devices"):
        return pytest.raises(BufferError, match=with_driver)
    return pytest.raises(bufferext.DeviceUnavailableError, match="CUDA driver")


class IgnoresStream(DLPackOnly):
    """Claims CUDA memory over a CPU array, and ignores the stream it is
    asked for (NumPy would refuse it)."""

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return (2, 0)


def test_dlpack_preferred_for_device_memory_even_with_buffer_slot() -> None:
    # the device path is taken (and explains itself)
    with refused_as_cuda(r"said \(2, 0\), but the tensor __dlpack__\(\) "
                         r"returned is on \(1, 0\)"):
        bufferext.as_buffer(IgnoresStream(np.arange(3.0)))


# ---- DLPack in -----------------------------------------------------------------

@pytest.mark.parametrize("producer", [DLPackOnly, LegacyDLPack])
def test_dlpack_zero_copy(producer: Any) -> None:
    a = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    adapter = bufferext.as_buffer(producer(a))
    versioned = producer is DLPackOnly and NUMPY_VERSIONED
    assert adapter.protocol == ("dlpack" if versioned else "dlpack-legacy")
    assert ptr(adapter) == a.ctypes.data
    assert adapter.shape == (3, 2) and adapter.strides == a.strides
    out = np.asarray(adapter)
    assert out.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(out, a)
    a[0, 0] = 99                                   # shared memory
    assert out[0, 0] == 99


@needs_versioned
def test_dlpack_read_only_flag_honoured() -> None:
    a = np.arange(4.0)
    a.flags.writeable = False
    adapter = bufferext.as_buffer(DLPackOnly(a))
    assert adapter.readonly
    with pytest.raises(BufferError):
        bufferext.get_buffer(adapter, F.WRITABLE)
    assert not np.asarray(adapter).flags.writeable
    with pytest.raises(BufferError, match="readonly=False"):
        bufferext.as_buffer(DLPackOnly(a), readonly=False)


def test_dlpack_source_kept_alive_and_deleter_called_once() -> None:
    source = bufferext.CPUBuffer((2, 3), "float32")
    wrapper = DLPackOnly(source)
    adapter = bufferext.as_buffer(wrapper)
    ref = weakref.ref(wrapper)
    del wrapper
    gc.collect()
    assert ref() is not None              # the adapter keeps its source
    assert source.exports == 1            # the consumed capsule's export
    with bufferext.get_buffer(adapter) as view:
        assert view.ptr == source.ptr
    del adapter
    gc.collect()
    assert ref() is None
    assert source.exports == 0            # deleter ran exactly once


def test_crafted_capsule_deleter_runs_once_on_adapter_death() -> None:
    crafted = Crafted(shape=(8,), nbytes=8)
    adapter = bufferext._bufferext._adapter_from_dlpack(
        None, crafted.capsule(), None)
    assert crafted.deleted == 0
    del adapter
    gc.collect()
    assert crafted.deleted == 1


@needs_versioned
def test_consumed_capsule_is_renamed_and_refused_twice() -> None:
    a = np.arange(3.0)
    capsule = a.__dlpack__(max_version=(1, 0))
    keep = bufferext._bufferext._adapter_from_dlpack(a, capsule, None)
    assert PyCapsule_GetName(capsule) == b"used_dltensor_versioned"
    with pytest.raises(BufferError, match="used_dltensor_versioned"):
        bufferext._bufferext._adapter_from_dlpack(a, capsule, None)
    del keep


@pytest.mark.parametrize("name", [b"foo", b"used_dltensor", b"dltensorX"])
def test_wrongly_named_capsule(name: bytes) -> None:
    crafted = Crafted()
    with pytest.raises(BufferError, match="capsule name"):
        bufferext._bufferext._adapter_from_dlpack(
            None, crafted.capsule(name), None)
    assert crafted.deleted == 0


def test_not_a_capsule() -> None:
    with pytest.raises(TypeError, match=r"NoneType.__dlpack__\(\) returned a "
                                        "'object', not a DLPack capsule"):
        bufferext._bufferext._adapter_from_dlpack(None, object(), None)


@pytest.mark.parametrize("kwargs, message", [
    (dict(version=(2, 0)), "version 2.0"),
    (dict(version=(0, 9)), "version 0.9"),
    (dict(ndim=-1), "ndim = -1"),
    (dict(ndim=65, shape=(1,) * 65), "ndim = 65"),
    (dict(ndim=2, shape=None), "shape is NULL"),
    (dict(shape=(-3,)), r"shape\[0\] = -3"),
    (dict(code=99), "code=99"),
    (dict(code=18), r"dtype \(code=18, bits=8\) has no buffer-protocol"),
    (dict(code=4, bits=8), r"dtype bfloat16 \(code=4, bits=8\) has no"),
    (dict(code=17, bits=4), r"float4_e2m1fn \(code=17, bits=4\) packs items "
                            "into less than a byte"),
    (dict(lanes=4), "lanes = 4"),
    (dict(code=4, bits=16, lanes=2), "lanes = 2"),
    (dict(code=10, bits=16), r"dtype float8_e4m3fn \(code=10, bits=16\) has "
                             "no buffer-protocol format"),
    (dict(code=14, bits=0), r"float8_e8m0fnu \(code=14, bits=0\)"),
    (dict(bits=12), "bits=12"),
    (dict(device=(7, 0)), "device type 7"),
    (dict(data=0, shape=(8,)), "NULL"),
])
def test_absurd_capsules_rejected(kwargs: Dict[str, Any], message: str) -> None:
    crafted = Crafted(**kwargs)
    capsule = crafted.capsule()
    with pytest.raises(BufferError, match=message):
        bufferext._bufferext._adapter_from_dlpack(None, capsule, None)
    gc.collect()
    # Refused: given back, named for its producer again, never deleted.
    assert PyCapsule_GetName(capsule) == b"dltensor_versioned"
    assert crafted.deleted == 0


def test_legacy_capsule_without_strides_is_c_contiguous() -> None:
    crafted = Crafted(versioned=False, ndim=2, shape=(2, 4), strides=None,
                      code=1, bits=8, nbytes=8)
    adapter = bufferext._bufferext._adapter_from_dlpack(
        None, crafted.capsule(), None)
    assert adapter.strides == (4, 1)
    assert bytes(memoryview(adapter)) == bytes(8)
    del adapter
    gc.collect()
    assert crafted.deleted == 1


def test_byte_offset_applied() -> None:
    crafted = Crafted(shape=(4,), nbytes=8, byte_offset=4)
    adapter = bufferext._bufferext._adapter_from_dlpack(
        None, crafted.capsule(), None)
    assert adapter.ptr == crafted.managed.dl_tensor.data + 4


# ---- interface dicts ---------------------------------------------------------

def test_array_interface_pointer_tuple() -> None:
    a = np.arange(12.0).reshape(3, 4).T
    adapter = bufferext.as_buffer(
        Interface("__array_interface__", a.__array_interface__, a))
    assert adapter.protocol == "array_interface"
    assert ptr(adapter) == a.ctypes.data and adapter.strides == a.strides
    np.testing.assert_array_equal(np.asarray(adapter), a)


def test_array_interface_buffer_data_with_offset_and_byte_order() -> None:
    data = bytearray(b"\xff\xff\x00\x00\x00\x01\x00\x00\x00\x02")
    adapter = bufferext.as_buffer(Interface("__array_interface__", {
        "shape": (2,), "typestr": ">i4", "data": data, "offset": 2,
        "version": 3}))
    assert adapter.format == ">i"             # byte order passes through
    np.testing.assert_array_equal(np.asarray(adapter), [1, 2])
    assert ptr(adapter) == ptr(data) + 2
    with pytest.raises(BufferError, match="native byte order"):
        adapter.__dlpack__(max_version=(1, 0))


def test_array_interface_read_only_data() -> None:
    adapter = bufferext.as_buffer(Interface("__array_interface__", {
        "shape": (4,), "typestr": "|u1", "data": b"abcd", "version": 3}))
    assert adapter.readonly
    assert bytes(memoryview(adapter)) == b"abcd"


GOOD = {"shape": (3,), "typestr": "<f8", "data": (4096, False), "version": 3}


@pytest.mark.parametrize("change, field", [
    ({"shape": [3]}, "shape"),
    ({"shape": (-1,)}, "shape"),
    ({"shape": (1.5,)}, "shape"),
    ({"shape": (True,)}, "shape"),
    ({"typestr": 5}, "typestr"),
    ({"typestr": "xyz"}, "typestr"),
    ({"typestr": "|O"}, "typestr"),
    ({"data": (0, False)}, "NULL"),
    ({"data": (-8, False)}, "data"),
    ({"data": (8,)}, "data"),
    ({"data": (8, 1)}, "data"),
    ({"data": "nope"}, "data"),
    ({"strides": [8]}, "strides"),
    ({"strides": (8, 8)}, "strides"),
    ({"version": 4}, "version"),
    ({"version": 2}, "version"),
    ({"version": "3"}, "version"),
    ({"mask": object()}, "mask"),
    ({"offset": -1}, "offset"),
])
def test_array_interface_rejects(change: Dict[str, Any], field: str) -> None:
    bad = dict(GOOD, **change)
    with pytest.raises(BufferError, match=field):
        bufferext.as_buffer(Interface("__array_interface__", bad))


@pytest.mark.parametrize("key", ["shape", "typestr", "version"])
def test_array_interface_missing_key(key: str) -> None:
    bad = dict(GOOD)
    del bad[key]
    with pytest.raises(BufferError, match=f"required key '{key}'"):
        bufferext.as_buffer(Interface("__array_interface__", bad))


@pytest.mark.parametrize("name", ["__array_interface__",
                                  "__cuda_array_interface__",
                                  "__ve_array_interface__"])
def test_interface_must_be_a_dict(name: str) -> None:
    with pytest.raises(TypeError, match=f"{name} must be a dict"):
        bufferext.as_buffer(Interface(name, [("shape", (1,))]))


CAI = {"shape": (3,), "typestr": "<f4", "data": (1 << 40, False),
       "version": 3, "stream": None}


@pytest.mark.parametrize("change, field", [
    ({"stream": 0}, "stream"),
    ({"stream": -5}, "stream"),
    ({"stream": "1"}, "stream"),
    ({"version": 4}, "version"),
    ({"mask": CAI}, "mask"),
    ({"shape": (2, -2)}, "shape"),
    ({"data": None}, "data"),
])
def test_cai_rejects(change: Dict[str, Any], field: str) -> None:
    bad = dict(CAI, **change)
    with pytest.raises(BufferError, match=field):
        bufferext.as_buffer(Interface("__cuda_array_interface__", bad))


VAI = {"shape": (3,), "typestr": "<f8", "data": (1 << 40, False),
       "version": 1}


@pytest.mark.parametrize("change, field", [
    ({"version": 2}, "version"),
    ({"version": 0}, "version"),
    ({"mask": VAI}, "mask"),
    ({"veo_ctxt": -1}, "veo_ctxt"),
    ({"typestr": None}, "typestr"),
])
def test_vai_rejects(change: Dict[str, Any], field: str) -> None:
    bad = dict(VAI, **change)
    with pytest.raises(BufferError, match=field):
        bufferext.as_buffer(Interface("__ve_array_interface__", bad))


# ---- the way out -------------------------------------------------------------

def test_adapter_offers_dlpack_out() -> None:
    a = np.arange(6, dtype=np.int16).reshape(2, 3)
    adapter = bufferext.as_buffer(DLPackOnly(a))
    assert adapter.__dlpack_device__() == (1, 0)
    out = np.from_dlpack(adapter)
    assert out.ctypes.data == a.ctypes.data
    capsule = adapter.__dlpack__(max_version=(1, 3))
    managed = read_versioned(capsule)
    assert (managed.version.major, managed.version.minor) == (1, 3)
    assert [managed.dl_tensor.strides[i] for i in range(2)] == [3, 1]


def test_dlpack_out_refuses_strides_that_are_not_whole_items() -> None:
    record = np.zeros(4, dtype=[("a", "<i4"), ("b", "u1")])
    field = record["a"]                     # byte stride 5, item size 4
    view = bufferext.get_buffer(field)
    with pytest.raises(BufferError, match="not a multiple of the item size"):
        view.__dlpack__(max_version=(1, 0))


def test_cpu_adapter_has_no_cuda_array_interface() -> None:
    adapter = bufferext.as_buffer(np.arange(3.0), readonly=True)
    with pytest.raises(AttributeError):
        adapter.__cuda_array_interface__


def test_cai_over_host_memory_explains() -> None:
    with refused_as_cuda("is not CUDA device memory"):
        bufferext.as_buffer(Interface("__cuda_array_interface__", dict(CAI)))


def test_repeated_bridging_does_not_leak() -> None:
    a = np.arange(64.0)
    for _ in range(200):                       # warm up caches
        bufferext.as_buffer(DLPackOnly(a))
    gc.collect()
    before = sys.getrefcount(a)
    for _ in range(2000):
        adapter = bufferext.as_buffer(DLPackOnly(a))
        del adapter
        with pytest.raises(BufferError):
            bufferext.as_buffer(Interface("__array_interface__",
                                          dict(GOOD, version=9)))
    gc.collect()
    assert sys.getrefcount(a) == before


def test_dlpack_device_of_a_non_contiguous_exporter() -> None:
    base = np.arange(12.0).reshape(3, 4)[:, ::2]
    adapter = bufferext.as_buffer(base, readonly=True)
    assert adapter.__dlpack_device__() == (1, 0)
    with bufferext.get_buffer(base) as view:
        assert view.__dlpack_device__() == (1, 0)


def test_adapter_repr_shows_its_device_as_the_attribute_does() -> None:
    cpu = bufferext.as_buffer(np.arange(3.0), readonly=True)
    assert cpu.device is None
    assert repr(cpu) == ("<BufferAdapter of numpy.ndarray via buffer: shape=(3,) "
                         "format='d' device=None readonly>")
    ve = bufferext.as_buffer(Interface("__ve_array_interface__", dict(VAI)))
    assert ve.device == "bufferext.ve"
    assert repr(ve) == ("<BufferAdapter of Interface via ve_array_interface: "
                        "shape=(3,) format='d' device='bufferext.ve'>")


def test_capsule_consumed_by_a_finalizer_during_the_import() -> None:
    # issue 21: the adapter is allocated (the GC may run a finalizer then)
    # before the capsule is read: a finalizer that hands the same capsule
    # to another consumer leaves it renamed, and the import refuses it
    # instead of owning a tensor that another consumer owns
    import _hooks
    buf = bufferext.CPUBuffer(4, "i4")
    stolen = []

    class Producer:
        def __dlpack_device__(self):
            return (1, 0)

        def __dlpack__(self, **kwargs):
            capsule = buf.__dlpack__(**kwargs)
            self.capsule = capsule
            return capsule

    p = Producer()

    def steal():
        if hasattr(p, "capsule") and not stolen:
            stolen.append(np.from_dlpack(types.SimpleNamespace(
                __dlpack__=lambda **kw: p.capsule,
                __dlpack_device__=lambda: (1, 0))))

    for _ in range(20):
        stolen.clear()
        with _hooks.in_gc(steal, times=50):
            try:
                a = bufferext.as_buffer(p)
            except BufferError as e:
                assert "used_dltensor" in str(e)
            else:
                with bufferext.get_buffer(a) as v:
                    assert v.nbytes == 16
                del a
        p.__dict__.pop("capsule", None)
    stolen.clear()
    gc.collect()
    assert buf.exports == 0


@pytest.mark.parametrize("readonly", [None, True])
def test_buffer_exporter_that_reports_a_cuda_dlpack_device(readonly) -> None:
    # a plain buffer exporter (CPU by the buffer protocol, which cannot say
    # otherwise) that also says its DLPack device is CUDA is read through
    # DLPack: neither as_buffer's C pass-through (one argument) nor the
    # Python dispatch may hand it on as CPU memory
    class Claim(bytearray):
        def __dlpack__(self, stream=None, **kwargs):
            return np.frombuffer(self, np.uint8).__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return (2, 0)

    obj = Claim(b"abcd")
    with refused_as_cuda(r"said \(2, 0\), but the tensor"):
        if readonly is None:
            bufferext.as_buffer(obj)
        else:
            bufferext.as_buffer(obj, readonly=readonly)


# ---- our types, numpy and DLPack at the boundary (from test_boundary_c.py) ---

@pytest.mark.parametrize("name", ["BufferAdapter", "BufferView"])
def test_internal_types_cannot_be_instantiated(name: str) -> None:
    out = run_child(f"""
        import bufferext
        try:
            bufferext.{name}()
        except TypeError as e:
            print("TypeError", e)
    """)
    assert out.startswith("TypeError cannot create"), out


def test_numpy_still_reads_cpu_adapter_and_view() -> None:
    data = np.arange(4.0)
    adapter = bufferext.as_buffer(data, readonly=True)
    assert not hasattr(adapter, "__array__")
    assert np.asarray(adapter).tolist() == [0.0, 1.0, 2.0, 3.0]
    with bufferext.get_buffer(bufferext.CPUBuffer(2)) as view:
        assert not hasattr(view, "__array__")
        assert np.asarray(view).shape == (2,)


def test_dlpack_returning_a_non_capsule_names_the_exporter() -> None:
    class Liar:
        def __dlpack__(self, **kwargs: object) -> object:
            return [1, 2]

        def __dlpack_device__(self) -> tuple:
            return (1, 0)

    with pytest.raises(TypeError, match=r"Liar.__dlpack__\(\) returned a "
                                        r"'list', not a DLPack capsule"):
        bufferext.as_buffer(Liar())


# ---- array interface: data too short, sub-arrays (from test_boundary_python.py)

@pytest.mark.parametrize("shape, strides, offset, nbytes", [
    ((1 << 20,), None, 0, 8),        # 8 MiB described over 8 bytes
    ((2,), None, 8, 16),             # the offset pushes it past the end
    ((3,), (-8,), 0, 24),            # a negative stride reaches before
    ((2, 2), (8, 32), 0, 32),        # a large stride reaches past
])
def test_array_interface_over_a_short_buffer_is_refused(
        shape: tuple, strides: Any, offset: int, nbytes: int) -> None:
    data = bytearray(nbytes)
    obj = Interface("__array_interface__", dict(
        version=3, shape=shape, typestr="<f8", data=data, strides=strides,
        offset=offset))
    with pytest.raises(BufferError, match=rf"of 'data', a buffer of "
                                          rf"{nbytes} bytes"):
        bufferext.as_buffer(obj)
    data.append(0)                  # the refused view was released


def test_array_interface_inside_its_buffer_is_accepted() -> None:
    data = bytearray(np.arange(6.0).tobytes())
    obj = Interface("__array_interface__", dict(
        version=3, shape=(3,), typestr="<f8", data=data, offset=16,
        strides=(-8,)))
    assert np.from_dlpack(bufferext.as_buffer(obj)).tolist() == [2.0, 1.0, 0.0]


@pytest.mark.parametrize("data", [
    np.arange(10, dtype=np.int64)[::-1],    # its pointer is its last item
    np.arange(10, dtype=np.int64)[::2],     # every other item of 80 bytes
], ids=["reversed", "strided"])
def test_array_interface_data_must_be_one_block(data: np.ndarray) -> None:
    # NumPy asks 'data' for PyBUF_SIMPLE and refuses these; read as flat
    # bytes, the reversed one reached 72 bytes past its allocation
    obj = Interface("__array_interface__", dict(
        version=3, shape=(5,), typestr="<i8", data=data))
    with pytest.raises(BufferError, match="'data', a 'ndarray', is not one "
                                          "contiguous block of memory"):
        bufferext.as_buffer(obj)
    with pytest.raises(ValueError):
        np.asarray(obj)


class Shifty(int):
    """An int whose own conversions answer differently from its value."""

    def __int__(self) -> int:
        return -4096

    def __index__(self) -> int:
        return -4096

    def __bool__(self) -> bool:
        return False


def test_interface_ints_are_read_once_whatever_a_subclass_says() -> None:
    data = bytearray(range(16))
    obj = Interface("__array_interface__", dict(
        version=3, shape=(Shifty(2),), typestr="|u1", data=data,
        offset=Shifty(8), strides=(Shifty(3),)))
    adapter = bufferext.as_buffer(obj)
    # the values checked are the ones used: offset 8, stride 3, 2 items
    assert adapter.shape == (2,) and adapter.strides == (3,)
    assert np.from_dlpack(adapter).tolist() == [8, 11]


def test_void_typestr_takes_its_fields_from_descr() -> None:
    items = np.array([(1.5, 7), (2.5, 9)], [("x", "<f4"), ("y", "<i4")])
    d = items.__array_interface__
    assert d["typestr"] == "|V8" and d["descr"] != [("", "|V8")]
    adapter = bufferext.as_buffer(Interface("__array_interface__", dict(
        d, data=bytearray(items.tobytes()))))
    # before: '8x', eight pad bytes, no values
    assert adapter.format == items.data.format
    assert memoryview(adapter).itemsize == 8
    raw = bufferext.as_buffer(Interface("__array_interface__", dict(
        version=3, shape=(2,), typestr="|V8", descr=[("", "|V8")],
        data=bytearray(16))))
    assert raw.format == np.zeros(1, "V8").data.format


@pytest.mark.parametrize("descr, message", [
    ([("x", "<f4")], r"a type of 8 bytes, as 'typestr' '\|V8' says "
                     r"\(it describes 4\)"),
    ([("x", "<f4", "nope")], "a list of"),
    ([("x", "O"), ("y", "<i4")], "'descr' is .*; expected a type without "
                                 "Python objects"),
])
def test_descr_that_contradicts_the_typestr_is_refused(
        descr: Any, message: str) -> None:
    obj = Interface("__array_interface__", dict(
        version=3, shape=(2,), typestr="|V8" if "O" not in str(descr)
        else "|V12", descr=descr, data=bytearray(24)))
    with pytest.raises(BufferError, match=message):
        bufferext.as_buffer(obj)


def test_interface_strides_spanning_past_the_address_space_are_refused(
        ) -> None:
    x = np.zeros(4)
    obj = Interface("__array_interface__", dict(
        version=3, shape=(2, 2), typestr="<f8", data=(x.ctypes.data, False),
        strides=(2**62, -2**62)))
    with pytest.raises(BufferError, match=r"strides\[1\] = -4611686018427387904"
                                          r" with shape\[1\] = 2 spans more "
                                          "than PY_SSIZE_T_MAX bytes"):
        bufferext.as_buffer(obj)


def test_subarray_typestr_becomes_dimensions() -> None:
    base = np.arange(12, dtype="<f4")
    obj = Interface("__array_interface__", dict(
        version=3, shape=(2,), typestr="(2,3)<f4", data=bytearray(base)))
    adapter = bufferext.as_buffer(obj)
    # before: shape (2,), format 'f' with itemsize 24
    assert adapter.shape == (2, 2, 3)
    assert adapter.strides == (24, 12, 4)
    assert adapter.format in ("f", "<f")
    assert np.from_dlpack(adapter).reshape(-1).tolist() == base.tolist()


def test_subarray_typestr_with_strides_keeps_them_outside() -> None:
    data = bytearray(np.arange(12, dtype="<i2"))
    obj = Interface("__array_interface__", dict(
        version=3, shape=(2,), typestr="(3,)<i2", data=data, strides=(12,)))
    adapter = bufferext.as_buffer(obj)
    assert adapter.shape == (2, 3) and adapter.strides == (12, 2)
    assert np.from_dlpack(adapter).tolist() == [[0, 1, 2], [6, 7, 8]]


@pytest.mark.parametrize("typestr", ["<f0", "|V0", "|O8", "<M8[s]", "<m8[s]"])
def test_typestrs_the_buffer_protocol_cannot_describe(typestr: str) -> None:
    obj = Interface("__array_interface__", dict(
        version=3, shape=(1,), typestr=typestr, data=bytearray(8)))
    with pytest.raises(BufferError, match="'typestr'"):
        bufferext.as_buffer(obj)


STRUCT_FORMATS = [order + code for order in ("", "@", "=", "<", ">", "!")
                  for code in "?bBhHiIlLqQefd"] + ["Zf", "<Zd", "=Zf"]


@pytest.mark.parametrize("fmt", STRUCT_FORMATS)
def test_a_buffer_format_is_read_by_struct_rules(fmt: str) -> None:
    """An exported format is struct syntax, where a byte-order prefix means
    standard sizes: '=l' is a 4-byte int, which numpy's spelling '=l' is
    not.  What the package derives from one (an adapter's CUDA Array
    Interface typestr, a DistArray's element type) has the format's own
    item size."""
    import struct

    from bufferext._bridges import format_to_typestr
    from bufferext._dtypes import resolve_format
    from bufferext.distarray._buffers import held_dtype

    size = struct.calcsize(fmt.replace("Z", "2"))
    fmt_out, itemsize, dtype, typestr = resolve_format(fmt)
    assert (itemsize, dtype.itemsize) == (size, size), fmt
    assert np.dtype(typestr).itemsize == size
    assert format_to_typestr(fmt) == typestr
    assert held_dtype(fmt, "it") == dtype
    order = fmt[0] if fmt[0] in "@=<>!" else ""
    if order in ("", "@", "=") or size == 1 or \
            (order == "<") == (sys.byteorder == "little"):
        assert dtype.isnative, fmt
    else:
        assert not dtype.isnative, fmt


def test_a_cycle_through_a_reexporting_adapter_is_collected() -> None:
    # the adapter's export of its source is a reference the collector must
    # see (a bytearray subclass holding its own read-only adapter)
    class Holder(bytearray):
        pass

    for readonly in (True, False):
        source = Holder(1 << 16)
        source.adapter = bufferext.as_buffer(source, readonly=readonly)
        assert source.adapter.protocol == "buffer"
        ref = weakref.ref(source)
        del source
        gc.collect()
        assert ref() is None, readonly


def test_the_pin_of_array_interface_data_cannot_be_released() -> None:
    # the BufferView that holds 'data' is reachable from the adapter
    # (gc.get_referents, as a debugger walks): its release() is refused
    # while the adapter lives, so 'data' cannot be resized under it
    data = bytearray(32)

    class Interface:
        __array_interface__ = {"version": 3, "shape": (4,),
                               "typestr": "<f8", "data": data}

    adapter = bufferext.as_buffer(Interface())
    [pin] = [o for o in gc.get_referents(adapter)
             if type(o).__name__ == "BufferView"]
    with pytest.raises(BufferError, match=r"BufferView has 1 export"):
        pin.release()
    with pytest.raises(BufferError):
        data.extend(b"x" * 64)
    assert adapter.ptr == pin.ptr
    del adapter, pin
    gc.collect()
    data.extend(b"x" * 64)          # free once the adapter is gone


def test_a_shape_past_the_address_space_names_its_dimension() -> None:
    # "dlpack: shape is too large" named neither the dimension nor its size
    crafted = Crafted(ndim=2, shape=(2**40, 2**40), code=2, bits=64)
    capsule = crafted.capsule()
    with pytest.raises(BufferError, match=re.escape(
            "dlpack: shape[1] = 1099511627776 makes more than PY_SSIZE_T_MAX "
            "bytes of 8-byte items")):
        bufferext._bufferext._adapter_from_dlpack(None, capsule, None)
    assert PyCapsule_GetName(capsule) == b"dltensor_versioned"  # given back
