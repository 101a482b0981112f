"""MPI operations on distributed arrays, run under ``mpiexec -n 2`` / ``-n 4``
with pytest-mpi (``--with-mpi``); skipped in a single-process run."""

from __future__ import annotations

import itertools
import sys
from typing import Any, List, Optional

import numpy as np
import pytest

MPI = pytest.importorskip("mpi4py.MPI")
from bufferext.distarray import (BlockMap, DistArray, ProtocolError,  # noqa: E402
                                 validate_collective)

COMM = MPI.COMM_WORLD
SIZE, RANK = COMM.Get_size(), COMM.Get_rank()
pytestmark = [pytest.mark.mpi(min_size=2),
              pytest.mark.skipif(SIZE < 2, reason="needs mpiexec -n 2 or more")]

# 7 rows, or one per rank beyond 7 (a row-block grid with communication
# padding needs every rank to own a row: the suite runs on 8 ranks too)
ROWS = max(7, SIZE)
G = np.arange(ROWS * 9, dtype=np.float64).reshape(ROWS, 9) * 1.5 - 3


def unstructured(n: int, size: int, seed: int = 1) -> List[np.ndarray]:
    perm = np.random.default_rng(seed).permutation(size)
    return [perm[i::n] for i in range(n)]


def dists() -> List[dict]:
    return [dict(dist="bb"), dict(dist="bc"), dict(dist="cb", block_size=2),
            dict(dist="cc", block_size=[2, 3]), dict(dist="nb"), dict(dist="bn"),
            dict(dist="bb", split="ceil"), dict(dist="nu", grid_shape=(1, SIZE),
                                                 indices=[None, unstructured(SIZE, 9)]),
            dict(dist="bb", grid_shape=(SIZE, 1), padding=[[(1, 1)] * SIZE, None])]


def same_everywhere(text: str) -> bool:
    return len(set(COMM.allgather(text))) == 1


@pytest.mark.parametrize("kw", dists(), ids=lambda kw: repr(kw)[:40])
def test_scatter_gather_round_trip(kw: dict) -> None:
    root = SIZE - 1
    d = DistArray.scatter(G if RANK == root else None, comm=COMM, root=root, **kw)
    ref = DistArray.from_global(G, comm=COMM, **kw)
    assert d.dim_data.__repr__() == ref.dim_data.__repr__()
    assert np.array_equal(d.local, ref.local)         # padding filled as well
    out = d.gather(root=root)
    if RANK == root:
        assert np.array_equal(out, G)
    else:
        assert out is None
    assert np.array_equal(d.allgather(), G)


def test_from_global_rank_and_grid_from_comm() -> None:
    d = DistArray.from_global(G, dist="bn", comm=COMM)
    assert d.rank == RANK and d.grid_shape == (SIZE, 1) and d.comm is COMM
    e = DistArray.from_global(np.zeros((8, 8, 3)), dist="bbn", comm=COMM)
    assert int(np.prod(e.grid_shape)) == SIZE and e.grid_shape[2] == 1
    assert e.grid_shape[0] >= e.grid_shape[1]


def test_from_global_names_what_the_ranks_passed_differently() -> None:
    """Different global shapes, dtypes or distributions are one ValueError
    on every rank, naming the field and each rank's value, at once (it
    surfaced at the next collective as a dim_data ProtocolError)."""
    rows = ROWS + (RANK == SIZE - 1)
    with pytest.raises(ValueError) as info:
        DistArray.from_global(np.zeros((rows, 3), np.float32), dist="bn", comm=COMM)
    message = str(info.value)
    assert message.startswith("from_global: the processes passed different "
                              f"arguments (array.shape=({ROWS}, 3) on rank"), message
    assert f"({ROWS + 1}, 3) on rank {SIZE - 1}" in message, message
    assert "dist=" not in message and "dtype" not in message, message
    with pytest.raises(ValueError, match=r"array\.dtype='<f8' on rank.*'<f4' on rank "
                                         f"{SIZE - 1}"):
        DistArray.from_global(G if RANK < SIZE - 1 else G.astype(np.float32),
                              dist="bn", comm=COMM)
    with pytest.raises(ValueError, match=r"dist='nb' on rank 0, 'bn' on rank"):
        DistArray.from_global(G, dist="bn" if RANK else "nb", comm=COMM)
    assert same_everywhere(message)


@pytest.mark.parametrize("src,dst", list(itertools.product(range(9), range(9))))
def test_redistribute_every_pair(src: int, dst: int) -> None:
    a, b = dists()[src], dists()[dst]
    d = DistArray.from_global(G, comm=COMM, **a)
    e = d.redistribute(**b)
    ref = DistArray.from_global(G, comm=COMM, **b)
    assert e.dim_data.__repr__() == ref.dim_data.__repr__()
    assert np.array_equal(e.local, ref.local)
    assert np.array_equal(e.allgather(), G)
    again = d.redistribute(**b)                        # cached plan
    assert np.array_equal(again.local, ref.local)


def limit_counts(d: DistArray, limit: int) -> DistArray:
    """Let ``d``'s MPI operations use counts of at most ``limit``."""
    d._mpi.options = d._mpi.options._replace(count_limit=limit)
    return d


def test_redistribute_chunked_datatypes() -> None:
    big = np.arange(40 * 6, dtype=np.int32).reshape(40, 6)
    d = limit_counts(DistArray.from_global(big, dist="bn", comm=COMM), 2)
    e = limit_counts(d.redistribute(dist="cb", block_size=3), 2)   # split runs, structs
    assert np.array_equal(e.local, DistArray.from_global(
        big, dist="cb", block_size=3, comm=COMM).local)
    out = e.gather(0)
    assert out is None if RANK else np.array_equal(out, big)


def expected_halos(arr: np.ndarray, d: DistArray) -> np.ndarray:
    """Global values with periodic wrap applied dimension by dimension, cut
    to this process's section."""
    w = arr.copy()
    pads_lo = COMM.allgather([m.padding[0] if m.grid_rank == 0 else -1 for m in d.maps])
    pads_hi = COMM.allgather([m.padding[1] if m.grid_rank == m.grid_size - 1 else -1
                              for m in d.maps])
    for k, m in enumerate(d.maps):
        if not m.periodic:
            continue
        lo = max(p[k] for p in pads_lo)
        hi = max(p[k] for p in pads_hi)
        n = m.size
        w = np.moveaxis(w, k, 0)
        if lo:
            w[:lo] = w[n - hi - lo:n - hi]
        if hi:
            w[n - hi:] = w[lo:lo + hi]
        w = np.moveaxis(w, 0, k)
    return w[tuple(slice(m.start, m.stop) for m in d.maps)]


def spoil(d: DistArray) -> None:
    """Overwrite every cell update_halos must fill with -1."""
    keep = []
    for m in d.maps:
        sl = m.owned_slice
        lo, hi = sl.start, sl.stop
        if m.periodic and m.grid_rank == 0:
            lo += m.padding[0]
        if m.periodic and m.grid_rank == m.grid_size - 1:
            hi -= m.padding[1]
        keep.append(slice(lo, hi))
    saved = d.local[tuple(keep)].copy()
    d.local[...] = -1
    d.local[tuple(keep)] = saved


def grid2() -> tuple:
    return (2, SIZE // 2) if SIZE % 2 == 0 else (SIZE, 1)


def edge_pads(p: int, lo: int, mid: int, hi: int) -> list:
    """Per-grid-rank padding: boundary ``lo``/``hi`` at the edges, ``mid``
    between ranks (padding widths differ per edge)."""
    if p == 1:
        return [(lo, hi)]
    return [(lo, mid)] + [(mid, mid)] * (p - 2) + [(mid, hi)]


@pytest.mark.parametrize("periodic", [False, True, (True, False)])
def test_halos_2d(periodic: Any) -> None:
    arr = np.arange(14 * 16, dtype=np.float64).reshape(14, 16)
    g = grid2()
    d = DistArray.from_global(arr, dist="bb", grid_shape=g, comm=COMM,
                              padding=[edge_pads(g[0], 2, 1, 3), edge_pads(g[1], 1, 2, 1)],
                              periodic=periodic)
    spoil(d)
    d.update_halos()
    assert np.array_equal(d.local, expected_halos(arr, d))
    spoil(d)
    d.update_halos()                                  # persistent requests reused
    assert np.array_equal(d.local, expected_halos(arr, d))


@pytest.mark.parametrize("periodic", [False, True])
def test_halos_of_columns(periodic: bool) -> None:
    """Column slabs are strided in memory: they travel through staging
    arrays packed by numpy (MPICH moved a one-column vector of 1024 rows 40
    times slower).  Right values on every call, the bound call included."""
    arr = np.arange(9 * 4 * SIZE, dtype=np.float64).reshape(9, 4 * SIZE)
    d = DistArray.from_global(arr, dist="nb", grid_shape=(1, SIZE), comm=COMM,
                              padding=[None, edge_pads(SIZE, 1, 2, 1)],
                              periodic=[False, periodic])
    for _ in range(3):
        spoil(d)
        d.update_halos()
        assert np.array_equal(d.local, expected_halos(arr, d))
    moves = [(len(t.packs), len(t.unpacks)) for t in d._mpi.halo.persistent[1]]
    assert any(packs and unpacks for packs, unpacks in moves)
    if SIZE == 2 and not periodic:                  # one Sendrecv: a bound call
        assert d._mpi.halo_call is not None         # ran the second and third


@pytest.mark.parametrize("limit", [None, 3])
def test_halos_3d_middle_dimension(limit: Any) -> None:
    """Slabs of the middle dimension are runs of the last one, strided:
    staged through numpy (or, past a count limit of 3, chunked datatypes)."""
    arr = np.arange(5 * 4 * SIZE * 6, dtype=np.int32).reshape(5, 4 * SIZE, 6)
    d = DistArray.from_global(arr, dist="bbb", grid_shape=(1, SIZE, 1), comm=COMM,
                              padding=[None, edge_pads(SIZE, 2, 1, 1), [(1, 2)]],
                              periodic=[False, True, True])
    if limit is not None:
        d = limit_counts(d, limit)
    for _ in range(2):
        spoil(d)
        d.update_halos()
        assert np.array_equal(d.local, expected_halos(arr, d))


def test_halos_empty_ranks() -> None:
    arr = np.arange(5 * 4, dtype=np.int64).reshape(5, 4)
    # ceil split of 5 over SIZE ranks: trailing ranks own nothing
    from bufferext.distarray import split_bounds
    owned = np.diff(split_bounds(5, SIZE, "ceil"))
    pads = []
    for r in range(SIZE):
        left = 1 if r > 0 and owned[r] and owned[r - 1] else 0
        right = 1 if r < SIZE - 1 and owned[r] and owned[r + 1] else 0
        pads.append((left, right))
    d = DistArray.from_global(arr, dist="bn", grid_shape=(SIZE, 1), split="ceil",
                              padding=[pads, None], comm=COMM)
    spoil(d)
    d.update_halos()
    assert np.array_equal(d.local, expected_halos(arr, d))


def test_halos_periodic_1d_chunked() -> None:
    arr = np.arange(SIZE * 6 + 2, dtype=np.float32)
    d = limit_counts(DistArray.from_global(arr, dist="b", comm=COMM, periodic=True,
                                           padding=[edge_pads(SIZE, 1, 2, 1)]), 1)
    spoil(d)
    d.update_halos()
    assert np.array_equal(d.local, expected_halos(arr, d))


def test_import_fills_other_ranks_layout() -> None:
    src = DistArray.from_global(G, dist="bu", comm=COMM,
                                indices=[None, unstructured(1, 9)], grid_shape=(SIZE, 1))
    d = DistArray.from_distarray(src.__distarray__(), comm=COMM)
    assert d.comm is COMM
    rows = (np.arange(ROWS), np.zeros(ROWS, int))      # every row, also remote ones
    assert list(d.owner(rows)) == list(src.owner(rows))
    assert np.array_equal(d.allgather(), G)


def test_validate_collective_accepts_valid() -> None:
    d = DistArray.from_global(G, dist="bc", comm=COMM, padding=[[(1, 1)] * grid2()[0]
                              if False else None, None])
    validate_collective(d, COMM)
    validate_collective(d.__distarray__(), COMM)


def planted(kind: str) -> dict:
    """A valid export on every rank except rank 1, where ``kind`` is broken."""
    d = DistArray.from_global(G, dist="bn", grid_shape=(SIZE, 1), comm=COMM,
                              padding=[[(1, 1)] * SIZE, None])
    data = d.__distarray__()
    if RANK != 1:
        return data
    dd = [dict(x) for x in data["dim_data"]]
    if kind == "size":
        dd[1] = {"dist_type": "b", "size": 9, "proc_grid_size": 1, "proc_grid_rank": 0,
                 "start": 0, "stop": 9, "padding": (0, 0), "periodic": True}
    elif kind == "coords":
        dd[0]["proc_grid_rank"] = 0
        m = d.maps[0]
        dd[0].update(start=0, stop=m.stop - m.start, padding=(0, 1))
    elif kind == "padding":
        p = dd[0]["padding"]
        dd[0]["padding"] = (p[0], 0) if RANK < SIZE - 1 else (0, p[1])
        dd[0]["start"] += dd[0]["padding"][0] - p[0]
        dd[0]["stop"] -= p[1] - dd[0]["padding"][1]
    elif kind == "grid":
        dd[1] = {"dist_type": "b", "size": 9, "proc_grid_size": 2, "proc_grid_rank": 0,
                 "start": 0, "stop": 5, "padding": (0, 0), "periodic": False}
    elif kind == "local":
        dd[0]["start"] = -1
    buf = data["buffer"]
    if kind in ("padding", "grid"):
        from bufferext import CPUBuffer
        shape = tuple(x["stop"] - x["start"] if x else 9 for x in dd)
        buf = CPUBuffer(shape, "f8")
    return {"__version__": "0.10.0", "buffer": buf, "dim_data": tuple(dd)}


@pytest.mark.parametrize("kind", ["size", "coords", "padding", "grid", "local"])
def test_validate_collective_catches_planted_mismatch(kind: str) -> None:
    data = planted(kind)
    with pytest.raises(ProtocolError) as info:
        validate_collective(data, COMM)
    assert same_everywhere(str(info.value))


def test_validate_collective_one_to_one_claim() -> None:
    idx = unstructured(SIZE, 9)
    if RANK == 0:
        idx = [i.copy() for i in idx]
        idx[0] = np.concatenate([idx[0][:-1], idx[1][:1]])   # one index twice, one lost
    d = DistArray.from_global(G, dist="nu", grid_shape=(1, SIZE), indices=[None, idx],
                              comm=MPI.COMM_SELF)       # each rank's own data
    data = d.__distarray__()
    dd = list(data["dim_data"])
    dd[1] = dict(dd[1], proc_grid_rank=RANK, one_to_one=True)
    data = dict(data, dim_data=tuple(dd))
    if RANK != 0:
        data = DistArray.from_global(G, dist="nu", grid_shape=(1, SIZE), rank=RANK,
                                     indices=[None, idx], comm=MPI.COMM_SELF
                                     ).__distarray__()
        dd = list(data["dim_data"])
        dd[1] = dict(dd[1], one_to_one=True)
        data = dict(data, dim_data=tuple(dd))
    with pytest.raises(ProtocolError, match="one_to_one") as info:
        validate_collective(data, COMM)
    assert same_everywhere(str(info.value))


def test_error_on_one_rank_is_raised_everywhere() -> None:
    objects = np.empty((SIZE * 2, 3), object) if RANK == 1 else None
    with pytest.raises(TypeError, match=r"^rank 1 of \d+: array of dtype object") as info:
        DistArray.scatter(objects, dist="bn", comm=COMM, root=1)
    assert same_everywhere(str(info.value))
    with pytest.raises(ValueError, match="array=None on the root") as info:
        DistArray.scatter(None, dist="bb", comm=COMM)
    assert same_everywhere(str(info.value))
    d = DistArray.from_global(G, dist="bb", comm=COMM)
    with pytest.raises(ValueError, match="root=") as info:
        d.gather(root=SIZE if RANK == 0 else 0)
    assert same_everywhere(str(info.value))
    with pytest.raises(ValueError, match="grid_shape") as info:
        d.redistribute(dist="bb", grid_shape=(SIZE + 1, 1) if RANK == SIZE - 1 else None)
    assert same_everywhere(str(info.value))
    COMM.Barrier()                                     # nobody is stuck


OTHERS = ", ".join(str(r) for r in range(SIZE) if r != 1)
PLURAL = "s" if SIZE > 2 else ""


@pytest.mark.parametrize("cached", [False, True])
def test_different_arguments_fail_on_every_rank(cached: bool) -> None:
    """A collective called with other arguments on one rank would build
    another plan there and exchange data that does not fit (a silently
    wrong result for redistribute and scatter, a deadlock for gather): every
    rank raises the same ValueError naming the argument and each value."""
    d = DistArray.from_global(G, dist="bn", comm=COMM)
    if cached:                                      # plans for both exist
        d.redistribute(dist="nb")
        d.redistribute(dist="cn")
    calls = {
        "redistribute": (lambda: d.redistribute(dist="cn" if RANK == 1 else "nb"),
                         "dist='nb' on rank{s} {o}, 'cn' on rank 1"),
        "gather": (lambda: d.gather(root=1 if RANK == 1 else 0),
                   "root=0 on rank{s} {o}, 1 on rank 1"),
        # allgather is gather with root=None: the mix deadlocked before
        "gather ": (lambda: d.allgather() if RANK == 1 else d.gather(root=0),
                    "root=0 on rank{s} {o}, None on rank 1"),
        "scatter": (lambda: DistArray.scatter(G, dist="bn", comm=COMM,
                                              block_size=2 if RANK == 1 else None),
                    "block_size=None on rank{s} {o}, 2 on rank 1"),
    }
    for op, (call, values) in calls.items():
        with pytest.raises(ValueError) as info:
            call()
        text = str(info.value)
        assert text == (f"{op.strip()}: the processes passed different arguments ("
                        + values.format(s=PLURAL, o=OTHERS)
                        + "); a collective call needs the same on every process"), text
        assert same_everywhere(text)
    # index arrays that print alike (over 1000 items) but differ still count
    idx = np.arange(3000)
    if RANK == 1:
        idx[1500], idx[1501] = 1501, 1500
    g = DistArray.from_global(np.arange(3000.0), dist="b", comm=COMM)
    with pytest.raises(ValueError, match=r"^redistribute: .*\(indices=") as info:
        g.redistribute(dist="u", indices=[[idx[r::SIZE] for r in range(SIZE)]])
    assert same_everywhere(str(info.value))
    assert np.array_equal(d.redistribute(dist="nb").allgather(), G)   # still usable
    # equal values of other types are the same argument
    out = d.gather(root=np.int64(0) if RANK == 1 else 0)
    assert np.array_equal(out, G) if RANK == 0 else out is None
    e = d.redistribute(dist="bb", grid_shape=(np.int32(SIZE), 1) if RANK else (SIZE, 1))
    assert np.array_equal(e.allgather(), G)
    COMM.Barrier()                                     # nobody is stuck


def test_arguments_are_compared_by_their_contents() -> None:
    """Arguments are keyed by contents, not repr: memoryviews of equal
    index arrays are the same call on every rank (their reprs name their
    addresses), and one changed in place is another call.  An argument with
    no content on one rank raises the same TypeError on every rank instead
    of leaving the others waiting."""
    n = SIZE * 3
    d = DistArray.from_global(np.arange(n) * 10.0, dist="b", comm=COMM)
    idx = np.arange(n)[::-1].copy()
    views = [memoryview(idx[r::SIZE]) for r in range(SIZE)]
    e = d.redistribute(dist="u", indices=[views])
    assert np.array_equal(e.local, idx[RANK::SIZE] * 10.0)
    idx[:] = np.roll(idx, 1)                            # the views see it
    e = d.redistribute(dist="u", indices=[views])
    assert np.array_equal(e.local, idx[RANK::SIZE] * 10.0)
    assert np.array_equal(e.allgather(), np.arange(n) * 10.0)
    odd = object()
    calls = {
        "redistribute: grid_shape": lambda: d.redistribute(
            dist="b", grid_shape=odd if RANK == 1 else None),
        "gather: root": lambda: d.gather(root=odd if RANK == 1 else 0),
        "scatter: periodic": lambda: DistArray.scatter(
            G, dist="bn", comm=COMM, periodic=odd if RANK == 1 else None),
    }
    for where, call in calls.items():
        with pytest.raises(TypeError, match=rf"^rank 1 of {SIZE}: {where}=<object "
                           r"object at 0x\w+> \(type object\) cannot be "
                           "compared across calls and processes") as info:
            call()
        assert same_everywhere(str(info.value))
    COMM.Barrier()                                     # nobody is stuck


def test_periodic_padding_wider_than_interior() -> None:
    arr = np.zeros((SIZE * 2,))
    pads = edge_pads(SIZE, 2, 1, 1) if SIZE > 1 else [(2, 1)]
    try:
        d = DistArray.from_global(arr, dist="b", comm=COMM, periodic=True, padding=[pads])
    except ValueError:
        pytest.skip("layout refused up front")
    if SIZE * 2 - 3 >= 2:
        d.update_halos()                               # fits: no error
    COMM.Barrier()



def _lying_buffer(good: DistArray, lie: str) -> Any:
    """Rank 1's local buffer unlike ``good``'s maps and dtype (others: good)."""
    if RANK != 1:
        return good.buffer
    if lie == "dtype":              # the same bytes, another element type
        return np.zeros(good.local_shape, np.int64)
    if lie == "shape":
        return np.zeros(good.local_shape[0] - 1, np.float64)
    frozen = np.array(good.local)
    frozen.flags.writeable = False
    return frozen


LIES = {"dtype": "not dtype float64",
        "shape": "bytes, its shape (",
        "readonly": "cannot be acquired writable and C-contiguous"}


@pytest.mark.parametrize("op", ["gather", "allgather", "redistribute", "update_halos"])
@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_buffer_unlike_the_plan_fails_on_every_rank(op: str, lie: str) -> None:
    """Rank 1's local buffer is not what its maps and dtype say: every rank
    raises the same BufferError naming rank 1, and nobody is left waiting
    (a read-only buffer is refused only where it would be written)."""
    good = DistArray.from_global(G, dist="bn", padding=[[(1, 1)] * SIZE, None],
                                 comm=COMM)
    d = DistArray(_lying_buffer(good, lie), good.maps, dtype=np.float64, comm=COMM)
    call = (lambda: d.redistribute(dist="nb")) if op == "redistribute" \
        else getattr(d, op)
    if lie == "readonly" and op != "update_halos":
        call()                      # only read: fine
    else:
        with pytest.raises(BufferError, match=rf"^rank 1 of {SIZE}: DistArray: ") as info:
            call()
        assert LIES[lie] in str(info.value)
        assert same_everywhere(str(info.value))
    COMM.Barrier()                                     # nobody is stuck
    assert np.array_equal(good.allgather(), G)         # the communicator still works


@pytest.mark.parametrize("op", ["gather", "allgather", "redistribute", "update_halos"])
def test_a_dtype_unreadable_on_one_rank_fails_on_every_rank(
        op: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The maps and dtype an engine takes are read lazily; rank 1 cannot
    read its bfloat16 buffer's dtype (no ml_dtypes there): every rank
    raises the same TypeError naming rank 1 before any engine runs, and
    nobody is left waiting in it."""
    import bufferext
    pytest.importorskip("ml_dtypes", reason="rank 0 holds bfloat16 as ml_dtypes'")
    buf = bufferext.CPUBuffer((3, 2), "bfloat16")
    d = DistArray(buf, [BlockMap(3 * SIZE, SIZE, RANK, 3 * RANK, 3 * RANK + 3),
                        BlockMap(2, 1, 0, 0, 2)], comm=COMM)
    if RANK == 1:
        monkeypatch.setitem(sys.modules, "ml_dtypes", None)   # as if not installed
    call = (lambda: d.redistribute(dist="nb")) if op == "redistribute" \
        else getattr(d, op)
    with pytest.raises(TypeError, match=rf"^rank 1 of {SIZE}: DistArray: a "
                       r"CPUBuffer of \[bfloat16\]: a DistArray holds it as "
                       r"ml_dtypes' type") as info:
        call()
    assert same_everywhere(str(info.value))
    monkeypatch.undo()
    COMM.Barrier()                                     # nobody is stuck
    assert d.allgather().shape == (3 * SIZE, 2)        # readable again


def test_redistribute_into_a_read_only_out_fails_on_every_rank() -> None:
    d = DistArray.from_global(G, dist="bn", comm=COMM)
    out = d.redistribute(dist="nb")
    target = _lying_buffer(out, "readonly")
    with pytest.raises(BufferError, match=rf"^rank 1 of {SIZE}: .*writable") as info:
        d.redistribute(dist="nb", out=DistArray(target, out.maps, dtype=G.dtype, comm=COMM))
    assert same_everywhere(str(info.value))
    assert np.array_equal(d.redistribute(dist="nb", out=out).allgather(), G)


@pytest.mark.parametrize("op", ["gather", "allgather", "redistribute", "update_halos",
                                "failed redistribute"])
def test_the_array_adopts_the_maps_its_engine_completed(op: str) -> None:
    """The engines get the maps, not the array: the maps completed by the
    layout gather reach the array after the call (a failed one too), and
    the plans it cached are freed with the array."""
    part = DistArray.from_global(G, dist="bn", grid_shape=(SIZE, 1), comm=COMM).maps[0]
    mine = BlockMap(ROWS, SIZE, RANK, part.start, part.stop)     # no bounds
    d = DistArray(G[part.start:part.stop].copy(), [mine, BlockMap(9, 1, 0, 0, 9)],
                  comm=COMM)
    rows = (np.arange(ROWS), np.zeros(ROWS, int))
    with pytest.raises(IndexError, match="knows only its own section"):
        d.owner(rows)
    if op == "failed redistribute":
        with pytest.raises(TypeError, match="out=list: must be a DistArray"):
            d.redistribute(dist="nb", out=[])       # type: ignore[arg-type]
    elif op == "redistribute":
        d.redistribute(dist="nb")
    else:
        getattr(d, op)()
    assert list(d.owner(rows)) == list(part.owner(rows[0]))
    assert d._mpi.maps is None                  # taken, not left behind
    assert d._mpi._finalizer is not None and d._mpi._finalizer.alive


def _rank_block(buffer: Any) -> dict:
    """Rank RANK's two elements of a 1-D block array, as a provider exports
    them."""
    return {"__version__": "0.10.0", "buffer": buffer,
            "dim_data": ({"dist_type": "b", "size": 2 * SIZE, "proc_grid_size": SIZE,
                          "proc_grid_rank": RANK, "start": 2 * RANK,
                          "stop": 2 * RANK + 2},)}


@pytest.mark.parametrize("other", [np.int64, np.float32])
def test_from_distarray_names_each_ranks_element_type(other: type) -> None:
    """Ranks holding different element types are one ProtocolError on every
    rank, naming each rank's type, at the import (an int64 section was
    gathered as float64 bits, a float32 one aborted MPICH; review m1)."""
    last = RANK == SIZE - 1
    buf = np.arange(2, dtype=other if last else np.float64)
    name = np.dtype(other).str
    with pytest.raises(ProtocolError, match=rf"different element types: '<f8' on "
                       rf"ranks? [\d, ]+, '{name}' on rank {SIZE - 1}\b") as info:
        DistArray.from_distarray(_rank_block(buf), comm=COMM)
    assert same_everywhere(str(info.value))
    d = DistArray.from_distarray(_rank_block(np.arange(2.0) + 2 * RANK), comm=COMM)
    assert np.array_equal(d.allgather(), np.arange(2.0 * SIZE))


def test_validate_collective_of_a_provider_failing_on_one_rank() -> None:
    """``__distarray__()`` raising on rank 1 only is raised on every rank
    (it was called outside the agreed step: the others waited forever in
    the allgather; review m3)."""
    class Provider:
        def __distarray__(self) -> dict:
            if RANK == 1:
                raise RuntimeError("provider failed on rank 1")
            return _rank_block(np.zeros(2))

    for check_it in (validate_collective,
                     lambda obj, comm: DistArray.from_distarray(obj, comm=comm)):
        with pytest.raises(RuntimeError, match=rf"^rank 1 of {SIZE}: provider "
                                               "failed on rank 1") as info:
            check_it(Provider(), COMM)
        assert same_everywhere(str(info.value))
    COMM.Barrier()                                     # nobody is stuck


def test_unstructured_indices_outside_zero_to_size() -> None:
    """The protocol leaves 'u' indices unconstrained: rank 0 holds -1 (and
    the last rank 2 * SIZE), which are owned but no cell of the global
    array; -1 no longer wraps onto the last index's owner, an index past
    size no longer fails the import with numpy's IndexError, and a gather
    or redistribution names the index it has no cell for, alike on every
    rank, where leaving it out would drop data silently (review m2)."""
    n = 2 * SIZE
    mine = np.arange(2 * RANK, 2 * RANK + 2)
    if RANK == 0:
        mine = np.array([-1, 0, 1])
    if RANK == SIZE - 1:
        mine = np.append(mine, n)
    data = {"__version__": "0.10.0", "buffer": mine * 10.0,
            "dim_data": ({"dist_type": "u", "size": n, "proc_grid_size": SIZE,
                          "proc_grid_rank": RANK, "indices": mine},)}
    validate_collective(data, COMM)
    d = DistArray.from_distarray(data, comm=COMM)
    assert d.owner(n - 1) == SIZE - 1 and d.owner(-1) == 0 and d.owner(n) == SIZE - 1
    for op in (d.allgather, lambda: d.gather(root=0),
               lambda: d.redistribute(dist="b")):
        with pytest.raises(ValueError, match=r"global index -1 \(held at grid "
                           r"coordinate 0\) of an unstructured dimension of "
                           rf"size {n} has no cell in the global array") as info:
            op()
        assert same_everywhere(str(info.value))


def test_redistribute_into_out_zeroes_the_cells_nobody_owns() -> None:
    # an unstructured source that leaves the last index to nobody (the
    # protocol allows it): out= reads 0 there, as a new result does
    n = 2 * SIZE
    mine = np.arange(2 * RANK, 2 * RANK + (1 if RANK == SIZE - 1 else 2))
    data = {"__version__": "0.10.0", "buffer": mine * 10.0 + 1,
            "dim_data": ({"dist_type": "u", "size": n, "proc_grid_size": SIZE,
                          "proc_grid_rank": RANK, "indices": mine},)}
    src = DistArray.from_distarray(data, comm=COMM)
    new = src.redistribute(dist="b")
    out = DistArray.from_global(np.full(n, 99.0), dist="b", comm=COMM)
    assert src.redistribute(dist="b", out=out) is out
    assert out.local.tolist() == new.local.tolist()
    expect = np.append(np.arange(n - 1) * 10.0 + 1, 0.0)
    assert out.allgather().tolist() == expect.tolist()


def test_scatter_of_a_record_dtype_is_refused_on_every_rank() -> None:
    # its dtype string ('|V12') would lose the fields: refused where the
    # root reads it, not at the root alone while the others wait
    records = np.zeros(6, [("a", "<i4"), ("b", "<f8")]) if RANK == 0 else None
    with pytest.raises(TypeError, match=r"^rank 0 of \d+: dtype .* is not "
                                        "supported") as info:
        DistArray.scatter(records, dist="b", comm=COMM)
    assert same_everywhere(str(info.value))
    COMM.Barrier()


def test_a_bad_device_on_one_rank_is_raised_on_every_rank() -> None:
    # the device may differ per process, but a bad one (here unhashable,
    # which the plan cache's key would have raised on) fails everywhere
    d = DistArray.from_global(np.arange(12.0), dist="b", comm=COMM)
    with pytest.raises(ValueError, match=r"^rank 1 of \d+: device=\['cpu'\]: "
                                         "must be 'cpu', 'cuda' or 've'") as info:
        d.redistribute(dist="c", device=["cpu"] if RANK == 1 else None)
    assert same_everywhere(str(info.value))
    COMM.Barrier()


def test_boundary_padding_may_differ_along_an_axis() -> None:
    # 0.10: the processes at one grid rank along an axis have identical
    # dim_data there, "the only possible exception" the padding of edge
    # processes; a difference elsewhere is named with both values
    def data(pad: tuple) -> dict:
        buf = np.arange(8.0).reshape(4, 2) + 100 * RANK
        return {"__version__": "0.10.0", "buffer": buf,
                "dim_data": ({"dist_type": "b", "size": 4, "proc_grid_size": 1,
                              "proc_grid_rank": 0, "start": 0, "stop": 4,
                              "padding": pad},
                             {"dist_type": "b", "size": 2 * SIZE,
                              "proc_grid_size": SIZE, "proc_grid_rank": RANK,
                              "start": 2 * RANK, "stop": 2 * RANK + 2})}

    mine = data((1, 0) if RANK == 0 else (0, 1) if RANK == 1 else (0, 0))
    validate_collective(mine, COMM)
    d = DistArray.from_distarray(mine, comm=COMM)
    assert d.allgather()[:, 2 * RANK:2 * RANK + 2].tolist() == \
        mine["buffer"].tolist()
    other = data((0, 0))
    other["dim_data"] = ({"dist_type": "u", "size": 4, "proc_grid_size": 1,
                          "proc_grid_rank": 0,
                          "indices": np.arange(4)[::-1 if RANK == 1 else 1]},
                         other["dim_data"][1])
    with pytest.raises(ProtocolError, match=r"rank 1: dim_data\[0\] differs from "
                       r"that of the other processes at grid rank 0 along dim 0: "
                       r"indices=array\(\[3, 2, 1, 0\]\) where they have "
                       r"array\(\[0, 1, 2, 3\]\)") as info:
        validate_collective(other, COMM)
    assert same_everywhere(str(info.value))
