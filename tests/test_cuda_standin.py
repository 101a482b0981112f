"""CUDABuffer through the stand-in CUDA driver (a test double built here).

Every case runs in a child interpreter (the driver loads once per process)
and ends with the stand-in reporting no live allocation, stream, event,
retained or pushed context.  No GPU is needed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "cuda_standin"))
import standin_harness as harness  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the stand-in driver is built for Linux")


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> str:
    return harness.build(str(tmp_path_factory.mktemp("standin_cuda")))


# ---- loading and devices ---------------------------------------------------

def test_driver_disabled_by_none() -> None:
    # the prelude loads the stand-in, so run this one without it
    result = subprocess.run(
        [sys.executable, "-c",
         "import bufferext\n"
         "try:\n    bufferext.CUDABuffer(4)\n"
         "except bufferext.DeviceUnavailableError as e:\n    print('E', e)\n"
         "print(bufferext.devices()[0]['loaded'])"],
        env=dict(os.environ, BUFFEREXT_CUDA_DRIVER="none"),
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "E CUDA driver disabled by BUFFEREXT_CUDA_DRIVER=none" in result.stdout
    assert result.stdout.strip().endswith("False")


def try_cudabuffer(cuda_driver: str) -> subprocess.CompletedProcess:
    """A child that makes CUDABuffer(4) with BUFFEREXT_CUDA_DRIVER set to
    ``cuda_driver`` and prints the DeviceUnavailableError it gets."""
    return subprocess.run(
        [sys.executable, "-c",
         "import bufferext\n"
         "try:\n    bufferext.CUDABuffer(4)\n"
         "except bufferext.DeviceUnavailableError as e:\n    print(e)\n"],
        env=dict(os.environ, BUFFEREXT_CUDA_DRIVER=cuda_driver),
        capture_output=True, text=True)


def test_driver_not_found_names_the_path() -> None:
    result = try_cudabuffer("/nonexistent/libcuda.so")
    assert result.returncode == 0, result.stderr
    assert "CUDA driver not found" in result.stdout
    assert "/nonexistent/libcuda.so" in result.stdout


def test_library_without_the_entry_points(driver: str) -> None:
    result = try_cudabuffer("libm.so.6")
    assert "failed to load: it lacks the symbol cuGetErrorName" in result.stdout


def test_init_failure_is_device_unavailable(driver: str) -> None:
    harness.check(driver, """
        with raises(DeviceUnavailableError,
                           match=r"cuInit: CUDA_ERROR_UNKNOWN \\(999\\)"):
            CUDABuffer(4)
        with raises(DeviceUnavailableError):   # cuInit runs once
            CUDABuffer(4)
        assert calls("cuInit") == 1
        status = bufferext.devices()[0]
        assert status["loaded"] is True and status["devices"] == []
        assert "failed to start" in status["error"]
    """, env={"STANDIN_CUDA_INIT_ERROR": "999"})


def test_device_count_failure_names_cuDeviceGetCount(driver: str) -> None:
    # cuInit succeeded; the message named cuInit for cuDeviceGetCount's code
    harness.check(driver, """
        with raises(DeviceUnavailableError,
                           match=r"failed to start: cuDeviceGetCount: "
                                 r"CUDA_ERROR_UNKNOWN \\(999\\)"):
            CUDABuffer(4)
        assert calls("cuInit") == 1 and calls("cuDeviceGetCount") == 1
    """, env={"STANDIN_CUDA_FAIL": "cuDeviceGetCount"})


def test_zero_devices(driver: str) -> None:
    harness.check(driver, """
        with raises(DeviceUnavailableError, match="reports no CUDA device"):
            CUDABuffer(4)
        assert bufferext.devices()[0]["devices"] == []
    """, env={"STANDIN_CUDA_DEVICES": "0"})


def test_devices_lists_count_and_names(driver: str) -> None:
    harness.check(driver, """
        status = bufferext.devices()[0]
        assert status["loaded"] and status["error"] is None
        assert status["devices"] == ["0: bufferext stand-in CUDA device 0",
                                     "1: bufferext stand-in CUDA device 1"]
    """, env={"STANDIN_CUDA_DEVICES": "2"})


def test_device_ordinal_out_of_range_lists_devices(driver: str) -> None:
    harness.check(driver, """
        for bad in (3, -1, 2**70):
            with raises(ValueError, match="3 CUDA device") as info:
                CUDABuffer(4, device=bad)
            assert "2: bufferext stand-in CUDA device 2" in str(info.value)
        for bad in ("0", True, 1.0):
            with raises(TypeError, match="device must be an int"):
                CUDABuffer(4, device=bad)
        b = CUDABuffer(4, device=2)
        assert b.device == 2 and b.__dlpack_device__() == (2, 2)
        with bufferext.get_buffer(b) as view:
            assert view.device_info.device == 2
    """, env={"STANDIN_CUDA_DEVICES": "3"})


# ---- construction, attributes, export -----------------------------------------

def test_construction_attributes_and_zero_fill(driver: str) -> None:
    harness.check(driver, """
        b = CUDABuffer((2, 3), "float32")
        assert b.shape == (2, 3) and b.ndim == 2 and b.itemsize == 4
        assert b.nbytes == 24 and b.strides == (12, 4)
        assert b.dtype == np.dtype("float32") and b.format == "f"
        assert b.device == 0 and not b.readonly and not b.closed
        assert b.exports == 0
        assert sd.standin_is_device_pointer(b.ptr) and b.ptr % 256 == 0
        # the stand-in fills fresh memory with 0xA5: zeros prove the memset
        assert (b.to_host() == 0).all()
        assert repr(b) == "CUDABuffer((2, 3), dtype='float32', device=0)"
        d = CUDABuffer(5)
        assert d.dtype == np.dtype("float64") and d.shape == (5,)
        with raises(TypeError):
            CUDABuffer((2, 3), "U4")
        with raises(ValueError, match="negative"):
            CUDABuffer((-1,))
    """)


def test_supported_flags_are_precise(driver: str) -> None:
    harness.check(driver, """
        b = CUDABuffer(4)
        assert bufferext.supported_flags(b) == BufferFlags.LEGACY | BufferFlags.DEVICE
        assert type(b).__buffer_supported_flags__ == 0x1FD | 0x10000
        assert bufferext.check_buffer_supports(b, BufferFlags.DEVICE)
    """)


def test_plain_requests_are_refused(driver: str) -> None:
    harness.check(driver, """
        b = CUDABuffer(4)
        for consumer in (memoryview, bytes, bytearray):
            with raises(BufferError, match="request PyBUF_DEVICE"):
                consumer(b)
        # numpy would wrap the refused object in an object array: __array__
        # refuses explicitly
        for convert in (np.asarray, np.array):
            with raises(BufferError, match="use to_host"):
                convert(b)
        with raises(BufferError, match="request PyBUF_DEVICE"):
            bufferext.get_buffer(b, BufferFlags.FULL_RO)
        assert b.exports == 0
    """)


def test_get_buffer_shows_device_and_typed_info(driver: str) -> None:
    harness.check(driver, """
        b = CUDABuffer((4, 2), "int16")
        with bufferext.get_buffer(b) as view:
            assert view.device == "bufferext.cuda"
            assert view.flags == BufferFlags.DEVICE
            assert view.ptr == b.ptr and view.shape == (4, 2)
            assert view.format == "h" and view.strides == (4, 2)
            info = view.device_info
            assert isinstance(info, bufferext.CUDADeviceInfo)
            assert info.version == 0x10000 and info.device == 0
            assert info.context != 0
            # construction queued a memset: the event must be waited on
            assert info.event != 0
            assert sd.standin_event_records(info.event) == 1
            assert b.exports == 1
            with raises(BufferError, match="not CPU-accessible"):
                view.tobytes()
        assert b.exports == 0
        b.synchronize()
        with bufferext.get_buffer(b) as view:
            assert view.device_info.event == 0      # NULL: ready now
        b.fill(3)
        with bufferext.get_buffer(b) as view:
            assert view.device_info.event != 0
        b.to_host()                                  # waits for the stream
        with bufferext.get_buffer(b) as view:
            assert view.device_info.event == 0
    """)


def test_request_flags_are_honoured(driver: str) -> None:
    harness.check(driver, """
        b = CUDABuffer((3, 4), "float64")
        F = BufferFlags
        for flags in (F.SIMPLE, F.ND, F.STRIDES, F.C_CONTIGUOUS,
                      F.ANY_CONTIGUOUS, F.FULL, F.RECORDS_RO):
            with bufferext.get_buffer(b, flags | F.DEVICE) as view:
                assert view.device == "bufferext.cuda"
        with raises(BufferError, match="not Fortran contiguous"):
            bufferext.get_buffer(b, F.F_CONTIGUOUS | F.DEVICE)
        assert b.exports == 0
    """)


def test_readonly_is_honoured(driver: str) -> None:
    harness.check(driver, """
        b = CUDABuffer(4, "float32", readonly=True)
        assert b.readonly
        with raises(BufferError, match="read-only"):
            bufferext.get_buffer(b, BufferFlags.FULL | BufferFlags.DEVICE)
        b.copy_from_host(np.ones(4, "float32"))       # not exported: allowed
        view = bufferext.get_buffer(b)
        assert view.readonly
        with raises(BufferError, match="read-only"):
            b.copy_from_host(np.ones(4, "float32"))
        with raises(BufferError, match="read-only"):
            b.fill(2.0)
        view.release()
        assert b.__cuda_array_interface__["data"][1] is True
    """)


# ---- copies and fill --------------------------------------------------------

def test_round_trips_for_every_dtype(driver: str) -> None:
    harness.check(driver, """
        for dtype in ("bool", "int8", "uint16", "int32", "int64", "float16",
                      "float32", "float64", "complex64", "complex128", ">i4"):
            data = (np.arange(12) % 3).astype(dtype).reshape(3, 4)
            b = CUDABuffer((3, 4), dtype)
            b.copy_from_host(data)
            out = b.to_host()
            assert out.dtype == np.dtype(dtype) and out.shape == (3, 4)
            assert (out == data).all(), dtype
    """)


def test_copy_from_host_sources(driver: str) -> None:
    harness.check(driver, """
        b = CUDABuffer(4, "int32")
        src = np.arange(8, dtype="int32")[::2]          # not contiguous
        b.copy_from_host(src)
        assert b.to_host().tolist() == [0, 2, 4, 6]
        b.copy_from_host(bytes(range(16)))              # raw bytes
        assert b.to_host().tobytes() == bytes(range(16))
        b.copy_from_host(bufferext.CPUBuffer(4, "int32"))
        assert b.to_host().tolist() == [0, 0, 0, 0]
    """)


def test_copy_from_host_mismatches(driver: str) -> None:
    harness.check(driver, """
        b = CUDABuffer(4, "float64")
        with raises(ValueError, match="source has 24 bytes, the buffer 32"):
            b.copy_from_host(np.zeros(3))
        with raises(ValueError, match="format 'f' with 4-byte items does not match"):
            b.copy_from_host(np.zeros(8, "float32"))     # same size
        with raises(TypeError):
            b.copy_from_host(42)
        c = CUDABuffer(4, "float64")
        with raises(BufferError, match="PyBUF_DEVICE"):
            b.copy_from_host(c)                          # device memory
    """)


def test_copy_from_device_orders_the_streams(driver: str) -> None:
    harness.check(driver, """
        a = CUDABuffer(6, "int64")
        a.copy_from_host(np.arange(6))
        a.fill(-1)                           # a memset: a has pending work
        b = CUDABuffer(6, "int64")
        sd.standin_reset_calls()
        b.copy_from(a)
        # b's stream waited on a's event, then a's stream on b's event
        assert calls("cuStreamWaitEvent") == 2
        assert calls("cuMemcpyDtoDAsync_v2") == 1
        with bufferext.get_buffer(b) as view:
            assert view.device_info.event != 0
            assert sd.standin_last_wait_event() == view.device_info.event
        assert b.to_host().tolist() == [-1] * 6
        a.synchronize()
        sd.standin_reset_calls()
        b.copy_from(a)                                   # a is ready
        assert calls("cuStreamWaitEvent") == 1
        b.copy_from(b)                                   # no-op
        with raises(ValueError, match="source has 40 bytes"):
            b.copy_from(CUDABuffer(5, "int64"))
        with raises(ValueError, match="dtype"):
            b.copy_from(CUDABuffer(6, "float64"))
        with raises(TypeError, match="must be a CUDABuffer"):
            b.copy_from(np.zeros(6))
        c = CUDABuffer(6, "int64"); c.close()
        with raises(ValueError, match="closed"):
            b.copy_from(c)
    """)


def test_fill_uses_memsets_where_possible(driver: str) -> None:
    harness.check(driver, """
        cases = [("int8", -3, "cuMemsetD8Async"),
                 ("uint16", 513, "cuMemsetD16Async"),
                 ("float32", 1.5, "cuMemsetD32Async"),
                 ("float64", 0.0, "cuMemsetD8Async"),
                 ("int64", 0x0101010101010101, "cuMemsetD8Async"),
                 ("int64", 5, "cuMemcpyHtoDAsync_v2"),
                 ("float64", 1.5, "cuMemcpyHtoDAsync_v2"),
                 ("complex128", 1 + 2j, "cuMemcpyHtoDAsync_v2"),
                 ("bool", True, "cuMemsetD8Async")]
        for dtype, value, entry in cases:
            b = CUDABuffer(5, dtype)
            sd.standin_reset_calls()
            b.fill(value)
            assert calls(entry) == 1, (dtype, value, entry)
            assert (b.to_host() == np.array(value, dtype)).all()
    """)


def test_fill_rejects_bad_values(driver: str) -> None:
    harness.check(driver, """
        b = CUDABuffer(5, "int32")
        with raises(ValueError, match="is not a int32 scalar"):
            b.fill(1.5)
        with raises(ValueError, match="must be a scalar"):
            b.fill([1, 2])
        with raises(ValueError, match="not a int32 scalar"):
            b.fill("x")
        with raises((OverflowError, ValueError)):
            CUDABuffer(2, "int8").fill(300)
        assert (b.to_host() == 0).all()
    """)


def test_fill_converts_as_numpy_fill_does(driver: str) -> None:
    # numpy.array(value, dtype) wrapped a numpy integer past the dtype's
    # range (int8 300 -> 44) and refused a Python int past int64 that a
    # float holds; a low-precision float value was "not a float"
    harness.check(driver, """
        b = CUDABuffer(2, "int8")
        for value in (np.int64(300), 300, np.uint64(2**63)):
            with raises(OverflowError, match=r"^CUDABuffer.fill: value .* does "
                        "not fit int8$"):
                b.fill(value)
        b.fill(np.int64(-128))
        assert b.to_host().tolist() == [-128, -128]
        f = CUDABuffer(2, "float32")
        f.fill(2**70)
        assert f.to_host().tolist() == [float(np.float32(2.0**70))] * 2
        with raises(OverflowError, match="does not fit int64"):
            CUDABuffer(1, "int64").fill(2**63)
        try:
            import ml_dtypes
        except ImportError:
            ml_dtypes = None
        if ml_dtypes is not None:
            f.fill(ml_dtypes.bfloat16(1.5))
            assert f.to_host().tolist() == [1.5, 1.5]
            e8 = CUDABuffer(2, "float8_e8m0fnu")
            e8.fill(ml_dtypes.float8_e5m2(2.0))
            assert e8.to_host().view(np.uint8).tolist() == [128, 128]
            with raises(ValueError, match=r"value .* \\(bfloat16\\) is not a "
                        "int8 scalar"):
                b.fill(ml_dtypes.bfloat16(1.5))
    """)


def test_fill_value_that_closes_the_buffer(driver: str) -> None:
    # issue 21: before, fill() checked the buffer, then converted the value
    # (numpy calls its __array__: Python code), then queued a memset on
    # the pointer it had freed meanwhile
    harness.check(driver, """
        b = CUDABuffer(4, "int32")
        class Value:
            def __array__(self, dtype=None, copy=None):
                b.close()
                return np.array(7, np.int32)
        with raises(ValueError, match="closed CUDABuffer"):
            b.fill(Value())
        assert calls("cuMemsetD32Async") == 0
    """)


def test_readers_and_copies_pinned_against_a_finalizer(driver: str) -> None:
    # issue 21: to_host() (numpy.empty), __cuda_array_interface__ and repr
    # (allocations) may run a finalizer that closes the buffer; the copy or
    # the description must be of live memory, never of a freed pointer
    harness.check(driver, """
        sys.path.insert(0, os.environ["BUFFEREXT_TESTS"])
        import _hooks
        for read in (lambda b: b.to_host(),
                     lambda b: b.__cuda_array_interface__,
                     repr, lambda b: b.ptr):
            current = []
            with _hooks.in_gc(lambda: current[-1].close(), times=300) as fired:
                for _ in range(300):
                    b = CUDABuffer((3, 2), "float32")
                    b.fill(2.0)
                    current.append(b)
                    try:
                        got = read(b)
                    except ValueError as e:
                        assert "closed CUDABuffer" in str(e)
                        continue
                    if isinstance(got, np.ndarray):
                        assert (got == 2.0).all()
            for b in current:
                b.close()
    """, env={"BUFFEREXT_TESTS": os.path.dirname(os.path.abspath(__file__))})


def test_zero_size_buffers(driver: str) -> None:
    harness.check(driver, """
        b = CUDABuffer((0, 3), "float32")
        assert b.nbytes == 0 and b.ptr == 0
        assert calls("cuMemAlloc_v2") == 0
        assert b.__cuda_array_interface__["data"] == (0, False)
        b.fill(1.0)
        b.copy_from_host(np.zeros((0, 3), "float32"))
        b.copy_from(CUDABuffer((0, 3), "float32"))
        assert b.to_host().shape == (0, 3)
        with bufferext.get_buffer(b) as view:
            assert view.nbytes == 0 and view.device_info.event == 0
    """)


# ---- close and lifetime -------------------------------------------------------

def test_close_refused_while_exported_and_use_after_close(driver: str) -> None:
    harness.check(driver, """
        b = CUDABuffer(4)
        view = bufferext.get_buffer(b)
        with raises(BufferError, match="1 export"):
            b.close()
        cap = b.__dlpack__(max_version=(1, 0))
        view.release()
        with raises(BufferError, match="export"):
            b.close()
        del cap
        b.close()
        b.close()                                   # harmless
        assert b.closed and live()["allocations"] == 0
        for use in (lambda: b.copy_from_host(np.zeros(4)), b.to_host,
                    lambda: b.fill(1.0), b.synchronize, lambda: b.ptr,
                    lambda: b.__cuda_array_interface__, b.__dlpack__,
                    # it answered (2, 0) once closed (review of the exports)
                    b.__dlpack_device__,
                    lambda: CUDABuffer(4).copy_from(b)):
            with raises(ValueError, match="closed CUDABuffer"):
                use()
        with raises(BufferError, match="closed"):
            bufferext.get_buffer(b)
        assert "(closed)" in repr(b)
        with CUDABuffer(3) as c:
            assert not c.closed
        assert c.closed
    """)


@pytest.mark.skipif(sys.version_info < (3, 12),
                    reason="__release_buffer__ is 3.12's (PEP 688)")
def test_a_class_assigned_during_an_export_never_sees_device_memory(
        driver: str) -> None:
    """A device view made by A's typed entry, released once its object's
    class is B, whose __release_buffer__ gets a memoryview of what it
    releases: the release goes to the releasebuffer A's entry pairs with,
    and B's Python code never sees the device memory (it read it, and
    crashed).  The same for a re-export held by an adapter."""
    harness.check(driver, """
        seen = []
        class A(CUDABuffer):
            pass
        class B(CUDABuffer):
            def __release_buffer__(self, view):
                seen.append(view.nbytes)         # device memory, as CPU's
                super().__release_buffer__(view)
        b = A((16,), "u1")
        view = bufferext.get_buffer(b)
        assert view.device == "bufferext.cuda"
        b.__class__ = B
        view.release()
        assert seen == [] and b.exports == 0
        b.__class__ = A
        adapter = bufferext.as_buffer(b, readonly=True)   # re-exported
        assert adapter.device == "bufferext.cuda"
        assert adapter.protocol == "buffer", adapter.protocol
        b.__class__ = B
        del adapter
        assert seen == [] and b.exports == 0
        b.close()
        # B's own exports still go through its __release_buffer__
        with raises(BufferError):
            memoryview(B((4,), "u1"))
    """)


def test_out_of_memory_is_memory_error_without_leaks(driver: str) -> None:
    harness.check(driver, """
        keep = CUDABuffer(100, "uint8")
        with raises(MemoryError, match="cannot allocate 1600 bytes on CUDA device 0"):
            CUDABuffer(200, "float64")
        assert live()["allocations"] == 1 and live()["streams"] == 1
        assert live()["pushed"] == 0
    """, env={"STANDIN_CUDA_MEM_LIMIT": "1000"})


@pytest.mark.parametrize("entry", [
    "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxPushCurrent_v2",
    "cuStreamCreate", "cuEventCreate", "cuMemAlloc_v2", "cuMemsetD8Async",
    "cuEventRecord"])
def test_construction_failures_leak_nothing(driver: str, entry: str) -> None:
    harness.check(driver, f"""
        with raises(RuntimeError,
                           match=r"CUDABuffer: {entry} failed: CUDA_ERROR_UNKNOWN \\(999\\): unknown error"):
            CUDABuffer(8)
    """, env={"STANDIN_CUDA_FAIL": entry})


@pytest.mark.parametrize("entry, action", [
    ("cuMemcpyHtoDAsync_v2", "b.copy_from_host(np.zeros(8))"),
    ("cuMemcpyDtoHAsync_v2", "b.to_host()"),
    ("cuMemcpyDtoDAsync_v2", "b.copy_from(CUDABuffer(8))"),
    ("cuStreamSynchronize", "b.synchronize()"),
    ("cuMemsetD8Async", "b.fill(0.0)"),
    ("cuMemcpyHtoDAsync_v2", "b.fill(1.25)"),
    ("cuEventRecord", "b.fill(0.0)"),
    ("cuStreamWaitEvent", "b.copy_from(CUDABuffer(8))"),
    ("cuStreamWaitEvent", "b.__dlpack__(max_version=(1, 0))"),
])
def test_failed_operations_raise_and_leak_nothing(driver: str, entry: str,
                                                  action: str) -> None:
    harness.check(driver, f"""
        b = CUDABuffer(8)
        os.environ["STANDIN_CUDA_FAIL"] = "{entry}=719"
        with raises(RuntimeError, match="{entry} failed: .*719"):
            {action}
        del os.environ["STANDIN_CUDA_FAIL"]
        assert b.exports == 0 and live()["pushed"] == 0
        b.copy_from_host(np.arange(8.0))            # still usable
        assert b.to_host().tolist() == list(range(8))
    """)


@pytest.mark.parametrize("how", ["close", "dealloc"])
def test_close_waits_for_the_stream_without_the_gil(driver: str,
                                                    how: str) -> None:
    """close() and the last reference's dealloc wait for the buffer's work
    (cuStreamSynchronize: as long as a kernel runs) without the GIL: while
    one thread is stopped there, another runs Python code.  Holding the GIL
    there, the main thread could not return from standin_wait_held: the
    child would hang until the harness's timeout fails the test."""
    harness.check(driver, f"""
        def end():
            # made in this thread: on a free-threaded build the object is
            # the thread's, and its last reference ends here too
            b = CUDABuffer(8)
            if {how!r} == "close":
                b.close()
            else:
                del b                           # the last reference

        with stopped_in("cuStreamSynchronize", end) as outcome:
            pass
        assert outcome == ["done"], outcome
        assert live() == NOTHING, live()
    """)


@pytest.mark.parametrize("entry, action", [
    ("cuMemcpyDtoHAsync_v2", "b.to_host()"),
    ("cuMemcpyHtoDAsync_v2", "b.copy_from_host(np.arange(8.0))"),
    ("cuStreamSynchronize", "b.synchronize()"),
])
def test_copies_wait_without_the_gil(driver: str, entry: str,
                                     action: str) -> None:
    """A copy between a CUDABuffer and host memory runs without the GIL: a
    copy to or from pageable memory returns only once it is done, behind
    the kernels queued before it.  While one thread is stopped inside the
    driver's copy, another runs Python code (holding the GIL there, the
    main thread could not return from standin_wait_held: the child would
    hang until the harness's timeout fails the test)."""
    harness.check(driver, f"""
        b = CUDABuffer(8)
        with stopped_in("{entry}", lambda: {action}) as outcome:
            # pinned meanwhile: the copy's memory cannot be freed under it
            with raises(BufferError):
                b.close()
        assert outcome == ["done"], outcome
        b.close()
    """)


# Without the GIL only: the stop below is in a driver call made with the
# GIL held (the push that starts the wait), so with the GIL nothing could
# run beside it.
@pytest.mark.skipif(getattr(sys, "_is_gil_enabled", lambda: True)(),
                    reason="needs a thread running beside one stopped "
                           "with the GIL held (a free-threaded build)")
def test_close_beside_a_synchronize_is_refused(driver: str) -> None:
    """A close() from another thread while synchronize() is on its way to
    the wait is refused: synchronize() is pinned before it reads the
    buffer's context and stream, which a close would free."""
    harness.check(driver, """
        b = CUDABuffer(8)
        with stopped_in("cuCtxPushCurrent_v2", b.synchronize) as outcome:
            with raises(BufferError, match="close"):
                b.close()
            assert not b.closed
        assert outcome == ["done"], outcome
        b.close()
    """)


def test_failed_close_still_releases_the_rest(driver: str) -> None:
    harness.check(driver, """
        b = CUDABuffer(8)
        os.environ["STANDIN_CUDA_FAIL"] = "cuMemFree_v2"
        with raises(RuntimeError, match="CUDABuffer.close: cuMemFree_v2 failed"):
            b.close()
        del os.environ["STANDIN_CUDA_FAIL"]
        assert b.closed
        assert live() == dict(NOTHING, allocations=1)   # the driver kept it
    """, check_leaks=False)


def test_dealloc_frees_everything(driver: str) -> None:
    harness.check(driver, """
        bufs = [CUDABuffer(16, device=i % 2) for i in range(10)]
        assert live()["allocations"] == 10 and live()["contexts"] == 10
        views = [bufferext.get_buffer(b) for b in bufs]
        del bufs
        assert live()["allocations"] == 10           # the views hold them
        del views
        assert live() == NOTHING
    """, env={"STANDIN_CUDA_DEVICES": "2"})


def test_cpu_consumer_dereferencing_a_device_pointer_crashes(driver: str) -> None:
    # the stand-in's device addresses are reserved PROT_NONE: reading one
    # from the CPU faults instead of returning plausible bytes
    result = harness.run(driver, """
        b = CUDABuffer(8)
        ctypes.string_at(b.ptr, 8)
    """)
    assert result.returncode != 0 and "CHILD-OK" not in result.stdout


# ---- the existing protocols ---------------------------------------------------

def test_cuda_array_interface_exact(driver: str) -> None:
    harness.check(driver, """
        b = CUDABuffer((2, 3), "float32")
        cai = b.__cuda_array_interface__
        assert set(cai) == {"shape", "typestr", "data", "version", "strides",
                            "stream"}
        stream = cai["stream"]
        assert isinstance(stream, int) and stream > 2   # pending: own stream
        b.synchronize()
        assert b.__cuda_array_interface__ == {
            "shape": (2, 3), "typestr": "<f4", "data": (b.ptr, False),
            "version": 3, "strides": None, "stream": None}
        b.fill(2.0)
        assert b.__cuda_array_interface__["stream"] == stream
        big = CUDABuffer(3, ">f8", readonly=True)
        big.synchronize()
        assert big.__cuda_array_interface__["typestr"] == ">f8"
        assert big.__cuda_array_interface__["data"] == (big.ptr, True)
    """)


# The child reads capsules with the suite's one ctypes reading of DLPack.
DLPACK_STRUCTS = f"""
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from _dlpack_ctypes import read_legacy, read_versioned
"""


def test_dlpack_capsule_fields(driver: str) -> None:
    harness.check(driver, DLPACK_STRUCTS + textwrap.dedent("""
        b = CUDABuffer((3, 4), "float32", device=1)
        assert b.__dlpack_device__() == (2, 1)
        cap = b.__dlpack__(max_version=(1, 0))
        assert b.exports == 1
        m = read_versioned(cap)
        assert (m.version.major, m.version.minor) == (1, 0) and m.flags == 0
        t = m.dl_tensor
        assert (t.device.device_type, t.device.device_id) == (2, 1)
        assert t.data == b.ptr and t.ndim == 2 and t.byte_offset == 0
        assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == (2, 32, 1)
        assert [t.shape[i] for i in range(2)] == [3, 4]
        assert [t.strides[i] for i in range(2)] == [4, 1]
        del t, m, cap
        assert b.exports == 0
        legacy = b.__dlpack__()
        m = read_legacy(legacy)
        assert m.dl_tensor.device.device_id == 1
        del m, legacy
        r = CUDABuffer(2, "int8", readonly=True)
        cap = r.__dlpack__(max_version=(1, 2))
        m = read_versioned(cap)
        assert m.flags & 1 == 1 and (m.version.major, m.version.minor) == (1, 2)
        del m, cap
        with raises(BufferError, match="versioned"):
            r.__dlpack__()
        with raises(BufferError, match="dl_device"):
            b.__dlpack__(dl_device=(1, 0))
        b.__dlpack__(dl_device=(2, 1), max_version=(1, 0))
        with raises(BufferError, match="copy=True"):
            b.__dlpack__(copy=True)
        with bufferext.get_buffer(b) as view:
            assert view.__dlpack_device__() == (2, 1)
            cap = view.__dlpack__(max_version=(1, 0))
            m = read_versioned(cap)
            assert m.dl_tensor.data == b.ptr
            del m, cap
    """), env={"STANDIN_CUDA_DEVICES": "2"})


def test_dlpack_stream_rule(driver: str) -> None:
    harness.check(driver, """
        b = CUDABuffer(4)                    # pending memset: event set
        with bufferext.get_buffer(b) as view:
            event = view.device_info.event
        other = CUDABuffer(1)
        consumer = other.__cuda_array_interface__["stream"]
        for stream, expected in ((None, 1), (1, 1), (2, 2),
                                 (consumer, consumer)):
            sd.standin_reset_calls()
            cap = b.__dlpack__(stream=stream, max_version=(1, 0))
            assert calls("cuStreamWaitEvent") == 1, stream
            assert sd.standin_last_wait_stream() == expected
            assert sd.standin_last_wait_event() == event
            del cap
        sd.standin_reset_calls()
        cap = b.__dlpack__(stream=-1)
        assert calls("cuStreamWaitEvent") == 0          # -1: no sync
        del cap
        with raises(ValueError, match="0 is ambiguous"):
            b.__dlpack__(stream=0)
        with raises(ValueError, match="stream=-2"):
            b.__dlpack__(stream=-2)
        # wider than a pointer: it was PyLong_AsVoidPtr's raw OverflowError
        for wide in (2**64, -2**64):
            with raises(ValueError, match=f"stream={wide} is not valid"):
                b.__dlpack__(stream=wide)
        for bad in ("1", 1.0, True):
            with raises(TypeError, match="stream must be None or an int"):
                b.__dlpack__(stream=bad)
        assert b.exports == 0
        b.synchronize()                                  # event NULL
        sd.standin_reset_calls()
        cap = b.__dlpack__(stream=None)
        assert calls("cuStreamWaitEvent") == 0
        del cap
        cpu = bufferext.CPUBuffer(2)
        with raises(BufferError, match="stream must be None"):
            cpu.__dlpack__(stream=1)
    """)


def test_refused_dlpack_leaves_the_consumer_stream_alone(driver: str) -> None:
    # the consumer's stream was made to wait on the event before these
    # refusals (review of the exports): ordering is the last step
    harness.check(driver, """
        other = CUDABuffer(1)
        consumer = other.__cuda_array_interface__["stream"]
        ro = CUDABuffer(4, "int8", readonly=True)        # pending memset
        b = CUDABuffer(4, "float32")
        for match, call in [
                ("needs a versioned", lambda: ro.__dlpack__(stream=consumer)),
                ("copy=True is supported for CPU memory only",
                 lambda: b.__dlpack__(stream=consumer, copy=True,
                                      max_version=(1, 0))),
                ("cannot export to dl_device",
                 lambda: b.__dlpack__(stream=consumer, dl_device=(1, 0)))]:
            sd.standin_reset_calls()
            with raises(BufferError, match=match):
                call()
            assert calls("cuStreamWaitEvent") == 0, match
        assert ro.exports == 0 and b.exports == 0
        sd.standin_reset_calls()
        cap = b.__dlpack__(stream=consumer, max_version=(1, 0))
        assert calls("cuStreamWaitEvent") == 1         # accepted: ordered
        del cap
    """)


@pytest.mark.parametrize("entry", ["cuCtxPushCurrent_v2", "cuStreamCreate"])
def test_failed_bridge_stream_gives_its_context_back(driver: str,
                                                     entry: str) -> None:
    # each failed try left the primary context retained once more
    harness.check(driver, f"""
        m = bufferext._bufferext
        os.environ["STANDIN_CUDA_FAIL"] = "{entry}"
        for _ in range(3):
            with raises(RuntimeError, match="as_buffer: {entry} failed"):
                m._cuda_bridge_stream(0)
            assert live() == NOTHING, live()
        del os.environ["STANDIN_CUDA_FAIL"]
        stream = m._cuda_bridge_stream(0)       # made once, kept
        assert stream == m._cuda_bridge_stream(0)
        assert live() == dict(NOTHING, streams=1, contexts=1), live()
    """, check_leaks=False)


def test_pointer_query_failure_is_not_called_host_memory(driver: str) -> None:
    # only CUDA_ERROR_INVALID_VALUE says "not CUDA memory"; another code
    # (a sticky error, an unknown one) was reported as that too, unnumbered
    harness.check(driver, """
        b = CUDABuffer(4)
        cai = b.__cuda_array_interface__
        class Interface:
            __cuda_array_interface__ = cai
        os.environ["STANDIN_CUDA_FAIL"] = "cuPointerGetAttribute=719"
        with raises(RuntimeError,
                           match=r"as_buffer: cuPointerGetAttribute failed: "
                                 r"unknown CUresult \\(719\\)"):
            bufferext.as_buffer(Interface())
        os.environ["STANDIN_CUDA_FAIL"] = "cuPointerGetAttribute=1"
        with raises(BufferError, match="is not CUDA device memory"):
            bufferext.as_buffer(Interface())
        del os.environ["STANDIN_CUDA_FAIL"]
        assert bufferext.as_buffer(Interface()).ptr == b.ptr
    """)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_refuses_cuda_and_gives_back_nothing(driver: str) -> None:
    # CUDA state does not survive fork(): the child of a process that ran
    # cuInit may not call the driver.  It called it (the stand-in lets it;
    # the real driver fails or hangs), freeing the parent's resources too.
    harness.check(driver, """
        b = CUDABuffer(4)
        b.fill(1.0)
        names = ("cuInit", "cuDeviceGet", "cuDevicePrimaryCtxRetain",
                 "cuDevicePrimaryCtxRelease_v2", "cuCtxPushCurrent_v2",
                 "cuStreamSynchronize", "cuMemFree_v2", "cuMemAlloc_v2",
                 "cuStreamDestroy_v2", "cuEventDestroy_v2",
                 "cuMemcpyDtoHAsync_v2", "cuMemcpyHtoDAsync_v2",
                 "cuMemsetD8Async", "cuMemsetD32Async")
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            out = []
            sd.standin_reset_calls()
            actions = [lambda: CUDABuffer(2), b.to_host, b.synchronize,
                       lambda: b.fill(2.0),
                       lambda: b.copy_from_host(np.zeros(4)),
                       lambda: b.__dlpack__(max_version=(1, 0))]
            for action in actions:
                try:
                    action()
                except DeviceUnavailableError as e:
                    out.append("forked" in str(e))
                except BaseException as e:
                    out.append(repr(e))
                else:
                    out.append("no error")
            b.close()                   # nothing to give back: no error
            out.append(b.closed)
            out.append(sum(calls(name) for name in names))
            os.write(write, repr(out).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            out = pipe.read()
        assert os.waitpid(pid, 0)[1] == 0
        assert out == repr([True] * 6 + [True, 0]), out
        assert b.to_host().tolist() == [1.0] * 4   # the parent's, intact
        b.close()
    """)


def test_capsule_alive_at_shutdown(driver: str) -> None:
    # a capsule (holding an export) outlives everything at exit: no crash
    harness.check(driver, """
        global KEEP
        KEEP = (CUDABuffer(4).__dlpack__(max_version=(1, 0)),)
        sys.modules["__main__"].KEEP = KEEP
    """, check_leaks=False)


def test_export_loop_has_no_drift(driver: str) -> None:
    harness.check(driver, """
        b = CUDABuffer((8, 8), "float32")
        before = sys.getrefcount(b)
        for _ in range(2000):
            with bufferext.get_buffer(b) as view:
                view.device_info
            cap = b.__dlpack__(max_version=(1, 0)); del cap
            b.__cuda_array_interface__
        assert sys.getrefcount(b) == before and b.exports == 0
    """)


# ---- numpy's fallbacks and a copy source's close (from test_boundary_c.py) ---

needs_pep688 = pytest.mark.skipif(sys.version_info < (3, 12),
                                  reason="Python classes export buffers "
                                         "from 3.12 (PEP 688)")


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


def test_the_childs_raises_fails_where_pytest_raises_would() -> None:
    """The children's `raises` (the harness's RAISES, in place of pytest)
    passes a matching exception and fails every way pytest.raises does."""
    ns: dict = {}
    exec(harness.RAISES, ns)
    raises = ns["raises"]
    with raises((KeyError, ValueError), match=r"bad \d") as info:
        raise ValueError("a bad 3 here")
    assert isinstance(info.value, ValueError)
    with pytest.raises(AssertionError, match="DID NOT RAISE"):
        with raises(ValueError):
            pass
    with pytest.raises(AssertionError, match="does not match"):
        with raises(ValueError, match="other"):
            raise ValueError("this")
    with pytest.raises(TypeError, match="not a ValueError"):
        with raises(ValueError):
            raise TypeError("not a ValueError")
