"""Halo exchange: fill every communication-padding cell from its owner.

Dimension by dimension (so corners are right), each slab spanning the full
local extent of the other dimensions.  CPU arrays use persistent requests
made once per array, over the array's pinned acquisition, strided slabs
going through staging arrays; when every stage is one ``Sendrecv`` the
prepared calls are kept as ``MPIState.halo_call``, which
``DistArray.update_halos`` calls directly.  Device memory is handed
to CUDA-aware MPI (local copies then go through MPI too) or staged.

``halo_plan`` and ``update_halos`` take the array's parts (``MPIState``,
maps, buffer, shape, dtype), not the ``DistArray``.
"""

from __future__ import annotations

from typing import Any, Callable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .._dtypes import wire_dtype
from ._buffers import Acquisitions, Kind
from ._comm import device_to_mpi, mpi, rank, size
from ._datatypes import COUNT_LIMIT, contiguous, count, datatype, index
from ._layout import DimLayout, Layout, Range, Sel, intersect
from ._maps import DimMap
from ._state import MPIState

__all__ = ["Halo", "call_sequence", "halo_plan", "update_halos"]


class Step(NamedTuple):
    """One dimension's part of a persistent CPU exchange: one ``Sendrecv``
    (``op``: its arguments) or persistent requests (``many``: the list),
    the local copies, and the ``(staging, view)`` pairs copied in before
    the exchange and out after it."""

    many: bool
    op: Any
    copies: List[Tuple[Tuple[Sel, ...], Tuple[Sel, ...]]]
    packs: List[Tuple[np.ndarray, Any]]
    unpacks: List[Tuple[np.ndarray, Any]]


class Halo:
    """One rank's halo exchange: per dimension (in order), the sends, the
    receives and the local copies, each a selection of the local buffer."""

    def __init__(self, layout: Layout, me: int, grid: Sequence[int],
                 shape: Sequence[int], limit: int = COUNT_LIMIT) -> None:
        coords = layout.keys(me)
        self.shape, self.limit = tuple(shape), limit
        self.stages: List[Tuple[List[Tuple[int, int, Tuple[Sel, ...]]],
                                List[Tuple[int, int, Tuple[Sel, ...]]],
                                List[Tuple[Tuple[Sel, ...], Tuple[Sel, ...]]]]] = []
        for d, dl in enumerate(layout.dims):
            sends: List[Tuple[int, int, Tuple[Sel, ...]]] = []
            recvs: List[Tuple[int, int, Tuple[Sel, ...]]] = []
            copies: List[Tuple[Tuple[Sel, ...], Tuple[Sel, ...]]] = []
            if not isinstance(dl.held[0], Range):
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

            for x, side, need, dst in needs(dl):
                for c, owned in enumerate(dl.owned):
                    hit = intersect(owned, need)
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
        self.persistent: Optional[Tuple[Any, List[Step], List[Any]]] = None
        self.types: Optional[List[Tuple[List[Any], List[Any]]]] = None
        self.dtype: Optional[np.dtype] = None

    def _spec(self, buf: Any, sels: Tuple[Sel, ...], dtype: np.dtype,
              keep: List[Any], moves: Optional[List[Tuple[np.ndarray, Any]]] = None
              ) -> Any:
        """What MPI gets for one slab: a contiguous slab of a host buffer as
        a view; another one, where ``moves`` is given, as a staging array
        (``(staging, view of the slab)`` appended to ``moves``: the caller
        copies into it before a send, out of it after a receive); else a
        derived datatype.  (MPICH moved a one-column slab of 1024 rows as a
        vector in 380 us, packed by numpy in 9: docs/mpi-internals.rst.)"""
        if isinstance(buf, np.ndarray):
            run = contiguous(sels, self.shape)
            if run is not None and run[1] <= self.limit:
                return buf.reshape(-1)[run[0]:run[0] + run[1]]
            if (moves is not None and count(sels) <= self.limit
                    and all(isinstance(x, tuple) for x in sels)):
                view = buf[index(sels)]        # basic slices: a view
                staging = np.empty(view.shape, buf.dtype)
                moves.append((staging, view))
                return staging.reshape(-1)
        t = datatype(sels, self.shape, dtype, self.limit)
        keep.append(t)
        return [buf, 1, t]

    def free(self) -> None:
        if self.persistent is not None:
            _, steps, types = self.persistent
            for step in steps:
                for r in step.op if step.many else ():
                    r.Free()
            for t in types:
                t.Free()
            self.persistent = None

    def run(self, comm: Any, buf: Any, dtype: np.dtype, persistent: bool) -> None:
        dtype = wire_dtype(dtype)           # buf is Acquired.mpi: wired
        nprocs = size(comm)
        if nprocs == 1 or not any(s or r for s, r, _ in self.stages):
            for _, _, copies in self.stages:
                _copy(buf, copies)
            return
        MPI = mpi()
        if persistent:
            if self.persistent is None or self.persistent[0] is not buf \
                    or self.dtype != dtype:
                self.free()
                self.dtype = dtype
                types: List[Any] = []
                steps: List[Step] = []
                for sends, recvs, copies in self.stages:
                    packs: List[Tuple[np.ndarray, Any]] = []
                    unpacks: List[Tuple[np.ndarray, Any]] = []
                    if (len(sends) == 1 and len(recvs) == 1
                            and sends[0][0] == recvs[0][0]):
                        (peer, stag, ssel), (_, rtag, rsel) = sends[0], recvs[0]
                        op: Any = (self._spec(buf, ssel, dtype, types, packs), peer,
                                   stag, self._spec(buf, rsel, dtype, types, unpacks),
                                   peer, rtag)
                        steps.append(Step(False, op, copies, packs, unpacks))
                    else:
                        op = [comm.Recv_init(self._spec(buf, sel, dtype, types, unpacks),
                                             peer, tag) for peer, tag, sel in recvs]
                        op += [comm.Send_init(self._spec(buf, sel, dtype, types, packs),
                                              peer, tag) for peer, tag, sel in sends]
                        steps.append(Step(True, op, copies, packs, unpacks))
                self.persistent = (buf, steps, types)
            sendrecv = comm.Sendrecv
            for step in self.persistent[1]:
                for staging, view in step.packs:
                    np.copyto(staging, view)
                if not step.many:
                    _copy(buf, step.copies)
                    sendrecv(*step.op)
                else:
                    if step.op:
                        MPI.Prequest.Startall(step.op)
                    _copy(buf, step.copies)
                    if step.op:
                        MPI.Request.Waitall(step.op)
                for staging, view in step.unpacks:
                    np.copyto(view, staging)
            return
        types = []
        try:
            for sends, recvs, copies in self.stages:
                packs, unpacks = [], []
                reqs = [comm.Irecv(self._spec(buf, sel, dtype, types, unpacks), peer, tag)
                        for peer, tag, sel in recvs]
                sent = [self._spec(buf, sel, dtype, types, packs) for _, _, sel in sends]
                for staging, view in packs:
                    np.copyto(staging, view)
                reqs += [comm.Isend(spec, peer, tag)
                         for spec, (peer, tag, _) in zip(sent, sends)]
                if isinstance(buf, np.ndarray):
                    _copy(buf, copies)
                else:                       # device memory, CUDA-aware MPI
                    for src, dst in copies:
                        reqs.append(comm.Irecv(self._spec(buf, dst, dtype, types),
                                               comm.Get_rank(), 999))
                        reqs.append(comm.Isend(self._spec(buf, src, dtype, types),
                                               comm.Get_rank(), 999))
                MPI.Request.Waitall(reqs)
                for staging, view in unpacks:
                    np.copyto(view, staging)
        finally:
            for t in types:
                t.Free()


def _copy(buf: Any, copies: Sequence[Tuple[Tuple[Sel, ...], Tuple[Sel, ...]]]
          ) -> None:
    """A halo stage's local copies (numpy indexing of one process's buffer)."""
    for src, dst in copies:
        buf[index(dst)] = buf[index(src)]


def needs(dl: DimLayout) -> List[Tuple[int, int, Range, int]]:
    """Every grid coordinate's padding to fill along a block dimension:
    ``(coord, side, global range needed as a Range whose base is 0, first
    local slot)``."""
    grid = len(dl.held)
    out: List[Tuple[int, int, Range, int]] = []
    last_held = dl.held[-1]
    assert isinstance(last_held, Range)
    for x in range(grid):
        held, owned = dl.held[x], dl.owned[x]
        assert isinstance(held, Range) and isinstance(owned, Range)
        ext = held.hi - held.lo
        lc, rc = owned.lo - held.lo, held.hi - owned.hi
        if lc:
            out.append((x, 0, Range(held.lo, owned.lo, 0), 0))
        if rc:
            out.append((x, 1, Range(owned.hi, held.hi, 0), ext - rc))
    if dl.periodic and grid:
        lo_b, hi_b = dl.pads[0][0], dl.pads[-1][1]
        size = dl.size
        period = size - lo_b - hi_b
        if lo_b > period or hi_b > period:
            raise ValueError(f"periodic dimension of size {size}: boundary padding "
                             f"({lo_b}, {hi_b}) is wider than the {period} interior "
                             "cells it wraps around")
        if lo_b:
            out.append((0, 0, Range(size - hi_b - lo_b, size - hi_b, 0), 0))
        if hi_b:
            ext = last_held.hi - last_held.lo
            out.append((grid - 1, 1, Range(lo_b, lo_b + hi_b, 0), ext - hi_b))
    return out


def bound_exchange(halo: Halo, comm: Any) -> Optional[Callable[[], None]]:
    """For a CPU array whose persistent plan is built: a callable running
    exactly that plan with nothing else per call (every stage one
    ``Sendrecv`` on ready-made views or staging arrays, no local copies),
    else None."""
    if halo.persistent is None or size(comm) == 1:
        return None
    steps = [t for t in halo.persistent[1] if not t.many or t.op or t.copies]  # not idle
    if not steps or any(t.many or t.copies for t in steps):
        return None
    sendrecv = comm.Sendrecv
    if not any(t.packs or t.unpacks for t in steps):
        return call_sequence(sendrecv, [t.op for t in steps])
    copyto = np.copyto
    plan = [(t.packs, t.op, t.unpacks) for t in steps]

    def run() -> None:
        for packs, op, unpacks in plan:
            for staging, view in packs:
                copyto(staging, view)
            sendrecv(*op)
            for staging, view in unpacks:
                copyto(view, staging)
    return run


def call_sequence(fn: Callable[..., Any], calls: List[Any]) -> Callable[[], None]:
    """A function making every call ``fn(*args)`` of ``calls`` in order (a
    single call directly, without a loop)."""
    if len(calls) == 1:
        only = calls[0]
        return lambda: fn(*only)

    def run() -> None:
        for args in calls:
            fn(*args)
    return run


def halo_plan(state: MPIState, maps: Sequence[DimMap],
              local_shape: Tuple[int, ...], dtype: np.dtype) -> Halo:
    """The halo plan of the array with this state, maps, local shape and
    element type (made once; collective the first time)."""
    if state.halo is None:
        state.halo = Halo(state.layout_of(maps, dtype), rank(state.comm),
                          tuple(m.grid_size for m in maps), local_shape,
                          state.options.count_limit)
    return state.halo


def update_halos(state: MPIState, maps: Sequence[DimMap], buffer: Any,
                 local_shape: Tuple[int, ...], dtype: np.dtype) -> None:
    """``DistArray.update_halos`` (when no prepared call is kept yet)."""
    comm = state.comm
    halo = halo_plan(state, maps, local_shape, dtype)   # raises alike on every rank
    if state.pinned is not None:
        halo.run(comm, state.pinned.mpi, dtype, persistent=True)
        return
    aware = device_to_mpi(comm)
    with Acquisitions(comm) as held:
        local = held.take(lambda: held.add(buffer, local_shape, dtype, write=True,
                                           aware=aware))
        if local.kind is Kind.CPU:
            # persistent requests point into this memory: keep it acquired
            # for the array's lifetime (released by MPIState.close)
            state.pinned = held.detach(local)
            halo.run(comm, local.mpi, dtype, persistent=True)
            state.halo_call = bound_exchange(halo, comm)
        else:
            halo.run(comm, local.mpi, dtype, persistent=False)
