"""Redistribution: the same global array in another distribution, and
scatter, gather and allgather as redistributions from or to "one process
holds everything".

Each is one ``Alltoallw``: per peer, the product over dimensions of the
source's owned set and the target's held set (``_layout.intersect``).  Host
buffers are packed with numpy or selected in place by derived datatypes,
whichever a plan's first calls timed faster (``Options.strategy``); the own
piece is a numpy copy overlapped with the exchange.  Buffers enter MPI
through ``_buffers``.

The functions take the array's parts (``MPIState``, maps, buffer, shape,
dtype), not the ``DistArray``, and give back the result's parts;
``DistArray`` builds the result.
"""

from __future__ import annotations

import operator
import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .._dtypes import LOWP, lowp_dtype, name_of, resolve, wire, wire_dtype
from ._buffers import (Acquisitions, as_kind, host_array, host_result, new_buffer,
                       producer_class)
from ._collective import dim_differences
from ._comm import (agree, call_keys, device_to_mpi, digest, mpi, rank, same_call,
                    size)
from ._datatypes import base_type, contiguous, count, datatype, fast_index, first
from ._layout import Layout, Sel, intersect, root_layout, spec_layout
from ._maps import DimMap
from ._spec import DistSpec
from ._state import MPIState, Options

__all__ = ["Out", "Plan", "allgather", "gather", "redistribute", "scatter"]


#: Staging pieces start at the same address modulo a page as the elements
#: they are copied from or to (4 KiB: the stride at which x86 cores confuse
#: a load with an earlier store to another address, "4K aliasing").  A
#: copy whose target lies a little ahead of its source in that sense ran
#: 2.5-3x slower (2 MiB pieces, an AMD EPYC, numpy), longer than the
#: exchange itself.
PAGE = 4096


class Side:
    """One side (send or receive) of a packed exchange: per peer, the numpy
    index and element count, and whether the buffer itself can be handed to
    MPI (every peer's piece contiguous) or goes through staging."""

    def __init__(self, sels: Sequence[Optional[Tuple[Sel, ...]]], shape: Tuple[int, ...],
                 me: int) -> None:
        self.counts = [0 if p == me else count(s) for p, s in enumerate(sels)]
        self.shapes = [tuple(count((x,)) for x in s) if s is not None else ()
                       for s in sels]
        self.index = [None if s is None or p == me else fast_index(s)
                      for p, s in enumerate(sels)]
        runs = [contiguous(s, shape) if c and s is not None else None
                for c, s in zip(self.counts, sels)]
        self.direct = all(r is not None for c, r in zip(self.counts, runs) if c)
        if self.direct:             # displacements into the buffer itself
            self.displs = [r[0] if r is not None else 0 for r in runs]
        else:                       # into the staging array, each large piece
            self.displs = []        # congruent to its first element (PAGE)
            end = 0
            for c, s in zip(self.counts, sels):
                if c >= PAGE and s is not None:
                    end += (first(s, shape) - end) % PAGE
                self.displs.append(end)
                end += c
        self.total = max([d + c for d, c in zip(self.displs, self.counts)] + [0])
        self.staging: Optional[np.ndarray] = None

    def fits(self, itemsize: int, limit: int) -> bool:
        """Whether counts and byte displacements fit an MPI int."""
        return max(self.counts + [(d + c) * itemsize for d, c in
                                  zip(self.displs, self.counts)]) <= limit

    def stage(self, like: np.ndarray) -> np.ndarray:
        """The staging array for copies from or to ``like``: its start
        congruent to ``like``'s modulo PAGE (kept between calls)."""
        size = self.total * like.itemsize
        if self.staging is None or self.staging.size < size + PAGE:
            self.staging = np.empty(size + PAGE, np.uint8)
        skip = (like.ctypes.data - self.staging.ctypes.data) % PAGE
        return self.staging[skip:skip + size].view(like.dtype)


#: Timed calls of each host path before ``"auto"`` settles; one more call
#: of each comes first, untimed (it builds the datatypes or touches the
#: staging).
TRIALS = 2
HOST_PATHS = ("pack", "datatype")


class Tuner:
    """``Options.strategy="auto"`` where staging is needed: the plan's first
    calls alternate the two host paths, timed, then the rank keeps the
    faster.  How fast MPI moves a derived datatype depends on the library,
    its version and the host (MPICH reads some straight from the sender's
    memory in one copy, and packs others several times slower than numpy
    copies them), so the choice is measured, not guessed.  Each rank
    chooses alone, with no collective call that a rank on another path
    would miss: the paths' type signatures match.  (A rank's time is that
    of the whole exchange, so the ranks mostly choose alike.)"""

    __slots__ = ("calls", "best", "choice")

    def __init__(self) -> None:
        self.calls = 0
        self.best = [float("inf")] * len(HOST_PATHS)
        self.choice: Optional[str] = None

    def next(self) -> str:
        return HOST_PATHS[self.calls % len(HOST_PATHS)]

    def record(self, path: str, seconds: float) -> None:
        self.calls += 1
        if self.calls > len(HOST_PATHS):            # past the untimed calls
            k = HOST_PATHS.index(path)
            self.best[k] = min(self.best[k], seconds)
        if self.calls == len(HOST_PATHS) * (TRIALS + 1):
            self.choice = HOST_PATHS[self.best.index(min(self.best))]


class Plan:
    """One rank's part of a redistribution: per peer, the selection it
    sends from its source buffer and receives into its target buffer."""

    def __init__(self, src: Layout, tgt: Layout, me: int, nprocs: int,
                 options: Options = Options()) -> None:
        for dim in list(src.dims) + list(tgt.dims):
            if dim.cellless:            # the same layouts, so on every rank
                raise ValueError(dim.cellless)
        cache: Dict[Tuple[int, int, int], Optional[Tuple[Sel, Sel]]] = {}

        def piece(d: int, ks: int, kt: int) -> Optional[Tuple[Sel, Sel]]:
            key = (d, ks, kt)
            if key not in cache:
                cache[key] = intersect(src.dims[d].owned[ks], tgt.dims[d].held[kt])
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

        self.me, self.options = me, options
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
        self.packed: Optional[Tuple[Side, Side]] = None
        #: The packed path's MPI arguments for one dtype: (dtype, base type,
        #: whether we made it, types, send and receive byte displacements).
        self.packing: Optional[Tuple[np.dtype, Any, bool, List[Any], List[int],
                                     List[int]]] = None
        s, r = self.sends[me], self.recvs[me]
        self.own = None if s is None or r is None else (fast_index(s), fast_index(r))
        #: Whether the receives (disjoint: owned sets are) fill every cell
        #: of the target, so that it may start with any contents.
        self.fills_target = sum(map(count, self.recvs)) == int(np.prod(self.tgt_shape))
        #: What ``redistribute`` keeps with a cached plan: the target layout
        #: and this rank's maps in it, and the ``digest`` of the arguments.
        self.target: Optional[Tuple[Layout, List[DimMap]]] = None
        self.signature = 0
        self.tuner = Tuner()

    def free(self) -> None:
        self._free_types()
        self._free_packing()

    def _free_types(self) -> None:
        if self.types is not None:
            for t in self.types[0] + self.types[1]:
                if t is not None:
                    t.Free()
            self.types = self.typed = None

    def _free_packing(self) -> None:
        if self.packing is not None:
            if self.packing[2]:
                self.packing[1].Free()
            self.packing = None

    def _sides(self) -> Tuple[Side, Side]:
        if self.packed is None:
            self.packed = (Side(self.sends, self.src_shape, self.me),
                           Side(self.recvs, self.tgt_shape, self.me))
        return self.packed

    def strategy(self, itemsize: int) -> str:
        """The path host buffers take: ``"pack"``, ``"datatype"``, or
        ``"auto"`` while the tuner times both.  Both are one ``Alltoallw``
        with matching type signatures (n base elements or one derived type
        of n), so each rank may choose alone."""
        strategy, limit = self.options
        if strategy == "datatype":
            return "datatype"
        snd, rcv = self._sides()
        if not (snd.fits(itemsize, limit) and rcv.fits(itemsize, limit)):
            return "datatype"
        if strategy == "pack" or (snd.direct and rcv.direct):
            return "pack"               # (nothing to pack: plain counts)
        return self.tuner.choice or "auto"

    def run(self, comm: Any, src: Any, tgt: Any, dtype: np.dtype) -> None:
        """Move the data: ``src`` and ``tgt`` are host arrays (or device
        producers with CUDA-aware MPI)."""
        src, tgt, dtype = wire(src), wire(tgt), wire_dtype(dtype)
        nprocs = size(comm)
        if nprocs == 1:
            if self.own is not None:
                tgt[self.own[1]] = src[self.own[0]]
            return
        if not (isinstance(src, np.ndarray) and isinstance(tgt, np.ndarray)):
            self._run_types(comm, src, tgt, dtype)
            return
        path = self.strategy(dtype.itemsize)
        if path != "auto":
            self._run_host(path, comm, src, tgt, dtype)
            return
        path = self.tuner.next()
        start = time.perf_counter()
        self._run_host(path, comm, src, tgt, dtype)
        self.tuner.record(path, time.perf_counter() - start)

    def _run_host(self, path: str, comm: Any, src: np.ndarray, tgt: np.ndarray,
                  dtype: np.dtype) -> None:
        if path == "pack":
            self._run_packed(comm, src, tgt, dtype)
        else:
            self._run_types(comm, src, tgt, dtype)

    def _run_packed(self, comm: Any, src: np.ndarray, tgt: np.ndarray,
                    dtype: np.dtype) -> None:
        """numpy copies into contiguous staging, one ``Alltoallv``, numpy
        copies out; the own piece goes straight from ``src`` to ``tgt``."""
        snd, rcv = self._sides()
        if self.packing is None or self.packing[0] != dtype:
            self._free_packing()
            base, own_base = base_type(dtype)
            size = dtype.itemsize
            self.packing = (dtype, base, own_base, [base] * len(snd.counts),
                            [x * size for x in snd.displs],
                            [x * size for x in rcv.displs])
        _, _, _, types, sdispls, rdispls = self.packing
        if snd.direct:
            sbuf = src.reshape(-1)
        else:
            sbuf = snd.stage(src)
            for p, idx in enumerate(snd.index):
                if snd.counts[p]:
                    n0 = snd.displs[p]
                    sbuf[n0:n0 + snd.counts[p]].reshape(snd.shapes[p])[...] = src[idx]
        rbuf = tgt.reshape(-1) if rcv.direct else rcv.stage(tgt)
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
            self._free_types()
            self.dtype = dtype
            limit = self.options.count_limit
            self.types = (
                [None if s is None else datatype(s, self.src_shape, dtype, limit)
                 for s in self.sends],
                [None if r is None else datatype(r, self.tgt_shape, dtype, limit)
                 for r in self.recvs])
            MPI = mpi()
            stypes = [t if t is not None else MPI.BYTE for t in self.types[0]]
            rtypes = [t if t is not None else MPI.BYTE for t in self.types[1]]
            scounts = [0 if t is None else 1 for t in self.types[0]]
            rcounts = [0 if t is None else 1 for t in self.types[1]]
            sown, rown = list(scounts), list(rcounts)
            sown[self.me] = rown[self.me] = 0
            self.typed = (stypes, rtypes, [0] * size(comm), (scounts, rcounts),
                          (sown, rown))
        assert self.typed is not None
        stypes, rtypes, zeros, counts, own_copied = self.typed
        local = (isinstance(src, np.ndarray) and isinstance(tgt, np.ndarray)
                 and self.own is not None)
        # local: our own piece is a numpy copy, overlapped
        scounts, rcounts = own_copied if local else counts
        req = comm.Ialltoallw([src, scounts, zeros, stypes],
                              [tgt, rcounts, zeros, rtypes])
        if local:
            assert self.own is not None
            tgt[self.own[1]] = src[self.own[0]]
        req.Wait()




def _check_root(comm: Any, root: Any) -> int:
    root = operator.index(root)
    if not 0 <= root < size(comm):
        raise ValueError(f"root={root}: must be in [0, {size(comm)})")
    return int(root)


def scatter(array: Any, *, dist: Any, grid_shape: Any = None,
            block_size: Any = None, padding: Any = None, periodic: Any = None,
            indices: Any = None, split: str = "balanced", device: str = "cpu",
            comm: Any = None, root: int = 0
            ) -> Tuple[Any, List[DimMap], np.dtype, Layout]:
    """``DistArray.scatter``: root's global array to every process's
    section, as ``(buffer, maps, dtype, layout)``."""
    me = rank(comm)
    if size(comm) > 1:
        args = (("dist", dist), ("grid_shape", grid_shape), ("block_size", block_size),
                ("padding", padding), ("periodic", periodic), ("indices", indices),
                ("split", split), ("root", root))
        call, unkeyable = call_keys(comm, "scatter", args)
        same_call(comm, "scatter", args, 0 if call is None else digest(call),
                  error=unkeyable)

    host: List[np.ndarray] = []

    def header() -> Tuple[Tuple[int, ...], str]:
        r = _check_root(comm, root)
        producer_class(device)
        if me == r:
            if array is None:
                raise ValueError(f"array=None on the root process {r}: the root "
                                 "passes the global array")
            arr = host_array(array, "scatter: array")
            if arr.dtype.hasobject:
                raise TypeError(f"array of dtype {arr.dtype}: object arrays cannot "
                                "be sent")
            resolve(arr.dtype)          # one a DistArray holds (a record is not)
            host.append(arr)
            return arr.shape, name_of(arr.dtype)
        return (), ""

    shape, dstr = agree(comm, header)
    if size(comm) > 1:
        shape, dstr = comm.bcast((shape, dstr), root=root)
    dtype = lowp_dtype(dstr) if dstr in LOWP else np.dtype(dstr)
    spec = agree(comm, lambda: DistSpec(shape, dist, grid_shape, block_size, padding,
                                        periodic, indices, split, size(comm)))
    maps = spec.maps(me)
    local_shape = tuple(m.extent for m in maps)
    tgt_layout = spec_layout(spec)
    src = (np.asarray(host[0], dtype=dtype, order="C") if me == root
           else np.empty((0,) * len(shape), dtype))
    plan = Plan(root_layout(shape, root), tgt_layout, me, size(comm))
    aware = device_to_mpi(comm)
    try:
        with Acquisitions(comm) as held:
            def take() -> Tuple[Any, Any]:
                buf = new_buffer(device, local_shape, dtype, plan.fills_target)
                return buf, held.add(buf, local_shape, dtype, write=True, aware=aware,
                                     read=not plan.fills_target)
            buffer, tgt = held.take(take)
            plan.run(comm, src, tgt.mpi, dtype)
    finally:
        plan.free()
    return buffer, maps, dtype, tgt_layout


def _collect(state: MPIState, maps: Sequence[DimMap], buffer: Any,
             local_shape: Tuple[int, ...], dtype: np.dtype,
             root: Optional[int]) -> Optional[np.ndarray]:
    comm = state.comm
    if size(comm) > 1:
        # allgather is root=None: a gather on one process and an allgather
        # on another differ in it, as two roots do
        args = (("root", root),)
        call, unkeyable = call_keys(comm, "gather", args)
        same_call(comm, "gather", args, 0 if call is None else digest(call),
                  error=unkeyable)
    if root is not None:
        root = agree(comm, lambda: _check_root(comm, root))
    me = rank(comm)
    src_layout = state.layout_of(maps, dtype)   # raises alike on every rank
    shape = tuple(m.size for m in maps)
    key = ("collect", root, state.options)
    plan = state.plans.get(key)
    if plan is None:
        plan = state.plans[key] = Plan(src_layout, root_layout(shape, root), me,
                                       size(comm), state.options)
    out = host_result(shape if root is None or me == root else (0,) * len(shape),
                      dtype, zeroed=not plan.fills_target)
    aware = device_to_mpi(comm)
    with Acquisitions(comm) as held:
        src = held.take(lambda: held.add(buffer, local_shape, dtype, write=False,
                                         aware=aware))
        plan.run(comm, src.mpi, out, dtype)
    return out if root is None or me == root else None


def gather(state: MPIState, maps: Sequence[DimMap], buffer: Any,
           local_shape: Tuple[int, ...], dtype: np.dtype, root: int = 0
           ) -> Optional[np.ndarray]:
    """``DistArray.gather``: the global array on ``root``, None elsewhere."""
    return _collect(state, maps, buffer, local_shape, dtype, root)


def allgather(state: MPIState, maps: Sequence[DimMap], buffer: Any,
              local_shape: Tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``DistArray.allgather``: the global array on every process."""
    out = _collect(state, maps, buffer, local_shape, dtype, None)
    assert out is not None
    return out


class Out(NamedTuple):
    """``redistribute(out=...)`` as data: the target's buffer and maps, or
    the problem ``DistArray`` found with it, raised where the buffers are
    taken so that every process raises it."""

    buffer: Any
    maps: Sequence[DimMap]
    problem: Optional[Exception] = None


def _check_out(out: Out, maps: Sequence[DimMap]) -> None:
    """``out=`` of ``redistribute``: the target distribution (the rest was
    checked by ``DistArray``, into ``out.problem``)."""
    if out.problem is not None:
        raise out.problem
    want = [m.full_dim_dict() for m in maps]
    have = [m.full_dim_dict() for m in out.maps]
    if len(have) != len(want):
        raise ValueError(f"out: it has {len(have)} dimensions, the requested "
                         f"distribution {len(want)}")
    for i, (a, b) in enumerate(zip(have, want)):
        keys = dim_differences(a, b)
        if "dist_type" in keys:         # the other keys follow from it
            keys = ["dist_type"]
        if keys:
            raise ValueError(f"out: dimension {i} is not the requested "
                             "distribution's: " + ", ".join(
                                 f"{k}={a.get(k)!r} where {b.get(k)!r} is requested"
                                 for k in keys))


def redistribute(state: MPIState, maps: Sequence[DimMap], buffer: Any,
                 local_shape: Tuple[int, ...], dtype: np.dtype, *, dist: Any,
                 grid_shape: Any = None, block_size: Any = None,
                 split: Optional[str] = None, padding: Any = None, periodic: Any = None,
                 indices: Any = None, device: str, out: Optional[Out] = None
                 ) -> Tuple[Any, List[DimMap], Layout]:
    """``DistArray.redistribute``: the same global array, another
    distribution (on ``device``), as ``(buffer, maps, layout)``; the
    buffer is ``out.buffer`` if ``out`` is given."""
    comm = state.comm
    me = rank(comm)

    args = (("dist", dist), ("grid_shape", grid_shape), ("block_size", block_size),
            ("split", split), ("padding", padding), ("periodic", periodic),
            ("indices", indices))            # (the device may differ per process)
    # keyed by the arguments' contents (an index array changed in place is
    # another call); an argument with none raises on every process
    call, unkeyable = call_keys(comm, "redistribute", args)
    try:
        as_kind(device)     # in the key: one bad process raises on every one
    except ValueError as exc:
        if size(comm) == 1:
            raise
        call, unkeyable = None, unkeyable or exc
    key = None if call is None else ("redistribute",) + call + (device, state.options)
    entry = None if key is None else state.plans.get(key)
    signature = (entry.signature if entry is not None
                 else 0 if call is None else digest(call))
    if size(comm) > 1 and same_call(comm, "redistribute", args, signature, entry is None,
                                    unkeyable):
        entry = None                    # someone has no plan: all take the slow path
    assert key is not None              # (else call_keys or same_call raised)
    if entry is None:
        def prepare() -> Any:
            producer_class(device)
            return DistSpec(tuple(m.size for m in maps), dist, grid_shape, block_size,
                            padding, periodic, indices, split, size(comm))

        spec = agree(comm, prepare)
        src_layout = state.layout_of(maps, dtype)   # raises alike on every rank
        tgt_layout = spec_layout(spec)
        entry = Plan(src_layout, tgt_layout, me, size(comm), state.options)
        entry.target = (tgt_layout, spec.maps(me))
        entry.signature = signature
        state.plans[key] = entry            # same key on every rank: same path
    assert entry.target is not None
    tgt_layout, tgt_maps = entry.target
    shape = tuple(m.extent for m in tgt_maps)
    fills = entry.fills_target
    aware = device_to_mpi(comm)
    with Acquisitions(comm) as held:
        def take() -> Tuple[Any, Any, Any]:
            if out is not None:
                _check_out(out, tgt_maps)
            buf = out.buffer if out is not None else new_buffer(device, shape, dtype,
                                                                 fills)
            src = held.add(buffer, local_shape, dtype, write=False, aware=aware)
            # a new buffer is zeroed unless the plan fills it; out= as well
            return buf, src, held.add(buf, shape, dtype, write=True, aware=aware,
                                      read=not fills,
                                      zero=out is not None and not fills)
        result, src, tgt = held.take(take)
        entry.run(comm, src.mpi, tgt.mpi, dtype)
    return result, tgt_maps, tgt_layout
