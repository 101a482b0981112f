"""Validation of ``__distarray__`` data (Distributed Array Protocol 0.10.0).

Every rule that one process can check on its own export is checked here
(the collective rules, which need every process's ``dim_data``, belong to the
MPI layer).  0.9.x exports are read through a legacy path that rewrites them
into 0.10.0 terms first (``'n'`` becomes the empty-dict alias, 0.9 padding
``start``/``stop`` are widened by the communication padding).

Decisions where the protocol text is ambiguous (see docs/distarray.rst):

* ``stop == start`` is a valid (empty) block section, as the spec's own
  empty-buffer rules say.
* A cyclic ``start`` is ``proc_grid_rank * block_size``; when that is past the
  end, ``start == size`` (the clamped form) is accepted too.
* ``bool`` is not accepted where an ``int`` is required, nor are numpy
  integers: exporters must emit Python ints.  In 0.10.x, lists are rejected
  where tuples are required; 0.9.x exports may use lists (its own examples do).
* Unknown keys are rejected for 0.10.0 exactly; later 0.x minor versions may
  add keys, which are then ignored.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from .._bufferext import get_buffer
from .._dtypes import resolve_format
from .._flags import BufferFlags

__all__ = ["ProtocolError", "validate", "EXPORT_VERSION", "owned_count"]

#: The protocol version this package exports.
EXPORT_VERSION = "0.10.0"

_VERSION = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
_TOP_KEYS = frozenset(("__version__", "buffer", "dim_data"))
_COMMON = ("dist_type", "size", "proc_grid_size", "proc_grid_rank")
_KEYS = {
    "b": frozenset(_COMMON + ("start", "stop", "padding", "periodic")),
    "c": frozenset(_COMMON + ("start", "block_size")),
    "u": frozenset(_COMMON + ("indices", "one_to_one")),
}
_PROBE = int(BufferFlags.FULL_RO | BufferFlags.DEVICE)


class ProtocolError(ValueError):
    """Bad ``__distarray__`` data.

    ``problems`` lists every problem found, each naming the dimension, the
    key and the value; the message joins them.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems: List[str] = list(problems)
        super().__init__("invalid __distarray__ data: " + "; ".join(self.problems))


def _is_int(value: Any) -> bool:
    return type(value) is int


_INT64_MAX = 2**63 - 1


def owned_count(size: int, grid_size: int, grid_rank: int, block_size: int = 1) -> int:
    """Number of indices grid rank ``grid_rank`` owns along a cyclic dimension.

    Rank r owns global index g iff ``(g // block_size) % grid_size == r``.
    (The spec appendix credits a trailing partial block to rank 0 always,
    which is wrong whenever ``(size // block_size) % grid_size != 0``.)
    """
    full, rest = divmod(size, block_size)
    count = 0 if grid_rank >= full else (full - grid_rank + grid_size - 1) // grid_size
    count *= block_size
    if rest and full % grid_size == grid_rank:
        count += rest
    return count


def comm_padding(padding: Sequence[int], grid_rank: int, grid_size: int
                 ) -> Tuple[int, int]:
    """The communication part of a block section's ``(lo, hi)`` padding:
    the edge ranks' outer sides are boundary padding, so they count 0."""
    return (padding[0] if grid_rank > 0 else 0,
            padding[1] if grid_rank < grid_size - 1 else 0)


def _fast_dim(dd: Dict[str, Any], extent: int) -> Optional[Dict[str, Any]]:
    """The normalised form of a well-formed 0.10.0 block or cyclic dimension
    dictionary (a new dict: the provider may change its own later), or None
    to take the thorough path (which names problems)."""
    try:
        dist = dd["dist_type"]
        size, grid, rank = dd["size"], dd["proc_grid_size"], dd["proc_grid_rank"]
        # every int an int64 (a block's start, stop and padding lie within
        # size; a cyclic start and block_size are bounded below)
        if not (type(size) is int and type(grid) is int and type(rank) is int
                and 0 <= size <= _INT64_MAX and 0 <= rank < grid <= _INT64_MAX
                and dd.keys() <= _KEYS[dist]):
            return None
        start = dd["start"]
        if dist == "b":
            stop = dd["stop"]
            pad = dd.get("padding", (0, 0))
            periodic = dd.get("periodic", False)
            if (type(start) is int and type(stop) is int and type(pad) is tuple
                    and len(pad) == 2 and type(pad[0]) is int and type(pad[1]) is int
                    and type(periodic) is bool and 0 <= start <= stop <= size
                    and stop - start == extent and (rank or not start)
                    and (rank != grid - 1 or stop == size)
                    and pad[0] >= 0 and pad[1] >= 0 and pad[0] + pad[1] <= extent):
                return {"dist_type": "b", "size": size, "proc_grid_size": grid,
                        "proc_grid_rank": rank, "start": start, "stop": stop,
                        "padding": pad, "periodic": periodic}
        elif dist == "c":
            block = dd.get("block_size", 1)
            if (type(start) is int and type(block) is int
                    and 1 <= block <= _INT64_MAX and start == rank * block
                    and start <= _INT64_MAX
                    and owned_count(size, grid, rank, block) == extent):
                return {"dist_type": "c", "size": size, "proc_grid_size": grid,
                        "proc_grid_rank": rank, "start": start, "block_size": block}
    except (KeyError, TypeError):
        pass
    return None


class _Checker:
    """Collects the problems of one ``dim_data`` (all reported together)."""

    def __init__(self, legacy: bool, strict_keys: bool) -> None:
        self.legacy = legacy
        self.strict_keys = strict_keys
        self.problems: List[str] = []

    def bad(self, dim: int, key: str, value: Any, what: str) -> None:
        self.problems.append(f"dim_data[{dim}][{key!r}] = {value!r}: {what}")

    def int_key(self, dim: int, dd: Mapping[str, Any], key: str, low: int,
                default: Optional[int] = None) -> Optional[int]:
        if key not in dd:
            if default is None:
                self.problems.append(f"dim_data[{dim}]: required key {key!r} is missing")
            return default
        value = dd[key]
        if not _is_int(value):
            self.bad(dim, key, value, f"must be a Python int, not {type(value).__name__}")
            return None
        if value < low:
            self.bad(dim, key, value, f"must be >= {low}")
            return None
        if value > _INT64_MAX:
            self.bad(dim, key, value, "must fit an int64 (at most 2**63 - 1)")
            return None
        return int(value)

    def bool_key(self, dim: int, dd: Mapping[str, Any], key: str) -> bool:
        value = dd.get(key, False)
        if type(value) is not bool:
            self.bad(dim, key, value, f"must be a bool, not {type(value).__name__}")
            return False
        return value

    def dim(self, dim: int, dd: Any, extent: int) -> Optional[Dict[str, Any]]:
        """Check one dimension dictionary; return its normalised form."""
        if type(dd) is dict and dd and not self.legacy and self.strict_keys:
            fast = _fast_dim(dd, extent)
            if fast is not None:
                return fast
        if type(dd) is not dict:
            self.problems.append(f"dim_data[{dim}] = {dd!r}: must be a dict, "
                                 f"not {type(dd).__name__}")
            return None
        if not dd:
            return {"dist_type": "b", "size": extent, "proc_grid_size": 1,
                    "proc_grid_rank": 0, "start": 0, "stop": extent,
                    "padding": (0, 0), "periodic": False}
        before = len(self.problems)
        dist = dd.get("dist_type")
        if "dist_type" not in dd:
            self.problems.append(f"dim_data[{dim}]: required key 'dist_type' is missing")
            return None
        if type(dist) is not str or dist not in _KEYS:
            hint = ("'n' was removed in 0.10.0: use {} for an undistributed "
                    "dimension" if isinstance(dist, str) and dist == "n" else "must be 'b', 'c' or 'u'")
            self.bad(dim, "dist_type", dist, hint)
            return None
        if self.strict_keys:
            for key in dd:
                if key not in _KEYS[dist]:
                    self.bad(dim, str(key), dd[key],
                             f"unknown key for dist_type {dist!r}")
        size = self.int_key(dim, dd, "size", 0)
        grid = self.int_key(dim, dd, "proc_grid_size", 1)
        rank = self.int_key(dim, dd, "proc_grid_rank", 0)
        if grid is not None and rank is not None and rank >= grid:
            self.bad(dim, "proc_grid_rank", rank,
                     f"must be < proc_grid_size ({grid})")
            rank = None
        out: Dict[str, Any] = {"dist_type": dist, "size": size,
                               "proc_grid_size": grid, "proc_grid_rank": rank}
        getattr(self, "_" + dist)(dim, dd, extent, out)
        return out if len(self.problems) == before else None

    def _b(self, dim: int, dd: Mapping[str, Any], extent: int,
           out: Dict[str, Any]) -> None:
        size, grid, rank = out["size"], out["proc_grid_size"], out["proc_grid_rank"]
        start = self.int_key(dim, dd, "start", 0)
        stop = self.int_key(dim, dd, "stop", 0)
        padding = dd.get("padding", (0, 0))
        ok_type = (tuple, list) if self.legacy else (tuple,)
        if (type(padding) not in ok_type or len(padding) != 2
                or not all(_is_int(p) and p >= 0 for p in padding)):
            self.bad(dim, "padding", padding, "must be a 2-tuple of Python ints >= 0")
            padding = None
        elif padding[0] > _INT64_MAX or padding[1] > _INT64_MAX:
            self.bad(dim, "padding", padding, "must fit an int64 (at most 2**63 - 1)")
            padding = None
        else:
            padding = (padding[0], padding[1])
        out["periodic"] = self.bool_key(dim, dd, "periodic")
        out.update(start=start, stop=stop, padding=padding)
        if start is None or stop is None:
            return
        if stop < start:
            self.bad(dim, "stop", stop, f"must be >= start ({start})")
        if size is not None and stop > size:
            self.bad(dim, "stop", stop, f"must be <= size ({size})")
        if stop - start != extent:
            self.bad(dim, "stop", stop, f"stop - start ({stop} - {start}) must "
                     f"equal the buffer's extent {extent}")
        if rank == 0 and start != 0:
            self.bad(dim, "start", start, "must be 0 on proc_grid_rank 0")
        if (grid is not None and rank == grid - 1 and size is not None
                and stop != size):
            self.bad(dim, "stop", stop, f"must equal size ({size}) on the last "
                     "grid rank (the blocks cover [0, size))")
        if padding is not None and padding[0] + padding[1] > max(stop - start, 0):
            self.bad(dim, "padding", padding, f"wider than the section "
                     f"[{start}, {stop})")

    def _c(self, dim: int, dd: Mapping[str, Any], extent: int,
           out: Dict[str, Any]) -> None:
        size, grid, rank = out["size"], out["proc_grid_size"], out["proc_grid_rank"]
        start = self.int_key(dim, dd, "start", 0)
        block = self.int_key(dim, dd, "block_size", 1, default=1)
        out.update(start=start, block_size=block)
        if size is None or grid is None or rank is None or start is None \
                or block is None:
            return
        first = rank * block
        if start != first and not (first >= size and start == size):
            self.bad(dim, "start", start, f"must be proc_grid_rank * block_size "
                     f"({first})")
        count = owned_count(size, grid, rank, block)
        if count != extent:
            self.bad(dim, "size", size, f"grid rank {rank} of {grid} owns {count} "
                     f"indices with block_size {block}, but the buffer's extent "
                     f"is {extent}")

    def _u(self, dim: int, dd: Mapping[str, Any], extent: int,
           out: Dict[str, Any]) -> None:
        out["one_to_one"] = self.bool_key(dim, dd, "one_to_one")
        if "indices" not in dd:
            self.problems.append(f"dim_data[{dim}]: required key 'indices' is missing")
            return
        raw = dd["indices"]
        indices = _index_buffer(raw, self.legacy)
        if isinstance(indices, str):
            self.bad(dim, "indices", raw, indices)
            return
        if indices.shape[0] != extent:
            self.bad(dim, "indices", raw, f"has {indices.shape[0]} entries, the "
                     f"buffer's extent is {extent}")
        if indices.shape[0] > 1:
            ordered = np.sort(indices)
            dup = ordered[1:] == ordered[:-1]
            if dup.any():
                self.bad(dim, "indices", raw, "values must be locally unique "
                         f"({int(ordered[1:][dup][0])} repeats)")
        out["indices"] = indices


_NOT_INDICES = "must be a 1-D buffer of integers"


def _unreadable(raw: Any, exc: Exception) -> str:
    """Why ``raw``, a buffer exporter, gave no CPU buffer: its memory is on
    a device, or its export failed (closed, released, ...)."""
    try:
        view = get_buffer(raw, _PROBE)
    except Exception:               # noqa: BLE001 - the first failure says it
        view = None
    if view is not None:
        device = view.device
        view.release()
        if device is not None:
            return (f"memory on device {device!r}: indices must be a 1-D "
                    "buffer of integers in CPU memory")
    return (f"its buffer cannot be read ({type(exc).__name__}: {exc}); "
            f"{_NOT_INDICES}")


def _index_buffer(raw: Any, legacy: bool) -> Union[np.ndarray, str]:
    """``raw`` as a read-only 1-D int64 array of its own (the provider may
    change its buffer later), or a str saying why it is not one."""
    if legacy and type(raw) in (list, tuple):
        # int64 indices: a larger int is no index of any array
        if not all(_is_int(v) and -2**63 <= v < 2**63 for v in raw):
            return _NOT_INDICES
        return _frozen(np.array(raw, dtype=np.int64).reshape(-1))
    try:
        view = memoryview(raw)
    except TypeError:
        return _NOT_INDICES
    except Exception as exc:        # noqa: BLE001 - a device buffer, a closed one, ...
        return _unreadable(raw, exc)
    if view.ndim != 1:
        return _NOT_INDICES
    try:
        arr = np.asarray(view)
    except (TypeError, ValueError):
        return _NOT_INDICES
    if arr.dtype.kind not in "iu":
        return _NOT_INDICES
    if arr.dtype.kind == "u" and arr.size and arr.max() > np.iinfo(np.int64).max:
        return _NOT_INDICES
    return _frozen(arr.astype(np.int64))


def _frozen(arr: np.ndarray) -> np.ndarray:
    arr.flags.writeable = False
    return arr


def _version(value: Any) -> Tuple[int, int, int]:
    if type(value) is str and value == EXPORT_VERSION:
        return (0, 10, 0)
    if type(value) is not str or _VERSION.fullmatch(value) is None:
        raise ProtocolError([f"'__version__' = {value!r}: must be a "
                             "'major.minor.patch' string"])
    major, minor, patch = (int(p) for p in value.split("."))
    if (major, minor) == (1, 0) and patch == 0:
        return (0, 9, 0)            # the pre-0.9 draft's own label, read as 0.9
    if major != 0 or minor < 9:
        raise ProtocolError([f"'__version__' = {value!r}: unsupported protocol "
                             "version (this reader handles 0.9.x and 0.10.x; "
                             "a different major version may be incompatible)"])
    return (major, minor, patch)


def _legacy_dim(dim: int, dd: Any, extent: int, problems: List[str]) -> Any:
    """Rewrite one 0.9.x dimension dictionary into 0.10.0 terms."""
    if type(dd) is not dict:
        return dd
    dist = dd.get("dist_type")
    if isinstance(dist, str) and dist == "n":
        return _legacy_undistributed(dim, dd, extent, problems)
    if isinstance(dist, str) and dist in ("c", "u") and "periodic" in dd:
        # 0.9.x lets every dimension say it is periodic, 0.10.0 a block one
        # only: without padding (which c and u have none of) it moves nothing
        if type(dd["periodic"]) is not bool:
            problems.append(f"dim_data[{dim}]['periodic'] = {dd['periodic']!r}: "
                            "must be a bool")
            return None
        return {k: v for k, v in dd.items() if k != "periodic"}
    if not (isinstance(dist, str) and dist == "b") or "padding" not in dd:
        return dd
    pad: Any = dd.get("padding")
    start: Any = dd.get("start")
    stop: Any = dd.get("stop")
    grid: Any = dd.get("proc_grid_size")
    rank: Any = dd.get("proc_grid_rank")
    if not (type(pad) in (list, tuple) and len(pad) == 2
            and all(_is_int(v) for v in (pad[0], pad[1], start, stop, grid, rank))):
        return dd                   # the 0.10.0 checks name what is wrong
    if stop - start == extent:
        return dd
    periodic = dd.get("periodic") is True
    low, high = comm_padding(pad, rank, grid)
    if periodic and (rank == 0 and pad[0] or rank == grid - 1 and pad[1]):
        problems.append(f"dim_data[{dim}]['padding'] = {pad!r}: 0.9.x periodic "
                        "edge padding wraps around, which 0.10.0 cannot describe")
        return dd
    out = dict(dd)
    out.update(start=start - low, stop=stop + high)
    return out


#: The keys of a 0.9.x ``'n'`` dimension: its own, and the grid keys of a
#: single process (0.9 asks them of distributed dimensions only; a producer
#: that writes them anyway may write these values and no others).
_N_KEYS = {"dist_type": None, "size": None, "padding": None, "periodic": None,
           "proc_grid_size": 1, "proc_grid_rank": 0}


def _legacy_undistributed(dim: int, dd: Dict[Any, Any], extent: int,
                          problems: List[str]) -> Any:
    """A 0.9.x ``'n'`` dimension as the block dimension of one process that
    0.10.0 reads, or None with its problems said in the producer's terms
    (the keys it wrote, never the ``start``/``stop`` read into it)."""
    before = len(problems)
    for key, value in dd.items():
        if key not in _N_KEYS:
            problems.append(f"dim_data[{dim}][{key!r}] = {value!r}: unknown key "
                            "for dist_type 'n'")
        elif _N_KEYS[key] is not None and not (_is_int(value)
                                                and value == _N_KEYS[key]):
            problems.append(f"dim_data[{dim}][{key!r}] = {value!r}: must be "
                            f"{_N_KEYS[key]} for dist_type 'n' (undistributed)")
    size: Any = dd.get("size")
    if "size" not in dd:
        problems.append(f"dim_data[{dim}]: required key 'size' is missing")
    elif not _is_int(size) or size < 0:
        problems.append(f"dim_data[{dim}]['size'] = {size!r}: must be a Python "
                        "int >= 0")
    elif size != extent:
        problems.append(f"dim_data[{dim}]['size'] = {size!r}: an undistributed "
                        f"dimension's size must equal the buffer's extent {extent}")
    if len(problems) != before:
        return None
    out = {k: v for k, v in dd.items() if k in ("size", "padding", "periodic")}
    out.update(dist_type="b", proc_grid_size=1, proc_grid_rank=0,
               start=0, stop=size)
    return out


def _buffer_shape(buffer: Any) -> Tuple[Tuple[int, ...], Optional[str], str]:
    try:
        view = get_buffer(buffer, _PROBE)
    except (TypeError, BufferError, ValueError) as exc:
        raise ProtocolError([f"'buffer' = {type(buffer).__name__} object: does not "
                             f"export a buffer ({exc})"]) from None
    try:
        shape, device, fmt = tuple(view.shape), view.device, view.format
    finally:
        view.release()
    # asked for with PyBUF_FORMAT: the gate refuses an export without a
    # format unless its items are bytes, which are then 'B'
    assert fmt is not None
    if device is not None:
        # device memory moves as a numeric array (staged or handed to MPI)
        try:
            resolve_format(fmt)
        except (TypeError, ValueError):
            raise ProtocolError([f"'buffer' = {type(buffer).__name__} object: "
                                 f"memory on device {device!r} with format "
                                 f"{fmt!r}; device buffers must hold a numeric "
                                 "type (bool, int, float, complex)"]) from None
    return shape, device, fmt


class Checked(NamedTuple):
    """What :func:`check` read and validated.  An importer keeps these and
    never reads the dict again: its provider (or a ``__buffer__`` run while
    it was read) may have changed it since."""

    version: Tuple[int, int, int]
    #: The buffer as the extended buffer protocol reports it (``device``
    #: None for CPU memory).
    shape: Tuple[int, ...]
    device: Optional[str]
    format: str
    #: Complete 0.10.0 dimension dictionaries of their own (aliases
    #: expanded, defaults filled in, ``indices`` read-only int64 arrays).
    dims: Tuple[Dict[str, Any], ...]
    #: The ``'buffer'`` object whose export was read.
    buffer: Any
    #: Per dimension, whether it was given as an alias (``{}``, 0.9's ``'n'``).
    aliases: Tuple[bool, ...]


def check(distbuffer: Any) -> Checked:
    """Validate and normalise (see :class:`Checked`)."""
    if type(distbuffer) is not dict:
        raise ProtocolError([f"__distarray__() returned {type(distbuffer).__name__}, "
                             "not a dict"])
    missing = () if distbuffer.keys() == _TOP_KEYS else _TOP_KEYS.difference(distbuffer)
    if missing:
        raise ProtocolError([f"missing key {k!r}" for k in sorted(missing)])
    version = _version(distbuffer["__version__"])
    extra = () if len(distbuffer) == 3 else set(distbuffer).difference(_TOP_KEYS)
    if extra and version[:2] == (0, 10):
        raise ProtocolError([f"unknown key {k!r}" for k in sorted(extra, key=repr)])
    legacy = version[:2] == (0, 9)
    buffer = distbuffer["buffer"]
    shape, device, fmt = _buffer_shape(buffer)
    dim_data = distbuffer["dim_data"]
    if not (type(dim_data) is tuple or legacy and type(dim_data) is list):
        raise ProtocolError([f"'dim_data' = {dim_data!r}: must be a tuple of "
                             f"dicts, not {type(dim_data).__name__}"])
    dim_data = tuple(dim_data)
    if len(dim_data) != len(shape):
        raise ProtocolError([f"'dim_data' has {len(dim_data)} entries, the buffer "
                             f"has {len(shape)} dimensions"])
    checker = _Checker(legacy, strict_keys=version[:2] == (0, 10) or legacy)
    dims = []
    aliases = tuple(type(dd) is dict and (not dd or dd.get("dist_type") == "n")
                    for dd in dim_data)
    for i, dd in enumerate(dim_data):
        if not legacy:
            dims.append(checker.dim(i, dd, shape[i]))
            continue
        read = _legacy_dim(i, dd, shape[i], checker.problems)
        if read is None:            # its problems said in the producer's terms
            continue
        before = len(checker.problems)
        dims.append(checker.dim(i, read, shape[i]))
        if (len(checker.problems) != before and read is not dd
                and read.get("dist_type") == dd.get("dist_type") == "b"):
            checker.problems.append(
                f"dim_data[{i}]: read as 0.9.x, whose 'start' and 'stop' leave "
                f"out the padding: {dd['start']} and {dd['stop']} were widened "
                f"to {read['start']} and {read['stop']}")
    if checker.problems:
        raise ProtocolError(checker.problems)
    return Checked(version, shape, device, fmt, tuple(dims),  # type: ignore[arg-type]
                   buffer, aliases)


def validate(distbuffer: Any) -> None:
    """Check a ``__distarray__()`` dict against every process-local rule.

    Accepts 0.10.x (and, as a legacy path, 0.9.x) data.  Raises
    :class:`ProtocolError` naming the dimension, key and value of every
    problem in ``dim_data`` at once; returns None when the data are valid.
    An object with a ``__distarray__`` method may be passed too.
    """
    if type(distbuffer) is not dict and hasattr(distbuffer, "__distarray__"):
        distbuffer = distbuffer.__distarray__()
    check(distbuffer)
