"""BufferView.synchronize, copy_to_host and copy_from_host: the CUDA
synchronisation rule and host staging for any exporter of CPU, CUDA or VE
memory.

CPU cases run here.  CUDA cases run in child interpreters against the
stand-in CUDA driver (tests/cuda_standin/, a test double built here), VE
cases against the stand-in VEO library (tests/ve_standin/), because each
library loads once per process.  With ``STANDIN_CUDA_LATE`` the stand-in
keeps queued writes pending until they are waited for, so a consumer that
skips the event wait reads old bytes; with ``STANDIN_CUDA_HOST_VISIBLE`` the
test reads device memory directly, as a CUDA-aware MPI library would.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
import textwrap
from typing import Dict

import numpy as np
import pytest

import bufferext
from bufferext import BufferFlags as F
from bufferext import get_buffer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "cuda_standin"))
sys.path.insert(0, os.path.join(HERE, "ve_standin"))
import standin  # noqa: E402
import standin_harness as harness  # noqa: E402

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the stand-ins are built for Linux")

KNOWN = ("(bufferext waits for and copies CPU memory, 'bufferext.cuda' and "
         "'bufferext.ve')")


def exact(message: str) -> str:
    """A raises pattern matching ``message`` whole."""
    return "^" + __import__("re").escape(message) + "$"


# ---- CPU memory -------------------------------------------------------------

@pytest.mark.parametrize("make", [
    lambda: bufferext.CPUBuffer((2, 3), "float32"),
    lambda: np.zeros((2, 3), "float32"),
], ids=["CPUBuffer", "numpy"])
def test_cpu_round_trip(make) -> None:
    obj = make()
    data = np.arange(6, dtype="float32").reshape(2, 3)
    with get_buffer(obj, F.FULL | F.DEVICE) as view:
        assert view.device is None
        view.synchronize()                          # nothing to wait for
        view.copy_from_host(data)
        assert (np.asarray(obj) == data).all()
        out = np.empty(6, "float32")                # only the bytes count
        view.copy_to_host(out)
        assert out.tolist() == data.ravel().tolist()
        raw = bytearray(24)
        view.copy_to_host(raw)
        assert bytes(raw) == data.tobytes()
        view.copy_from_host(bytes(24))              # a read-only source
        assert (np.asarray(obj) == 0).all()


def test_cpu_zero_size_and_zero_dim() -> None:
    with get_buffer(np.zeros((3, 0))) as view:
        view.copy_to_host(bytearray())
        view.copy_from_host(b"")
    scalar = np.array(5, "int16")
    with get_buffer(scalar, F.FULL | F.DEVICE) as view:
        view.copy_from_host(np.array(9, "int16"))
        out = np.zeros((), "int16")
        view.copy_to_host(out)
        assert int(out) == 9 and int(scalar) == 9


def test_wrong_sizes_name_both() -> None:
    with get_buffer(np.zeros(4)) as view:
        with pytest.raises(ValueError, match=exact(
                "BufferView.copy_to_host: target has 24 bytes, the view 32")):
            view.copy_to_host(np.zeros(3))
        with pytest.raises(ValueError, match=exact(
                "BufferView.copy_from_host: source has 40 bytes, the view "
                "32")):
            view.copy_from_host(np.zeros(5))


def test_host_side_must_be_a_contiguous_buffer() -> None:
    with get_buffer(np.zeros(4)) as view:
        with pytest.raises(BufferError, match=exact(
                "BufferView.copy_to_host: target is not C-contiguous")):
            view.copy_to_host(np.zeros(8)[::2])
        with pytest.raises(BufferError, match=exact(
                "BufferView.copy_from_host: source is not C-contiguous")):
            view.copy_from_host(np.zeros((4, 2)).T[0:2])
        with pytest.raises(BufferError, match=exact(
                "BufferView.copy_to_host: target is read-only")):
            view.copy_to_host(bytes(32))
        with pytest.raises(TypeError, match=exact(
                "BufferView.copy_to_host: target must be a C-contiguous "
                "writable buffer of 32 bytes (a numpy array, bytearray...), "
                "not 'int'")):
            view.copy_to_host(42)
        with pytest.raises(TypeError, match=exact(
                "BufferView.copy_from_host: source must be a C-contiguous "
                "buffer of 32 bytes (a numpy array, bytearray...), not "
                "'list'")):
            view.copy_from_host([0.0] * 4)


def test_host_side_is_asked_for_what_the_copy_does(c99) -> None:
    # the host side was asked PyBUF_FULL_RO|DEVICE: a bytes-only exporter
    # (SIMPLE declared) was refused as a source, and a target was written
    # without asking PyBUF_WRITABLE, which this one refuses to serve
    with get_buffer(np.full(16, 0x41, np.uint8)) as view:
        source = c99.ExporterSimpleOnly(4)
        with get_buffer(source, F.SIMPLE) as simple:   # all it serves
            expected = simple.tobytes()
        view.copy_from_host(source)
        assert bytes(view) == expected
        assert source.exports == 0
    with get_buffer(np.full(16, 0x41, np.uint8)) as view:
        unwritable = c99.ExporterNoDevice(4)    # declares no WRITABLE
        before = bytes(memoryview(unwritable))
        with pytest.raises(BufferError, match="WRITABLE"):
            view.copy_to_host(unwritable)
        after = bytes(memoryview(unwritable))
        assert after == before != bytes(view)
        assert unwritable.exports == 0


def test_view_must_be_c_contiguous() -> None:
    strided = np.zeros((4, 4))[:, ::2]
    with get_buffer(strided, F.FULL | F.DEVICE) as view:
        for call, arg in ((view.copy_to_host, np.zeros(8)),
                          (view.copy_from_host, np.zeros(8))):
            with pytest.raises(BufferError, match=exact(
                    f"BufferView.{call.__name__}: the view is not "
                    "C-contiguous (shape=(4, 2), strides=(32, 16))")):
                call(arg)
        view.synchronize()                          # layout does not matter
    with get_buffer(np.zeros((2, 2)).T) as view:    # Fortran order
        with pytest.raises(BufferError, match="the view is not C-contiguous"):
            view.copy_to_host(np.zeros(4))


@pytest.mark.parametrize("make", [
    lambda: b"12345678",
    lambda: bufferext.CPUBuffer(1, "int64", readonly=True),
], ids=["bytes", "CPUBuffer-ro"])
def test_copy_from_host_refuses_a_read_only_view(make) -> None:
    obj = make()
    with get_buffer(obj) as view:
        assert view.readonly
        with pytest.raises(BufferError, match=exact(
                "BufferView.copy_from_host: the view is read-only")):
            view.copy_from_host(bytes(8))
        out = bytearray(8)
        view.copy_to_host(out)                      # reading is fine
        assert bytes(out) == bytes(memoryview(obj).cast("B"))


def test_released_view_raises_value_error() -> None:
    view = get_buffer(np.zeros(2))
    view.release()
    for call in (view.synchronize, lambda: view.copy_to_host(np.zeros(2)),
                 lambda: view.copy_from_host(np.zeros(2))):
        with pytest.raises(ValueError,
                           match=exact("operation on a released BufferView")):
            call()


def test_foreign_device_is_refused(c99) -> None:
    x = c99.Configurable(32, 32, 8, 1, "d", shape=(4,), device="acme.npu")
    with get_buffer(x) as view:
        assert view.device == "acme.npu"
        for name, call in (
                ("synchronize", view.synchronize),
                ("copy_to_host", lambda: view.copy_to_host(np.zeros(4))),
                ("copy_from_host", lambda: view.copy_from_host(np.zeros(4)))):
            with pytest.raises(BufferError, match=exact(
                    f"BufferView.{name}: device 'acme.npu' is not supported "
                    + KNOWN)):
                call()
    assert x.exports == 0


def test_dlpack_of_a_device_info_without_context_names_the_field(
        c99) -> None:
    # the staging copies refused a NULL context by name; DLPack's stream
    # wait pushed it, and the driver's error named no field (checked before
    # the driver is needed: none here)
    x = c99.ExporterFull(4, device="bufferext.cuda")
    with get_buffer(x, F.FULL_RO | F.DEVICE) as view:
        context = ctypes.c_void_p.from_address(x.info_address + 8)
        event = ctypes.c_void_p.from_address(x.info_address + 16)
        saved = context.value
        context.value, event.value = None, 0x1234   # a pending event
        try:
            with pytest.raises(BufferError, match=exact(
                    "bufferext.BufferView: device_info.context is NULL beside "
                    "event 0x1234: no CUDA context to wait in")):
                view.__dlpack__(stream=2)
        finally:
            context.value, event.value = saved, None
    assert x.exports == 0


def test_numpy_refusal_names_the_copy_each_type_offers(c99) -> None:
    # it said "use to_host()", which neither a view nor an adapter has
    x = c99.Configurable(32, 32, 8, 1, "d", shape=(4,),
                         device="bufferext.cuda")
    with get_buffer(x) as view:
        with pytest.raises(BufferError, match="use copy_to_host\\(target\\) "
                                              "to copy it"):
            np.asarray(view)
    adapter = bufferext.as_buffer(x, readonly=True)
    with pytest.raises(BufferError, match=re.escape(
            "copy it with bufferext.get_buffer(obj).copy_to_host(target)")):
        np.asarray(adapter)
    del adapter
    assert x.exports == 0


def test_cuda_memory_without_event_needs_no_wait(c99) -> None:
    # a foreign exporter of 'bufferext.cuda' memory whose data is ready:
    # nothing to wait for, so no driver is needed; a device_info the
    # exporter changed to another major version since the export is refused
    x = c99.Configurable(32, 32, 8, 1, "d", shape=(4,),
                         device="bufferext.cuda")
    with get_buffer(x) as view:
        assert view.device_info.event == 0
        view.synchronize()
        x.info_version = 2 << 16
        for name, call in (
                ("synchronize", view.synchronize),
                ("copy_to_host", lambda: view.copy_to_host(np.zeros(4)))):
            with pytest.raises(BufferError, match=exact(
                    f"BufferView.{name}: device_info version 0x20000 is not "
                    "supported")):
                call()
        x.info_version = 1 << 16


def test_target_in_the_view_itself() -> None:
    # the view re-exports its own memory: the copy is a (harmless) move
    data = np.arange(4.0)
    with get_buffer(data, F.FULL | F.DEVICE) as view:
        view.copy_to_host(view)
        view.copy_from_host(view)
    assert data.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_signatures() -> None:
    import inspect
    view_type = bufferext.BufferView
    assert str(inspect.signature(view_type.synchronize)) == "(self, /)"
    assert str(inspect.signature(view_type.copy_to_host)) == \
        "(self, target, /)"
    assert str(inspect.signature(view_type.copy_from_host)) == \
        "(self, source, /)"


# ---- CUDA memory, through the stand-in driver -----------------------------------

@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> str:
    return harness.build(str(tmp_path_factory.mktemp("standin_cuda")))


LATE = {"STANDIN_CUDA_LATE": "1", "STANDIN_CUDA_HOST_VISIBLE": "1"}

CUDA_HELPERS = """
FULL_RO = BufferFlags.FULL_RO | BufferFlags.DEVICE
FULL = BufferFlags.FULL | BufferFlags.DEVICE

def raw(buf):
    # the device memory read directly (host-visible stand-in only)
    return np.frombuffer(ctypes.string_at(buf.ptr, buf.nbytes), buf.dtype)

class Interface:
    def __init__(self, name, value, keep=None):
        setattr(self, name, value)
        self.keep = keep
"""


def cuda(driver: str, body: str, **env: str) -> None:
    harness.check(driver, CUDA_HELPERS + textwrap.dedent(body), env=env)


@linux_only
def test_cuda_round_trip(driver: str) -> None:
    cuda(driver, """
        b = CUDABuffer((3, 4), "int32")
        data = np.arange(12, dtype="int32").reshape(3, 4)
        with bufferext.get_buffer(b, FULL) as view:
            assert view.device == "bufferext.cuda"
            view.copy_from_host(data)
            out = np.zeros((3, 4), "int32")
            view.copy_to_host(out)
            assert (out == data).all()
            assert (b.to_host() == data).all()
            view.copy_from_host(bufferext.CPUBuffer((3, 4), "int32"))
            out = bytearray(48)
            view.copy_to_host(out)
            assert bytes(out) == bytes(48)
        assert b.exports == 0 and live()["pushed"] == 0
    """)


@linux_only
def test_cuda_synchronize_waits_on_the_event_only_when_set(driver: str) -> None:
    cuda(driver, """
        b = CUDABuffer(4, "float32")            # a memset is pending
        with bufferext.get_buffer(b) as view:
            event = view.device_info.event
            assert event != 0
            sd.standin_reset_calls()
            view.synchronize()
            assert calls("cuEventSynchronize") == 1
            assert calls("cuEventRecord") == 0     # a consumer only waits
            out = np.empty(4, "float32")
            view.copy_to_host(out)                 # waits again, then copies
            assert calls("cuEventSynchronize") == 2
            assert calls("cuMemcpyDtoHAsync_v2") == 1
            assert calls("cuStreamSynchronize") == 1
            assert calls("cuCtxPushCurrent_v2") == calls("cuCtxPopCurrent_v2")
            assert (out == 0).all()
            assert sd.standin_event_records(event) == 1
        b.synchronize()
        with bufferext.get_buffer(b) as view:
            assert view.device_info.event == 0
            sd.standin_reset_calls()
            view.synchronize()                     # ready: no driver call
            assert calls("cuEventSynchronize") == 0
            assert calls("cuCtxPushCurrent_v2") == 0
        z = CUDABuffer(0)
        with bufferext.get_buffer(z) as view:
            view.copy_to_host(bytearray())
            view.copy_from_host(b"")
    """)


@linux_only
def test_cuda_errors(driver: str) -> None:
    cuda(driver, """
        b = CUDABuffer(4, "float64")
        view = bufferext.get_buffer(b)
        with raises(ValueError, match="^BufferView.copy_to_host: "
                           "target has 24 bytes, the view 32$"):
            view.copy_to_host(np.zeros(3))
        other = CUDABuffer(4, "float64")
        with raises(BufferError, match="^BufferView.copy_to_host: "
                           "target is memory on device 'bufferext.cuda', not "
                           "host memory$"):
            view.copy_to_host(other)
        assert other.exports == 0
        view.release()
        with raises(ValueError, match="released BufferView"):
            view.copy_to_host(np.zeros(4))
        r = CUDABuffer(4, "float64", readonly=True)
        with bufferext.get_buffer(r) as view:
            with raises(BufferError, match="^BufferView.copy_from_host: "
                               "the view is read-only$"):
                view.copy_from_host(np.zeros(4))
    """)


@linux_only
@pytest.mark.parametrize("entry, action", [
    ("cuEventSynchronize", "view.synchronize()"),
    ("cuEventSynchronize", "view.copy_to_host(np.zeros(8))"),
    ("cuCtxPushCurrent_v2", "view.copy_to_host(np.zeros(8))"),
    ("cuMemcpyDtoHAsync_v2", "view.copy_to_host(np.zeros(8))"),
    ("cuMemcpyHtoDAsync_v2", "view.copy_from_host(np.zeros(8))"),
    ("cuStreamSynchronize", "view.copy_from_host(np.zeros(8))"),
])
def test_cuda_driver_failures_raise(driver: str, entry: str,
                                    action: str) -> None:
    who = action.split("(")[0].replace("view.", "BufferView.")
    cuda(driver, f"""
        b = CUDABuffer(8)
        with bufferext.get_buffer(b, FULL) as view:
            os.environ["STANDIN_CUDA_FAIL"] = "{entry}=719"
            with raises(RuntimeError,
                               match="^{who}: {entry} failed: .*719"):
                {action}
            del os.environ["STANDIN_CUDA_FAIL"]
            assert live()["pushed"] == 0
            view.copy_from_host(np.arange(8.0))     # still usable
        assert b.to_host().tolist() == list(range(8))
    """)


IN_USE = ("BufferView: cannot release while it is in use (a wait or copy "
          "without the GIL: synchronize, copy_to_host, copy_from_host; or an "
          "attribute being read, by another thread or by the code that runs "
          "this release)")


# An export never meets a close half done.  The close frees without the
# GIL and, on a free-threaded build, with its critical section suspended,
# so another thread runs meanwhile; the close has marked the buffer closed
# and begun its change first (an export that counted itself without the
# object's lock backs off when it sees the change, Modules/exports.h).
# This stops a close inside the driver and exports from another thread.
@linux_only
def test_an_export_beside_a_close_is_refused_as_closed(driver: str) -> None:
    """While one thread's CUDABuffer.close() is stopped inside cuMemFree,
    an export from another thread does not get the memory being freed: it
    is refused as closed (waiting for the close would hang the child until
    the harness's timeout fails the test)."""
    cuda(driver, """
        import threading
        b = CUDABuffer(4, "int32")
        b.synchronize()
        got = []

        def export():
            try:
                got.append(bufferext.get_buffer(b, FULL))
            except BaseException as exc:
                got.append(exc)

        with stopped_in("cuMemFree_v2", b.close) as closed:
            exporter = threading.Thread(target=export)
            exporter.start()
            # a view now would point at memory the close is freeing
            exporter.join()
            assert len(got) == 1 and "closed" in str(got[0]), got
            assert closed == [], closed     # still stopped in cuMemFree
        assert closed == ["done"], closed
        assert len(got) == 1 and isinstance(got[0], BufferError), got
        assert "closed" in str(got[0]), got
        assert b.closed and b.exports == 0
    """)


# History: this test (CPU memory, then) released from the main thread in a
# loop while another thread copied 64 MiB, up to 100 times, hoping that one
# release() would land inside a copy.  On a loaded free-threaded build every
# copy finished first and CI failed ("no release() ever overlapped a copy").
# Now the stand-in driver holds the call inside the driver, where bufferext
# waits or copies without the GIL, until the release has been tried.
@linux_only
@pytest.mark.parametrize("entry, action", [
    ("cuEventSynchronize", "view.synchronize()"),
    ("cuMemcpyDtoHAsync_v2", "view.copy_to_host(out)"),
    ("cuMemcpyHtoDAsync_v2", "view.copy_from_host(source)"),
])
def test_release_during_a_copy_is_refused(driver: str, entry: str,
                                          action: str) -> None:
    """While one thread waits or copies without the GIL, release() from
    another raises BufferError instead of freeing the memory under it; the
    call then completes, and the view releases once it has."""
    cuda(driver, f"""
        import re
        b = CUDABuffer(4, "int32")          # its zero fill is pending
        view = bufferext.get_buffer(b, FULL)
        out = np.full(4, -1, "int32")
        source = np.arange(4, dtype="int32")
        with stopped_in("{entry}", lambda: {action}) as outcome:
            with raises(BufferError,
                               match="^" + re.escape({IN_USE!r})):
                view.release()
            assert not view.released
        assert outcome == ["done"], outcome
        view.release()
        assert b.exports == 0
        assert (out == 0).all() if "{entry}" == "cuMemcpyDtoHAsync_v2" \
            else (out == -1).all()
        assert b.to_host().tolist() == (
            [0, 1, 2, 3] if "{entry}" == "cuMemcpyHtoDAsync_v2" else [0] * 4)
    """)


@linux_only
def test_late_writes_are_seen_only_after_the_wait(driver: str) -> None:
    cuda(driver, """
        b = CUDABuffer(8, "float32")
        b.synchronize()                     # the zero fill has landed
        assert sd.standin_is_device_pointer(b.ptr) and b.ptr % 256 == 0
        assert (raw(b) == 0).all()
        b.fill(7.0)                         # a memset: pending until waited
        assert sd.standin_pending_work() == 1
        assert (raw(b) == 0).all()          # nobody waited: the old bytes
        with bufferext.get_buffer(b, FULL_RO) as view:
            assert view.device_info.event != 0
            view.synchronize()
            assert (raw(b) == 7).all()
        assert sd.standin_pending_work() == 0

        b.fill(3.0)                         # copy_to_host waits by itself
        assert (raw(b) == 7).all()
        with bufferext.get_buffer(b, FULL_RO) as view:
            out = np.zeros(8, "float32")
            view.copy_to_host(out)
            assert (out == 3).all()

        b.fill(2.0)                         # the exporter's pending write
        with bufferext.get_buffer(b, FULL) as view:  # lands before ours
            view.copy_from_host(np.full(8, 5, "float32"))
            assert (raw(b) == 5).all()
        sd.standin_land_all()               # whatever was still pending
        assert (raw(b) == 5).all()          # lands now: never after ours

        b.fill(4.0)                         # to_host waits on its stream
        assert (b.to_host() == 4).all()

        b.fill(9.0)                         # unwaited work lands when
        assert (raw(b) == 4).all()          # the device gets to it
        sd.standin_land_all()
        assert (raw(b) == 9).all() and sd.standin_pending_work() == 0
    """, **LATE)


@linux_only
def test_late_writes_through_another_exporter(driver: str) -> None:
    # a BufferAdapter of the CUDA Array Interface is another exporter of
    # 'bufferext.cuda' memory, with an event of its own
    cuda(driver, """
        b = CUDABuffer(8, "float32")
        b.synchronize()
        b.fill(6.0)
        cai = b.__cuda_array_interface__
        adapter = bufferext.as_buffer(Interface("__cuda_array_interface__",
                                                cai, b))
        assert (raw(b) == 0).all()
        with bufferext.get_buffer(adapter, FULL_RO) as view:
            assert view.obj is adapter and view.device_info.event != 0
            view.synchronize()
            assert (raw(b) == 6).all()
        b.fill(1.0)
        adapter = bufferext.as_buffer(Interface("__cuda_array_interface__",
                                                b.__cuda_array_interface__, b))
        with bufferext.get_buffer(adapter, FULL_RO) as view:
            out = np.zeros(8, "float32")
            view.copy_to_host(out)
            assert (out == 1).all()
    """, **LATE)


@linux_only
def test_late_mode_streams_and_frees_are_safe(driver: str) -> None:
    # pending work lands before its memory is freed or its stream destroyed
    # (no write into a freed block, no handle left to a freed stream), and
    # a queued host-to-device copy captured its source when it was queued
    cuda(driver, """
        cu = sd
        cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_ulonglong),
                                     ctypes.c_size_t]
        cu.cuMemFree_v2.argtypes = [ctypes.c_ulonglong]
        cu.cuMemsetD8Async.argtypes = [ctypes.c_ulonglong, ctypes.c_ubyte,
                                       ctypes.c_size_t, ctypes.c_void_p]
        cu.cuMemcpyHtoDAsync_v2.argtypes = [ctypes.c_ulonglong,
                                            ctypes.c_void_p, ctypes.c_size_t,
                                            ctypes.c_void_p]
        for name in ("cuStreamCreate", "cuDevicePrimaryCtxRetain",
                     "cuCtxPopCurrent_v2"):
            getattr(cu, name).argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                          ctypes.c_int]
        cu.cuCtxPopCurrent_v2.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        cu.cuStreamDestroy_v2.argtypes = [ctypes.c_void_p]
        cu.cuCtxPushCurrent_v2.argtypes = [ctypes.c_void_p]
        CUDABuffer(1)                         # cuInit
        ctx, stream = ctypes.c_void_p(), ctypes.c_void_p()
        assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
        assert cu.cuCtxPushCurrent_v2(ctx) == 0
        assert cu.cuStreamCreate(ctypes.byref(stream), 1) == 0
        ptr = ctypes.c_ulonglong()
        assert cu.cuMemAlloc_v2(ctypes.byref(ptr), 64) == 0
        assert cu.cuMemsetD8Async(ptr, 1, 64, stream) == 0
        assert cu.cuMemFree_v2(ptr) == 0      # the memset is not pending
        assert sd.standin_pending_work() == 0
        assert cu.cuMemAlloc_v2(ctypes.byref(ptr), 64) == 0
        source = ctypes.create_string_buffer(b"x" * 64)
        assert cu.cuMemcpyHtoDAsync_v2(ptr, source, 64, stream) == 0
        ctypes.memset(source, ord("y"), 64)  # the caller reuses its memory
        assert ctypes.string_at(ptr.value, 64) == b"\\xa5" * 64
        assert cu.cuStreamDestroy_v2(stream) == 0
        assert sd.standin_pending_work() == 0
        assert ctypes.string_at(ptr.value, 64) == b"x" * 64
        assert cu.cuMemFree_v2(ptr) == 0
        assert cu.cuCtxPopCurrent_v2(ctypes.byref(ctx)) == 0
        assert cu.cuDevicePrimaryCtxRelease_v2(0) == 0
        for _ in range(20):
            b = CUDABuffer(64, "float32")
            b.fill(1.0)
            b.close()
            c = CUDABuffer(64, "float32")
            c.fill(2.0)
            del c
        assert sd.standin_pending_work() == 0
        a = CUDABuffer(16, "float32")
        a.copy_from_host(np.full(16, 8, "float32"))
        b = CUDABuffer(16, "float32")
        b.copy_from(a)
        a.fill(0.0)                         # queued after the copy's read
        assert (b.to_host() == 8).all()
    """, **LATE)


@linux_only
def test_host_visible_memory_keeps_pointer_lookups(driver: str) -> None:
    cuda(driver, """
        b = CUDABuffer(4, "int32", device=1)
        assert sd.standin_is_device_pointer(b.ptr)
        assert sd.standin_is_device_pointer(b.ptr + 15)
        assert not sd.standin_is_device_pointer(b.ptr + 16)
        host = np.zeros(4, "int32")
        assert not sd.standin_is_device_pointer(host.ctypes.data)
        b.copy_from_host(np.arange(4, dtype="int32"))
        assert raw(b).tolist() == [0, 1, 2, 3]
        cai = b.__cuda_array_interface__
        adapter = bufferext.as_buffer(Interface("__cuda_array_interface__",
                                                cai, b))
        with bufferext.get_buffer(adapter) as view:
            assert view.device_info.device == 1   # cuPointerGetAttribute
    """, STANDIN_CUDA_HOST_VISIBLE="1", STANDIN_CUDA_DEVICES="2")


# ---- VE memory, through the stand-in VEO library -----------------------------

@pytest.fixture(scope="module")
def veo(tmp_path_factory: pytest.TempPathFactory) -> str:
    return standin.build(str(tmp_path_factory.mktemp("standin_veo")))


VE_PRELUDE = harness.RAISES + f"""
import ctypes, os, sys
import numpy as np
import bufferext
from bufferext import BufferFlags
sys.path.insert(0, {os.path.join(HERE, "ve_standin")!r})
from standin import Counters
counters = Counters()
FULL = BufferFlags.FULL | BufferFlags.DEVICE
"""

VE_EPILOGUE = """
import gc
gc.collect()
assert counters.hmem == 0 and counters.errors == 0, (counters.hmem,
                                                      counters.errors)
print("CHILD-OK")
"""


def ve(library: str, body: str, **env: str) -> None:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("STANDIN_VEO_", "BUFFEREXT_VEO_"))}
    environ["BUFFEREXT_VEO_LIBRARY"] = library
    environ.update(env)
    proc = subprocess.run(
        [sys.executable, "-c",
         VE_PRELUDE + textwrap.dedent(body) + VE_EPILOGUE],
        env=environ, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "CHILD-OK" in proc.stdout, (
        proc.stdout + proc.stderr)


@linux_only
def test_ve_round_trip(veo: str) -> None:
    ve(veo, """
        b = bufferext.VEBuffer((2, 3), "int64", node=1)
        data = np.arange(6).reshape(2, 3)
        with bufferext.get_buffer(b, FULL) as view:
            assert view.device == "bufferext.ve"
            copies = counters.calls("veo_hmemcpy")
            view.synchronize()                  # VEO copies are synchronous
            assert counters.calls("veo_hmemcpy") == copies
            view.copy_from_host(data)
            assert (b.to_host() == data).all()
            out = np.zeros(6, "int64")
            view.copy_to_host(out)
            assert out.tolist() == list(range(6))
            assert counters.calls("veo_hmemcpy") == copies + 3
            with raises(ValueError, match="^BufferView.copy_to_host: "
                               "target has 40 bytes, the view 48$"):
                view.copy_to_host(np.zeros(5, "int64"))
            os.environ["STANDIN_VEO_FAIL_COPY"] = "1"
            with raises(RuntimeError, match="^BufferView.copy_to_host: "
                               "veo_hmemcpy of 48 bytes failed"):
                view.copy_to_host(out)
            del os.environ["STANDIN_VEO_FAIL_COPY"]
        r = bufferext.VEBuffer(2, readonly=True)
        with bufferext.get_buffer(r) as view:
            with raises(BufferError, match="^BufferView.copy_from_host: "
                               "the view is read-only$"):
                view.copy_from_host(np.zeros(2))
        b.close(); r.close()
    """)


@linux_only
def test_ve_memory_of_another_exporter(veo: str) -> None:
    # HMEM allocated outside bufferext and described by the VE Array
    # Interface: the view's copies load the VEO library themselves
    ve(veo, """
        lib = counters.lib
        proc, address = counters.foreign_hmem(32)

        class Interface:
            __ve_array_interface__ = {
                "shape": (4,), "typestr": "<f8", "version": 1,
                "data": (address, False), "strides": None}

        adapter = bufferext.as_buffer(Interface())
        with bufferext.get_buffer(adapter, FULL) as view:
            view.copy_from_host(np.arange(4.0))
            out = np.zeros(4)
            view.copy_to_host(out)
            assert out.tolist() == [0.0, 1.0, 2.0, 3.0]
        del adapter
        assert lib.veo_free_hmem(address) == 0
        assert lib.veo_proc_destroy(proc) == 0
    """)
