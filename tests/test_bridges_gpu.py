"""The bridges with real GPU clients: CuPy, PyTorch (CUDA) and numba-cuda,
both directions, zero-copy (marked ``cuda``; skipped without a GPU and
per client without that client)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import bufferext
from bufferext import CUDABuffer
from _helpers import cuda_status, run_child


_STATUS = cuda_status()
_REAL = (_STATUS["loaded"] and bool(_STATUS.get("devices"))
         and "standin" not in str(_STATUS.get("path") or ""))

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not _REAL, reason="no real CUDA driver/GPU: "
                                 f"{_STATUS.get('error') or 'stand-in'}")]


def _filled(shape: Any = (32, 8)) -> CUDABuffer:
    buf = CUDABuffer(shape, "float32")
    buf.copy_from_host(np.arange(np.prod(shape), dtype=np.float32)
                       .reshape(shape))
    return buf


def test_cupy_both_ways() -> None:
    cupy = pytest.importorskip("cupy")
    buf = _filled()
    through_cai = cupy.asarray(buf)                   # CAI v3
    assert through_cai.data.ptr == buf.ptr
    through_dlpack = cupy.from_dlpack(buf)
    assert through_dlpack.data.ptr == buf.ptr
    np.testing.assert_array_equal(cupy.asnumpy(through_cai), buf.to_host())
    array = cupy.arange(24, dtype=cupy.float64).reshape(4, 6)
    adapter = bufferext.as_buffer(array)              # DLPack, device (2, n)
    assert adapter.device == "bufferext.cuda" and adapter.ptr == array.data.ptr
    with bufferext.get_buffer(adapter) as view:
        assert view.device_info.device == array.device.id


def test_torch_cuda_both_ways() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    buf = _filled()
    tensor = torch.from_dlpack(buf)
    assert tensor.is_cuda and tensor.data_ptr() == buf.ptr
    t = torch.ones((5, 3), device="cuda").t()
    adapter = bufferext.as_buffer(t)
    assert adapter.ptr == t.data_ptr() and adapter.device == "bufferext.cuda"
    assert adapter.strides == tuple(4 * s for s in t.stride())
    back = torch.from_dlpack(adapter)
    assert back.data_ptr() == t.data_ptr()


def test_numba_cuda_both_ways() -> None:
    cuda = pytest.importorskip("numba.cuda")
    buf = _filled()
    device_array = cuda.as_cuda_array(buf)            # CAI v3
    assert device_array.__cuda_array_interface__["data"][0] == buf.ptr
    np.testing.assert_array_equal(device_array.copy_to_host(), buf.to_host())
    source = cuda.to_device(np.arange(10, dtype=np.int32))
    adapter = bufferext.as_buffer(source)
    assert adapter.protocol in ("cuda_array_interface", "dlpack")
    assert adapter.ptr == source.__cuda_array_interface__["data"][0]


def _to_host(adapter: Any, dtype: Any) -> Any:
    """The adapter's memory, copied to the host through its view (which
    waits on the import's event first)."""
    out = np.empty(adapter.shape, dtype)
    with bufferext.get_buffer(adapter) as view:
        view.copy_to_host(out)
    return out


def test_cupy_pool_memory_that_no_context_owns() -> None:
    """cuMemAllocAsync memory (CuPy's MemoryAsyncPool): the driver names no
    context for it, and the import takes the device's primary context."""
    cupy = pytest.importorskip("cupy")
    pool = cupy.cuda.MemoryAsyncPool()
    previous = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(pool.malloc)
    try:
        array = cupy.arange(1 << 16, dtype=cupy.float32) * 2
        adapter = bufferext.as_buffer(array)
        with bufferext.get_buffer(adapter) as view:
            assert view.device_info.context != 0
        np.testing.assert_array_equal(_to_host(adapter, np.float32),
                                      cupy.asnumpy(array))
        del adapter, array
    finally:
        cupy.cuda.set_allocator(previous)


def test_jax_gpu_both_ways() -> None:
    jax = pytest.importorskip("jax")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("JAX without a GPU backend")
    x = jax.device_put(np.arange(24, dtype=np.float32).reshape(4, 6) * 3, gpu)
    adapter = bufferext.as_buffer(x)                  # DLPack, device (2, n)
    assert adapter.device == "bufferext.cuda"
    np.testing.assert_array_equal(_to_host(adapter, np.float32), np.asarray(x))
    buf = _filled((4, 6))
    back = jax.dlpack.from_dlpack(buf)
    np.testing.assert_array_equal(np.asarray(back), buf.to_host())


def test_torch_expandable_segments_span_several_mappings() -> None:
    """PyTorch's expandable segments map memory with cuMemCreate in 20 MiB
    pieces: the driver names no context for it, and a large tensor spans
    several mappings (cuMemGetAddressRange answers one piece at each end,
    as a probe on an H200 showed).  The import takes it whole."""
    pytest.importorskip("torch")
    run_child("""
        import numpy as np, torch, bufferext
        torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
        t = torch.arange(75 << 20, dtype=torch.float32, device="cuda")
        adapter = bufferext.as_buffer(t)            # DLPack, a stream named
        out = np.empty(adapter.shape, np.float32)
        with bufferext.get_buffer(adapter) as view:
            assert view.device_info.context != 0
            view.copy_to_host(out)
        assert np.array_equal(out, t.cpu().numpy())
        """, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
