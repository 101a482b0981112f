"""The MPI layer on one process: comm=None paths (no mpi4py needed; what
comm=None means under a launcher is tests/test_launcher.py),
dims_create, and datatype chunking with a small forced count limit
(checked against numpy through MPI.COMM_SELF)."""

from __future__ import annotations

import array
import re
from typing import Any

import numpy as np
import pytest

from bufferext import CPUBuffer
from bufferext.distarray import (DistArray, ProtocolError, agree, cuda_aware,
                                 dims_create, validate_collective)
from bufferext.distarray._comm import content_key, digest
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
    for bad in ("yes", "true", " 1", "2"):      # never a silent fallback
        monkeypatch.setenv("BUFFEREXT_MPI_CUDA_AWARE", bad)
        with pytest.raises(ValueError, match=re.escape(
                f"BUFFEREXT_MPI_CUDA_AWARE={bad!r}: expected 0")):
            cuda_aware()


BIG = np.arange(512 * 1024, dtype=np.float64).reshape(512, 1024)   # 4 MiB


@pytest.mark.thread_unsafe(reason="it watches the process-wide CPU block cache")
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
    # the same size is waiting in the cache (a redistribution's target) or
    # was just freed (a gathered array's memory).
    d = DistArray.from_global(BIG, dist="un", indices=[[np.arange(0, 512, 2)], None])
    from bufferext import CPUBuffer
    dirty = CPUBuffer.empty(BIG.shape)
    np.asarray(dirty)[...] = -1
    del dirty
    e = d.redistribute(dist="bn")
    assert np.array_equal(e.local[::2], BIG[::2])
    assert not e.local[1::2].any()
    for collect in (d.gather, d.allgather) * 2:     # planned, then cached
        dirty = np.full(BIG.shape, -1.0)
        del dirty
        g = collect()
        assert np.array_equal(g[::2], BIG[::2]) and not g[1::2].any()


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


# ---- content keys: plans and the cross-process digest keyed by contents ------

def test_a_memoryview_of_changed_indices_gets_a_new_plan() -> None:
    # A memoryview's repr names its address, not its contents: keyed by
    # repr, the second call reused the first plan and ignored the new
    # indices (a silently wrong result).
    d = DistArray.from_global(np.arange(6.0) * 10, dist="b", grid_shape=(1,))
    idx = np.array([0, 2, 4])
    view = memoryview(idx)
    e = d.redistribute(dist="u", grid_shape=(1,), indices=[[view]])
    assert np.array_equal(e.local, [0, 20, 40])
    idx[:] = [5, 3, 1]
    e = d.redistribute(dist="u", grid_shape=(1,), indices=[[view]])
    assert np.array_equal(e.maps[0].indices, [5, 3, 1])
    assert np.array_equal(e.local, [50, 30, 10])


class _Summarised:
    """An array-like whose repr does not show its contents (as torch
    tensors and pandas objects print past a size)."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.values

    def __repr__(self) -> str:
        return f"_Summarised(<{self.values.size} values>)"


def test_long_arrays_differing_in_the_middle_key_apart() -> None:
    n = 3000
    first = np.arange(n)
    second = first.copy()
    second[1500], second[1501] = 1501, 1500
    assert repr(first) == repr(second)
    for wrap in (np.asarray, _Summarised, memoryview):
        assert content_key(wrap(first)) != content_key(wrap(second)), wrap
        assert content_key(wrap(first)) == content_key(wrap(first.copy())), wrap
        assert digest(content_key(wrap(first))) != digest(content_key(wrap(second)))
    d = DistArray.from_global(np.arange(n), dist="b", grid_shape=(1,))
    d.redistribute(dist="u", grid_shape=(1,), indices=[[_Summarised(first)]])
    e = d.redistribute(dist="u", grid_shape=(1,), indices=[[_Summarised(second)]])
    assert np.array_equal(e.local, second)


def test_acquired_hands_mpi_the_memory_or_refuses_by_name() -> None:
    """The MPI layer's acquisition of a local buffer: CPU memory is handed
    to MPI as it is (a write lands in the buffer); a read-only buffer is
    refused for writing; the size and the element type (by format, not by
    numpy's dtype) are checked against the DistArray's; every refusal
    releases what it acquired."""
    from bufferext.distarray._buffers import Acquired, Kind
    f4 = np.dtype(np.float32)
    buf = CPUBuffer((2, 3), "float32")
    np.asarray(buf)[...] = np.arange(6).reshape(2, 3)
    with Acquired(buf, (2, 3), f4, write=True, aware=False) as got:
        assert got.kind is Kind.CPU and not got.staged
        assert got.mpi.shape == (2, 3) and got.mpi.dtype == f4
        got.mpi[0, 0] = 7.0             # MPI writes into the memory itself
        assert buf.exports == 1
    assert buf.exports == 0 and np.asarray(buf)[0, 0] == 7.0
    ro = CPUBuffer(3, "float32", readonly=True)
    with pytest.raises(BufferError, match=re.escape(
            "DistArray: the local buffer (CPUBuffer) cannot be acquired "
            "writable and C-contiguous: ")):
        Acquired(ro, (3,), f4, write=True, aware=False)
    with Acquired(ro, (3,), f4, write=False, aware=False) as got:
        assert got.mpi.shape == (3,) and not got.mpi.flags.writeable
    refusals = [((2, 2), f4, "the local buffer has 24 bytes, its shape (2, 2) "
                 "and dtype float32 need 16"),
                ((2, 3), np.dtype(np.int32), "the local buffer holds format "
                 "'f', not dtype int32")]
    for shape, dtype, message in refusals:
        with pytest.raises(BufferError, match=re.escape(message)):
            Acquired(buf, shape, dtype, write=False, aware=False)
    # a dtype no format names matches no format, not even one bufferext
    # does not read either (both 'no format' alike: it was accepted once)
    records = np.zeros(2, dtype=[("a", "u1"), ("b", "<u2")])
    with pytest.raises(BufferError, match=re.escape(
            "the local buffer holds format 'T{B:a:=H:b:}', not dtype |V3")):
        Acquired(records, (2,), np.dtype("V3"), write=False, aware=False)
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="float8 dtypes")
    e5m2 = CPUBuffer(4, "float8_e5m2")
    with pytest.raises(BufferError, match=re.escape(
            "holds format '[float8_e5m2]', not dtype float8_e4m3fn")):
        Acquired(e5m2, (4,), np.dtype(ml_dtypes.float8_e4m3fn), write=False,
                 aware=False)
    assert buf.exports == ro.exports == e5m2.exports == 0


def test_keys_hold_every_item_the_dtype_and_the_shape() -> None:
    """An array keys by its bytes (not its repr, which numpy cuts past 1000
    items), with its dtype (equal bytes as float64 and as complex64 are
    other values) and its shape ((2, 3) is not (3, 2), for floats and
    integers alike)."""
    first = np.linspace(0.0, 1.0, 3000)
    second = first.copy()
    second[1500], second[1501] = first[1501], first[1500]
    assert repr(first) == repr(second)
    zeros = np.zeros(2)
    apart = [first, second, zeros, zeros.view(np.complex64), np.zeros((2, 3)),
             np.zeros((3, 2)), np.zeros(6)]
    # integers too (keyed as int64 whatever their width): index arrays
    # whose shape differs make other plans
    apart += [np.arange(6).reshape(2, 3), np.arange(6).reshape(3, 2), np.arange(6)]
    assert len({content_key(a) for a in apart}) == len(apart)
    assert len({digest(content_key(a)) for a in apart}) == len(apart)
    for wrap in (_Summarised, memoryview):
        assert content_key(wrap(first)) != content_key(wrap(second)), wrap
        assert content_key(wrap(np.zeros((2, 3)))) != \
            content_key(wrap(np.zeros((3, 2)))), wrap
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="its float8 types")
    bits = np.arange(4, dtype=np.uint8)
    # both '<V1' to numpy's str
    assert content_key(bits.view(ml_dtypes.float8_e4m3fn)) != \
        content_key(bits.view(ml_dtypes.float8_e4m3fnuz))


def test_keys_of_big_unsigned_objects_and_records() -> None:
    """uint64 beyond int64 does not wrap into int64's negatives; an object
    array (one index array per grid rank) keys by its items; records key by
    their fields' names and types, not their bytes alone."""
    big = np.array([2**63], np.uint64)
    assert content_key(big) != content_key(big.view(np.int64))
    assert content_key(np.array([5], np.uint64)) == content_key(np.array([5], np.int8))

    def per_rank(*arrays: Any) -> np.ndarray:
        out = np.empty(len(arrays), object)
        out[:] = [np.asarray(a) for a in arrays]
        return out

    first = per_rank([0, 1, 2], [3, 4])
    assert content_key(first) == content_key(per_rank([0, 1, 2], [3, 4]))
    assert content_key(first) != content_key(per_rank([0, 1, 2], [3, 5]))
    assert content_key(first) != content_key(per_rank([0, 1, 2], [3, 4], []))
    with pytest.raises(TypeError, match=r"^x\[1\]\[0\]=<object object"):
        content_key(per_rank([0], object()), "x")
    record = np.zeros(2, [("a", "<i4"), ("b", "<f4")])
    renamed = record.view([("a", "<i4"), ("c", "<f4")])
    retyped = record.view([("a", "<f4"), ("b", "<i4")])
    assert len({content_key(r) for r in (record, renamed, retyped)}) == 3


def test_equal_contents_key_as_documented() -> None:
    idx = [0, 2, 4]
    # integer index arrays of any width and any array-like holding them
    alike = [np.array(idx, np.int64), np.array(idx, np.int32), np.array(idx, np.uint8),
             memoryview(np.array(idx, np.int16)), array.array("i", idx),
             range(0, 6, 2), CPUBuffer.empty(3, "i4")]
    np.asarray(alike[-1])[...] = idx
    assert len({content_key(a) for a in alike}) == 1
    # a list and a tuple of equal items; numpy scalars as the number they hold
    assert content_key([1, (2, "b")]) == content_key((np.int32(1), [np.int64(2), "b"]))
    assert content_key({"b": 1, "a": 2}) == content_key({"a": 2, "b": np.int8(1)})
    # ... but not across kinds: 1, 1.0 and True are different arguments, and
    # so are an array and a list of the same numbers, and float arrays of
    # another width
    apart = [1, 1.0, True, "1", None, [1], np.array([1]), np.array([1.0]),
             np.array([1.0], np.float32), np.array([True])]
    assert len({content_key(a) for a in apart}) == len(apart)
    assert len({digest(content_key(a)) for a in apart}) == len(apart)
    # plans follow: an int32 array after an equal int64 one reuses its plan
    d = DistArray.from_global(np.arange(6.0), dist="b", grid_shape=(1,))
    e = d.redistribute(dist="u", grid_shape=(1,), indices=[[np.array(idx)]])
    f = d.redistribute(dist="u", grid_shape=(1,), indices=[[np.array(idx, np.int32)]])
    assert len([k for k in d._mpi.plans if k[0] == "redistribute"]) == 1
    assert np.array_equal(e.local, f.local) and np.array_equal(f.local, idx)


def test_an_argument_without_contents_is_refused() -> None:
    d = DistArray.from_global(np.arange(6.0), dist="b", grid_shape=(1,))
    closed = CPUBuffer.empty(3, "i8")
    closed.close()
    released = memoryview(np.arange(3))
    released.release()
    for value, where, why in [
            (object(), "indices[0][0]", "(type object)"),
            ({1, 2}, "indices[0][0]", "(type set)"),
            (closed, "indices[0][0]", "closed"),
            (released, "indices[0][0]", "released memoryview")]:
        with pytest.raises(TypeError) as info:
            d.redistribute(dist="u", grid_shape=(1,), indices=[[value]])
        text = str(info.value)
        assert text.startswith(f"redistribute: {where}="), text
        assert why in text and "cannot be compared across calls" in text, text
    with pytest.raises(TypeError, match=r"^redistribute: grid_shape=<generator "):
        d.redistribute(dist="b", grid_shape=(n for n in (1,)))
    with pytest.raises(TypeError, match=r"^x=<object object at .*\(type object\)"):
        content_key(object(), "x")
    with pytest.raises(TypeError, match="content key"):
        digest(object())                # digest serialises keys only


def test_staging_pieces_start_congruent_to_their_elements_modulo_a_page(
) -> None:
    # docs/mpi-internals.rst promises it (4K aliasing made a packing copy 2.5-3x
    # slower): every large staged piece starts at the same address modulo
    # 4 KiB as its first element in the buffer, whatever the staging array
    # and the buffer's own alignment
    from bufferext.distarray._datatypes import first
    from bufferext.distarray._redistribute import PAGE, Side
    shape = (64, 1024)
    sels = [None,                                    # this rank
            (np.arange(0, 64, 2), (3, 1000)),        # every other row
            ((5, 40), (17, 900)),                    # a block, offset
            ((1, 1), (0, 10))]                       # small: not aligned
    side = Side(sels, shape, me=0)
    assert not side.direct
    for offset in (0, 8, 24, 4000):
        raw = np.empty(64 * 1024 + 1024, np.float64)
        buf = raw[offset // 8:offset // 8 + 64 * 1024].reshape(shape)
        staged = side.stage(buf)
        assert (staged.ctypes.data - buf.ctypes.data) % PAGE == 0
        for c, d, s in zip(side.counts, side.displs, sels):
            if c >= PAGE and s is not None:         # "large": as the code says
                piece = staged.ctypes.data + d * 8
                element = buf.ctypes.data + first(s, shape) * 8
                assert (piece - element) % PAGE == 0, (s, offset)


def test_closing_a_state_asks_mpi_only_where_it_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """MPIState.close frees its plans' MPI objects only where mpi4py's MPI
    is imported and not finalized, and never imports it (a child of an
    mpiexec rank hung importing it in a finalizer); the plans, the halo and
    the pinned buffer go either way."""
    import sys
    from bufferext.distarray._state import MPIState

    freed: list = []

    class Plan:
        def free(self) -> None:
            freed.append(self)

    class Pinned:
        released = False

        def release(self) -> None:
            self.released = True

    class RunningMPI:                   # what close asks of mpi4py.MPI
        def __init__(self, finalized: bool) -> None:
            self.finalized = finalized

        def Is_finalized(self) -> bool:
            return self.finalized

    for running, frees in ((None, 0), (RunningMPI(True), 0), (RunningMPI(False), 2)):
        if running is None:
            monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)
        else:
            monkeypatch.setitem(sys.modules, "mpi4py.MPI", running)
        state = MPIState(None)
        state.plans["key"], state.halo, state.halo_call = Plan(), Plan(), object()
        state.pinned = pinned = Pinned()
        freed.clear()
        state.close()
        assert len(freed) == frees, running
        assert (state.plans, state.halo, state.halo_call, state.pinned) == ({}, None,
                                                                          None, None)
        assert pinned.released
        assert (sys.modules.get("mpi4py.MPI") is None) == (running is None)
