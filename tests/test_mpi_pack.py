"""Redistribution paths: numpy packing into contiguous staging vs MPI
derived datatypes (forced per array with ``Options.strategy``) on every pair of
distributions, ranks choosing differently, the fall-back past the count
limit, and ``redistribute(out=...)``.  The MPI tests run under ``mpiexec
-n 2`` / ``-n 4`` with ``--with-mpi``; the helpers' tests run anywhere."""

from __future__ import annotations

import itertools
import types
from typing import List

import numpy as np
import pytest

from bufferext._demo import raw_halo_exchange
from bufferext.distarray import DistArray
from bufferext.distarray._datatypes import fast_index, index, slice_of

try:
    from mpi4py import MPI
    COMM = MPI.COMM_WORLD
    SIZE, RANK = COMM.Get_size(), COMM.Get_rank()
except ImportError:                 # helpers' tests still run
    MPI = COMM = None
    SIZE, RANK = 1, 0

needs_ranks = [pytest.mark.mpi(min_size=2),
               pytest.mark.skipif(SIZE < 2, reason="needs mpiexec -n 2 or more")]

def use(d: DistArray, **options: object) -> DistArray:
    """Move ``d``'s data with these ``Options`` (strategy, count_limit)."""
    d._mpi.options = d._mpi.options._replace(**options)
    return d


# as tests/test_mpi_ops.py: one row per rank at least (row padding)
ROWS = max(7, SIZE)
# rows whose "bn" -> "cn" redistribution moves 2 strided rows between every
# pair of ranks (with 8 * SIZE rows, 8 ranks move single rows: nothing to
# pack, so no choice of path to test)
STRIDED_ROWS = 2 * SIZE * SIZE
G = np.arange(ROWS * 9, dtype=np.float64).reshape(ROWS, 9) * 1.5 - 3


def dists() -> List[dict]:
    perm = np.random.default_rng(3).permutation(9)
    return [dict(dist="bb"), dict(dist="bc"), dict(dist="cb", block_size=2),
            dict(dist="cc", block_size=[2, 3]), dict(dist="nb"), dict(dist="bn"),
            dict(dist="nu", grid_shape=(1, SIZE), indices=[None, [perm[i::SIZE]
                                                                  for i in range(SIZE)]]),
            dict(dist="bb", grid_shape=(SIZE, 1), padding=[[(1, 1)] * SIZE, None])]


# -- helpers (any process count) ------------------------------------------------

def test_slice_of_turns_progressions_into_slices() -> None:
    assert slice_of((3, 4)) == slice(3, 7)
    assert slice_of(np.array([5])) == slice(5, 6)
    assert slice_of(np.array([1, 4, 7, 10])) == slice(1, 11, 3)
    irregular = slice_of(np.array([0, 1, 5]))
    assert isinstance(irregular, np.ndarray) and irregular.tolist() == [0, 1, 5]


def test_fast_index_selects_like_outer_indexing() -> None:
    a = np.arange(6 * 7 * 5).reshape(6, 7, 5)
    sels = [((1, 3), np.array([0, 2, 4, 6]), np.array([0, 1, 4])),
            (np.array([0, 3, 4]), (2, 2), np.array([1, 3])),
            (np.array([5]), np.array([1, 2]), (0, 5))]
    for s in sels:
        assert np.array_equal(a[fast_index(s)], a[index(s)])


# -- under MPI ------------------------------------------------------------------

@pytest.mark.parametrize("strategy", ["pack", "datatype"])
@pytest.mark.parametrize("src,dst", list(itertools.product(range(8), range(8))))
@pytest.mark.mpi(min_size=2)
@pytest.mark.skipif(SIZE < 2, reason="needs mpiexec -n 2 or more")
def test_every_pair_both_paths(strategy: str, src: int, dst: int) -> None:
    a, b = dists()[src], dists()[dst]
    d = use(DistArray.from_global(G, comm=COMM, **a), strategy=strategy)
    e = use(d.redistribute(**b), strategy=strategy)
    ref = DistArray.from_global(G, comm=COMM, **b)
    assert np.array_equal(e.local, ref.local)
    assert np.array_equal(e.allgather(), G)
    assert np.array_equal(d.redistribute(**b).local, ref.local)     # cached plan


@pytest.mark.parametrize("dtype", [np.int16, np.complex128, np.uint8])
@pytest.mark.mpi(min_size=2)
@pytest.mark.skipif(SIZE < 2, reason="needs mpiexec -n 2 or more")
def test_ranks_choosing_different_paths(dtype: type) -> None:
    strategy = "pack" if RANK % 2 else "datatype"
    g = (np.arange(12 * 10) * 7 % 251).astype(dtype).reshape(12, 10)
    for a, b in [("bn", "cn"), ("bb", "cc"), ("cb", "bc"), ("bn", "nb")]:
        d = use(DistArray.from_global(g, dist=a, comm=COMM), strategy=strategy)
        e = use(d.redistribute(dist=b), strategy=strategy)
        assert np.array_equal(e.local, DistArray.from_global(g, dist=b, comm=COMM).local)
        back = e.gather(0)                      # gathered through the other path
        assert np.array_equal(back, g) if RANK == 0 else back is None


@pytest.mark.mpi(min_size=2)
@pytest.mark.skipif(SIZE < 2, reason="needs mpiexec -n 2 or more")
def test_auto_needs_no_timing_where_one_path_is_possible() -> None:
    g = np.zeros((STRIDED_ROWS, 6))
    d = DistArray.from_global(g, dist="bn", comm=COMM)
    assert d._mpi.options.strategy == "auto"
    d.redistribute(dist="cn")                 # strided rows: timed
    d.redistribute(dist="bn", split="ceil")   # whole row blocks: nothing to pack
    # k[1]: the content key of dist, ("str", "cn")
    plans = {k[1][1]: p for k, p in d._mpi.plans.items() if k[0] == "redistribute"}
    assert plans["cn"].strategy(8) == "auto"
    assert plans["bn"].strategy(8) == "pack"
    assert plans["bn"].tuner.calls == 0
    use(d, count_limit=4)                     # counts no longer fit
    d.redistribute(dist="cn")
    plans = {k[1][1]: p for k, p in d._mpi.plans.items()
             if k[0] == "redistribute" and k[-1].count_limit == 4}
    assert plans["cn"].strategy(8) == "datatype"


@pytest.mark.parametrize("slow", ["pack", "datatype"])
@pytest.mark.mpi(min_size=2)
@pytest.mark.skipif(SIZE < 2, reason="needs mpiexec -n 2 or more")
def test_auto_keeps_the_path_it_timed_faster(
        slow: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The tuner reads a clock that only the paths below move: `slow` takes
    # a second, the other a millisecond, whatever the machine's load.  (A
    # real 20 ms sleep in `slow` decided this before, and a rank descheduled
    # for longer inside the fast path would have kept the slow one.)
    from bufferext.distarray import _redistribute

    g = np.arange(STRIDED_ROWS * 6, dtype=np.float64).reshape(STRIDED_ROWS, 6)
    d = DistArray.from_global(g, dist="bn", comm=COMM)
    ref = DistArray.from_global(g, dist="cn", comm=COMM).local
    e = d.redistribute(dist="cn")
    plan = [p for k, p in d._mpi.plans.items() if k[0] == "redistribute"][0]
    run, ways, now = plan._run_host, [], [0.0]

    def timed(path: str, *args: object) -> None:
        ways.append(path)
        now[0] += 1.0 if path == slow else 0.001
        run(path, *args)

    monkeypatch.setattr(_redistribute, "time",
                        types.SimpleNamespace(perf_counter=lambda: now[0]))
    plan._run_host = timed
    calls = len(_redistribute.HOST_PATHS) * (_redistribute.TRIALS + 1)
    for k in range(calls + 2):
        e.local[...] = -1
        d.redistribute(dist="cn", out=e)
        assert np.array_equal(e.local, ref), f"call {k} ({ways[-1]})"
    fast = "datatype" if slow == "pack" else "pack"
    paths = _redistribute.HOST_PATHS           # the first call ran paths[0]
    assert ways[:calls - 1] == [paths[k % 2] for k in range(1, calls)]
    assert plan.strategy(8) == fast
    assert ways[calls - 1:] == [fast] * 3


@pytest.mark.mpi(min_size=2)
@pytest.mark.skipif(SIZE < 2, reason="needs mpiexec -n 2 or more")
def test_pack_falls_back_past_the_count_limit() -> None:
    big = np.arange(20 * 6, dtype=np.int32).reshape(20, 6)
    d = use(DistArray.from_global(big, dist="bn", comm=COMM), strategy="pack",
            count_limit=3)
    e = d.redistribute(dist="cb", block_size=3)
    assert np.array_equal(e.local, DistArray.from_global(
        big, dist="cb", block_size=3, comm=COMM).local)


@pytest.mark.parametrize("pair", [("bn", "cn"), ("bb", "bb"), ("cb", "nb")])
@pytest.mark.mpi(min_size=2)
@pytest.mark.skipif(SIZE < 2, reason="needs mpiexec -n 2 or more")
def test_redistribute_out_reuses_the_target(pair: tuple) -> None:
    a, b = pair
    d = DistArray.from_global(G, dist=a, comm=COMM)
    out = d.redistribute(dist=b)
    out.local[...] = -7
    assert d.redistribute(dist=b, out=out) is out
    assert np.array_equal(out.local, DistArray.from_global(G, dist=b, comm=COMM).local)
    d.local[...] *= 2                           # new values, same memory
    d.redistribute(dist=b, out=out)
    assert np.array_equal(out.allgather(), 2 * G)


@pytest.mark.mpi(min_size=2)
@pytest.mark.skipif(SIZE < 2, reason="needs mpiexec -n 2 or more")
def test_redistribute_out_padded_target() -> None:
    pad = dict(dist="bb", grid_shape=(SIZE, 1), padding=[[(1, 1)] * SIZE, None])
    d = DistArray.from_global(G, dist="cb", block_size=2, comm=COMM)
    out = d.redistribute(**pad)
    out.local[...] = np.nan
    d.redistribute(out=out, **pad)
    assert np.array_equal(out.local, DistArray.from_global(G, comm=COMM, **pad).local)


@pytest.mark.mpi(min_size=2)
@pytest.mark.skipif(SIZE < 2, reason="needs mpiexec -n 2 or more")
def test_redistribute_bad_out_raises_everywhere() -> None:
    d = DistArray.from_global(G, dist="bn", comm=COMM)
    good = d.redistribute(dist="cn")
    wrong_dist = d.redistribute(dist="nb")
    wrong_dtype = DistArray.from_global(G.astype(np.float32), dist="cn", comm=COMM)
    cases = [(TypeError, "must be a DistArray", np.zeros(3)),
             (ValueError, "out: dimension 0 is not the requested distribution's: "
                          "dist_type='b' where 'c' is requested$", wrong_dist),
             (ValueError, "out: dimension 0 is not the requested distribution's: "
                          "block_size=2 where 1 is requested$",
              d.redistribute(dist="cn", block_size=2)),
             (TypeError, "must be the source dtype", wrong_dtype),
             (ValueError, "shares memory", d)]
    for exc, text, bad in cases:
        with pytest.raises(exc, match=text) as info:
            d.redistribute(dist="cn", out=bad)
        assert len(set(COMM.allgather(str(info.value)))) == 1
    # bad on one rank only: every rank raises, naming that rank
    with pytest.raises(ValueError, match="rank 1 of"):
        d.redistribute(dist="cn", out=wrong_dist if RANK == 1 else good)
    assert np.array_equal(d.redistribute(dist="cn", out=good).allgather(), G)


@pytest.mark.mpi(min_size=2)
@pytest.mark.skipif(SIZE < 2, reason="needs mpiexec -n 2 or more")
def test_update_halos_bound_fast_path() -> None:
    arr = np.arange(SIZE * 5 * 4, dtype=np.float64).reshape(SIZE * 5, 4)
    pads = [(0, 1)] + [(1, 1)] * (SIZE - 2) + [(1, 0)]
    d = DistArray.from_global(arr, dist="bn", grid_shape=(SIZE, 1), padding=[pads, None],
                              comm=COMM)
    m = d.maps[0]
    lo, hi = m.owned_slice.start, m.owned_slice.stop
    want = d.local.copy()
    early = d.update_halos             # a method reference taken before binding
    for call in (d.update_halos, lambda: d.update_halos(), early, early):
        d.local[:lo] = -1
        d.local[hi:] = -1
        call()
        assert np.array_equal(d.local, want)
    # one Sendrecv per call (2 ranks, or the end ranks of more): kept prepared
    one_peer = SIZE == 2 or RANK in (0, SIZE - 1)
    assert (d._mpi.halo_call is not None) == one_peer
    assert "update_halos" not in vars(d)
    raw, nbytes = raw_halo_exchange(d)
    raw()
    assert nbytes == 4 * 8 * (1 if one_peer else 2)
