"""Layouts: where every process's elements are (pure numpy, no MPI).

For each dimension and grid coordinate a layout knows the global indices a
process holds (padding included) and owns, with their local slots.  A
distribution is the tensor product of its dimensions, so the elements
process A sends process B are, per dimension, the intersection of A's owned
set with B's held set (:func:`intersect`), in ascending global order.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._maps import CyclicMap
from ._protocol import comm_padding

__all__ = ["DimLayout", "Layout", "Points", "Range", "Sel", "dim_layout",
           "grid_layout", "intersect", "per_coord", "root_layout", "spec_layout"]

#: A selection of local slots along one dimension: a ``(start, length)``
#: run, or an array of positions.
Sel = Union[Tuple[int, int], np.ndarray]


class Range:
    """Global indices ``[lo, hi)`` at local slots ``base + (g - lo)``."""

    __slots__ = ("lo", "hi", "base")

    def __init__(self, lo: int, hi: int, base: int) -> None:
        self.lo, self.hi, self.base = lo, max(hi, lo), base


class Points:
    """Sorted unique global indices ``g`` at local slots ``pos``."""

    __slots__ = ("g", "pos")

    def __init__(self, g: np.ndarray, pos: np.ndarray) -> None:
        self.g, self.pos = g, pos


IndexSet = Union[Range, Points]


def intersect(a: IndexSet, b: IndexSet) -> Optional[Tuple[Sel, Sel]]:
    """Local slots in ``a`` and in ``b`` of their common global indices
    (ascending global order), or None if there are none."""
    if isinstance(a, Range) and isinstance(b, Range):
        lo, hi = max(a.lo, b.lo), min(a.hi, b.hi)
        if hi <= lo:
            return None
        return (a.base + lo - a.lo, hi - lo), (b.base + lo - b.lo, hi - lo)
    if isinstance(a, Range):
        flipped = intersect(b, a)
        return None if flipped is None else (flipped[1], flipped[0])
    if isinstance(b, Range):
        i0, i1 = np.searchsorted(a.g, [b.lo, b.hi])
        if i1 <= i0:
            return None
        g = a.g[i0:i1]
        return a.pos[i0:i1], g - b.lo + b.base
    _, ia, ib = np.intersect1d(a.g, b.g, assume_unique=True, return_indices=True)
    if not ia.size:
        return None
    return a.pos[ia], b.pos[ib]


class DimLayout:
    """One dimension of a layout: the held and owned sets of every grid
    coordinate; for block dimensions also every coordinate's ``padding``
    and whether the dimension is periodic; ``cellless`` says which held
    index has no cell of the global array (an unstructured index outside
    ``[0, size)``), or is None."""

    def __init__(self, size: int, held: Sequence[IndexSet], owned: Sequence[IndexSet],
                 extents: Sequence[int], pads: Sequence[Tuple[int, int]] = (),
                 periodic: bool = False, cellless: Optional[str] = None) -> None:
        self.size, self.held, self.owned, self.extents = size, held, owned, extents
        self.pads, self.periodic, self.cellless = list(pads), periodic, cellless


def dim_layout(dds: Sequence[Dict[str, Any]]) -> DimLayout:
    """Layout of one dimension from every grid coordinate's normalised
    dimension dictionary (index = coordinate)."""
    first = dds[0]
    size, dist, grid = first["size"], first["dist_type"], len(dds)
    held: List[IndexSet] = []
    owned: List[IndexSet] = []
    extents: List[int] = []
    pads: List[Tuple[int, int]] = []
    cellless = None
    if dist == "b":
        for c, dd in enumerate(dds):
            pads.append(tuple(dd["padding"]))
            start, stop = dd["start"], dd["stop"]
            lc, rc = comm_padding(dd["padding"], c, grid)
            held.append(Range(start, stop, 0))
            owned.append(Range(start + lc, stop - rc, lc))
            extents.append(stop - start)
    elif dist == "c":
        for c, dd in enumerate(dds):
            g = CyclicMap(size, grid, c, dd["block_size"]).owned_global()
            s = Points(g, np.arange(g.size, dtype=np.int64))
            held.append(s)
            owned.append(s)
            extents.append(int(g.size))
    else:
        every = [np.asarray(dd["indices"], dtype=np.int64) for dd in dds]
        allg = np.concatenate(every) if every else np.empty(0, np.int64)
        coord = np.repeat(np.arange(grid), [e.size for e in every])
        outside = (allg < 0) | (allg >= size)
        if outside.any():
            # the protocol allows them; a global array has no cell for them
            at = int(np.argmax(outside))
            cellless = (f"global index {int(allg[at])} (held at grid "
                        f"coordinate {int(coord[at])}) of an unstructured "
                        f"dimension of size {size} has no cell in the global "
                        "array: it cannot be gathered or redistributed")
        order = np.lexsort((coord, allg))               # by g, then lowest coord
        first_of = np.ones(order.size, bool)
        first_of[1:] = allg[order][1:] != allg[order][:-1]
        designated = np.zeros(allg.size, bool)
        designated[order[first_of]] = True
        offset = 0
        for idx in every:
            o = np.argsort(idx, kind="stable")
            s = Points(idx[o], o.astype(np.int64))
            held.append(s)
            mine = designated[offset:offset + idx.size][o]
            owned.append(Points(s.g[mine], s.pos[mine]))
            extents.append(int(idx.size))
            offset += idx.size
    return DimLayout(size, held, owned, extents, pads, bool(first.get("periodic", False)),
                     cellless)


class Layout:
    """Where every process's elements are: per dimension a ``DimLayout``,
    and per process one key (grid coordinate) into each of them."""

    def __init__(self, dims: Sequence[DimLayout],
                 keys: Callable[[int], Tuple[int, ...]]) -> None:
        self.dims, self.keys = dims, keys

    def shape(self, rank: int) -> Tuple[int, ...]:
        return tuple(d.extents[k] for d, k in zip(self.dims, self.keys(rank)))


def grid_layout(dims: Sequence[DimLayout], grid: Sequence[int]) -> Layout:
    """Ranks at their C-order coordinates of ``grid``."""
    grid = tuple(grid)
    return Layout(dims, lambda r: tuple(int(c) for c in np.unravel_index(r, grid))
                  if grid else ())


def root_layout(shape: Sequence[int], root: Optional[int]) -> Layout:
    """Process ``root`` holds the whole array (every process if None)."""
    dims = [DimLayout(n, [Range(0, n, 0), Range(0, 0, 0)],
                      [Range(0, n, 0), Range(0, 0, 0)], [n, 0]) for n in shape]
    nd = len(shape)
    return Layout(dims, lambda r: (0,) * nd if root is None or r == root else (1,) * nd)


def per_coord(all_dims: Sequence[Sequence[Dict[str, Any]]], grid: Sequence[int]
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


def spec_layout(spec: Any) -> Layout:
    """The layout of a ``DistSpec`` (every coordinate computed locally)."""
    cols = [[spec.dim_map(d, c).full_dim_dict() for c in range(p)]
            for d, p in enumerate(spec.grid)]
    return grid_layout([dim_layout(col) for col in cols], spec.grid)
