"""Shared checks for the distarray tests."""

from __future__ import annotations

from typing import Any

import numpy as np

from bufferext.distarray import DistArray


def check_section(d: DistArray, global_array: np.ndarray) -> None:
    """Every local element (padding included) equals the global element its
    map names, and the maps invert each other."""
    local = d.local
    assert local.shape == d.local_shape
    if local.size == 0:
        return
    idx = np.indices(local.shape).reshape(local.ndim, -1)
    g = d.local_to_global(tuple(idx))
    np.testing.assert_array_equal(local[tuple(idx)], global_array[tuple(g)])
    back = d.global_to_local(tuple(g))
    for a, b in zip(back, idx):
        np.testing.assert_array_equal(a, b)
    # element by element too, through the scalar paths
    for flat in range(0, idx.shape[1], max(1, idx.shape[1] // 7)):
        li = tuple(int(x[flat]) for x in idx)
        gi = d.local_to_global(li)
        assert all(isinstance(v, int) for v in gi)
        assert local[li] == global_array[gi]
        assert d.global_to_local(gi) == li


def sections(global_array: np.ndarray, **layout: Any) -> list:
    nprocs = int(np.prod(layout["grid_shape"]))
    return [DistArray.from_global(global_array, rank=r, **layout) for r in range(nprocs)]


def check_tiling(parts: list, global_array: np.ndarray) -> None:
    """The owned parts of all sections cover the global array exactly once
    and every section agrees with owner() on what it owns."""
    count = np.zeros(global_array.shape, dtype=np.int64)
    for d in parts:
        where = [m.owned_global() for m in d.maps]
        count[np.ix_(*where)] += 1
        np.testing.assert_array_equal(d.owned, global_array[np.ix_(*where)])
        if all(w.size for w in where):
            grids = np.meshgrid(*where, indexing="ij")
            np.testing.assert_array_equal(d.owner(tuple(grids)), d.rank)
    assert (count == 1).all()
