"""The rules of the Distributed Array Protocol that need every process's
``dim_data`` (the process-local ones are in ``_protocol``)."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import numpy as np

from ._comm import agree, resolve, size
from ._layout import per_coord
from ._maps import is_partition
from ._protocol import ProtocolError, check, comm_padding

__all__ = ["collective_problems", "dim_differences", "validate_collective"]


def dim_differences(a: Dict[str, Any], b: Dict[str, Any]) -> List[str]:
    """The keys in which two normalised dimension dictionaries differ
    (sorted; a key only one has counts)."""
    out = []
    for k in sorted(a.keys() | b.keys()):
        if k not in a or k not in b:
            out.append(k)
        elif k == "indices":
            if not np.array_equal(a[k], b[k]):
                out.append(k)
        elif a[k] != b[k]:
            out.append(k)
    return out


def _axis_problems(d: int, col: List[Dict[str, Any]]) -> List[str]:
    """Padding symmetry, neighbour widths and coverage along one axis."""
    problems: List[str] = []
    first = col[0]
    extent, grid = first["size"], len(col)
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
                                f"tile [0, {extent}))")
        if hi[-1] != extent:
            problems.append(f"dim {d}: the owned ranges end at {hi[-1]}, not at size "
                            f"{extent}")
    elif first["dist_type"] == "u" and first["one_to_one"]:
        if not is_partition([np.asarray(dd["indices"]) for dd in col], extent):
            problems.append(f"dim {d}: one_to_one is True but the indices of the "
                            f"{grid} grid ranks are not a partition of [0, {extent})")
    return problems


_AXIS_KEYS = ("dist_type", "size", "proc_grid_size", "block_size", "periodic",
              "one_to_one")


def collective_problems(all_dims: Sequence[Sequence[Dict[str, Any]]]) -> List[str]:
    """Every rule that needs all processes' (normalised) dimension
    dictionaries; the same list on every process that passes the same
    ``all_dims``."""
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
    cols = per_coord(all_dims, grid)
    for r, dims in enumerate(all_dims):
        for d, dd in enumerate(dims):
            c = dd["proc_grid_rank"]
            ref = cols[d][c]
            keys = dim_differences(dd, ref)
            if keys == ["padding"] and (comm_padding(dd["padding"], c, grid[d]) ==
                                        comm_padding(ref["padding"], c, grid[d])):
                continue        # boundary padding may differ at the edges (0.10)
            if keys:
                problems.append(
                    f"rank {r}: dim_data[{d}] differs from that of the other "
                    f"processes at grid rank {c} along dim {d}: " + ", ".join(
                        f"{k}={dd.get(k)!r} where they have {ref.get(k)!r}"
                        for k in keys))
    if problems:
        return problems
    for d in range(ndim):
        problems.extend(_axis_problems(d, cols[d]))
    return problems


def validate_collective(distbuffer: Any, comm: Any = None) -> None:
    """Check ``__distarray__`` data against the rules needing every process.

    Collective over ``comm`` (None: every process of the job under an MPI
    launcher, else one process; see :doc:`mpi`): the local rules first
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
    comm = resolve(comm)

    def local_dims() -> Any:
        # the export too is agreed: one raising on one process only left
        # the others waiting in the allgather below
        data = distbuffer
        if type(data) is not dict and hasattr(data, "__distarray__"):
            data = data.__distarray__()
        return check(data).dims

    dims = agree(comm, local_dims)
    everyone = [dims] if size(comm) == 1 else comm.allgather(dims)
    problems = collective_problems(everyone)     # same verdict on every rank
    if problems:
        raise ProtocolError(problems)
