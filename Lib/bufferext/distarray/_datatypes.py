"""Selections of a C-contiguous local buffer as numpy indices and as MPI
derived datatypes.

A selection is one :data:`~._layout.Sel` per dimension (their product).
MPI counts and constructor arguments are C ints: runs and lists longer
than ``limit`` (2**31 - 1 unless a test lowers it) are split into chunks.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._comm import mpi
from ._layout import Sel

__all__ = ["COUNT_LIMIT", "base_type", "contiguous", "count", "datatype",
           "fast_index", "first", "index", "runs", "slice_of"]

#: Largest count one MPI call or datatype constructor argument may carry.
COUNT_LIMIT = 2**31 - 1


def count(sels: Optional[Sequence[Sel]]) -> int:
    """Number of elements of a selection (0 for None)."""
    if sels is None:
        return 0
    n = 1
    for s in sels:
        n *= s[1] if isinstance(s, tuple) else len(s)
    return n


def first(sels: Sequence[Sel], shape: Sequence[int]) -> int:
    """The flat position, in a C-contiguous buffer of ``shape``, of the
    first element of the (non-empty) selection."""
    pos = 0
    for s, n in zip(sels, shape):
        pos = pos * int(n) + int(s[0])
    return pos


def runs(sel: Sel, limit: int = COUNT_LIMIT) -> Tuple[np.ndarray, np.ndarray]:
    """``(starts, lengths)`` of the runs of consecutive slots, each run no
    longer than ``limit``."""
    if isinstance(sel, tuple):
        starts = np.array([sel[0]], np.int64)
        lengths = np.array([sel[1]], np.int64)
    else:
        pos = np.asarray(sel, np.int64)
        brk = np.flatnonzero(np.diff(pos) != 1) + 1
        first = np.concatenate(([0], brk))
        starts = pos[first]
        lengths = np.diff(np.concatenate((first, [pos.size])))
    if lengths.size and lengths.max() > limit:
        pieces = -(-lengths // limit)
        rep = np.repeat(np.arange(lengths.size), pieces)
        k = np.arange(rep.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        starts = starts[rep] + k * limit
        lengths = np.minimum(lengths[rep] - k * limit, limit)
    return starts, lengths


def _hindexed(base: Any, lengths: np.ndarray, displs: np.ndarray, limit: int,
              free: List[Any]) -> Any:
    """``base`` repeated at byte ``displs`` in runs of ``lengths``; more runs
    than ``limit`` become a struct of chunks (recursively)."""
    if lengths.size <= limit:
        t = base.Create_hindexed(lengths.tolist(), displs.tolist())
        free.append(t)
        return t
    parts = [_hindexed(base, lengths[i:i + limit], displs[i:i + limit], limit, free)
             for i in range(0, lengths.size, limit)]
    return _struct(parts, limit, free)


def _struct(parts: List[Any], limit: int, free: List[Any]) -> Any:
    while len(parts) > limit:
        parts = [_struct(parts[i:i + limit], limit, free)
                 for i in range(0, len(parts), limit)]
    t = mpi().Datatype.Create_struct([1] * len(parts), [0] * len(parts), parts)
    free.append(t)
    return t


def base_type(dtype: np.dtype) -> Tuple[Any, bool]:
    """The MPI datatype of one element, and whether we made it (then the
    caller frees it): the predefined type of a native numeric dtype, else
    ``itemsize`` bytes (committed: the packing path sends it as it is)."""
    try:
        from mpi4py.util import dtlib
        if dtype.isnative and not dtype.fields and dtype.kind in "biufc":
            return dtlib.from_numpy_dtype(dtype), False
    except Exception:              # noqa: BLE001 - fall back to raw bytes
        pass
    return mpi().BYTE.Create_contiguous(dtype.itemsize).Commit(), True


def _runs_type(t: Any, starts: np.ndarray, lengths: np.ndarray, limit: int,
               free: List[Any]) -> Any:
    """``t`` (extent: one slot) taken in runs of slots: equal runs at a
    constant step are a vector (at the first run's offset), others
    ``hindexed``.  (Within a node MPICH copies most such vectors straight
    from the sender's memory, and packs an ``hindexed`` of many blocks
    first, 2-4x slower.)"""
    slot = t.extent
    step = int(starts[1] - starts[0]) if starts.size > 1 else 0
    if (1 < starts.size <= limit and abs(step) <= limit and np.all(lengths == lengths[0])
            and np.all(np.diff(starts) == step)):
        t = t.Create_vector(starts.size, int(lengths[0]), step)
        free.append(t)
        starts, lengths = starts[:1], np.ones(1, np.int64)
    return _hindexed(t, lengths, starts * slot, limit, free)


def datatype(sels: Sequence[Sel], shape: Sequence[int], dtype: np.dtype,
             limit: int = COUNT_LIMIT) -> Any:
    """A committed datatype selecting the product of ``sels`` (one selection
    per dimension, in the order the elements travel) from a C-contiguous
    buffer of ``shape``; the caller frees it."""
    groups = max(limit, 2)          # a struct of one part would never shrink
    base, own = base_type(dtype)
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
        starts, lengths = runs(sels[d], limit)
        t = _runs_type(t, starts, lengths, groups, free)
    t = t.Dup()
    t.Commit()
    for f in free:
        f.Free()
    return t


def index(sels: Sequence[Sel]) -> Tuple[Any, ...]:
    """A numpy index selecting the product of ``sels`` (outer indexing)."""
    arrays = sum(1 for s in sels if not isinstance(s, tuple))
    if arrays <= 1:
        return tuple(slice(s[0], s[0] + s[1]) if isinstance(s, tuple) else s
                     for s in sels)
    return np.ix_(*[np.arange(s[0], s[0] + s[1]) if isinstance(s, tuple) else s
                    for s in sels])


def slice_of(sel: Sel) -> Union[slice, np.ndarray]:
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


def fast_index(sels: Sequence[Sel]) -> Tuple[Any, ...]:
    """A numpy index selecting the product of ``sels``: basic slices where
    possible, outer (``ix_``) indexing for the remaining position arrays."""
    parts = [slice_of(s) for s in sels]
    if sum(1 for p in parts if isinstance(p, np.ndarray)) <= 1:
        return tuple(parts)
    return np.ix_(*[np.arange(p.start, p.stop, p.step or 1)
                    if isinstance(p, slice) else p for p in parts])


def _as_runs(sels: Sequence[Sel]) -> Tuple[Sel, ...]:
    """``sels`` with position arrays of consecutive slots as ``(start,
    length)`` runs."""
    out: List[Sel] = []
    for s in sels:
        sl = slice_of(s)
        if isinstance(sl, slice) and sl.step in (None, 1):
            out.append((sl.start, sl.stop - sl.start))
        else:
            out.append(s)
    return tuple(out)


def contiguous(sels: Sequence[Sel], shape: Sequence[int]) -> Optional[Tuple[int, int]]:
    """``(first element, count)`` if the selection is one contiguous block of
    a C-contiguous buffer of ``shape``, else None."""
    sels = _as_runs(sels)
    if not all(isinstance(s, tuple) for s in sels):
        return None
    spans: List[Tuple[int, int]] = list(sels)  # type: ignore[arg-type]
    k = len(shape) - 1
    while k > 0 and spans[k] == (0, int(shape[k])):
        k -= 1                      # trailing dimensions taken whole
    if any(spans[e][1] != 1 for e in range(k)):
        return None
    off, stride = 0, 1
    for d in range(len(shape) - 1, -1, -1):
        off += spans[d][0] * stride
        stride *= int(shape[d])
    return off, count(sels)
