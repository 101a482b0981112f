"""The MPI layer on one process: comm=None paths (no mpi4py needed),
dims_create, and datatype chunking with a small forced count limit
(checked against numpy through MPI.COMM_SELF)."""

from __future__ import annotations

import numpy as np
import pytest

from bufferext.distarray import (DistArray, ProtocolError, agree, cuda_aware,
                                 dims_create, validate_collective)
from bufferext.distarray._datatypes import datatype, runs

G = np.arange(6 * 8, dtype=np.float64).reshape(6, 8)


def test_dims_create_like_mpi() -> None:
    assert dims_create(4, [None, None]) == (2, 2)
    assert dims_create(12, [None, None, None]) == (3, 2, 2)
    assert dims_create(6, [None, 1]) == (6, 1)
    assert dims_create(8, [2, None]) == (2, 4)
    with pytest.raises(ValueError, match="cannot fill"):
        dims_create(6, [4, None])


def test_single_process_operations() -> None:
    d = DistArray.scatter(G, dist="bc")
    assert d.comm is None and d.grid_shape == (1, 1)
    assert np.array_equal(d.gather(), G) and np.array_equal(d.allgather(), G)
    e = d.redistribute(dist="cb", block_size=3)
    assert np.array_equal(e.local, G)
    validate_collective(d)
    p = DistArray.from_global(G, dist="bb", padding=[(2, 1), None], periodic=[True, False])
    p.local[:2] = -1
    p.local[-1:] = -1
    p.update_halos()                      # one process: periodic wrap is a local copy
    assert np.array_equal(p.local[:2], G[3:5]) and np.array_equal(p.local[-1], G[2])


def test_validate_collective_one_process_grid() -> None:
    d = DistArray.from_global(G, dist="bb", grid_shape=(2, 1), rank=0)
    with pytest.raises(ProtocolError, match="holds 2 processes"):
        validate_collective(d)


def test_agree_single_process_reraises() -> None:
    with pytest.raises(KeyError):
        agree(None, lambda: {}["x"])


@pytest.mark.parametrize("limit", [1, 2, 3, 2**31 - 1])
def test_datatype_chunking(limit: int) -> None:
    MPI = pytest.importorskip("mpi4py.MPI")
    a = np.arange(5 * 7 * 4, dtype=np.int16).reshape(5, 7, 4)
    sels = [(1, 4), np.array([6, 0, 1, 2, 4]), (0, 4)]
    starts, lengths = runs(np.array([0, 1, 2, 3, 4, 9]), limit)
    assert lengths.max() <= max(limit, 1) and lengths.sum() == 6
    t = datatype(sels, a.shape, a.dtype, limit)
    try:
        out = np.zeros(4 * 5 * 4, a.dtype)
        MPI.COMM_SELF.Sendrecv([a, 1, t], 0, 0, out, 0, 0)
    finally:
        t.Free()
    expect = a[np.ix_(np.arange(1, 5), sels[1], np.arange(4))].ravel()
    assert np.array_equal(out, expect)


def _combiners(t: object) -> list:
    """The constructors of a derived datatype, outermost first."""
    names = []
    while True:
        inner, name, _ = t.decode()                     # type: ignore[attr-defined]
        if name == "NAMED":
            return names
        names.append(name)
        t = inner


@pytest.mark.parametrize("sels,vectors", [
    ([(1, 4), (0, 8)], 0),                              # row block
    ([(0, 6), (2, 5)], 0),                              # column block
    ([np.array([1, 3, 5]), (0, 8)], 1),                 # cyclic rows
    ([(2, 3), np.array([0, 3, 6])], 1),                 # cyclic columns
    ([np.array([0, 2, 4]), np.array([1, 4, 7])], 2),    # cyclic both, offsets
    ([np.array([0, 2, 3]), np.array([5, 1, 2])], 0),    # irregular: hindexed
])
def test_datatype_selects_like_numpy(sels: list, vectors: int) -> None:
    # Equal runs at a constant step become vectors (MPICH hands those to
    # the kernel in one copy, and packs an hindexed of many blocks first).
    MPI = pytest.importorskip("mpi4py.MPI")
    a = np.arange(6 * 8, dtype=np.float64).reshape(6, 8) + 0.5
    expect = a[np.ix_(*[np.arange(s[0], s[0] + s[1]) if isinstance(s, tuple) else s
                        for s in sels])].ravel()
    t = datatype(sels, a.shape, a.dtype)
    try:
        assert _combiners(t).count("VECTOR") == vectors
        out = np.zeros(expect.size)
        MPI.COMM_SELF.Sendrecv([a, 1, t], 0, 0, out, 0, 0)
    finally:
        t.Free()
    assert np.array_equal(out, expect)


def test_cuda_aware_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BUFFEREXT_MPI_CUDA_AWARE", "1")
    assert cuda_aware()
    monkeypatch.setenv("BUFFEREXT_MPI_CUDA_AWARE", "0")
    assert not cuda_aware()


BIG = np.arange(512 * 1024, dtype=np.float64).reshape(512, 1024)   # 4 MiB


def test_repeated_redistribution_reuses_the_freed_block() -> None:
    d = DistArray.from_global(BIG, dist="bn")
    e = d.redistribute(dist="cn", block_size=4)
    ptr = e.buffer.ptr
    del e
    again = d.redistribute(dist="cn", block_size=4)
    assert again.buffer.ptr == ptr        # no fresh pages to fault in
    assert np.array_equal(again.local, BIG)


def test_cells_no_source_owns_stay_zero() -> None:
    # Unstructured indices covering half of axis 0: the target's other rows
    # are written by nobody, so they start zeroed even when a dirty block of
    # the same size is waiting in the cache.
    d = DistArray.from_global(BIG, dist="un", indices=[[np.arange(0, 512, 2)], None])
    from bufferext import CPUBuffer
    dirty = CPUBuffer.empty(BIG.shape)
    np.asarray(dirty)[...] = -1
    del dirty
    e = d.redistribute(dist="bn")
    assert np.array_equal(e.local[::2], BIG[::2])
    assert not e.local[1::2].any()


def test_plans_are_keyed_on_index_contents() -> None:
    # Index arrays past 1000 items that differ only in the middle print
    # alike (numpy shortens their repr): each must still get its own plan.
    n = 3000
    d = DistArray.from_global(np.arange(n), dist="b", grid_shape=(1,))
    first = np.arange(n)
    second = first.copy()
    second[1500], second[1501] = 1501, 1500
    assert repr(first) == repr(second)
    d.redistribute(dist="u", grid_shape=(1,), indices=[[first]])
    e = d.redistribute(dist="u", grid_shape=(1,), indices=[[second]])
    assert np.array_equal(e.maps[0].indices, second)
    assert np.array_equal(e.local, second)
