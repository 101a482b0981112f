"""``DistArray``: one process's section of a distributed array.

Process-local: a ``DistArray`` holds its local buffer (any extended-buffer
exporter, CPU or device) and the index maps of every dimension.  The MPI
layer (scatter, gather, redistribution, halo exchange) builds on this class:
it sets ``comm`` and supplies the other processes' layout to the maps; no
method here depends on it.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .. import _dtypes
from ._maps import (BlockMap, CyclicMap, DimMap, UnstructuredMap, is_partition,
                    map_from_dim_dict, split_bounds)
from ._protocol import EXPORT_VERSION, check, comm_padding

__all__ = ["DistArray", "DistSpec", "dims_create"]

_DEVICE_NAMES = {"bufferext.cuda": "cuda", "bufferext.ve": "ve"}
_PRODUCERS = {"cpu": "CPUBuffer", "cuda": "CUDABuffer", "ve": "VEBuffer"}
Pair = Tuple[int, int]


def producer_class(device: str) -> Any:
    """The producer type for ``device`` (``"cpu"``, ``"cuda"`` or ``"ve"``).

    Looked up on the ``bufferext`` package at call time, so device producers
    added there are used as soon as they exist.
    """
    import bufferext

    name = _PRODUCERS.get(device) if isinstance(device, str) else None
    if name is None:
        raise ValueError(f"device={device!r}: must be 'cpu', 'cuda' or 've'")
    cls = getattr(bufferext, name, None)
    if cls is None:
        raise bufferext.DeviceUnavailableError(
            f"device={device!r}: bufferext.{name} is not available in this "
            "build of bufferext")
    return cls


# -- argument normalisation for from_global --------------------------------

def _per_dim(value: Any, ndim: int, name: str) -> List[Any]:
    if value is None or isinstance(value, (bool, int, str)):
        return [value] * ndim
    items = list(value)
    if len(items) != ndim:
        raise ValueError(f"{name}={value!r}: need one entry per dimension ({ndim})")
    return items


def _nested(value: Any, depth: int) -> bool:
    """Whether ``value`` is a sequence nested ``depth`` levels below a
    sequence of ints (used to read 1-D shorthands)."""
    try:
        first = value[0]
    except (TypeError, IndexError, KeyError):
        return False
    if isinstance(first, (int, np.integer)) or first is None:
        return False
    if depth == 1:
        return True
    return _nested(first, depth - 1) or (hasattr(first, "__len__") and len(first) == 0)


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
    if value is None or isinstance(value, (str, bytes)) or len(value) != grid:
        raise ValueError(f"{what}: need one index array per grid rank along the "
                         f"dimension ({grid})")
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
        letters = list(dist)
        if len(letters) != ndim or not all(d in ("b", "c", "u", "n") for d in letters):
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
            fixed = [1 if d == "n" else (len(ix) if d == "u" and ix is not None
                                         else None)
                     for d, ix in zip(letters, idx)]
            grid = dims_create(1 if nprocs is None else nprocs, fixed)
        else:
            grid = tuple(operator.index(p) for p in grid_shape)
        if len(grid) != ndim or any(p < 1 for p in grid):
            raise ValueError(f"grid_shape={grid_shape!r}: need one size >= 1 per "
                             f"dimension ({ndim})")
        self.nprocs = int(np.prod(grid, dtype=np.int64))
        if nprocs is not None and self.nprocs != nprocs:
            raise ValueError(f"grid_shape={grid}: holds {self.nprocs} processes, "
                             f"the communicator has {nprocs}")
        self.shape, self.letters, self.grid, self.split = shape, letters, grid, split
        self.blocks = _per_dim(block_size, ndim, "block_size")
        self.block_is_int = isinstance(block_size, int)
        self.pads = padding if padding is None else _per_dim(padding, ndim, "padding")
        self.periodic_all = isinstance(periodic, bool)
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


class DistArray:
    """One process's section of a distributed array (Distributed Array
    Protocol 0.10.0), over a CPU or device buffer.

    Make one with :meth:`from_global` or :meth:`from_distarray`; export it
    with :meth:`__distarray__`.
    """

    def __init__(self, buffer: Any, maps: Sequence[DimMap], *, device: str = "cpu",
                 dtype: Any = None, comm: Any = None) -> None:
        self._buffer = buffer
        self._maps: Optional[Tuple[DimMap, ...]] = tuple(maps)
        self._dims: Optional[Tuple[Dict[str, Any], ...]] = None
        self._aliases: Tuple[bool, ...] = ()
        self._device = device
        self._dtype = None if dtype is None else np.dtype(dtype)
        self._local: Optional[np.ndarray] = None
        self._dim_data: Optional[Tuple[Dict[str, Any], ...]] = None
        self._shape: Tuple[int, ...] = tuple(m.extent for m in self._maps)
        #: The communicator of the MPI layer, or None (process-local).
        self.comm = comm

    # -- construction ------------------------------------------------------
    @classmethod
    def from_global(cls, array: Any, *, dist: Union[str, Sequence[str]],
                    grid_shape: Optional[Sequence[int]] = None, rank: int = 0,
                    block_size: Any = None, padding: Any = None, periodic: Any = None,
                    indices: Any = None, split: str = "balanced",
                    device: str = "cpu", comm: Any = None) -> "DistArray":
        """The section of grid process ``rank`` of the global ``array``.

        ``dist`` has one letter per dimension: ``'b'`` block, ``'c'``
        cyclic/block-cyclic, ``'u'`` unstructured, ``'n'`` undistributed
        (grid size 1, exported as ``{}``).  ``grid_shape`` is the process
        grid (ranks in C order); when omitted it is chosen like
        ``MPI_Dims_create`` for the number of processes (1 for ``'n'``
        dimensions).  ``block_size``: an int for every cyclic
        dimension or one entry per dimension.  ``padding`` (block and
        undistributed dimensions): per dimension None, one ``(lo, hi)`` for
        every rank, or one ``(lo, hi)`` per grid rank; edge padding is
        boundary padding, inner padding communication padding, all filled
        from ``array``.  ``periodic``: a bool or one per dimension.
        ``indices`` (unstructured dimensions): per dimension, one index
        array per grid rank.  ``split``: ``"balanced"`` or ``"ceil"``.
        ``device``: ``"cpu"``, ``"cuda"`` or ``"ve"``.

        ``comm``: an mpi4py communicator.  Every process passes the same
        global ``array``; ``rank`` is then the communicator's rank, the
        grid must hold exactly the communicator's processes, and argument
        errors are raised on every process alike.  ``None``: one process
        (``rank`` picks the section).
        """
        if comm is None:
            return cls._from_global(array, dist, grid_shape, rank, block_size,
                                    padding, periodic, indices, split, device, None)
        from . import _mpi
        return _mpi.agree(comm, lambda: cls._from_global(
            array, dist, grid_shape, comm.Get_rank(), block_size, padding,
            periodic, indices, split, device, comm))

    @classmethod
    def _from_global(cls, array: Any, dist: Any, grid_shape: Any, rank: int,
                     block_size: Any, padding: Any, periodic: Any, indices: Any,
                     split: str, device: str, comm: Any) -> "DistArray":
        arr = np.asarray(array)
        nprocs = 1 if comm is None else comm.Get_size()
        spec = DistSpec(arr.shape, dist, grid_shape, block_size, padding, periodic,
                        indices, split, nprocs if comm is not None or grid_shape is None
                        else None)
        rank = operator.index(rank)
        if not 0 <= rank < spec.nprocs:
            raise ValueError(f"rank={rank}: must be in [0, {spec.nprocs})")
        maps = spec.maps(rank)
        local = arr
        for i, m in enumerate(maps):
            if isinstance(m, BlockMap):
                key = (slice(None),) * i + (slice(m.start, m.stop),)
                local = local[key]
            else:
                local = np.take(local, m.owned_global(), axis=i)
        buffer = _make_buffer(device, np.ascontiguousarray(local))
        return cls(buffer, maps, device=device, dtype=arr.dtype, comm=comm)

    @classmethod
    def from_distarray(cls, obj: Any, comm: Any = None) -> "DistArray":
        """Import any ``__distarray__`` exporter (or its dict), zero-copy.

        ``comm``: the mpi4py communicator the distributed array lives on
        (None: one process).  With a communicator the import is collective:
        a problem on any process is raised on every process, and the
        collective rules are checked (:func:`validate_collective`), after
        which the maps know every process's section.

        Reads 0.10.x and 0.9.x (``'n'`` dimensions become the empty-dict
        alias).  The data are validated first (:class:`ProtocolError`).
        ``'buffer'`` is examined through the extended buffer protocol: CPU
        memory becomes a numpy view (:attr:`local`) without copying; device
        memory stays in the producer object (:attr:`buffer`).
        """
        if comm is not None:
            from . import _mpi
            imported: DistArray = _mpi.import_collective(cls, obj, comm)
            return imported
        data = obj if type(obj) is dict else obj.__distarray__()
        _, shape, device, fmt, dims = check(data)
        self = cls.__new__(cls)
        self._buffer = data["buffer"]
        self._maps = None
        self._dims = dims
        self._aliases = tuple(type(d) is dict and (not d or d.get("dist_type") == "n")
                              for d in data["dim_data"])
        self._device = "cpu" if device is None else _DEVICE_NAMES.get(device, device)
        self._dtype = _dtypes.resolve(fmt)[2] if device is not None else None
        self._local = None
        self._dim_data = None
        self._shape = shape
        self.comm = None
        return self

    # -- the protocol ------------------------------------------------------
    def __distarray__(self) -> Dict[str, Any]:
        """The Distributed Array Protocol 0.10.0 dict of this section."""
        dim_data = self._dim_data
        if dim_data is None:
            dim_data = self._dim_data = tuple(m.dim_dict() for m in self.maps)
        return {"__version__": EXPORT_VERSION, "buffer": self._buffer,
                "dim_data": tuple([dict(d) for d in dim_data])}

    # -- attributes --------------------------------------------------------
    @property
    def maps(self) -> Tuple[DimMap, ...]:
        """One index map per dimension."""
        if self._maps is None:
            assert self._dims is not None
            self._maps = tuple(map_from_dim_dict(d, n, alias)
                               for d, n, alias in zip(self._dims, self._shape,
                                                      self._aliases))
        return self._maps

    @property
    def buffer(self) -> Any:
        """The local producer object (exported as ``'buffer'``)."""
        return self._buffer

    @property
    def device(self) -> str:
        """``"cpu"``, ``"cuda"``, ``"ve"`` (or another device's name)."""
        return self._device

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._shape)

    @property
    def dtype(self) -> np.dtype:
        """Element type."""
        if self._dtype is None:
            self._dtype = self.local.dtype
        return self._dtype

    @property
    def dim_data(self) -> Tuple[Dict[str, Any], ...]:
        """The exported ``dim_data`` (a fresh copy)."""
        out: Tuple[Dict[str, Any], ...] = self.__distarray__()["dim_data"]
        return out

    @property
    def global_shape(self) -> Tuple[int, ...]:
        """Global extent of every dimension (``size``)."""
        return tuple(m.size for m in self.maps)

    @property
    def local_shape(self) -> Tuple[int, ...]:
        """Shape of the local buffer, padding included."""
        return self._shape

    @property
    def grid_shape(self) -> Tuple[int, ...]:
        """Process grid (``proc_grid_size`` of every dimension)."""
        return tuple(m.grid_size for m in self.maps)

    @property
    def grid_coords(self) -> Tuple[int, ...]:
        """This process's coordinates in the grid."""
        return tuple(m.grid_rank for m in self.maps)

    @property
    def rank(self) -> int:
        """This process's rank (grid coordinates in C order)."""
        rank = 0
        for m in self.maps:
            rank = rank * m.grid_size + m.grid_rank
        return rank

    @property
    def local(self) -> np.ndarray:
        """A numpy view of the whole local buffer, padding included (CPU
        memory only; no copy)."""
        if self._local is None:
            if self._device != "cpu":
                raise BufferError(f"DistArray: the local buffer is {self._device} "
                                  "memory; use bufferext.get_buffer(d.buffer, "
                                  "BufferFlags.FULL_RO | BufferFlags.DEVICE)")
            buf = self._buffer
            view = buf if isinstance(buf, np.ndarray) else np.asarray(memoryview(buf))
            self._local = view if view.shape == self._shape else view.reshape(self._shape)
        return self._local

    @property
    def owned(self) -> np.ndarray:
        """A view of the owned part of :attr:`local`: communication padding
        removed (boundary padding belongs to the global array and stays)."""
        return self.local[tuple(m.owned_slice for m in self.maps)]

    def __repr__(self) -> str:
        dist = "".join(m.dist_type for m in self.maps)
        return (f"DistArray(global_shape={self.global_shape}, dist={dist!r}, "
                f"grid_shape={self.grid_shape}, rank={self.rank}, "
                f"local_shape={self.local_shape}, device={self.device!r})")

    # -- the MPI layer (bufferext.distarray._mpi) -------------------------
    @classmethod
    def scatter(cls, array: Any, *, dist: Union[str, Sequence[str]],
                grid_shape: Optional[Sequence[int]] = None, block_size: Any = None,
                padding: Any = None, periodic: Any = None, indices: Any = None,
                split: str = "balanced", device: str = "cpu", comm: Any = None,
                root: int = 0) -> "DistArray":
        """Distribute the global ``array`` held by process ``root`` (the
        others pass None); every process gets its section, padding filled.

        The other arguments are those of :meth:`from_global` and must be
        the same on every process (``indices`` included).  Collective over
        ``comm`` (None: one process).
        """
        from . import _mpi
        scattered: DistArray = _mpi.scatter(cls, array, dist=dist, grid_shape=grid_shape,
                            block_size=block_size, padding=padding, periodic=periodic,
                            indices=indices, split=split, device=device, comm=comm,
                            root=root)
        return scattered

    def gather(self, root: int = 0) -> Optional[np.ndarray]:
        """The global array (a numpy array) on process ``root``, None on the
        others.  Collective over :attr:`comm`."""
        from . import _mpi
        return _mpi.gather(self, root)

    def allgather(self) -> np.ndarray:
        """The global array (a numpy array) on every process.  Collective."""
        from . import _mpi
        return _mpi.allgather(self)

    def redistribute(self, *, dist: Union[str, Sequence[str]],
                     grid_shape: Optional[Sequence[int]] = None, block_size: Any = None,
                     split: Optional[str] = None, padding: Any = None,
                     periodic: Any = None, indices: Any = None,
                     device: Optional[str] = None,
                     out: Optional["DistArray"] = None) -> "DistArray":
        """The same global array in another distribution (arguments as in
        :meth:`from_global`; ``device`` defaults to this array's), moved
        with one all-to-all exchange.  ``out``: an existing DistArray with
        exactly that distribution (e.g. an earlier result), dtype, device and
        communicator, written in place of allocating a new one (every cell,
        padding included, as in a new result) and returned.  Collective over
        :attr:`comm`."""
        from . import _mpi
        moved: DistArray = _mpi.redistribute(self, dist=dist, grid_shape=grid_shape,
                                 block_size=block_size, split=split, padding=padding,
                                 periodic=periodic, indices=indices, device=device,
                                 out=out)
        return moved

    def update_halos(self) -> None:
        """Fill communication padding with the neighbours' owned values;
        on periodic dimensions also fill the edge (boundary) padding from
        the opposite end (wrap-around).  Collective over :attr:`comm`."""
        from . import _mpi
        _mpi.update_halos(self)

    # -- index maps --------------------------------------------------------
    def _split(self, index: Any, what: str) -> Tuple[Any, ...]:
        if self.ndim == 1 and not isinstance(index, tuple):
            index = (index,)
        if not isinstance(index, tuple) or len(index) != self.ndim:
            raise ValueError(f"{what} {index!r}: need a tuple of {self.ndim} "
                             "indices (ints or integer arrays)")
        return index

    def owner(self, global_index: Any) -> Any:
        """Rank (C order) of the process owning ``global_index`` (a tuple of
        ints or of broadcastable integer arrays)."""
        parts = self._split(global_index, "global index")
        rank: Any = 0
        for m, g in zip(self.maps, parts):
            rank = rank * m.grid_size + m.owner(g)
        return rank

    def global_to_local(self, global_index: Any) -> Tuple[Any, ...]:
        """Local index (padding included) of ``global_index`` on this
        process; IndexError if this process's buffer does not hold it."""
        parts = self._split(global_index, "global index")
        return tuple(m.global_to_local(g) for m, g in zip(self.maps, parts))

    def local_to_global(self, local_index: Any) -> Tuple[Any, ...]:
        """Global index of a local index (padding slots included)."""
        parts = self._split(local_index, "local index")
        return tuple(m.local_to_global(x) for m, x in zip(self.maps, parts))


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


def _make_buffer(device: str, host: np.ndarray) -> Any:
    cls = producer_class(device)
    buf = cls(host.shape, host.dtype)
    if host.size:
        buf.copy_from_host(host)
    return buf

