"""CUDABuffer on a real NVIDIA GPU (marked ``cuda``; skipped without one).

These use the driver bufferext finds by default (libcuda.so.1, or
BUFFEREXT_CUDA_DRIVER).  Run with ``pytest -m cuda``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

import bufferext
from bufferext import BufferFlags, CUDABuffer
from _helpers import cuda_status

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cuda_toolkit as toolkit  # noqa: E402


_STATUS = cuda_status()
_DEVICES = len(_STATUS.get("devices") or [])
_IS_STANDIN = "standin" in str(_STATUS.get("path") or "")

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not _STATUS["loaded"] or _DEVICES == 0 or _IS_STANDIN,
                       reason="no real CUDA driver/GPU: "
                       f"{_STATUS.get('error') or 'stand-in driver'}"),
]


def test_allocation_and_attributes() -> None:
    b = CUDABuffer((256, 4), "float32")
    assert b.nbytes == 4096 and b.ptr != 0 and b.ptr % 256 == 0
    assert (b.to_host() == 0).all()
    b.close()
    assert b.closed


def test_round_trip() -> None:
    data = np.random.default_rng(0).standard_normal((64, 33))
    b = CUDABuffer(data.shape, data.dtype)
    b.copy_from_host(data)
    assert (b.to_host() == data).all()
    c = CUDABuffer(data.shape, data.dtype)
    c.copy_from(b)
    assert (c.to_host() == data).all()


def test_events_in_device_info() -> None:
    b = CUDABuffer(1 << 20, "uint8")
    b.fill(7)
    with bufferext.get_buffer(b) as view:
        assert view.device == "bufferext.cuda"
        assert view.device_info.event != 0
    b.synchronize()
    with bufferext.get_buffer(b) as view:
        assert view.device_info.event == 0
    assert (b.to_host() == 7).all()


def test_readonly_honoured() -> None:
    b = CUDABuffer(8, readonly=True)
    with pytest.raises(BufferError):
        bufferext.get_buffer(b, BufferFlags.FULL | BufferFlags.DEVICE)
    assert b.__cuda_array_interface__["data"][1] is True


def test_plain_consumers_refused() -> None:
    b = CUDABuffer(8)
    for consumer in (memoryview, bytes, np.asarray):
        with pytest.raises(BufferError):
            consumer(b)


def test_torch_from_dlpack_zero_copy() -> None:
    torch = pytest.importorskip("torch")
    b = CUDABuffer((4, 5), "float32")
    b.fill(3.0)
    t = torch.from_dlpack(b)
    assert t.data_ptr() == b.ptr and t.device.type == "cuda"
    assert float(t.sum()) == 60.0
    del t


def test_cupy_asarray_zero_copy() -> None:
    cupy = pytest.importorskip("cupy")
    b = CUDABuffer((4, 5), "float64")
    b.fill(2.0)
    a = cupy.asarray(b)                  # through __cuda_array_interface__
    assert a.data.ptr == b.ptr and float(a.sum()) == 40.0
    d = cupy.from_dlpack(b)
    assert d.data.ptr == b.ptr


@pytest.mark.skipif(_DEVICES < 2, reason="needs two GPUs")
def test_several_devices() -> None:
    bufs = [CUDABuffer(16, device=i) for i in range(_DEVICES)]
    for i, b in enumerate(bufs):
        assert b.__dlpack_device__() == (2, i)
        b.fill(float(i))
    for i, b in enumerate(bufs):
        assert (b.to_host() == i).all()


def test_example_consumer_scales_in_place(tmp_path: Path) -> None:
    """docs/examples/cuda/scale.cu, built by nvcc: its kernel scales a
    CUDABuffer in place, waiting for the exporter's pending work."""
    example = toolkit.load_example(toolkit.build_example_or_skip(
        str(tmp_path)))
    data = np.arange(1 << 20, dtype=np.float32)
    b = CUDABuffer(data.shape, "float32")
    b.copy_from_host(data)
    example.scale(b, 3.0)
    assert (b.to_host() == data * 3).all()
    b.fill(2.0)                  # queued: the example waits for its event
    example.scale(b, 0.5)
    assert (b.to_host() == 1.0).all() and b.exports == 0
    b.close()
