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


def complete(dd: Dict[str, Any]) -> Dict[str, Any]:
    defaults = ({"padding": (0, 0), "periodic": False}
                if dd["dist_type"] == "b" else {"block_size": 1})
    return {**defaults, **dd}


COMPLETE = GOOD + [
    (b(padding=(1, 0), periodic=True), 4),
    (b(proc_grid_size=1, proc_grid_rank=0, start=0, stop=8,
       padding=(0, 0)), 8),
    (c(block_size=2, size=9, proc_grid_size=3, proc_grid_rank=1, start=2),
     3),
]


@pytest.mark.parametrize("dd, extent", COMPLETE)
def test_complete_valid_dimension_is_returned_as_a_copy(
        dd: Dict[str, Any], extent: int) -> None:
    """0.10 data whose every dimension is complete and valid is the common
    case of a distributed operation: it takes the fast path, and comes back
    as a dict of its own (it came back as the provider's dict, which the
    provider could change after validation; review r1)."""
    full = complete(dd)
    (out,) = dims("0.10.0", full, extent)
    assert out == full and out is not full
    (again,) = dims("0.9.0", dict(full), extent)      # the slow route
    assert again == full and again is not full


def u(**d: Any) -> Dict[str, Any]:
    return {"dist_type": "u", "size": 8, "proc_grid_size": 2,
            "proc_grid_rank": 0, **d}


OTHER = [
    (b(foo=1), "dim_data[0]['foo'] = 1: unknown key for dist_type 'b'"),
    ({"dist_type": "x", "size": 4},
     "dim_data[0]['dist_type'] = 'x': must be 'b', 'c' or 'u'"),
    (b(proc_grid_rank=2),
     "dim_data[0]['proc_grid_rank'] = 2: must be < proc_grid_size (2)"),
    (5, "dim_data[0] = 5: must be a dict, not int"),
    (u(indices=np.array([1, 3, 3, 5])), "dim_data[0]['indices'] = "
     "array([1, 3, 3, 5]): values must be locally unique (3 repeats)"),
    (u(indices=np.array([1, 3, 5])), "dim_data[0]['indices'] = "
     "array([1, 3, 5]): has 3 entries, the buffer's extent is 4"),
    (u(indices=np.array([0.5, 1, 2, 3])), "dim_data[0]['indices'] = "
     "array([0.5, 1. , 2. , 3. ]): must be a 1-D buffer of integers"),
    (u(indices=np.array([1, 2, 3, 2**63], dtype=np.uint64)),
     "dim_data[0]['indices'] = " +
     repr(np.array([1, 2, 3, 2**63], dtype=np.uint64)) +
     ": must be a 1-D buffer of integers"),
    (u(), "dim_data[0]: required key 'indices' is missing"),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("dd, message", OTHER,
                         ids=[m[:50] for _, m in OTHER])
def test_other_refusals_word_for_word(version: str, dd: Any,
                                      message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        dims(version, dd, 4)
    assert str(info.value) == "invalid __distarray__ data: " + message


def test_removed_dist_type_n_says_what_replaces_it() -> None:
    dd = {"dist_type": "n", "size": 4}
    assert dims("0.9.0", dd, 4)[0]["dist_type"] == "b"      # 0.9: still valid
    with pytest.raises(ProtocolError) as info:
        dims("0.10.0", dd, 4)
    assert str(info.value) == (
        "invalid __distarray__ data: dim_data[0]['dist_type'] = 'n': 'n' was "
        "removed in 0.10.0: use {} for an undistributed dimension")


@pytest.mark.parametrize("indices", [[1, 2, 3, 2**63], [1, 2, 3, -2**63 - 1]])
def test_legacy_list_indices_must_fit_int64(indices: list) -> None:
    with pytest.raises(ProtocolError, match="must be a 1-D buffer of "
                                            "integers"):
        dims("0.9.0", u(indices=indices), 4)
    edge = [1, 2, 3, 2**63 - 1 if indices[-1] > 0 else -2**63]
    (out,) = dims("0.9.0", u(indices=edge), 4)
    assert out["indices"].dtype == np.int64
    assert out["indices"].tolist() == edge


@pytest.mark.parametrize("version", ["2.0.0", "0.8.0"])
def test_unsupported_version_word_for_word(version: str) -> None:
    with pytest.raises(ProtocolError) as info:
        dims(version, b(), 4)
    assert str(info.value) == (
        f"invalid __distarray__ data: '__version__' = '{version}': "
        "unsupported protocol version (this reader handles 0.9.x and 0.10.x; "
        "a different major version may be incompatible)")
