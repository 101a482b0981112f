"""Local buffers on their way into MPI: the one acquisition path.

Every MPI operation acquires each local buffer it touches once, through the
extended buffer protocol (``PyBUF_DEVICE``), for the span of the operation
(:class:`Acquired`).  The acquired view says where the memory is, and that
decides what MPI is handed:

* CPU memory: the memory itself (a numpy array over the view);
* CUDA memory, when MPI is CUDA-aware: the device memory, once the
  exporter's event (``device_info.event``, the one synchronisation rule of
  ``bufferext/cuda.h``) has completed; MPI never sees the exporter object;
* CUDA memory otherwise, and VE memory: a host copy, written back when the
  operation wrote into it.

Any exporter of ``'bufferext.cuda'`` or ``'bufferext.ve'`` memory works, not
only bufferext's producers.  The view is released only once the operation
(possibly non-blocking inside) has completed.
"""

from __future__ import annotations

import enum
import functools
import math
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, TypeVar

import numpy as np

from .._bufferext import as_buffer, get_buffer
from .._dtypes import _is_lowp, host_view, resolve, resolve_format, wire_dtype
from .._flags import BufferFlags
from ._comm import agree, agree_and_flag, size

__all__ = ["Acquired", "Acquisitions", "Kind", "LowpArray", "as_kind", "held_dtype",
           "host_array", "host_result", "kind_of", "make_buffer", "new_buffer", "producer_class"]

T = TypeVar("T")


class Kind(enum.Enum):
    """Where a local buffer's memory is (the kinds MPI can move)."""

    CPU = "cpu"
    CUDA = "cuda"
    VE = "ve"


#: The extended buffer protocol's device names, by kind.
_DEVICE_NAMES: Dict[Optional[str], Kind] = {
    None: Kind.CPU, "bufferext.cuda": Kind.CUDA, "bufferext.ve": Kind.VE}
_PRODUCERS = {Kind.CPU: "CPUBuffer", Kind.CUDA: "CUDABuffer", Kind.VE: "VEBuffer"}
_READ = int(BufferFlags.C_CONTIGUOUS | BufferFlags.FORMAT | BufferFlags.DEVICE)
_WRITE = _READ | int(BufferFlags.WRITABLE)
#: Any layout, for reading a caller's array.
_READ_ANY = int(BufferFlags.RECORDS_RO | BufferFlags.DEVICE)


def kind_of(device: Optional[str]) -> Optional[Kind]:
    """The kind of an extended buffer's ``device`` (None: CPU memory), or
    None for a device this layer cannot move."""
    return _DEVICE_NAMES.get(device)


def as_kind(device: Any) -> Kind:
    """The kind named ``device`` (``"cpu"``, ``"cuda"`` or ``"ve"``)."""
    try:
        return Kind(device)
    except ValueError:
        raise ValueError(f"device={device!r}: must be 'cpu', 'cuda' or 've'") from None


def producer_class(device: str) -> Any:
    """The producer type for ``device`` (``"cpu"``, ``"cuda"`` or ``"ve"``).

    Looked up on the ``bufferext`` package at call time, so device producers
    added there are used as soon as they exist.
    """
    import bufferext

    name = _PRODUCERS[as_kind(device)]
    cls = getattr(bufferext, name, None)
    if cls is None:
        raise bufferext.DeviceUnavailableError(
            f"device={device!r}: bufferext.{name} is not available in this "
            "build of bufferext")
    return cls


def new_buffer(device: str, shape: Tuple[int, ...], dtype: np.dtype,
               filled: bool = False) -> Any:
    """A new producer of ``shape`` and ``dtype`` on ``device``, zeroed unless
    the caller will write every cell (``filled``: then a CPUBuffer may reuse
    a freed block, which spares the page faults of fresh memory)."""
    cls = producer_class(device)
    if filled and device == "cpu":
        return cls.empty(shape, dtype)
    return cls(shape, dtype)


def held_dtype(fmt: str, what: str) -> np.dtype:
    """The dtype a DistArray holds items of buffer format ``fmt`` as.

    A low-precision float is ml_dtypes' type: without ml_dtypes its numpy
    stand-in (raw bytes, ``V1`` for every float8) would forget which type
    it is, and a DistArray compares types by dtype, so it is refused.
    ``what`` names the buffer in the TypeError.
    """
    try:
        dtype = resolve_format(fmt)[2]
    except TypeError as exc:
        raise TypeError(f"{what} holding format {fmt!r}, which a DistArray "
                        f"cannot hold ({exc})") from None
    if dtype.kind == "V" and not _is_lowp(dtype):      # no ml_dtypes
        raise TypeError(f"{what} of {fmt}: a DistArray holds it as ml_dtypes' "
                        "type (pip install ml_dtypes)")
    return dtype


def host_array(obj: Any, what: str) -> np.ndarray:
    """A global array a caller passes (``what`` names it in errors), as a
    numpy array in host memory, read through the extended buffer protocol.

    A numpy array is taken as it is.  Anything :func:`bufferext.as_buffer`
    takes (a producer of any dtype it holds, a torch or JAX tensor, an
    Arrow array, a DLPack or array-interface producer) is read through its
    extended buffer: CPU memory viewed without a copy (a low-precision
    float as ml_dtypes' type), device memory copied to the host.  Anything
    else (a list, a number) through ``numpy.asarray``.
    """
    if isinstance(obj, np.ndarray):
        return obj
    try:
        exporter = as_buffer(obj)
    except TypeError:
        return np.asarray(obj)
    if isinstance(exporter, np.ndarray):
        return exporter
    with get_buffer(exporter, _READ_ANY) as view:
        fmt, shape, device = view.format, view.shape, view.device
        assert fmt is not None      # asked for: see _protocol._buffer_shape
        dtype = held_dtype(fmt, f"{what}: a {type(obj).__name__}")
        if device is not None:
            out = np.empty(shape, dtype)
            view.copy_to_host(out.reshape(-1).view(np.uint8))
            return out
    return host_view(exporter)


class LowpArray(np.ndarray):
    """A global array of a low-precision float (ml_dtypes' type), as
    ``gather`` and ``allgather`` give it: numpy's array, which numpy, JAX
    and ml_dtypes take as it is, and which also exports DLPack (its items'
    codes, zero-copy), so ``torch.from_dlpack`` takes it too (numpy's own
    ``__dlpack__`` refuses ml_dtypes' types)."""

    def __dlpack__(self, **kwargs: Any) -> Any:
        # (__dlpack_device__ is numpy's own: CPU memory)
        return as_buffer(self).__dlpack__(**kwargs)


def host_result(shape: Tuple[int, ...], dtype: np.dtype, zeroed: bool) -> np.ndarray:
    """A global result, uninitialised or ``zeroed`` (where the exchange
    leaves cells unwritten: no process owns them): a :class:`LowpArray` for
    a low-precision float, else numpy's array."""
    out = (np.zeros if zeroed else np.empty)(shape, dtype)
    return out.view(LowpArray) if _is_lowp(dtype) else out


def make_buffer(device: str, host: np.ndarray) -> Any:
    """A new producer on ``device`` holding a copy of ``host``."""
    buf = new_buffer(device, host.shape, host.dtype, filled=True)
    if host.size:
        # as bytes: numpy cannot export an array of a low-precision float
        buf.copy_from_host(host.reshape(-1).view(np.uint8))
    return buf


def _canonical(read: Callable[[Any], Tuple[str, int, Any, str]],
               spelling: Any) -> Optional[str]:
    """The canonical buffer format of ``spelling`` as ``read`` reads it
    (:func:`resolve` a dtype, :func:`resolve_format` an exported format:
    ``'<d'`` and ``float64`` are ``'d'`` here), None for one bufferext does
    not read.  Element types are compared by it, never by numpy's dtype:
    without ml_dtypes every float8 is the same stand-in ``V1``."""
    try:
        return read(spelling)[0]
    except (TypeError, ValueError):
        return None


#: A DistArray's dtype as a canonical format, asked by every MPI operation
#: for each buffer (``resolve`` takes ~5 us); cached by dtype only, so no
#: foreign format string is kept.
_dtype_format = functools.lru_cache(maxsize=64)(
    functools.partial(_canonical, resolve))


class _DeviceMemory:
    """CUDA memory as a CUDA-aware MPI takes it (mpi4py reads the CUDA Array
    Interface): bytes, ready now (``stream`` None), since the exporter's
    event has completed before this is made."""

    __slots__ = ("__cuda_array_interface__",)

    def __init__(self, ptr: int, nbytes: int, readonly: bool) -> None:
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (nbytes,), "typestr": "|u1", "strides": None,
            "data": (ptr, readonly), "stream": None}


class Acquired:
    """One local buffer acquired for one MPI operation (a context manager).

    ``kind`` is where the memory is; ``mpi`` is what to hand MPI: a
    C-contiguous numpy array of ``shape`` and ``dtype`` over the memory
    itself (CPU), or over a host copy (``staged``), or the device memory
    (CUDA-aware MPI).  ``write``: MPI writes into it (acquired writable;
    a staged copy is copied back on a clean exit).  ``read``: the operation
    reads the current contents (else a staged copy starts uninitialised).
    ``zero``: the operation writes only some cells and the others must read
    0, as in a new buffer (``out=`` of an operation that leaves cells no
    process owns): the memory is zeroed first.
    """

    __slots__ = ("view", "kind", "mpi", "staged", "write")

    def __init__(self, obj: Any, shape: Tuple[int, ...], dtype: np.dtype, *,
                 write: bool, aware: bool, read: bool = True,
                 zero: bool = False) -> None:
        try:
            view = get_buffer(obj, _WRITE if write else _READ)
        except (BufferError, TypeError, ValueError) as exc:
            raise BufferError(f"DistArray: the local buffer ({type(obj).__name__}) "
                              f"cannot be acquired {'writable and ' if write else ''}"
                              f"C-contiguous: {exc}") from exc
        try:
            kind = kind_of(view.device)
            if kind is None:
                raise BufferError(f"DistArray: the local buffer is memory on device "
                                  f"{view.device!r}; MPI moves CPU, "
                                  "'bufferext.cuda' and 'bufferext.ve' memory")
            nbytes = math.prod(shape) * dtype.itemsize
            if view.nbytes != nbytes:
                raise BufferError(f"DistArray: the local buffer has {view.nbytes} "
                                  f"bytes, its shape {shape} and dtype {dtype} "
                                  f"need {nbytes}")
            want = _dtype_format(dtype)     # None: a dtype no format names
            fmt = view.format               # as exported, or in another spelling
            if want is None or (fmt != want and
                                _canonical(resolve_format, fmt) != want):
                raise BufferError(f"DistArray: the local buffer holds format "
                                  f"{view.format!r}, not dtype {dtype}")
            self.view, self.kind, self.write = view, kind, write
            self.staged = kind is not Kind.CPU and not (kind is Kind.CUDA and aware)
            wired = wire_dtype(dtype)       # what MPI moves
            if kind is Kind.CPU:
                self.mpi: Any = np.frombuffer(view.memoryview(), wired).reshape(shape)
                if zero:
                    self.mpi[...] = 0
            elif not self.staged:
                if zero:                    # waits for the copy
                    view.copy_from_host(np.zeros(nbytes, np.uint8))
                view.synchronize()      # the event rule: MPI touches it next
                self.mpi = _DeviceMemory(view.ptr, nbytes, view.readonly)
            elif zero:
                self.mpi = np.zeros(shape, wired)
            else:
                self.mpi = np.empty(shape, wired)
                if read:                    # waits for the event itself
                    view.copy_to_host(self.mpi.reshape(-1).view(np.uint8))
        except BaseException:
            view.release()
            raise

    def release(self, completed: bool = True) -> None:
        """The operation is over: copy a written staged copy back (if it
        ``completed``), then release the view."""
        mpi, self.mpi = self.mpi, None      # a CPU array holds an export of the view
        try:
            if completed and self.staged and self.write:
                self.view.copy_from_host(mpi.reshape(-1).view(np.uint8))
        finally:
            del mpi
            self.view.release()

    def __enter__(self) -> "Acquired":
        return self

    def __exit__(self, kind: Optional[Type[BaseException]], *rest: Any) -> None:
        self.release(completed=kind is None)


class Acquisitions:
    """The local buffers one collective operation acquires, released
    together when it ends (a context manager).

    ``take(fn)`` runs ``fn`` (which acquires through :meth:`add`) on every
    process and agrees on failure: a buffer refused on one process raises
    the same error on every process, and what the others had acquired is
    released; nobody is left waiting in the operation.  The end is agreed
    too where some process copies a staged buffer back (device memory
    written through a host copy): a copy-back failing on one process
    raises the same error on every process, not on that one alone while
    the others go on as if the operation had succeeded.
    """

    __slots__ = ("comm", "held", "agreed_end")

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.held: List[Acquired] = []
        #: Whether some process writes a staged copy back at the end (known
        #: on every process alike from ``take``'s reduction).
        self.agreed_end = False

    def add(self, obj: Any, shape: Tuple[int, ...], dtype: np.dtype, *,
            write: bool, aware: bool, read: bool = True,
            zero: bool = False) -> Acquired:
        acquired = Acquired(obj, shape, dtype, write=write, aware=aware, read=read,
                            zero=zero)
        self.held.append(acquired)
        return acquired

    def take(self, fn: Callable[[], T]) -> T:
        result, copies_back = agree_and_flag(
            self.comm, fn, lambda: any(a.staged and a.write for a in self.held))
        self.agreed_end = self.agreed_end or copies_back
        return result

    def detach(self, acquired: Acquired) -> Acquired:
        """Keep ``acquired`` beyond this operation (the caller releases it)."""
        self.held.remove(acquired)
        return acquired

    def __enter__(self) -> "Acquisitions":
        return self

    def _release(self, completed: bool) -> None:
        held, self.held = self.held, []
        error: Optional[BaseException] = None
        for acquired in held:
            try:
                acquired.release(completed=completed)
            except BaseException as exc:        # release the others first
                error = error or exc
        if error is not None and completed:
            raise error

    def __exit__(self, kind: Optional[Type[BaseException]], *rest: Any) -> None:
        if kind is None and self.agreed_end and size(self.comm) > 1:
            agree(self.comm, lambda: self._release(True))
        else:
            self._release(kind is None)
