"""Communicators and agreement on errors: the one place that knows what
``comm=None`` means (``resolve``: every process of the job under an MPI
launcher, else one process with no mpi4py needed) and how a failure on one
process becomes the same exception on every process."""

from __future__ import annotations

import functools
import hashlib
import os
import reprlib
import socket
import struct
import sys
from typing import (Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence,
                    Tuple, TypeVar)

import numpy as np

from .._dtypes import name_of
from ._protocol import ProtocolError

__all__ = ["agree", "agree_and_flag", "call_keys", "content_key", "cuda_aware",
           "device_to_mpi", "digest", "judge", "launched", "mpi", "rank", "resolve",
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


#: How each MPI launcher starts a rank, read without importing MPI: the
#: variable that shows the launcher's way of talking to its ranks, the one
#: that gives the job's process count (None: only MPI_Init learns it), and
#: the processes that start ranks, by the name the system gives them
#: (``/proc/PID/comm``).  A variable is a hint: every child of a rank
#: inherits it (a fork, ``subprocess``, ``os.system``, ``multiprocessing``,
#: a test runner), and a child trusting it hung or died in ``MPI_Init``.
#: The proof is the parent: a launcher's process starts ranks and nothing
#: else.  Batch systems' own variables (SLURM_NTASKS...) are not read: a
#: plain ``python`` inside a job has them too.
LAUNCHERS: Tuple[Tuple[str, Optional[str], FrozenSet[str]], ...] = (
    # MPICH's hydra with PMI-1 over an inherited socket (its default), and
    # Slurm's srun --mpi=pmi2, which speaks the same
    ("PMI_FD", "PMI_SIZE", frozenset({"hydra_pmi_proxy", "slurmstepd"})),
    # hydra's PMI_PORT mode (mpiexec -pmi-port): an address, and no count
    ("PMI_PORT", None, frozenset({"hydra_pmi_proxy"})),
    # Open MPI 5 (PRRTE: prterun, prted on other hosts) and 4 (ORTE)
    ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE",
     frozenset({"prterun", "prted", "prte", "mpirun", "mpiexec", "orterun", "orted"})),
)

#: Where the system shows its processes (Linux); elsewhere ``ps`` is asked.
_PROC = "/proc"


def _process_name(pid: int) -> str:
    """The name the system gives process ``pid`` (its executable's file
    name, as ``ps -o comm`` shows it), or ``""`` for no such process."""
    try:
        with open(f"{_PROC}/{pid}/comm", "rb") as f:
            return os.fsdecode(f.read().strip())
    except OSError:                     # no /proc (macOS, BSD), or no such pid
        pass
    import subprocess
    try:                                # macOS prints the executable's path
        out = subprocess.run(["ps", "-o", "comm=", "-p", str(pid)],
                             capture_output=True).stdout
    except OSError:                     # no ps either
        return ""
    return os.path.basename(os.fsdecode(out.strip()))


def _holds_socket_of(fd: str, pid: int) -> bool:
    """Whether descriptor ``fd`` (a string, as ``PMI_FD`` holds it) is a
    socket whose other end process ``pid`` made: the one hydra (or
    slurmstepd) made for this rank, not a descriptor number reused by
    another socket.  Where the system does not say who made a socket
    (no ``SO_PEERCRED``: macOS, BSD), any Unix socket passes."""
    try:
        mine = os.dup(int(fd))
    except (ValueError, OSError):       # not a number, or not open here
        return False
    try:
        sock = socket.socket(fileno=mine)
    except OSError:                     # open, but not a socket
        os.close(mine)
        return False
    with sock:
        if not hasattr(socket, "SO_PEERCRED"):
            return sock.family == socket.AF_UNIX
        # struct ucred: the pid, uid and gid of the pair's maker
        maker = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET,
                                                    socket.SO_PEERCRED, 12))[0]
        return bool(maker == pid)


def judge(environ: Mapping[str, str], parent: str, socket_of_parent: Callable[[str], bool],
          world: Optional[int]) -> Tuple[Optional[int], Optional[str]]:
    """What :func:`launched` decides on its evidence: the environment, the
    name of this process's parent, whether a descriptor (``PMI_FD``'s
    value) is a socket that parent made, and the size of the world of an
    MPI already initialised in this process (None: none is).

    A launcher's variables count only where ``parent`` is one of its
    processes that start ranks (:data:`LAUNCHERS`) and, for hydra's
    socket, ``PMI_FD`` is that parent's; then the count is the world's
    size, else the launcher's count variable's (None where it has none),
    which must be a positive integer (RuntimeError naming it).
    """
    for shown, counted, starters in LAUNCHERS:
        if shown not in environ or parent not in starters:
            continue                    # a child of a rank, or started by hand
        if world is not None:
            return world, shown
        if shown == "PMI_FD" and not socket_of_parent(environ[shown]):
            continue
        if counted is None:
            return None, shown
        value = environ.get(counted, "")
        try:
            count = int(value)
        except ValueError:
            count = 0
        if count < 1:
            raise RuntimeError(f"{counted}={value!r}: an MPI launcher's process count "
                               "must be a positive integer")
        return count, counted
    return 1, None


def launched() -> Tuple[Optional[int], Optional[str]]:
    """The process count an MPI launcher gave this job and the variable that
    showed the launcher, or ``(1, None)`` when no launcher started this
    process.  The count is None where only MPI can tell (hydra's
    ``PMI_PORT`` mode).

    A launcher's variables count only with its proof (:func:`judge`):
    this process's parent is the launcher's process that starts ranks, and
    under hydra's socket the descriptor ``PMI_FD`` is a socket that parent
    made.  Once ``MPI_Init`` has run in this process, its world gives the
    count (the socket may be closed by then).
    """
    if not any(shown in os.environ for shown, _, _ in LAUNCHERS):
        return 1, None                  # no launcher's variable: ask nothing
    parent = os.getppid()
    running = sys.modules.get("mpi4py.MPI")
    world = (int(running.COMM_WORLD.Get_size())
             if running is not None and running.Is_initialized() else None)
    return judge(os.environ, _process_name(parent),
                 lambda fd: _holds_socket_of(fd, parent), world)


def resolve(comm: Any) -> Any:
    """The communicator an operation given ``comm`` runs on.

    A communicator is returned as it is.  ``None`` means every process of
    the job: under an MPI launcher that started more than one process
    (``launched``), mpi4py's ``COMM_WORLD``, importing mpi4py; otherwise
    None, one process, and mpi4py is not imported (where only MPI knows the
    count, it is asked, and a world of one is None too).  Under such a
    launcher without mpi4py this raises ImportError naming the variable
    that showed the launcher and what to do.
    """
    if comm is not None:
        return comm
    count, name = launched()
    if count == 1:
        return None
    try:
        world = mpi().COMM_WORLD
    except ImportError as exc:
        one_of = "" if count is None else f" as one of {count}"
        raise ImportError(
            f"comm=None: an MPI launcher started this process{one_of} "
            f"({name}={os.environ.get(str(name))}), so comm=None means all of its "
            f"processes (mpi4py's MPI.COMM_WORLD), but mpi4py cannot be imported "
            f"({exc}); install it (pip install mpi4py mpich), pass "
            "comm=MPI.COMM_SELF for an array of this process alone, or run "
            "without mpiexec") from exc
    return world if world.Get_size() > 1 else None


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


def agree(comm: Any, fn: Callable[[], T]) -> T:
    """Run ``fn()`` on every process of ``comm`` and agree on failure
    (collective; ``comm=None`` as in every other operation: see
    :doc:`mpi`).

    If ``fn`` raises on any process, every process raises the same
    exception type with the same message (that of the lowest failing rank,
    prefixed with ``"rank R of N: "``); no process is left waiting.

        >>> agree(None, lambda: 6 * 7)
        42
    """
    return agree_and_flag(comm, fn)[0]


def agree_and_flag(comm: Any, fn: Callable[[], T],
                   flag: Optional[Callable[[], bool]] = None) -> Tuple[T, bool]:
    """:func:`agree`, and whether ``flag()`` (asked after ``fn`` succeeded)
    is true on some process, in the same reduction: ``(result, flag)``.
    With one process ``flag`` is not asked (False)."""
    if comm is None:
        comm = resolve(None)
    flagged = False
    try:
        result, info = fn(), None
        if flag is not None and size(comm) > 1:
            flagged = bool(flag())
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
        return result, False  # type: ignore[return-value]
    mine = np.array([info is not None, flagged], np.int32)
    anyone = np.empty(2, np.int32)
    comm.Allreduce(mine, anyone, op=mpi().MAX)  # the usual case: one small reduction
    if not anyone[0]:
        return result, bool(anyone[1])  # type: ignore[return-value]
    infos = comm.allgather(info)
    for where, other in enumerate(infos):
        if other is not None:
            raise _rebuild(where, len(infos), other) from err
    raise AssertionError("agree: a process failed but sent no error")


#: A content key: nested tuples of str, bytes, int, bool and None only,
#: whose ``repr`` and ``digest`` are alike on every process.
Key = Tuple[Any, ...]

_INT64_MAX = 2**63 - 1

#: What an argument that has no content key should be instead.
_KEYABLE = ("pass None, a bool, int, float, complex or str, a list, tuple or "
            "dict of those, or an array-like (a numpy array, a buffer such as "
            "memoryview, bytes or array.array, a range, or an object with "
            "__array__, __array_interface__ or __dlpack__)")


def _shown(value: Any) -> str:
    """``repr(value)``, shortened to about 60 characters (for messages)."""
    shown = reprlib.Repr()
    shown.maxstring = shown.maxother = 60
    try:
        return shown.repr(value)
    except Exception:               # noqa: BLE001 - a repr that fails names no value
        return f"<{_type_name(value)} object>"


def _type_name(value: Any) -> str:
    cls = type(value)
    return (cls.__qualname__ if cls.__module__ == "builtins"
            else f"{cls.__module__}.{cls.__qualname__}")


def _unkeyable(value: Any, name: str, reason: str = "") -> TypeError:
    return TypeError(f"{name}={_shown(value)} (type {_type_name(value)}) cannot be "
                     f"compared across calls and processes{reason}: {_KEYABLE}")


def _as_array(value: Any, name: str) -> np.ndarray:
    """An array-like argument as the numpy array of its current contents:
    ``numpy.asarray``, as the distribution code reads it (``from_dlpack``
    for an object that speaks only DLPack)."""
    try:
        arr = np.asarray(value)
        if arr.dtype.hasobject and hasattr(value, "__dlpack__"):
            arr = np.from_dlpack(value)
    except Exception as exc:        # noqa: BLE001 - an exporter's failure, named
        raise _unkeyable(value, name, f" (as a numpy array: {type(exc).__name__}: "
                         f"{exc})") from None
    if arr.dtype.hasobject:         # not array-like: numpy wraps it as an object
        try:                        # (or a buffer exporter whose export failed)
            memoryview(value).release()
        except TypeError:
            pass
        except Exception as exc:    # noqa: BLE001 - an exporter's failure, named
            raise _unkeyable(value, name, f" (its buffer request raised "
                             f"{type(exc).__name__}: {exc})") from None
        raise _unkeyable(value, name)
    return arr


def _array_key(arr: np.ndarray, name: str) -> Key:
    shape = tuple(int(n) for n in arr.shape)
    if arr.dtype.hasobject:             # e.g. one index array per grid rank
        return ("objects", shape) + tuple(
            content_key(v, f"{name}[{i}]") for i, v in enumerate(arr.flat))
    dt = arr.dtype
    if dt.kind in "iu" and not (dt.kind == "u" and dt.itemsize == 8 and arr.size
                                and int(arr.max()) > _INT64_MAX):
        # every integer width alike: the plans read integers as int64
        return ("array", "int64", shape, np.ascontiguousarray(arr, dtype="<i8").tobytes())
    # a low-precision float by its name: ml_dtypes' str is '<V1' for most float8s
    kind = name_of(dt) if dt.names is None else str(dt.descr)
    return ("array", kind, shape, np.ascontiguousarray(arr).tobytes())


def content_key(value: Any, name: str = "value") -> Key:
    """A key of an argument's current contents, for a plan cache and for
    ``digest``: arguments with equal keys make the same plan.

    * None, bool, int, float, complex and str (numpy scalars as the Python
      number they hold, subclasses as their base type) key as themselves,
      tagged by kind: ``1``, ``1.0`` and ``True`` key apart (``block_size``
      takes an int and no bool, ``periodic`` a bool and no int).  A float
      keys by its exact value (``float.hex``), so NaN keys like NaN.
    * A list and a tuple of equal items key alike (the distribution
      arguments read both the same way), item by item.
    * A dict keys by its items, sorted by their keys' keys.
    * Anything array-like keys by the contents it has now, as numpy sees
      them: dtype, shape and bytes.  That is a numpy array, a buffer
      exporter (memoryview, bytes, bytearray, array.array, CPUBuffer), a
      range, or an object with ``__array__``, ``__array_interface__`` or
      ``__dlpack__``.  Integer arrays key as int64, whatever their width
      (indices are read as int64), so an int32 and an int64 index array of
      equal values key alike; other dtypes key as they are.  An array keys
      apart from a list of the same numbers (and a 0-d array from the
      number).  An object array keys by its items; a low-precision float
      by its name (ml_dtypes' ``str`` is ``'<V1'`` for most float8 kinds).

    Nothing keys by ``repr`` (numpy shortens it past 1000 items; a
    memoryview's names its address, not its contents).  Anything else
    raises TypeError naming ``name`` (the argument, e.g. ``"redistribute:
    indices"``; an item's index is appended) and the type.
    """
    if isinstance(value, np.ndarray):
        return _array_key(value, name)
    if value is None:
        return ("none",)
    if isinstance(value, (bool, np.bool_)):
        return ("bool", bool(value))
    if isinstance(value, (int, np.integer)):
        return ("int", int(value))
    if isinstance(value, (float, np.floating)):
        return ("float", float(value).hex())
    if isinstance(value, (complex, np.complexfloating)):
        z = complex(value)
        return ("complex", z.real.hex(), z.imag.hex())
    if isinstance(value, str):
        return ("str", str.__str__(value))
    if isinstance(value, (list, tuple)):
        return ("seq",) + tuple(content_key(v, f"{name}[{i}]")
                                for i, v in enumerate(value))
    if isinstance(value, dict):
        items = [(content_key(k, f"{name} key"), content_key(v, f"{name}[{k!r}]"))
                 for k, v in value.items()]
        return ("dict",) + tuple(sorted(items, key=lambda kv: _encode(kv[0])))
    return _array_key(_as_array(value, name), name)


def call_keys(comm: Any, op: str, args: Sequence[Tuple[str, Any]]
              ) -> Tuple[Optional[Key], Optional[Exception]]:
    """The content keys of the collective ``op``'s named ``args`` and None,
    or None and the error of an argument that has none (a TypeError naming
    it, from ``content_key``).

    On one process the error is raised here.  With several it is returned,
    for ``same_call`` to raise on every process: raised here, on one
    process alone, it would leave the others waiting in the reduction.
    """
    try:
        return tuple(content_key(v, f"{op}: {n}") for n, v in args), None
    except Exception as exc:        # noqa: BLE001 - raised on every process later
        if size(comm) == 1:
            raise
        return None, exc


def _feed(update: Callable[[bytes], Any], key: Any) -> None:
    """Serialise a content key, tagged and length-prefixed (so two keys
    serialise alike only if they are equal), into ``update``."""
    if isinstance(key, tuple):
        update(b"t" + len(key).to_bytes(8, "little"))
        for item in key:
            _feed(update, item)
    elif isinstance(key, bytes):
        update(b"b" + len(key).to_bytes(8, "little"))
        update(key)
    elif isinstance(key, str):
        raw = key.encode("utf-8", "surrogatepass")
        update(b"s" + len(raw).to_bytes(8, "little") + raw)
    elif key is None or isinstance(key, bool):
        update({None: b"N", False: b"F", True: b"T"}[key])
    elif isinstance(key, int):
        raw = key.to_bytes((key.bit_length() + 8) // 8, "little", signed=True)
        update(b"i" + len(raw).to_bytes(8, "little") + raw)
    else:
        raise TypeError(f"digest: a {type(key).__name__} is no part of a content "
                        "key (tuples of str, bytes, int, bool and None)")


def _encode(key: Any) -> bytes:
    parts: List[bytes] = []
    _feed(parts.append, key)
    return b"".join(parts)


def digest(key: Any) -> int:
    """63 bits of a content key (or a tuple of them), alike on every process
    for equal keys: a hash of its canonical serialisation (``hash()`` of a
    string is salted per process)."""
    hasher = hashlib.blake2b(digest_size=8)
    _feed(hasher.update, key)
    return int.from_bytes(hasher.digest(), "little") >> 1


def same_call(comm: Any, op: str, args: Sequence[Tuple[str, Any]], signature: int,
              flag: bool = False, error: Optional[Exception] = None) -> bool:
    """Check that every process called the collective ``op`` with the same
    ``args`` (``signature``: the ``digest`` of their content keys), and
    return whether ``flag`` is true on some process: one small reduction.

    Processes that pass different arguments to one collective would each
    build their own plan and exchange data that does not fit, silently or
    into a deadlock; instead every process raises the same ValueError
    naming each argument that differs and its value on each process.
    ``error`` is this process's error from ``call_keys`` (an argument with
    no content key, ``signature`` then unused): if any process has one,
    every process raises it (that of the lowest such rank, as ``agree``)."""
    mine = np.array([int(flag), signature, -signature, int(error is not None)],
                    np.int64)
    every = np.empty(4, np.int64)
    comm.Allreduce(mine, every, op=mpi().MAX)
    if every[3]:
        def fail() -> None:
            if error is not None:
                raise error
        agree(comm, fail)           # raises on every process
        raise AssertionError("agree returned although a process failed")
    if every[1] == -every[2]:
        return bool(every[0])
    table = comm.allgather([(digest(content_key(v)), _shown(v)) for _, v in args])
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
    = 0/1 overrides the detection, which runs once per process; any other
    value raises ValueError naming it, rather than being ignored)."""
    forced = os.environ.get("BUFFEREXT_MPI_CUDA_AWARE")
    if forced is None or forced == "":
        return _detect_cuda_aware()
    if forced not in ("0", "1"):
        raise ValueError(f"BUFFEREXT_MPI_CUDA_AWARE={forced!r}: expected 0 (stage "
                         "device memory through the host) or 1 (hand it to MPI)")
    return forced == "1"


def device_to_mpi(comm: Any) -> bool:
    """Whether an operation on ``comm`` hands device memory to MPI as it is:
    with more than one process and CUDA-aware MPI.  One process moves its
    data itself, on the host, and never asks MPI (nor imports mpi4py: a
    child of a rank doing so hung in ``MPI_Init``)."""
    return size(comm) > 1 and cuda_aware()


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
