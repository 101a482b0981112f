"""BufferFlags values, check_buffer_supports() and supported_flags()."""

from __future__ import annotations

import array
import enum
import itertools
import mmap
import sys

import numpy as np
import pytest

import bufferext
from _helpers import ATTRIBUTE_DECLARES, NEEDS_ATTRIBUTE
from bufferext import BufferFlags as F
from bufferext import check_buffer_supports, supported_flags

# PEP 3118 / Include/pybuffer.h values, as documented by CPython.
PEP3118 = {
    "SIMPLE": 0x0,
    "WRITABLE": 0x1,
    "FORMAT": 0x4,
    "ND": 0x8,
    "STRIDES": 0x18,
    "C_CONTIGUOUS": 0x38,
    "F_CONTIGUOUS": 0x58,
    "ANY_CONTIGUOUS": 0x98,
    "INDIRECT": 0x118,
    "CONTIG": 0x9,
    "CONTIG_RO": 0x8,
    "STRIDED": 0x19,
    "STRIDED_RO": 0x18,
    "RECORDS": 0x1D,
    "RECORDS_RO": 0x1C,
    "FULL": 0x11D,
    "FULL_RO": 0x11C,
}
PyBUF_READ, PyBUF_WRITE = 0x100, 0x200
INT_MAX = 2**31 - 1
INT_MIN = -(2**31)


# ---- values -----------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(PEP3118))
def test_pep3118_value_matches_documented_constant(name):
    assert int(F[name]) == PEP3118[name]


@pytest.mark.skipif(sys.version_info < (3, 12),
                    reason="inspect.BufferFlags is new in 3.12")
@pytest.mark.parametrize("name", sorted(PEP3118))
def test_pep3118_value_matches_inspect_bufferflags(name):
    import inspect
    assert int(F[name]) == int(inspect.BufferFlags[name])


@pytest.mark.skipif(sys.version_info < (3, 12),
                    reason="inspect.BufferFlags is new in 3.12")
def test_every_inspect_bufferflags_member_is_present():
    import inspect
    for member in inspect.BufferFlags:
        if member.name in ("READ", "WRITE"):
            continue   # not request flags (PyBUF_READ/PyBUF_WRITE)
        assert int(F[member.name]) == int(member)


def test_extended_values():
    assert F.DEVICE == 0x10000
    assert F.REQUIRED == 0xFD
    assert F.LEGACY == 0x1FD
    assert F.REQUIRED == (F.WRITABLE | F.FORMAT | F.ND | F.STRIDES
                          | F.C_CONTIGUOUS | F.F_CONTIGUOUS
                          | F.ANY_CONTIGUOUS)
    assert F.LEGACY == F.REQUIRED | F.INDIRECT


def test_values_come_from_the_extension():
    ext = bufferext._bufferext
    assert ext.PyBUF_DEVICE == F.DEVICE
    assert ext.PyBUF_REQUIRED_FLAGS == F.REQUIRED
    assert ext.LEGACY_FLAGS == F.LEGACY


def test_bufferflags_is_intflag():
    assert issubclass(F, enum.IntFlag)
    assert isinstance(F.DEVICE | F.FORMAT, F)
    assert (F.DEVICE | F.FORMAT) == 0x10004


def test_device_is_clear_of_legacy_bits_and_sign_bit():
    assert F.DEVICE & F.LEGACY == 0
    assert F.DEVICE & (PyBUF_READ | PyBUF_WRITE) == 0
    assert 0 < F.DEVICE <= INT_MAX


def test_device_combinations_never_equal_read_or_write():
    legacy_bits = [int(F[n]) for n in PEP3118]
    for r in range(len(legacy_bits) + 1):
        for combo in itertools.combinations(legacy_bits, r):
            value = F.DEVICE
            for bit in combo:
                value |= bit
            assert value not in (PyBUF_READ, PyBUF_WRITE), hex(value)


# ---- check_buffer_supports / supported_flags ---------------------------------

def legacy_exporters():
    return [
        b"bytes",
        bytearray(b"bytearray"),
        memoryview(b"memoryview"),
        array.array("d", [1.0, 2.0]),
        np.arange(6.0).reshape(2, 3),
        np.arange(6.0)[::2],
    ]


def ids(objs):
    return [type(o).__name__ for o in objs]


@pytest.mark.parametrize("obj", legacy_exporters(),
                         ids=ids(legacy_exporters()))
def test_legacy_exporter_supports_legacy_flags_only(obj):
    assert supported_flags(obj) == F.LEGACY
    assert isinstance(supported_flags(obj), F)
    for name in PEP3118:
        assert check_buffer_supports(obj, F[name]) is True
        assert check_buffer_supports(obj, int(F[name])) is True
        assert check_buffer_supports(obj, flags=F[name]) is True
    assert check_buffer_supports(obj, F.LEGACY) is True
    assert check_buffer_supports(obj, F.DEVICE) is False
    assert check_buffer_supports(obj, F.FULL_RO | F.DEVICE) is False


def test_mmap_supports_legacy_flags():
    with mmap.mmap(-1, 4096) as m:
        assert supported_flags(m) == F.LEGACY
        assert check_buffer_supports(m, F.FULL) is True
        assert check_buffer_supports(m, F.DEVICE) is False


@pytest.mark.parametrize("make", [
    lambda: bufferext.CPUBuffer((2, 3), "float32"),
    lambda: bufferext.get_buffer(b"abc"),
], ids=["CPUBuffer", "BufferView"])
def test_our_types_declare_legacy_and_device(make):
    obj = make()
    assert supported_flags(obj) == F.LEGACY | F.DEVICE
    assert check_buffer_supports(obj, F.DEVICE) is True
    assert check_buffer_supports(obj, F.FULL | F.DEVICE) is True
    assert check_buffer_supports(obj, flags=F.LEGACY | F.DEVICE) is True
    assert check_buffer_supports(obj, 0x20000) is False
    assert type(obj).__buffer_supported_flags__ == F.LEGACY | F.DEVICE


@pytest.mark.parametrize("obj", [None, 1, 1.5, "str", object(), [1, 2],
                                 np.float64],
                         ids=lambda obj: type(obj).__name__)
def test_non_buffer(obj):
    assert check_buffer_supports(obj) is False
    assert check_buffer_supports(obj, 0) is False
    assert check_buffer_supports(obj, F.FULL_RO) is False
    assert check_buffer_supports(obj, flags=F.DEVICE) is False
    with pytest.raises(TypeError, match=type(obj).__name__):
        supported_flags(obj)


def test_simple_request_always_supported_by_exporters():
    assert check_buffer_supports(b"x") is True
    assert check_buffer_supports(b"x", F.SIMPLE) is True


@pytest.mark.parametrize("flags", [INT_MAX + 1, INT_MIN - 1, 2**63, -2**63,
                                   2**100], ids=hex)
def test_flags_outside_c_int_overflow(flags):
    for obj in (b"x", None, bufferext.CPUBuffer(1)):
        with pytest.raises(OverflowError, match="C int"):
            check_buffer_supports(obj, flags)
        with pytest.raises(OverflowError, match="C int"):
            check_buffer_supports(obj, flags=flags)
    with pytest.raises(OverflowError):
        bufferext.get_buffer(b"x", flags)


@pytest.mark.parametrize("flags", [1.0, "1", None, b"\x01", [1]], ids=repr)
def test_non_int_flags_type_error(flags):
    with pytest.raises(TypeError, match="flags must be an int"):
        check_buffer_supports(b"x", flags)
    with pytest.raises(TypeError, match="flags must be an int"):
        check_buffer_supports(b"x", flags=flags)
    with pytest.raises(TypeError, match="flags must be an int"):
        bufferext.get_buffer(b"x", flags)


def test_int_subclass_flags_accepted():
    class MyInt(int):
        pass
    assert check_buffer_supports(b"x", MyInt(F.FORMAT)) is True
    assert check_buffer_supports(b"x", MyInt(F.DEVICE)) is False


def test_bad_arguments():
    with pytest.raises(TypeError):
        check_buffer_supports()
    with pytest.raises(TypeError):
        check_buffer_supports(b"x", 0, 0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        check_buffer_supports(b"x", mask=0)
    with pytest.raises(TypeError, match="unexpected keyword"):
        check_buffer_supports(b"x", 0, flags=0)
    with pytest.raises(TypeError):
        supported_flags()


# ---- Python classes declaring __buffer_supported_flags__ -------------------

needs_attribute = pytest.mark.skipif(not ATTRIBUTE_DECLARES,
                                     reason=NEEDS_ATTRIBUTE)


@pytest.mark.skipif(ATTRIBUTE_DECLARES, reason="backport mode: the type "
                    "attribute is the header's spelling of a declaration")
def test_type_attribute_is_no_declaration_in_native_mode():
    # the interpreter's slot is the declaration: a class attribute of that
    # name, valid or not, is an ordinary one (the draft specifies no
    # Python-level declaration)
    for value in (-1, int(F.ND), "x"):
        cls = type("Attr", (bytearray,), {"__buffer_supported_flags__": value})
        obj = cls(b"abc")
        assert supported_flags(obj) == F.LEGACY
        assert check_buffer_supports(obj, F.FULL_RO) is True
        with bufferext.get_buffer(obj, F.FULL_RO) as view:
            assert view.tobytes() == b"abc"


@needs_attribute
def test_declared_simple_only():
    class SimpleOnly(bytearray):
        __buffer_supported_flags__ = -1
    obj = SimpleOnly(b"abc")
    assert supported_flags(obj) == F.SIMPLE
    assert check_buffer_supports(obj) is True
    assert check_buffer_supports(obj, F.FORMAT) is False
    with pytest.raises(BufferError, match="SimpleOnly.*FORMAT"):
        bufferext.get_buffer(obj, F.FORMAT)
    with bufferext.get_buffer(obj, F.SIMPLE) as view:
        assert view.tobytes() == b"abc"


@needs_attribute
def test_declared_mask():
    class NDOnly(bytearray):
        __buffer_supported_flags__ = int(F.ND | F.FORMAT)
    obj = NDOnly(b"abc")
    assert supported_flags(obj) == F.ND | F.FORMAT
    assert check_buffer_supports(obj, F.ND) is True
    assert check_buffer_supports(obj, F.STRIDES) is False
    with pytest.raises(BufferError) as info:
        bufferext.get_buffer(obj, F.STRIDES)
    assert "NDOnly" in str(info.value) and "STRIDES" in str(info.value)
    # a soft request (INDIRECT's own bit, DEVICE) is not refused up front
    with bufferext.get_buffer(obj, F.ND | F.DEVICE) as view:
        assert view.shape == (3,)


def test_declared_zero_means_legacy():
    class Zero(bytearray):
        __buffer_supported_flags__ = 0
    assert supported_flags(Zero()) == F.LEGACY


@needs_attribute
@pytest.mark.parametrize("bad", ["x", 1.5, -2, 2**40, True, None],
                         ids=repr)
def test_invalid_declaration(bad):
    cls = type("Bad", (bytearray,), {"__buffer_supported_flags__": bad})
    obj = cls(b"abc")
    with pytest.raises(TypeError, match="Bad.__buffer_supported_flags__"):
        supported_flags(obj)
    assert check_buffer_supports(obj) is True
    assert check_buffer_supports(obj, F.FORMAT) is False
    with pytest.raises(BufferError, match="invalid"):
        bufferext.get_buffer(obj, F.FORMAT)


@needs_attribute
def test_declaration_change_is_seen():
    class Changing(bytearray):
        pass
    obj = Changing(b"abc")
    assert check_buffer_supports(obj, F.ND) is True
    Changing.__buffer_supported_flags__ = int(F.FORMAT)
    assert check_buffer_supports(obj, F.ND) is False
    assert check_buffer_supports(obj, F.FORMAT) is True
    # an extended flag needs a typed entry, which a Python class has none of
    Changing.__buffer_supported_flags__ = int(F.LEGACY | F.DEVICE)
    assert check_buffer_supports(obj, F.ND) is True
    assert check_buffer_supports(obj, F.DEVICE) is False
    Changing.__buffer_supported_flags__ = -1
    assert check_buffer_supports(obj, F.FORMAT) is False
    del Changing.__buffer_supported_flags__
    assert supported_flags(obj) == F.LEGACY


@needs_attribute
def test_declaration_is_inherited_and_overridable():
    class Base(bytearray):
        __buffer_supported_flags__ = -1

    class Child(Base):
        pass

    class Grandchild(Child):
        __buffer_supported_flags__ = 0
    assert supported_flags(Child()) == F.SIMPLE
    assert supported_flags(Grandchild()) == F.LEGACY


# ---- readable output ----------------------------------------------------------

@pytest.mark.parametrize("value, text", [
    (F.FULL | F.DEVICE, "BufferFlags.FULL|DEVICE (0x1011d)"),
    (F.LEGACY | F.DEVICE, "BufferFlags.LEGACY|DEVICE (0x101fd)"),
    (F.SIMPLE, "BufferFlags.SIMPLE (0x0)"),
    (F.CONTIG_RO, "BufferFlags.ND (0x8)"),           # an alias: first name
    (F.STRIDES | F.WRITABLE, "BufferFlags.STRIDED (0x19)"),
    (F.REQUIRED, "BufferFlags.REQUIRED (0xfd)"),
    (F.C_CONTIGUOUS | F.FORMAT | F.DEVICE,
     "BufferFlags.C_CONTIGUOUS|FORMAT|DEVICE (0x1003c)"),
    (F(0x200) | F.FULL, "BufferFlags.FULL|0x200 (0x31d)"),   # no member
])
def test_repr_and_str_are_names_and_hex(value, text):
    assert repr(value) == text
    assert str(value) == text
    assert f"{value}" == text and "%s" % value == text


def test_supported_flags_reads_well():
    assert repr(supported_flags(bufferext.CPUBuffer(1))) == \
        "BufferFlags.LEGACY|DEVICE (0x101fd)"
    assert repr(supported_flags(b"x")) == "BufferFlags.LEGACY (0x1fd)"


def test_numeric_formatting_is_unchanged():
    value = F.FULL | F.DEVICE
    assert f"{value:x}" == "1011d" and f"{value:#x}" == "0x1011d"
    assert f"{value:d}" == "65821" and "%d" % value == "65821"
    assert "%x" % value == "1011d" and int(value) == 0x1011D
    assert value == 0x1011D and isinstance(value, int)


def test_names_are_the_fewest_covering_members():
    assert (F.FULL | F.DEVICE).names() == ["FULL", "DEVICE"]
    assert F.SIMPLE.names() == ["SIMPLE"]
    assert (F.WRITABLE | F.FORMAT).names() == ["WRITABLE", "FORMAT"]
    assert F(0x10000 | 0x20000).names() == ["DEVICE", "0x20000"]


# ---- PyBUF_READ / PyBUF_WRITE given as flags (from test_boundary_c.py) -------

@pytest.mark.parametrize("flags, name", [(0x100, "PyBUF_READ"),
                                         (0x200, "PyBUF_WRITE")])
def test_bare_read_write_values_name_themselves(flags: int, name: str) -> None:
    with pytest.raises(ValueError, match=f"flags = {flags:#x} is {name}"):
        bufferext.get_buffer(b"abc", flags)


def test_every_member_is_in_the_docs_table_with_its_value() -> None:
    """docs/python.rst lists every BufferFlags member with its hex value."""
    import os
    import re
    page = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "python.rst")
    if not os.path.exists(page):
        pytest.skip("the docs are not beside these tests (an installed copy)")
    with open(page, encoding="utf-8") as f:
        rows = dict(re.findall(r"\* - ``([A-Z_]+)``\n\s+- ``(0x[0-9a-f]+)``", f.read()))
    assert rows == {name: hex(int(member)) for name, member in F.__members__.items()}
