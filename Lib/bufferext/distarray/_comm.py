"""Communicators and agreement on errors: the one place that knows what
``comm=None`` means (one process, no mpi4py needed) and how a failure on
one process becomes the same exception on every process."""

from __future__ import annotations

import functools
import hashlib
import os
import reprlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

import numpy as np

from ._protocol import ProtocolError

__all__ = ["agree", "any_rank", "content_key", "cuda_aware", "digest", "mpi", "rank",
           "same_call", "size"]

T = TypeVar("T")


def size(comm: Any) -> int:
    """Number of processes of ``comm`` (1 for None)."""
    return 1 if comm is None else int(comm.Get_size())


def rank(comm: Any) -> int:
    """This process's rank in ``comm`` (0 for None)."""
    return 0 if comm is None else int(comm.Get_rank())


def mpi() -> Any:
    """``mpi4py.MPI``, imported on first use."""
    from mpi4py import MPI
    return MPI


_ERRORS: Dict[str, Callable[[str], Exception]] = {
    e.__name__: e for e in (ValueError, TypeError, IndexError, KeyError, BufferError,
                            MemoryError, RuntimeError, NotImplementedError)}


def _rebuild(where_rank: int, nprocs: int,
             info: Tuple[str, str, Optional[List[str]]]) -> Exception:
    name, message, problems = info
    where = f"rank {where_rank} of {nprocs}"
    if problems is not None:
        return ProtocolError([f"{where}: {p}" for p in problems])
    if name == "DeviceUnavailableError":
        from .. import DeviceUnavailableError
        return DeviceUnavailableError(f"{where}: {message}")
    return _ERRORS.get(name, RuntimeError)(f"{where}: {message}")


def any_rank(comm: Any, flag: bool) -> bool:
    """Whether ``flag`` is true on some process (collective; a buffer
    reduction, a few times cheaper than mpi4py's pickled ``allreduce``)."""
    mine = np.array([flag], np.int32)
    anyone = np.empty(1, np.int32)
    comm.Allreduce(mine, anyone, op=mpi().MAX)
    return bool(anyone[0])


def agree(comm: Any, fn: Callable[[], T]) -> T:
    """Run ``fn()`` on every process and agree on failure (collective).

    If ``fn`` raises on any process, every process raises the same
    exception type with the same message (that of the lowest failing rank,
    prefixed with ``"rank R of N: "``); no process is left waiting.
    """
    try:
        result, info = fn(), None
    except Exception as exc:       # noqa: BLE001 - re-raised on every rank below
        result = None
        err: Optional[Exception] = exc
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        info = (type(exc).__name__, str(message),
                list(exc.problems) if isinstance(exc, ProtocolError) else None)
    else:
        err = None
    if size(comm) == 1:
        if err is not None:
            raise err
        return result  # type: ignore[return-value]
    if not any_rank(comm, info is not None):     # the usual case: one small reduction
        return result  # type: ignore[return-value]
    infos = comm.allgather(info)
    for where, other in enumerate(infos):
        if other is not None:
            raise _rebuild(where, len(infos), other) from err
    return result  # type: ignore[return-value]


def content_key(value: Any) -> Any:
    """A hashable key for an argument, equal only for equal contents
    (``repr`` shortens numpy arrays past 1000 items, so two index arrays
    differing in the middle would share a key).  A numpy scalar keys as
    the Python number it holds."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            return ("ndarray", value.shape, content_key(value.tolist()))
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(content_key(v) for v in value)
    return repr(value)


def digest(key: Any) -> int:
    """63 bits of a content key, alike on every process for equal keys
    (``hash()`` of a string is salted per process)."""
    raw = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(raw, "little") >> 1


def same_call(comm: Any, op: str, args: Sequence[Tuple[str, Any]], signature: int,
              flag: bool = False) -> bool:
    """Check that every process called the collective ``op`` with the same
    ``args`` (``signature``: the ``digest`` of their content keys), and
    return whether ``flag`` is true on some process: one small reduction.

    Processes that pass different arguments to one collective would each
    build their own plan and exchange data that does not fit, silently or
    into a deadlock; instead every process raises the same ValueError
    naming each argument that differs and its value on each process."""
    mine = np.array([int(flag), signature, -signature], np.int64)
    every = np.empty(3, np.int64)
    comm.Allreduce(mine, every, op=mpi().MAX)
    if every[1] == -every[2]:
        return bool(every[0])
    shown = reprlib.Repr()
    shown.maxstring = shown.maxother = 60
    table = comm.allgather([(digest(content_key(v)), shown.repr(v)) for _, v in args])
    parts = []
    for k, (name, _) in enumerate(args):
        if len({row[k][0] for row in table}) > 1:
            ranks: Dict[str, List[int]] = {}
            for r, row in enumerate(table):
                ranks.setdefault(row[k][1], []).append(r)
            parts.append(f"{name}=" + ", ".join(
                f"{text} on rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}"
                for text, rs in ranks.items()))
    raise ValueError(f"{op}: the processes passed different arguments ("
                     + "; ".join(parts) + "); a collective call needs the same on "
                     "every process")


def cuda_aware() -> bool:
    """Whether MPI accepts CUDA device memory (``BUFFEREXT_MPI_CUDA_AWARE``
    = 0/1 overrides the detection, which runs once per process)."""
    forced = os.environ.get("BUFFEREXT_MPI_CUDA_AWARE")
    if forced in ("0", "1"):
        return forced == "1"
    return _detect_cuda_aware()


@functools.lru_cache(maxsize=None)
def _detect_cuda_aware() -> bool:
    try:
        MPI = mpi()
    except ImportError:
        return False
    query = getattr(MPI, "Query_cuda_support", None)
    if query is not None:
        return bool(query())
    try:
        kinds = MPI.COMM_WORLD.Get_info().Get("mpi_memory_alloc_kinds")
    except Exception:              # noqa: BLE001 - MPI < 4.1: no such key
        return False
    return bool(kinds) and "cuda" in kinds
