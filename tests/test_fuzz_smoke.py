"""The fuzz harnesses (tests/fuzz/) on a fixed pseudo-random corpus, so they
cannot rot between fuzzing runs, plus the inputs fuzzing once found, as
named regression tests.  ``BUFFEREXT_FUZZ_SMOKE`` sets inputs per harness.
The coverage-guided runs are tests/fuzz/run.py (the quality script)."""

from __future__ import annotations

import importlib
import os
import random
import sys
from typing import Callable

import pytest

import bufferext
from bufferext._dtypes import resolve

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "fuzz"))

INPUTS = int(os.environ.get("BUFFEREXT_FUZZ_SMOKE", "1500"))


def _harness(name: str) -> Callable[[bytes], None]:
    module = importlib.import_module(name)
    return module.prepare()


@pytest.mark.parametrize("name", ["fuzz_dlpack", "fuzz_interfaces",
                                  "fuzz_formats", "fuzz_dim_data",
                                  "fuzz_exporters"])
def test_harness_on_fixed_corpus(name: str) -> None:
    test_one_input = _harness(name)
    rnd = random.Random(name)
    for i in range(INPUTS):
        size = rnd.choice([0, 1, 4, 16, 64, 200, 384])
        test_one_input(bytes(rnd.getrandbits(8) for _ in range(size)))


# ---- what fuzzing found (each fixed in this branch) -------------------------

class Speaker:
    def __init__(self, **attrs: object) -> None:
        self.__dict__.update(attrs)


@pytest.mark.parametrize("typestr", ["<m8[s]", "<M8[D]", "()f8x", ">0@@"])
def test_unusable_typestr_is_buffer_error(typestr: str) -> None:
    d = {"shape": (2,), "typestr": typestr, "data": (0, False), "version": 3}
    with pytest.raises(BufferError, match="typestr"):
        bufferext.as_buffer(Speaker(__array_interface__=d))


def test_zero_size_interface_with_overflowing_strides() -> None:
    d = {"shape": (0, 2**40, 2**40), "typestr": "<f8", "data": (0, False),
         "version": 3}
    with pytest.raises(BufferError, match="shape"):
        bufferext.as_buffer(Speaker(__array_interface__=d))


def test_zero_size_dlpack_with_overflowing_strides() -> None:
    from _dlpack_ctypes import Crafted
    crafted = Crafted(ndim=3, shape=(0, 2**40, 2**40), strides=None,
                      code=2, bits=64)
    with pytest.raises(BufferError, match="overflow"):
        bufferext._bufferext._adapter_from_dlpack(None, crafted.capsule(),
                                                  None)
    assert crafted.deleted == 0


@pytest.mark.parametrize("spelling", ["01,'1~", ">0@@", "!n", "d\n"])
def test_resolve_rejects_with_type_error(spelling: str) -> None:
    with pytest.raises(TypeError):
        resolve(spelling)


def test_layout_refuses_itemsize_that_is_not_the_formats() -> None:
    # before this was refused only at DLPack export, and get_buffer of the
    # adapter described 1-byte 'e' items
    memory = bytearray(16)
    ptr = bufferext.get_buffer(memory).ptr
    with pytest.raises(BufferError, match="format 'e' does not describe "
                                          "items of itemsize = 1 bytes"):
        bufferext._bufferext._adapter_from_layout(
            None, "test", ptr, (2,), (1,), "e", 1, False, None, 0, None)


def test_complex32_dlpack_import() -> None:
    from _dlpack_ctypes import Crafted
    crafted = Crafted(ndim=1, shape=(3,), code=5, bits=32)
    adapter = bufferext._bufferext._adapter_from_dlpack(
        None, crafted.capsule(), None)
    assert adapter.format == "Ze" and adapter.nbytes == 12
    capsule = adapter.__dlpack__(max_version=(1, 0))   # and back out
    again = bufferext._bufferext._adapter_from_dlpack(None, capsule, None)
    assert again.format == "Ze"
    del again, capsule, adapter
    assert crafted.deleted == 1


def test_byte_offset_past_the_address_space_is_refused() -> None:
    """UBSan found pointer arithmetic overflowing here (hypothesis fuzz)."""
    from _dlpack_ctypes import Crafted
    crafted = Crafted(ndim=1, shape=(1,), code=1, bits=8,
                      byte_offset=2**64 - 8)
    with pytest.raises(BufferError, match="byte_offset"):
        bufferext._bufferext._adapter_from_dlpack(None, crafted.capsule(),
                                                  None)
    assert crafted.deleted == 0


def test_legacy_unstructured_indices_beyond_int64_are_a_protocol_error() -> None:
    """Found by fuzz_dim_data: a 0.9 export whose unstructured indices hold
    an int no int64 can store raised OverflowError instead of ProtocolError."""
    from bufferext.distarray import ProtocolError, validate

    export = {"__version__": "0.9.0", "buffer": bufferext.CPUBuffer(2, "i8"),
              "dim_data": ({"dist_type": "u", "proc_grid_size": 1,
                            "proc_grid_rank": 0, "size": 2,
                            "indices": [0, 2**70]},)}
    with pytest.raises(ProtocolError, match="indices"):
        validate(export)
