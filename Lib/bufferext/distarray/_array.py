"""``DistArray``: one process's section of a distributed array.

A ``DistArray`` holds its local buffer (any extended-buffer exporter, CPU
or device), the index maps of every dimension and one ``MPIState`` (its
communicator and what the MPI operations reuse).  The process-local part
(construction, the protocol, index maps) needs no MPI; the collective
methods hand the MPI layer (``_redistribute``, ``_halo``) their parts
(state, maps, buffer, shape, dtype) and build the results themselves.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

from .. import _dtypes
from .._bufferext import as_buffer, get_buffer
from .._flags import BufferFlags
from . import _halo, _redistribute
from ._buffers import Kind, as_kind, held_dtype, host_array, kind_of, make_buffer
from ._comm import agree, call_keys, digest, resolve, same_call, size
from ._layout import Layout
from ._maps import BlockMap, DimMap, map_from_dim_dict
from ._protocol import EXPORT_VERSION, check
from ._spec import DistSpec
from ._redistribute import Out
from ._state import MPIState

__all__ = ["DistArray"]

#: Any layout, read-only, any memory: where a buffer lies.
_ANY_LAYOUT = int(BufferFlags.RECORDS_RO | BufferFlags.DEVICE)

T = TypeVar("T")


def _bridged(buffer: Any) -> Any:
    """A local buffer as given, or through :func:`bufferext.as_buffer` (a
    torch tensor: its DLPack, zero-copy); an object no protocol bridges is
    kept as it is, and checked where it is used (an exporter whose buffer
    only 3.12's ``__buffer__`` makes)."""
    try:
        return as_buffer(buffer)
    except TypeError:
        return buffer


def _shares_memory(a: "DistArray", b: "DistArray") -> bool:
    """Whether two arrays on the same device may share memory: numpy's
    bounds test for CPU memory, else whether the address ranges of their
    buffers' extended-buffer views on one device overlap (MPI may not read
    and write the same memory in one call, which CUDA-aware MPI would do
    for device memory)."""
    if a.device == "cpu":
        return bool(np.may_share_memory(a.local, b.local))
    with get_buffer(a._buffer, _ANY_LAYOUT) as va, get_buffer(b._buffer, _ANY_LAYOUT) as vb:
        return (va.device == vb.device and va.nbytes > 0 and vb.nbytes > 0
                and va.ptr < vb.ptr + vb.nbytes and vb.ptr < va.ptr + va.nbytes)


class DistArray:
    """One process's section of a distributed array (Distributed Array
    Protocol 0.10.0), over a CPU or device buffer.

    Make one with :meth:`from_global`, :meth:`scatter` or
    :meth:`from_distarray`; export it with :meth:`__distarray__`.  The
    constructor wraps a local ``buffer`` (any extended-buffer exporter of
    ``device`` memory, or anything :func:`bufferext.as_buffer` takes, such
    as a torch tensor, zero-copy) laid out by one index map per dimension;
    ``comm`` as in :meth:`from_global`.  The global array that
    :meth:`from_global` and :meth:`scatter` take may be anything
    ``as_buffer`` takes too (bfloat16 and float8 included), or anything
    numpy reads; :meth:`gather` and :meth:`allgather` give numpy arrays,
    which of a low-precision float also export DLPack (``torch.from_dlpack``
    takes them).

        >>> d = DistArray.from_global(np.arange(10), dist="c", grid_shape=(3,), rank=1)
        >>> d.local.tolist(), d.owner(5), d.global_to_local(7)
        ([1, 4, 7], 2, (2,))
    """

    def __init__(self, buffer: Any, maps: Sequence[DimMap], *, device: str = "cpu",
                 dtype: Any = None, comm: Any = None) -> None:
        self._buffer = buffer if isinstance(buffer, np.ndarray) else _bridged(buffer)
        self._maps: Optional[Tuple[DimMap, ...]] = tuple(maps)
        self._dims: Optional[Tuple[Dict[str, Any], ...]] = None
        self._aliases: Tuple[bool, ...] = ()
        self._kind: Optional[Kind] = as_kind(device)
        self._foreign: Optional[str] = None     # another device's name
        self._dtype = None if dtype is None else np.dtype(dtype)
        self._local: Optional[np.ndarray] = None
        self._dim_data: Optional[Tuple[Dict[str, Any], ...]] = None
        self._shape: Tuple[int, ...] = tuple(m.extent for m in self._maps)
        self._mpi = MPIState(resolve(comm))
        self._parts_agreed = False      # see _parts

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

        ``comm``: an mpi4py communicator, or None: every process of the job
        under an MPI launcher (``mpiexec -n N``, N > 1), else one process
        (see :doc:`mpi`).  With a communicator, every process passes the
        same global ``array``; ``rank`` is then the communicator's rank,
        the grid must hold exactly the communicator's processes, and
        argument errors are raised on every process alike.  On one process
        (no launcher, or a communicator of one process such as
        ``MPI.COMM_SELF``) ``rank`` picks the section of a grid of any size.

            >>> DistArray.from_global(np.arange(6), dist="b", grid_shape=(2,), rank=1).local.tolist()
            [3, 4, 5]
        """
        comm = resolve(comm)
        if size(comm) == 1:
            return cls._from_global(array, dist, grid_shape, rank, block_size,
                                    padding, periodic, indices, split, device, comm)
        # every process passes the same global array and distribution: a
        # difference is named at once, with the ranks, not at the next
        # collective as a dim_data problem
        arr = agree(comm, lambda: host_array(array, "from_global: array"))
        args = (("array.shape", arr.shape), ("array.dtype", _dtypes.name_of(arr.dtype)),
                ("dist", dist), ("grid_shape", grid_shape), ("block_size", block_size),
                ("padding", padding), ("periodic", periodic), ("indices", indices),
                ("split", split), ("device", device))
        call, unkeyable = call_keys(comm, "from_global", args)
        same_call(comm, "from_global", args, 0 if call is None else digest(call),
                  error=unkeyable)
        return agree(comm, lambda: cls._from_global(
            arr, dist, grid_shape, comm.Get_rank(), block_size, padding,
            periodic, indices, split, device, comm))

    @classmethod
    def _from_global(cls, array: Any, dist: Any, grid_shape: Any, rank: int,
                     block_size: Any, padding: Any, periodic: Any, indices: Any,
                     split: str, device: str, comm: Any) -> "DistArray":
        arr = host_array(array, "from_global: array")
        nprocs = size(comm)
        spec = DistSpec(arr.shape, dist, grid_shape, block_size, padding, periodic,
                        indices, split, nprocs if nprocs > 1 or grid_shape is None
                        else None)
        if isinstance(rank, (bool, np.bool_)) or not isinstance(
                rank, (int, np.integer)):
            raise TypeError(f"rank={rank!r}: must be an int")
        rank = int(rank)
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
        buffer = make_buffer(device, np.asarray(local, order="C"))   # 0-d kept
        return cls(buffer, maps, device=device, dtype=arr.dtype, comm=comm)

    @classmethod
    def from_distarray(cls, obj: Any, comm: Any = None) -> "DistArray":
        """Import any ``__distarray__`` exporter (or its dict), zero-copy.

        ``comm``: the mpi4py communicator the distributed array lives on
        (None: as in :meth:`from_global`).  With a communicator the import
        is collective:
        a problem on any process is raised on every process, and the
        collective rules are checked (:func:`validate_collective`), after
        which the maps know every process's section.

        Reads 0.10.x and 0.9.x (``'n'`` dimensions become the empty-dict
        alias).  The data are validated first (:class:`ProtocolError`).
        ``'buffer'`` is examined through the extended buffer protocol: CPU
        memory becomes a numpy view (:attr:`local`) without copying; device
        memory stays in the producer object (:attr:`buffer`).
        """
        comm = resolve(comm)
        if comm is not None:
            imported: DistArray = agree(comm, lambda: cls._import(obj))
            imported._mpi = MPIState(comm)
            imported._mpi_layout()          # checks the collective rules
            return imported
        return cls._import(obj)

    @classmethod
    def _import(cls, obj: Any) -> "DistArray":
        """``from_distarray`` on this process alone."""
        if type(obj) is dict:
            data = obj
        elif hasattr(obj, "__distarray__"):
            data = obj.__distarray__()
        else:
            raise TypeError(f"from_distarray: a {type(obj).__name__!r} is neither "
                            "a dict nor an object with __distarray__()")
        checked = check(data)           # what it read is all that is kept
        device = checked.device
        self = cls.__new__(cls)
        self._buffer = checked.buffer
        self._maps = None
        self._dims = checked.dims
        self._aliases = checked.aliases
        self._kind = kind_of(device)
        self._foreign = device if self._kind is None else None
        self._dtype = (held_dtype(checked.format,
                                  f"from_distarray: a {type(checked.buffer).__name__}")
                       if device is not None else None)
        self._local = None
        self._dim_data = None
        self._shape = checked.shape
        self._mpi = MPIState(None)
        self._parts_agreed = False
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
        if self._kind is None:
            assert self._foreign is not None
            return self._foreign
        return self._kind.value

    @property
    def comm(self) -> Any:
        """The mpi4py communicator of the MPI layer, or None (one process,
        started without an MPI launcher)."""
        return self._mpi.comm

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
            if self._kind is not Kind.CPU:
                raise BufferError(f"DistArray: the local buffer is {self.device} "
                                  "memory; use bufferext.get_buffer(d.buffer, "
                                  "BufferFlags.FULL_RO | BufferFlags.DEVICE)")
            buf = self._buffer
            if isinstance(buf, np.ndarray):
                view = buf
            else:
                view = _dtypes.host_view(buf)
                if view.dtype.kind == "V":      # the format's name, not numpy's stand-in
                    held_dtype(memoryview(buf).format, f"DistArray: a {type(buf).__name__}")
            if view.shape != self._shape:
                raise BufferError(f"DistArray: the local buffer, a {type(buf).__name__!r}, "
                                  f"exports shape {view.shape} now; it had shape "
                                  f"{self._shape} when the array was made")
            self._local = view
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

    # -- the MPI layer (_redistribute, _halo) -----------------------------
    def _adopt(self, state: MPIState) -> None:
        """After an engine call, even a failed one: take the maps its layout
        gather completed, and free the plans it made with this array."""
        if state.maps is not None:
            self._maps, state.maps = state.maps, None
        state.keep(self)

    def _parts(self) -> Tuple[Tuple[DimMap, ...], np.dtype]:
        """The maps and dtype an engine takes.  Both are read lazily (an
        imported array's maps, a local buffer's dtype), so a read may raise,
        and on some processes only: reads are agreed, so that every process
        raises alike and none is left waiting in the engine, until one has
        succeeded everywhere (a flag every process sets alike; what one
        process cached says nothing of the others).  Then they are cached
        and cannot fail."""
        if not self._parts_agreed:
            parts = agree(self._mpi.comm, lambda: (self.maps, self.dtype))
            self._parts_agreed = True
            return parts
        return self.maps, self.dtype

    def _engine(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(state, maps, buffer, local_shape, dtype, *args, **kwargs)``:
        an engine given this array's parts (:meth:`_parts`); what its first
        collective call completed is adopted after, even when it fails."""
        state, (maps, dtype) = self._mpi, self._parts()
        try:
            return fn(state, maps, self._buffer, self._shape, dtype, *args, **kwargs)
        finally:
            self._adopt(state)

    def _mpi_layout(self) -> Layout:
        """Every process's layout (collective the first time: everyone's
        dim_data are gathered and checked, and the maps learn the other
        processes' sections; cached afterwards)."""
        def layout(state: MPIState, maps: Sequence[DimMap], buffer: Any,
                   local_shape: Tuple[int, ...], dtype: np.dtype) -> Layout:
            return state.layout_of(maps, dtype)
        return self._engine(layout)

    def _halo_plan(self) -> Any:
        """The halo plan (``_halo.Halo``; collective the first time)."""
        def plan(state: MPIState, maps: Sequence[DimMap], buffer: Any,
                 local_shape: Tuple[int, ...], dtype: np.dtype) -> Any:
            return _halo.halo_plan(state, maps, local_shape, dtype)
        return self._engine(plan)

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
        ``comm`` (None: as in :meth:`from_global`).
        """
        comm = resolve(comm)
        buffer, maps, dtype, layout = _redistribute.scatter(
            array, dist=dist, grid_shape=grid_shape, block_size=block_size,
            padding=padding, periodic=periodic, indices=indices, split=split,
            device=device, comm=comm, root=root)
        out = cls(buffer, maps, device=device, dtype=dtype, comm=comm)
        out._mpi.layout = layout
        return out

    def gather(self, root: int = 0) -> Optional[np.ndarray]:
        """The global array (a numpy array) on process ``root``, None on the
        others.  Collective over :attr:`comm`."""
        return self._engine(_redistribute.gather, root)

    def allgather(self) -> np.ndarray:
        """The global array (a numpy array) on every process.  Collective."""
        return self._engine(_redistribute.allgather)

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
        device = self.device if device is None else device
        target = None if out is None else self._out(out, device)
        buffer, maps, layout = self._engine(
            _redistribute.redistribute, dist=dist, grid_shape=grid_shape,
            block_size=block_size, split=split, padding=padding, periodic=periodic,
            indices=indices, device=device, out=target)
        if out is not None:
            return out
        result = type(self)(buffer, maps, device=device, dtype=self.dtype,
                            comm=self.comm)
        result._mpi.layout = layout
        return result

    def _out(self, out: Any, device: str) -> Out:
        """``redistribute``'s ``out`` as data: a DistArray with this dtype,
        ``device`` and communicator, not sharing this array's memory.  A
        problem is kept, not raised: the engine raises it on every process
        (it checks the distribution itself)."""
        try:
            if not isinstance(getattr(out, "_mpi", None), MPIState):
                raise TypeError(f"out={type(out).__name__}: must be a DistArray")
            if out is self or (out.device == self.device and _shares_memory(out, self)):
                raise ValueError("out: shares memory with the source array")
            if out.comm is not self.comm:
                raise ValueError("out: its comm is not the source array's communicator")
            if out.dtype != self.dtype:
                raise TypeError(f"out.dtype={out.dtype}: must be the source dtype "
                                f"{self.dtype}")
            if out.device != device:
                raise ValueError(f"out.device={out.device!r}: must be {device!r}")
            return Out(out._buffer, out.maps)
        except Exception as exc:       # noqa: BLE001 - raised by the engine
            return Out(None, (), exc)

    def update_halos(self) -> None:
        """Fill communication padding with the neighbours' owned values;
        on periodic dimensions also fill the edge (boundary) padding from
        the opposite end (wrap-around).  Collective over :attr:`comm`."""
        call = self._mpi.halo_call
        if call is not None:            # prepared: one Sendrecv per dimension
            call()
            return
        self._engine(_halo.update_halos)

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
