"""What the MPI layer keeps for one ``DistArray`` (``DistArray._mpi``).

The engines (``_redistribute``, ``_halo``) get this state with the array's
maps and buffer, never the array: what they leave for it (the maps a layout
gather completed) waits in ``MPIState.maps`` until ``DistArray`` takes it."""

from __future__ import annotations

import sys
import weakref
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .._dtypes import name_of
from ._collective import collective_problems
from ._comm import size
from ._datatypes import COUNT_LIMIT
from ._layout import Layout, dim_layout, grid_layout, per_coord
from ._maps import BlockMap, DimMap, UnstructuredMap
from ._protocol import ProtocolError

__all__ = ["MPIState", "Options"]


class Options(NamedTuple):
    """How the MPI layer moves data (tests change them per array).

    ``strategy``: how redistributions move host buffers: ``"pack"`` copies
    strided pieces with numpy into contiguous staging (only the side that
    needs it) and runs one ``Alltoallw`` of plain element counts;
    ``"datatype"`` runs one ``Alltoallw`` of derived datatypes selecting the
    pieces in place; ``"auto"`` hands contiguous pieces to MPI as they are
    and otherwise times both paths on a plan's first calls and keeps the
    faster (``_redistribute.Tuner``).  ``"pack"`` still falls back to
    datatypes past the count limit, and device memory handed to CUDA-aware
    MPI always takes the datatype path.

    ``count_limit``: the largest count one MPI call or datatype constructor
    argument may carry (an MPI int); lowered by tests to exercise the
    chunking.
    """

    strategy: str = "auto"
    count_limit: int = COUNT_LIMIT


class MPIState:
    """One array's communicator and what its MPI operations reuse: the layout
    of every process (gathered and checked once), the redistribution and
    collection plans, the halo plan with the call that runs it, and the CPU
    acquisition that persistent halo requests point into (held as long as
    the array lives, so the memory under those requests cannot go away).
    MPI objects are freed when the array is collected (unless MPI is
    finalized by then)."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.options = Options()
        self.layout: Optional[Layout] = None
        self.plans: Dict[Any, Any] = {}
        self.halo: Any = None
        #: The prepared halo exchange of a CPU array (one ``Sendrecv`` per
        #: dimension), called directly by ``DistArray.update_halos``.
        self.halo_call: Optional[Any] = None
        self.pinned: Any = None
        #: The array's maps completed by the layout gather (every process's
        #: section), kept until the array adopts them.
        self.maps: Optional[Tuple[DimMap, ...]] = None
        self._finalizer: Optional[weakref.finalize] = None

    def keep(self, owner: Any) -> None:
        """Free this state's MPI objects when ``owner`` is collected (from
        the first plan on: before, there is nothing to free)."""
        if self._finalizer is None and (self.plans or self.halo is not None):
            self._finalizer = weakref.finalize(owner, self.close)

    def close(self) -> None:
        """Free the plans' MPI objects and release the pinned buffer."""
        self.halo_call = None
        # no mpi4py imported, no MPI objects made: nothing to free, and no
        # import (a child of a rank importing it hung in MPI_Init)
        running = sys.modules.get("mpi4py.MPI")
        if running is not None and not running.Is_finalized():
            for plan in list(self.plans.values()) + [self.halo]:
                if plan is not None:
                    plan.free()
        self.plans.clear()
        self.halo = None
        if self.pinned is not None:
            self.pinned.release()
            self.pinned = None

    def layout_of(self, maps: Sequence[DimMap], dtype: np.dtype) -> Layout:
        """Every process's layout, from this process's ``maps`` and element
        type (collective the first time, cached afterwards; see
        :meth:`gather_layout`)."""
        if self.layout is None:
            return self.gather_layout(maps, tuple(m.grid_size for m in maps), dtype)
        return self.layout

    def gather_layout(self, maps: Sequence[DimMap], grid: Tuple[int, ...],
                      dtype: np.dtype) -> Layout:
        """Everyone's ``dim_data`` and element type gathered and checked
        (collective; raises the same ProtocolError on every process): the
        layout, with ``maps`` completed with every process's section (block
        bounds, unstructured owner tables) left in :attr:`maps`."""
        comm = self.comm
        mine = (tuple(m.full_dim_dict() for m in maps), _element_type(dtype))
        everyone = [mine] if size(comm) == 1 else comm.allgather(mine)
        all_dims = [dims for dims, _ in everyone]
        problems = collective_problems(all_dims) + _type_problems(
            [kind for _, kind in everyone])
        if problems:
            raise ProtocolError(problems)
        cols = per_coord(all_dims, grid)
        self.maps = tuple(_full_map(m, col) for m, col in zip(maps, cols))
        self.layout = grid_layout([dim_layout(col) for col in cols], grid)
        return self.layout


def _element_type(dtype: np.dtype) -> str:
    """``dtype`` as the processes compare it: its format and item size
    (a structured type's fields too, which its ``'|V<n>'`` leaves out)."""
    return str(dtype) if dtype.names else name_of(dtype)


def _type_problems(types: Sequence[str]) -> List[str]:
    """Where the processes' element types differ (MPI would move one type's
    bytes as another's, or abort on another item size), each rank's."""
    if len(set(types)) <= 1:
        return []
    ranks: Dict[str, List[int]] = {}
    for r, kind in enumerate(types):
        ranks.setdefault(kind, []).append(r)
    return ["the processes' local buffers hold different element types: " + ", ".join(
        f"{kind!r} on rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}"
        for kind, rs in ranks.items())]


def _full_map(m: DimMap, col: Sequence[Dict[str, Any]]) -> DimMap:
    """``m`` knowing every grid coordinate's section along its dimension."""
    if isinstance(m, BlockMap) and m.bounds is None:
        lo = [dd["start"] + (dd["padding"][0] if c else 0) for c, dd in enumerate(col)]
        bounds = np.array(lo + [m.size], dtype=np.int64)
        return BlockMap(m.size, m.grid_size, m.grid_rank, m.start, m.stop, m.padding,
                        m.periodic, bounds=bounds, alias=m.alias)
    if isinstance(m, UnstructuredMap) and m._table is None:
        return UnstructuredMap(m.size, m.grid_size, m.grid_rank, m.indices,
                               m.one_to_one, [dd["indices"] for dd in col])
    return m
