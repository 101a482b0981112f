"""Consumer side of bufferext.h: PyObject_CheckBufferSupports,
BufferExt_SupportedFlags, BufferExt_GetBuffer, BufferExt_IsDevice and
BufferExt_Release, against the test exporters, Python classes and every
exporter of the stdlib and numpy."""

from __future__ import annotations

import array
import mmap
import re
import sys

import numpy as np
import pytest

import bufferext
from _helpers import ATTRIBUTE_DECLARES, NEEDS_ATTRIBUTE

LEGACY = 0x1FD
DEVICE = 0x10000
REQUIRED_BITS = {            # the flag that carries each required bit
    "WRITABLE": 0x1, "FORMAT": 0x4, "ND": 0x8, "STRIDES": 0x18,
    "C_CONTIGUOUS": 0x38, "F_CONTIGUOUS": 0x58, "ANY_CONTIGUOUS": 0x98,
}


def _types(capi):
    """type -> effective mask, per the draft: 0 and no declaration = the
    legacy flags, -1 = PyBUF_SIMPLE only, else the mask."""
    return {capi.ExporterUndeclared: LEGACY, capi.ExporterLegacy: LEGACY,
            capi.ExporterSimpleOnly: 0, capi.ExporterFull: LEGACY | DEVICE,
            capi.ExporterNoDevice: 0x1C}


def test_supported_flags_semantics(capi):
    for tp, mask in _types(capi).items():
        assert capi.supported_flags(tp()) == mask, tp


@pytest.mark.parametrize("flags", [0, 0x1, 0x4, 0x8, 0x18, 0x38, 0x58, 0x98,
                                   0x118, 0x11D, DEVICE, DEVICE | 0x11C,
                                   0x20000])
def test_check_supports_semantics(capi, flags):
    for tp, mask in _types(capi).items():
        expected = 1 if flags & ~mask == 0 else 0
        assert capi.check_supports(tp(), flags) == expected, (tp, hex(flags))
        assert tp().getbuffer_calls == 0


def test_check_supports_on_non_exporters_is_zero(capi):
    for obj in (None, 1, "str", [1], object(), type):
        assert capi.check_supports(obj, 0) == 0
        assert capi.check_supports(obj, capi.PyBUF_ND) == 0


def test_supported_flags_of_non_exporter_is_type_error(capi):
    with pytest.raises(TypeError, match="not 'list'"):
        capi.supported_flags([1, 2])


@pytest.mark.parametrize("name, bits", REQUIRED_BITS.items())
def test_required_flags_refused_up_front(capi, name, bits):
    x = capi.ExporterSimpleOnly(4)
    pattern = (rf"^{capi.__name__}\.ExporterSimpleOnly does not support the "
               rf"buffer request flags \S*\b{name}\b")
    with pytest.raises(BufferError, match=pattern) as info:
        capi.get_buffer(x, bits)
    assert "PyBUF_SIMPLE only" in str(info.value)
    assert x.getbuffer_calls == 0 and x.exports == 0


def test_refusal_names_every_missing_flag_and_the_mask(capi):
    x = capi.ExporterNoDevice()
    with pytest.raises(BufferError) as info:
        capi.get_buffer(x, capi.PyBUF_FULL | capi.PyBUF_C_CONTIGUOUS)
    message = str(info.value)
    assert "ExporterNoDevice" in message
    # (native mode: CPython's gate names its slot)
    assert re.search(r"flags WRITABLE\|C_CONTIGUOUS \((declared "
                     r"__buffer_supported_flags__|bf_supported_flags) = "
                     r"0x1c\)", message), message
    assert x.getbuffer_calls == 0


@pytest.mark.parametrize("flags", [DEVICE, DEVICE | 0x100, 0x20000 | 0x100])
def test_soft_flags_are_never_refused_up_front(capi, flags):
    x = capi.ExporterSimpleOnly(3)
    d = capi.get_buffer(x, flags)
    assert x.getbuffer_calls == 1 and x.exports == 0
    assert d["len"] == 12


@pytest.mark.parametrize("flags", [DEVICE | 0x100, DEVICE | 0x200])
def test_an_undeclared_device_flag_dropped_leaves_a_request_served(capi, flags):
    # PyBUF_DEVICE is not passed to a type that does not declare it; what is
    # left (0x100, 0x200) equals PyBUF_READ or PyBUF_WRITE, which
    # PyObject_GetBuffer refuses as a bad argument since 3.13: the request
    # still reaches the exporter, as PyBUF_SIMPLE, on the type's first use
    # (the header's general path) and after it (the inline one)
    tp = capi.make_exporter_type("Fresh", -1)
    for _ in range(2):
        x = tp(3)
        d = capi.get_buffer(x, flags)
        assert (d["flags"], d["len"], x.getbuffer_calls, x.exports) == (
            0, 12, 1, 0)


@pytest.mark.parametrize("flags", [DEVICE | 0x100, DEVICE | 0x200])
def test_builtin_exporters_serve_a_request_left_read_or_write(capi, flags):
    # their getbuffer calls PyBuffer_FillInfo, which refuses 0x100 and 0x200
    # on 3.13+: bytes and mmap raised SystemError, and bytearray kept an
    # export it never filled (it could not be resized again); what is left
    # asks nothing PyBUF_SIMPLE does not, and is served as it
    data = bytearray(b"abcd")
    objects = [b"abcd", data, array.array("b", b"abcd"), mmap.mmap(-1, 4)]
    for obj in objects:
        for _ in range(2):      # the type's first use, and the cached one
            assert capi.get_buffer(obj, flags)["len"] == 4
            with bufferext.get_buffer(obj, flags) as view:
                assert view.nbytes == 4 and view.flags == 0
    data.append(0)              # no export left behind
    objects[-1].close()


def test_non_buffer_is_type_error(capi):
    for flags in (0, capi.PyBUF_ND, DEVICE):
        with pytest.raises(TypeError):
            capi.get_buffer(object(), flags)


def test_flags_outside_c_int_overflow(capi):
    with pytest.raises(OverflowError):
        capi.get_buffer(b"x", 2**31)
    with pytest.raises(OverflowError):
        capi.check_supports(b"x", -2**31 - 1)


@pytest.mark.parametrize("liar, match", [
    ("unasked", "wrote the buffer extension although no extended flag"),
    ("device_noflag", "filled device fields without setting PyBUF_DEVICE"),
    ("extra_flags", "set extended flags that were not requested"),
    ("fail_late", "failed after writing the extension")])
def test_liar_exporters_are_caught_and_released(capi, liar, match):
    x = capi.ExporterFull(4, liar=liar)
    flags = capi.PyBUF_FULL_RO if liar == "unasked" else (
        capi.PyBUF_FULL_RO | DEVICE)
    # the C side also asserts that the extension fields were left zero
    with pytest.raises(BufferError, match=rf"ExporterFull:? {match}"):
        capi.get_buffer(x, flags)
    assert x.exports == 0 and x.getbuffer_calls == 1


def test_unasked_liar_with_device_request_is_a_valid_answer(capi):
    x = capi.ExporterFull(liar="unasked")
    d = capi.get_buffer(x, DEVICE)
    assert d["device"] == "liar.unasked" and d["is_device"] is True
    assert x.exports == 0


def test_release_twice_is_harmless(capi):
    for x in (capi.ExporterFull(2), capi.ExporterFull(device="test.dev")):
        d = capi.release_twice(x, capi.PyBUF_FULL_RO | DEVICE)
        assert d == {"obj": False, "flags": 0, "ext_flags": 0,
                     "device": None, "device_info": None}
        assert x.exports == 0


def test_is_device(capi):
    assert capi.is_device(capi.ExporterFull(), DEVICE) is False
    assert capi.is_device(capi.ExporterFull(device="d"), DEVICE) is True
    assert capi.is_device(b"abc", DEVICE) is False
    assert capi.is_device_fields(DEVICE, "d") is True
    assert capi.is_device_fields(DEVICE | 0x20000, "d") is True
    assert capi.is_device_fields(0, "d") is False
    assert capi.is_device_fields(DEVICE, None) is False
    assert capi.is_device_fields(0, None) is False


# ---- Python classes declaring __buffer_supported_flags__ ----------------

@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
def test_python_class_declaring_simple_only(capi):
    class SimpleOnly(bytearray):
        __buffer_supported_flags__ = -1

    x = SimpleOnly(b"abcd")
    assert capi.supported_flags(x) == 0
    assert capi.check_supports(x, capi.PyBUF_ND) == 0
    with pytest.raises(BufferError, match="SimpleOnly does not support .*ND"):
        capi.get_buffer(x, capi.PyBUF_ND)
    assert capi.get_buffer(x, 0)["len"] == 4


@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
def test_python_class_inherits_declaration(capi):
    class Base(bytearray):
        __buffer_supported_flags__ = capi.PyBUF_FORMAT | capi.PyBUF_ND

    class Child(Base):
        pass

    assert capi.supported_flags(Child()) == 0xC
    assert capi.check_supports(Child(), capi.PyBUF_STRIDES) == 0


def test_failing_declaration_lookup_reads_as_legacy(capi):
    class Meta(type):
        @property
        def __buffer_supported_flags__(cls):
            raise RuntimeError("no")

    class Odd(bytearray, metaclass=Meta):
        pass

    assert capi.check_supports(Odd(), capi.PyBUF_ND) == 1
    assert capi.supported_flags(Odd()) == LEGACY


@pytest.mark.skipif(sys.version_info < (3, 12), reason="PEP 688 is 3.12+")
def test_pep688_class(capi):
    calls = []

    class Declared:
        __buffer_supported_flags__ = -1

        def __buffer__(self, flags):
            calls.append(flags)
            return memoryview(b"data")

    assert capi.check_supports(Declared(), 0) == 1
    if ATTRIBUTE_DECLARES:
        assert capi.check_supports(Declared(), capi.PyBUF_ND) == 0
        with pytest.raises(BufferError, match="Declared does not support"):
            capi.get_buffer(Declared(), capi.PyBUF_ND)
        assert calls == []
    # a Python-level __buffer__ can only hand back a memoryview: the PEP 688
    # rule asks it without PyBUF_DEVICE (docs/capi.rst)
    d = capi.get_buffer(Declared(), DEVICE)
    assert calls == [0]
    assert d["flags"] == 0 and d["device"] is None and d["len"] == 4
    assert capi.check_supports(Declared(), DEVICE) == 0

    class Plain:
        def __buffer__(self, flags):
            return memoryview(b"xy")

    assert capi.supported_flags(Plain()) == LEGACY
    assert capi.get_buffer(Plain(), capi.PyBUF_FULL_RO | DEVICE)["flags"] == 0


@pytest.mark.parametrize("value", ["x", True, False, 2**40, 2**31, -5, -2,
                                   1.5, None, (1,)])
@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
def test_invalid_declaration(capi, value):

    class Bad(bytearray):
        __buffer_supported_flags__ = value

    x = Bad(b"ab")
    assert capi.check_supports(x, 0) == 1
    for flags in (capi.PyBUF_ND, capi.PyBUF_WRITABLE, DEVICE):
        assert capi.check_supports(x, flags) == 0   # and nothing raised
    with pytest.raises(TypeError) as info:
        capi.supported_flags(x)
    assert f"Bad.__buffer_supported_flags__ = {value!r} is invalid" in str(
        info.value)
    with pytest.raises(BufferError, match="Bad .*an invalid value"):
        capi.get_buffer(x, capi.PyBUF_ND)
    assert capi.get_buffer(x, 0)["len"] == 2


class ReprFails:
    def __repr__(self) -> str:
        raise RuntimeError("repr ran")


@pytest.mark.parametrize("value", [ReprFails(), 10**5000],
                         ids=["repr-raises", "int-past-the-digit-limit"])
@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
def test_invalid_declaration_whose_repr_fails(capi, value):
    # the refusal is still the TypeError naming the type and the field (the
    # repr's error took its place), with the value's type
    if isinstance(value, int) and not hasattr(sys, "get_int_max_str_digits"):
        pytest.skip("no digit limit on this interpreter")

    class Bad(bytearray):
        __buffer_supported_flags__ = value

    with pytest.raises(TypeError, match=re.escape(
            f"Bad.__buffer_supported_flags__ (a '{type(value).__name__}', "
            "whose repr failed) is invalid: expected an int, -1 or a flag "
            "mask >= 0")):
        capi.supported_flags(Bad(b"ab"))


@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
@pytest.mark.parametrize("value", [0, -1, 1, 2**31 - 1])
def test_valid_declaration_extremes(capi, value):
    class Edge(bytearray):
        __buffer_supported_flags__ = value

    # the extended flags of a declaration count only with a typed entry
    expected = {0: LEGACY, -1: 0}.get(value, value) & ~0x7FFF0000
    assert capi.supported_flags(Edge()) == expected


# ---- every stdlib and numpy exporter x request flags --------------------

FLAG_NAMES = ["PyBUF_SIMPLE", "PyBUF_WRITABLE", "PyBUF_FORMAT", "PyBUF_ND",
              "PyBUF_STRIDES", "PyBUF_C_CONTIGUOUS", "PyBUF_F_CONTIGUOUS",
              "PyBUF_ANY_CONTIGUOUS", "PyBUF_INDIRECT", "PyBUF_CONTIG",
              "PyBUF_CONTIG_RO", "PyBUF_STRIDED", "PyBUF_STRIDED_RO",
              "PyBUF_RECORDS", "PyBUF_RECORDS_RO", "PyBUF_FULL",
              "PyBUF_FULL_RO"]


def _exporters():
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    ro = np.arange(6, dtype=np.int16)
    ro.flags.writeable = False
    return {
        "bytes": b"abcdef",
        "bytearray": bytearray(b"abcdef"),
        "memoryview": memoryview(b"abcdef"),
        "memoryview_strided": memoryview(bytearray(range(12)))[::3],
        "memoryview_2d": memoryview(bytearray(24)).cast("i", (2, 3)),
        "array": array.array("d", [1.0, 2.0, 3.0]),
        "ndarray_c": base,
        "ndarray_f": np.asfortranarray(base),
        "ndarray_slice": base[:, ::2],
        "ndarray_0d": np.array(3.5),
        "ndarray_empty": np.zeros((0, 3), dtype=np.int32),
        "ndarray_readonly": ro,
        "ndarray_struct": np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")]),
    }


def _outcome(func, obj, flags):
    try:
        return func(obj, flags)
    except Exception as exc:       # the exception type is the outcome
        return type(exc)


@pytest.mark.parametrize("name", list(_exporters()))
def test_stdlib_and_numpy_exporters(capi, name):
    obj = _exporters()[name]
    for flag_name in FLAG_NAMES:
        base = getattr(capi, flag_name)
        expected = _outcome(capi.plain_get_buffer, obj, base)
        for flags in (base, base | DEVICE):
            got = _outcome(capi.get_buffer, obj, flags)
            where = (name, flag_name, hex(flags))
            if isinstance(expected, type):
                assert got is expected, where
                continue
            assert isinstance(got, dict), (where, got)
            assert got["flags"] == 0 and got["ext_flags"] == 0, where
            assert got["device"] is None and got["device_info"] is None, where
            assert got == expected, where


def test_mmap_exporter(capi):
    with mmap.mmap(-1, 4096) as m:
        for flag_name in FLAG_NAMES:
            base = getattr(capi, flag_name)
            for flags in (base, base | DEVICE):
                got = capi.get_buffer(m, flags)
                assert got["len"] == 4096 and got["flags"] == 0
                assert got["device"] is None and got["device_info"] is None
        m.close()   # nothing is left exported, or close would fail
