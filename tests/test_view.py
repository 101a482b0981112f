"""BufferView: get_buffer() on CPU exporters, compared with memoryview."""

from __future__ import annotations

import array
import copy
import gc
import os
import pickle
import re
import sys
import types
import weakref

import numpy as np
import pytest

import bufferext
from bufferext import BufferFlags as F
from bufferext import _bridges
from _helpers import BRIDGED_ONLY, run_child
from bufferext import BufferView, get_buffer


def cpu_exporters():
    """(id, factory) of CPU exporters with interesting layouts."""
    return [
        ("bytes", lambda: b"hello world"),
        ("bytearray", lambda: bytearray(b"abcdef")),
        ("empty-bytes", lambda: b""),
        ("array-d", lambda: array.array("d", [1.5, 2.5, 3.5])),
        ("ndarray-2d", lambda: np.arange(12, dtype=np.int32).reshape(3, 4)),
        ("ndarray-F", lambda: np.asfortranarray(
            np.arange(12.0).reshape(3, 4))),
        ("ndarray-strided", lambda: np.arange(20.0).reshape(4, 5)[::2, 1::2]),
        ("ndarray-0d", lambda: np.array(7, dtype=np.int16)),
        ("ndarray-empty", lambda: np.zeros((3, 0, 2), dtype=np.float32)),
        ("ndarray-readonly", lambda: _readonly(np.arange(5, dtype=np.uint8))),
        ("ndarray-bool", lambda: np.array([True, False, True])),
        ("ndarray-complex", lambda: np.arange(3) * (1 + 1j)),
        ("memoryview-slice", lambda: memoryview(bytearray(range(10)))[1::3]),
        ("memoryview-cast", lambda: memoryview(bytearray(24)).cast(
            "i", (2, 3))),
        ("CPUBuffer", lambda: bufferext.CPUBuffer((2, 3), "float32")),
        ("CPUBuffer-ro", lambda: bufferext.CPUBuffer(4, "<i8",
                                                     readonly=True)),
    ]


def _readonly(a):
    a.flags.writeable = False
    return a


EXPORTERS = cpu_exporters()
EXPORTER_IDS = [name for name, _ in EXPORTERS]


@pytest.mark.parametrize("make", [f for _, f in EXPORTERS], ids=EXPORTER_IDS)
def test_attributes_match_memoryview(make):
    obj = make()
    with memoryview(obj) as mv, get_buffer(obj) as view:
        assert isinstance(view, BufferView)
        assert view.obj is obj
        assert view.nbytes == mv.nbytes
        assert view.itemsize == mv.itemsize
        assert view.format == mv.format
        assert view.ndim == mv.ndim
        assert view.shape == mv.shape
        assert view.strides == mv.strides
        assert view.suboffsets is None
        assert view.readonly is mv.readonly
        assert view.c_contiguous is mv.c_contiguous
        assert view.f_contiguous is mv.f_contiguous
        assert view.device is None
        assert view.device_info is None
        assert view.request_flags == F.FULL_RO | F.DEVICE
        assert view.released is False
        assert view.tobytes() == mv.tobytes()
        if mv.nbytes:
            assert view.ptr == _address(mv)


def _address(mv):
    """Address of the first byte of a memoryview (via numpy, zero-copy)."""
    arr = np.asarray(mv) if mv.format not in ("?",) else np.frombuffer(
        mv, dtype=bool)
    return arr.__array_interface__["data"][0]


def test_ptr_equals_numpy_data_pointer():
    arr = np.arange(10.0)
    with get_buffer(arr) as view:
        assert view.ptr == arr.ctypes.data
    buf = bufferext.CPUBuffer(8)
    with get_buffer(buf) as view:
        assert view.ptr == buf.ptr


def test_flags_device_for_cpubuffer_and_zero_for_legacy():
    buf = bufferext.CPUBuffer(3)
    with get_buffer(buf) as view:
        assert view.flags == F.DEVICE   # explicit CPU answer
        assert view.device is None
        assert view.device_info is None
    with get_buffer(buf, F.FULL_RO) as view:   # no DEVICE requested
        assert view.flags == 0
    for obj in (b"abc", bytearray(3), np.zeros(3), array.array("b", [1])):
        with get_buffer(obj) as view:
            assert view.flags == 0
            assert view.device is None
            assert view.device_info is None


def test_default_flags_is_full_ro_device():
    with get_buffer(b"x") as view:
        assert view.request_flags == F.FULL_RO | F.DEVICE
    with get_buffer(b"x", flags=F.SIMPLE) as view:
        assert view.request_flags == 0


def test_writable_request():
    with get_buffer(bytearray(4), F.WRITABLE) as view:
        assert view.readonly is False
    with pytest.raises(BufferError):
        get_buffer(b"abcd", F.WRITABLE)
    buf = bufferext.CPUBuffer(4, readonly=True)
    with pytest.raises(BufferError, match="read-only"):
        get_buffer(buf, F.WRITABLE | F.DEVICE)
    assert buf.exports == 0


def test_simple_request_on_typed_exporter_is_bytes():
    arr = np.arange(3, dtype=np.float64)
    with get_buffer(arr, F.SIMPLE) as view:
        assert view.shape == (24,)
        assert view.ndim == 1
        assert view.itemsize == 1
        assert view.format == "B"
        assert view.strides == (1,)


def test_nd_request_without_strides_gets_c_strides():
    arr = np.arange(6, dtype=np.int16).reshape(2, 3)
    with get_buffer(arr, F.ND | F.FORMAT) as view:
        assert view.shape == (2, 3)
        assert view.strides == (6, 2)
        assert view.format == "h"


@pytest.mark.parametrize("make", [
    lambda: bufferext.CPUBuffer(3, "f4"), lambda: np.arange(3, dtype="f4")])
def test_a_view_acquired_without_format_knows_no_format(make: Any) -> None:
    """Items of 4 bytes with no format asked for: the format is unknown
    (None), and what needs one is refused by name instead of reading the
    items as the bytes 'B' would say they are."""
    source = make()
    with get_buffer(source, F.ND) as view:
        assert (view.format, view.itemsize, view.shape) == (None, 4, (3,))
        assert "format=None" in repr(view)
        for needs_a_format in (memoryview, get_buffer, np.from_dlpack,
                               lambda v: get_buffer(v, F.ND | F.FORMAT)):
            with pytest.raises(BufferError, match=r"the item format is "
                               r"unknown \(the view was acquired without "
                               r"PyBUF_FORMAT\)$"):
                needs_a_format(view)
        with get_buffer(view, F.ND) as again:     # what it was asked for
            assert (again.format, again.itemsize) == (None, 4)
    with get_buffer(np.arange(3, dtype="u1"), F.ND) as view:
        assert view.format == "B"                 # bytes: 'B' is the truth
        assert memoryview(view).tolist() == [0, 1, 2]


def test_zero_dim_export_stays_zero_dim():
    arr = np.array(3.5)
    with get_buffer(arr) as view:
        assert view.ndim == 0
        assert view.shape == ()
        assert view.strides == ()
        assert view.format == "d"
        assert view.itemsize == 8
        assert view.tobytes() == arr.tobytes()
        with view.memoryview() as mv:
            assert mv.shape == () and mv.format == "d"


def test_non_buffer_type_error():
    for obj in (None, 1, "str", object()):
        with pytest.raises(TypeError):
            get_buffer(obj)


def test_non_contiguous_requests_fail_like_the_exporter():
    from _helpers import plain_get_buffer
    arr = np.arange(20.0).reshape(4, 5)[:, ::2]
    with pytest.raises(Exception) as plain:
        plain_get_buffer(arr, F.C_CONTIGUOUS)
    # numpy raises ValueError here, not BufferError: passed through as is
    with pytest.raises(plain.type, match="C-contiguous"):
        get_buffer(arr, F.C_CONTIGUOUS | F.DEVICE)
    with get_buffer(arr, F.STRIDES | F.FORMAT) as view:
        assert view.c_contiguous is False


# ---- lifetime ----------------------------------------------------------------

def test_context_manager_releases():
    ba = bytearray(b"abc")
    with get_buffer(ba) as view:
        with pytest.raises(BufferError):
            ba.append(1)     # exported: bytearray cannot resize
    assert view.released is True
    ba.append(1)             # released: resizing works again


def test_release_twice_harmless():
    view = get_buffer(b"abc")
    view.release()
    view.release()
    assert view.released is True
    assert repr(view) == "<released BufferView>"


ATTRIBUTES = ["obj", "ptr", "nbytes", "itemsize", "format", "ndim", "shape",
              "strides", "suboffsets", "readonly", "c_contiguous",
              "f_contiguous", "request_flags", "flags", "device",
              "device_info"]


@pytest.mark.parametrize("name", ATTRIBUTES)
def test_use_after_release_attribute(name):
    view = get_buffer(bufferext.CPUBuffer(2))
    view.release()
    with pytest.raises(ValueError, match="released"):
        getattr(view, name)


@pytest.mark.parametrize("call", [
    lambda v: v.tobytes(),
    lambda v: v.memoryview(),
    lambda v: v.__dlpack__(),
    lambda v: v.__dlpack__(max_version=(1, 0)),
    lambda v: v.__dlpack_device__(),
    lambda v: v.__enter__(),
], ids=["tobytes", "memoryview()", "__dlpack__", "__dlpack__-versioned",
        "__dlpack_device__", "__enter__"])
def test_use_after_release_method(call):
    view = get_buffer(np.arange(4.0))
    view.release()
    with pytest.raises(ValueError, match="released"):
        call(view)


@pytest.mark.parametrize("call", [
    lambda v: memoryview(v),
    lambda v: get_buffer(v),
    lambda v: np.frombuffer(v),
], ids=["memoryview(v)", "get_buffer(v)", "np.frombuffer(v)"])
def test_buffer_request_after_release(call):
    """A buffer request is the exporter's to refuse: BufferError."""
    view = get_buffer(np.arange(4.0))
    view.release()
    with pytest.raises(BufferError, match="released"):
        call(view)


def test_use_after_release_method_raises_value_error():
    view = get_buffer(b"abc")
    view.release()
    for call in (view.tobytes, view.memoryview, view.__dlpack__,
                 view.__dlpack_device__, view.__enter__):
        with pytest.raises(ValueError):
            call()


def test_with_on_released_view():
    view = get_buffer(b"abc")
    view.release()
    with pytest.raises(ValueError):
        with view:
            pass


def test_with_releases_and_lets_the_exception_through():
    buf = bufferext.CPUBuffer(4)
    with pytest.raises(KeyError):
        with get_buffer(buf) as view:
            assert buf.exports == 1
            raise KeyError("inside")
    assert buf.exports == 0 and view.released


def test_exit_takes_exactly_three_arguments():
    view = get_buffer(b"abc")
    for args in [(), (None,), (None, None, None, None)]:
        with pytest.raises(TypeError, match="exactly 3 arguments"):
            view.__exit__(*args)
    with pytest.raises(TypeError, match="keyword"):
        view.__exit__(None, None, traceback=None)
    assert not view.released
    assert view.__exit__(None, None, None) is None
    assert view.released


def test_enter_takes_no_argument():
    view = get_buffer(b"abc")
    with pytest.raises(TypeError, match="no arguments"):
        view.__enter__(1)
    with pytest.raises(TypeError, match="no keyword arguments|no arguments"):
        view.__enter__(x=1)
    assert view.__enter__() is view


@pytest.mark.parametrize("name, text, bound_text", [
    ("__enter__", "(self, /)", "()"),
    ("__exit__", "(self, exc_type, exc_value, traceback, /)",
     "(exc_type, exc_value, traceback, /)"),
])
def test_context_method_signatures(name, text, bound_text):
    import inspect

    method = getattr(BufferView, name)
    assert str(inspect.signature(method)) == text
    bound = getattr(get_buffer(b"x"), name)
    assert str(inspect.signature(bound)) == bound_text
    assert method.__name__ == bound.__name__ == name
    assert method.__qualname__ == f"BufferView.{name}"
    assert method.__doc__ and method.__doc__ == bound.__doc__


# BufferView's __enter__/__exit__ bind without an allocation where the with
# statement binds them on every use (before 3.14: Modules/fastmethod.h); from
# 3.14 on they are the plain method descriptors
FAST_CONTEXT_METHODS = sys.version_info < (3, 14)


@pytest.mark.parametrize("name", ["__enter__", "__exit__"])
def test_fast_context_methods_only_where_they_pay(name):
    kind = type(BufferView.__dict__[name])
    assert (kind is not types.MethodDescriptorType) == FAST_CONTEXT_METHODS


def test_context_methods_bind_like_methods():
    """__enter__/__exit__ behave as bound builtin methods do, fast or not."""
    buf = bufferext.CPUBuffer(4)
    view = get_buffer(buf)
    enter, exit_ = view.__enter__, view.__exit__
    assert enter.__self__ is view and exit_.__self__ is view
    if FAST_CONTEXT_METHODS:
        assert isinstance(enter.__wrapped__, types.BuiltinMethodType)
        assert enter.__wrapped__.__self__ is view
    else:
        assert isinstance(enter, types.BuiltinMethodType)
    assert enter == view.__enter__ and hash(enter) == hash(view.__enter__)
    assert enter != exit_ and enter != get_buffer(buf).__enter__
    assert repr(enter).startswith("<built-in method __enter__ of "
                                  "bufferext.BufferView object at 0x")
    assert repr(BufferView.__exit__) == \
        "<method '__exit__' of 'bufferext.BufferView' objects>"
    assert BufferView.__enter__(view) is view
    with pytest.raises(TypeError):
        BufferView.__enter__(b"not a view")
    with pytest.raises(TypeError):
        BufferView.__dict__["__exit__"].__get__(b"not a view", bytes)
    # the bound method keeps its view alive, as a builtin method does
    ref = weakref.ref(view)
    del view
    gc.collect()
    assert ref() is not None and buf.exports == 1
    exit_(None, None, None)
    assert buf.exports == 0
    del enter, exit_
    gc.collect()
    assert ref() is None


def test_context_method_in_a_cycle_is_collected():
    """The bound objects are GC-tracked: a cycle through one is freed."""
    class Data(bytearray):
        pass

    data = Data(b"abc")
    view = get_buffer(data)
    data.exit = view.__exit__      # data -> bound -> view -> data
    ref = weakref.ref(view)
    del view, data
    gc.collect()
    assert ref() is None


def test_release_returns_the_export():
    buf = bufferext.CPUBuffer(4)
    view = get_buffer(buf)
    assert buf.exports == 1
    view.release()
    assert buf.exports == 0
    buf.close()


def test_dropping_the_view_releases():
    buf = bufferext.CPUBuffer(4)
    view = get_buffer(buf)
    assert buf.exports == 1
    del view
    gc.collect()
    assert buf.exports == 0


def test_view_keeps_exporter_alive():
    buf = bufferext.CPUBuffer(4)
    ref = weakref.ref(buf)
    view = get_buffer(buf)
    del buf
    gc.collect()
    assert ref() is not None
    assert view.obj is ref()
    view.release()
    gc.collect()
    assert ref() is None


def test_weakref_to_view():
    view = get_buffer(b"x")
    ref = weakref.ref(view)
    assert ref() is view
    del view
    gc.collect()
    assert ref() is None


# ---- re-export -------------------------------------------------------------

def test_reexport_memoryview_zero_copy():
    ba = bytearray(b"abcdef")
    view = get_buffer(ba, F.FULL | F.DEVICE)
    mv = memoryview(view)
    assert mv.obj is view
    assert mv.tobytes() == b"abcdef"
    mv[0] = ord("X")
    assert ba[0] == ord("X")
    with pytest.raises(BufferError, match="export"):
        view.release()
    assert view.released is False
    mv.release()
    view.release()
    assert view.released is True


def test_memoryview_method_and_release_while_alive():
    arr = np.arange(6, dtype=np.int32).reshape(2, 3)
    view = get_buffer(arr)
    mv = view.memoryview()
    assert mv.shape == (2, 3) and mv.format == "i"
    assert mv.readonly is view.readonly is False   # numpy exports writable
    assert mv.tolist() == arr.tolist()
    with pytest.raises(BufferError):
        view.release()
    with pytest.raises(BufferError):
        view.__exit__(None, None, None)
    mv.release()
    view.release()


def test_reexport_numpy_zero_copy():
    arr = np.arange(6.0)
    with get_buffer(arr, F.FULL | F.DEVICE) as view:
        again = np.asarray(view)
        assert again.ctypes.data == arr.ctypes.data
        again[1] = 42
        assert arr[1] == 42
        del again


def test_reexport_honours_readonly():
    with get_buffer(b"abc") as view:
        with pytest.raises(BufferError, match="read-only"):
            get_buffer(view, F.WRITABLE)


def test_nested_get_buffer_on_view():
    buf = bufferext.CPUBuffer((2, 2), "u1")
    with get_buffer(buf) as outer:
        with get_buffer(outer) as inner:
            assert inner.obj is outer
            assert inner.shape == (2, 2)
            assert inner.flags == F.DEVICE   # BufferView answers DEVICE too
            assert inner.device is None
            with pytest.raises(BufferError):
                outer.release()
        outer_exports = buf.exports
    assert outer_exports == 1
    assert buf.exports == 0


def test_tobytes_non_contiguous():
    arr = np.arange(20, dtype=np.uint8).reshape(4, 5)[::2, 1::2]
    with get_buffer(arr) as view:
        assert view.tobytes() == arr.tobytes()
    arr_f = np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3))
    with get_buffer(arr_f) as view:
        assert view.tobytes() == arr_f.tobytes(order="C")


# ---- repr --------------------------------------------------------------------

def test_repr():
    with get_buffer(np.zeros((2, 3), dtype=np.float32)) as view:
        assert repr(view) == ("<BufferView of numpy.ndarray: shape=(2, 3) "
                              "format='f' device=None>")
    with get_buffer(b"abc") as view:
        assert repr(view) == ("<BufferView of bytes: shape=(3,) format='B' "
                              "device=None readonly>")


@pytest.mark.parametrize("device", ["bufferext.cuda", "bufferext.ve",
                                    "vendor.gpu"])
def test_repr_device_is_view_device(c99, device):
    """repr shows ``device=`` + repr(view.device): a device name quoted, as
    None is for CPU memory (above)."""
    x = c99.ExporterFull(3, device=device)
    with get_buffer(x) as view:
        assert view.device == device
        assert f" device='{device}'" in repr(view)
        assert repr(view).endswith(f" device={view.device!r}>")


def test_buffer_view_cannot_be_instantiated_directly():
    with pytest.raises(TypeError):
        BufferView()
    with pytest.raises(TypeError):
        BufferView.__new__(BufferView)


# ---- reference counts --------------------------------------------------------

def test_refcounts_stable_over_loops():
    obj = bytearray(b"abc")
    arr = np.arange(5.0)
    buf = bufferext.CPUBuffer(5)
    before = [sys.getrefcount(o) for o in (obj, arr, buf)]
    for _ in range(2000):
        with get_buffer(obj) as view:
            view.shape, view.tobytes()
        with get_buffer(arr) as view:
            view.strides, view.format
        view = get_buffer(buf)
        mv = view.memoryview()
        mv.release()
        view.release()
    after = [sys.getrefcount(o) for o in (obj, arr, buf)]
    assert before == after
    assert buf.exports == 0


def test_refcounts_stable_on_error_paths():
    obj = bytes(bytearray(b"abc"))    # this call's own, not the constant
                                      # that other threads' calls share
    before = sys.getrefcount(obj)
    for _ in range(2000):
        with pytest.raises(BufferError):
            get_buffer(obj, F.WRITABLE)
    assert sys.getrefcount(obj) == before


# ---- Python code inside a reader (issue 21) ---------------------------------
# Before: a getter (shape, strides, format, repr, _raw) allocated its result
# while reading the exporter's fields; a finalizer fired by that allocation
# could release the view and resize or drop its exporter, and the getter
# read freed memory (ASan's job in .ci/quality.sh reports it).  Readers now
# pin the view: such a release is refused while they run.

@pytest.mark.parametrize("attr", ["shape", "strides", "format", "suboffsets",
                                  "repr", "_raw", "tobytes", "device_info"])
def test_view_readers_are_pinned_against_a_finalizer(attr):
    out = run_child(f"""
        import bufferext, _hooks
        b = bufferext.CPUBuffer((2, 3, 4), 'u1')
        v = bufferext.get_buffer(b)
        def drop():
            v.release()
            b.resize((5,))
        read = {{'repr': repr, '_raw': lambda v: v._raw(),
                'tobytes': lambda v: v.tobytes()}}.get(
            {attr!r}, lambda v: getattr(v, {attr!r}))
        good = released = 0
        with _hooks.in_gc(drop, times=200) as fired:
            for _ in range(200):
                junk = [[], []]         # collections also between reads
                try:
                    got = str(read(v))
                except ValueError:
                    released += 1
                    continue
                good += 1
                assert '(5,)' not in got, got
        kinds = {{type(e).__name__ for e in fired.errors}}
        fired_ok = fired.count > 0 or not _hooks.GC_FIRES
        print(fired_ok, good + released == 200, kinds <= {{'BufferError'}})
        """)
    assert out.split() == ["True", "True", "True"]


# ---- owners and freelists ----------------------------------------------------

@pytest.mark.parametrize("name", ["__enter__", "__exit__"])
@pytest.mark.parametrize("base", [object, bytearray, int])
def test_fast_context_methods_bind_only_to_views(name, base):
    # BufferView's __enter__/__exit__ are fast methods (Modules/fastmethod.c)
    # that call the C function with the object they bind to: copied into
    # another class, binding must fail as CPython's own descriptors do,
    # instead of handing a stranger to BufferView's code
    class Stranger(base):
        # the other half of the protocol, harmless, so that the with
        # statement reaches the copied one on every version
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False
    setattr(Stranger, name, bufferext.BufferView.__dict__[name])
    with pytest.raises(TypeError, match="BufferView"):
        getattr(Stranger(), name)
    with pytest.raises(TypeError, match="BufferView"):
        with Stranger():
            pass


def test_many_views_and_bound_methods_dying_at_once():
    # the freelists keep 16 dead objects each: more than that dying at once
    # must free the rest, not overfill the list
    x = bufferext.CPUBuffer((4,), "u1")
    for _ in range(3):
        views = [bufferext.get_buffer(x) for _ in range(100)]
        enters = [v.__enter__ for v in views]
        exits = [v.__exit__ for v in views]
        assert x.exports == 100
        del enters, exits
        for v in views:
            with v:
                assert v.nbytes == 4
        del views
        assert x.exports == 0
    views = [bufferext.get_buffer(x) for _ in range(40)]
    assert [v.shape for v in views] == [(4,)] * 40 and not any(
        v.released for v in views)


@pytest.mark.parametrize("ask", [get_buffer, bufferext.supported_flags],
                         ids=["get_buffer", "supported_flags"])
@pytest.mark.parametrize("make, what", BRIDGED_ONLY)
def test_a_request_of_a_bridged_object_points_at_as_buffer(make, what, ask):
    # the most common first mistake: get_buffer(torch_tensor), or asking
    # supported_flags(torch_tensor) first
    obj = make()
    with pytest.raises(TypeError) as info:
        ask(obj)
    assert str(info.value) == (
        f"{ask.__name__}: a '{type(obj).__name__}' object is not a buffer "
        f"exporter; it speaks {what}: bufferext.as_buffer(obj) bridges it "
        "into an extended buffer")
    with get_buffer(bufferext.as_buffer(obj)) as view:   # the advice works
        assert view.tobytes() == obj.array.tobytes()
    with pytest.raises(TypeError) as info:
        ask(object())                       # nothing to bridge: no hint
    assert "as_buffer" not in str(info.value)


def test_get_buffer_hint_is_as_buffers_list():
    # get_buffer's hint (Modules/view.c, a C table) and as_buffer's list
    # (_bridges.BRIDGED, which check's hint uses too) are one list written
    # twice: the same protocols, names and order.  An object speaking
    # BRIDGED[k:] is named for BRIDGED[k], the first that as_buffer reads.
    assert list(_bridges._ORDER[-3:]) == [
        name for name, _ in _bridges.BRIDGED[3:]]
    for k, (name, what) in enumerate(_bridges.BRIDGED):
        speaks = type("Speaks", (), {attr: property(lambda self: {})
                                     for attr, _ in _bridges.BRIDGED[k:]})
        with pytest.raises(TypeError) as info:
            get_buffer(speaks())
        assert f"it speaks {what} ({name}): bufferext.as_buffer(obj)" in str(
            info.value)
    source = os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "Modules", "view.c")
    if os.path.isfile(source):     # no entry of C's that Python lacks
        with open(source) as f:
            text = f.read()
        table = text[text.index("bridged[][2] = {"):]
        table = table[:table.index("};")]
        assert re.findall(r'\{"(\w+)", "([^"]+)"\}', table) == [
            tuple(entry) for entry in _bridges.BRIDGED]


def test_get_buffer_hint_only_for_bridged_objects():
    # CPython's own message for anything else, and the exporter's own error
    # for an exporter that refuses
    with pytest.raises(TypeError, match="bytes-like object is required"):
        get_buffer(object())
    with pytest.raises(BufferError, match="not writable"):
        get_buffer(b"x", F.WRITABLE)


def test_get_buffer_hint_survives_a_hostile_metaclass():
    # the hint looks the bridges up on the type, after nothing of ours is
    # held: a metaclass whose lookups raise or mutate leaves CPython's error
    calls = []

    class Meta(type):
        def __getattr__(cls, name):
            calls.append(name)
            raise RuntimeError("a lookup that fails")

    class Odd(metaclass=Meta):
        pass

    with pytest.raises(TypeError, match="bytes-like object is required"):
        get_buffer(Odd())
    assert calls == ["__arrow_c_device_array__", "__arrow_c_array__",
                     "__dlpack__", "__cuda_array_interface__",
                     "__ve_array_interface__", "__array_interface__"]


@pytest.mark.parametrize("make", [
    lambda: bufferext.get_buffer(b"abc"),
    lambda: bufferext.as_buffer(b"abc", readonly=True),
], ids=["BufferView", "BufferAdapter"])
def test_holders_of_an_export_refuse_every_pickle_protocol(make) -> None:
    # protocols 0 and 1 pickled an empty object (copyreg._reconstructor),
    # which failed only when loaded, maybe in another process
    obj = make()
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(TypeError, match=re.escape(
                f"cannot pickle '{type(obj).__module__}."
                f"{type(obj).__name__}' object: it holds an export")):
            pickle.dumps(obj, protocol)
    with pytest.raises(TypeError, match="it holds an export"):
        copy.copy(obj)
