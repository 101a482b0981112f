"""MPI layer speed, as ratios within one run (2 ranks):

* ``update_halos()`` time / raw mpi4py ``Sendrecv`` of the same halo bytes
  (target <= 1.2);
* the same for column halos, whose slabs are strided in memory, against a
  hand-written exchange copying them with numpy into contiguous buffers
  around each ``Sendrecv`` (target <= 1.2; the contiguous ``Sendrecv`` of
  the same bytes is shown for context);
* ``redistribute()`` bandwidth / raw ``Alltoallv`` of the same bytes
  between the same ranks (target >= 0.8).

Run: ``mpiexec -n 2 python benchmarks/bench_mpi.py [--quick]``.

Built for a noisy shared machine: the candidate and its anchors are
interleaved (round robin, the order rotating every round), each sample is
short (a few ms of back-to-back calls), a sample's time is the slowest
rank's, and each figure is reported as the median and the best over many
samples; ratios are given for both.  For ``redistribute`` two anchors are
shown: ``Alltoallv`` of every rank's whole share, its own piece included:
the same bytes a redistribution moves, what a hand-written one would call,
and the anchor of the target; and, for context, ``Alltoallv`` of the bytes
crossing ranks only, which leaves out the own piece (half the data with 2
ranks).  ``redistribute(out=...)`` (writing into an existing array) is
shown beside the allocating call; run with ``BUFFEREXT_CPU_CACHE_BYTES=0``
to see the allocating call without CPUBuffer's block cache.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
from mpi4py import MPI

from bufferext.distarray import DistArray
from bufferext._demo import raw_halo_exchange

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()


def sample(fn: Callable[[], None], reps: int) -> float:
    """The slowest rank's seconds per call over ``reps`` back-to-back calls."""
    COMM.Barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return COMM.allreduce((time.perf_counter() - t0) / reps, op=MPI.MAX)


def measure(cases: Sequence[Tuple[str, Callable[[], None]]], reps: int,
            rounds: int) -> Dict[str, Tuple[float, float]]:
    """``{name: (median, best)}`` seconds per call, the cases interleaved."""
    for _, fn in cases:
        fn()
        fn()
    times: Dict[str, List[float]] = {name: [] for name, _ in cases}
    for r in range(rounds):
        for k in range(len(cases)):
            name, fn = cases[(k + r) % len(cases)]
            times[name].append(sample(fn, reps))
    return {name: (float(np.median(t)), float(np.min(t))) for name, t in times.items()}


def reps_for(fn: Callable[[], None], budget: float = 0.004) -> int:
    """Calls per sample so that a sample lasts about ``budget`` seconds."""
    fn()
    t = sample(fn, 3)
    return int(COMM.bcast(max(1, min(200, round(budget / max(t, 1e-7)))), root=0))


def bench_halos(n: int, rounds: int) -> None:
    arr = np.zeros((n * SIZE, n))
    pads = [(0, 1)] + [(1, 1)] * (SIZE - 2) + [(1, 0)] if SIZE > 1 else [(0, 0)]
    d = DistArray.from_global(arr, dist="bn", grid_shape=(SIZE, 1),
                              padding=[pads, None], comm=COMM)
    raw, nbytes = raw_halo_exchange(d)
    res = measure([("ours", lambda: d.update_halos()), ("raw", raw)], reps_for(raw), rounds)
    if RANK == 0:
        (om, ob), (rm, rb) = res["ours"], res["raw"]
        print(f"halo   {n:>5}x{n:<5} {nbytes:>7} B  update_halos {om * 1e6:7.1f} "
              f"(best {ob * 1e6:7.1f}) us  Sendrecv {rm * 1e6:7.1f} (best {rb * 1e6:7.1f})"
              f" us  ratio median {om / rm:4.2f} best {ob / rb:4.2f}  (target <= 1.2)")


def packed_halo_exchange(d: DistArray) -> Callable[[], None]:
    """A hand-written halo exchange of strided slabs: per stage, numpy
    copies of the slab into a contiguous buffer, ``Sendrecv``, and a copy
    back (2 ranks: one peer each way)."""
    from bufferext.distarray._datatypes import index
    local = d.local
    calls = []
    for sends, recvs, _ in d._halo_plan().stages:
        for (peer, stag, ssel), (rpeer, rtag, rsel) in zip(sends, recvs):
            sb, rb = np.empty(local[index(ssel)].shape), np.empty(local[index(rsel)].shape)
            calls.append((ssel, sb, peer, stag, rsel, rb, rpeer, rtag))

    def exchange() -> None:
        for ssel, sb, peer, stag, rsel, rb, rpeer, rtag in calls:
            sb[...] = local[index(ssel)]
            COMM.Sendrecv(sb, peer, stag, rb, rpeer, rtag)
            local[index(rsel)] = rb
    return exchange


def bench_column_halos(n: int, rounds: int) -> None:
    arr = np.zeros((n, n * SIZE))
    pads = [(0, 1)] + [(1, 1)] * (SIZE - 2) + [(1, 0)] if SIZE > 1 else [(0, 0)]
    d = DistArray.from_global(arr, dist="nb", grid_shape=(1, SIZE),
                              padding=[None, pads], comm=COMM)
    raw, nbytes = raw_halo_exchange(d)
    packed = packed_halo_exchange(d)
    res = measure([("ours", lambda: d.update_halos()), ("packed", packed), ("raw", raw)],
                  reps_for(packed), rounds)
    if RANK == 0:
        (om, ob), (pm, pb), (rm, _) = res["ours"], res["packed"], res["raw"]
        print(f"halo cols {n:>5}x{n:<5} {nbytes:>7} B  update_halos {om * 1e6:7.1f} us  "
              f"packed by hand {pm * 1e6:7.1f} us  ratio median {om / pm:4.2f} best "
              f"{ob / pb:4.2f}  (target <= 1.2);  contiguous Sendrecv {rm * 1e6:6.1f} us")


def bench_redistribute(n: int, src: str, dst: str, rounds: int) -> None:
    g = np.arange(n * n, dtype=np.float64).reshape(n, n)
    d = DistArray.from_global(g, dist=src, comm=COMM)
    out = d.redistribute(dist=dst)                   # build and cache the plan
    plan = [p for k, p in d._mpi.plans.items() if k[0] == "redistribute"][0]
    count = lambda sel: int(np.prod([s[1] if isinstance(s, tuple) else len(s)  # noqa: E731
                                     for s in sel])) if sel is not None else 0
    scounts = [count(s) for s in plan.sends]
    rcounts = [count(r) for r in plan.recvs]
    peer_s = [0 if p == RANK else c for p, c in enumerate(scounts)]
    peer_r = [0 if p == RANK else c for p, c in enumerate(rcounts)]
    sbuf = np.ones(sum(scounts))
    rbuf = np.empty(sum(rcounts))
    displs = lambda c: np.concatenate(([0], np.cumsum(c)[:-1])).tolist()  # noqa: E731
    moved = COMM.allreduce(sum(peer_s) * 8)

    def raw_all() -> None:
        COMM.Alltoallv([sbuf, scounts, displs(scounts), MPI.DOUBLE],
                       [rbuf, rcounts, displs(rcounts), MPI.DOUBLE])

    def raw_peer() -> None:
        COMM.Alltoallv([sbuf, peer_s, displs(peer_s), MPI.DOUBLE],
                       [rbuf, peer_r, displs(peer_r), MPI.DOUBLE])

    cases = [("ours", lambda: d.redistribute(dist=dst)),
             ("ours out=", lambda: d.redistribute(dist=dst, out=out)),
             ("raw all", raw_all), ("raw peer", raw_peer)]
    res = measure(cases, reps_for(raw_all), rounds)
    if RANK == 0:
        gbs = {k: (moved / m / 1e9, moved / b / 1e9) for k, (m, b) in res.items()}
        line = f"redist {src}->{dst} {n}^2 {moved / 2**20:4.1f} MiB:"
        for k, (m, b) in gbs.items():
            line += f"  {k} {m:4.2f} ({b:4.2f})"
        print(line + " GB/s median (best)")
        for k in ("ours", "ours out="):
            print(f"    {k:9} / raw peer: median {gbs[k][0] / gbs['raw peer'][0]:4.2f} "
                  f"best {gbs[k][1] / gbs['raw peer'][1]:4.2f};  / raw all: median "
                  f"{gbs[k][0] / gbs['raw all'][0]:4.2f} best "
                  f"{gbs[k][1] / gbs['raw all'][1]:4.2f}  (target >= 0.8)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, fewer samples")
    args = parser.parse_args()
    rounds = 15 if args.quick else 41
    if RANK == 0:
        print(f"{SIZE} ranks, {MPI.Get_library_version().splitlines()[0]}; "
              f"{rounds} interleaved samples per case")
    for n in ((256, 2048) if args.quick else (256, 1024, 4096)):
        bench_halos(n, rounds)
    for n in ((256, 2048) if args.quick else (256, 1024, 4096)):
        bench_column_halos(n, rounds)
    for n in ((1024,) if args.quick else (1024, 4096)):
        for src, dst in (("bn", "nb"), ("bn", "cn"), ("bb", "cc")):
            bench_redistribute(n, src, dst, rounds)


if __name__ == "__main__":
    main()
