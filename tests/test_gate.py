"""The gate (Modules/gate.c): the one validation of an export another
exporter filled, before any of our code reads it, and the request rules
our own re-exports apply in turn (Modules/export.h)."""

from __future__ import annotations

import array
import ctypes
import gc
import re
import sys
from types import ModuleType
from typing import Any

import pytest

import bufferext
from bufferext import BufferFlags as F

from _helpers import run_child

WITHOUT_INDIRECT = ["RECORDS_RO", "RECORDS", "STRIDED_RO", "STRIDED",
                    "CONTIG_RO", "ND", "SIMPLE", "FORMAT"]


def pil_style(capi: ModuleType) -> object:
    """An exporter of two float64 behind suboffsets, whatever is asked."""
    return capi.Configurable(64, 16, 8, 1, "d", shape=(2,), strides=(8,),
                             suboffsets=(0,))


@pytest.mark.parametrize("request_name", WITHOUT_INDIRECT)
def test_suboffsets_need_an_indirect_request(c99: ModuleType,
                                             request_name: str) -> None:
    # every request without PyBUF_INDIRECT, not the default one only: a
    # consumer that did not ask for suboffsets would follow the pointers
    # as data
    x = pil_style(c99)
    flags = getattr(F, request_name) | F.DEVICE
    with pytest.raises(BufferError, match="suboffsets is set although "
                                          "PyBUF_INDIRECT was not requested"):
        bufferext.get_buffer(x, flags)
    assert x.exports == 0


@pytest.mark.parametrize("request_name", WITHOUT_INDIRECT)
def test_a_view_with_suboffsets_is_reexported_only_indirectly(
        c99: ModuleType, request_name: str) -> None:
    x = pil_style(c99)
    with bufferext.get_buffer(x, F.FULL_RO | F.DEVICE) as view:
        assert view.suboffsets == (0,)
        with pytest.raises(BufferError, match="buffer has suboffsets: "
                                              "request PyBUF_INDIRECT"):
            bufferext.get_buffer(view, getattr(F, request_name))
        with bufferext.get_buffer(view, F.FULL_RO) as again:
            assert again.suboffsets == (0,)
    assert x.exports == 0


# ---- the order a request asked for (PEP 3118) ------------------------------

def reversed_doubles(capi: ModuleType) -> Any:
    """Four float64 backwards (strides -8, buf at the last of a 32-byte
    block), whatever is asked: the items are 1, 2, 3, 4."""
    x = capi.Configurable(32, 32, 8, 1, "d", shape=(4,), strides=(-8,),
                          offset=24)
    with bufferext.get_buffer(x, F.STRIDED) as view:
        memoryview(view)[:] = array.array("d", [1.0, 2.0, 3.0, 4.0])
    return x


@pytest.mark.parametrize("request_name", ["SIMPLE", "ND", "CONTIG_RO",
                                          "C_CONTIGUOUS", "ANY_CONTIGUOUS"])
def test_a_strided_answer_to_a_contiguous_request_is_refused(
        c99: ModuleType, request_name: str) -> None:
    # a consumer that did not ask for strides reads [buf, buf + len): 24
    # bytes past this block (and one that asked for C order reads C order)
    x = reversed_doubles(c99)
    asked = ("without PyBUF_STRIDES"
             if request_name in ("SIMPLE", "ND", "CONTIG_RO")
             else "PyBUF_" + request_name)
    with pytest.raises(BufferError, match=re.escape(
            "Configurable: exported an invalid buffer: shape = (4,), "
            "strides = (-8,) are not " + ("C- or F" if "ANY" in request_name
                                          else "C") +
            "-contiguous, although the request was " + asked)):
        bufferext.get_buffer(x, getattr(F, request_name))
    assert x.exports == 0
    with bufferext.get_buffer(x, F.STRIDED_RO) as view:    # as it is
        assert memoryview(view).tolist() == [1.0, 2.0, 3.0, 4.0]


def test_each_contiguous_request_takes_its_order_only(c99: ModuleType) -> None:
    # a 2x3 array in Fortran order, strides filled in whatever is asked
    x = c99.Configurable(48, 48, 8, 2, "d", shape=(2, 3), strides=(8, 16))
    for name in ("F_CONTIGUOUS", "ANY_CONTIGUOUS", "STRIDED", "FULL_RO"):
        with bufferext.get_buffer(x, getattr(F, name)) as view:
            assert view.strides == (8, 16), name
    for name in ("C_CONTIGUOUS", "CONTIG_RO", "SIMPLE", "ND"):
        with pytest.raises(BufferError, match=re.escape(
                "shape = (2, 3), strides = (8, 16) are not C-contiguous")):
            bufferext.get_buffer(x, getattr(F, name))
    c_order = c99.Configurable(48, 48, 8, 2, "d", shape=(2, 3),
                               strides=(24, 8))
    with pytest.raises(BufferError, match=re.escape(
            "shape = (2, 3), strides = (24, 8) are not F-contiguous, "
            "although the request was PyBUF_F_CONTIGUOUS")):
        bufferext.get_buffer(c_order, F.F_CONTIGUOUS)
    # strides filled in unasked but C order: what was asked, taken
    for name in ("SIMPLE", "ND", "C_CONTIGUOUS"):
        with bufferext.get_buffer(c_order, getattr(F, name)) as view:
            assert view.nbytes == 48
    assert x.exports == c_order.exports == 0


def test_copies_into_our_buffers_take_the_source_through_the_gate(
        c99: ModuleType) -> None:
    # copy_from_host and unpickling exported the source with a bare
    # PyObject_GetBuffer: a len of 24 bytes beside a shape of 4096 items
    # wrote 32 KiB into a 24-byte buffer (a heap overflow)
    liar = c99.Configurable(65536, 24, 8, 1, "d", shape=(4096,),
                            strides=(16,))
    lie = re.escape("Configurable: exported an invalid buffer: len = 24 "
                    "bytes, but shape and itemsize describe 4096 elements")
    with pytest.raises(BufferError, match=lie):
        bufferext.CPUBuffer(3, "f8").copy_from_host(liar)
    with pytest.raises(BufferError, match=lie):
        bufferext.CPUBuffer._from_pickle(liar, (3,), "<f8", False)
    assert liar.exports == 0


def test_an_array_interface_over_a_strided_answer_is_refused(
        c99: ModuleType) -> None:
    # numpy's array interface asks its 'data' buffer for one block of
    # bytes: the liar's reversed items would be read 24 bytes past it
    x = reversed_doubles(c99)

    class Interface:
        __array_interface__ = {"version": 3, "shape": (4,), "typestr": "<f8",
                               "data": x}

    with pytest.raises(BufferError, match=re.escape(
            "__array_interface__: 'data', a 'Configurable', is not one "
            "contiguous block of memory: ")):
        bufferext.as_buffer(Interface())
    assert x.exports == 0


def test_the_cuda_array_interface_of_suboffsets_is_absent(
        c99: ModuleType) -> None:
    # the two items at buf are pointers (suboffsets 0): CAI has no word for
    # them, and a consumer would read the pointers as float64
    x = c99.Configurable(64, 16, 8, 1, "d", shape=(2,), strides=(8,),
                         suboffsets=(0,), device="bufferext.cuda")
    adapter = bufferext.as_buffer(x, readonly=True)
    assert not hasattr(adapter, "__cuda_array_interface__")
    with pytest.raises(AttributeError, match=re.escape(
            "__cuda_array_interface__: the buffer has suboffsets")):
        adapter.__cuda_array_interface__
    del adapter
    assert x.exports == 0


# ---- issue 12's foreign exports, refused or repaired (from test_boundary_c.py)

@pytest.mark.parametrize("readonly", [True, False, None])
def test_ctypes_array_with_null_strides(readonly: object) -> None:
    out = run_child(f"""
        import ctypes, bufferext, numpy as np
        arr = (ctypes.c_double * 4)(1, 2, 3, 4)
        a = bufferext.as_buffer(arr, readonly={readonly!r})
        if {readonly!r} is None:            # an exporter is returned as it is
            assert a is arr
            a = bufferext.as_buffer(arr, readonly=True)
        print(a.shape, a.strides, np.frombuffer(a, "<f8").tolist())
        with bufferext.get_buffer(arr) as v:
            print(v.shape, v.strides, v.itemsize)
    """)
    assert out.splitlines() == ["(4,) (8,) [1.0, 2.0, 3.0, 4.0]",
                                "(4,) (8,) 8"]


def test_ctypes_2d_array_gets_c_strides() -> None:
    arr = ((ctypes.c_int16 * 3) * 2)()
    a = bufferext.as_buffer(arr, readonly=True)
    assert a.shape == (2, 3) and a.strides == (6, 2)


@pytest.mark.parametrize("make", [
    "np.zeros(3, np.dtype([]))", "np.zeros(3, 'V0')",
    "(type('E', (ctypes.Structure,), {'_fields_': []}) * 3)()"])
def test_zero_itemsize_is_refused(make: str) -> None:
    out = run_child(f"""
        import ctypes, bufferext, numpy as np
        x = {make}
        for door in (lambda: bufferext.get_buffer(x),
                     lambda: bufferext.as_buffer(x, readonly=True)):
            try:
                door()
            except (BufferError, ValueError, TypeError) as e:
                print(type(e).__name__, e)
            else:
                print("accepted")
    """)
    lines = out.splitlines()
    assert len(lines) == 2 and "accepted" not in out, out
    assert "itemsize" in lines[0], lines[0]


def test_len_refusal_counts_bytes_against_bytes(c99: ModuleType) -> None:
    # before: "len = 32, but shape and itemsize 8 describe 32 elements"
    # (bytes against elements, issue 25)
    exporter = c99.ExporterFull(liar="len_past_shape")
    with pytest.raises(BufferError) as info:
        bufferext.get_buffer(exporter)
    found = re.search(r"len = (\d+) bytes, but shape and itemsize describe "
                      r"(\d+) elements of (\d+) bytes = (\d+) bytes",
                      str(info.value))
    assert found, str(info.value)
    length, items, itemsize, described = map(int, found.groups())
    assert length == 1 << 20
    assert items * itemsize == described != length


@pytest.mark.parametrize("device", ["DEVICE_CUDA", "DEVICE_VE"])
@pytest.mark.parametrize("liar", ["info_null", "info_version"])
def test_device_name_without_its_info_is_refused(c99: ModuleType,
                                                 device: str,
                                                 liar: str) -> None:
    # before: as_buffer(x, readonly=True) copied the info from NULL
    exporter = c99.ExporterFull(device=getattr(c99, device), liar=liar)
    for door in (lambda: bufferext.get_buffer(exporter),
                 lambda: bufferext.as_buffer(exporter, readonly=True)):
        with pytest.raises(BufferError, match="device_info"):
            door()
    assert exporter.exports == 0


@pytest.mark.parametrize("liar, message", [
    ("ndim_65", "ndim = 65 is outside"), ("ndim_negative", "ndim = -1"),
    ("itemsize_0", "itemsize = 0"), ("len_past_shape", "len = 1048576"),
    ("shape_null", "shape is NULL"), ("format_long", "format is not"),
    # broken C conventions (CPython would say SystemError); the exporter's
    # own exception stays attached as the context
    ("silent_fail", "getbuffer failed without setting an exception"),
    ("error_set", "getbuffer succeeded with an exception set"),
])
def test_gate_names_the_field_and_value(c99: ModuleType, liar: str,
                                        message: str) -> None:
    exporter = c99.ExporterFull(liar=liar)
    for door in (lambda: bufferext.get_buffer(exporter),
                 lambda: bufferext.as_buffer(exporter, readonly=True)):
        with pytest.raises(BufferError, match=message) as info:
            door()
        assert "ExporterFull" in str(info.value)
        if liar == "error_set":
            assert isinstance(info.value.__context__, RuntimeError)
    assert exporter.exports == 0
    # the refused export is released before the refusal is raised: an
    # exporter's release code (Python code, for some) never runs with an
    # exception pending (issue 21)
    assert exporter.released_with_error == 0


def test_read_only_answer_to_a_writable_request_is_refused(
        c99: ModuleType) -> None:
    exporter = c99.ExporterFull(liar="readonly")
    with pytest.raises(BufferError, match=r"readonly = 1 although "
                                          r"PyBUF_WRITABLE was requested"):
        bufferext.get_buffer(exporter, F.FULL | F.DEVICE)
    with pytest.raises(BufferError, match="ExporterFull.*readonly = 1"):
        bufferext.as_buffer(exporter, readonly=False)
    # asked for read-only access, read-only memory is the right answer
    with bufferext.get_buffer(exporter) as view:
        assert view.readonly
    assert bufferext.as_buffer(exporter, readonly=True).readonly
    assert exporter.exports == 0


def test_zero_dim_export_with_suboffsets(c99: ModuleType) -> None:
    """A 0-d export has no dimension to offset: a non-NULL (empty)
    suboffsets array must not send CPython's copy down the indirect path."""
    x = c99.Configurable(block_size=8, ndim=0, itemsize=8, format="d",
                         shape=(), strides=(), suboffsets=(), len=8)
    with bufferext.get_buffer(x) as view:
        assert view.ndim == 0 and len(view.tobytes()) == 8
    adapter = bufferext.as_buffer(x, readonly=True)
    assert bytes(memoryview(adapter)) == bytes(8)
    del adapter
    gc.collect()
    assert x.exports == 0


def test_empty_array_with_huge_sizes_and_null_strides(
        c99: ModuleType) -> None:
    """A 0 in the shape makes the other sizes unbounded: C strides computed
    for them must not overflow, and the re-export must stay valid."""
    shape = (0,) + (1 << 20,) * 4
    x = c99.Configurable(block_size=64, ndim=5, itemsize=1,
                         shape=shape, strides=None, len=0)
    with bufferext.get_buffer(x) as v:
        assert v.shape == shape and v.nbytes == 0
        assert v.strides[-1] == 1 and v.strides[0] == 0
        assert v.tobytes() == b""
    a = bufferext.as_buffer(x, readonly=True)
    with bufferext.get_buffer(a) as v:
        assert v.shape == shape and v.nbytes == 0 and v.tobytes() == b""


def test_empty_array_strides_are_not_bounded(c99: ModuleType) -> None:
    x = c99.Configurable(
        block_size=64, ndim=2, itemsize=8, shape=(3, 0),
        strides=(1 << 62, -(1 << 62)), len=0, format="d")
    with bufferext.get_buffer(x) as v:
        assert v.shape == (3, 0) and v.nbytes == 0
    with bufferext.get_buffer(bufferext.as_buffer(x, readonly=True)) as v:
        assert v.strides == (1 << 62, -(1 << 62))


def test_dlpack_rereads_the_device_info_version(c99: ModuleType) -> None:
    """The exporter owns device_info and may change it after the gate read
    it: the DLPack export of a view checks the version again."""
    x = c99.Configurable(block_size=32, len=32, itemsize=8, ndim=1,
                         format="d", shape=(4,), device="bufferext.cuda")
    with bufferext.get_buffer(x) as view:
        assert view.device == "bufferext.cuda"
        x.info_version = 2 << 16
        with pytest.raises(BufferError, match=r"BufferView: CUDA "
                           r"device_info version 0x20000 is not understood"):
            view.__dlpack__(max_version=(1, 0), stream=-1)
    assert x.exports == 0


# ---- struct's standard sizes: an edge rule (from test_edges.py) ------------

@pytest.mark.parametrize("fmt, itemsize, good", [
    ("<l", 4, True), ("<l", 8, False), ("l", 8, True), ("=q", 8, True),
    ("!h", 2, True), ("!h", 4, False), ("<?", 1, True), ("<e", 2, True),
    ("<Zd", 16, True), ("=i", 4, True), ("=i", 8, False), ("<L", 4, True),
])
def test_struct_formats_with_standard_sizes(c99: ModuleType, fmt: str,
                                            itemsize: int,
                                            good: bool) -> None:
    # a byte-order prefix gives struct's standard sizes ('<l' is 4 bytes
    # where the native 'l' is 8): an exporter's itemsize must match
    exporter = c99.Configurable(4 * itemsize, 4 * itemsize, itemsize, 1,
                                fmt, shape=(4,))
    if good:
        with bufferext.get_buffer(exporter) as view:
            assert view.itemsize == itemsize and view.format == fmt
    else:
        with pytest.raises(BufferError, match=f"format '{fmt}' does not "
                                              f"describe items of itemsize"):
            bufferext.get_buffer(exporter)


@pytest.mark.parametrize("fmt, itemsize, dtype, good", [
    ("<l", 4, "int32", True), ("<l", 8, "int64", False),
    ("l", 8, "int64", True), ("=i", 8, "int64", False),
    ("!h", 4, "int32", False), ("<e", 2, "float16", True),
])
def test_copies_read_struct_standard_sizes(c99: ModuleType, fmt: str,
                                           itemsize: int, dtype: str,
                                           good: bool) -> None:
    # the same rule for a copy's source, which goes through the gate too: a
    # format that contradicts the exporter's itemsize is refused by name,
    # not read as numpy would read the spelling ('<l' as 8 bytes)
    exporter = c99.Configurable(4 * itemsize, 4 * itemsize, itemsize, 1,
                                fmt, shape=(4,))
    buf = bufferext.CPUBuffer(4, dtype)
    assert buf.itemsize == itemsize
    if good:
        buf.copy_from_host(exporter)
    else:
        with pytest.raises(BufferError, match=re.escape(
                f"exported an invalid buffer: format '{fmt}' does not "
                f"describe items of itemsize = {itemsize} bytes")):
            buf.copy_from_host(exporter)
    assert exporter.exports == 0


@pytest.mark.parametrize("fmt, itemsize, good", [
    ("B", 1, True), ("<B", 1, True), ("=B", 1, True), ("@B", 1, True),
    ("B", 4, False), ("b", 1, False),
])
def test_copies_take_unsigned_bytes_as_raw_in_any_byte_order(
        c99: ModuleType, fmt: str, itemsize: int, good: bool) -> None:
    # raw bytes copy into a buffer of any dtype, however their format
    # spells them; a 'B' whose items are 4 bytes is no byte
    exporter = c99.Configurable(8, 8, itemsize, 1, fmt, shape=(8 // itemsize,))
    buf = bufferext.CPUBuffer(2, "float32")
    if good:
        buf.copy_from_host(exporter)
    elif itemsize != 1:                 # the gate's: no such item
        with pytest.raises(BufferError, match=re.escape(
                f"format '{fmt}' does not describe items of itemsize = "
                f"{itemsize} bytes")):
            buf.copy_from_host(exporter)
    else:                               # a typed item of another type
        with pytest.raises(ValueError, match=re.escape(
                f"source format '{fmt}' with {itemsize}-byte items")):
            buf.copy_from_host(exporter)
    assert exporter.exports == 0


def test_cuda_array_interface_of_a_format_it_cannot_name(c99: ModuleType) -> None:
    """An adapter of CUDA memory describes it by the format read by
    struct's rules ('=l': 4-byte ints), and has no interface at all for a
    format the interface has no typestr for: AttributeError, so that
    hasattr() says False, as for host memory."""
    def adapter(fmt: str, itemsize: int) -> Any:
        x = c99.Configurable(block_size=16, len=16, itemsize=itemsize,
                             ndim=1, format=fmt, shape=(16 // itemsize,),
                             device="bufferext.cuda")
        return bufferext.as_buffer(x, readonly=True)    # an adapter of it

    native = "<" if sys.byteorder == "little" else ">"
    assert adapter("=l", 4).__cuda_array_interface__["typestr"] == \
        native + "i4"
    odd = adapter("c", 1)
    assert not hasattr(odd, "__cuda_array_interface__")
    with pytest.raises(AttributeError, match=re.escape(
            "__cuda_array_interface__: buffer format 'c' names no type")):
        odd.__cuda_array_interface__


# ---- our own exports skip the gate: whose export it was, not the type now --

def test_our_own_export_is_taken_as_made() -> None:
    # an export our code made is valid by construction: get_buffer of a
    # CPUBuffer (the gate would accept it too; this holds its fields)
    x = bufferext.CPUBuffer((2, 3), "i4")
    with bufferext.get_buffer(x) as view:
        assert (view.shape, view.strides, view.format) == ((2, 3), (12, 4),
                                                           "i")
    assert x.exports == 0


@pytest.mark.skipif(not hasattr(memoryview, "_from_flags"),
                    reason="a Python __buffer__ is 3.12+")
def test_an_export_made_while_the_getbuffer_changed_is_still_checked(
        c99: ModuleType) -> None:
    # The subclass's Python __buffer__ hands over a lying export and, while
    # it runs, deletes itself, which gives the class CPUBuffer's getbuffer
    # back: after the call the type's slot is ours, but the export was not
    # made by our code (its view does not point at the object's layout), so
    # the gate reads it
    liar = c99.Configurable(16, 16, 8, 1, "i", shape=(2,), strides=(8,))

    class Sub(bufferext.CPUBuffer):
        def __buffer__(self, flags: int) -> memoryview:
            del Sub.__buffer__
            return memoryview(liar)

    s = Sub(2)
    with pytest.raises(BufferError, match="format 'i' does not describe "
                                          "items of itemsize = 8 bytes"):
        bufferext.get_buffer(s, F.FULL_RO)
    assert liar.exports == 0
    with bufferext.get_buffer(s, F.FULL_RO) as view:   # ours from now on
        assert view.format == "d" and view.obj is s
