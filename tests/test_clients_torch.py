"""PyTorch (CPU) as a real client, both directions, zero-copy."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import bufferext

torch = pytest.importorskip("torch")


def test_torch_from_cpubuffer_shares_memory() -> None:
    buf = bufferext.CPUBuffer((2, 3), "float32")
    t = torch.from_dlpack(buf)
    assert t.data_ptr() == buf.ptr and t.shape == (2, 3)
    assert t.dtype == torch.float32
    t += 2
    np.testing.assert_array_equal(buf.to_host(), np.full((2, 3), 2, "f4"))
    assert buf.exports == 1                     # torch holds the capsule
    del t
    gc.collect()
    assert buf.exports == 0


def test_torch_from_buffer_view_and_adapter() -> None:
    base = np.arange(12, dtype=np.int64).reshape(3, 4)[:, 1:]
    adapter = bufferext.as_buffer(base, readonly=False)
    t = torch.from_dlpack(adapter)
    assert t.data_ptr() == base.ctypes.data
    assert t.stride() == (4, 1)
    with bufferext.get_buffer(bufferext.CPUBuffer(5, "int8")) as view:
        assert torch.from_dlpack(view).data_ptr() == view.ptr


def test_as_buffer_of_a_torch_tensor() -> None:
    t = torch.arange(6.0).reshape(2, 3).t()      # non-contiguous
    adapter = bufferext.as_buffer(t)
    assert adapter.protocol == "dlpack" and adapter.device is None
    assert adapter.ptr == t.data_ptr()
    assert adapter.strides == (4, 12)
    out = np.asarray(adapter)
    t.mul_(10)
    np.testing.assert_array_equal(out, t.numpy())
    assert out.ctypes.data == t.data_ptr()


def test_torch_round_trip_through_our_exchange() -> None:
    t = torch.ones(4, dtype=torch.float64)
    back = torch.from_dlpack(bufferext.as_buffer(t))
    assert back.data_ptr() == t.data_ptr()


def test_get_buffer_of_a_tensor_points_at_as_buffer() -> None:
    # a tensor is no buffer exporter: the error says what it speaks and
    # what to call, and the advice works
    t = torch.arange(6, dtype=torch.float32)
    with pytest.raises(TypeError, match=r"'Tensor' object is not a buffer "
                       r"exporter; it speaks DLPack \(__dlpack__\): "
                       r"bufferext\.as_buffer\(obj\)"):
        bufferext.get_buffer(t)
    with bufferext.get_buffer(bufferext.as_buffer(t)) as view:
        assert view.tobytes() == t.numpy().tobytes()
