"""Edge rules a mutation run found unguarded: each test fails when the rule
it names is planted out (issue 12, "Tests that bite")."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest

import bufferext
from bufferext.distarray import ProtocolError, validate
from bufferext.distarray._protocol import check


def only_problem(data: dict) -> str:
    with pytest.raises(ProtocolError) as info:
        validate(data)
    assert len(info.value.problems) == 1, info.value.problems
    return info.value.problems[0]


def block(**kw: object) -> dict:
    d = {"dist_type": "b", "size": 4, "proc_grid_size": 2,
         "proc_grid_rank": 0, "start": 0, "stop": 2}
    d.update(kw)
    return d


def export(n: int, *dims: dict, version: str = "0.10.0") -> dict:
    return {"__version__": version, "buffer": np.zeros(n),
            "dim_data": tuple(dims)}


def test_block_stop_is_bounded_by_size() -> None:
    # rank 0 of 2, so only "stop <= size" can object to [0, 5) of size 4
    assert only_problem(export(5, block(stop=5))) == \
        "dim_data[0]['stop'] = 5: must be <= size (4)"


def test_empty_cyclic_section_starts_at_size() -> None:
    # rank 3 of 4 over 2 indices owns nothing: its start is rank * block (3)
    # or, clipped, the size (2)
    for start in (2, 3):
        validate(export(0, {"dist_type": "c", "size": 2,
                            "proc_grid_size": 4, "proc_grid_rank": 3,
                            "start": start}))
    assert only_problem(export(0, {"dist_type": "c", "size": 2,
                                   "proc_grid_size": 4, "proc_grid_rank": 3,
                                   "start": 1})) == \
        "dim_data[0]['start'] = 1: must be proc_grid_rank * block_size (3)"


def test_09_import_keeps_padding_and_periodic() -> None:
    n = {"dist_type": "n", "size": 4, "padding": (1, 1), "periodic": True}
    dims = check(export(4, n, version="0.9.0"))[4]
    assert dims[0]["dist_type"] == "b"
    assert dims[0]["padding"] == (1, 1) and dims[0]["periodic"] is True
    b = block(size=6, stop=4, padding=(0, 1), periodic=True)
    dims = check(export(4, b, version="0.9.2"))[4]
    assert dims[0]["padding"] == (0, 1) and dims[0]["periodic"] is True


@pytest.mark.parametrize("fmt, itemsize, good", [
    ("<l", 4, True), ("<l", 8, False), ("l", 8, True), ("=q", 8, True),
    ("!h", 2, True), ("!h", 4, False), ("<?", 1, True), ("<e", 2, True),
    ("<Zd", 16, True), ("=i", 4, True), ("=i", 8, False), ("<L", 4, True),
])
def test_struct_formats_with_standard_sizes(c99: ModuleType, fmt: str,
                                            itemsize: int,
                                            good: bool) -> None:
    # a byte-order prefix gives struct's standard sizes ('<l' is 4 bytes
    # where the native 'l' is 8): an exporter's itemsize must match
    exporter = c99.Configurable(4 * itemsize, 4 * itemsize, itemsize, 1,
                                fmt, shape=(4,))
    if good:
        with bufferext.get_buffer(exporter) as view:
            assert view.itemsize == itemsize and view.format == fmt
    else:
        with pytest.raises(BufferError, match=f"format '{fmt}' does not "
                                              f"describe items of itemsize"):
            bufferext.get_buffer(exporter)
