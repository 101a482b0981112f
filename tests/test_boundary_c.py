"""Where bufferext's C core meets exporters and callers it did not write.

Regression tests for issue 12's C-side items, each of which crashed the
interpreter or gave a silent wrong answer before: every export another
exporter fills passes one gate (Modules/gate.c) before anything reads it;
our DLPack paths read our own layout only from our own getbuffer;
BufferAdapter cannot be made from Python; shapes are read from a tuple;
device memory refuses numpy's fallbacks.  Anything that used to crash runs
in a child interpreter, so a crash is a failure here, not a dead pytest.
"""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import textwrap
from types import ModuleType

import numpy as np
import pytest

import bufferext
from bufferext import BufferFlags

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "cuda_standin"))
import standin_harness as harness  # noqa: E402

PEP688 = sys.version_info >= (3, 12)


def child(code: str) -> str:
    """Run ``code`` in a child interpreter; its stdout, or AssertionError
    with everything it printed (a crash included) if it did not exit 0."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise AssertionError(f"child rc={result.returncode}\n{result.stdout}"
                             f"\n{result.stderr}")
    return result.stdout


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> str:
    return harness.build(str(tmp_path_factory.mktemp("standin_cuda")))


# ---- item 3: NULL strides (ctypes) -----------------------------------------

@pytest.mark.parametrize("readonly", [True, False, None])
def test_ctypes_array_with_null_strides(readonly: object) -> None:
    out = child(f"""
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


# ---- item 4: zero item size ------------------------------------------------

@pytest.mark.parametrize("make", [
    "np.zeros(3, np.dtype([]))", "np.zeros(3, 'V0')",
    "(type('E', (ctypes.Structure,), {'_fields_': []}) * 3)()"])
def test_zero_itemsize_is_refused(make: str) -> None:
    out = child(f"""
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


# ---- item 5: BufferAdapter() -----------------------------------------------

@pytest.mark.parametrize("name", ["BufferAdapter", "BufferView"])
def test_internal_types_cannot_be_instantiated(name: str) -> None:
    out = child(f"""
        import bufferext
        try:
            bufferext.{name}()
        except TypeError as e:
            print("TypeError", e)
    """)
    assert out.startswith("TypeError cannot create"), out


# ---- item 6: our device names without device_info ---------------------------

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


# ---- item 7: a shape list mutated by an item's __index__ ------------------

def test_shape_list_mutated_while_read() -> None:
    out = child("""
        import gc, bufferext
        shape = [2, 3, 4]
        class Shrinks:
            def __index__(self):
                shape.clear()
                gc.collect()
                return 2
        shape[0] = Shrinks()
        print(bufferext.CPUBuffer(shape).shape)
        shape = [2, 3]
        class Grows:
            def __index__(self):
                shape.extend(range(100))
                return 5
        shape[1] = Grows()
        print(bufferext.CPUBuffer.empty(shape, 'u1').shape)
    """)
    assert out.split() == ["(2,", "3,", "4)", "(2,", "5)"]


# ---- item 2: subclasses and our DLPack paths ---------------------------------

def test_subclass_dlpack_reads_our_own_export() -> None:
    out = child("""
        import bufferext, numpy as np
        class Sub(bufferext.CPUBuffer):
            def __buffer__(self, flags):
                return memoryview(b"xy")
        s = Sub(3)
        np.asarray(s.to_host())[:] = 0
        print(np.from_dlpack(s).tolist(), s.__dlpack_device__())
        class Plain(bufferext.CPUBuffer):
            pass
        p = Plain(2)
        print(np.from_dlpack(p).tolist())
    """)
    assert out.splitlines() == ["[0.0, 0.0, 0.0] (1, 0)", "[0.0, 0.0]"]


def test_exchange_api_refuses_a_foreign_object() -> None:
    # the C exchange API is reached through a type's attribute, but is called
    # with any object: one that is not ours gets TypeError, not our layout
    # read from its view
    sys.path.insert(0, os.path.dirname(__file__))
    from test_dlpack_exchange import DLTensor, api_of

    out = DLTensor()
    api = api_of(bufferext.CPUBuffer)
    with pytest.raises(TypeError, match="bytearray is not a bufferext "
                                        "exporter"):
        api.dltensor_from_py_object_no_sync(bytearray(8), ctypes.byref(out))


# ---- item 9: numpy's fallbacks over device memory ---------------------------

def test_numpy_refuses_device_adapter_and_view(driver: str) -> None:
    harness.check(driver, """
        import numpy as np
        buf = bufferext.CUDABuffer(4)
        adapter = bufferext.as_buffer(buf)
        view = bufferext.get_buffer(buf)
        for obj in (buf, adapter, view):
            for convert in (np.asarray, np.array):
                try:
                    convert(obj)
                except BufferError as e:
                    assert type(obj).__name__ in str(e), e
                else:
                    raise AssertionError((obj, convert))
        view.release()
        del adapter
        buf.close()
    """)


def test_numpy_still_reads_cpu_adapter_and_view() -> None:
    data = np.arange(4.0)
    adapter = bufferext.as_buffer(data, readonly=True)
    assert not hasattr(adapter, "__array__")
    assert np.asarray(adapter).tolist() == [0.0, 1.0, 2.0, 3.0]
    with bufferext.get_buffer(bufferext.CPUBuffer(2)) as view:
        assert not hasattr(view, "__array__")
        assert np.asarray(view).shape == (2,)


# ---- item 11: unclear errors ------------------------------------------------

@pytest.mark.parametrize("flags, name", [(0x100, "PyBUF_READ"),
                                         (0x200, "PyBUF_WRITE")])
def test_bare_read_write_values_name_themselves(flags: int, name: str) -> None:
    with pytest.raises(ValueError, match=f"flags = {flags:#x} is {name}"):
        bufferext.get_buffer(b"abc", flags)


def test_dlpack_returning_a_non_capsule_names_the_exporter() -> None:
    class Liar:
        def __dlpack__(self, **kwargs: object) -> object:
            return [1, 2]

        def __dlpack_device__(self) -> tuple:
            return (1, 0)

    with pytest.raises(TypeError, match=r"Liar.__dlpack__\(\) returned a "
                                        r"'list', not a DLPack capsule"):
        bufferext.as_buffer(Liar())


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
        bufferext.get_buffer(exporter, BufferFlags.FULL | BufferFlags.DEVICE)
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


# ---- empty arrays: their strides address nothing ---------------------------

def test_empty_array_with_huge_sizes_and_null_strides(
        capi_modules: Dict[str, ModuleType]) -> None:
    """A 0 in the shape makes the other sizes unbounded: C strides computed
    for them must not overflow, and the re-export must stay valid."""
    shape = (0,) + (1 << 20,) * 4
    x = capi_modules["c99"].Configurable(block_size=64, ndim=5, itemsize=1,
                                         shape=shape, strides=None, len=0)
    with bufferext.get_buffer(x) as v:
        assert v.shape == shape and v.nbytes == 0
        assert v.strides[-1] == 1 and v.strides[0] == 0
        assert v.tobytes() == b""
    a = bufferext.as_buffer(x, readonly=True)
    with bufferext.get_buffer(a) as v:
        assert v.shape == shape and v.nbytes == 0 and v.tobytes() == b""


def test_empty_array_strides_are_not_bounded(
        capi_modules: Dict[str, ModuleType]) -> None:
    x = capi_modules["c99"].Configurable(
        block_size=64, ndim=2, itemsize=8, shape=(3, 0),
        strides=(1 << 62, -(1 << 62)), len=0, format="d")
    with bufferext.get_buffer(x) as v:
        assert v.shape == (3, 0) and v.nbytes == 0
    with bufferext.get_buffer(bufferext.as_buffer(x, readonly=True)) as v:
        assert v.strides == (1 << 62, -(1 << 62))


# ---- a source that closes or resizes the target while it is read ------------

needs_pep688 = pytest.mark.skipif(sys.version_info < (3, 12),
                                  reason="Python classes export buffers "
                                         "from 3.12 (PEP 688)")


@needs_pep688
@pytest.mark.parametrize("action", ["close", "resize"])
def test_copy_source_cannot_close_the_target(action: str) -> None:
    """copy_from_host pins its target before it asks the source for its
    buffer: the source's __buffer__ (Python code) cannot free or shrink the
    memory about to be written."""
    target = bufferext.CPUBuffer(10)

    class Source:
        def __buffer__(self, flags: int) -> memoryview:
            getattr(target, action)(*([] if action == "close" else [(1,)]))
            return memoryview(bytearray(80))

    with pytest.raises(BufferError, match=f"cannot {action} while 1 "
                                          f"export"):
        target.copy_from_host(Source())
    assert target.exports == 0 and target.shape == (10,)
    target.copy_from_host(np.arange(10.0))
    assert np.asarray(target).tolist() == list(range(10))


@needs_pep688
def test_copy_source_cannot_close_a_device_target(driver: str) -> None:
    harness.check(driver, """
        target = bufferext.CUDABuffer(4)

        class Source:
            def __buffer__(self, flags):
                target.close()
                return memoryview(bytearray(32))

        try:
            target.copy_from_host(Source())
        except BufferError as e:
            assert "cannot close while 1 export" in str(e), e
        else:
            raise AssertionError("the source closed the target")
        assert target.exports == 0
        target.close()
    """)


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
