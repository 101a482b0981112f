"""Communicators and agreement on errors: the one place that knows what
``comm=None`` means (one process, no mpi4py needed) and how a failure on
one process becomes the same exception on every process."""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

import numpy as np

from ._protocol import ProtocolError

__all__ = ["agree", "any_rank", "cuda_aware", "mpi", "rank", "size"]

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
