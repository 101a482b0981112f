"""Distribution requests: the arguments of ``from_global``, ``scatter`` and
``redistribute`` checked and turned into index maps (``DistSpec``), and the
process-grid rule (``dims_create``).  Process-local; no MPI."""

from __future__ import annotations

import numbers
import operator
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from ._maps import (BlockMap, CyclicMap, DimMap, UnstructuredMap, is_partition,
                    split_bounds)
from ._protocol import comm_padding

__all__ = ["DistSpec", "dims_create"]

Pair = Tuple[int, int]

# -- argument normalisation for from_global --------------------------------

_SCALARS = (bool, int, str, np.bool_, np.integer)


def _per_dim(value: Any, ndim: int, name: str) -> List[Any]:
    if value is None or isinstance(value, _SCALARS):
        return [value] * ndim
    try:
        items = list(value)
    except TypeError:
        items = None
    if items is None or len(items) != ndim:
        raise ValueError(f"{name}={value!r}: need one value (an int, a bool or a "
                         f"str) for every dimension, or one entry per dimension "
                         f"({ndim})")
    return items


def _length(value: Any) -> Optional[int]:
    """``len(value)``, or None for a value that has none."""
    try:
        return len(value)
    except TypeError:
        return None


def _nested(value: Any, depth: int) -> bool:
    """Whether ``value`` is a sequence nested ``depth`` levels below a
    sequence of numbers (used to read 1-D shorthands; an empty sequence is
    one of numbers: a rank that holds no index)."""
    try:
        first = value[0]
    except (TypeError, IndexError, KeyError):
        return False
    if isinstance(first, (numbers.Number, np.generic, str, bytes)) or first is None:
        return False
    if depth == 1:
        return True
    return _nested(first, depth - 1)


def _pair(value: Any, what: str) -> Pair:
    if (not isinstance(value, (tuple, list)) or len(value) != 2
            or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                       and v >= 0 for v in value)):
        raise ValueError(f"{what}={value!r}: must be a (lo, hi) pair of ints >= 0")
    return int(value[0]), int(value[1])


def _paddings(value: Any, grid: int, dim: int) -> List[Pair]:
    """One ``(lo, hi)`` per grid rank from either accepted spelling."""
    if value is None:
        return [(0, 0)] * grid
    what = f"padding[{dim}]"
    if (isinstance(value, (tuple, list)) and len(value) == 2
            and all(isinstance(v, (int, np.integer)) for v in value)):
        pair = _pair(value, what)
        if grid > 1 and pair[0] != pair[1]:
            raise ValueError(
                f"{what}={value!r} on every rank: the protocol requires grid rank "
                "i's right communication padding to equal rank i+1's left one; "
                f"give one (lo, hi) per grid rank ({grid}) instead")
        return [pair] * grid
    if not isinstance(value, (tuple, list)) or len(value) != grid:
        raise ValueError(f"{what}={value!r}: must be one (lo, hi) pair, or one "
                         f"per grid rank along the dimension ({grid})")
    return [_pair(v, f"{what}[{r}]") for r, v in enumerate(value)]


def _block_layout(size: int, grid: int, pads: List[Pair], split: str,
                  dim: int) -> np.ndarray:
    bounds = split_bounds(size, grid, split)
    owned = np.diff(bounds)
    for r in range(grid - 1):
        right, left = pads[r][1], pads[r + 1][0]
        if right != left:
            raise ValueError(f"padding[{dim}]: grid rank {r}'s right padding "
                             f"{right} must equal rank {r + 1}'s left padding {left}")
        if right > owned[r + 1] or left > owned[r]:
            raise ValueError(f"padding[{dim}]: communication padding {right} "
                             f"between grid ranks {r} and {r + 1} is wider than "
                             f"a neighbour's {min(owned[r], owned[r + 1])} "
                             "owned indices")
    low, high = pads[0][0], pads[-1][1]
    if low > owned[0] or high > owned[-1] or (grid == 1 and low + high > size):
        raise ValueError(f"padding[{dim}]: boundary padding ({low}, {high}) is "
                         "wider than the edge ranks' owned indices")
    return bounds


def _unstructured(value: Any, size: int, grid: int, dim: int) -> List[np.ndarray]:
    what = f"indices[{dim}]"
    if value is None or isinstance(value, (str, bytes)) or _length(value) != grid:
        raise ValueError(f"{what}: need one index array per grid rank along the "
                         f"dimension ({grid})" + (
                             "" if _length(value) is not None else
                             f", not {value!r}"))
    out = []
    for r, raw in enumerate(value):
        arr = np.asarray(raw)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise ValueError(f"{what}[{r}]: must be a 1-D sequence of integers")
        arr = arr.astype(np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= size):
            raise ValueError(f"{what}[{r}]: indices must lie in [0, {size})")
        if np.unique(arr).size != arr.size:
            raise ValueError(f"{what}[{r}]: indices must be unique on each rank")
        out.append(arr)
    return out


def dims_create(nprocs: int, fixed: Sequence[Optional[int]]) -> Tuple[int, ...]:
    """A process grid for ``nprocs`` processes, like ``MPI_Dims_create``.

    ``fixed`` has one entry per dimension: an int fixes that dimension's
    size, None leaves it free.  Free sizes are as close to each other as
    the prime factors allow, in non-increasing order.
    """
    nprocs = operator.index(nprocs)
    taken = 1
    for f in fixed:
        if f is not None:
            if f < 1:
                raise ValueError(f"grid size {f}: must be >= 1")
            taken *= f
    free = [i for i, f in enumerate(fixed) if f is None]
    if nprocs < 1 or nprocs % taken or (not free and taken != nprocs):
        raise ValueError(f"{nprocs} processes cannot fill a grid with fixed "
                         f"sizes {tuple(fixed)}")
    rest, primes, p = nprocs // taken, [], 2
    while p * p <= rest:
        while rest % p == 0:
            primes.append(p)
            rest //= p
        p += 1
    if rest > 1:
        primes.append(rest)
    sizes = [1] * len(free)
    for prime in sorted(primes, reverse=True):
        sizes[sizes.index(min(sizes))] *= prime
    sizes.sort(reverse=True)
    out = list(fixed)
    for i, size in zip(free, sizes):
        out[i] = size
    return tuple(int(v) for v in out)  # type: ignore[arg-type]


class DistSpec:
    """A checked distribution request: global shape, ``dist`` letters,
    process grid and per-dimension options, able to make the index map of
    any grid process (``maps(rank)``, or one dimension's ``dim_map``)."""

    def __init__(self, shape: Sequence[int], dist: Any, grid_shape: Any,
                 block_size: Any = None, padding: Any = None, periodic: Any = None,
                 indices: Any = None, split: Optional[str] = "balanced",
                 nprocs: Optional[int] = None) -> None:
        shape = tuple(int(n) for n in shape)
        ndim = len(shape)
        letters = list(dist) if isinstance(dist, (str, list, tuple)) else None
        if (letters is None or len(letters) != ndim
                or not all(d in ("b", "c", "u", "n") for d in letters)):
            raise ValueError(f"dist={dist!r}: need one of 'b', 'c', 'u', 'n' per "
                             f"dimension ({ndim})")
        split = "balanced" if split is None else split
        if split not in ("balanced", "ceil"):
            raise ValueError(f"split={split!r}: must be 'balanced' or 'ceil'")
        if ndim == 1 and padding is not None and len(padding) != 1:
            padding = [padding]             # 1-D shorthand: the dimension's entry
        if ndim == 1 and indices is not None and not _nested(indices, 2):
            indices = [indices]
        idx = _per_dim(indices, ndim, "indices") if indices is not None else [None] * ndim
        if grid_shape is None:
            fixed = [1 if d == "n" else (_length(ix) if d == "u" else None)
                     for d, ix in zip(letters, idx)]
            grid = dims_create(1 if nprocs is None else nprocs, fixed)
        else:
            try:
                given = tuple(grid_shape)
                grid = tuple(operator.index(p) for p in given)
            except TypeError:
                raise ValueError(f"grid_shape={grid_shape!r}: need a sequence of "
                                 "int sizes, one per dimension") from None
            if any(isinstance(p, (bool, np.bool_)) for p in given):
                raise ValueError(f"grid_shape={grid_shape!r}: sizes are ints, not "
                                 "bools")
        if len(grid) != ndim or any(p < 1 for p in grid):
            raise ValueError(f"grid_shape={grid_shape!r}: need one size >= 1 per "
                             f"dimension ({ndim})")
        self.nprocs = int(np.prod(grid, dtype=np.int64))
        if nprocs is not None and self.nprocs != nprocs:
            raise ValueError(f"grid_shape={grid}: holds {self.nprocs} processes, "
                             f"the communicator has {nprocs}")
        self.shape, self.letters, self.grid, self.split = shape, letters, grid, split
        self.blocks = _per_dim(block_size, ndim, "block_size")
        self.block_is_int = isinstance(block_size, (int, np.integer))
        self.pads = padding if padding is None else _per_dim(padding, ndim, "padding")
        self.periodic_all = isinstance(periodic, (bool, np.bool_))
        self.periods = _per_dim(periodic, ndim, "periodic")
        self.indices = idx
        # every dimension checked up front, its shared layout computed once
        self._makers = [
            _dim_maker(letter, shape[i], grid[i],
                       self.blocks[i] if letter == "c" or not self.block_is_int
                       else None,
                       None if self.pads is None else self.pads[i],
                       None if self.periodic_all and letter in "cu"
                       else self.periods[i],
                       idx[i], split, i)
            for i, letter in enumerate(letters)]

    def dim_map(self, dim: int, coord: int) -> DimMap:
        """The map of grid coordinate ``coord`` along dimension ``dim``."""
        return self._makers[dim](coord)

    def maps(self, rank: int) -> List[DimMap]:
        """The maps of process ``rank`` (grid coordinates in C order)."""
        coords = np.unravel_index(rank, self.grid) if self.grid else ()
        return [self.dim_map(i, int(c)) for i, c in enumerate(coords)]


def _dim_maker(letter: str, size: int, grid: int, block: Any, pad: Any,
               periodic: Any, idx: Any, split: str, dim: int
               ) -> Callable[[int], DimMap]:
    """Check one dimension's arguments and compute what its grid
    coordinates share (paddings and bounds; all indices and the owner
    table); the result makes the map of one coordinate."""
    if periodic is not None and not isinstance(periodic, (bool, np.bool_)):
        raise ValueError(f"periodic[{dim}]={periodic!r}: must be a bool")
    periodic = bool(periodic)
    if letter != "c" and block is not None:
        raise ValueError(f"block_size[{dim}]={block!r}: only cyclic ('c') "
                         "dimensions have a block size")
    if letter in ("c", "u") and (pad is not None or periodic):
        raise ValueError(f"dimension {dim} ({letter!r}): padding and periodic "
                         "apply to block ('b') and undistributed ('n') dimensions")
    if letter != "u" and idx is not None:
        raise ValueError(f"indices[{dim}]: only unstructured ('u') dimensions "
                         "take indices")
    if letter == "c":
        b = 1 if block is None else block
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1:
            raise ValueError(f"block_size[{dim}]={block!r}: must be an int >= 1")
        return lambda coord: CyclicMap(size, grid, coord, int(b))
    if letter == "u":
        all_idx = _unstructured(idx, size, grid, dim)
        one_to_one = is_partition(all_idx, size)
        table = UnstructuredMap._owner_table(size, all_idx)
        return lambda coord: UnstructuredMap(size, grid, coord, all_idx[coord],
                                             one_to_one, table=table)
    if letter == "n" and grid != 1:
        raise ValueError(f"grid_shape[{dim}]={grid}: an undistributed ('n') "
                         "dimension needs grid size 1")
    pads = _paddings(pad, grid, dim)
    bounds = _block_layout(size, grid, pads, split, dim)

    def block_map(coord: int) -> DimMap:
        lo, hi = int(bounds[coord]), int(bounds[coord + 1])
        left, right = comm_padding(pads[coord], coord, grid)
        return BlockMap(size, grid, coord, lo - left, hi + right, pads[coord],
                        periodic, bounds=bounds, split=split, alias=letter == "n")
    return block_map
