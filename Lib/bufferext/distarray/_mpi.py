"""The MPI layer of ``DistArray``: scatter, gather, redistribution, halo
exchange and collective validation (mpi4py, optional).

``comm=None`` (or a communicator of one process) runs everything on one
process with plain numpy copies, so nothing here needs mpi4py then.

How data move:

* Every operation works on *layouts*: for each dimension and grid
  coordinate, the global indices a process holds (padding included) and
  owns, with their local slots.  A distribution is the tensor product of
  its dimensions, so the elements process A sends process B are, per
  dimension, the intersection of A's owned set with B's held set; both sides
  compute it from the layouts, vectorised, in ascending global order.
* Redistribution (and scatter, gather, allgather, which are
  redistributions from or to "one process holds everything") is one
  ``Alltoallw`` whose per-peer datatypes select those elements in place:
  no packing in Python, every count 1, every displacement 0, so the 2**31
  limits of MPI counts and byte displacements do not apply.  Datatypes
  whose own counts would pass the limit are split into chunks
  (``_COUNT_LIMIT``).
* Halo exchange runs dimension by dimension (so corners are right), each
  slab spanning the full local extent of the other dimensions, with
  persistent requests made once per array.
* Errors: every collective first runs its local part on every process,
  then agrees (one ``allgather``) on whether any failed; if so every process
  raises the same exception type with the same message, naming the rank.
* Device buffers: with CUDA-aware MPI (``mpi_memory_alloc_kinds`` lists
  ``cuda``, or mpi4py's ``Query_cuda_support`` says so, or
  ``BUFFEREXT_MPI_CUDA_AWARE=1``) CUDA buffers go to MPI as they are;
  otherwise, and always for VE, they are staged through host memory
  (``to_host`` / ``copy_from_host``).
"""

from __future__ import annotations

import os
import weakref
from typing import (Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar,
                    Union)

import numpy as np

from ._maps import BlockMap, CyclicMap, DimMap, UnstructuredMap, is_partition
from ._protocol import ProtocolError, check, comm_padding

__all__ = ["agree", "validate_collective", "scatter", "gather", "allgather",
           "redistribute", "update_halos", "cuda_aware", "import_collective"]

T = TypeVar("T")
#: Largest count one MPI call or datatype constructor argument may carry;
#: tests lower it to exercise the chunking.
_COUNT_LIMIT = 2**31 - 1
Sel = Union[Tuple[int, int], np.ndarray]        # (start, length) run or positions


# -- communicators and agreement on errors ---------------------------------

def _size(comm: Any) -> int:
    return 1 if comm is None else int(comm.Get_size())


def _rank(comm: Any) -> int:
    return 0 if comm is None else int(comm.Get_rank())


def _mpi() -> Any:
    from mpi4py import MPI
    return MPI


_ERRORS: Dict[str, Callable[[str], Exception]] = {
    e.__name__: e for e in (ValueError, TypeError, IndexError, KeyError, BufferError,
                            MemoryError, RuntimeError, NotImplementedError)}


def _rebuild(rank: int, size: int, info: Tuple[str, str, Optional[List[str]]]) -> Exception:
    name, message, problems = info
    where = f"rank {rank} of {size}"
    if problems is not None:
        return ProtocolError([f"{where}: {p}" for p in problems])
    if name == "DeviceUnavailableError":
        from .. import DeviceUnavailableError
        return DeviceUnavailableError(f"{where}: {message}")
    return _ERRORS.get(name, RuntimeError)(f"{where}: {message}")


def any_rank(comm: Any, flag: bool) -> bool:
    """Whether ``flag`` is true on some process (collective; a buffer
    reduction, a few times cheaper than mpi4py's pickled ``allreduce``)."""
    mine = np.array([flag], np.int32)
    anyone = np.empty(1, np.int32)
    comm.Allreduce(mine, anyone, op=_mpi().MAX)
    return bool(anyone[0])


def agree(comm: Any, fn: Callable[[], T]) -> T:
    """Run ``fn()`` on every process and agree on failure (collective).

    If ``fn`` raises on any process, every process raises the same
    exception type with the same message (that of the lowest failing rank,
    prefixed with ``"rank R of N: "``); no process is left waiting.
    """
    try:
        result, info = fn(), None
    except Exception as exc:       # noqa: BLE001 - re-raised on every rank below
        result = None
        err: Optional[Exception] = exc
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        info = (type(exc).__name__, str(message),
                list(exc.problems) if isinstance(exc, ProtocolError) else None)
    else:
        err = None
    if _size(comm) == 1:
        if err is not None:
            raise err
        return result  # type: ignore[return-value]
    if not any_rank(comm, info is not None):     # the usual case: one small reduction
        return result  # type: ignore[return-value]
    infos = comm.allgather(info)
    for rank, other in enumerate(infos):
        if other is not None:
            raise _rebuild(rank, len(infos), other) from err
    return result  # type: ignore[return-value]


def cuda_aware() -> bool:
    """Whether MPI accepts CUDA device memory (``BUFFEREXT_MPI_CUDA_AWARE``
    = 0/1 overrides the detection)."""
    forced = os.environ.get("BUFFEREXT_MPI_CUDA_AWARE")
    if forced in ("0", "1"):
        return forced == "1"
    try:
        MPI = _mpi()
    except ImportError:
        return False
    query = getattr(MPI, "Query_cuda_support", None)
    if query is not None:
        return bool(query())
    try:
        kinds = MPI.COMM_WORLD.Get_info().Get("mpi_memory_alloc_kinds")
    except Exception:              # noqa: BLE001 - MPI < 4.1: no such key
        return False
    return bool(kinds) and "cuda" in kinds


# -- per-dimension sets and layouts ------------------------------------------

class _Range:
    """Global indices ``[lo, hi)`` at local slots ``base + (g - lo)``."""

    __slots__ = ("lo", "hi", "base")

    def __init__(self, lo: int, hi: int, base: int) -> None:
        self.lo, self.hi, self.base = lo, max(hi, lo), base


class _Points:
    """Sorted unique global indices ``g`` at local slots ``pos``."""

    __slots__ = ("g", "pos")

    def __init__(self, g: np.ndarray, pos: np.ndarray) -> None:
        self.g, self.pos = g, pos


_Set = Union[_Range, _Points]


def _intersect(a: _Set, b: _Set) -> Optional[Tuple[Sel, Sel]]:
    """Local slots in ``a`` and in ``b`` of their common global indices
    (ascending global order), or None if there are none."""
    if isinstance(a, _Range) and isinstance(b, _Range):
        lo, hi = max(a.lo, b.lo), min(a.hi, b.hi)
        if hi <= lo:
            return None
        return (a.base + lo - a.lo, hi - lo), (b.base + lo - b.lo, hi - lo)
    if isinstance(a, _Range):
        flipped = _intersect(b, a)
        return None if flipped is None else (flipped[1], flipped[0])
    if isinstance(b, _Range):
        i0, i1 = np.searchsorted(a.g, [b.lo, b.hi])
        if i1 <= i0:
            return None
        g = a.g[i0:i1]
        return a.pos[i0:i1], g - b.lo + b.base
    _, ia, ib = np.intersect1d(a.g, b.g, assume_unique=True, return_indices=True)
    if not ia.size:
        return None
    return a.pos[ia], b.pos[ib]


class _DimLayout:
    """One dimension of a layout: the held and owned sets of every key."""

    def __init__(self, size: int, held: Sequence[_Set], owned: Sequence[_Set],
                 extents: Sequence[int]) -> None:
        self.size, self.held, self.owned, self.extents = size, held, owned, extents
        #: Block dimensions: every coordinate's ``padding``; and periodicity.
        self.pads: List[Tuple[int, int]] = []
        self.periodic = False


def _dim_layout(dds: Sequence[Dict[str, Any]]) -> _DimLayout:
    """Layout of one dimension from every grid coordinate's normalised
    dimension dictionary (index = coordinate)."""
    first = dds[0]
    size, dist, grid = first["size"], first["dist_type"], len(dds)
    held: List[_Set] = []
    owned: List[_Set] = []
    extents: List[int] = []
    pads: List[Tuple[int, int]] = []
    if dist == "b":
        for c, dd in enumerate(dds):
            pads.append(tuple(dd["padding"]))
            start, stop = dd["start"], dd["stop"]
            lc, rc = comm_padding(dd["padding"], c, grid)
            held.append(_Range(start, stop, 0))
            owned.append(_Range(start + lc, stop - rc, lc))
            extents.append(stop - start)
    elif dist == "c":
        for c, dd in enumerate(dds):
            g = CyclicMap(size, grid, c, dd["block_size"]).owned_global()
            s = _Points(g, np.arange(g.size, dtype=np.int64))
            held.append(s)
            owned.append(s)
            extents.append(int(g.size))
    else:
        every = [np.asarray(dd["indices"], dtype=np.int64) for dd in dds]
        allg = np.concatenate(every) if every else np.empty(0, np.int64)
        coord = np.repeat(np.arange(grid), [e.size for e in every])
        order = np.lexsort((coord, allg))               # by g, then lowest coord
        first_of = np.ones(order.size, bool)
        first_of[1:] = allg[order][1:] != allg[order][:-1]
        designated = np.zeros(allg.size, bool)
        designated[order[first_of]] = True
        offset = 0
        for idx in every:
            o = np.argsort(idx, kind="stable")
            s = _Points(idx[o], o.astype(np.int64))
            held.append(s)
            mine = designated[offset:offset + idx.size][o]
            owned.append(_Points(s.g[mine], s.pos[mine]))
            extents.append(int(idx.size))
            offset += idx.size
    out = _DimLayout(size, held, owned, extents)
    out.pads = pads
    out.periodic = bool(first.get("periodic", False))
    return out


class _Layout:
    """Where every process's elements are: per dimension a ``_DimLayout``,
    and per process one key into each of them."""

    def __init__(self, dims: Sequence[_DimLayout],
                 keys: Callable[[int], Tuple[int, ...]]) -> None:
        self.dims, self.keys = dims, keys

    def shape(self, rank: int) -> Tuple[int, ...]:
        return tuple(d.extents[k] for d, k in zip(self.dims, self.keys(rank)))


def _grid_layout(dims: Sequence[_DimLayout], grid: Sequence[int]) -> _Layout:
    grid = tuple(grid)
    return _Layout(dims, lambda r: tuple(int(c) for c in np.unravel_index(r, grid))
                   if grid else ())


def _root_layout(shape: Sequence[int], root: Optional[int]) -> _Layout:
    """Process ``root`` holds the whole array (every process if None)."""
    dims = [_DimLayout(n, [_Range(0, n, 0), _Range(0, 0, 0)],
                       [_Range(0, n, 0), _Range(0, 0, 0)], [n, 0]) for n in shape]
    nd = len(shape)
    return _Layout(dims, lambda r: (0,) * nd if root is None or r == root else (1,) * nd)


def _per_coord(all_dims: Sequence[Sequence[Dict[str, Any]]], grid: Sequence[int]
               ) -> List[List[Dict[str, Any]]]:
    """For each dimension, the dictionary of each grid coordinate (taken
    from the first process with that coordinate)."""
    out: List[List[Dict[str, Any]]] = []
    for d, p in enumerate(grid):
        col: List[Optional[Dict[str, Any]]] = [None] * p
        for dims in all_dims:
            c = dims[d]["proc_grid_rank"]
            if col[c] is None:
                col[c] = dims[d]
        out.append(col)  # type: ignore[arg-type]
    return out


def _spec_layout(spec: Any) -> _Layout:
    """The layout of a ``DistSpec`` (every coordinate computed locally)."""
    cols = [[spec.dim_map(d, c).full_dim_dict() for c in range(p)]
            for d, p in enumerate(spec.grid)]
    return _grid_layout([_dim_layout(col) for col in cols], spec.grid)


# -- collective validation ----------------------------------------------------

def _same(a: Dict[str, Any], b: Dict[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        if k == "indices":
            if not np.array_equal(a[k], b[k]):
                return False
        elif a[k] != b[k]:
            return False
    return True


def _axis_problems(d: int, col: List[Dict[str, Any]]) -> List[str]:
    """Padding symmetry, neighbour widths and coverage along one axis."""
    problems: List[str] = []
    first = col[0]
    size, grid = first["size"], len(col)
    if first["dist_type"] == "b":
        comm = [comm_padding(dd["padding"], c, grid) for c, dd in enumerate(col)]
        lo = [dd["start"] + left for dd, (left, _) in zip(col, comm)]
        hi = [dd["stop"] - right for dd, (_, right) in zip(col, comm)]
        for c in range(grid - 1):
            right, left = col[c]["padding"][1], col[c + 1]["padding"][0]
            if right != left:
                problems.append(f"dim {d}: grid rank {c}'s right padding {right} != "
                                f"grid rank {c + 1}'s left padding {left}")
            if right > hi[c + 1] - lo[c + 1] or left > hi[c] - lo[c]:
                problems.append(f"dim {d}: communication padding between grid ranks "
                                f"{c} and {c + 1} is wider than a neighbour's owned "
                                "indices")
        edges = [0] + hi[:-1]
        for c in range(grid):
            if lo[c] != edges[c] or hi[c] < lo[c]:
                problems.append(f"dim {d}: grid rank {c} owns [{lo[c]}, {hi[c]}), "
                                f"which should start at {edges[c]} (owned ranges must "
                                f"tile [0, {size}))")
        if hi[-1] != size:
            problems.append(f"dim {d}: the owned ranges end at {hi[-1]}, not at size "
                            f"{size}")
    elif first["dist_type"] == "u" and first["one_to_one"]:
        if not is_partition([np.asarray(dd["indices"]) for dd in col], size):
            problems.append(f"dim {d}: one_to_one is True but the indices of the "
                            f"{grid} grid ranks are not a partition of [0, {size})")
    return problems


_AXIS_KEYS = ("dist_type", "size", "proc_grid_size", "block_size", "periodic",
              "one_to_one")


def _collective_problems(all_dims: Sequence[Sequence[Dict[str, Any]]]) -> List[str]:
    """Every rule that needs all processes' dimension dictionaries."""
    nprocs = len(all_dims)
    ndims = {len(dims) for dims in all_dims}
    if len(ndims) != 1:
        return [f"the processes' dim_data have different lengths {sorted(ndims)}"]
    problems: List[str] = []
    ndim = ndims.pop()
    for d in range(ndim):
        ref = all_dims[0][d]
        for r, dims in enumerate(all_dims[1:], 1):
            for key in _AXIS_KEYS:
                if dims[d].get(key) != ref.get(key):
                    problems.append(f"rank {r}: dim_data[{d}][{key!r}] = "
                                    f"{dims[d].get(key)!r}, rank 0 has {ref.get(key)!r}")
    if problems:
        return problems
    grid = tuple(all_dims[0][d]["proc_grid_size"] for d in range(ndim))
    product = int(np.prod(grid, dtype=np.int64))
    if product != nprocs:
        return [f"the process grid {grid} holds {product} processes, the "
                f"communicator has {nprocs}"]
    for r, dims in enumerate(all_dims):
        coords = tuple(dd["proc_grid_rank"] for dd in dims)
        expect = tuple(int(c) for c in np.unravel_index(r, grid)) if grid else ()
        if coords != expect:
            problems.append(f"rank {r}: grid coordinates {coords}, but C order "
                            f"puts rank {r} at {expect}")
    if problems:
        return problems
    cols = _per_coord(all_dims, grid)
    for r, dims in enumerate(all_dims):
        for d, dd in enumerate(dims):
            c = dd["proc_grid_rank"]
            if not _same(dd, cols[d][c]):
                problems.append(f"rank {r}: dim_data[{d}] differs from that of the "
                                f"other processes at grid rank {c} along dim {d}")
    if problems:
        return problems
    for d in range(ndim):
        problems.extend(_axis_problems(d, cols[d]))
    return problems


def _gather_dims(data: Dict[str, Any], comm: Any
                 ) -> Tuple[Tuple[Dict[str, Any], ...], List[Sequence[Dict[str, Any]]]]:
    """Local check (agreed), then everyone's normalised dim_data."""
    def local() -> Tuple[Dict[str, Any], ...]:
        return check(data)[4]
    dims = agree(comm, local)
    everyone: List[Sequence[Dict[str, Any]]] = (
        [dims] if _size(comm) == 1 else comm.allgather(dims))
    return dims, everyone


def validate_collective(distbuffer: Any, comm: Any = None) -> None:
    """Check ``__distarray__`` data against the rules needing every process.

    Collective over ``comm`` (None: one process): the local rules first
    (as :func:`validate`), then the process grid holds exactly the
    communicator's processes, ranks sit at their C-order coordinates,
    processes at the same grid coordinate along an axis have identical
    ``dim_data`` for it, padding is symmetric and no wider than the
    neighbour's owned count, owned block ranges tile ``[0, size)``, and
    ``one_to_one`` unstructured indices partition ``[0, size)``.  A problem
    on any process raises :class:`ProtocolError` with the same message on
    every process; nothing waits forever.  ``distbuffer`` may be an object
    with ``__distarray__``.
    """
    data = distbuffer
    if type(data) is not dict and hasattr(data, "__distarray__"):
        data = data.__distarray__()
    _, everyone = _gather_dims(data, comm)
    problems = _collective_problems(everyone)     # same verdict on every rank
    if problems:
        raise ProtocolError(problems)


def _full_maps(darr: Any, cols: Sequence[Sequence[Dict[str, Any]]]) -> None:
    """Give ``darr``'s block and unstructured maps every process's layout
    (``cols``: each dimension's dictionary of each grid coordinate)."""
    maps: List[DimMap] = []
    for d, m in enumerate(darr.maps):
        col = cols[d]
        if isinstance(m, BlockMap) and m.bounds is None:
            lo = [dd["start"] + (dd["padding"][0] if c else 0) for c, dd in enumerate(col)]
            bounds = np.array(lo + [m.size], dtype=np.int64)
            m = BlockMap(m.size, m.grid_size, m.grid_rank, m.start, m.stop, m.padding,
                         m.periodic, bounds=bounds, alias=m.alias)
        elif isinstance(m, UnstructuredMap) and m._table is None:
            m = UnstructuredMap(m.size, m.grid_size, m.grid_rank, m.indices,
                                m.one_to_one, [dd["indices"] for dd in col])
        maps.append(m)
    darr._maps = tuple(maps)


def _layout(darr: Any) -> _Layout:
    """The layout of a DistArray (collective the first time: everyone's
    dim_data are gathered and checked; cached afterwards)."""
    cached: Optional[_Layout] = getattr(darr, "_mpi_layout", None)
    if cached is not None:
        return cached
    comm = darr.comm
    mine = tuple(m.full_dim_dict() for m in darr.maps)
    everyone = [mine] if _size(comm) == 1 else comm.allgather(mine)
    problems = _collective_problems(everyone)
    if problems:
        raise ProtocolError(problems)
    cols = _per_coord(everyone, darr.grid_shape)
    _full_maps(darr, cols)
    layout = _grid_layout([_dim_layout(col) for col in cols], darr.grid_shape)
    darr._mpi_layout = layout
    return layout


def import_collective(cls: Any, obj: Any, comm: Any) -> Any:
    """``DistArray.from_distarray(obj, comm)``: import, check collectively,
    and give the maps every process's layout."""
    darr = agree(comm, lambda: cls.from_distarray(obj))
    darr.comm = comm
    _layout(darr)
    return darr


# -- MPI datatypes --------------------------------------------------------------

def _runs(sel: Sel) -> Tuple[np.ndarray, np.ndarray]:
    """``(starts, lengths)`` of the runs of consecutive slots, each run no
    longer than the count limit."""
    if isinstance(sel, tuple):
        starts = np.array([sel[0]], np.int64)
        lengths = np.array([sel[1]], np.int64)
    else:
        pos = np.asarray(sel, np.int64)
        brk = np.flatnonzero(np.diff(pos) != 1) + 1
        first = np.concatenate(([0], brk))
        starts = pos[first]
        lengths = np.diff(np.concatenate((first, [pos.size])))
    limit = _COUNT_LIMIT
    if lengths.size and lengths.max() > limit:
        pieces = -(-lengths // limit)
        rep = np.repeat(np.arange(lengths.size), pieces)
        k = np.arange(rep.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        starts = starts[rep] + k * limit
        lengths = np.minimum(lengths[rep] - k * limit, limit)
    return starts, lengths


def _hindexed(base: Any, lengths: np.ndarray, displs: np.ndarray,
              free: List[Any]) -> Any:
    """``base`` repeated at byte ``displs`` in runs of ``lengths``; more runs
    than the count limit become a struct of chunks (recursively)."""
    limit = max(_COUNT_LIMIT, 2)
    if lengths.size <= limit:
        t = base.Create_hindexed(lengths.tolist(), displs.tolist())
        free.append(t)
        return t
    parts = [_hindexed(base, lengths[i:i + limit], displs[i:i + limit], free)
             for i in range(0, lengths.size, limit)]
    return _struct(parts, free)


def _struct(parts: List[Any], free: List[Any]) -> Any:
    MPI = _mpi()
    limit = max(_COUNT_LIMIT, 2)
    while len(parts) > limit:
        parts = [_struct(parts[i:i + limit], free) for i in range(0, len(parts), limit)]
    t = MPI.Datatype.Create_struct([1] * len(parts), [0] * len(parts), parts)
    free.append(t)
    return t


def _base_type(dtype: np.dtype) -> Any:
    MPI = _mpi()
    try:
        from mpi4py.util import dtlib
        if dtype.isnative and not dtype.fields and dtype.kind in "biufc":
            return dtlib.from_numpy_dtype(dtype), False
    except Exception:              # noqa: BLE001 - fall back to raw bytes
        pass
    t = MPI.BYTE.Create_contiguous(dtype.itemsize)
    return t, True


def _datatype(sels: Sequence[Sel], shape: Sequence[int], dtype: np.dtype) -> Any:
    """A committed datatype selecting the product of ``sels`` (one selection
    per dimension, in the order the elements travel) from a C-contiguous
    buffer of ``shape``."""
    base, own = _base_type(dtype)
    free: List[Any] = [base] if own else []
    itemsize = dtype.itemsize
    strides = [itemsize] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * int(shape[d + 1])
    t = base
    for d in range(len(shape) - 1, -1, -1):
        if d < len(shape) - 1:
            t = t.Create_resized(0, strides[d])
            free.append(t)
        starts, lengths = _runs(sels[d])
        t = _hindexed(t, lengths, starts * strides[d], free)
    t = t.Dup()
    t.Commit()
    for f in free:
        f.Free()
    return t


def _index(sels: Sequence[Sel]) -> Tuple[Any, ...]:
    """A numpy index selecting the product of ``sels`` (outer indexing)."""
    arrays = sum(1 for s in sels if not isinstance(s, tuple))
    if arrays <= 1:
        return tuple(slice(s[0], s[0] + s[1]) if isinstance(s, tuple) else s
                     for s in sels)
    return np.ix_(*[np.arange(s[0], s[0] + s[1]) if isinstance(s, tuple) else s
                    for s in sels])


def _contiguous(sels: Sequence[Sel], shape: Sequence[int]) -> Optional[Tuple[int, int]]:
    """``(first element, count)`` if the selection is one contiguous block of
    a C-contiguous buffer of ``shape``, else None."""
    if not all(isinstance(s, tuple) for s in sels):
        return None
    runs: List[Tuple[int, int]] = list(sels)  # type: ignore[arg-type]
    k = len(shape) - 1
    while k > 0 and runs[k] == (0, int(shape[k])):
        k -= 1                      # trailing dimensions taken whole
    if any(runs[e][1] != 1 for e in range(k)):
        return None
    off, stride = 0, 1
    for d in range(len(shape) - 1, -1, -1):
        off += runs[d][0] * stride
        stride *= int(shape[d])
    return off, _count(sels)


# -- buffers: host views, staging ------------------------------------------

def _host_array(darr: Any) -> np.ndarray:
    """A C-contiguous host array of the local buffer: a view for CPU memory,
    a staged copy for device memory."""
    if darr.device == "cpu":
        arr: np.ndarray = darr.local
        if not arr.flags.c_contiguous:
            raise BufferError("DistArray: the local buffer is not C-contiguous")
        return arr
    host = np.asarray(darr.buffer.to_host())
    return host.reshape(darr.local_shape)


def _mpi_buffer(darr: Any) -> Any:
    """What to hand MPI for the local buffer: a host array, or the device
    producer itself with CUDA-aware MPI."""
    if darr.device == "cuda" and cuda_aware():
        return darr.buffer
    return _host_array(darr)


# -- redistribution --------------------------------------------------------------

#: How redistributions move host (numpy) buffers: ``"auto"`` packs with
#: numpy into contiguous staging (only the side that needs it) and runs one
#: ``Alltoallw`` of plain element counts whenever some peer's selection is
#: not one contiguous block and counts and byte displacements fit an int
#: (MPICH packs element-strided derived datatypes several times slower than
#: numpy copies them), else one ``Alltoallw`` of derived datatypes;
#: ``"pack"`` / ``"datatype"`` force one path (tests; ``"pack"`` still falls
#: back to datatypes past the count limit).  Device buffers given to
#: CUDA-aware MPI always take the datatype path.
_STRATEGY = "auto"


def _slice_of(sel: Sel) -> Union[slice, np.ndarray]:
    """A basic slice for a run or an arithmetic progression of slots
    (strided numpy copies are fast), else the positions themselves."""
    if isinstance(sel, tuple):
        return slice(sel[0], sel[0] + sel[1])
    pos = np.asarray(sel, np.int64)
    if pos.size == 1:
        return slice(int(pos[0]), int(pos[0]) + 1)
    step = int(pos[1] - pos[0])
    if step > 0 and pos.size and np.all(np.diff(pos) == step):
        return slice(int(pos[0]), int(pos[-1]) + 1, step)
    return pos


def _fast_index(sels: Sequence[Sel]) -> Tuple[Any, ...]:
    """A numpy index selecting the product of ``sels``: basic slices where
    possible, outer (``ix_``) indexing for the remaining position arrays."""
    parts = [_slice_of(s) for s in sels]
    if sum(1 for p in parts if isinstance(p, np.ndarray)) <= 1:
        return tuple(parts)
    return np.ix_(*[np.arange(p.start, p.stop, p.step or 1)
                    if isinstance(p, slice) else p for p in parts])


def _as_runs(sels: Tuple[Sel, ...]) -> Tuple[Sel, ...]:
    """``sels`` with position arrays of consecutive slots as ``(start,
    length)`` runs."""
    out: List[Sel] = []
    for s in sels:
        sl = _slice_of(s)
        if isinstance(sl, slice) and sl.step in (None, 1):
            out.append((sl.start, sl.stop - sl.start))
        else:
            out.append(s)
    return tuple(out)


def _count(sels: Optional[Sequence[Sel]]) -> int:
    if sels is None:
        return 0
    n = 1
    for s in sels:
        n *= s[1] if isinstance(s, tuple) else len(s)
    return n


class _Side:
    """One side (send or receive) of a packed exchange: per peer, the numpy
    index and element count, and whether the buffer itself can be handed to
    MPI (every peer's piece contiguous) or goes through staging."""

    def __init__(self, sels: Sequence[Optional[Tuple[Sel, ...]]], shape: Tuple[int, ...],
                 me: int) -> None:
        self.counts = [0 if p == me else _count(s) for p, s in enumerate(sels)]
        self.shapes = [tuple(_count((x,)) for x in s) if s is not None else ()
                       for s in sels]
        self.index = [None if s is None or p == me else _fast_index(s)
                      for p, s in enumerate(sels)]
        runs = [_contiguous(_as_runs(s), shape) if c and s is not None else None
                for c, s in zip(self.counts, sels)]
        self.direct = all(r is not None for c, r in zip(self.counts, runs) if c)
        if self.direct:             # displacements into the buffer itself
            self.displs = [r[0] if r is not None else 0 for r in runs]
        else:                       # displacements into the staging array
            self.displs = np.concatenate(([0], np.cumsum(self.counts)[:-1])).tolist()
        self.total = int(sum(self.counts))
        self.staging: Optional[np.ndarray] = None

    def fits(self, itemsize: int) -> bool:
        """Whether counts and byte displacements fit an MPI int."""
        return max(self.counts + [(d + c) * itemsize for d, c in
                                  zip(self.displs, self.counts)]) <= _COUNT_LIMIT

    def stage(self, dtype: np.dtype) -> np.ndarray:
        if self.staging is None or self.staging.dtype != dtype:
            self.staging = np.empty(self.total, dtype)
        return self.staging


class _Plan:
    """One rank's part of a redistribution: per peer, the selection it
    sends from its source buffer and receives into its target buffer."""

    def __init__(self, src: _Layout, tgt: _Layout, me: int, nprocs: int) -> None:
        cache: Dict[Tuple[int, int, int], Optional[Tuple[Sel, Sel]]] = {}

        def piece(d: int, ks: int, kt: int) -> Optional[Tuple[Sel, Sel]]:
            key = (d, ks, kt)
            if key not in cache:
                cache[key] = _intersect(src.dims[d].owned[ks], tgt.dims[d].held[kt])
            return cache[key]

        def product(a: int, b: int, side: int) -> Optional[Tuple[Sel, ...]]:
            ka, kb = src.keys(a), tgt.keys(b)
            out = []
            for d in range(len(src.dims)):
                p = piece(d, ka[d], kb[d])
                if p is None:
                    return None
                out.append(p[side])
            return tuple(out)

        self.me = me
        self.src_shape, self.tgt_shape = src.shape(me), tgt.shape(me)
        self.sends = [product(me, p, 0) for p in range(nprocs)]
        self.recvs = [product(p, me, 1) for p in range(nprocs)]
        self.types: Optional[Tuple[List[Any], List[Any]]] = None
        #: The datatype path's ``Ialltoallw`` arguments made with ``types``:
        #: send and receive types, displacements, and the send and receive
        #: counts with and without our own piece (copied by numpy instead).
        self.typed: Optional[Tuple[List[Any], List[Any], List[int],
                                   Tuple[List[int], List[int]],
                                   Tuple[List[int], List[int]]]] = None
        self.dtype: Optional[np.dtype] = None
        self.packed: Optional[Tuple[_Side, _Side]] = None
        #: The packed path's MPI arguments for one dtype: (dtype, base type,
        #: whether we made it, types, send and receive byte displacements).
        self.packing: Optional[Tuple[np.dtype, Any, bool, List[Any], List[int],
                                     List[int]]] = None
        s, r = self.sends[me], self.recvs[me]
        self.own = None if s is None or r is None else (_fast_index(s), _fast_index(r))
        #: Whether the receives (disjoint: owned sets are) fill every cell
        #: of the target, so that it may start with any contents.
        self.fills_target = sum(map(_count, self.recvs)) == int(np.prod(self.tgt_shape))

    def free(self) -> None:
        if self.types is not None:
            for t in self.types[0] + self.types[1]:
                if t is not None:
                    t.Free()
            self.types = self.typed = None
        if self.packing is not None:
            if self.packing[2]:
                self.packing[1].Free()
            self.packing = None

    def _sides(self) -> Tuple[_Side, _Side]:
        if self.packed is None:
            self.packed = (_Side(self.sends, self.src_shape, self.me),
                           _Side(self.recvs, self.tgt_shape, self.me))
        return self.packed

    def strategy(self, itemsize: int) -> str:
        """``"pack"`` or ``"datatype"``: the path host buffers take.  Both
        are one ``Alltoallw`` with matching type signatures (n base elements
        or one derived type of n), so each rank may choose alone."""
        if _STRATEGY == "datatype":
            return "datatype"
        snd, rcv = self._sides()
        if not (snd.fits(itemsize) and rcv.fits(itemsize)):
            return "datatype"
        if _STRATEGY == "pack":
            return "pack"
        return "datatype" if snd.direct and rcv.direct else "pack"

    def run(self, comm: Any, src: Any, tgt: Any, dtype: np.dtype) -> None:
        """Move the data: ``src`` and ``tgt`` are host arrays (or device
        producers with CUDA-aware MPI)."""
        nprocs = _size(comm)
        if nprocs == 1:
            if self.own is not None:
                tgt[self.own[1]] = src[self.own[0]]
            return
        if isinstance(src, np.ndarray) and isinstance(tgt, np.ndarray) \
                and self.strategy(dtype.itemsize) == "pack":
            self._run_packed(comm, src, tgt, dtype)
        else:
            self._run_types(comm, src, tgt, dtype)

    def _run_packed(self, comm: Any, src: np.ndarray, tgt: np.ndarray,
                    dtype: np.dtype) -> None:
        """numpy copies into contiguous staging, one ``Alltoallv``, numpy
        copies out; the own piece goes straight from ``src`` to ``tgt``."""
        snd, rcv = self._sides()
        if self.packing is None or self.packing[0] != dtype:
            self.free()
            base, own_base = _base_type(dtype)
            size = dtype.itemsize
            self.packing = (dtype, base, own_base, [base] * len(snd.counts),
                            [x * size for x in snd.displs], [x * size for x in rcv.displs])
        _, _, _, types, sdispls, rdispls = self.packing
        if snd.direct:
            sbuf = src.reshape(-1)
        else:
            sbuf = snd.stage(dtype)
            for p, idx in enumerate(snd.index):
                if snd.counts[p]:
                    n0 = snd.displs[p]
                    sbuf[n0:n0 + snd.counts[p]].reshape(snd.shapes[p])[...] = src[idx]
        rbuf = tgt.reshape(-1) if rcv.direct else rcv.stage(dtype)
        req = comm.Ialltoallw([sbuf, snd.counts, sdispls, types],
                              [rbuf, rcv.counts, rdispls, types])
        if self.own is not None:
            tgt[self.own[1]] = src[self.own[0]]
        req.Wait()
        if not rcv.direct:
            for p, idx in enumerate(rcv.index):
                if rcv.counts[p]:
                    n0 = rcv.displs[p]
                    tgt[idx] = rbuf[n0:n0 + rcv.counts[p]].reshape(rcv.shapes[p])

    def _run_types(self, comm: Any, src: Any, tgt: Any, dtype: np.dtype) -> None:
        """One ``Ialltoallw`` of derived datatypes selecting in place."""
        if self.types is None or self.dtype != dtype:
            self.free()
            self.dtype = dtype
            self.types = ([None if s is None else _datatype(s, self.src_shape, dtype)
                           for s in self.sends],
                          [None if r is None else _datatype(r, self.tgt_shape, dtype)
                           for r in self.recvs])
            MPI = _mpi()
            stypes = [t if t is not None else MPI.BYTE for t in self.types[0]]
            rtypes = [t if t is not None else MPI.BYTE for t in self.types[1]]
            scounts = [0 if t is None else 1 for t in self.types[0]]
            rcounts = [0 if t is None else 1 for t in self.types[1]]
            sown, rown = list(scounts), list(rcounts)
            sown[self.me] = rown[self.me] = 0
            self.typed = (stypes, rtypes, [0] * _size(comm), (scounts, rcounts),
                          (sown, rown))
        assert self.typed is not None
        stypes, rtypes, zeros, counts, own_copied = self.typed
        local = (isinstance(src, np.ndarray) and isinstance(tgt, np.ndarray)
                 and self.own is not None)
        # local: our own piece is a numpy copy, overlapped
        scounts, rcounts = own_copied if local else counts
        req = comm.Ialltoallw([src, scounts, zeros, stypes], [tgt, rcounts, zeros, rtypes])
        if local:
            assert self.own is not None
            tgt[self.own[1]] = src[self.own[0]]
        req.Wait()


def _check_root(comm: Any, root: Any) -> int:
    import operator
    root = operator.index(root)
    if not 0 <= root < _size(comm):
        raise ValueError(f"root={root}: must be in [0, {_size(comm)})")
    return int(root)


def scatter(cls: Any, array: Any, *, dist: Any, grid_shape: Any = None,
            block_size: Any = None, padding: Any = None, periodic: Any = None,
            indices: Any = None, split: str = "balanced", device: str = "cpu",
            comm: Any = None, root: int = 0) -> Any:
    """``DistArray.scatter``: root's global array to every process's section."""
    from ._array import DistSpec, producer_class

    me = _rank(comm)

    def header() -> Tuple[Tuple[int, ...], str]:
        r = _check_root(comm, root)
        producer_class(device)
        if me == r:
            if array is None:
                raise ValueError(f"array=None on the root process {r}: the root "
                                 "passes the global array")
            arr = np.asarray(array)
            if arr.dtype.hasobject:
                raise TypeError(f"array of dtype {arr.dtype}: object arrays cannot "
                                "be sent")
            return arr.shape, arr.dtype.str
        return (), ""

    shape, dstr = agree(comm, header)
    if _size(comm) > 1:
        shape, dstr = comm.bcast((shape, dstr), root=root)
    dtype = np.dtype(dstr)
    spec = agree(comm, lambda: DistSpec(shape, dist, grid_shape, block_size, padding,
                                        periodic, indices, split, _size(comm)))
    maps = spec.maps(me)
    tgt_layout = _spec_layout(spec)
    src = (np.ascontiguousarray(np.asarray(array), dtype=dtype) if me == root
           else np.empty((0,) * len(shape), dtype))
    plan = _Plan(_root_layout(shape, root), tgt_layout, me, _size(comm))
    buffer, local, finish = _alloc(device, tuple(m.extent for m in maps), dtype,
                                   plan.fills_target)
    try:
        plan.run(comm, src, local, dtype)
    finally:
        plan.free()
    out = cls(finish(), maps, device=device, dtype=dtype, comm=comm)
    out._mpi_layout = tgt_layout
    return out


def _alloc(device: str, shape: Tuple[int, ...], dtype: np.dtype, filled: bool
           ) -> Tuple[Any, np.ndarray, Callable[[], Any]]:
    """``(buffer, host array to fill, finish)``: for CPU the host array is
    the new CPUBuffer's memory; for a device, a staging array that
    ``finish()`` copies into a new device buffer (which it returns).
    Zero-filled unless the caller will write every cell (``filled``): then
    a CPUBuffer may reuse a freed block (``CPUBuffer.empty``), which spares
    the page faults of fresh memory."""
    if device == "cpu":
        from .. import CPUBuffer
        buf = (CPUBuffer.empty if filled else CPUBuffer)(shape, dtype)
        host = np.asarray(memoryview(buf)).reshape(shape)
        return buf, host, lambda: buf
    from ._array import _make_buffer
    host = (np.empty if filled else np.zeros)(shape, dtype)
    return None, host, lambda: _make_buffer(device, host)


def _collect(darr: Any, root: Optional[int]) -> Optional[np.ndarray]:
    comm = darr.comm
    if root is not None:
        root = agree(comm, lambda: _check_root(comm, root))
    me = _rank(comm)
    src_layout = _layout(darr)      # raises alike on every rank
    shape, dtype = darr.global_shape, darr.dtype
    key = ("collect", root)
    plans = _plans(darr)
    plan = plans.get(key)
    if plan is None:
        plan = plans[key] = _Plan(src_layout, _root_layout(shape, root), me, _size(comm))
    out = np.empty(shape if root is None or me == root else (0,) * len(shape), dtype)
    plan.run(comm, _mpi_buffer(darr), out, dtype)
    return out if root is None or me == root else None


def _plans(darr: Any) -> Dict[Any, _Plan]:
    plans = getattr(darr, "_mpi_plans", None)
    if plans is None:
        plans = darr._mpi_plans = {}
        weakref.finalize(darr, _release_all, plans)
    return plans


def _release_all(plans: Dict[Any, _Plan]) -> None:
    for plan in plans.values():
        _release(plan)


def gather(darr: Any, root: int = 0) -> Optional[np.ndarray]:
    """``DistArray.gather``: the global array on ``root``, None elsewhere."""
    return _collect(darr, root)


def allgather(darr: Any) -> np.ndarray:
    """``DistArray.allgather``: the global array on every process."""
    out = _collect(darr, None)
    assert out is not None
    return out


def _check_out(darr: Any, out: Any, maps: Sequence[DimMap], device: str) -> None:
    """``out=`` of ``redistribute``: a DistArray with the target
    distribution, dtype, device and communicator, not sharing the source's
    memory."""
    from ._array import DistArray
    if not isinstance(out, DistArray):
        raise TypeError(f"out={type(out).__name__}: must be a DistArray")
    if out is darr or (device == "cpu" == out.device == darr.device
                       and np.may_share_memory(out.local, darr.local)):
        raise ValueError("out: shares memory with the source array")
    if out.comm is not darr.comm:
        raise ValueError("out: its comm is not the source array's communicator")
    if out.dtype != darr.dtype:
        raise TypeError(f"out.dtype={out.dtype}: must be the source dtype {darr.dtype}")
    if out.device != device:
        raise ValueError(f"out.device={out.device!r}: must be {device!r}")
    want = [m.full_dim_dict() for m in maps]
    have = [m.full_dim_dict() for m in out.maps]
    if len(have) != len(want) or not all(_same(a, b) for a, b in zip(have, want)):
        raise ValueError(f"out: its dim_data {tuple(have)!r} are not those of the "
                         f"requested distribution {tuple(want)!r}")


def _content_key(value: Any) -> Any:
    """A plan-cache key for an argument, equal only for equal contents
    (``repr`` shortens numpy arrays past 1000 items, so two index arrays
    differing in the middle would share a key)."""
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            return ("ndarray", value.shape, _content_key(value.tolist()))
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_content_key(v) for v in value)
    return repr(value)


def redistribute(darr: Any, *, dist: Any, grid_shape: Any = None, block_size: Any = None,
                 split: Optional[str] = None, padding: Any = None, periodic: Any = None,
                 indices: Any = None, device: Optional[str] = None, out: Any = None) -> Any:
    """``DistArray.redistribute``: the same global array, another
    distribution; written into ``out`` (and ``out`` returned) if given."""
    from ._array import DistSpec, producer_class
    comm = darr.comm
    me = _rank(comm)
    device = darr.device if device is None else device

    key = ("redistribute", _content_key(dist), _content_key(grid_shape),
           _content_key(block_size), split, _content_key(padding),
           _content_key(periodic), _content_key(indices), device)
    plans = _plans(darr)
    entry = plans.get(key)
    if _size(comm) > 1 and any_rank(comm, entry is None):
        entry = None                    # someone has no plan: all take the slow path
    if entry is None:
        def prepare() -> Any:
            producer_class(device)
            return DistSpec(darr.global_shape, dist, grid_shape, block_size, padding,
                            periodic, indices, split, _size(comm))

        spec = agree(comm, prepare)
        src_layout = _layout(darr)      # raises alike on every rank
        tgt_layout = _spec_layout(spec)
        entry = _Plan(src_layout, tgt_layout, me, _size(comm))
        entry.tgt_layout = tgt_layout  # type: ignore[attr-defined]
        entry.maps = spec.maps(me)  # type: ignore[attr-defined]
        plans[key] = entry              # same key on every rank: same path
    maps = entry.maps  # type: ignore[attr-defined]
    if out is not None:
        agree(comm, lambda: _check_out(darr, out, maps, device))
    dtype = darr.dtype
    shape = tuple(m.extent for m in maps)
    if device == "cuda" and darr.device == "cuda" and cuda_aware():
        tgt = producer_class("cuda")(shape, dtype) if out is None else out.buffer
        entry.run(comm, darr.buffer, tgt, dtype)
        buffer = tgt
    elif out is not None:
        host = _host_array(out)
        entry.run(comm, _host_array(darr), host, dtype)
        if device != "cpu":
            out.buffer.copy_from_host(host)
    else:
        _, host, finish = _alloc(device, shape, dtype, entry.fills_target)
        entry.run(comm, _host_array(darr), host, dtype)
        buffer = finish()
    if out is not None:
        return out
    result = type(darr)(buffer, maps, device=device, dtype=dtype, comm=comm)
    result._mpi_layout = entry.tgt_layout  # type: ignore[attr-defined]
    return result


# -- halo exchange ---------------------------------------------------------------

class _Halo:
    """One rank's halo exchange: per dimension (in order), the sends, the
    receives and the local copies, each a selection of the local buffer."""

    def __init__(self, layout: _Layout, me: int, grid: Sequence[int],
                 shape: Sequence[int]) -> None:
        coords = layout.keys(me)
        self.shape = tuple(shape)
        self.stages: List[Tuple[List[Tuple[int, int, Tuple[Sel, ...]]],
                                List[Tuple[int, int, Tuple[Sel, ...]]],
                                List[Tuple[Tuple[Sel, ...], Tuple[Sel, ...]]]]] = []
        for d, dl in enumerate(layout.dims):
            sends: List[Tuple[int, int, Tuple[Sel, ...]]] = []
            recvs: List[Tuple[int, int, Tuple[Sel, ...]]] = []
            copies: List[Tuple[Tuple[Sel, ...], Tuple[Sel, ...]]] = []
            if not isinstance(dl.held[0], _Range):
                self.stages.append((sends, recvs, copies))
                continue
            mine = coords[d]

            def slab(rng: Tuple[int, int]) -> Tuple[Sel, ...]:
                return tuple(rng if e == d else (0, int(shape[e]))
                             for e in range(len(shape)))

            def rank_at(c: int) -> int:
                cc = list(coords)
                cc[d] = c
                return int(np.ravel_multi_index(cc, grid))

            for x, side, need, dst in _needs(dl):
                for c, owned in enumerate(dl.owned):
                    hit = _intersect(owned, need)
                    if hit is None:
                        continue
                    (s0, n), (t0, _) = hit
                    t0 = t0 - need.base + dst
                    tag = 2 * d + side
                    if x == mine and c == mine:
                        copies.append((slab((s0, n)), slab((t0, n))))
                    elif x == mine:
                        recvs.append((rank_at(c), tag, slab((t0, n))))
                    elif c == mine:
                        sends.append((rank_at(x), tag, slab((s0, n))))
            self.stages.append((sends, recvs, copies))
        self.persistent: Optional[Tuple[Any, List[List[Any]], List[Any]]] = None
        self.types: Optional[List[Tuple[List[Any], List[Any]]]] = None
        self.dtype: Optional[np.dtype] = None

    def _spec(self, buf: Any, sels: Tuple[Sel, ...], dtype: np.dtype,
              keep: List[Any]) -> Any:
        if isinstance(buf, np.ndarray):
            run = _contiguous(sels, self.shape)
            if run is not None and run[1] <= _COUNT_LIMIT:
                return buf.reshape(-1)[run[0]:run[0] + run[1]]
        t = _datatype(sels, self.shape, dtype)
        keep.append(t)
        return [buf, 1, t]

    def free(self) -> None:
        if self.persistent is not None:
            _, ops, types = self.persistent
            for many, op, _ in ops:
                for r in op if many else ():
                    r.Free()
            for t in types:
                t.Free()
            self.persistent = None

    def run(self, comm: Any, buf: Any, dtype: np.dtype, persistent: bool) -> None:
        nprocs = _size(comm)
        if nprocs == 1 or not any(s or r for s, r, _ in self.stages):
            for _, _, copies in self.stages:
                _copy(buf, copies)
            return
        MPI = _mpi()
        if persistent:
            if self.persistent is None or self.persistent[0] is not buf \
                    or self.dtype != dtype:
                self.free()
                self.dtype = dtype
                types: List[Any] = []
                ops: List[Any] = []
                for sends, recvs, copies in self.stages:
                    if (len(sends) == 1 and len(recvs) == 1
                            and sends[0][0] == recvs[0][0]):
                        (peer, stag, ssel), (_, rtag, rsel) = sends[0], recvs[0]
                        ops.append((False, (self._spec(buf, ssel, dtype, types), peer,
                                            stag, self._spec(buf, rsel, dtype, types),
                                            peer, rtag), copies))
                    else:
                        reqs = [comm.Recv_init(self._spec(buf, sel, dtype, types),
                                               peer, tag) for peer, tag, sel in recvs]
                        reqs += [comm.Send_init(self._spec(buf, sel, dtype, types),
                                                peer, tag) for peer, tag, sel in sends]
                        ops.append((True, reqs, copies))
                self.persistent = (buf, ops, types)
            sendrecv = comm.Sendrecv
            for many, op, copies in self.persistent[1]:
                if not many:
                    _copy(buf, copies)
                    sendrecv(*op)
                    continue
                if op:
                    MPI.Prequest.Startall(op)
                _copy(buf, copies)
                if op:
                    MPI.Request.Waitall(op)
            return
        types = []
        try:
            for sends, recvs, copies in self.stages:
                reqs = [comm.Irecv(self._spec(buf, sel, dtype, types), peer, tag)
                        for peer, tag, sel in recvs]
                reqs += [comm.Isend(self._spec(buf, sel, dtype, types), peer, tag)
                         for peer, tag, sel in sends]
                if isinstance(buf, np.ndarray):
                    _copy(buf, copies)
                else:                       # device memory, CUDA-aware MPI
                    for src, dst in copies:
                        reqs.append(comm.Irecv(self._spec(buf, dst, dtype, types),
                                               comm.Get_rank(), 999))
                        reqs.append(comm.Isend(self._spec(buf, src, dtype, types),
                                               comm.Get_rank(), 999))
                MPI.Request.Waitall(reqs)
        finally:
            for t in types:
                t.Free()


def _copy(buf: Any, copies: Sequence[Tuple[Tuple[Sel, ...], Tuple[Sel, ...]]]
          ) -> None:
    """A halo stage's local copies (numpy indexing of one process's buffer)."""
    for src, dst in copies:
        buf[_index(dst)] = buf[_index(src)]


def _needs(dl: _DimLayout) -> List[Tuple[int, int, _Range, int]]:
    """Every grid coordinate's padding to fill along a block dimension:
    ``(coord, side, global range needed as a _Range whose base is 0, first
    local slot)``."""
    grid = len(dl.held)
    out: List[Tuple[int, int, _Range, int]] = []
    last_held = dl.held[-1]
    assert isinstance(last_held, _Range)
    for x in range(grid):
        held, owned = dl.held[x], dl.owned[x]
        assert isinstance(held, _Range) and isinstance(owned, _Range)
        ext = held.hi - held.lo
        lc, rc = owned.lo - held.lo, held.hi - owned.hi
        if lc:
            out.append((x, 0, _Range(held.lo, owned.lo, 0), 0))
        if rc:
            out.append((x, 1, _Range(owned.hi, held.hi, 0), ext - rc))
    if dl.periodic and grid:
        lo_b, hi_b = dl.pads[0][0], dl.pads[-1][1]
        size = dl.size
        period = size - lo_b - hi_b
        if lo_b > period or hi_b > period:
            raise ValueError(f"periodic dimension of size {size}: boundary padding "
                             f"({lo_b}, {hi_b}) is wider than the {period} interior "
                             "cells it wraps around")
        if lo_b:
            out.append((0, 0, _Range(size - hi_b - lo_b, size - hi_b, 0), 0))
        if hi_b:
            ext = last_held.hi - last_held.lo
            out.append((grid - 1, 1, _Range(lo_b, lo_b + hi_b, 0), ext - hi_b))
    return out


def _halo(darr: Any) -> _Halo:
    halo = getattr(darr, "_mpi_halo", None)
    if halo is None:
        halo = darr._mpi_halo = _Halo(_layout(darr), _rank(darr.comm), darr.grid_shape,
                                      darr.local_shape)
        weakref.finalize(darr, _release, halo)
    return halo


def _release(obj: Any) -> None:
    """Free a plan's MPI objects unless MPI is already finalized."""
    try:
        MPI = _mpi()
        if MPI.Is_finalized():
            return
    except ImportError:
        return
    obj.free()


def _bound_exchange(halo: _Halo, comm: Any) -> Optional[Callable[[], None]]:
    """For a CPU array whose persistent plan is built: a callable running
    exactly that plan with nothing else per call (every stage one
    ``Sendrecv`` on ready-made views, no local copies), else None."""
    if halo.persistent is None or _size(comm) == 1:
        return None
    ops = [o for o in halo.persistent[1] if not o[0] or o[1] or o[2]]  # idle stages
    if any(many or copies for many, _, copies in ops):
        return None
    calls = [op for _, op, _ in ops]
    if not calls:
        return None
    return _calls(comm.Sendrecv, calls)


def _calls(fn: Callable[..., Any], calls: List[Any]) -> Callable[[], None]:
    """A function making every call ``fn(*args)`` of ``calls`` in order (a
    single call directly, without a loop)."""
    if len(calls) == 1:
        only = calls[0]
        return lambda: fn(*only)

    def run() -> None:
        for args in calls:
            fn(*args)
    return run


def update_halos(darr: Any) -> None:
    """``DistArray.update_halos``: fill padding from the owners.

    For CPU arrays whose exchange is one ``Sendrecv`` per dimension, the
    first call also binds the prepared exchange to the instance as
    ``darr.update_halos`` (same effect, no per-call dispatch), since the
    local buffer, layout and dtype of a DistArray never change; calls
    through the class (or a method reference taken earlier) use it too."""
    bound = vars(darr).get("update_halos")
    if bound is not None:
        bound()
        return
    comm = darr.comm
    halo = _halo(darr)          # raises alike on every rank (same layout)
    dtype = darr.dtype
    if darr.device == "cpu":
        halo.run(comm, _host_array(darr), dtype, persistent=True)
        bound = _bound_exchange(halo, comm)
        if bound is not None:
            bound.__doc__ = type(darr).update_halos.__doc__
            darr.update_halos = bound
    elif darr.device == "cuda" and cuda_aware():
        halo.run(comm, darr.buffer, dtype, persistent=False)
    else:
        host = _host_array(darr)
        halo.run(comm, host, dtype, persistent=False)
        darr.buffer.copy_from_host(host)


# -- the raw-MPI baseline of a halo exchange (demo, benchmarks) -------------

def raw_halo_exchange(darr: Any) -> Tuple[Callable[[], None], int]:
    """``(exchange, nbytes)``: a function moving the same bytes between the
    same processes as ``darr.update_halos()`` with plain mpi4py calls on
    contiguous numpy buffers (``Sendrecv`` where a stage has one peer each
    way, ``Isend``/``Irecv`` otherwise), and the bytes this process sends."""
    halo = _halo(darr)
    comm = darr.comm
    itemsize = darr.dtype.itemsize
    stages = []
    nbytes = 0

    for sends, recvs, _ in halo.stages:
        sb = [(peer, tag, np.zeros(_count(sel) * itemsize, np.uint8))
              for peer, tag, sel in sends]
        rb = [(peer, tag, np.zeros(_count(sel) * itemsize, np.uint8))
              for peer, tag, sel in recvs]
        nbytes += sum(b.size for _, _, b in sb)
        stages.append((sb, rb))

    if _size(comm) == 1:
        return (lambda: None), nbytes
    MPI = _mpi()
    sendrecv, waitall = comm.Sendrecv, MPI.Request.Waitall
    if all(len(sb) == 1 and len(rb) == 1 and sb[0][0] == rb[0][0] or not (sb or rb)
           for sb, rb in stages):
        calls = [(sb[0][2], sb[0][0], sb[0][1], rb[0][2], rb[0][0], rb[0][1])
                 for sb, rb in stages if sb]
        return _calls(sendrecv, calls), nbytes

    def exchange() -> None:
        for sb, rb in stages:
            if len(sb) == 1 and len(rb) == 1 and sb[0][0] == rb[0][0]:
                sendrecv(sb[0][2], sb[0][0], sb[0][1], rb[0][2], rb[0][0], rb[0][1])
                continue
            reqs = [comm.Irecv(b, peer, tag) for peer, tag, b in rb]
            reqs += [comm.Isend(b, peer, tag) for peer, tag, b in sb]
            waitall(reqs)

    return exchange, nbytes
