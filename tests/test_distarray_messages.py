"""The Distributed Array Protocol checks of 'b' and 'c' dimensions, word for
word and at their edges.  The 0.9 (legacy) path skips the fast path that
complete 0.10 dimensions take, so both routes are held to the same rules.
Written against the survivors of a mutation run (mutmut) on
distarray/_protocol.py."""

from __future__ import annotations

from typing import Any, Dict

import numpy as np
import pytest

from bufferext.distarray import ProtocolError
from bufferext.distarray._protocol import check

VERSIONS = ["0.9.0", "0.10.0"]


def b(**d: Any) -> Dict[str, Any]:
    return {"dist_type": "b", "size": 8, "proc_grid_size": 2,
            "proc_grid_rank": 1, "start": 4, "stop": 8, **d}


def c(**d: Any) -> Dict[str, Any]:
    return {"dist_type": "c", "size": 8, "proc_grid_size": 2,
            "proc_grid_rank": 1, "start": 1, "block_size": 1, **d}


def dims(version: str, dd: Dict[str, Any], extent: int) -> Any:
    return check({"__version__": version, "buffer": np.zeros(extent),
                  "dim_data": (dd,)})[4]


BAD = [
    (b(proc_grid_rank=0, start=1, stop=5), 4,
     "dim_data[0]['start'] = 1: must be 0 on proc_grid_rank 0"),
    (b(padding=(3, 2)), 4,
     "dim_data[0]['padding'] = (3, 2): wider than the section [4, 8)"),
    (b(start=8, stop=8, padding=(1, 0)), 0,
     "dim_data[0]['padding'] = (1, 0): wider than the section [8, 8)"),
    (b(start=6, stop=5, size=9, proc_grid_rank=0), 0,
     "dim_data[0]['stop'] = 5: must be >= start (6); "
     "dim_data[0]['stop'] = 5: stop - start (5 - 6) must equal the "
     "buffer's extent 0; "
     "dim_data[0]['start'] = 6: must be 0 on proc_grid_rank 0"),
    (b(stop=7), 3,
     "dim_data[0]['stop'] = 7: must equal size (8) on the last grid rank "
     "(the blocks cover [0, size))"),
    (b(stop=9), 5,
     "dim_data[0]['stop'] = 9: must be <= size (8); dim_data[0]['stop'] = 9: "
     "must equal size (8) on the last grid rank (the blocks cover [0, size))"),
    (b(padding=(1, -1)), 4,
     "dim_data[0]['padding'] = (1, -1): must be a 2-tuple of Python ints >= 0"),
    (c(start=0), 4,
     "dim_data[0]['start'] = 0: must be proc_grid_rank * block_size (1)"),
    (c(), 3,
     "dim_data[0]['size'] = 8: grid rank 1 of 2 owns 4 indices with "
     "block_size 1, but the buffer's extent is 3"),
    (c(block_size=0), 4,
     "dim_data[0]['block_size'] = 0: must be >= 1"),
    # one unusable key: that problem alone, no follow-on arithmetic
    (c(proc_grid_size=0), 4,
     "dim_data[0]['proc_grid_size'] = 0: must be >= 1"),
    (c(start="1"), 4,
     "dim_data[0]['start'] = '1': must be a Python int, not str"),
    (c(size=-1), 4, "dim_data[0]['size'] = -1: must be >= 0"),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("dd, extent, message", BAD,
                         ids=[m[:50] for _, _, m in BAD])
def test_dimension_refusal_word_for_word(version: str, dd: Dict[str, Any],
                                         extent: int, message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        dims(version, dd, extent)
    assert str(info.value) == "invalid __distarray__ data: " + message


GOOD = [
    (b(), 4),
    (b(start=8, stop=8, size=8, proc_grid_rank=1), 0),       # stop == start
    (b(padding=(2, 2)), 4),                                  # exactly wide
    (b(proc_grid_rank=0, start=0, stop=4), 4),               # start 0
    (c(), 4),
    (c(size=2, proc_grid_size=4, proc_grid_rank=2, start=2), 0),  # past size
    (c(proc_grid_rank=0, start=0, block_size=1), 4),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("dd, extent", GOOD)
def test_dimension_accepted_and_completed(version: str, dd: Dict[str, Any],
                                          extent: int) -> None:
    (out,) = dims(version, dd, extent)
    defaults = ({"padding": (0, 0), "periodic": False}
                if dd["dist_type"] == "b" else {"block_size": 1})
    assert out == {**defaults, **dd}


def test_legacy_padding_may_be_a_list() -> None:
    (out,) = dims("0.9.0", b(padding=[1, 0]), 4)
    assert out["padding"] == (1, 0)
    with pytest.raises(ProtocolError, match=r"\['padding'\] = \[1, 0\]: must "
                                            r"be a 2-tuple"):
        dims("0.10.0", b(padding=[1, 0]), 4)
