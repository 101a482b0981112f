"""Device buffers across processes, through the stand-in CUDA driver and
the stand-in VEO library (test doubles built here; every rank loads its
own copy).  The stand-ins give no CUDA-aware MPI, so this is the staged
path (to_host / copy_from_host).  Run under mpiexec with --with-mpi."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

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
    from bufferext.distarray import DistArray, cuda_aware
    assert not cuda_aware()
    g = np.arange(10 * 6, dtype=np.float64).reshape(10, 6)
    d = DistArray.scatter(g if RANK == 0 else None, dist="bn", device=device, comm=COMM,
                          padding=[[(1, 1)] * SIZE, None])
    assert d.device == device
    ref = DistArray.from_global(g, dist="bn", comm=COMM, padding=[[(1, 1)] * SIZE, None])
    host = np.asarray(d.buffer.to_host()).reshape(d.local_shape)
    assert np.array_equal(host, ref.local)
    out = d.gather(0)
    assert (out is None) if RANK else np.array_equal(out, g)
    e = d.redistribute(dist="cb", block_size=2)
    assert e.device == device
    assert np.array_equal(e.allgather(), g)
    # halos: spoil the padding on the device, exchange, compare
    spoiled = host.copy()
    m = d.maps[0]
    spoiled[:m.owned_slice.start] = -1
    spoiled[m.owned_slice.stop:] = -1
    d.buffer.copy_from_host(spoiled)
    d.update_halos()
    assert np.array_equal(np.asarray(d.buffer.to_host()).reshape(d.local_shape), ref.local)
    f = e.redistribute(dist="bn", device="cpu")       # device -> host distribution
    assert f.device == "cpu" and np.array_equal(f.local, DistArray.from_global(
        g, dist="bn", comm=COMM).local)
