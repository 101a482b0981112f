"""Fuzz the Distributed Array Protocol validator
(bufferext.distarray.validate) with __distarray__ dicts: mostly well-formed
block / cyclic / block-cyclic / unstructured dimensions (0.10.x and 0.9.x)
with fields broken or absurd, plus arbitrary values.

Rule: a rejection is ProtocolError (a ValueError) whose message names a
key or a dimension; validate() never raises anything else.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Source, main  # noqa: E402

validate: Any = None
ProtocolError: Any = None
np: Any = None
bufferext: Any = None

VERSIONS = ["0.10.0", "0.10.0", "0.10.0", "0.9.0", "0.10.1", "0.9.3", "1.0.0",
            "0.8.0", "2.0.0", "0.10", "0.10.0.0", "0.1x.0", "", " 0.10.0"]
KEYS = ["dist_type", "size", "proc_grid_size", "proc_grid_rank", "start",
        "stop", "padding", "periodic", "block_size", "indices", "one_to_one",
        "extra"]


def _int(src: Source, typical: int) -> Any:
    b = src.byte() % 10
    if b < 6:
        return typical
    if b < 9:
        return src.small_int()
    return src.value()


def dim(src: Source, extent: int) -> Any:
    if src.chance(12):
        return src.value()
    if src.chance(8):
        return {}
    kind = src.pick(["b", "c", "u", "b", "n", "x", 1])
    grid = src.pick([1, 2, 3, 4, 0, -1])
    rank = src.byte() % 5 - 1
    d: Dict[str, Any] = {"dist_type": kind,
                         "size": _int(src, extent * max(grid, 1)),
                         "proc_grid_size": _int(src, grid),
                         "proc_grid_rank": _int(src, rank)}
    if kind in ("b", "n"):
        start = _int(src, max(rank, 0) * extent)
        d["start"] = start
        d["stop"] = _int(src, start + extent if isinstance(start, int)
                         else extent)
        if src.chance(3):
            d["padding"] = src.pick([(0, 0), (1, 1), (1, 0), [1, 1], (-1, 0),
                                     (2**70, 0), (1,), src.value()])
        if src.chance(3):
            d["periodic"] = src.pick([True, False, 1, None])
    elif kind == "c":
        block = src.pick([1, 2, 3, 0, -1, 2**63])
        d["start"] = _int(src, max(rank, 0) * (block if isinstance(block, int)
                                               else 1))
        if src.chance():
            d["block_size"] = block
    elif kind == "u":
        n = extent if not src.chance(4) else src.byte() % 6
        d["indices"] = src.pick([
            np.arange(n, dtype=np.int64), np.arange(n)[::-1].copy(),
            np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.uint64),
            np.arange(n, dtype=np.float64), list(range(n)), bytes(n),
            np.full(n, 2**64 - 1, dtype=np.uint64),
            np.arange(2 * n, dtype=np.int32)[::2], src.value()])
        if src.chance(3):
            d["one_to_one"] = src.pick([True, False, 1, None])
    for _ in range(src.byte() % 3 == 0):
        d[src.pick(KEYS)] = src.value()
    if src.chance(6):
        d.pop(src.pick(list(d)), None)
    return d


def make(src: Source) -> Any:
    if src.chance(16):
        return src.value()
    shape = tuple(src.byte() % 4 for _ in range(src.byte() % 4))
    which = src.byte() % 6
    if which < 3:
        buffer: Any = np.zeros(shape)
    elif which == 3:
        buffer = bufferext.CPUBuffer(shape, "int32")
    elif which == 4:
        buffer = bytes(3)
    else:
        buffer = src.value()
    dims = tuple(dim(src, n) for n in shape)
    if src.chance(10):
        dims = dims + (dim(src, 1),)
    out: Dict[str, Any] = {"__version__": src.pick(VERSIONS),
                           "buffer": buffer,
                           "dim_data": dims if not src.chance(12)
                           else list(dims)}
    if src.chance(10):
        out[src.pick(["extra", "buffer", "__version__"])] = src.value()
    if src.chance(10):
        out.pop(src.pick(list(out)))
    return out


def test_one_input(data: bytes) -> None:
    src = Source(data)
    distbuffer = make(src)
    try:
        validate(distbuffer)
    except ProtocolError as exc:
        assert exc.problems and all(isinstance(p, str) for p in exc.problems)
        assert str(exc).startswith("invalid __distarray__ data")


def prepare() -> Callable[[bytes], None]:
    """Import bufferext (after atheris.Setup when fuzzing)."""
    global validate, ProtocolError, np, bufferext
    import numpy
    import bufferext as module
    from bufferext.distarray import ProtocolError as error, validate as check
    validate, ProtocolError, np, bufferext = check, error, numpy, module
    return test_one_input


if __name__ == "__main__":
    main(prepare, lambda: [test_one_input, make, dim, _int])
