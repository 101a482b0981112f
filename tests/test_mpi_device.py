"""Device buffers across processes, through the stand-in CUDA driver and
the stand-in VEO library (test doubles built here; every rank loads its
own copy).  Most tests take the staged path (copy_to_host /
copy_from_host); the CUDA-aware path is taken by making the stand-in's
device memory CPU-readable, so that MPICH reads and writes it as a
CUDA-aware MPI would, with its writes landing late to prove the event
rule.  Run under mpiexec with --with-mpi."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from _helpers import check_staged_operations, device_local, halos_after_fill

MPI = pytest.importorskip("mpi4py.MPI")
COMM = MPI.COMM_WORLD
SIZE, RANK = COMM.Get_size(), COMM.Get_rank()
pytestmark = [pytest.mark.mpi(min_size=2),
              pytest.mark.skipif(SIZE < 2, reason="needs mpiexec -n 2 or more"),
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="the stand-ins are built for Linux")]

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def standins(tmp_path_factory: pytest.TempPathFactory) -> None:
    sys.path.insert(0, os.path.join(HERE, "cuda_standin"))
    sys.path.insert(0, os.path.join(HERE, "ve_standin"))
    import standin as ve_standin
    import standin_harness as cuda_standin
    out = str(tmp_path_factory.mktemp(f"standins{RANK}"))
    os.environ["BUFFEREXT_CUDA_DRIVER"] = cuda_standin.build(out)
    os.environ["BUFFEREXT_VEO_LIBRARY"] = ve_standin.build(out)
    os.environ["BUFFEREXT_MPI_CUDA_AWARE"] = "0"


@pytest.mark.parametrize("device", ["cuda", "ve"])
def test_staged_round_trip_redistribute_halos(standins: None, device: str) -> None:
    check_staged_operations(np.arange(10 * 6, dtype=np.float64).reshape(10, 6),
                            device, COMM, block_size=2)


@pytest.mark.parametrize("device", ["cuda", "ve"])
def test_staged_column_halos(standins: None, device: str) -> None:
    """Column slabs of a staged device array: strided in the host copy,
    packed through staging arrays around the non-persistent exchange."""
    from bufferext.distarray import DistArray
    g = np.arange(7 * 4 * SIZE, dtype=np.float64).reshape(7, 4 * SIZE)
    pads = [None, [(1, 1)] * SIZE]
    d = DistArray.from_global(g, dist="nb", grid_shape=(1, SIZE), padding=pads,
                              device=device, comm=COMM)
    ref = DistArray.from_global(g, dist="nb", grid_shape=(1, SIZE), padding=pads,
                                comm=COMM).local
    for _ in range(2):
        spoiled = ref.copy()
        m = d.maps[1]
        spoiled[:, :m.owned_slice.start] = -1
        spoiled[:, m.owned_slice.stop:] = -1
        d.buffer.copy_from_host(spoiled)
        d.update_halos()
        assert np.array_equal(device_local(d), ref)


@pytest.fixture
def late_aware(standins: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """MPI treated as CUDA-aware; the stand-in's device memory readable by
    the CPU (so MPICH can read it, as a CUDA-aware MPI reads device memory)
    and its asynchronous writes pending until waited for (STANDIN_CUDA_LATE):
    an operation that read device memory without waiting on the exporter's
    event would read the bytes from before the write, however long it ran."""
    monkeypatch.setenv("BUFFEREXT_MPI_CUDA_AWARE", "1")
    monkeypatch.setenv("STANDIN_CUDA_HOST_VISIBLE", "1")
    monkeypatch.setenv("STANDIN_CUDA_LATE", "1")


def test_cuda_aware_mpi_waits_for_the_exporters_event(late_aware: None) -> None:
    """Every operation hands MPI the device memory itself (nothing staged)
    only after the exporter's event: halos, gather and redistribute read
    the values of writes that were still in flight when they were called,
    and redistribute's new target is written after its own zeroing."""
    from bufferext.distarray import DistArray, cuda_aware
    assert cuda_aware()
    g = np.arange(12 * 5, dtype=np.float32).reshape(12, 5)
    pads = [[(1, 1)] * SIZE, None]
    d = DistArray.from_global(g, dist="bn", padding=pads, device="cuda", comm=COMM)
    # each rank's own value, written late by a memset over the whole local
    # section: the exchange must send the new owned values and write the
    # halos after the memset has landed (else they hold the rank's own value)
    d.buffer.fill(RANK + 1)
    d.update_halos()
    assert np.array_equal(device_local(d), halos_after_fill(d, RANK, SIZE))
    d.buffer.fill(3.0)                  # a memset, landing late
    out = d.gather(0)
    assert (out is None) if RANK else np.array_equal(out, np.full_like(g, 3.0))
    d.buffer.fill(4.0)
    e = d.redistribute(dist="cb", block_size=2)    # a new CUDABuffer, zeroed late
    assert e.device == "cuda"
    assert np.array_equal(e.allgather(), np.full_like(g, 4.0))


def test_a_device_buffer_unlike_the_plan_fails_on_every_rank(standins: None) -> None:
    import bufferext
    from bufferext.distarray import DistArray
    g = np.arange(8 * SIZE * 3, dtype=np.float64).reshape(8 * SIZE, 3)
    good = DistArray.from_global(g, dist="bn", device="cuda", comm=COMM)
    buffer = (bufferext.CUDABuffer(good.local_shape, np.int64) if RANK == 1
              else good.buffer)
    d = DistArray(buffer, good.maps, device="cuda", dtype=g.dtype, comm=COMM)
    with pytest.raises(BufferError, match=rf"^rank 1 of {SIZE}: .*not dtype float64") \
            as info:
        d.gather(0)
    assert len(set(COMM.allgather(str(info.value)))) == 1
    # out= on another device than requested, on one rank only
    target = good.redistribute(dist="cn")
    other = good.redistribute(dist="cn", device="cpu" if RANK == 1 else "cuda")
    with pytest.raises(ValueError, match=rf"^rank 1 of {SIZE}: out.device='cpu'") as info:
        good.redistribute(dist="cn", out=other)
    assert len(set(COMM.allgather(str(info.value)))) == 1
    assert np.array_equal(good.redistribute(dist="cn", out=target).allgather(), g)


def test_a_copy_back_failing_on_one_rank_fails_on_every_rank(
        standins: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A staged device buffer is written back (copy_from_host) after the
    exchange; that copy failing on rank 1 alone raised there only, while
    the other ranks returned as if the operation had succeeded (and went
    on to their next collective without rank 1)."""
    from bufferext.distarray import DistArray
    g = np.arange(6 * SIZE * 3, dtype=np.float64).reshape(6 * SIZE, 3)
    pads = [[(1, 1)] * SIZE, None]
    d = DistArray.from_global(g, dist="bn", padding=pads, device="cuda", comm=COMM)
    target = d.redistribute(dist="cn")
    ops = {"update_halos": d.update_halos,
           "redistribute": lambda: d.redistribute(dist="cn"),
           "redistribute(out=)": lambda: d.redistribute(dist="cn", out=target),
           "scatter": lambda: DistArray.scatter(g if RANK == 0 else None, dist="bn",
                                                device="cuda", comm=COMM)}
    for name, op in ops.items():
        if RANK == 1:
            monkeypatch.setenv("STANDIN_CUDA_FAIL", "cuMemcpyHtoDAsync_v2")
        try:
            with pytest.raises(RuntimeError, match=rf"^rank 1 of {SIZE}: "
                               r"BufferView.copy_from_host: cuMemcpyHtoDAsync_v2"
                               ) as info:
                op()
        finally:
            monkeypatch.delenv("STANDIN_CUDA_FAIL", raising=False)
        assert len(set(COMM.allgather(str(info.value)))) == 1, name
    # and the array still works on every rank afterwards
    d.update_halos()
    assert np.array_equal(d.allgather(), g)


@pytest.mark.parametrize("device", ["cuda", "ve"])
def test_out_sharing_the_sources_device_memory_is_refused(standins: None,
                                                          device: str) -> None:
    """``redistribute(out=)`` refuses an ``out`` over the source's memory
    (MPI would read and write the same memory in one call, as CUDA-aware
    MPI does with device memory); that was checked for CPU memory only.
    Here rank 1 alone passes a DistArray over the source's own device
    buffer: every rank raises, and a separate buffer still works."""
    from bufferext.distarray import DistArray
    g = np.arange(8.0 * SIZE)
    d = DistArray.from_global(g, dist="b", device=device, comm=COMM)
    target = DistArray.from_global(g, dist="c", device=device, comm=COMM)
    assert target.local_shape == d.local_shape
    out = (DistArray(d.buffer, target.maps, device=device, dtype=g.dtype, comm=COMM)
           if RANK == 1 else target)
    with pytest.raises(ValueError, match=rf"^rank 1 of {SIZE}: out: shares memory "
                       "with the source array") as info:
        d.redistribute(dist="c", out=out)
    assert len(set(COMM.allgather(str(info.value)))) == 1
    assert np.array_equal(d.redistribute(dist="c", out=target).allgather(), g)
