"""MPI layer speed, as ratios within one run (2 ranks):

* ``update_halos()`` time / raw mpi4py ``Sendrecv`` of the same halo bytes
  (target <= 1.2);
* ``redistribute()`` bandwidth / raw ``Alltoallv`` of the same bytes
  between the same ranks (target >= 0.8).

Run: ``mpiexec -n 2 python benchmarks/bench_mpi.py [--quick]``.  Each figure
is the median of several samples of back-to-back repetitions; rank 0
prints the maximum over ranks of each sample.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable, List

import numpy as np
from mpi4py import MPI

from bufferext.distarray import DistArray
from bufferext.distarray._mpi import raw_halo_exchange

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()


def timed(fn: Callable[[], None], reps: int, samples: int) -> float:
    """Median over ``samples`` of the slowest rank's seconds per call."""
    fn()
    out: List[float] = []
    for _ in range(samples):
        COMM.Barrier()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        out.append(COMM.allreduce((time.perf_counter() - t0) / reps, op=MPI.MAX))
    return float(np.median(out))


def interleaved(a: Callable[[], None], b: Callable[[], None], reps: int,
                samples: int) -> tuple:
    """Alternate samples of ``a`` and ``b`` so both see the same machine load."""
    ta, tb = [], []
    for _ in range(samples):
        ta.append(timed(a, reps, 1))
        tb.append(timed(b, reps, 1))
    return float(np.median(ta)), float(np.median(tb))


def bench_halos(n: int, reps: int, samples: int) -> None:
    arr = np.zeros((n * SIZE, n))
    pads = [(0, 1)] + [(1, 1)] * (SIZE - 2) + [(1, 0)] if SIZE > 1 else [(0, 0)]
    d = DistArray.from_global(arr, dist="bn", grid_shape=(SIZE, 1),
                              padding=[pads, None], comm=COMM)
    raw, nbytes = raw_halo_exchange(d)
    ours, theirs = interleaved(d.update_halos, raw, reps, samples)
    if RANK == 0:
        print(f"halo  {n:>5} x {n:<5} {nbytes:>9} B  update_halos {ours * 1e6:9.1f} us"
              f"  raw Sendrecv {theirs * 1e6:9.1f} us  ratio {ours / theirs:5.2f}"
              f"  (target <= 1.2)")


def bench_redistribute(n: int, src: str, dst: str, reps: int, samples: int) -> None:
    g = np.arange(n * n, dtype=np.float64).reshape(n, n)
    d = DistArray.from_global(g, dist=src, comm=COMM)
    d.redistribute(dist=dst)                     # build and cache the plan
    plan = [p for k, p in d._mpi_plans.items() if k[0] == "redistribute"][0]
    # the same bytes, as a raw Alltoallv between contiguous buffers
    count = lambda sel: int(np.prod([s[1] if isinstance(s, tuple) else len(s)  # noqa: E731
                                     for s in sel])) if sel is not None else 0
    scounts = [count(s) for s in plan.sends]
    rcounts = [count(r) for r in plan.recvs]
    sbuf = np.ones(sum(scounts))
    rbuf = np.empty(sum(rcounts))
    sdis = np.concatenate(([0], np.cumsum(scounts)[:-1])).tolist()
    rdis = np.concatenate(([0], np.cumsum(rcounts)[:-1])).tolist()
    moved = COMM.allreduce(sum(c for p, c in enumerate(scounts) if p != RANK) * 8)

    def raw() -> None:
        COMM.Alltoallv([sbuf, scounts, sdis, MPI.DOUBLE], [rbuf, rcounts, rdis, MPI.DOUBLE])

    ours, theirs = interleaved(lambda: d.redistribute(dist=dst), raw, reps, samples)
    if RANK == 0:
        print(f"redist {src}->{dst} {n:>5}^2  {moved / 2**20:8.1f} MiB moved  "
              f"redistribute {moved / ours / 1e9:6.2f} GB/s  raw Alltoallv "
              f"{moved / theirs / 1e9:6.2f} GB/s  ratio {theirs / ours:5.2f}"
              f"  (target >= 0.8)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few samples")
    args = parser.parse_args()
    samples = 5 if args.quick else 11
    if RANK == 0:
        print(f"{SIZE} ranks, {MPI.Get_library_version().splitlines()[0]}")
    for n in ((256, 2048) if args.quick else (256, 1024, 4096)):
        bench_halos(n, 200 if n <= 1024 else 50, samples)
    for n in ((1024,) if args.quick else (1024, 4096)):
        for src, dst in (("bn", "nb"), ("bn", "cn"), ("bb", "cc")):
            bench_redistribute(n, src, dst, 20 if n <= 1024 else 3, samples)


if __name__ == "__main__":
    main()
