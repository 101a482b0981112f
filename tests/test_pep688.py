"""The PEP 688 doors: no path that hands a getbuffer a bare ``Py_buffer``
can get the extension written past it, or device memory out of it.

CPython 3.12 gave every buffer type a ``__buffer__(flags)`` method, which
calls the type's getbuffer with a bare ``Py_buffer`` (inside a memoryview)
and whatever flags its caller chose, and made any class with a Python
``__buffer__`` an exporter; ``memoryview._from_flags`` and
``pickle.PickleBuffer`` do the same.  At header ABI 4 every one of them
reaches the exporter's *plain* getbuffer, which never writes the extension
whatever flags it is handed (only the typed entry, which
``BufferExt_GetBuffer`` alone calls, receives a ``Py_buffer_extended``;
docs/capi.rst, "The typed entry"): CPU memory is served as for a plain
request (the flag ignored, as every exporter on a released CPython does),
device memory is refused by name.  A Python ``__buffer__`` is never asked
with PyBUF_DEVICE: no typed entry serves it.

Before (ABI 1-3): ``CPUBuffer(4).__buffer__(0x1011c)`` wrote past the
Py_buffer (valgrind: invalid write), a VE adapter returned a memoryview over
a device pointer, and a Python class delegating ``__buffer__`` to a device
exporter laundered it.  Everything that could crash runs in a child.

Where the interpreter implements the draft (cpython/), CPython closes the
Python-visible doors itself: ``__buffer__``, ``memoryview._from_flags`` and
``PickleBuffer.__buffer__`` refuse any extended request before an exporter
runs; the tests say which answer they expect.
"""

from __future__ import annotations

import os
import sys
from types import ModuleType

import pytest

import bufferext
from bufferext import BufferFlags

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "cuda_standin"))
import standin_harness as harness  # noqa: E402
from _helpers import (ATTRIBUTE_DECLARES, NATIVE_DOOR_REFUSAL,  # noqa: E402
                      NATIVE_INTERPRETER, NEEDS_ATTRIBUTE, run_child)

PEP688 = sys.version_info >= (3, 12)
needs_pep688 = pytest.mark.skipif(not PEP688, reason="__buffer__ is 3.12+")
DEVICE = int(BufferFlags.DEVICE)
FULL_RO = int(BufferFlags.FULL_RO)
#: How our plain getbuffer refuses device memory asked for with PyBUF_DEVICE
#: (a request through a door, not through the typed entry).
PLAIN_REFUSAL = "through a plain Py_buffer"
#: How a door refuses device memory, here or in CPython.
DOOR_REFUSAL = NATIVE_DOOR_REFUSAL if NATIVE_INTERPRETER else PLAIN_REFUSAL


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> str:
    return harness.build(str(tmp_path_factory.mktemp("standin_cuda")))


child = run_child


@needs_pep688
def test_cpubuffer_buffer_method_serves_cpu_memory_plain() -> None:
    out = child(f"""
        import bufferext
        b = bufferext.CPUBuffer(4)
        for flags in ({DEVICE | FULL_RO}, {FULL_RO}):
            try:
                m = b.__buffer__(flags)
            except BufferError as e:
                print("refused:", e)
            else:
                print("plain:", m.shape, m.format, m.nbytes)
                m.release()
        b.close()                          # no export left behind
    """)
    if NATIVE_INTERPRETER:      # CPython's own wrapper refuses
        assert f"refused: bufferext.CPUBuffer: {NATIVE_DOOR_REFUSAL} " \
            "(flags=0x1011c)" in out
        assert out.count("plain: (4,) d 32") == 1
    else:
        assert out.count("plain: (4,) d 32") == 2, out


@needs_pep688
def test_our_types_keep_cpythons_buffer_method() -> None:
    # no guard, no dict surgery: the method is CPython's own wrapper of the
    # plain getbuffer, and the typed entry sits beside the declaration
    for name in ("CPUBuffer", "CUDABuffer", "VEBuffer", "BufferAdapter",
                 "BufferView"):
        cls = getattr(bufferext, name)
        assert type(cls.__dict__["__buffer__"]).__name__ == \
            "wrapper_descriptor", name
        assert "__buffer_extended__" in cls.__dict__, name


@needs_pep688
def test_device_adapter_buffer_method_refuses(driver: str) -> None:
    # before: a memoryview over a device pointer
    harness.check(driver, f"""
        buf = bufferext.CUDABuffer(4)
        a = bufferext.as_buffer(buf)
        for obj in (buf, a):
            for flags in ({DEVICE | FULL_RO}, {FULL_RO}, 0):
                try:
                    obj.__buffer__(flags)
                except BufferError as e:
                    assert type(obj).__name__ in str(e), e
                else:
                    raise AssertionError((obj, flags))
        del a
        buf.close()
    """)


@needs_pep688
def test_python_class_cannot_launder_device_memory(driver: str) -> None:
    # a class whose __buffer__ delegates to a device exporter: get_buffer
    # must not come back with a CPU view of device memory
    harness.check(driver, f"""
        inner = bufferext.CUDABuffer(4)
        class Wrapper:
            def __buffer__(self, flags):
                return inner.__buffer__(flags)
        w = Wrapper()
        assert not bufferext.check_buffer_supports(w, bufferext.BufferFlags.DEVICE)
        for flags in ({DEVICE | FULL_RO}, {DEVICE}, {FULL_RO}):
            try:
                view = bufferext.get_buffer(w, flags)
            except BufferError as e:
                assert "CUDABuffer" in str(e), e
            else:
                raise AssertionError(view)
        inner.close()
    """)


@needs_pep688
def test_python_class_over_cpu_memory_still_exports() -> None:
    out = child("""
        import bufferext
        inner = bufferext.CPUBuffer(4)
        class Wrapper:
            def __buffer__(self, flags):
                return inner.__buffer__(flags)
        with bufferext.get_buffer(Wrapper()) as v:
            print(v.device, v.shape, v.nbytes)
    """)
    assert out.split() == ["None", "(4,)", "32"]


# ---- subclasses ------------------------------------------------------------

@needs_pep688
def test_subclass_keeping_buffer_exports_device_memory(driver: str) -> None:
    # the subclass keeps its base's getbuffer, so the base's typed entry
    # serves it; its __buffer__ reaches the plain getbuffer, which refuses
    harness.check(driver, """
        class Sub(bufferext.CUDABuffer):
            pass
        s = Sub(4)
        assert bufferext.check_buffer_supports(s, bufferext.BufferFlags.DEVICE)
        with bufferext.get_buffer(s) as v:
            assert v.device == "bufferext.cuda", v.device
            assert v.obj is s
        try:
            s.__buffer__(0x1011c)
        except BufferError:
            pass
        else:
            raise AssertionError("device memory through __buffer__")
        s.close()
    """)


@needs_pep688
def test_subclass_overriding_buffer_gets_no_device_request() -> None:
    out = child("""
        import bufferext
        seen = []
        class Sub(bufferext.CPUBuffer):
            def __buffer__(self, flags):
                seen.append(flags)
                return super().__buffer__(flags)
        s = Sub(4)
        print(bufferext.check_buffer_supports(s, bufferext.BufferFlags.DEVICE))
        with bufferext.get_buffer(s) as v:
            print(v.device, v.shape)
        print(all(not f & 0x10000 for f in seen), len(seen))
    """)
    assert out.split() == ["False", "None", "(4,)", "True", "1"]


# ---- third-party exporters built on the header (tests/capi) ---------------

@needs_pep688
@pytest.mark.parametrize("name", ["ExporterUndeclared", "ExporterLegacy",
                                  "ExporterSimpleOnly", "ExporterFull",
                                  "ExporterNoDevice", "ExporterNoEntry"])
def test_header_exporters_doors(capi: ModuleType, name: str) -> None:
    # whatever the type declares and whether it publishes an entry: through
    # __buffer__ device memory is refused and CPU memory served plain
    device = getattr(capi, name)(device=capi.DEVICE_CUDA)
    with pytest.raises(BufferError, match=DOOR_REFUSAL):
        device.__buffer__(DEVICE | FULL_RO)
    cpu = getattr(capi, name)()
    if NATIVE_INTERPRETER:                        # no extended request there
        with pytest.raises(BufferError, match=NATIVE_DOOR_REFUSAL):
            cpu.__buffer__(DEVICE | FULL_RO)
    elif name != "ExporterSimpleOnly":            # it honours no FULL_RO:
        with cpu.__buffer__(DEVICE | FULL_RO) as m:   # served, unchecked
            assert m.nbytes == 16
    assert cpu.exports == 0 and device.exports == 0


def test_undeclared_device_memory_reaches_no_consumer(capi: ModuleType) -> None:
    # BufferExt_GetBuffer passes PyBUF_DEVICE only to the entry of a type
    # that declares it: the device memory of a type that does not (or that
    # declares it without an entry) is refused to every consumer; asked
    # directly, its getbuffer tells why
    for name in ("ExporterUndeclared", "ExporterNoEntry"):
        exporter = getattr(capi, name)(device=capi.DEVICE_CUDA)
        assert not bufferext.check_buffer_supports(exporter, DEVICE)
        with pytest.raises(BufferError, match="can only be exported to "
                           "consumers that request PyBUF_DEVICE"):
            bufferext.get_buffer(exporter)
        with pytest.raises(BufferError, match=PLAIN_REFUSAL):
            bufferext._bufferext._device_of(exporter)
        assert exporter.exports == 0
    full = capi.ExporterFull(device=capi.DEVICE_CUDA)
    assert bufferext._bufferext._device_of(full) == capi.DEVICE_CUDA
    with bufferext.get_buffer(full) as view:
        assert view.device == capi.DEVICE_CUDA
    assert full.exports == 0


# ---- item 8: the declaration belongs to the class, not the metaclass ------

def test_metaclass_declaration_is_not_the_types() -> None:
    # before: the cache kept the first answer, read through the metaclass,
    # while other paths read the changed metaclass attribute
    class Meta(type):
        __buffer_supported_flags__ = -1

    class Exported(bytearray, metaclass=Meta):
        pass

    x = Exported(b"abcd")
    legacy = int(BufferFlags.ND | BufferFlags.STRIDES)
    for declared in (-1, 0x4, 0):
        Meta.__buffer_supported_flags__ = declared
        assert bufferext.check_buffer_supports(x, legacy)
        assert int(bufferext.supported_flags(x)) == 0x1FD
        with bufferext.get_buffer(x, legacy) as view:
            assert view.shape == (4,)


@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
def test_class_declaration_change_is_seen_everywhere() -> None:
    class Exported(bytearray):
        __buffer_supported_flags__ = -1

    x = Exported(b"abcd")
    nd = int(BufferFlags.ND)
    assert not bufferext.check_buffer_supports(x, nd)
    with pytest.raises(BufferError, match="does not support"):
        bufferext.get_buffer(x, nd)
    Exported.__buffer_supported_flags__ = 0
    assert bufferext.check_buffer_supports(x, nd)
    with bufferext.get_buffer(x, nd) as view:
        assert view.shape == (4,)


# ---- issue 21, item 1: a __buffer__ found in a stranger's dict ----------
# Before (ABI 3): ``class Evil(int): __buffer__ = CPUBuffer.__dict__[
# '__buffer__']`` made BufferExt_GetBuffer call CPUBuffer's getbuffer on an
# int (an export of an address the caller chose, a write into an immutable
# int, SIGSEGV on tobytes()), through the guard then in that slot; the same
# with BufferView's guard on a bytearray subclass.  The typed entry copied
# the same way: tests/test_typed_entry.py.

@needs_pep688
@pytest.mark.parametrize("owner, base, arg", [
    ("CPUBuffer", "int", "12345"), ("CPUBuffer", "bytes", "16"),
    ("CPUBuffer", "object", ""), ("BufferView", "bytearray", "16"),
    ("BufferView", "int", "7"), ("BufferAdapter", "object", ""),
    ("CUDABuffer", "bytearray", "16"), ("VEBuffer", "bytes", "16")])
def test_buffer_method_copied_into_a_stranger_vouches_for_nothing(
        owner: str, base: str, arg: str) -> None:
    out = child(f"""
        import bufferext
        method = getattr(bufferext, {owner!r}).__dict__['__buffer__']
        class Evil({base}):
            __buffer__ = method
        evil = Evil({arg})
        for call in (lambda: bufferext.get_buffer(evil),
                     lambda: evil.__buffer__(0), lambda: memoryview(evil),
                     lambda: bufferext.check_buffer_supports(evil,
                                                             0x10000)):
            try:
                result = call()
            except TypeError as e:
                print("TypeError", e)
            else:
                print("result", result)
        """)
    # CPython's own answer to a descriptor used on a stranger
    assert out.count(f"requires a 'bufferext.{owner}' object") == 3, out
    assert out.rstrip().endswith("result False"), out


# ---- issue 21, item 6: a request flag is not proof of an extended struct --
# Before (ABI 1-2): pickle.PickleBuffer(CPUBuffer(4)).__buffer__(0x1011c),
# memoryview._from_flags(CPUBuffer(4), 0x1011c) and the PickleBuffer of
# CPUBuffer.__reduce_ex__(5) made CPUBuffer write the extension past a
# memoryview's internal Py_buffer (valgrind: invalid write of size 8; the
# ASan job of .ci/quality.sh runs these), and a guarded device exporter
# reached through them handed device memory to a memoryview.

DOORS = {
    "from_flags": "memoryview._from_flags(x, flags)",
    "picklebuffer": "pickle.PickleBuffer(x).__buffer__(flags)",
}


@needs_pep688
@pytest.mark.parametrize("door", sorted(DOORS))
def test_foreign_doors_serve_cpu_memory_without_the_extension(
        door: str) -> None:
    import pickle  # noqa: F401 - used by the door's expression
    x = bufferext.CPUBuffer(4)
    flags = DEVICE | FULL_RO
    data = x.__reduce_ex__(5)[1][0]          # the PickleBuffer pickle gets
    if NATIVE_INTERPRETER:   # CPython refuses the extended request itself
        with pytest.raises(BufferError, match=NATIVE_DOOR_REFUSAL):
            eval(DOORS[door])
        with pytest.raises(BufferError, match=NATIVE_DOOR_REFUSAL):
            data.__buffer__(flags)
    else:
        m = eval(DOORS[door])
        assert m.nbytes == 32 and bytes(m) == bytes(32)
        m.release()
        with data.__buffer__(flags) as m:
            assert m.nbytes == 32
    data.release()
    assert x.exports == 0


@needs_pep688
@pytest.mark.parametrize("door", sorted(DOORS))
def test_foreign_doors_refuse_device_memory(capi: ModuleType,
                                            door: str) -> None:
    import pickle  # noqa: F401
    x = capi.ExporterFull(device=capi.DEVICE_CUDA)   # declared, with an entry
    flags = DEVICE | FULL_RO
    # PickleBuffer's own request has no PyBUF_DEVICE: refused there already
    with pytest.raises(BufferError, match=(
            "only be exported to consumers that request PyBUF_DEVICE"
            if door != "from_flags" else DOOR_REFUSAL)):
        eval(DOORS[door])
    assert x.exports == 0
    with bufferext.get_buffer(x) as view:            # the header's door
        assert view.device == capi.DEVICE_CUDA


def test_the_typed_entry_is_the_proof(capi: ModuleType) -> None:
    # BufferExt_SetDevice writes the extension only into the struct the
    # typed entry received; through the plain getbuffer (ext NULL) the flag
    # proves nothing, whatever path brought it
    x = capi.ExporterFull()
    assert capi.set_device(x, DEVICE, "test.dev", True) == {
        "flags": DEVICE, "ext_flags": 0, "device": "test.dev",
        "device_info": True}
    assert capi.set_device(x, DEVICE, None, False, False)["flags"] == 0
    with pytest.raises(BufferError, match=PLAIN_REFUSAL):
        capi.set_device(x, DEVICE, "test.dev", True, False)
    with pytest.raises(BufferError, match="that request PyBUF_DEVICE"):
        capi.set_device(x, FULL_RO, "test.dev", True)


@needs_pep688
def test_our_device_producers_refuse_the_foreign_doors(driver: str) -> None:
    # the producers' inline export path takes the entry's struct, not the
    # flag, as proof: through memoryview._from_flags (a bare view with
    # PyBUF_DEVICE) a CUDABuffer, its adapter and a view of it refuse
    # instead of handing a memoryview over a device pointer
    harness.check(driver, f"""
        buf = bufferext.CUDABuffer(4)
        a = bufferext.as_buffer(buf)
        v = bufferext.get_buffer(buf)
        for obj in (buf, a, v):
            for flags in ({DEVICE | FULL_RO}, {DEVICE}, {DEVICE | 0x1c}):
                with raises(BufferError, match={DOOR_REFUSAL!r}):
                    memoryview._from_flags(obj, flags)
        v.release()
        del a
        assert buf.exports == 0
        buf.close()
    """)
