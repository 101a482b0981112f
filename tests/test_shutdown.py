"""Release discipline and interpreter shutdown.

1. An exporter that is closed, resized or dropped while exported refuses
   with BufferError (or stays alive for its exports), for every producer
   and every kind of holder of an export: BufferView, memoryview,
   DLPack capsule, a consumed capsule (BufferAdapter) and a re-export
   (as_buffer(..., readonly=True)).
2. Interpreter shutdown with live exports and live DLPack capsules, held
   in module globals, in reference cycles and in daemon threads, neither
   crashes nor prints anything, and the stand-in device libraries (test
   doubles built here) report at process exit what the documented rule
   says: memory of every freed buffer is freed; what CPython itself never
   frees (a daemon thread's frame) is kept, never freed twice or after its
   process.

Each case runs in a child interpreter (the device libraries load once per
process, and shutdown can only be observed from outside).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from typing import Dict

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "cuda_standin"))
sys.path.insert(0, os.path.join(HERE, "ve_standin"))
import standin  # noqa: E402
import standin_harness  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the stand-in libraries are built "
                                       "for Linux")

#: Runs after Py_Finalize, at exit(): reads the stand-in CUDA driver's live
#: counters and writes them to $SHUTDOWN_REPORT.  A test helper.
REPORTER = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef long (*counter)(void);

__attribute__((destructor)) static void report(void)
{
    static const char *names[] = {
        "standin_live_allocations", "standin_live_streams",
        "standin_live_events", "standin_context_refs", NULL};
    const char *out = getenv("SHUTDOWN_REPORT");
    const char *lib = getenv("BUFFEREXT_CUDA_DRIVER");
    void *handle;
    FILE *f;
    int i;

    if (out == NULL || lib == NULL) {
        return;
    }
    handle = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    f = fopen(out, "w");
    if (f == NULL) {
        return;
    }
    for (i = 0; names[i] != NULL; i++) {
        counter c = handle ? (counter)dlsym(handle, names[i]) : NULL;
        fprintf(f, "%s=%ld\n", names[i], c ? c() : -1L);
    }
    fclose(f);
}
"""


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    """The stand-in CUDA driver, stand-in VEO library and exit reporter."""
    out = str(tmp_path_factory.mktemp("shutdown_libs"))
    source = os.path.join(out, "reporter.c")
    with open(source, "w") as f:
        f.write(REPORTER)
    reporter = os.path.join(out, "libreporter.so")
    cc = os.environ.get("CC") or shutil.which("gcc") or "cc"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Wextra",
                    "-Werror", "-o", reporter, source, "-ldl"], check=True)
    return {"cuda": standin_harness.build(out), "ve": standin.build(out),
            "reporter": reporter}


def run_child(libs: Dict[str, str], code: str, tmp_path: "os.PathLike[str]"
              ) -> Dict[str, int]:
    """Run ``code`` in a child; assert exit code 0 and an empty stderr;
    return the stand-ins' counters as left at process exit."""
    cuda_report = os.path.join(str(tmp_path), "cuda_report")
    ve_report = os.path.join(str(tmp_path), "ve_report")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("STANDIN_", "BUFFEREXT_"))}
    env.update(BUFFEREXT_CUDA_DRIVER=libs["cuda"],
               BUFFEREXT_VEO_LIBRARY=libs["ve"],
               SHUTDOWN_REPORT=cuda_report, STANDIN_VEO_REPORT=ve_report,
               REPORTER=libs["reporter"])
    prelude = textwrap.dedent("""
        import ctypes, gc, os, sys, threading, time
        import numpy as np
        import bufferext
        from bufferext import CPUBuffer, CUDABuffer, VEBuffer, BufferFlags
        CUDABuffer(1).close()       # loads the stand-in driver
        VEBuffer(1).close()         # and the stand-in VEO library
        ctypes.CDLL(os.environ["REPORTER"])
    """)
    proc = subprocess.run([sys.executable, "-c",
                           prelude + textwrap.dedent(code)],
                          env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stderr == "", proc.stderr[-4000:]
    counters: Dict[str, int] = {}
    for path, prefix in ((cuda_report, "cuda_"), (ve_report, "ve_")):
        with open(path) as f:
            for key, value in re.findall(r"(\w+)=(-?\d+)", f.read()):
                counters[prefix + key] = int(value)
    return counters


def freed(counters: Dict[str, int]) -> bool:
    """Everything the stand-ins handed out came back (VE: nodes without
    users are torn down at exit, so procs and contexts are 0 too)."""
    return (counters["cuda_standin_live_allocations"] == 0
            and counters["cuda_standin_live_events"] == 0
            and counters["cuda_standin_live_streams"] == 0
            and counters["ve_hmem"] == 0 and counters["ve_procs"] == 0
            and counters["ve_contexts"] == 0 and counters["ve_errors"] == 0)


# ---- 1. closed, resized or dropped while exported -------------------------

HOLDERS = ["view", "memoryview", "capsule", "consumed_capsule", "readonly"]
PRODUCERS = ["CPUBuffer", "CUDABuffer", "VEBuffer"]

RELEASE_DISCIPLINE = """
    def make(kind):
        return {"CPUBuffer": lambda: CPUBuffer((4, 4), "float32"),
                "CUDABuffer": lambda: CUDABuffer((4, 4), "float32"),
                "VEBuffer": lambda: VEBuffer((4, 4), "float32")}[kind]()

    def hold(obj, how):
        if how == "view":
            return bufferext.get_buffer(obj)
        if how == "memoryview":
            return memoryview(obj)
        if how == "capsule":
            return obj.__dlpack__(max_version=(1, 0))
        if how == "consumed_capsule":
            return bufferext._bufferext._adapter_from_dlpack(
                obj, obj.__dlpack__(max_version=(1, 0)), None)
        if how == "readonly":
            return bufferext.as_buffer(obj, readonly=True)

    import weakref
    for kind in PRODUCERS:
        for how in HOLDERS:
            obj = make(kind)
            try:
                held = hold(obj, how)
            except BufferError as exc:
                if how == "memoryview":
                    # device memory never reaches a CPU-only consumer
                    assert kind != "CPUBuffer", exc
                    assert "PyBUF_DEVICE" in str(exc), exc
                else:
                    # DLPack has no device type for VE memory
                    assert kind == "VEBuffer" and "DLPack" in str(exc), exc
                continue
            assert obj.exports == 1, (kind, how, obj.exports)
            try:
                obj.close()
            except BufferError as exc:
                assert kind in str(exc) and "export" in str(exc), exc
            else:
                raise AssertionError(f"{kind}.close() with a live {how}")
            assert not obj.closed
            if hasattr(obj, "resize"):
                try:
                    obj.resize((2, 2))
                except BufferError:
                    pass
                else:
                    raise AssertionError(f"{kind}.resize() while exported")
                assert obj.shape == (4, 4)
            # dropping the exporter keeps it alive for its export
            ref = weakref.ref(obj)
            del obj
            gc.collect()
            assert ref() is not None, (kind, how)
            assert ref().exports == 1
            if how == "view":
                held.release()
            elif how == "memoryview":
                held.release()
            del held
            gc.collect()
            assert ref() is None, (kind, how)   # freed once released
    print("OK")
"""


def test_close_resize_drop_while_exported(libs: Dict[str, str],
                                          tmp_path: "os.PathLike[str]"
                                          ) -> None:
    counters = run_child(libs, f"PRODUCERS = {PRODUCERS!r}\n"
                         f"HOLDERS = {HOLDERS!r}\n" +
                         textwrap.dedent(RELEASE_DISCIPLINE),
                         tmp_path)
    assert freed(counters), counters


def test_adapter_and_view_refuse_release_while_reexported(
        libs: Dict[str, str], tmp_path: "os.PathLike[str]") -> None:
    """A BufferView refuses release() while it is itself exported; the
    adapter's source stays alive (and refuses close) while the adapter has
    exports; every count is exact after."""
    counters = run_child(libs, """
        for make in (lambda: CPUBuffer(8), lambda: CUDABuffer(8),
                     lambda: VEBuffer(8)):
            src = make()
            view = bufferext.get_buffer(src)
            inner = bufferext.get_buffer(view)
            try:
                view.release()
            except BufferError as exc:
                assert "export" in str(exc)
            else:
                raise AssertionError("release() while re-exported")
            inner.release()
            view.release()
            adapter = bufferext.as_buffer(src, readonly=True)
            outer = bufferext.get_buffer(adapter)
            del adapter
            gc.collect()
            try:
                src.close()
            except BufferError:
                pass
            else:
                raise AssertionError("close() under an adapter's export")
            outer.release()
            gc.collect()
            assert src.exports == 0
            src.close()
    """, tmp_path)
    assert freed(counters), counters


# ---- 2. interpreter shutdown ------------------------------------------------

SHUTDOWN_CASES = {
    # live exports held in module globals, never released
    "globals": """
        bufs = [CPUBuffer(16), CUDABuffer(16), VEBuffer(16)]
        views = [bufferext.get_buffer(b) for b in bufs]
        mv = memoryview(bufs[0])
        adapters = [bufferext.as_buffer(b, readonly=True) for b in bufs]
    """,
    # live DLPack capsules (unconsumed and consumed) in module globals
    "capsules": """
        cpu, cuda = CPUBuffer(16), CUDABuffer(16)
        caps = [cpu.__dlpack__(max_version=(1, 0)),
                cuda.__dlpack__(max_version=(1, 0)),
                cpu.__dlpack__(), cuda.__dlpack__()]
        consumed = bufferext._bufferext._adapter_from_dlpack(
            cuda, cuda.__dlpack__(max_version=(1, 0)), None)
        del cpu, cuda
    """,
    # exports and capsules that only the cycle collector can reach
    "cycles": """
        class Node:
            pass
        for make in (lambda: CPUBuffer(16), lambda: CUDABuffer(16),
                     lambda: VEBuffer(16)):
            a, b = Node(), Node()
            a.other, b.other = b, a
            a.buf = make()
            a.view = bufferext.get_buffer(a.buf)
            if not isinstance(a.buf, VEBuffer):
                b.cap = a.buf.__dlpack__(max_version=(1, 0))
            b.adapter = bufferext.as_buffer(a.buf, readonly=True)
            del a, b
        gc.disable()            # leave them to the final collection
    """,
    # a daemon thread still holding exports when the interpreter exits
    "daemon_thread": """
        started = threading.Event()
        def hold():
            bufs = [CPUBuffer(16), CUDABuffer(16), VEBuffer(16)]
            views = [bufferext.get_buffer(b) for b in bufs]
            cap = bufs[1].__dlpack__(max_version=(1, 0))
            started.set()
            while True:
                with bufferext.get_buffer(bufs[0]):
                    time.sleep(0.001)
        threading.Thread(target=hold, daemon=True).start()
        started.wait()
    """,
    # daemon threads acquiring and releasing as fast as they can at exit
    # (the main thread exits once all three are in their loops)
    "daemon_busy": """
        started = threading.Barrier(4)
        shared = [CPUBuffer(16), CUDABuffer(16), VEBuffer(16)]
        def spin():
            started.wait()
            while True:
                for b in shared:
                    bufferext.get_buffer(b).release()
                cap = shared[1].__dlpack__(max_version=(1, 0))
                del cap
        for _ in range(3):
            threading.Thread(target=spin, daemon=True).start()
        started.wait()
    """,
}


@pytest.mark.parametrize("case", sorted(SHUTDOWN_CASES))
def test_shutdown_with_live_exports(case: str, libs: Dict[str, str],
                                    tmp_path: "os.PathLike[str]") -> None:
    """Exit code 0, nothing on stderr, and the device memory accounted
    for: everything freed, except what a daemon thread still holds when
    CPython stops it (CPython never frees a daemon thread's frame, so its
    buffers are kept: never freed after their VEO process is gone, and
    never freed twice)."""
    if case == "daemon_busy" and sys.version_info[:2] == (3, 10):
        # Seen on 3.10.13: a daemon thread that wakes in take_gil() after
        # finalization reads the freed interpreter (RESET_GIL_DROP_REQUEST)
        # and the process dies with SIGSEGV; three daemon threads spinning
        # on memoryview(bytearray) without bufferext crash 20 runs in 200.
        pytest.skip("CPython 3.10 may crash at exit with busy daemon threads, "
                    "bufferext or not")
    counters = run_child(libs, SHUTDOWN_CASES[case], tmp_path)
    assert counters["ve_errors"] == 0, counters
    if case == "daemon_thread":
        # one CUDA allocation and one HMEM block (with its node) kept
        assert counters["cuda_standin_live_allocations"] == 1, counters
        assert counters["ve_hmem"] == 1 and counters["ve_procs"] == 1
    elif case == "daemon_busy":
        # a buffer is kept only if a thread was stopped holding a view of
        # it; then its VE node is kept too (HMEM never outlives its process)
        assert counters["cuda_standin_live_allocations"] <= 1, counters
        assert counters["ve_hmem"] <= 1, counters
        assert counters["ve_procs"] == counters["ve_hmem"], counters
    else:
        assert freed(counters), counters


def test_capsule_destructor_at_shutdown_releases_its_export(
        libs: Dict[str, str], tmp_path: "os.PathLike[str]") -> None:
    """An unconsumed capsule freed while the interpreter finalizes (its
    destructor runs with the GIL, in the finalizing thread) releases its
    export, so the exporter and its device memory are freed too."""
    counters = run_child(libs, """
        KEEP = CUDABuffer(64).__dlpack__(max_version=(1, 0))
        KEEP_LEGACY = CUDABuffer(64).__dlpack__()
    """, tmp_path)
    assert counters["cuda_standin_live_allocations"] == 0, counters
