"""Fuzzing as_buffer() with malformed interface dicts and DLPack capsules.

Every outcome must be a clean success or a BufferError / TypeError /
DeviceUnavailableError naming what is wrong: never a crash, another
exception, or a leaked (or twice-freed) DLPack tensor.  Memory is never
read: only descriptions are parsed."""

from __future__ import annotations

import gc
import os
from typing import Any, Dict

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

import bufferext  # noqa: E402

from _dlpack_ctypes import Crafted  # noqa: E402
from _helpers import COLLECTING_EXAMPLES  # noqa: E402

#: Examples per test: small for the everyday suite (each collects garbage),
#: raised for long runs (BUFFEREXT_FUZZ_EXAMPLES=100000).
EXAMPLES = int(os.environ.get("BUFFEREXT_FUZZ_EXAMPLES", COLLECTING_EXAMPLES))
# derandomize: the same examples on every run (a seed from the test's
# name), so the verdict does not change from one CI run to the next

CLEAN = (BufferError, TypeError, bufferext.DeviceUnavailableError)

junk = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(),
    st.text(max_size=4), st.binary(max_size=8),
    st.lists(st.integers(-4, 4), max_size=3),
    st.tuples(st.integers(-2**65, 2**65), st.booleans()),
    st.tuples(st.integers(-3, 10)), st.just(object()),
)
shapes = st.one_of(junk, st.lists(st.integers(-2, 2**62), max_size=4)
                   .map(tuple))
typestrs = st.one_of(junk, st.sampled_from(
    ["<f8", ">i4", "|u1", "|b1", "<c16", "<f2", "|V8", "<M8", "|O", "xx",
     "<U3", "f", "<f16"]))
datas = st.one_of(junk, st.tuples(st.integers(0, 2**64 + 5), st.booleans()),
                  st.just(bytearray(64)), st.just(b"abc"))
versions = st.one_of(junk, st.integers(-1, 5))

interfaces = st.fixed_dictionaries({}, optional={
    "shape": shapes, "typestr": typestrs, "data": datas,
    "strides": st.one_of(junk, st.lists(st.integers(-2**63, 2**63),
                                        max_size=4).map(tuple)),
    "version": versions, "mask": st.one_of(st.none(), junk),
    "stream": st.one_of(st.none(), st.integers(-3, 2**64 + 3), junk),
    "offset": st.one_of(st.integers(-3, 2**64), junk),
    "descr": junk, "veo_ctxt": st.one_of(st.none(), junk),
})


class Speaker:
    def __init__(self, name: str, value: Any) -> None:
        setattr(self, name, value)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True)
@given(name=st.sampled_from(["__array_interface__",
                             "__cuda_array_interface__",
                             "__ve_array_interface__"]),
       value=st.one_of(interfaces, junk))
def test_interface_dicts(name: str, value: Dict[str, Any]) -> None:
    try:
        adapter = bufferext.as_buffer(Speaker(name, value))
    except CLEAN:
        return
    # Accepted: the description must be self-consistent.
    assert adapter.nbytes >= 0
    assert len(adapter.shape) == len(adapter.strides)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True)
@given(ndim=st.integers(-3, 70),
       dims=st.lists(st.integers(-2**63, 2**63 - 1), min_size=70,
                     max_size=70),
       with_strides=st.booleans(),
       code=st.integers(0, 255), bits=st.integers(0, 255),
       lanes=st.integers(0, 65535),
       device=st.tuples(st.integers(-2, 20), st.integers(-2, 4)),
       version=st.tuples(st.integers(0, 3), st.integers(0, 5)),
       versioned=st.booleans(), readonly=st.sampled_from([None, True, False]),
       flags=st.integers(0, 7))
def test_capsules(ndim: int, dims: list, with_strides: bool, code: int,
                  bits: int, lanes: int, device: tuple, version: tuple,
                  versioned: bool, readonly: Any, flags: int) -> None:
    count = max(ndim, 0)
    crafted = Crafted(ndim=ndim, shape=dims[:count] or (0,),
                      strides=dims[::-1][:count] or (0,) if with_strides
                      else None,
                      code=code, bits=bits, lanes=lanes, device=device,
                      version=version, versioned=versioned, flags=flags)
    try:
        adapter = bufferext._bufferext._adapter_from_dlpack(
            None, crafted.capsule(), readonly)
    except CLEAN:
        gc.collect(1)                        # what this call made is young
        assert crafted.deleted == 0          # rejected: never consumed
        return
    assert adapter.nbytes >= 0
    del adapter
    gc.collect(1)
    assert crafted.deleted == 1              # consumed: freed exactly once
