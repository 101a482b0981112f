"""Distributed arrays whose local pieces are CUDABuffers on a real NVIDIA
GPU, across processes (marked ``cuda`` and ``mpi``; skipped without a real
driver and GPU, or without ``mpiexec -n 2``).  MPICH from PyPI is not
CUDA-aware, so every operation takes the staged path: device -> host,
MPI, host -> device.  Run with ``mpiexec -n 2 python -m pytest --with-mpi
tests/test_mpi_gpu.py``.

The event rule is tested with a write that is really late: a kernel that
spins for a tenth of a second is queued on the buffer's own stream ahead of
a ``fill``, so the fill is still pending when the operation starts (the
test checks that it is); an operation that read the device memory without
waiting for the buffer's event would read the values from before it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from _helpers import (check_staged_operations, cuda_status, device_local,
                      halos_after_fill)

MPI = pytest.importorskip("mpi4py.MPI")
COMM = MPI.COMM_WORLD
SIZE, RANK = COMM.Get_size(), COMM.Get_rank()

_STATUS = cuda_status()
_REAL = (_STATUS["loaded"] and bool(_STATUS.get("devices"))
         and "standin" not in str(_STATUS.get("path") or ""))

pytestmark = [pytest.mark.cuda, pytest.mark.mpi(min_size=2),
              pytest.mark.skipif(SIZE < 2, reason="needs mpiexec -n 2 or more"),
              pytest.mark.skipif(not _REAL, reason="no real CUDA driver/GPU: "
                                 f"{_STATUS.get('error') or 'stand-in'}")]

SPIN_SECONDS = 0.1


def test_staged_round_trip_redistribute_halos() -> None:
    check_staged_operations(np.arange(64 * 48, dtype=np.float64).reshape(64, 48),
                            "cuda", COMM, block_size=4)


def _fill_late(buffer: Any, value: float) -> None:
    """``buffer.fill(value)`` queued behind a kernel that spins on the
    buffer's own stream; asserts the fill is still pending on return."""
    cupy = pytest.importorskip("cupy")
    buffer.fill(0)                      # pending: CAI names the stream
    stream = buffer.__cuda_array_interface__["stream"]
    assert stream is not None
    spin = cupy.RawKernel(r"""
        extern "C" __global__ void spin(long long cycles) {
            long long start = clock64();
            while (clock64() - start < cycles) { }
        }""", "spin")
    rate = cupy.cuda.runtime.deviceGetAttribute(
        cupy.cuda.runtime.cudaDevAttrClockRate, 0) * 1000   # kHz -> Hz
    external = cupy.cuda.ExternalStream(stream)
    with external:
        spin((1,), (1,), (np.int64(rate * SPIN_SECONDS),))
    buffer.fill(value)
    assert not external.done, "the late fill had landed before the operation"


def test_every_operation_waits_for_the_buffers_event() -> None:
    from bufferext.distarray import DistArray
    g = np.zeros((1024, 256), dtype=np.float32)
    pads = [[(1, 1)] * SIZE, None]
    d = DistArray.from_global(g, dist="bn", padding=pads, device="cuda",
                              comm=COMM)
    _fill_late(d.buffer, RANK + 1)
    d.update_halos()
    assert np.array_equal(device_local(d), halos_after_fill(d, RANK, SIZE))
    _fill_late(d.buffer, 3.0)
    out = d.gather(0)
    assert (out is None) if RANK else np.array_equal(out, np.full_like(g, 3.0))
    _fill_late(d.buffer, 4.0)
    e = d.redistribute(dist="cb", block_size=2)
    assert e.device == "cuda"
    assert np.array_equal(e.allgather(), np.full_like(g, 4.0))
