"""Issue 12's Python-side boundaries: silent wrong answers and unclear errors
where the bridges and the distributed-array import read data they did not
make.  Each test failed (wrong answer or a non-ProtocolError) before.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict

import numpy as np
import pytest

import bufferext
from bufferext.distarray import ProtocolError, validate

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "cuda_standin"))
import standin_harness as harness  # noqa: E402


class Interface:
    """An object that speaks only the NumPy array interface."""

    def __init__(self, **d: Any) -> None:
        self.__array_interface__ = dict(version=3, **d)


# ---- item 8a: data given as a buffer object ---------------------------------

@pytest.mark.parametrize("shape, strides, offset, nbytes", [
    ((1 << 20,), None, 0, 8),        # 8 MiB described over 8 bytes
    ((2,), None, 8, 16),             # the offset pushes it past the end
    ((3,), (-8,), 0, 24),            # a negative stride reaches before
    ((2, 2), (8, 32), 0, 32),        # a large stride reaches past
])
def test_array_interface_over_a_short_buffer_is_refused(
        shape: tuple, strides: Any, offset: int, nbytes: int) -> None:
    data = bytearray(nbytes)
    obj = Interface(shape=shape, typestr="<f8", data=data, strides=strides,
                    offset=offset)
    with pytest.raises(BufferError, match=rf"of 'data', a buffer of "
                                          rf"{nbytes} bytes"):
        bufferext.as_buffer(obj)
    data.append(0)                  # the refused view was released


def test_array_interface_inside_its_buffer_is_accepted() -> None:
    data = bytearray(np.arange(6.0).tobytes())
    obj = Interface(shape=(3,), typestr="<f8", data=data, offset=16,
                    strides=(-8,))
    assert np.from_dlpack(bufferext.as_buffer(obj)).tolist() == [2.0, 1.0, 0.0]


# ---- item 8b: sub-array type strings ------------------------------------------

def test_subarray_typestr_becomes_dimensions() -> None:
    base = np.arange(12, dtype="<f4")
    obj = Interface(shape=(2,), typestr="(2,3)<f4", data=bytearray(base))
    adapter = bufferext.as_buffer(obj)
    # before: shape (2,), format 'f' with itemsize 24
    assert adapter.shape == (2, 2, 3)
    assert adapter.strides == (24, 12, 4)
    assert adapter.format in ("f", "<f")
    assert np.from_dlpack(adapter).reshape(-1).tolist() == base.tolist()


def test_subarray_typestr_with_strides_keeps_them_outside() -> None:
    data = bytearray(np.arange(12, dtype="<i2"))
    obj = Interface(shape=(2,), typestr="(3,)<i2", data=data, strides=(12,))
    adapter = bufferext.as_buffer(obj)
    assert adapter.shape == (2, 3) and adapter.strides == (12, 2)
    assert np.from_dlpack(adapter).tolist() == [[0, 1, 2], [6, 7, 8]]


@pytest.mark.parametrize("typestr", ["<f0", "|V0", "|O8", "<M8[s]", "<m8[s]"])
def test_typestrs_the_buffer_protocol_cannot_describe(typestr: str) -> None:
    obj = Interface(shape=(1,), typestr=typestr, data=bytearray(8))
    with pytest.raises(BufferError, match="'typestr'"):
        bufferext.as_buffer(obj)


# ---- item 11: the distributed-array import ------------------------------------

def distbuffer(**overrides: Any) -> Dict[str, Any]:
    d: Dict[str, Any] = {
        "__version__": "0.10.0", "buffer": np.zeros(4),
        "dim_data": ({"dist_type": "b", "size": 4, "proc_grid_size": 1,
                      "proc_grid_rank": 0, "start": 0, "stop": 4},)}
    d.update(overrides)
    return d


@pytest.mark.parametrize("version", [np.array(["0.10.0"]),
                                     np.array([1, 2]), b"0.10.0", 0.1])
def test_version_of_the_wrong_type_is_a_protocol_error(version: Any) -> None:
    with pytest.raises(ProtocolError, match="'__version__' = .*must be a "
                                            "'major.minor.patch' string"):
        validate(distbuffer(__version__=version))


@pytest.mark.parametrize("key", ["size", "stop", "start"])
def test_sizes_beyond_int64_are_a_protocol_error(key: str) -> None:
    dims = distbuffer()["dim_data"]
    dims[0][key] = 2**63
    with pytest.raises(ProtocolError, match=rf"\['{key}'\] = 9223372036854775808: "
                                            "must fit an int64"):
        validate(distbuffer(dim_data=dims))


def test_indices_beyond_int64_are_a_protocol_error() -> None:
    dd = {"dist_type": "u", "size": 4, "proc_grid_size": 1,
          "proc_grid_rank": 0, "indices": [0, 1, 2, 2**64]}
    with pytest.raises(ProtocolError, match="indices"):
        validate(distbuffer(dim_data=(dd,)))


DEVICE_ARRAY = """
from bufferext.distarray import ProtocolError, validate
class DeviceArray:
    def __init__(self, typestr, ptr):
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (4,), "typestr": typestr,
            "data": (ptr, False), "strides": None, "stream": None}
def distbuffer(buffer):
    return {"__version__": "0.10.0", "buffer": buffer,
            "dim_data": ({"dist_type": "b", "size": 4, "proc_grid_size": 1,
                          "proc_grid_rank": 0, "start": 0, "stop": 4},)}
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> str:
    return harness.build(str(tmp_path_factory.mktemp("standin_cuda")))


def test_device_buffer_of_a_non_numeric_type_is_a_protocol_error(
        driver: str) -> None:
    # device memory described by the CUDA Array Interface alone (the pointer
    # is never read on the CPU: validation only looks).  Before: validation
    # passed and the MPI layer failed later with a non-ProtocolError
    harness.check(driver, DEVICE_ARRAY + """
memory = bufferext.CUDABuffer(32, "u1")
ptr = memory.__cuda_array_interface__["data"][0]
for typestr in ("<U2", "|S4", "|V8"):
    adapter = bufferext.as_buffer(DeviceArray(typestr, ptr))
    assert adapter.device == "bufferext.cuda"
    try:
        validate(distbuffer(adapter))
    except ProtocolError as e:
        assert "memory on device 'bufferext.cuda' with format" in str(e), e
    else:
        raise AssertionError(typestr)
validate(distbuffer(bufferext.as_buffer(DeviceArray("<f8", ptr))))
del adapter
memory.close()
""")


def test_host_pointer_in_a_cuda_interface_is_named(driver: str) -> None:
    # found on the way: the message printed "0x%llx" (PyErr_Format before
    # 3.12 has no %llx)
    harness.check(driver, DEVICE_ARRAY + """
try:
    bufferext.as_buffer(DeviceArray("<f8", 0x10000))
except BufferError as e:
    assert "0x10000 is not CUDA device memory" in str(e), e
else:
    raise AssertionError("accepted")
""")
