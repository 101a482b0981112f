"""The typed entry: who may reach it (docs/capi.rst, "The typed entry").

An exporter that fills the extension publishes a typed entry, a function
taking a ``Py_buffer_extended *``, as the capsule ``__buffer_extended__``
in its type's dict; ``BufferExt_GetBuffer`` calls it for an extended
request, and nothing else writes the extension.  The capsule is found in a
class dict, so it is trusted by whose it is, not by where it was found: for
its owner (the type that published it) and the subclasses that keep the
owner's getbuffer, checked once per type and cached.  A capsule copied into
a stranger's dict, a subclass whose ``__buffer__`` replaces the getbuffer, a
metaclass attribute or a lying ``__class__`` gets no extended request: the
request goes to the type's plain getbuffer without PyBUF_DEVICE.
Everything that could crash runs in a child.
"""

from __future__ import annotations

import sys
import sysconfig

import pytest

import bufferext
from bufferext import BufferFlags
from _helpers import ATTRIBUTE_DECLARES, NATIVE_INTERPRETER, run_child

DEVICE = int(BufferFlags.DEVICE)
FULL_RO = int(BufferFlags.FULL_RO)
def has_entry(obj: object) -> bool:
    """Whether extended requests to ``obj`` reach a typed entry."""
    return bufferext._bufferext._has_typed_entry(type(obj))
needs_pep688 = pytest.mark.skipif(sys.version_info < (3, 12),
                                  reason="a Python __buffer__ is 3.12+")
backport_only = pytest.mark.skipif(
    not ATTRIBUTE_DECLARES, reason="native mode: the entry is the "
    "interpreter's slot bf_getbuffer_ex, not a capsule in the type dict")


def test_our_types_publish_an_entry_they_own() -> None:
    for name in ("CPUBuffer", "CUDABuffer", "VEBuffer", "BufferAdapter",
                 "BufferView"):
        cls = getattr(bufferext, name)
        capsule = cls.__dict__["__buffer_extended__"]
        assert type(capsule).__name__ == "PyCapsule", name
        assert '"bufferext.getbuffer_entry"' in repr(capsule), name
    assert has_entry(bufferext.CPUBuffer(1))
    assert not has_entry(b"x") and not has_entry(bytearray(1))


def test_a_subclass_that_keeps_the_getbuffer_keeps_the_entry() -> None:
    class Sub(bufferext.CPUBuffer):
        pass

    s = Sub(4)
    assert has_entry(s)
    assert bufferext.check_buffer_supports(s, DEVICE)
    with bufferext.get_buffer(s) as view:     # answered by the entry
        assert view.flags & DEVICE and view.device is None
    assert s.exports == 0


@needs_pep688
def test_a_subclass_with_its_own_buffer_method_has_none() -> None:
    seen = []

    class Sub(bufferext.CPUBuffer):
        def __buffer__(self, flags: int) -> memoryview:
            seen.append(flags)
            return super().__buffer__(flags)

    s = Sub(4)
    assert not has_entry(s)
    assert not bufferext.check_buffer_supports(s, DEVICE)
    with bufferext.get_buffer(s) as view:     # the plain getbuffer, no DEVICE
        assert not view.flags & DEVICE and view.shape == (4,)
    assert seen and not any(f & DEVICE for f in seen)


@needs_pep688
@pytest.mark.parametrize("name, method", [
    ("__buffer__", lambda self, flags: memoryview(b"abcd")),
    # CPython's slot for a __release_buffer__ hands the view to Python code
    # as a memoryview
    ("__release_buffer__", lambda self, view: None),
], ids=["buffer", "release_buffer"])
def test_a_method_assigned_later_ends_the_trust(name: str, method) -> None:
    class Sub(bufferext.CPUBuffer):
        pass

    s = Sub(4)
    assert has_entry(s) and bufferext.check_buffer_supports(s, DEVICE)
    setattr(Sub, name, method)
    assert not has_entry(s)
    assert not bufferext.check_buffer_supports(s, DEVICE)
    delattr(Sub, name)
    assert has_entry(s) and bufferext.check_buffer_supports(s, DEVICE)


@needs_pep688
def test_a_subclass_with_its_own_release_method_has_none() -> None:
    # CPython's slot for a __release_buffer__ hands the view to Python code
    # as a memoryview: an extended view of device memory would be read as
    # CPU memory there (a C exporter of device memory crashed)
    released = []

    class Sub(bufferext.CPUBuffer):
        def __release_buffer__(self, view: memoryview) -> None:
            released.append(view.nbytes)
            super().__release_buffer__(view)

    s = Sub(4)
    assert not has_entry(s)
    assert not bufferext.check_buffer_supports(s, DEVICE)
    with bufferext.get_buffer(s) as view:     # the plain getbuffer, no DEVICE
        assert not view.flags & DEVICE and view.shape == (4,)
    assert released and s.exports == 0


@backport_only
@pytest.mark.parametrize("owner, base, arg", [
    ("CPUBuffer", "bytearray", "b'abcd'"), ("CUDABuffer", "bytearray", "4"),
    ("BufferView", "bytes", "b'abcd'"), ("CPUBuffer", "object", ""),
    ("VEBuffer", "int", "7")])
def test_an_entry_copied_into_a_stranger_serves_nothing(
        owner: str, base: str, arg: str) -> None:
    # before the owner check this would call CPUBuffer's entry on a
    # bytearray: a CPUBuffer's layout read from a stranger's memory
    out = run_child(f"""
        import bufferext
        capsule = getattr(bufferext, {owner!r}).__dict__['__buffer_extended__']
        class Evil({base}):
            __buffer_extended__ = capsule
            __buffer_supported_flags__ = 0x1FD | 0x10000
        evil = Evil({arg})
        print("entry", bufferext._bufferext._has_typed_entry(Evil))
        print("device", bufferext.check_buffer_supports(evil, 0x10000))
        try:
            with bufferext.get_buffer(evil) as view:
                print("served", view.device, view.flags & 0x10000)
        except TypeError as e:
            print("TypeError", e)
    """)
    assert "entry False" in out and "device False" in out, out
    if base in ("bytearray", "bytes"):
        assert "served None 0" in out, out      # the stranger's own export
    else:
        assert "TypeError" in out, out


@backport_only
def test_a_sibling_entry_does_not_serve_a_sibling() -> None:
    # a CPUBuffer subclass that carries CUDABuffer's capsule: its own
    # (CPUBuffer's) is shadowed, the stranger's not trusted
    class Odd(bufferext.CPUBuffer):
        __buffer_extended__ = bufferext.CUDABuffer.__dict__[
            "__buffer_extended__"]

    odd = Odd(4)
    assert not has_entry(odd)
    with bufferext.get_buffer(odd) as view:
        assert view.device is None and not view.flags & DEVICE
    assert odd.exports == 0


@backport_only
def test_the_metaclass_is_not_the_type() -> None:
    class Meta(type):
        __buffer_extended__ = bufferext.CPUBuffer.__dict__[
            "__buffer_extended__"]

    class Exported(bytearray, metaclass=Meta):
        __buffer_supported_flags__ = 0x1FD | DEVICE

    x = Exported(b"abcd")
    assert not has_entry(x)
    assert not bufferext.check_buffer_supports(x, DEVICE)


def test_a_lying_class_attribute_is_not_the_type() -> None:
    class Liar(bytearray):
        __class__ = bufferext.CPUBuffer       # what isinstance() would see

    x = Liar(b"abcd")
    assert isinstance(x, bufferext.CPUBuffer)
    assert not has_entry(x)
    with bufferext.get_buffer(x) as view:
        assert view.tobytes() == b"abcd" and not view.flags & DEVICE


@backport_only
def test_a_class_assigned_during_the_lookup_is_refused() -> None:
    # A's dict holds a key whose hash is the declaration's name's: looking
    # the declaration up runs its __eq__, which moves the object to a
    # sibling class; what was read belongs to A, so the request is refused
    out = run_child("""
        import bufferext
        class B(bufferext.CPUBuffer):
            pass
        holder, calls = [], []
        class Key(str):
            def __hash__(self):
                return hash("__buffer_supported_flags__")
            def __eq__(self, other):
                calls.append(other)
                if holder and type(holder[0]) is not B:
                    holder[0].__class__ = B
                return False
        A = type("A", (bufferext.CPUBuffer,), {Key("k"): 1})
        obj = A(4)
        holder.append(obj)
        try:
            bufferext.get_buffer(obj).release()
        except BufferError as e:
            print("refused:", e)
        print("calls", set(calls), "exports", obj.exports)
        with bufferext.get_buffer(obj) as view:      # B's, from now on
            print("then", type(obj).__name__, view.flags & 0x10000)
    """)
    assert "refused: B: the exporter's type changed (its __class__ was " \
        "assigned) during the buffer request" in out, out
    assert "calls {'__buffer_supported_flags__'} exports 0" in out, out
    assert "then B 65536" in out, out


@needs_pep688
def test_greenlets_switching_inside_getbuffer_write_past_no_view() -> None:
    # Two requests whose exporters (Python __buffer__ methods) switch
    # greenlets before they answer finish out of order.  At ABI 3 that left
    # the thread's mark naming a finished request's view on a dead
    # greenlet's stack, and a bare Py_buffer later at that address would
    # have been written past; at ABI 4 there is no mark to go stale: the
    # doors' bare views get CPU memory plain (valgrind and ASan run this
    # file) and device memory never leaves through them
    if sysconfig.get_config_var("Py_GIL_DISABLED") and "True" in run_child(
            "import sys\ntry:\n    import greenlet\nexcept ImportError:\n"
            "    pass\nelse:\n    print(sys._is_gil_enabled())"):
        pytest.skip("this greenlet turns the GIL back on")
    greenlet = pytest.importorskip("greenlet")
    inner = bufferext.CPUBuffer(4)
    main = greenlet.getcurrent()
    log = []

    class Switching:
        def __init__(self, name: str) -> None:
            self.name = name

        def __buffer__(self, flags: int) -> memoryview:
            log.append(("asked", self.name, flags & DEVICE))
            main.switch()                      # hand over mid-request
            return inner.__buffer__(flags)

    def request(name: str) -> None:
        with bufferext.get_buffer(Switching(name)) as view:
            log.append(("served", name, view.nbytes, view.device))

    a, b = greenlet.greenlet(request), greenlet.greenlet(request)
    a.switch("a")
    b.switch("b")                # both inside their exporter now
    b.switch()                   # b finishes first, then a
    a.switch()
    assert a.dead and b.dead
    assert log == [("asked", "a", 0), ("asked", "b", 0),
                   ("served", "b", 32, None), ("served", "a", 32, None)]
    for door in (lambda: inner.__buffer__(DEVICE | FULL_RO),
                 lambda: memoryview._from_flags(inner, DEVICE | FULL_RO)):
        if NATIVE_INTERPRETER:
            with pytest.raises(BufferError):
                door()
        else:
            with door() as m:
                assert m.nbytes == 32 and bytes(m) == bytes(32)
    with bufferext.get_buffer(inner) as view:  # the entry, as before
        assert view.flags & DEVICE and view.device is None
    assert inner.exports == 0


def test_a_plain_request_with_device_writes_nothing_past_its_view(
        capi) -> None:
    # A C consumer (or a forwarder) that passes PyBUF_DEVICE into a plain
    # Py_buffer through PyObject_GetBuffer: tests/capi's plain_get_buffer
    # keeps a zeroed extension right after the Py_buffer and reads it back
    # after the request; the exporter's plain getbuffer wrote nothing there
    view = bufferext.get_buffer(bufferext.CPUBuffer(2))
    for exporter in (bufferext.CPUBuffer(4), capi.ExporterFull(4),
                     bufferext.as_buffer(b"abcd"), view):
        d = capi.plain_get_buffer(exporter, DEVICE | FULL_RO)
        assert (d["flags"], d["device"]) == (0, None), exporter
    view.release()
    device = capi.ExporterFull(4, device=capi.DEVICE_CUDA)
    with pytest.raises(BufferError, match="through a plain Py_buffer"
                       if not NATIVE_INTERPRETER else "request PyBUF_DEVICE"):
        capi.plain_get_buffer(device, DEVICE | FULL_RO)
    assert device.exports == 0


@backport_only
def test_an_entry_copied_from_a_type_of_the_same_getbuffer_is_not_owned(
        capi) -> None:
    # ExporterFull and ExporterLegacy share their getbuffer (and so their
    # entry function): the pairing alone would take ExporterFull's capsule
    # in a subclass of ExporterLegacy for its own; whose it is decides
    class Stranger(capi.ExporterLegacy):
        __buffer_extended__ = capi.ExporterFull.__dict__[
            "__buffer_extended__"]
        __buffer_supported_flags__ = capi.MASK_FULL

    class Heir(capi.ExporterFull):
        pass

    assert not has_entry(Stranger(4))
    assert not bufferext.check_buffer_supports(Stranger(4), DEVICE)
    assert has_entry(Heir(4))
    assert bufferext.check_buffer_supports(Heir(4), DEVICE)
