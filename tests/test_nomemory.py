"""Allocation failure: every C entry point, when an allocation it makes
fails, raises MemoryError (or another clean exception) and leaves the
objects it touched as they were.

Each sweep runs in a child interpreter (a crash there names the operation
and the allocation, rather than killing pytest): for each i of a fixed
range, _testcapi.set_nomemory(i, i + 1) makes the i-th allocation after
it fail, the operation runs, the hooks go; the outcome must be success or
an exception other than SystemError (which is what CPython raises for a C
function that fails without an exception, or succeeds with one set), and
the operation must then work again without injection, with every export
count back at 0.  set_nomemory is process-wide, hence thread_unsafe.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import textwrap
from typing import Any, Dict, Optional

import pytest

from _helpers import ATTRIBUTE_DECLARES, NEEDS_ATTRIBUTE, run_child

pytest.importorskip("_testcapi", reason="the sweeps inject allocation "
                    "failures with _testcapi.set_nomemory (CPython's test "
                    "module, absent from some builds)")

pytestmark = pytest.mark.thread_unsafe(
    reason="_testcapi.set_nomemory makes every thread's allocations fail")

#: the header's lookup of the type attribute (backport mode)
needs_attribute = pytest.mark.skipif(not ATTRIBUTE_DECLARES,
                                     reason=NEEDS_ATTRIBUTE)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "cuda_standin"))
import standin_harness  # noqa: E402

# The child's sweep.  Everything it calls between set_nomemory and
# remove_mem_hooks is bound first: a failed lookup there would leave the
# hooks in place.
SWEEP = '''
import gc, os
import _testcapi

def sweep(name, op, stop, counted=(), allowed=(Exception,),
          persistent=False):
    """op() with allocation i failing (persistent: and every one after
    it), for i in range(stop): it succeeds or raises one of `allowed`,
    never SystemError."""
    fail, clear, bad = _testcapi.set_nomemory, _testcapi.remove_mem_hooks, []
    for _ in range(3):
        op()                        # caches, freelists, imports: warm
    for i in range(stop):
        os.write(2, f"{name} i={i}\\n".encode())
        error = None
        fail(i, 0 if persistent else i + 1)
        try:
            op()
        except BaseException as exc:
            error = exc
        finally:
            clear()
        if error is not None and (isinstance(error, SystemError) or
                                  not isinstance(error, allowed)):
            bad.append(f"{name} i={i}: {type(error).__name__}: {error}")
        del error
        gc.collect()
        op()                        # works again without injection
        for obj in counted:
            if obj.exports:
                bad.append(f"{name} i={i}: {obj!r} has {obj.exports} "
                           "export(s) left")
    assert not bad, "\\n".join(bad)
    print(f"SWEPT {name}")

def sweep_new_types(name, query, holds, stop):
    """query(obj) with allocation i failing, obj an instance of a class
    the header's accelerator has not seen (its declaration is looked up),
    for i in range(stop); then holds(obj) must be true: a failed lookup
    is not the class's answer."""
    from bufferext import CPUBuffer
    fail, clear = _testcapi.set_nomemory, _testcapi.remove_mem_hooks
    for i in range(stop):
        class Sub(CPUBuffer):
            pass
        obj = Sub(4)
        fail(i, i + 1)
        try:
            query(obj)
        except MemoryError:
            pass
        finally:
            clear()
        assert holds(obj), f"{name} i={i}"
    print(f"SWEPT {name}")
'''


def run_sweeps(body: str, env: Optional[dict] = None) -> str:
    """Run ``body`` after SWEEP in a child; the names it swept."""
    out = run_child(SWEEP + textwrap.dedent(body), env=env)
    return " ".join(line.split()[1] for line in out.splitlines()
                    if line.startswith("SWEPT "))


def test_cpu_entry_points_fail_cleanly() -> None:
    """The CPU producer, get_buffer and BufferView, the consumers' doors
    (memoryview, check_buffer_supports) and the exports (DLPack, Arrow,
    as_buffer's adapter), each swept past its last allocation: one
    allocation failing, then every one from the i-th on."""
    swept = run_sweeps('''
        import numpy as np
        import bufferext
        from bufferext import BufferFlags, CPUBuffer, get_buffer

        buf, flat = CPUBuffer((2, 3), "float32"), CPUBuffer(6, "float32")
        view = get_buffer(CPUBuffer((2, 3), "float32"))
        target = bytearray(24)
        array = np.arange(6.0)

        def new():
            CPUBuffer((2, 3), "float32")

        def export():
            with get_buffer(buf) as v:
                v.shape, v.strides, v.device_info, v._raw(), v.tobytes()
            memoryview(buf).release()

        def resize():
            CPUBuffer(4).resize((2, 3))

        def exports():
            buf.__dlpack__(max_version=(1, 0))
            buf.__dlpack__(max_version=(1, 0), copy=True)
            flat.__arrow_c_array__()
            view.__dlpack__()
            view.copy_to_host(target)

        def adapter():
            a = bufferext.as_buffer(array, readonly=True)
            memoryview(a).release()
            a.__dlpack__(max_version=(1, 0))

        def query():
            bufferext.check_buffer_supports(buf, BufferFlags.DEVICE)
            bufferext._bufferext.supported_flags(buf)

        for short in (False, True):
            sweep("new", new, 20, persistent=short)
            sweep("export", export, 40, [buf], persistent=short)
            sweep("resize", resize, 20, persistent=short)
            sweep("exports", exports, 30, [buf, flat], persistent=short)
            sweep("adapter", adapter, 30, persistent=short)
            sweep("query", query, 20, [buf], persistent=short)
        view.release()
        ''')
    assert swept.split() == "new export resize exports adapter query".split() * 2


@needs_attribute
def test_failed_lookup_is_not_cached() -> None:
    """The header's lookup of a type's declaration allocates (the attribute
    name); when that fails, check_buffer_supports answers False for that
    one query but must not remember the answer.  Before the fix the
    type's info was cached as if it declared nothing (from 3.12, where the
    version tag is assigned before the lookup): a CPUBuffer subclass
    supported no DEVICE request until the class changed."""
    out = run_sweeps('''
        import bufferext

        def check(obj):
            return bufferext.check_buffer_supports(obj, 0x10000)  # DEVICE

        sweep_new_types("check", check, check, 8)
        ''')
    assert out == "check"


def test_header_get_buffer_fails_cleanly(capi_builds: Dict[str, Any]
                                        ) -> None:
    """BufferExt_GetBuffer, the header's inline path, compiled into the
    C11 test extension: on a type the accelerator knows and on a new one
    (its lookup), each allocation failing in turn leaves no export and no
    wrong answer cached for the type."""
    build = capi_builds["c11"]
    out = run_sweeps(f"""
        import importlib.util
        from bufferext import CPUBuffer

        spec = importlib.util.spec_from_file_location(
            {build.module_name!r}, {build.path!r})
        tc = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tc)
        buf = CPUBuffer((2, 3), "float32")

        sweep("known", lambda: tc.get_buffer(buf, 0x1011C), 30, [buf])
        sweep_new_types(
            "new_types", lambda obj: tc.get_buffer(obj, 0x1011C),
            lambda obj: obj.exports == 0 and tc.check_supports(obj, 0x10000),
            25)
        """)
    assert out == "known new_types"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the limited API "
                    "has Py_buffer from 3.11")
@pytest.mark.skipif(bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
                    reason="a free-threaded CPython before 3.15 has no "
                    "limited API")
def test_limited_build_fails_cleanly(capi_build: Any, tmp_path: Any) -> None:
    """BufferExt_GetBuffer and the queries built with Py_LIMITED_API
    (internal/limited.h, its own lookups through attribute access), each
    allocation failing in turn and, memory staying short, every one after
    it: no export left, no SystemError, and a bad declaration never
    accepted."""
    from test_limited_api import limited_build
    build = capi_build.build([limited_build(capi_build, "c11",
                                            str(tmp_path))])[0]
    out = run_sweeps(f"""
        import importlib.util
        from bufferext import CPUBuffer

        spec = importlib.util.spec_from_file_location(
            {build.module_name!r}, {build.path!r})
        lim = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(lim)

        class Sub(CPUBuffer):
            pass

        class Bad(CPUBuffer):
            __buffer_supported_flags__ = "x"

        buf, sub, bad = CPUBuffer((2, 3), "float32"), Sub(4), Bad(4)
        ours = lim.LimitedExporter(b"abcd")

        def get():
            lim.get_release(buf, 0x1011C, 2)
            lim.get(sub, 0x1011C)
            lim.get(ours, 0x1011C)
            lim.get(b"abc", 0x11C)
            lim.check_supports(sub, 0x10000)

        def refuse():
            try:
                lim.supported_flags(bad)
            except TypeError:
                pass
            else:
                raise AssertionError("a bad declaration was accepted")

        for persistent in (False, True):
            sweep("get", get, 40, [buf, sub], persistent=persistent)
            sweep("refuse", refuse, 20, allowed=(MemoryError, TypeError),
                  persistent=persistent)
        """)
    assert out == "get refuse get refuse"


@needs_attribute
def test_invalid_declaration_under_failure() -> None:
    """supported_flags of an instance whose class declares a bad value
    reads the declaration again for its message; when that lookup failed
    it returned -1 with no exception (SystemError) before the fix.  Now a
    TypeError, without the value."""
    out = run_sweeps('''
        import bufferext
        from bufferext import CPUBuffer

        class Bad(CPUBuffer):
            __buffer_supported_flags__ = "x"

        bad = Bad(4)

        def query():
            try:
                bufferext._bufferext.supported_flags(bad)
            except TypeError:
                pass
            else:
                raise AssertionError("a bad declaration was accepted")

        sweep("supported_flags", query, 12, allowed=(MemoryError,))
        ''')
    assert out == "supported_flags"


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="CPython 3.13.0 "
                    "itself crashes under this sweep (a dict resize in "
                    "type_ready after a failed allocation)")
def test_module_exec_names_a_missing_method_truthfully() -> None:
    """Module init wraps BufferView.__enter__/__exit__ (fastmethod.c); it
    looked them up with PyDict_GetItemString, which turns a failed
    allocation into "not found": SystemError "BufferView.__enter__ is not a
    method" instead of MemoryError.  The sweep runs the module's exec on
    fresh module objects over the allocations of BufferView's setup."""
    run_child('''
        import _imp, gc, importlib.util
        import _testcapi
        import bufferext

        def main():
            fail, clear = _testcapi.set_nomemory, _testcapi.remove_mem_hooks
            spec = importlib.util.find_spec("bufferext._bufferext")
            bad = []
            for i in range(700):
                module = importlib.util.module_from_spec(spec)
                fail(i, i + 1)
                try:
                    _imp.exec_dynamic(module)
                except SystemError as exc:
                    bad.append((i, str(exc)))
                except MemoryError:
                    pass
                finally:
                    clear()
                del module
                gc.collect()
            # CPython's own PyType_FromModuleAndSpec drops some failures
            # (3.12: "failed without setting an exception"); ours name a
            # thing
            ours = [b for b in bad if "without setting" not in b[1]]
            assert not ours, ours
            with bufferext.get_buffer(bufferext.CPUBuffer(2)) as view:
                assert view.shape == (2,)
        main()
        ''')


@pytest.fixture(scope="module")
def cuda_driver(tmp_path_factory: pytest.TempPathFactory) -> str:
    if not sys.platform.startswith("linux"):
        pytest.skip("the stand-in driver is built for Linux")
    return standin_harness.build(str(tmp_path_factory.mktemp("nomem_cuda")))


def test_cuda_fill_keeps_memory_error(cuda_driver: str) -> None:
    """CUDABuffer.fill read the value's dtype kind and the buffer's one
    after the other, the second with the first's MemoryError pending:
    numpy then raised AttributeError ("has no attribute 'kind'").  Now
    each call runs only once the one before it succeeded."""
    out = run_sweeps('''
        import bufferext

        buf = bufferext.CUDABuffer((2, 3), "float32")

        sweep("fill", lambda: buf.fill(1.0), 40, [buf],
              allowed=(MemoryError,))
        ''', env={"BUFFEREXT_CUDA_DRIVER": cuda_driver})
    assert out == "fill"
