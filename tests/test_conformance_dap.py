"""DAP 0.10.0 rules of docs/conformance.rst that had no test of their own:
the empty-local-buffer cases E1-E4 must be accepted, not errors."""

from __future__ import annotations

from typing import Any, Dict

import numpy as np
import pytest

from bufferext.distarray import validate


def _dim(**kw: Any) -> Dict[str, Any]:
    return kw


@pytest.mark.parametrize("rule, extent, dim", [
    ("E1", 0, _dim(dist_type="u", size=0, proc_grid_size=1, proc_grid_rank=0,
                   indices=np.zeros(0, dtype=np.int64))),
    ("E1", 0, _dim(dist_type="b", size=0, proc_grid_size=1, proc_grid_rank=0,
                   start=0, stop=0)),
    ("E2", 0, _dim(dist_type="b", size=4, proc_grid_size=2, proc_grid_rank=1,
                   start=4, stop=4)),
    ("E2", 0, _dim(dist_type="c", size=1, proc_grid_size=2, proc_grid_rank=1,
                   start=1)),
    ("E3", 0, _dim(dist_type="b", size=6, proc_grid_size=3, proc_grid_rank=1,
                   start=3, stop=3)),
    ("E4", 0, _dim(dist_type="u", size=10, proc_grid_size=2, proc_grid_rank=1,
                   indices=np.zeros(0, dtype=np.int64))),
])
def test_empty_local_buffers_are_accepted(rule: str, extent: int,
                                          dim: Dict[str, Any]) -> None:
    validate({"__version__": "0.10.0", "buffer": np.zeros(extent),
              "dim_data": (dim,)})
