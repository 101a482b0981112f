"""Bridges for CUDA memory, through the stand-in driver (a test double).

CAI v3 and DLPack imports must name the device and context of the memory
and turn the producer's synchronisation into the event rule of bufferext's
CUDA device info; the adapter owns (and destroys) that event.  The bridge
stream lives as long as the process, so these cases check events and
allocations explicitly instead of the harness's blanket no-leak check."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "cuda_standin"))
import standin_harness as harness  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the stand-in driver is built for Linux")

HELPERS = """
class Interface:
    def __init__(self, name, value, keep=None):
        setattr(self, name, value)
        self.keep = keep

class DLPackOnly:
    def __init__(self, array):
        self.array = array
    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)
    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

def tensor_device(capsule):
    # the DLDevice fields (type, id) of a versioned capsule's tensor, as
    # ctypes ints a lying producer writes
    import ctypes
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    tensor = get_pointer(capsule, b"dltensor_versioned")
    # DLManagedTensorVersioned: version, manager_ctx, deleter, flags, then
    # dl_tensor: data, device (type, id)
    return (ctypes.c_int32.from_address(tensor + 8 * 5),
            ctypes.c_int32.from_address(tensor + 8 * 5 + 4))
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> str:
    return harness.build(str(tmp_path_factory.mktemp("standin_cuda")))


def check(driver: str, body: str) -> None:
    harness.check(driver, HELPERS + body, check_leaks=False,
                  env={"STANDIN_CUDA_DEVICES": "2"})


def test_cai_import_names_device_context_and_waits_on_the_stream(
        driver: str) -> None:
    check(driver, """
b = CUDABuffer((3, 4), "float32", device=1)
cai = b.__cuda_array_interface__
assert cai["stream"] is not None           # the memset is pending
events = sd.standin_live_events()
adapter = bufferext.as_buffer(Interface("__cuda_array_interface__", cai, b))
assert adapter.protocol == "cuda_array_interface"
assert adapter.device == "bufferext.cuda" and adapter.ptr == b.ptr
with bufferext.get_buffer(b) as own, bufferext.get_buffer(adapter) as v:
    info = v.device_info
    assert info.device == 1
    assert info.context == own.device_info.context
    assert info.event != 0 and info.event != own.device_info.event
    assert sd.standin_event_records(info.event) == 1
assert sd.standin_live_events() == events + 1
with raises(BufferError, match="PyBUF_DEVICE"):
    memoryview(adapter)
del adapter
gc.collect()
assert sd.standin_live_events() == events  # the adapter's event is gone
""")


def test_cai_with_stream_none_is_ready_now(driver: str) -> None:
    check(driver, """
b = CUDABuffer(8, "int32")
b.synchronize()
cai = b.__cuda_array_interface__
assert cai["stream"] is None
adapter = bufferext.as_buffer(Interface("__cuda_array_interface__", cai, b))
with bufferext.get_buffer(adapter) as view:
    assert view.device_info.event == 0 and view.device_info.device == 0
assert adapter.__dlpack_device__() == (2, 0)
""")


def test_cai_stream_is_the_int_it_says(driver: str) -> None:
    # an int subclass that is falsy was read as "no stream": ready now
    check(driver, """
class FalsyStream(int):
    def __bool__(self):
        return False
b = CUDABuffer(8, "int32")
b.fill(3)                                  # pending on b's stream
cai = dict(b.__cuda_array_interface__)
cai["stream"] = FalsyStream(cai["stream"])
adapter = bufferext.as_buffer(Interface("__cuda_array_interface__", cai, b))
with bufferext.get_buffer(adapter) as view:
    assert view.device_info.event != 0
    assert sd.standin_event_records(view.device_info.event) == 1
""")


def test_empty_cuda_arrays_with_a_stream_are_imported(driver: str) -> None:
    # an empty array's data is NULL (CAI v2+, our own CUDABuffer(0)): there
    # is nothing to order, so its stream makes no event (it was refused:
    # "the memory has no CUDA context")
    check(driver, """
empty = CUDABuffer(0, "float32", device=1)
assert empty.ptr == 0
cai = {"shape": (0,), "typestr": "<f4", "version": 3, "data": (0, False),
       "stream": 1}
for source in (Interface("__cuda_array_interface__", cai), DLPackOnly(empty)):
    adapter = bufferext.as_buffer(source)
    assert adapter.shape == (0,) and adapter.device == "bufferext.cuda"
    with bufferext.get_buffer(adapter) as view:
        assert view.ptr == 0 and view.device_info.event == 0
""")


def test_dlpack_tensor_on_another_device_than_named_is_refused(
        driver: str) -> None:
    # the stream (or none) is chosen for the device __dlpack_device__ names:
    # a CUDA tensor behind a "CPU" answer came out ready now, unordered
    check(driver, """
class SaysCPU(DLPackOnly):
    def __dlpack_device__(self):
        return (1, 0)
class SaysOtherCard(DLPackOnly):
    def __dlpack_device__(self):
        return (2, 0)
b = CUDABuffer(16, "float32", device=1)
b.fill(1.0)
with raises(BufferError, match=r"SaysCPU.__dlpack_device__\\(\\) said "
                   r"\\(1, 0\\), but the tensor __dlpack__\\(\\) returned is "
                   r"on \\(2, 1\\)"):
    bufferext.as_buffer(SaysCPU(b))
with raises(BufferError, match=r"said \\(2, 0\\), but .* on \\(2, 1\\)"):
    bufferext.as_buffer(SaysOtherCard(b))
class SaysNothing:
    def __init__(self, array):
        self.array = array
    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)
with raises(BufferError, match=r"^dlpack: SaysNothing has no "
                   r"__dlpack_device__\\(\\), so CPU memory \\(1, 0\\) was "
                   r"asked for, but the tensor __dlpack__\\(\\) returned is "
                   r"on \\(2, 1\\)$"):
    bufferext.as_buffer(SaysNothing(b))
b.synchronize()
gc.collect()
assert b.exports == 0                      # the refused capsules were freed
""")


def test_dlpack_tensor_naming_another_device_than_its_memory_is_refused(
        driver: str) -> None:
    # producer and tensor both say device 1, the memory is on device 0: it
    # was refused by neither, reported as device 0 and ordered on device
    # 1's bridge stream
    harness.check(driver, HELPERS + """
b = CUDABuffer(4, "float32")                     # device 0
class Liar:
    def __dlpack_device__(self):
        return (2, 1)
    def __dlpack__(self, **kwargs):
        capsule = b.__dlpack__(**kwargs)
        tensor_device(capsule)[1].value = 1
        return capsule
with raises(BufferError, match=r"^as_buffer: the producer said CUDA device "
                   r"1, but the memory at 0x[0-9a-f]+ is on device 0 "
                   r"\\(cuPointerGetAttribute\\)$"):
    bufferext.as_buffer(Liar())
gc.collect()
assert b.exports == 0                      # the refused capsule was freed
adapter = bufferext.as_buffer(DLPackOnly(b))     # the truth imports
assert adapter.__dlpack_device__() == (2, 0)
del adapter
gc.collect()
b.close()
""", check_leaks=False, env={"STANDIN_CUDA_DEVICES": "2"})


@pytest.mark.parametrize("kind", [3, 13])   # kDLCUDAHost, kDLCUDAManaged
def test_cpu_readable_cuda_memory_is_waited_for_before_the_cpu_reads(
        driver: str, kind: int) -> None:
    # with stream=None a producer orders its work before the legacy stream
    # only, and the CPU read at once: now the producer is asked for the
    # bridge stream, which the host waits for before the import returns
    # (memory the CPU reads: the stand-in's host-visible allocations, which
    # the driver says are managed)
    harness.check(driver, HELPERS + """
b = CUDABuffer(4, "float32")
asked = []
class HostVisible:
    def __dlpack_device__(self):
        return (KIND, 0)
    def __dlpack__(self, **kwargs):
        asked.append(kwargs.get("stream"))
        capsule = b.__dlpack__(**kwargs)
        tensor_device(capsule)[0].value = KIND
        return capsule
bridge = bufferext._bufferext._cuda_bridge_stream(0)
sd.standin_reset_calls()
adapter = bufferext.as_buffer(HostVisible())
assert asked == [bridge] and adapter.device is None
assert calls("cuStreamSynchronize") == 1
del adapter
gc.collect()
b.close()
""".replace("KIND", str(kind)), check_leaks=False,
                  env={"STANDIN_CUDA_HOST_VISIBLE": "1"})


@pytest.mark.parametrize("kind", [3, 13])   # kDLCUDAHost, kDLCUDAManaged
def test_device_memory_called_cpu_readable_is_refused(driver: str,
                                                      kind: int) -> None:
    # the CPU reads CUDA host and managed memory as its own: plain device
    # memory a producer calls so (the stand-in's unreadable range) is
    # refused on the driver's word, the tensor given back
    harness.check(driver, HELPERS + """
b = CUDABuffer(4, "float32")
class Lies:
    def __dlpack_device__(self):
        return (KIND, 0)
    def __dlpack__(self, **kwargs):
        capsule = b.__dlpack__(**kwargs)
        tensor_device(capsule)[0].value = KIND
        return capsule
with raises(BufferError, match=r"^dlpack: device type KIND \\(CUDA .*\\) names "
            r"memory the CPU reads, but 0x[0-9a-f]+ is CUDA device memory"):
    bufferext.as_buffer(Lies())
gc.collect()
assert b.exports == 0
b.close()
""".replace("KIND", str(kind)), check_leaks=False)


def test_cai_of_host_memory_is_refused(driver: str) -> None:
    check(driver, """
host = np.zeros(4)
cai = {"shape": (4,), "typestr": "<f8", "version": 3,
       "data": (host.ctypes.data, False), "stream": None}
with raises(BufferError, match="not CUDA device memory"):
    bufferext.as_buffer(Interface("__cuda_array_interface__", cai, host))
""")


def test_dlpack_import_asks_for_data_ready_on_the_bridge_stream(
        driver: str) -> None:
    check(driver, """
b = CUDABuffer((2, 5), "int16", device=1)
b.fill(7)                                  # work pending on b's stream
adapter = bufferext.as_buffer(DLPackOnly(b))
stream = bufferext._bufferext._cuda_bridge_stream(1)
# the producer made the bridge stream wait on its event ...
assert sd.standin_last_wait_stream() == stream
assert adapter.protocol == "dlpack" and adapter.device == "bufferext.cuda"
assert b.exports == 1                      # the consumed capsule's export
with bufferext.get_buffer(adapter) as view:
    info = view.device_info
    assert view.ptr == b.ptr and info.device == 1 and info.event != 0
    # ... and the adapter's event was recorded on the bridge stream
    assert sd.standin_event_records(info.event) == 1
b.synchronize()
assert adapter.shape == (2, 5) and adapter.format == "h"
# the adapter's event completed (cuEventQuery): no sync needed
assert adapter.__cuda_array_interface__["stream"] is None
del adapter
gc.collect()
assert b.exports == 0
np.testing.assert_array_equal(b.to_host(), np.full((2, 5), 7, np.int16))
""")


def test_adapter_cai_stream_waits_on_the_event_then_is_none(
        driver: str) -> None:
    # The adapter's __cuda_array_interface__ raised BufferError ("ready only
    # after a CUDA event") for as long as it lived, work done or not, so
    # hasattr() -- numba's is_cuda_array -- raised (review of the exports).
    # Late work: the memset stays pending until something waits for it.
    harness.check(driver, HELPERS + """
b = CUDABuffer((4,), "float32")
b.fill(2.0)
adapter = bufferext.as_buffer(b, readonly=True)
with bufferext.get_buffer(adapter) as view:
    event = view.device_info.event
assert event != 0
bridge = bufferext._bufferext._cuda_bridge_stream(0)
sd.standin_reset_calls()
cai = adapter.__cuda_array_interface__
# pending: a stream the data is ready on, the bridge stream, made to wait
assert cai["stream"] == bridge and cai["data"] == (b.ptr, True)
assert calls("cuStreamWaitEvent") == 1
assert sd.standin_last_wait_stream() == bridge
assert sd.standin_last_wait_event() == event
# the stand-in's wait lands the work: the event has completed since
assert sd.standin_pending_work() == 0
sd.standin_reset_calls()
assert hasattr(adapter, "__cuda_array_interface__")
assert adapter.__cuda_array_interface__["stream"] is None
assert calls("cuEventQuery") == 2 and calls("cuStreamWaitEvent") == 0
""", check_leaks=False,
                  env={"STANDIN_CUDA_DEVICES": "2", "STANDIN_CUDA_LATE": "1"})


def test_dlpack_import_of_a_missing_device(driver: str) -> None:
    check(driver, """
class Claims(DLPackOnly):
    def __dlpack_device__(self):
        return (2, 5)
with raises(BufferError, match="CUDA device 5 does not exist"):
    bufferext.as_buffer(Claims(None))
""")


def test_adapter_of_cuda_buffer_round_trips_through_dlpack_out(
        driver: str) -> None:
    check(driver, """
b = CUDABuffer(6, "float64")
b.synchronize()
adapter = bufferext.as_buffer(b, readonly=True)   # pass-through policy
assert adapter.readonly and adapter.device == "bufferext.cuda"
cap = adapter.__dlpack__(max_version=(1, 0), stream=-1)
assert adapter.__dlpack_device__() == (2, 0)
del cap
gc.collect()
""")


# ---- a host pointer named in the error (from test_boundary_python.py) -------

def test_re_export_of_a_cuda_buffer_follows_its_later_writes(
        driver: str) -> None:
    """as_buffer(b, readonly=True) re-exports b's own device info: a write
    queued on b after the adapter was made records a new event there, and
    every reader of the adapter waits on it (a copy of the info made when
    b was ready kept saying "ready", and the adapter read zeros)."""
    harness.check(driver, HELPERS + """
b = CUDABuffer((4,), "f4")
b.synchronize()
adapter = bufferext.as_buffer(b, readonly=True)
b.fill(7.0)                                    # pending: STANDIN_CUDA_LATE
with bufferext.get_buffer(b) as view:
    event = view.device_info.event
assert event != 0
with bufferext.get_buffer(adapter) as view:
    assert view.device_info.event == event
    out = np.empty(4, "f4")
    view.copy_to_host(out)
assert out.tolist() == [7.0] * 4
b.fill(8.0)
sd.standin_reset_calls()
cai = adapter.__cuda_array_interface__          # waits on the new event
assert cai["stream"] is not None and calls("cuStreamWaitEvent") == 1
assert b.to_host().tolist() == [8.0] * 4
del adapter, view
b.close()
""", check_leaks=False, env={"STANDIN_CUDA_LATE": "1"})


def test_host_pointer_in_a_cuda_interface_is_named(driver: str) -> None:
    # found on the way: the message printed "0x%llx" (PyErr_Format before
    # 3.12 has no %llx).  Refused before a bridge stream exists: the
    # harness's own no-leak check applies
    harness.check(driver, HELPERS + """
cai = {"version": 3, "shape": (4,), "typestr": "<f8",
       "data": (0x10000, False), "strides": None, "stream": None}
try:
    bufferext.as_buffer(Interface("__cuda_array_interface__", cai))
except BufferError as e:
    assert "0x10000 is not CUDA device memory" in str(e), e
else:
    raise AssertionError("accepted")
""")


def test_memory_no_context_owns_is_imported_in_the_primary_context(
        driver: str) -> None:
    """The driver names no context for memory mapped by virtual memory
    management or taken from a stream-ordered pool (JAX's arrays on an H200
    were such).  The import refused it when the producer named a stream
    ("the memory has no CUDA context") and, with no stream, left
    device_info.context NULL, so a copy to the host failed.  The device's
    primary context serves: the event is recorded, the copy waits on it."""
    harness.check(driver, HELPERS + """
import os
b = CUDABuffer((4,), "f4", device=1)
b.synchronize()
b.fill(7.0)                                    # pending: STANDIN_CUDA_LATE
cai = b.__cuda_array_interface__
assert cai["stream"] is not None
with bufferext.get_buffer(b) as view:
    primary = view.device_info.context
os.environ["STANDIN_CUDA_NO_POINTER_CONTEXT"] = "1"
adapter = bufferext.as_buffer(Interface("__cuda_array_interface__", cai, b))
with bufferext.get_buffer(adapter) as view:
    info = view.device_info
    assert info.device == 1 and info.context == primary
    assert info.event != 0 and sd.standin_event_records(info.event) == 1
    out = np.empty(4, "f4")
    view.copy_to_host(out)
assert out.tolist() == [7.0] * 4
b.synchronize()
ready = bufferext.as_buffer(Interface("__cuda_array_interface__",
                                      b.__cuda_array_interface__, b))
with bufferext.get_buffer(ready) as view:
    assert view.device_info.event == 0 and view.device_info.context == primary
    view.copy_to_host(out)
assert out.tolist() == [7.0] * 4
del adapter, ready, view
b.close()
""", check_leaks=False, env={"STANDIN_CUDA_LATE": "1",
                             "STANDIN_CUDA_DEVICES": "2"})
