"""Index maps of one dimension: block (with padding, periodic), cyclic,
block-cyclic and unstructured.

Every map answers three questions, for one index or a numpy array of them:

* ``owner(g)``: the grid coordinate (along this dimension) owning global
  index ``g``;
* ``global_to_local(g)``: where ``g`` sits in *this* process's local buffer
  (padding included: a communication-padding cell maps to its slot here);
* ``local_to_global(l)``: the global index of local slot ``l``.

Arrays are processed in cache-sized chunks with preallocated scratch space,
so a map costs a few passes over the data in cache rather than several
passes through main memory.  Out-of-range or not-held indices raise
IndexError naming the first offending value; periodic dimensions reduce any
integer modulo ``size`` first.

A map made from one process's ``dim_data`` knows only its own section.  For
block and unstructured dimensions the owner of an index held elsewhere is
then unknown (IndexError says so); maps made by ``DistArray.from_global``
know the whole layout, and the MPI layer can supply it by gathering every
process's ``dim_data`` (``bounds=`` / ``all_indices=``).
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from ._protocol import comm_padding, owned_count

__all__ = ["DimMap", "BlockMap", "CyclicMap", "UnstructuredMap", "split_bounds",
           "map_from_dim_dict", "IndexLike"]

IndexLike = Union[int, np.integer, Sequence[int], np.ndarray]
_CHUNK = 1 << 15
_Kernel = Callable[[np.ndarray, np.ndarray, List[np.ndarray]], None]


def split_bounds(size: int, grid_size: int, split: str = "balanced") -> np.ndarray:
    """Boundaries (``grid_size + 1`` ints) of a regular block split.

    ``"balanced"``: the first ``size % grid_size`` ranks get one more index;
    ``"ceil"``: every rank gets ``ceil(size / grid_size)`` indices except a
    short (possibly empty) tail — the convention of MPI darrays and of the
    protocol's block/block-cyclic equivalence.
    """
    ranks = np.arange(grid_size + 1, dtype=np.int64)
    if split == "balanced":
        q, rem = divmod(size, grid_size)
        return ranks * q + np.minimum(ranks, rem)
    if split == "ceil":
        c = -(-size // grid_size)
        return np.minimum(ranks * c, size)
    raise ValueError(f"split={split!r}: must be 'balanced' or 'ceil'")


def is_partition(arrays: Sequence[Any], size: int) -> bool:
    """Whether the index ``arrays`` together hold every index of
    ``[0, size)`` exactly once (unstructured ``one_to_one``)."""
    joined = np.sort(np.concatenate(arrays)) if len(arrays) else np.empty(0)
    return joined.size == size and bool(np.array_equal(joined, np.arange(size)))


def _as_index(value: Any, what: str) -> Tuple[np.ndarray, bool]:
    """``(int64 array, was_scalar)``; TypeError for anything not integral."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} {value!r}: must be an integer, not bool")
    if isinstance(value, (int, np.integer)):
        number = operator.index(value)
        if not -2**63 <= number < 2**63:
            raise IndexError(f"{what} {number} is out of range")
        return np.array([number], dtype=np.int64), True
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise TypeError(f"{what} {value!r}: must be an integer or an integer "
                        f"array, not dtype {arr.dtype}")
    if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise IndexError(f"{what} {int(arr.max())} is out of range")
    return arr.astype(np.int64, copy=False), False


def _run(kernel: _Kernel, x: np.ndarray, nscratch: int,
         limit: Optional[int] = None) -> np.ndarray:
    """Apply ``kernel(chunk, out_chunk, scratch)`` chunk by chunk; with
    ``limit``, first check each chunk (while it is in cache) lies in
    ``[0, limit)``."""
    out = np.empty(x.shape, np.int64)
    flat, flat_out = x.reshape(-1), out.reshape(-1)
    n = flat.size
    step = min(n, _CHUNK) or 1
    scratch = [np.empty(step, np.int64) for _ in range(nscratch)]
    for lo in range(0, n, step):
        m = min(step, n - lo)
        chunk = flat[lo:lo + m]
        if limit is not None and (chunk.min() < 0 or chunk.max() >= limit):
            bad = _first_bad(chunk, (chunk >= 0) & (chunk < limit))
            raise IndexError(f"global index {bad} is out of range for size {limit}")
        kernel(chunk, flat_out[lo:lo + m], [s[:m] for s in scratch])
    return out


def _first_bad(x: np.ndarray, ok: np.ndarray) -> int:
    return int(x.reshape(-1)[np.flatnonzero(~ok.reshape(-1))[0]])


def _result(out: np.ndarray, scalar: bool) -> Any:
    return int(out[0]) if scalar else out


class DimMap:
    """Index map of one dimension of a distributed array (base class)."""

    #: The protocol's ``dist_type`` letter.
    dist_type: str = "?"

    def __init__(self, size: int, grid_size: int, grid_rank: int, extent: int) -> None:
        #: Global extent along this dimension.
        self.size = size
        #: Number of processes along this dimension.
        self.grid_size = grid_size
        #: This process's coordinate along this dimension.
        self.grid_rank = grid_rank
        #: Length of the local buffer along this dimension (padding included).
        self.extent = extent
        #: Whether global indices wrap around (block dimensions only).
        self.periodic = False

    @property
    def owned_slice(self) -> slice:
        """Local slots holding indices this process owns (not padding)."""
        return slice(0, self.extent)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(size={self.size}, grid_size={self.grid_size}, "
                f"grid_rank={self.grid_rank}, extent={self.extent})")

    # -- the three maps ---------------------------------------------------
    def owner(self, g: IndexLike) -> Any:
        """Grid coordinate (along this dimension) owning global index ``g``."""
        x, scalar = self._global(g)
        return _result(_run(self._owner_kernel, x, 2, self._limit()), scalar)

    def global_to_local(self, g: IndexLike) -> Any:
        """Local slot of global index ``g`` on this process (IndexError if
        this process's buffer does not hold it)."""
        x, scalar = self._global(g)
        return _result(_run(self._g2l_kernel, x, 3, self._limit()), scalar)

    def local_to_global(self, local: IndexLike) -> Any:
        """Global index held in local slot ``local`` (padding slots included)."""
        x, scalar = _as_index(local, "local index")
        if x.size and (x.min() < 0 or x.max() >= self.extent):
            bad = _first_bad(x, (x >= 0) & (x < self.extent))
            raise IndexError(f"local index {bad} is out of range for a local "
                             f"extent of {self.extent}")
        return _result(_run(self._l2g_kernel, x, 2), scalar)

    def owned_global(self) -> np.ndarray:
        """Global indices this process owns, in local order."""
        local = np.arange(self.extent, dtype=np.int64)[self.owned_slice]
        out: np.ndarray = self.local_to_global(local)
        return out

    def dim_dict(self) -> Dict[str, Any]:
        """This dimension's ``dim_data`` entry (Python ints, tuples, bools)."""
        return self.full_dim_dict()

    def full_dim_dict(self) -> Dict[str, Any]:
        """The complete normalised dimension dictionary (never the ``{}``
        alias of an undistributed dimension)."""
        raise NotImplementedError

    # -- helpers for subclasses --------------------------------------------
    def _limit(self) -> Optional[int]:
        """Global indices must lie in [0, limit) (None: any integer)."""
        return None if self.dist_type == "u" or self.periodic else self.size

    def _global(self, g: IndexLike) -> Tuple[np.ndarray, bool]:
        x, scalar = _as_index(g, "global index")
        if x.size and self.periodic and self.size:
            return np.remainder(x, self.size), scalar
        return x, scalar

    def _not_here(self, x: np.ndarray, ok: np.ndarray) -> IndexError:
        return IndexError(f"global index {_first_bad(x, ok)} is not held by grid "
                          f"rank {self.grid_rank} along this {self.dist_type!r} "
                          "dimension")

    def _owner_kernel(self, x: np.ndarray, out: np.ndarray,
                      s: List[np.ndarray]) -> None:
        raise NotImplementedError

    def _g2l_kernel(self, x: np.ndarray, out: np.ndarray,
                    s: List[np.ndarray]) -> None:
        raise NotImplementedError

    def _l2g_kernel(self, x: np.ndarray, out: np.ndarray,
                    s: List[np.ndarray]) -> None:
        raise NotImplementedError


class BlockMap(DimMap):
    """Block distribution (``'b'``), padding and periodicity included.

    ``start``/``stop`` delimit the local buffer in global indices (padding
    included, as in 0.10.0).  ``bounds`` (``grid_size + 1`` ints: owned
    ranges of every grid rank) make ``owner`` work for every index;
    ``split`` names a regular split of those bounds for a faster path.
    """

    dist_type = "b"

    def __init__(self, size: int, grid_size: int, grid_rank: int, start: int,
                 stop: int, padding: Tuple[int, int] = (0, 0), periodic: bool = False,
                 bounds: Any = None, split: Optional[str] = None,
                 alias: bool = False) -> None:
        super().__init__(size, grid_size, grid_rank, stop - start)
        self.start, self.stop = start, stop
        self.padding = (int(padding[0]), int(padding[1]))
        self.periodic = bool(periodic)
        #: Left/right communication padding (edge padding is boundary padding).
        self.comm_padding = comm_padding(self.padding, grid_rank, grid_size)
        self.bounds = None if bounds is None else np.asarray(bounds, dtype=np.int64)
        self.split = split if bounds is not None else None
        self.alias = alias
        self._inner = None if self.bounds is None else self.bounds[1:-1].copy()

    @property
    def owned_slice(self) -> slice:
        return slice(self.comm_padding[0], self.extent - self.comm_padding[1])

    @property
    def owned_range(self) -> Tuple[int, int]:
        """``[lo, hi)``: the global indices this process owns."""
        return self.start + self.comm_padding[0], self.stop - self.comm_padding[1]

    def dim_dict(self) -> Dict[str, Any]:
        if self.alias and self.grid_size == 1 and self.padding == (0, 0) \
                and not self.periodic:
            return {}
        return self.full_dim_dict()

    def full_dim_dict(self) -> Dict[str, Any]:
        return {"dist_type": "b", "size": self.size, "proc_grid_size": self.grid_size,
                "proc_grid_rank": self.grid_rank, "start": self.start,
                "stop": self.stop, "padding": self.padding, "periodic": self.periodic}

    def _owner_kernel(self, x: np.ndarray, out: np.ndarray,
                      s: List[np.ndarray]) -> None:
        size, grid = self.size, self.grid_size
        if grid == 1:
            out.fill(0)
        elif self.split == "ceil":
            np.floor_divide(x, -(-size // grid), out=out)
        elif self.split == "balanced":
            q, rem = divmod(size, grid)
            if q == 0:
                out[...] = x
                return
            # owner = max(g // (q + 1), (g - rem) // q), exact for balanced splits
            np.floor_divide(x, q + 1, out=out)
            np.subtract(x, rem, out=s[0])
            np.floor_divide(s[0], q, out=s[0])
            np.maximum(out, s[0], out=out)
        elif self._inner is not None:
            out[...] = np.searchsorted(self._inner, x, side="right")
        else:
            lo, hi = self.owned_range
            ok = (x >= lo) & (x < hi)
            if not ok.all():
                raise IndexError(
                    f"owner of global index {_first_bad(x, ok)} is unknown here: "
                    "this block map knows only its own section (gather every "
                    "process's dim_data to pass bounds=)")
            out.fill(self.grid_rank)

    def _g2l_kernel(self, x: np.ndarray, out: np.ndarray,
                    s: List[np.ndarray]) -> None:
        if x.min() < self.start or x.max() >= self.stop:
            raise self._not_here(x, (x >= self.start) & (x < self.stop))
        np.subtract(x, self.start, out=out)

    def _l2g_kernel(self, x: np.ndarray, out: np.ndarray,
                    s: List[np.ndarray]) -> None:
        np.add(x, self.start, out=out)


class CyclicMap(DimMap):
    """Cyclic (``block_size == 1``) and block-cyclic (``'c'``) distribution.

    Grid rank r owns global index g iff ``(g // block_size) % grid_size == r``;
    local order is ascending g.
    """

    dist_type = "c"

    def __init__(self, size: int, grid_size: int, grid_rank: int,
                 block_size: int = 1) -> None:
        super().__init__(size, grid_size, grid_rank,
                         owned_count(size, grid_size, grid_rank, block_size))
        self.block_size = block_size

    def full_dim_dict(self) -> Dict[str, Any]:
        return {"dist_type": "c", "size": self.size, "proc_grid_size": self.grid_size,
                "proc_grid_rank": self.grid_rank,
                "start": self.grid_rank * self.block_size,
                "block_size": self.block_size}

    def _owner_kernel(self, x: np.ndarray, out: np.ndarray,
                      s: List[np.ndarray]) -> None:
        if self.block_size == 1:
            np.remainder(x, self.grid_size, out=out)
        else:
            np.floor_divide(x, self.block_size, out=out)
            np.remainder(out, self.grid_size, out=out)

    def _g2l_kernel(self, x: np.ndarray, out: np.ndarray,
                    s: List[np.ndarray]) -> None:
        b, grid, rank = self.block_size, self.grid_size, self.grid_rank
        if b == 1:
            np.subtract(x, rank, out=s[0])
            np.floor_divide(s[0], grid, out=out)
            np.multiply(out, grid, out=s[1])
            if not np.array_equal(s[1], s[0]):
                raise self._not_here(x, s[1] == s[0])
            return
        k, kk, t = s
        np.floor_divide(x, b, out=k)
        np.floor_divide(k, grid, out=kk)
        np.multiply(kk, grid, out=t)
        np.add(t, rank, out=t)
        if not np.array_equal(t, k):
            raise self._not_here(x, t == k)
        # local = (k // P) * b + g % b = g + (kk - k) * b
        np.subtract(kk, k, out=t)
        np.multiply(t, b, out=t)
        np.add(x, t, out=out)

    def _l2g_kernel(self, x: np.ndarray, out: np.ndarray,
                    s: List[np.ndarray]) -> None:
        b, grid, rank = self.block_size, self.grid_size, self.grid_rank
        if b == 1:
            np.multiply(x, grid, out=out)
            np.add(out, rank, out=out)
            return
        # g = ((l // b) * P + r) * b + l % b: every term is at most g (where
        # l + (l // b) * (P - 1) * b + r * b overflowed: (P - 1) * b need not
        # fit an int64 when every index does)
        np.floor_divide(x, b, out=s[0])
        np.multiply(s[0], grid, out=s[0])
        np.add(s[0], rank, out=s[0])
        np.remainder(x, b, out=s[1])
        np.multiply(s[0], b, out=out)
        np.add(out, s[1], out=out)


class Owners(NamedTuple):
    """The owning grid rank of every global index held along an unstructured
    dimension (the lowest rank where several hold it), read-only: ``table``
    for ``[0, size)`` (-1: none), and the held indices outside it (the
    protocol leaves them unconstrained: negative, or ``size`` and past) in
    ``outside``, sorted, with their owners in ``outside_owner``."""

    table: np.ndarray
    outside: np.ndarray
    outside_owner: np.ndarray

    def lookup(self, x: np.ndarray, out: np.ndarray) -> None:
        """``out[...]``: the owner of every index of ``x`` (-1: none)."""
        table = self.table
        if not x.size or (x.min() >= 0 and x.max() < table.size):
            out[...] = table[x]         # the common case: two reductions
            return
        inside = (x >= 0) & (x < table.size)
        out[inside] = table[x[inside]]
        rest, outside = x[~inside], self.outside
        if not outside.size:
            out[~inside] = -1
            return
        pos = np.minimum(np.searchsorted(outside, rest), outside.size - 1)
        out[~inside] = np.where(outside[pos] == rest, self.outside_owner[pos], -1)


class UnstructuredMap(DimMap):
    """Unstructured distribution (``'u'``): an explicit list of global indices.

    ``global_to_local`` is a lookup in the sorted indices (a dense inverse
    table when the indices are compact).  ``all_indices`` (one array per grid
    rank) makes ``owner`` work for every index; where an index is held by
    several ranks (``one_to_one`` False) the lowest grid rank is reported.
    ``table``: instead of ``all_indices``, their ready ``_owner_table`` (so
    the maps of every grid rank can share one).  Indices may lie outside
    ``[0, size)``, as the protocol allows: such an element is owned, but is
    no cell of the global array (a gather refuses it).
    """

    dist_type = "u"

    def __init__(self, size: int, grid_size: int, grid_rank: int, indices: Any,
                 one_to_one: bool = False,
                 all_indices: Optional[Sequence[Any]] = None, *,
                 table: Optional[Owners] = None) -> None:
        idx = np.array(indices, dtype=np.int64).reshape(-1)
        idx.flags.writeable = False
        super().__init__(size, grid_size, grid_rank, idx.size)
        self.indices = idx
        self.one_to_one = bool(one_to_one)
        self._order = np.argsort(idx, kind="stable")
        self._sorted = idx[self._order]
        self._dense: Optional[np.ndarray] = None
        self._base = int(self._sorted[0]) if idx.size else 0
        span = int(self._sorted[-1]) - self._base + 1 if idx.size else 0
        if 0 < span <= 4 * idx.size + 64:
            kind = np.int32 if idx.size < 2**31 else np.int64
            self._dense = np.full(span, -1, dtype=kind)
            self._dense[idx - self._base] = np.arange(idx.size)
        self._table = table
        if all_indices is not None:
            self._table = self._owner_table(size, all_indices)

    @staticmethod
    def _owner_table(size: int, all_indices: Sequence[Any]) -> Owners:
        """The owner of every index ``all_indices`` (one array per grid
        rank) hold."""
        kind = np.int8 if len(all_indices) < 127 else np.int32
        table = np.full(size, -1, dtype=kind)
        beyond: List[Tuple[np.ndarray, int]] = []
        for rank in range(len(all_indices) - 1, -1, -1):   # the lowest written last
            idx = np.asarray(all_indices[rank], dtype=np.int64)
            inside = (idx >= 0) & (idx < size)
            if inside.all():
                table[idx] = rank
            else:
                table[idx[inside]] = rank
                beyond.append((idx[~inside], rank))
        beyond.reverse()            # ascending rank: np.unique's first is the lowest
        held = np.concatenate([g for g, _ in beyond] + [np.empty(0, np.int64)])
        owner = np.concatenate([np.full(g.size, r, kind) for g, r in beyond]
                               + [np.empty(0, kind)])
        outside, first = np.unique(held, return_index=True)
        owners = Owners(table, outside, owner[first])
        for arr in owners:
            arr.flags.writeable = False
        return owners

    def full_dim_dict(self) -> Dict[str, Any]:
        return {"dist_type": "u", "size": self.size, "proc_grid_size": self.grid_size,
                "proc_grid_rank": self.grid_rank, "indices": self.indices,
                "one_to_one": self.one_to_one}

    def _owner_kernel(self, x: np.ndarray, out: np.ndarray,
                      s: List[np.ndarray]) -> None:
        owners = self._table
        if owners is None:
            self._g2l_kernel(x, out, s)     # raises if not held here
            out.fill(self.grid_rank)
            return
        owners.lookup(x, out)
        if out.min() < 0:
            raise IndexError(f"global index {_first_bad(x, out >= 0)} is held by "
                             "no grid rank")

    def _g2l_kernel(self, x: np.ndarray, out: np.ndarray,
                    s: List[np.ndarray]) -> None:
        if not self.extent:
            raise self._not_here(x, np.zeros(x.shape, bool))
        dense = self._dense
        if dense is not None:
            np.subtract(x, self._base, out=s[0])
            if s[0].min() < 0 or s[0].max() >= dense.size:
                raise self._not_here(x, (s[0] >= 0) & (s[0] < dense.size))
            out[...] = dense[s[0]]
            if out.min() < 0:
                raise self._not_here(x, out >= 0)
            return
        pos = np.searchsorted(self._sorted, x)
        np.minimum(pos, self.extent - 1, out=pos)
        found = self._sorted[pos] == x
        if not found.all():
            raise self._not_here(x, found)
        np.take(self._order, pos, out=out)

    def _l2g_kernel(self, x: np.ndarray, out: np.ndarray,
                    s: List[np.ndarray]) -> None:
        np.take(self.indices, x, out=out)


def map_from_dim_dict(dd: Dict[str, Any], extent: int, alias: bool = False) -> DimMap:
    """A map for one normalised (validated) 0.10.0 dimension dictionary."""
    dist = dd["dist_type"]
    if dist == "b":
        return BlockMap(dd["size"], dd["proc_grid_size"], dd["proc_grid_rank"],
                        dd["start"], dd["stop"], dd["padding"], dd["periodic"],
                        alias=alias)
    if dist == "c":
        return CyclicMap(dd["size"], dd["proc_grid_size"], dd["proc_grid_rank"],
                         dd["block_size"])
    return UnstructuredMap(dd["size"], dd["proc_grid_size"], dd["proc_grid_rank"],
                           dd["indices"], dd["one_to_one"])
