"""The bridges' refusals, word for word: each names the protocol, the key
and the value it got and says what it expected (docs/bridges.rst), and the
layout rules behind them hold at their edges.  Written against the
survivors of a mutation run (mutmut) that changed a message, a bound or a
key and was not noticed."""

from __future__ import annotations

import mmap
from typing import Any, Dict

import numpy as np
import pytest

import bufferext

AI = "__array_interface__"
CAI = "__cuda_array_interface__"
VAI = "__ve_array_interface__"


class Speaker:
    """An object that speaks one interface."""

    def __init__(self, attr: str, d: Any) -> None:
        setattr(self, attr, d)


def ai(**d: Any) -> Dict[str, Any]:
    return {"version": 3, "shape": (2,), "typestr": "<f8",
            "data": bytearray(16), **d}


def cai(**d: Any) -> Dict[str, Any]:
    return {"version": 3, "shape": (2,), "typestr": "<f8",
            "data": (4096, False), **d}


ROWS = [
    (AI, ai(data=(1, "x")), "__array_interface__: 'data' is (1, 'x'); "
     "expected a tuple (pointer: int >= 0, readonly: bool)"),
    (AI, ai(data=(-1, False)), "__array_interface__: 'data' is (-1, False); "
     "expected a tuple (pointer: int >= 0, readonly: bool)"),
    (CAI, cai(data=(2**64, False)), "__cuda_array_interface__: 'data' is "
     "(18446744073709551616, False); expected a tuple (pointer: int >= 0, "
     "readonly: bool)"),
    (AI, ai(data="abc"), "__array_interface__: 'data' is 'abc'; expected a "
     "tuple (pointer, readonly) or a buffer object"),
    (AI, ai(typestr=8), "__array_interface__: 'typestr' is 8; expected a str "
     "such as '<f8'"),
    (AI, ai(typestr="zz"), "__array_interface__: 'typestr' is 'zz'; expected "
     "a NumPy type string such as '<f8'"),
    # NLCPy's bool is 4 bytes: named as a wide bool, not as malformed
    (VAI, cai(version=1, typestr="|b4"), "__ve_array_interface__: 'typestr' "
     "is '|b4'; expected a bool of 1 byte ('|b1'): a wider bool, as NLCPy's "
     "4-byte one, has no buffer-protocol format (convert it to '|b1' or to "
     "an int type first)"),
    (AI, ai(typestr="|O"), "__array_interface__: 'typestr' is '|O'; "
     "expected a fixed-size type without Python objects"),
    (AI, ai(typestr="<M8[s]"), "__array_interface__: 'typestr' is '<M8[s]'; "
     "expected a type the buffer protocol can describe (not "
     "datetime/timedelta)"),
    (AI, ai(shape=(1,) * 64, typestr="(2,)<f4"), "__array_interface__: "
     "'typestr' is '(2,)<f4'; expected a sub-array that keeps the array "
     "within 64 dimensions"),
    (AI, ai(shape=[2]), "__array_interface__: 'shape' is [2]; expected a "
     "tuple of at most 64 non-negative ints"),
    (AI, ai(strides=(8, 8)), "__array_interface__: 'strides' is (8, 8); "
     "expected None or a tuple of 1 ints"),
    (AI, ai(shape=(0, 2**40, 2**40), data=(4096, False)),
     "__array_interface__: 'shape' is (0, 1099511627776, 1099511627776); "
     "expected C-contiguous strides that fit a Py_ssize_t"),
    (AI, ai(version=2), "__array_interface__: 'version' is 2; expected 3"),
    (CAI, cai(version=4), "__cuda_array_interface__: 'version' is 4; "
     "expected an int from 0 to 3"),
    (AI, ai(mask=np.zeros(2, bool)), "__array_interface__: 'mask' is not "
     "supported (got 'ndarray')"),
    (AI, {"version": 3, "shape": (2,), "data": bytearray(16)},
     "__array_interface__: required key 'typestr' is missing"),
    (AI, {"version": 3, "typestr": "<f8", "data": bytearray(16)},
     "__array_interface__: required key 'shape' is missing"),
    (CAI, {"version": 3, "shape": (2,), "typestr": "<f8"},
     "__cuda_array_interface__: required key 'data' is missing"),
    (AI, ai(offset=-1), "__array_interface__: 'offset' is -1; expected an "
     "int >= 0"),
    (AI, ai(data=(2**64 - 8, False), offset=16), "__array_interface__: "
     "'offset' is 16; expected an offset inside the address space"),
    (CAI, cai(stream=0), "__cuda_array_interface__: 'stream' is 0; "
     "expected None or a positive int (0 is disallowed by CAI v3)"),
    (VAI, cai(version=1, veo_ctxt=-1), "__ve_array_interface__: 'veo_ctxt' "
     "is -1; expected None or an int >= 0"),
    # the extent of the layout against the 'data' buffer
    (AI, ai(data=bytearray(8)), "__array_interface__: shape (2,), strides "
     "(8,) and offset 0 reach bytes [0, 16) of 'data', a buffer of 8 bytes"),
    (AI, ai(shape=(1,), data=bytearray(4)), "__array_interface__: shape "
     "(1,), strides (8,) and offset 0 reach bytes [0, 8) of 'data', a "
     "buffer of 4 bytes"),
    (AI, ai(shape=(3,), typestr="|u1", strides=(1,), data=bytearray(2)),
     "__array_interface__: shape (3,), strides (1,) and offset 0 reach "
     "bytes [0, 3) of 'data', a buffer of 2 bytes"),
    (AI, ai(shape=(3,), strides=(-8,), offset=8, data=bytearray(24)),
     "__array_interface__: shape (3,), strides (-8,) and offset 8 reach "
     "bytes [-8, 16) of 'data', a buffer of 24 bytes"),
    # the items must lie inside the address space
    (AI, ai(data=(2**64 - 12, False), shape=(2,)), "array_interface: the "
     "items reach bytes 0 to 16 from the data pointer 0xfffffffffffffff4, "
     "outside the address space"),
    (AI, ai(data=(8, False), strides=(-16,)), "array_interface: the items "
     "reach bytes -16 to 8 from the data pointer 0x8, outside the address "
     "space"),
    # a void typestr's fields come from 'descr': the refusal names it
    (AI, ai(typestr="|V8", descr=[("t", "<M8[s]")]), "__array_interface__: "
     "'descr' is [('t', '<M8[s]')]; expected a type the buffer protocol can "
     "describe (not datetime/timedelta)"),
]


@pytest.mark.parametrize("attr, d, message", ROWS,
                         ids=[m.split(";")[0][:60] for _, _, m in ROWS])
def test_refusal_says_protocol_key_value_and_expectation(
        attr: str, d: Dict[str, Any], message: str) -> None:
    with pytest.raises(BufferError) as info:
        bufferext.as_buffer(Speaker(attr, d), readonly=True)
    assert str(info.value) == message


@pytest.mark.parametrize("ptr, strides", [(2**64 - 16, None), (16, (-16,))])
def test_items_up_to_the_ends_of_the_address_space_are_accepted(
        ptr: int, strides: Any) -> None:
    adapter = bufferext.as_buffer(
        Speaker(AI, ai(data=(ptr, False), strides=strides)), readonly=True)
    assert adapter.ptr == ptr and adapter.nbytes == 16


def test_not_a_dict_is_a_type_error() -> None:
    with pytest.raises(TypeError) as info:
        bufferext.as_buffer(Speaker(AI, [1]))
    assert str(info.value) == "__array_interface__ must be a dict, not 'list'"


class Lying(np.ndarray):  # type: ignore[type-arg]
    """An array whose `dtype` says float64 whatever it holds."""

    @property
    def dtype(self) -> Any:  # type: ignore[override]
        return np.dtype("f8")


@pytest.mark.parametrize("dtype, expected", [
    (object, "a fixed-size type without Python objects"),
    ([("a", "f8"), ("b", "O")], "a fixed-size type without Python objects"),
    ("M8[s]", "a type the buffer protocol can describe (not "
     "datetime/timedelta)"),
    ("m8[ms]", "a type the buffer protocol can describe (not "
     "datetime/timedelta)"),
    pytest.param(
        getattr(np.dtypes, "StringDType", lambda: None)(),
        "a fixed-size type without Python objects",
        marks=pytest.mark.skipif(not hasattr(np.dtypes, "StringDType"),
                                 reason="numpy 2's StringDType")),
])
@pytest.mark.parametrize("cls", [np.ndarray, Lying])
@pytest.mark.parametrize("readonly", [None, True])
def test_numpy_items_that_are_no_memory_are_refused_naming_the_dtype(
        dtype: Any, expected: str, cls: type, readonly: Any) -> None:
    """As the interface dicts' typestr: the pass-through and, for a
    subclass, the buffer protocol's row (numpy's own dtype, whatever the
    subclass says) refuse them instead of handing out their bytes."""
    a = np.zeros(2, dtype).view(cls)
    with pytest.raises(BufferError) as info:
        bufferext.as_buffer(a, readonly=readonly)
    name = "numpy.ndarray" if cls is np.ndarray else "Lying"
    assert str(info.value) == (f"as_buffer: {name} of dtype {np.dtype(dtype)}; "
                               f"expected {expected}")


def test_a_dict_subclass_is_read_as_numpy_reads_it() -> None:
    """Its contents, once: none of its own methods runs (one that empties
    the dict while a key is read cannot turn into a bare KeyError)."""
    memory = np.arange(2.0)

    class Emptying(dict):  # type: ignore[type-arg]
        def __getitem__(self, key: str) -> Any:
            self.clear()
            return dict.__getitem__(self, key)

        def get(self, key: str, default: Any = None) -> Any:
            raise AssertionError("get ran")

    d = Emptying(ai(data=(memory.ctypes.data, False)))
    adapter = bufferext.as_buffer(Speaker(AI, d))
    assert np.array_equal(np.asarray(adapter), memory) and len(d) == 4


@pytest.mark.parametrize("readonly, d", [
    (False, {}),                # the policy refuses (the mmap is read-only)
    (True, {"shape": (3,)}),    # the extent refuses
])
def test_a_refusal_ends_the_export_of_data(readonly: bool,
                                           d: Dict[str, Any]) -> None:
    """'data', a buffer object, is exported while it is read; a refusal
    ends that export at once, not when its traceback is freed."""
    memory = mmap.mmap(-1, 16, prot=mmap.PROT_READ)
    with pytest.raises(BufferError) as info:
        bufferext.as_buffer(Speaker(AI, ai(data=memory, **d)), readonly=readonly)
    memory.close()                      # BufferError while an export lives
    assert info.value is not None


def test_read_only_memory_is_not_made_writable() -> None:
    memory = np.zeros(2)
    d = ai(data=(memory.ctypes.data, True))
    with pytest.raises(BufferError) as info:
        bufferext.as_buffer(Speaker(AI, d), readonly=False)
    assert str(info.value) == ("__array_interface__: the memory is read-only "
                               "but readonly=False was requested")
    assert bufferext.as_buffer(Speaker(AI, d)).readonly


def test_readonly_request_makes_writable_memory_read_only() -> None:
    memory = np.zeros(2)
    d = ai(data=(memory.ctypes.data, False))
    assert bufferext.as_buffer(Speaker(AI, d), readonly=True).readonly
    assert not bufferext.as_buffer(Speaker(AI, d), readonly=False).readonly
    assert not bufferext.as_buffer(Speaker(AI, d)).readonly


def test_c_strides_skip_size_one_and_zero_dimensions() -> None:
    memory = np.zeros(3)
    d = ai(shape=(3, 1), data=(memory.ctypes.data, False))
    assert bufferext.as_buffer(Speaker(AI, d)).strides == (8, 8)
    d = ai(shape=(1, 3, 0), data=(memory.ctypes.data, False))
    assert bufferext.as_buffer(Speaker(AI, d)).strides == (24, 8, 8)


def test_structured_type_keeps_numpys_format() -> None:
    d = ai(typestr="i4,f8", data=bytearray(32))
    want = np.empty((0,), np.dtype("i4,f8")).data.format
    assert bufferext.as_buffer(Speaker(AI, d)).format == want


def test_extent_inside_the_buffer_is_accepted() -> None:
    # the rows above, one byte short; these fit exactly
    for d in (ai(shape=(3,), typestr="|u1", strides=(1,),
                 data=bytearray(3)),
              ai(shape=(3,), strides=(-8,), offset=16, data=bytearray(24)),
              ai(shape=(3,), strides=(0,), data=bytearray(8))):
        assert bufferext.as_buffer(Speaker(AI, d), readonly=True).shape == (3,)


def vai(**d: Any) -> Dict[str, Any]:
    return {"version": 1, "shape": (2,), "typestr": "<f8",
            "data": (4096, False), **d}


@pytest.mark.parametrize("attr, d", [(CAI, cai(data=(4096, True))),
                                     (VAI, vai(data=(4096, True)))])
def test_device_interfaces_keep_read_only_memory_read_only(
        attr: str, d: Dict[str, Any]) -> None:
    # refused before any device library is needed
    with pytest.raises(BufferError) as info:
        bufferext.as_buffer(Speaker(attr, d), readonly=False)
    assert str(info.value) == (f"{attr}: the memory is read-only but "
                               "readonly=False was requested")


def test_ve_interface_adapter_carries_layout_and_policy() -> None:
    # VE adapters need no VEO library until their memory is touched
    d = vai(shape=(2, 3), strides=(8, 16), veo_ctxt=7)
    a = bufferext.as_buffer(Speaker(VAI, d))
    assert (a.shape, a.strides, a.format, a.readonly) == \
        ((2, 3), (8, 16), "d", False)
    assert bufferext.as_buffer(Speaker(VAI, d), readonly=True).readonly
    ro = bufferext.as_buffer(Speaker(VAI, vai(data=(4096, True))))
    assert ro.readonly
    with bufferext.get_buffer(a) as view:
        assert view.device == "bufferext.ve" and view.ptr == 4096
