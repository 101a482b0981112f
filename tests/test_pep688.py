"""The PEP 688 rule: a PyBUF_DEVICE request never reaches a getbuffer
function through a path that cannot carry a Py_buffer_extended.

CPython 3.12 gave every buffer type a ``__buffer__(flags)`` method, which
calls the type's getbuffer with a bare ``Py_buffer`` (inside a memoryview)
and whatever flags its caller chose, and made any class with a Python
``__buffer__`` an exporter.  The header closes both doors (docs/capi.rst,
"The PEP 688 rule"):

* ``BufferExt_SetSupportedFlags`` puts a guard in place of the type's
  ``__buffer__``: ``__buffer__(flags)`` with PyBUF_DEVICE raises BufferError;
* ``BufferExt_GetBuffer`` asks a Python-level exporter without PyBUF_DEVICE;
* ``BufferExt_SetDevice`` writes the extension only into a view that the
  consumer marked as extended (``BufferExt_Extended``): a request flag is no
  proof of the struct behind it.
* the guard and CPython's wrapper vouch only for (subclasses of) the class
  they were made for: copied into another class, they route nothing.

Before the rule, ``CPUBuffer(4).__buffer__(0x1011c)`` wrote past the
Py_buffer (valgrind: invalid write), a VE adapter returned a memoryview over
a device pointer, and a Python class delegating ``__buffer__`` to a device
exporter laundered it.  Everything that could crash runs in a child.

Where the interpreter implements the draft (cpython/), CPython closes the
doors itself: ``__buffer__``, ``memoryview._from_flags`` and
``PickleBuffer.__buffer__`` refuse any extended request before an exporter
runs, a Python ``__buffer__`` never sees PyBUF_DEVICE, and the header in
native mode installs no guard; the tests say which answer they expect.
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
from _helpers import (MODULE_NATIVE, NATIVE_DOOR_REFUSAL,  # noqa: E402
                      NATIVE_INTERPRETER, run_child)

PEP688 = sys.version_info >= (3, 12)
needs_pep688 = pytest.mark.skipif(not PEP688, reason="__buffer__ is 3.12+")
DEVICE = int(BufferFlags.DEVICE)
FULL_RO = int(BufferFlags.FULL_RO)


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> str:
    return harness.build(str(tmp_path_factory.mktemp("standin_cuda")))


child = run_child


@needs_pep688
def test_cpubuffer_buffer_method_refuses_device_requests() -> None:
    out = child(f"""
        import bufferext
        b = bufferext.CPUBuffer(4)
        try:
            b.__buffer__({DEVICE | FULL_RO})
        except BufferError as e:
            print("refused:", e)
        m = b.__buffer__({FULL_RO})
        print("plain:", m.shape, m.format)
        m.release()
        b.close()                          # no export left behind
    """)
    if MODULE_NATIVE:     # no guard: CPython's own wrapper refuses
        assert f"refused: bufferext.CPUBuffer: {NATIVE_DOOR_REFUSAL} " \
            "(flags=0x1011c)" in out
    else:
        assert "refused: bufferext.CPUBuffer: __buffer__ cannot serve a " \
            "PyBUF_DEVICE request (flags=0x1011c)" in out
    assert "plain: (4,) d" in out


@needs_pep688
def test_guard_reads_flags_once() -> None:
    # an __index__ that answers differently the second time must not slip
    # PyBUF_DEVICE past the check
    out = child(f"""
        import bufferext
        class Flags:
            calls = 0
            def __index__(self):
                Flags.calls += 1
                return {FULL_RO} if Flags.calls == 1 else {DEVICE | FULL_RO}
        m = bufferext.CPUBuffer(4).__buffer__(Flags())
        print(Flags.calls, m.shape)
    """)
    assert out.split() == ["1", "(4,)"]


@needs_pep688
@pytest.mark.parametrize("bad, error", [
    ("1 << 40", "OverflowError"), ("'x'", "TypeError"), ("2.0", "TypeError")])
def test_guard_rejects_bad_flags_like_cpython(bad: str, error: str) -> None:
    out = child(f"""
        import bufferext
        for obj in (bufferext.CPUBuffer(4), bytearray(4)):
            try:
                obj.__buffer__({bad})
            except Exception as e:
                print(type(e).__name__)
    """)
    assert out.split() == [error, error]


@needs_pep688
def test_every_type_of_ours_is_guarded() -> None:
    for name in ("CPUBuffer", "CUDABuffer", "VEBuffer", "BufferAdapter",
                 "BufferView"):
        method = getattr(bufferext, name).__dict__["__buffer__"]
        if MODULE_NATIVE:      # CPython's own wrapper, which refuses
            assert type(method).__name__ == "wrapper_descriptor", name
        else:
            assert type(method).__name__ == "instancemethod", name
            assert "PyBUF_DEVICE" in method.__doc__


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
    # CPython gives the subclass its generic slot (it sees the guard where it
    # expected the wrapper); the header still calls the base's getbuffer
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
            raise AssertionError("guard inherited")
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
def test_header_exporters_are_guarded(capi: ModuleType) -> None:
    for name in ("ExporterLegacy", "ExporterSimpleOnly", "ExporterFull",
                 "ExporterNoDevice"):
        exporter = getattr(capi, name)(device=capi.DEVICE_CUDA)
        # the guard answers first where there is one (backport mode)
        with pytest.raises(BufferError, match=NATIVE_DOOR_REFUSAL
                           if capi.NATIVE else "PyBUF_DEVICE"):
            exporter.__buffer__(DEVICE | FULL_RO)
        assert exporter.exports == 0


@needs_pep688
def test_unguarded_header_exporter_refuses_bare_device_requests(
        capi: ModuleType) -> None:
    # a type that never called BufferExt_SetSupportedFlags keeps CPython's
    # wrapper, which passes PyBUF_DEVICE with a bare Py_buffer: the view
    # carries no consumer's mark, so BufferExt_SetDevice refuses device
    # memory instead of writing past it; the header passes PyBUF_DEVICE only
    # to a type that declares it, so its own requests are refused too (the
    # device memory of an undeclared type reaches no consumer), and a type
    # that declares it is served
    exporter = capi.ExporterUndeclared(device=capi.DEVICE_CUDA)
    with pytest.raises(BufferError, match=NATIVE_DOOR_REFUSAL
                       if NATIVE_INTERPRETER else "not one marked as extended"):
        exporter.__buffer__(DEVICE | FULL_RO)
    with pytest.raises(BufferError, match="can only be exported to consumers "
                                          "that request PyBUF_DEVICE"):
        bufferext.get_buffer(exporter)
    assert bufferext._bufferext._device_of(exporter) == capi.DEVICE_CUDA
    with bufferext.get_buffer(capi.ExporterFull(device=capi.DEVICE_CUDA)) as view:
        assert view.device == capi.DEVICE_CUDA
    cpu = capi.ExporterUndeclared()
    if NATIVE_INTERPRETER:                        # no extended request there
        with pytest.raises(BufferError, match=NATIVE_DOOR_REFUSAL):
            cpu.__buffer__(DEVICE | FULL_RO)
    else:
        with cpu.__buffer__(DEVICE | FULL_RO) as m:   # CPU: no extension written
            assert m.nbytes == 16
    assert cpu.exports == 0 and exporter.exports == 0


def test_guarded_header_exporter_serves_device_requests(
        capi: ModuleType) -> None:
    exporter = capi.ExporterFull(device=capi.DEVICE_CUDA)
    with bufferext.get_buffer(exporter) as view:
        assert view.device == capi.DEVICE_CUDA
    assert exporter.exports == 0


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


# ---- issue 21, item 1: a guard found in a stranger's dict -------------------
# Before: ``class Evil(int): __buffer__ = CPUBuffer.__dict__['__buffer__']``
# made BufferExt_GetBuffer call CPUBuffer's getbuffer on an int (an export
# of an address the caller chose, a write into an immutable int, SIGSEGV on
# tobytes()); the same with BufferView's guard on a bytearray subclass.

@needs_pep688
@pytest.mark.parametrize("owner, base, arg", [
    ("CPUBuffer", "int", "12345"), ("CPUBuffer", "bytes", "16"),
    ("CPUBuffer", "object", ""), ("BufferView", "bytearray", "16"),
    ("BufferView", "int", "7"), ("BufferAdapter", "object", ""),
    ("CUDABuffer", "bytearray", "16"), ("VEBuffer", "bytes", "16")])
def test_guard_copied_into_a_stranger_vouches_for_nothing(
        owner: str, base: str, arg: str) -> None:
    out = child(f"""
        import bufferext
        guard = getattr(bufferext, {owner!r}).__dict__['__buffer__']
        class Evil({base}):
            __buffer__ = guard
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
# Before: pickle.PickleBuffer(CPUBuffer(4)).__buffer__(0x1011c),
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
    x = capi.ExporterFull(device=capi.DEVICE_CUDA)   # guarded, declared
    flags = DEVICE | FULL_RO
    # PickleBuffer's own request has no PyBUF_DEVICE: refused there already
    with pytest.raises(BufferError, match=(
            "only be exported to consumers that request PyBUF_DEVICE"
            if door != "from_flags" else NATIVE_DOOR_REFUSAL
            if NATIVE_INTERPRETER else "not one marked as extended")):
        eval(DOORS[door])
    assert x.exports == 0
    with bufferext.get_buffer(x) as view:            # the header's door
        assert view.device == capi.DEVICE_CUDA


def test_exporters_trust_only_a_marked_view(capi: ModuleType) -> None:
    # BufferExt_Extended: the flag alone (a bare view) gives nothing; the
    # consumer's mark gives the view itself.  Where CPython implements the
    # draft (native mode, or a backport build on that interpreter) the flag
    # is the proof, as the draft says: CPython passes it into no bare
    # Py_buffer of its own
    if capi.NATIVE or NATIVE_INTERPRETER:
        assert capi.extended_for(DEVICE, False) is True
        assert capi.extended_for(FULL_RO, True) is None
        return
    assert capi.extended_for(DEVICE, False) is None
    assert capi.extended_for(DEVICE | FULL_RO, False) is None
    assert capi.extended_for(DEVICE, True) is True
    assert capi.extended_for(FULL_RO, True) is None
    # nothing in the view proves anything: the ABI 2 mark in `internal`
    # (what reused heap memory at a door's fresh view may hold) is no mark
    assert capi.extended_for(DEVICE, False, False, True) is None
    # nor is a mark whose request is over: a consumer puts back what the
    # slot held, so the same view in a plain request next is bare
    assert capi.extended_for(DEVICE, False, False, False, True) is None
    # requests nest: a view marked and unmarked meanwhile leaves this one's
    assert capi.extended_for(DEVICE, True, True) is True
    x = capi.ExporterFull()
    assert capi.set_device(x, DEVICE, None, False, False)["flags"] == 0
    with pytest.raises(BufferError, match="not one marked as extended"):
        capi.set_device(x, DEVICE, "test.dev", True, False)


@needs_pep688
def test_our_device_producers_refuse_the_foreign_doors(driver: str) -> None:
    # the producers' inline export path takes the mark, not the flag, as
    # proof: through memoryview._from_flags (a bare view with PyBUF_DEVICE)
    # a CUDABuffer, its adapter and a view of it refuse instead of handing
    # a memoryview over a device pointer
    harness.check(driver, f"""
        buf = bufferext.CUDABuffer(4)
        a = bufferext.as_buffer(buf)
        v = bufferext.get_buffer(buf)
        for obj in (buf, a, v):
            for flags in ({DEVICE | FULL_RO}, {DEVICE}, {DEVICE | 0x1c}):
                with pytest.raises(BufferError, match={
                        NATIVE_DOOR_REFUSAL if NATIVE_INTERPRETER
                        else "not one marked"!r}):
                    memoryview._from_flags(obj, flags)
        v.release()
        del a
        assert buf.exports == 0
        buf.close()
    """)
