"""The Arrow C Data and C Device interfaces (PyCapsule protocol), both ways.

In: ``as_buffer`` of real pyarrow arrays (and of stand-ins that speak only
one of the two methods).  Out: ``__arrow_c_array__`` /
``__arrow_c_device_array__`` of our exporters, imported by real pyarrow,
with the export released exactly once whoever lets go last, on any thread.
CUDA device arrays go through the stand-in driver (tests/cuda_standin).
"""

from __future__ import annotations

import ctypes
import gc
import os
import re
import struct
import sys
import threading
import weakref
from typing import Any, Optional, Tuple

import numpy as np
import pytest

import bufferext

pa = pytest.importorskip("pyarrow", reason="the Arrow tests need pyarrow")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "cuda_standin"))
import standin_harness as harness  # noqa: E402

# (pyarrow type, numpy dtype): every fixed-width primitive pyarrow has
PRIMITIVES = [
    (pa.int8(), "int8"), (pa.int16(), "int16"), (pa.int32(), "int32"),
    (pa.int64(), "int64"), (pa.uint8(), "uint8"), (pa.uint16(), "uint16"),
    (pa.uint32(), "uint32"), (pa.uint64(), "uint64"),
    (pa.float16(), "float16"), (pa.float32(), "float32"),
    (pa.float64(), "float64"),
]

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class ArrowArray(ctypes.Structure):
    pass


ArrowArray._fields_ = [
    ("length", ctypes.c_int64), ("null_count", ctypes.c_int64),
    ("offset", ctypes.c_int64), ("n_buffers", ctypes.c_int64),
    ("n_children", ctypes.c_int64), ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.c_void_p), ("dictionary", ctypes.c_void_p),
    ("release", ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowArray))),
    ("private_data", ctypes.c_void_p)]


class ArrowDeviceArray(ctypes.Structure):
    _fields_ = [("array", ArrowArray), ("device_id", ctypes.c_int64),
                ("device_type", ctypes.c_int32),
                ("sync_event", ctypes.c_void_p),
                ("reserved", ctypes.c_int64 * 3)]


def device_array(capsule: Any) -> ArrowDeviceArray:
    return ArrowDeviceArray.from_address(
        _get_pointer(capsule, b"arrow_device_array"))


def values_address(arr: Any) -> int:
    """Address of ``arr``'s first value (its offset applied)."""
    return arr.buffers()[1].address + arr.offset * arr.type.bit_width // 8


class OnlyCData:
    """Speaks only ``__arrow_c_array__`` (delegating to ``inner``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __arrow_c_array__(self, requested_schema: Any = None) -> Any:
        return self.inner.__arrow_c_array__(requested_schema)


class Replays:
    """Returns the same capsules every time: the second import must fail."""

    def __init__(self, capsules: Tuple[Any, Any]) -> None:
        self.capsules = capsules

    def __arrow_c_array__(self, requested_schema: Any = None) -> Any:
        return self.capsules


# ---- in: as_buffer of pyarrow arrays ------------------------------------------

@pytest.mark.parametrize("pa_type,dtype", PRIMITIVES,
                         ids=[str(t) for t, _ in PRIMITIVES])
def test_every_primitive_comes_in_zero_copy(pa_type: Any, dtype: str) -> None:
    arr = pa.array(np.arange(7).astype(dtype), type=pa_type)
    ad = bufferext.as_buffer(arr)
    assert ad.protocol == "arrow_device"        # pyarrow speaks the device API
    assert ad.ptr == values_address(arr)
    assert ad.shape == (7,) and ad.readonly and ad.device is None
    np.testing.assert_array_equal(np.asarray(ad), arr.to_numpy())
    assert np.asarray(ad).dtype == np.dtype(dtype)


@pytest.mark.parametrize("start,length", [(0, 10), (3, 4), (9, 1), (10, 0)])
def test_slices_keep_their_offset(start: int, length: int) -> None:
    arr = pa.array(np.arange(10, dtype=np.int32)).slice(start, length)
    ad = bufferext.as_buffer(arr)
    assert ad.shape == (length,)
    if length:
        assert ad.ptr == values_address(arr)
    assert np.asarray(ad).tolist() == list(range(start, start + length))


def test_c_data_only_object_comes_in_through_arrow_c_array() -> None:
    arr = pa.array([1.5, 2.5], pa.float64())
    ad = bufferext.as_buffer(OnlyCData(arr))
    assert ad.protocol == "arrow"
    assert ad.ptr == values_address(arr)
    assert np.asarray(ad).tolist() == [1.5, 2.5]


def test_nulls_are_refused_naming_the_count() -> None:
    arr = pa.array([1, None, 3, None, None], pa.int64())
    with pytest.raises(BufferError, match="the array has 3 nulls"):
        bufferext.as_buffer(arr)
    # a slice past the nulls has none: it comes in
    assert np.asarray(bufferext.as_buffer(arr.slice(2, 1))).tolist() == [3]


@pytest.mark.parametrize("arr,name", [
    (pa.array([True, False]), r"type 'b' \(boolean \(bit-packed\)\)"),
    (pa.array(["a", "b"]), r"type 'u' \(utf8 string\)"),
    (pa.array([[1], [2, 3]]), r"type '\+l' \(list\)"),
    (pa.StructArray.from_arrays([pa.array([1]), pa.array([2.0])], ["a", "b"]),
     r"type '\+s' \(struct\) has 2 children"),
    (pa.array([1, 2], pa.timestamp("us")), r"type 'tsu:' \(timestamp\).*"
                                           r"integer storage"),
    (pa.array([1, 2], pa.decimal128(5, 2)), r"type 'd:5,2' \(decimal\)"),
    (pa.array(["x", "y", "x"]).dictionary_encode(), "dictionary-encoded"),
], ids=["bool", "string", "list", "struct", "timestamp", "decimal",
        "dictionary"])
def test_other_types_are_refused_by_name(arr: Any, name: str) -> None:
    with pytest.raises(BufferError, match=name):
        bufferext.as_buffer(arr)


@pytest.mark.parametrize("arr", [
    pa.array([pa.MonthDayNano([1, 2, 3])], pa.month_day_nano_interval()),
], ids=["month_day_nano"])
def test_intervals_of_several_numbers_get_no_storage_hint(arr: Any) -> None:
    # there is no one integer to view them as (the hint said there was)
    with pytest.raises(BufferError, match=r"\(interval\) is not a fixed-width "
                       r"primitive number \([^)]*\)$"):
        bufferext.as_buffer(arr)


def test_non_native_byte_order_export_is_refused_as_such(c99: Any) -> None:
    # an int32 in big-endian order was told it has no Arrow type
    swapped = "<" if sys.byteorder == "big" else ">"
    foreign = bufferext.as_buffer(
        c99.Configurable(16, 16, 4, 1, swapped + "i", shape=(4,)),
        readonly=True)
    with pytest.raises(BufferError, match=re.escape(
            f"format '{swapped}i' is not in native byte order; Arrow's C "
            "Data Interface holds native-order values")):
        foreign.__arrow_c_array__()


def test_arrow_is_immutable_so_readonly_false_is_refused() -> None:
    arr = pa.array([1, 2], pa.int8())
    with pytest.raises(BufferError, match="immutable; readonly=False"):
        bufferext.as_buffer(arr, readonly=False)
    assert bufferext.as_buffer(arr, readonly=True).readonly


@pytest.mark.thread_unsafe(reason="it compares pyarrow's process-wide allocated bytes")
def test_import_holds_the_array_until_the_adapter_dies() -> None:
    gc.collect()
    base = pa.total_allocated_bytes()
    arr = pa.array(np.arange(1000, dtype=np.float64))
    ad = bufferext.as_buffer(arr)
    del arr
    gc.collect()
    assert pa.total_allocated_bytes() > base            # still held
    assert np.asarray(ad)[999] == 999.0
    del ad
    gc.collect()
    assert pa.total_allocated_bytes() == base           # released once


def test_a_capsule_imports_once() -> None:
    replays = Replays(pa.array([1, 2], pa.int16()).__arrow_c_array__())
    first = bufferext.as_buffer(replays)
    with pytest.raises(BufferError, match="released array .*imported once"):
        bufferext.as_buffer(replays)
    assert np.asarray(first).tolist() == [1, 2]


@pytest.mark.thread_unsafe(reason="it compares pyarrow's process-wide allocated bytes")
def test_refused_capsules_stay_their_producers() -> None:
    gc.collect()
    base = pa.total_allocated_bytes()
    arr = pa.array(np.arange(100, dtype=np.float64))
    arr = pa.array(np.where(np.arange(100) % 2, arr, None), pa.float64())
    with pytest.raises(BufferError, match="50 nulls"):
        bufferext.as_buffer(arr)
    del arr
    gc.collect()
    assert pa.total_allocated_bytes() == base


def test_wrong_capsules_are_refused() -> None:
    class Bad:
        def __arrow_c_array__(self, requested_schema: Any = None) -> Any:
            return pa.array([1]).__arrow_c_device_array__()

    with pytest.raises(BufferError, match="named 'arrow_schema' and "
                                          "'arrow_array'"):
        bufferext.as_buffer(Bad())

    class NotATuple:
        def __arrow_c_array__(self, requested_schema: Any = None) -> Any:
            return None

    with pytest.raises(BufferError, match=r"NotATuple.__arrow_c_array__\(\) "
                                          "returned None"):
        bufferext.as_buffer(NotATuple())


# ---- in: hand-made capsules (a foreign producer written with ctypes) ----------

class ArrowSchema(ctypes.Structure):
    pass


ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p), ("name", ctypes.c_char_p),
    ("metadata", ctypes.c_char_p), ("flags", ctypes.c_int64),
    ("n_children", ctypes.c_int64), ("children", ctypes.c_void_p),
    ("dictionary", ctypes.c_void_p),
    ("release", ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowSchema))),
    ("private_data", ctypes.c_void_p)]

_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype = ctypes.py_object
_new_capsule.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class HandMade:
    """A producer whose structs live in ctypes memory and whose release
    callbacks count their calls (the capsules have no destructor: the
    test holds the structs)."""

    def __init__(self, fmt: bytes, values: Any, **fields: Any) -> None:
        self.releases = 0
        self.values = values
        self.buffers = (ctypes.c_void_p * 2)(None, values.ctypes.data)
        self.schema = ArrowSchema(format=fmt, name=b"")
        self.schema_release = type(self.schema.release)(lambda s: None)
        self.schema.release = self.schema_release
        self.array = ArrowArray(length=len(values), n_buffers=2,
                                buffers=self.buffers)
        for name, value in fields.items():
            setattr(self.array, name, value)

        def release(array: Any) -> None:
            self.releases += 1
            array.contents.release = type(self.array.release)()
        self.callback = type(self.array.release)(release)
        self.array.release = self.callback

    def __arrow_c_array__(self, requested_schema: Any = None) -> Any:
        return (_new_capsule(ctypes.addressof(self.schema), b"arrow_schema",
                             None),
                _new_capsule(ctypes.addressof(self.array), b"arrow_array",
                             None))


def test_a_foreign_array_is_released_exactly_once() -> None:
    producer = HandMade(b"l", np.arange(5, dtype=np.int64), offset=1,
                        length=4)
    ad = bufferext.as_buffer(producer)
    assert producer.releases == 0
    assert not producer.array.release               # moved out: marked
    assert ad.ptr == producer.values.ctypes.data + 8
    assert np.asarray(ad).tolist() == [1, 2, 3, 4]
    del ad
    gc.collect()
    assert producer.releases == 1


@pytest.mark.parametrize("fields,message", [
    ({"null_count": 2}, "has 2 nulls"),
    ({"null_count": -1, "buffers": (ctypes.c_void_p * 2)(1, 1)},
     r"-1 nulls \(-1: not counted\) and a validity bitmap"),
    ({"n_buffers": 3}, "has 3 buffers and 0 children"),
    ({"length": -1}, "length = -1 and offset = 0 are out of range"),
    ({"offset": 2**62}, "out of range"),
    ({"buffers": (ctypes.c_void_p * 2)(None, None)},
     "values buffer is NULL for length = 5"),
    ({"null_count": -5}, r"null_count = -5 \(a count, or -1: not counted\)"),
    ({"buffers": None}, "the array's buffers pointer is NULL"),
    ({"dictionary": 8}, "has a dictionary although its schema has none"),
    ({"offset": 2**63 - 1, "length": 1}, "out of range"),
    ({"length": 2**62}, "out of range"),
    ({"buffers": (ctypes.c_void_p * 2)(None, 2**64 - 8)},
     "length = 5 and offset = 0 reach past the end of the address space "
     "from the values buffer 0xfffffffffffffff8"),
], ids=["nulls", "uncounted", "buffers", "length", "offset", "null-values",
        "negative-null-count", "null-buffers", "dictionary", "offset-overflow",
        "length-times-itemsize", "address-wrap"])
def test_malformed_arrays_are_refused_and_stay_the_producers(
        fields: Any, message: str) -> None:
    producer = HandMade(b"i", np.arange(5, dtype=np.int32), **fields)
    with pytest.raises(BufferError, match=message):
        bufferext.as_buffer(producer)
    assert producer.releases == 0 and producer.array.release


def metadata(*pairs: Tuple[bytes, bytes], count: Optional[int] = None) -> bytes:
    """The C Data Interface's metadata encoding (native int32 lengths)."""
    out = struct.pack("=i", len(pairs) if count is None else count)
    for key, value in pairs:
        out += struct.pack("=i", len(key)) + key + struct.pack("=i", len(value)) + value
    return out


def test_an_extension_type_is_refused_by_name_its_storage_comes_in() -> None:
    """An extension type's numbers are not what it means: arrow.bool8's
    [true, false, true] came in as int8 [1, 0, 2], a user's timestamp as
    plain int64."""
    bool8 = pa.ExtensionArray.from_storage(pa.bool8(), pa.array([1, 0, 2], pa.int8()))
    with pytest.raises(BufferError, match=re.escape(
            "arrow: type 'c' is the storage of the extension type 'arrow.bool8' "
            "(ARROW:extension:name)")):
        bufferext.as_buffer(bool8)
    assert np.asarray(bufferext.as_buffer(bool8.storage)).tolist() == [1, 0, 2]

    class Stamp(pa.ExtensionType):       # a user's, as pyarrow's docs show
        def __init__(self) -> None:
            super().__init__(pa.int64(), "my.timestamp")

        def __arrow_ext_serialize__(self) -> bytes:
            return b""

        @classmethod
        def __arrow_ext_deserialize__(cls, storage: Any, data: bytes) -> Any:
            return cls()

    stamps = pa.ExtensionArray.from_storage(Stamp(), pa.array([1, 2], pa.int64()))
    with pytest.raises(BufferError, match="extension type 'my.timestamp'"):
        bufferext.as_buffer(stamps)


@pytest.mark.parametrize("meta, message", [
    (metadata((b"owner", b"lab"), (b"ARROW:extension:name", b"x.y"),
              (b"ARROW:extension:metadata", b"")), "extension type 'x.y'"),
    (metadata((b"a", b"b"), count=-1), r"malformed \(a negative count or "
                                       r"length at pair 0\)"),
    (metadata((b"a", b"b")).replace(struct.pack("=i", 1) + b"a",
                                    struct.pack("=i", -4) + b"a"),
     "malformed .* at pair 0"),
])
def test_a_foreign_schemas_metadata_is_read(meta: bytes, message: str) -> None:
    producer = HandMade(b"l", np.arange(3, dtype=np.int64))
    producer.schema.metadata = meta
    with pytest.raises(BufferError, match=message):
        bufferext.as_buffer(producer)
    assert producer.releases == 0 and producer.array.release
    # metadata that names no extension changes nothing: the key is read
    # whole, so keys it begins or that begin it are plain metadata
    producer.schema.metadata = metadata(
        (b"owner", b"lab"), (b"", b""), (b"ARROW:extension:names", b"x.y"),
        (b"ARROW:extension:nam", b"x.y"))
    assert np.asarray(bufferext.as_buffer(producer)).tolist() == [0, 1, 2]


# ---- out: pyarrow imports our exports -------------------------------------------

def test_pa_array_of_a_cpubuffer() -> None:
    b = bufferext.CPUBuffer((4,), "int16")
    b.copy_from_host(np.array([1, -2, 3, -4], np.int16))
    arr = pa.array(b)
    assert arr.type == pa.int16() and arr.to_pylist() == [1, -2, 3, -4]
    assert values_address(arr) == b.ptr                 # zero-copy
    assert b.exports == 1
    del arr
    gc.collect()
    assert b.exports == 0


@pytest.mark.parametrize("pa_type,dtype", PRIMITIVES,
                         ids=[str(t) for t, _ in PRIMITIVES])
def test_every_primitive_goes_out(pa_type: Any, dtype: str) -> None:
    b = bufferext.CPUBuffer((5,), dtype)
    b.copy_from_host(np.arange(5).astype(dtype))
    arr = pa.Array._import_from_c_device_capsule(*b.__arrow_c_device_array__())
    assert arr.type == pa_type
    assert arr.to_numpy().tolist() == list(range(5))
    assert values_address(arr) == b.ptr
    del arr
    assert b.exports == 0


def test_device_fields_of_a_cpu_export() -> None:
    b = bufferext.CPUBuffer((3,), "float32")
    schema, capsule = b.__arrow_c_device_array__()
    d = device_array(capsule)
    assert (d.device_type, d.device_id, d.sync_event) == (1, -1, None)
    assert (d.array.length, d.array.null_count, d.array.offset,
            d.array.n_buffers, d.array.n_children) == (3, 0, 0, 2, 0)
    assert d.array.buffers[0] is None and d.array.buffers[1] == b.ptr
    assert list(d.reserved) == [0, 0, 0]
    assert pa.DataType._import_from_c_capsule(schema) == pa.float32()


def test_round_trip_through_as_buffer_keeps_the_address() -> None:
    arr = pa.array(np.arange(6, dtype=np.uint32)).slice(2)
    ad = bufferext.as_buffer(arr)
    back = pa.array(ad)
    assert values_address(back) == values_address(arr)
    assert back.equals(arr)
    del back
    assert ad.exports == 0


@pytest.mark.parametrize("order", ["pyarrow first", "buffer first"])
def test_release_order(order: str) -> None:
    b = bufferext.CPUBuffer((8,), "int64")
    arr = pa.array(b)
    if order == "pyarrow first":
        del arr
        assert b.exports == 0
        b.close()
    else:
        with pytest.raises(BufferError):
            b.close()                               # the export pins it
        del b
        gc.collect()
        assert arr.to_pylist() == [0] * 8           # memory still alive
        del arr


def test_dropped_capsules_release_the_export() -> None:
    b = bufferext.CPUBuffer((2,), "float64")
    capsules = b.__arrow_c_array__()
    assert b.exports == 1
    del capsules
    assert b.exports == 0
    schema, array = b.__arrow_c_device_array__()
    del array                                   # schema alone holds nothing
    assert b.exports == 0


def test_pyarrow_imports_a_capsule_once() -> None:
    b = bufferext.CPUBuffer((2,), "int32")
    schema, array = b.__arrow_c_array__()
    arr = pa.Array._import_from_c_capsule(schema, array)
    with pytest.raises(Exception, match="released"):
        pa.Array._import_from_c_capsule(schema, array)
    del arr, schema, array
    assert b.exports == 0


def test_release_from_another_thread_after_a_move() -> None:
    b = bufferext.CPUBuffer((4,), "uint8")
    _, capsule = b.__arrow_c_device_array__()
    source = device_array(capsule)
    moved = ArrowDeviceArray()
    ctypes.memmove(ctypes.addressof(moved), ctypes.addressof(source),
                   ctypes.sizeof(ArrowDeviceArray))
    source.array.release = type(source.array.release)()    # NULL: moved
    del capsule                                 # its destructor must not release
    assert b.exports == 1
    # ctypes calls the callback without the GIL, from a thread Python made
    # for it: the callback takes the GIL itself
    worker = threading.Thread(
        target=lambda: moved.array.release(ctypes.pointer(moved.array)))
    worker.start()
    worker.join()
    assert not moved.array.release              # marked released
    assert b.exports == 0


def test_requested_schema_and_keywords() -> None:
    b = bufferext.CPUBuffer((2,), "int16")
    same = pa.int16().__arrow_c_schema__()
    assert pa.array(b, type=pa.int16()).to_pylist() == [0, 0]
    b.__arrow_c_array__(requested_schema=same)
    with pytest.raises(BufferError, match="requested_schema has format 'i' "
                                          "but the buffer holds 's'"):
        b.__arrow_c_array__(pa.int32().__arrow_c_schema__())
    with pytest.raises(TypeError, match="'arrow_schema' capsule"):
        b.__arrow_c_array__(requested_schema=3)
    b.__arrow_c_device_array__(None, future_keyword=None)
    with pytest.raises(NotImplementedError, match="'future_keyword' = 1"):
        b.__arrow_c_device_array__(future_keyword=1)
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        b.__arrow_c_array__(future_keyword=None)
    with pytest.raises(TypeError, match="multiple values for argument "
                                        "'requested_schema'"):
        b.__arrow_c_device_array__(None, requested_schema=None)
    gc.collect()
    assert b.exports == 0


@pytest.mark.parametrize("prefix", ["<", ">", "!", "=", "@"])
def test_one_byte_formats_in_any_byte_order_export_as_unprefixed(
        c99: Any, prefix: str) -> None:
    """A byte has no order: a foreign export of '>b' or '!B' is Arrow's
    int8 or uint8 (the C reader took them for byte-swapped and refused
    them), and a one-byte '[name]' is refused as the unprefixed one is."""
    for code, arrow_type in (("b", pa.int8()), ("B", pa.uint8())):
        foreign = c99.Configurable(4, 4, 1, 1, prefix + code, shape=(4,))
        assert pa.array(bufferext.as_buffer(foreign, readonly=True)).type == arrow_type
    for fmt in ("[float8_e4m3fn]", prefix + "[float8_e4m3fn]"):
        foreign = bufferext.as_buffer(c99.Configurable(4, 4, 1, 1, fmt, shape=(4,)),
                                      readonly=True)
        with pytest.raises(BufferError, match=re.escape(
                f"format {fmt!r} has no Arrow fixed-width primitive type")):
            foreign.__arrow_c_array__()


@pytest.mark.parametrize("make,message", [
    (lambda: bufferext.CPUBuffer((2, 2), "int8"), "ndim = 2"),
    (lambda: bufferext.CPUBuffer((2,), "bool"), "format '\\?' has no Arrow"),
    (lambda: bufferext.CPUBuffer((2,), "complex64"), "has no Arrow"),
    (lambda: bufferext.as_buffer(np.arange(6, dtype=np.int16)[::2],
                                 readonly=True),
     "stride is 4 bytes for items of 2"),
], ids=["2-D", "bool", "complex", "strided"])
def test_unexportable_buffers_are_refused(make: Any, message: str) -> None:
    b = make()
    with pytest.raises(BufferError, match=message):
        b.__arrow_c_array__()
    with pytest.raises(BufferError, match=message):
        b.__arrow_c_device_array__()
    gc.collect()
    exports = getattr(b, "exports", None)
    assert exports in (0, None)


def test_buffer_view_exports_while_acquired() -> None:
    b = bufferext.CPUBuffer((3,), "float32")
    view = bufferext.get_buffer(b)
    arr = pa.array(view)
    assert arr.type == pa.float32() and values_address(arr) == b.ptr
    with pytest.raises(BufferError, match="BufferView has 1 export"):
        view.release()                      # the array pins the view
    del arr
    view.release()
    with pytest.raises(ValueError, match="released BufferView"):
        view.__arrow_c_device_array__()
    assert b.exports == 0


def test_closed_buffer_is_refused_as_for_dlpack() -> None:
    b = bufferext.CPUBuffer((2,), "int8")
    b.close()
    with pytest.raises(ValueError, match="closed"):
        b.__arrow_c_array__()


# ---- CUDA, through the stand-in driver -----------------------------------------

@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> str:
    if not sys.platform.startswith("linux"):
        pytest.skip("the stand-in driver is built for Linux")
    return harness.build(str(tmp_path_factory.mktemp("standin_cuda_arrow")))


# Child code (a function body, see standin_harness): the ArrowDeviceArray
# fields read at their offsets (64-bit), and a stand-in that speaks only the
# device method.
CUDA_PRELUDE = """
get = ctypes.pythonapi.PyCapsule_GetPointer
get.restype = ctypes.c_void_p
get.argtypes = [ctypes.py_object, ctypes.c_char_p]
def fields(capsule):
    p = get(capsule, b"arrow_device_array")
    buffers = ctypes.c_void_p.from_address(p + 40).value
    return {"values": ctypes.c_void_p.from_address(buffers + 8).value,
            "device_id": ctypes.c_int64.from_address(p + 80).value,
            "device_type": ctypes.c_int32.from_address(p + 88).value,
            "sync_event": ctypes.c_void_p.from_address(p + 96).value}
class OnlyDevice:
    def __init__(self, inner):
        self.inner = inner
    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        return self.inner.__arrow_c_device_array__(requested_schema, **kwargs)
"""


def test_cuda_export_carries_the_device_and_event(driver: str) -> None:
    harness.check(driver, CUDA_PRELUDE + """
b = CUDABuffer(4, "float32")
assert not hasattr(b, "__arrow_c_array__")    # device memory only
b.fill(1.0)                                    # pending work: an event
event = bufferext.get_buffer(b).device_info.event
assert event
schema, capsule = b.__arrow_c_device_array__()
f = fields(capsule)
assert (f["device_type"], f["device_id"]) == (2, 0), f
assert ctypes.c_void_p.from_address(f["sync_event"]).value == event
assert f["values"] == b.ptr
del schema, capsule
b.synchronize()
_, capsule = b.__arrow_c_device_array__()
assert fields(capsule)["sync_event"] is None   # ready: no event
del capsule
assert b.exports == 0
b.close()
""")


def test_cuda_import_keeps_the_producers_event(driver: str) -> None:
    harness.check(driver, CUDA_PRELUDE + """
b = CUDABuffer(6, "int32")
b.fill(7)
event = bufferext.get_buffer(b).device_info.event
ad = bufferext.as_buffer(OnlyDevice(b))
assert ad.protocol == "arrow_device" and ad.device == "bufferext.cuda"
assert ad.ptr == b.ptr and ad.shape == (6,) and ad.format == "i"
with bufferext.get_buffer(ad) as view:
    assert view.device_info.event == event     # the producer's, not ours
    assert view.device_info.device == 0
assert b.exports == 1                          # the adapter holds it
with raises(BufferError, match="__arrow_c_array__ is for CPU"):
    ad.__arrow_c_array__()
del ad
gc.collect()
assert b.exports == 0
b.close()
""")


# ---- hostile producers and consumers (review) ------------------------------

def test_a_schema_with_a_null_format_is_refused_by_name() -> None:
    producer = HandMade(b"i", np.arange(5, dtype=np.int32))
    producer.schema.format = None
    with pytest.raises(BufferError, match="the schema's format is NULL"):
        bufferext.as_buffer(producer)
    assert producer.releases == 0 and producer.array.release


def test_a_long_foreign_format_is_cut_in_the_message() -> None:
    producer = HandMade(b"x" * 10000, np.arange(5, dtype=np.int32))
    with pytest.raises(BufferError) as info:
        bufferext.as_buffer(producer)
    assert "type '" + "x" * 64 + "' (unknown)" in str(info.value)


@pytest.mark.parametrize("device_type", [0, 4, 99, -1, 2**31 - 1])
def test_unknown_device_types_are_refused_and_stay_the_producers(
        device_type: int) -> None:
    producer = HandMade(b"i", np.arange(5, dtype=np.int32))
    device = ArrowDeviceArray(array=producer.array, device_id=0,
                              device_type=device_type)

    class Device:
        def __arrow_c_device_array__(self, requested_schema: Any = None,
                                     **kwargs: Any) -> Any:
            return (_new_capsule(ctypes.addressof(producer.schema),
                                 b"arrow_schema", None),
                    _new_capsule(ctypes.addressof(device),
                                 b"arrow_device_array", None))
    with pytest.raises(BufferError, match=f"arrow: device type {device_type} "
                                          "is not supported"):
        bufferext.as_buffer(Device())
    assert device.array.release and producer.releases == 0


def _requested(fmt: bytes) -> Tuple[Any, Any]:
    schema = ArrowSchema(format=fmt, name=b"")
    schema.release = type(schema.release)(lambda s: None)
    keep = (schema, schema.release)
    return keep, _new_capsule(ctypes.addressof(schema), b"arrow_schema", None)


def test_requested_format_is_read_once_and_bounded() -> None:
    keep, capsule = _requested(b"i" * 40)
    with pytest.raises(BufferError, match=r"requested_schema has format "
                                          r"'i{16}\.\.\.', which names no"):
        bufferext.CPUBuffer((2,), "int32").__arrow_c_array__(capsule)
    keep, capsule = _requested(b"")
    with pytest.raises(BufferError, match="format '', which names no"):
        bufferext.CPUBuffer((2,), "int32").__arrow_c_array__(capsule)
    keep, capsule = _requested(b"i")
    b = bufferext.CPUBuffer((2,), "int32")
    schema, array = b.__arrow_c_array__(capsule)
    assert b.exports == 1
    del schema, array
    assert b.exports == 0


def test_a_stranger_copying_the_method_gets_cpythons_owner_check() -> None:
    class Evil:
        __arrow_c_array__ = bufferext.CPUBuffer.__dict__["__arrow_c_array__"]
        __arrow_c_device_array__ = bufferext.CPUBuffer.__dict__[
            "__arrow_c_device_array__"]
    for name in ("__arrow_c_array__", "__arrow_c_device_array__"):
        with pytest.raises(TypeError, match=f"descriptor '{name}' for "
                                            "'bufferext.CPUBuffer' objects "
                                            "doesn't apply to a 'Evil'"):
            getattr(Evil(), name)()


def test_exported_buffer_refuses_close_and_resize_until_released() -> None:
    b = bufferext.CPUBuffer((4,), "float32")
    schema, array = b.__arrow_c_device_array__()
    with pytest.raises(BufferError, match="cannot close while 1 export.*"
                                          "DLPack capsules and Arrow arrays"):
        b.close()
    with pytest.raises(BufferError, match="cannot resize while 1 export"):
        b.resize((8,))
    ref = weakref.ref(b)
    del b                           # the capsules outlive the buffer's name
    gc.collect()
    assert ref() is not None        # the export holds it
    del schema, array
    gc.collect()
    assert ref() is None


def test_many_round_trips_leak_nothing() -> None:
    b = bufferext.CPUBuffer((1000,), "int64")
    before = sys.getrefcount(b)
    for _ in range(3000):
        ad = bufferext.as_buffer(OnlyCData(b))
        assert ad.ptr == b.ptr
        del ad
        producer = HandMade(b"i", np.arange(5, dtype=np.int32), null_count=-5)
        with pytest.raises(BufferError):
            bufferext.as_buffer(producer)
    gc.collect()
    assert b.exports == 0 and sys.getrefcount(b) == before


def test_a_cuda_device_array_without_a_driver_is_a_clear_error(
        tmp_path: Any) -> None:
    from _helpers import run_child
    missing = str(tmp_path / "no_libcuda.so")
    out = run_child("""
        import ctypes, numpy as np, bufferext
        from test_arrow import ArrowDeviceArray, HandMade, _new_capsule
        producer = HandMade(b"i", np.arange(5, dtype=np.int32))
        device = ArrowDeviceArray(array=producer.array, device_id=0,
                                  device_type=2)
        class Device:
            def __arrow_c_device_array__(self, requested_schema=None, **kw):
                return (_new_capsule(ctypes.addressof(producer.schema),
                                     b"arrow_schema", None),
                        _new_capsule(ctypes.addressof(device),
                                     b"arrow_device_array", None))
        try:
            bufferext.as_buffer(Device())
        except bufferext.DeviceUnavailableError as exc:
            print("refused:", exc)
        assert device.array.release and producer.releases == 0
    """, env={"BUFFEREXT_CUDA_DRIVER": missing})
    assert f"refused: CUDA driver not found: looked for {missing}" in out


# Child code: `device`, an Arrow device array of CUDA host memory (device
# type 3) over a CUDABuffer `b` of 7s written late (the stand-in's LATE
# mode), whose sync_event is the CUDABuffer's pending event; `producer`
# counts its releases.  Writes stay pending until waited for.
LATE = {"STANDIN_CUDA_LATE": "1", "STANDIN_CUDA_HOST_VISIBLE": "1"}
CUDA_HOST_ARRAY = """
import sys
sys.path.insert(0, %r)
from test_arrow import ArrowDeviceArray, HandMade, _new_capsule
b = CUDABuffer(4, "int32")
b.fill(7)                                      # pending: lands late
event = ctypes.c_void_p(bufferext.get_buffer(b).device_info.event)
assert event.value
values = np.frombuffer(ctypes.string_at(b.ptr, 16), np.int32)
producer = HandMade(b"i", values)
producer.buffers[1] = b.ptr
device = ArrowDeviceArray(array=producer.array, device_id=0, device_type=3,
                          sync_event=ctypes.addressof(event))
def capsules():
    return (_new_capsule(ctypes.addressof(producer.schema), b"arrow_schema",
                         None),
            _new_capsule(ctypes.addressof(device), b"arrow_device_array",
                         None))
""" % os.path.dirname(os.path.abspath(__file__))


def test_cuda_host_memory_waits_for_the_sync_event(driver: str) -> None:
    # CUDA host memory is read by the CPU at once, so the import waits on
    # the producer's sync_event (it was ignored: the old bytes were read)
    harness.check(driver, CUDA_HOST_ARRAY + """
class Host:
    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        return capsules()
ad = bufferext.as_buffer(Host())
assert ad.device is None and ad.ptr == b.ptr
assert np.asarray(ad).tolist() == [7, 7, 7, 7]
del ad
assert producer.releases == 1
b.close()
""", env=LATE)


def test_two_threads_importing_one_array_take_it_once(driver: str) -> None:
    # The import waits for a CUDA host array's sync_event without the GIL
    # (the stand-in holds it inside cuEventSynchronize), having moved the
    # array out of its capsule first: a second import of the same capsules
    # meanwhile is refused at once, never reaching the wait (it used to read
    # the capsules too and wait beside the first, which left both a window
    # to take the array without the GIL).  The array is released once.
    harness.check(driver, CUDA_HOST_ARRAY + """
import threading
once = capsules()
class Replays:
    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        return once
got, refused = [], []
def run():
    try:
        got.append(bufferext.as_buffer(Replays()))
    except BufferError as exc:
        refused.append(str(exc))
    finally:
        sd.standin_let_go()         # one that fails or is refused before
                                    # the wait must not leave main waiting
sd.standin_hold(b"cuEventSynchronize")
first = threading.Thread(target=run)
second = threading.Thread(target=run)
first.start()
try:
    assert sd.standin_wait_held(1) == 1, (got, refused)
    assert got == [] and refused == []  # the first holds the array, waiting
    second.start()
    # the second is refused without waiting (its let-go ends this wait and
    # the first's); had it read the capsules, it would be held here too
    assert sd.standin_wait_held(2) == 1, (got, refused)
finally:
    sd.standin_let_go()
    first.join()
    if second.ident is not None:
        second.join()
assert len(got) == 1 and len(refused) == 1, (got, refused)
assert "imported once" in refused[0], refused
assert np.asarray(got[0]).tolist() == [7, 7, 7, 7]
got.clear()
assert producer.releases == 1
b.close()
""", env=LATE)


def test_distarray_takes_an_arrow_array_through_the_protocol() -> None:
    """from_global and scatter read an Arrow array through as_buffer (no
    numpy conversion of the caller's), zero-copy where it is viewed."""
    from bufferext.distarray import DistArray
    arr = pa.array(np.arange(10, dtype=np.float32))
    d = DistArray.from_global(arr, dist="b", grid_shape=(2,), rank=1)
    assert d.dtype == np.float32 and d.local.tolist() == [5, 6, 7, 8, 9]
    assert DistArray.scatter(arr, dist="b").gather().tolist() == list(range(10))
    with pytest.raises(BufferError, match="has 1 nulls"):
        DistArray.from_global(pa.array([1.0, None]), dist="b")


def test_an_adapter_waiting_for_its_event_is_out_of_the_collectors_sight(
        driver: str) -> None:
    # The import waits for a CUDA host array's sync_event without the GIL,
    # its adapter made but not filled in: another thread walking the
    # collector's objects (a profiler, a debugger: gc.get_objects) met it,
    # and its protocol, format and repr read NULL (a crash)
    harness.check(driver, CUDA_HOST_ARRAY + """
class Host:
    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        return capsules()
made = []
with stopped_in("cuEventSynchronize",
                lambda: made.append(bufferext.as_buffer(Host()))) as outcome:
    assert [o for o in gc.get_objects()
            if type(o) is bufferext.BufferAdapter] == []
assert outcome == ["done"], outcome
ad = made.pop()
assert ad in gc.get_objects()                  # tracked once made
assert np.asarray(ad).tolist() == [7, 7, 7, 7]
del ad
b.close()
""", env=LATE)


@pytest.mark.parametrize("device_type", [3, 13], ids=["host", "managed"])
def test_device_memory_called_cuda_host_memory_is_refused(
        driver: str, device_type: int) -> None:
    # CUDA host and managed memory are what the CPU reads: device memory a
    # producer calls so would reach numpy (the stand-in's device range is
    # unreadable: a crash); the driver says what the pointer is
    harness.check(driver, """
import sys
sys.path.insert(0, %r)
from test_arrow import ArrowDeviceArray, HandMade, _new_capsule
b = CUDABuffer(4, "int32")
b.fill(7)
event = ctypes.c_void_p(bufferext.get_buffer(b).device_info.event)
producer = HandMade(b"i", np.zeros(4, np.int32))
producer.buffers[1] = b.ptr                    # device memory, called
device = ArrowDeviceArray(array=producer.array, device_id=0,  # CPU-readable
                          device_type=%d, sync_event=ctypes.addressof(event))
def capsules():
    return (_new_capsule(ctypes.addressof(producer.schema), b"arrow_schema",
                         None),
            _new_capsule(ctypes.addressof(device), b"arrow_device_array",
                         None))
class Lies:
    def __arrow_c_device_array__(self, requested_schema=None, **kwargs):
        return capsules()
with raises(BufferError, match=r"^arrow: device type %d \\(CUDA %s\\) names "
            r"memory the CPU reads, but 0x[0-9a-f]+ is CUDA device memory "
            r"\\(cuPointerGetAttribute\\)$"):
    bufferext.as_buffer(Lies())
assert producer.releases == 0                  # still the producer's
b.synchronize()
b.close()
""" % (os.path.dirname(os.path.abspath(__file__)), device_type, device_type,
       "host" if device_type == 3 else "managed"))


def test_a_released_requested_schema_is_named_as_such() -> None:
    schema = HandMade(b"s", np.zeros(2, np.int16))
    capsule = _new_capsule(ctypes.addressof(schema.schema), b"arrow_schema",
                           None)
    schema.schema.release = type(schema.schema.release)()     # NULL
    with pytest.raises(BufferError, match=re.escape(
            "__arrow_c_array__: requested_schema holds a released schema "
            "(release = NULL)")):
        bufferext.CPUBuffer((2,), "int16").__arrow_c_array__(capsule)
