"""Type stubs of the C core ``bufferext._bufferext`` (Modules/*.c).

Kept honest by ``python -m mypy.stubtest bufferext._bufferext`` in .ci/run:
every name, signature and attribute here is checked against the compiled
module.
"""

import builtins
import sys
from types import TracebackType
from typing import Any, Callable, ClassVar, Final, NoReturn, final

import numpy as np
from numpy.typing import DTypeLike, NDArray
from typing_extensions import (
    Buffer,
    CapsuleType,
    Self,
    SupportsIndex,
    TypeAlias,
    disjoint_base,
)

from _typeshed import structseq

from ._flags import BufferFlags

# ---- constants (Include/bufferext/core.h) ---------------------------------

#: Extended request flag of the draft PEP: the consumer accepts device memory.
PyBUF_DEVICE: Final = 0x10000
#: The request flags an exporter must never ignore.
PyBUF_REQUIRED_FLAGS: Final = 0xFD
#: Every request bit that existed before the draft (declared 0 means these).
LEGACY_FLAGS: Final = 0x1FD
#: The extended request flags (bits 16-30), PyBUF_DEVICE the first.
EXTENDED_FLAGS: Final = 0x7FFF0000
#: Version of the ABI between extensions: the Py_buffer_extended layout and
#: how an extended request reaches an exporter (4: the typed entry).
ABI_VERSION: Final = 4
#: Version of the header, ``0xMMmmpp00``-style like ``PY_VERSION_HEX``.
VERSION_HEX: Final[int]
#: 1 when the module was built in native mode: the interpreter implements
#: the draft itself (bf_supported_flags; see cpython/), else 0 (backport).
NATIVE: Final[int]

#: A shape: one length, or a sequence of lengths (at most 64).
_Shape: TypeAlias = SupportsIndex | list[SupportsIndex] | tuple[SupportsIndex, ...]
#: ``(DLPack device type, device id)``.
_DLDevice: TypeAlias = tuple[int, int]

# ---- exceptions ----------------------------------------------------------

class DeviceUnavailableError(RuntimeError):
    """A device library (CUDA driver, VEO) or the device is not available."""

# ---- device_info struct sequences (view.c) -------------------------------

@final
class CUDADeviceInfo(structseq[int], tuple[int, int, int, int]):
    """``device_info`` of ``'bufferext.cuda'`` memory (bufferext/cuda.h)."""

    if sys.version_info >= (3, 10):
        __match_args__: Final = ("version", "device", "context", "event")

    @property
    def version(self) -> int:
        """Struct version, ``major << 16 | minor``."""
    @property
    def device(self) -> int:
        """CUDA device ordinal."""
    @property
    def context(self) -> int:
        """``CUcontext`` as an int."""
    @property
    def event(self) -> int:
        """``CUevent`` to wait on before access; 0 when the data is ready."""

@final
class VEDeviceInfo(structseq[int], tuple[int, int, int, int]):
    """``device_info`` of ``'bufferext.ve'`` memory (bufferext/ve.h)."""

    if sys.version_info >= (3, 10):
        __match_args__: Final = ("version", "node", "proc", "context")

    @property
    def version(self) -> int:
        """Struct version, ``major << 16 | minor``."""
    @property
    def node(self) -> int:
        """VE node number."""
    @property
    def proc(self) -> int:
        """``struct veo_proc_handle *`` as an int."""
    @property
    def context(self) -> int:
        """``struct veo_thr_ctxt *`` as an int."""

@final
class OpaqueDeviceInfo(structseq[str | int], tuple[str, int]):
    """``device_info`` of a device bufferext does not know."""

    if sys.version_info >= (3, 10):
        __match_args__: Final = ("device", "address")

    @property
    def device(self) -> str:
        """The device name the exporter gave."""
    @property
    def address(self) -> int:
        """Address of the exporter's device_info (0 when it gave none)."""

_DeviceInfo: TypeAlias = CUDADeviceInfo | VEDeviceInfo | OpaqueDeviceInfo

# ---- BufferView (view.c) ---------------------------------------------------

@final
class BufferView:
    """One acquired extended buffer (see :func:`get_buffer`)."""

    #: The request flags it honours: every legacy flag and PyBUF_DEVICE.
    __buffer_supported_flags__: ClassVar[int]
    #: The typed entry (bufferext.h, header ABI 4): a capsule.
    __buffer_extended__: ClassVar[object]

    def release(self) -> None:
        """Release the buffer now; a second release is harmless."""
    def tobytes(self) -> bytes:
        """A C-order copy of the contents (CPU memory only)."""
    def _raw(self) -> dict[str, Any]:
        """The fields as the exporter wrote them (None for NULL)."""
    def memoryview(self) -> builtins.memoryview:
        """A memoryview of the memory (CPU memory only)."""
    def synchronize(self) -> None:
        """Block until the exported data is ready: for ``'bufferext.cuda'``
        memory, wait on the host for ``device_info.event`` when it is not 0
        (the GIL is released); nothing to wait for with CPU or VE memory.
        BufferError for another device."""
    def copy_to_host(self, target: Buffer | NDArray[Any], /) -> None:
        """Copy the memory (CPU, CUDA or VE) into ``target``, a writable
        C-contiguous host buffer of exactly ``nbytes`` bytes, after waiting
        as :meth:`synchronize` does; complete on return."""
    def copy_from_host(self, source: Buffer | NDArray[Any], /) -> None:
        """Copy ``source``, a C-contiguous host buffer of exactly ``nbytes``
        bytes, into the memory (CPU, CUDA or VE) after waiting for the
        exporter's pending work; complete on return.  The view must be
        writable."""
    def __dlpack__(
        self,
        *,
        stream: int | Any | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: _DLDevice | None = None,
        copy: bool | None = None,
    ) -> CapsuleType:
        """Export as a DLPack capsule (zero-copy)."""
    def __dlpack_device__(self) -> _DLDevice:
        """``(DLPack device type, device id)``."""
    def __arrow_c_array__(
        self, requested_schema: CapsuleType | None = None
    ) -> tuple[CapsuleType, CapsuleType]:
        """Arrow C Data capsules ``("arrow_schema", "arrow_array")`` over
        1-D contiguous CPU memory of fixed-width numbers (zero-copy)."""
    def __arrow_c_device_array__(
        self, requested_schema: CapsuleType | None = None, **kwargs: None
    ) -> tuple[CapsuleType, CapsuleType]:
        """Arrow C Device capsules ``("arrow_schema",
        "arrow_device_array")`` (zero-copy; CUDA: ``sync_event`` is the
        buffer's event)."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None: ...
    # The buffer protocol; Python-visible from 3.12 (typeshed's convention:
    # declared on every version so the type is a collections.abc.Buffer).
    def __buffer__(self, flags: int, /) -> builtins.memoryview: ...
    def __release_buffer__(self, buffer: builtins.memoryview, /) -> None: ...

    @property
    def obj(self) -> object:
        """The exporting object."""
    @property
    def ptr(self) -> int:
        """Address of the first byte (a device address for device memory)."""
    @property
    def nbytes(self) -> int:
        """Size in bytes."""
    @property
    def itemsize(self) -> int:
        """Bytes per item."""
    @property
    def format(self) -> str | None:
        """struct-module format of an item (``'B'`` if none and the items
        are bytes; None if none and they are not: acquired without
        PyBUF_FORMAT)."""
    @property
    def ndim(self) -> int:
        """Number of dimensions."""
    @property
    def shape(self) -> tuple[int, ...]:
        """Shape."""
    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in bytes."""
    @property
    def suboffsets(self) -> tuple[int, ...] | None:
        """PIL-style suboffsets, or None."""
    @property
    def readonly(self) -> bool:
        """True if the memory must not be written."""
    @property
    def c_contiguous(self) -> bool:
        """True if the layout is C-contiguous."""
    @property
    def f_contiguous(self) -> bool:
        """True if the layout is Fortran-contiguous."""
    @property
    def request_flags(self) -> int:
        """The request flags passed to the exporter."""
    @property
    def flags(self) -> int:
        """Extended flags the exporter honoured."""
    @property
    def device(self) -> str | None:
        """Device name, or None for CPU memory."""
    @property
    def device_info(self) -> _DeviceInfo | None:
        """Typed description of device memory, or None for CPU memory."""
    @property
    def released(self) -> bool:
        """True once the buffer was released."""

# ---- CPUBuffer (cpubuffer.c) -----------------------------------------------

@disjoint_base
class CPUBuffer:
    """Zero-filled, 64-byte aligned CPU memory, exported through the
    extended buffer protocol, DLPack and the NumPy array interface."""

    #: The request flags it honours: every legacy flag and PyBUF_DEVICE.
    __buffer_supported_flags__: ClassVar[int]
    #: The typed entry (bufferext.h, header ABI 4): a capsule.
    __buffer_extended__: ClassVar[object]
    #: The DLPack 1.3 C exchange API (a capsule named "dlpack_exchange_api").
    __dlpack_c_exchange_api__: ClassVar[CapsuleType]

    def __new__(
        cls, shape: _Shape, dtype: DTypeLike = "float64", *, readonly: bool = False
    ) -> Self: ...
    @classmethod
    def empty(cls, shape: _Shape, dtype: DTypeLike = "float64") -> Self:
        """Like the constructor, contents unspecified (numpy.empty); large
        buffers may reuse a block this process freed, already mapped."""
    @classmethod
    def clear_cache(cls) -> int:
        """Unmap the freed blocks kept for empty() now; returns their bytes."""
    # numpy declares ndarray.__buffer__ only from 3.12: name it explicitly.
    def copy_from_host(self, source: Buffer | NDArray[Any], /) -> None:
        """Copy any buffer of the same size (raw bytes or same dtype)."""
    def to_host(self) -> NDArray[Any]:
        """A numpy array holding a copy of the contents."""
    def close(self) -> None:
        """Free the memory now; BufferError while exported."""
    def resize(self, shape: _Shape, /) -> None:
        """Change the shape in place; BufferError while exported."""
    def __len__(self) -> int:
        """The first dimension; TypeError for a 0-d buffer."""
    def __bool__(self) -> bool:
        """Always true (empty, 0-d and closed buffers too)."""
    def copy(self, *, readonly: bool | None = None) -> Self:
        """A new buffer with the same shape, dtype and contents; readonly
        None keeps this buffer's flag."""
    def __copy__(self) -> Self: ...
    def __deepcopy__(self, memo: Any, /) -> Self: ...
    def __reduce_ex__(self, protocol: SupportsIndex, /) -> tuple[Any, ...]:
        """Pickling: from protocol 5 the memory goes out as a
        pickle.PickleBuffer (zero-copy, out of band with a buffer_callback)."""
    def __dlpack__(
        self,
        *,
        stream: int | Any | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: _DLDevice | None = None,
        copy: bool | None = None,
    ) -> CapsuleType:
        """Export as a DLPack capsule (zero-copy)."""
    def __dlpack_device__(self) -> _DLDevice:
        """``(1, 0)``: kDLCPU."""
    def __arrow_c_array__(
        self, requested_schema: CapsuleType | None = None
    ) -> tuple[CapsuleType, CapsuleType]:
        """Arrow C Data capsules ``("arrow_schema", "arrow_array")`` over
        1-D contiguous CPU memory of fixed-width numbers (zero-copy)."""
    def __arrow_c_device_array__(
        self, requested_schema: CapsuleType | None = None, **kwargs: None
    ) -> tuple[CapsuleType, CapsuleType]:
        """Arrow C Device capsules ``("arrow_schema",
        "arrow_device_array")`` (zero-copy; CUDA: ``sync_event`` is the
        buffer's event)."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None: ...
    # The buffer protocol; Python-visible from 3.12 (typeshed's convention:
    # declared on every version so the type is a collections.abc.Buffer).
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape."""
    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in bytes (C order)."""
    @property
    def ndim(self) -> int:
        """Number of dimensions."""
    @property
    def nbytes(self) -> int:
        """Size in bytes."""
    @property
    def itemsize(self) -> int:
        """Bytes per item."""
    @property
    def dtype(self) -> np.dtype[Any]:
        """Element type."""
    @property
    def format(self) -> str:
        """Element type as a struct format."""
    @property
    def readonly(self) -> bool:
        """True if exports are read-only."""
    @property
    def exports(self) -> int:
        """Number of live exports."""
    @property
    def closed(self) -> bool:
        """True once close() freed the memory."""
    @property
    def ptr(self) -> int:
        """Address of the first byte (64-byte aligned)."""
    @property
    def __array_interface__(self) -> dict[str, Any]:
        """NumPy array interface, version 3."""

# ---- CUDABuffer (cudabuffer.c) ----------------------------------------------

@disjoint_base
class CUDABuffer:
    """Memory on a CUDA device (driver API, primary context), exported
    through the extended buffer protocol (PyBUF_DEVICE only), DLPack and
    the CUDA Array Interface v3."""

    __buffer_supported_flags__: ClassVar[int]
    #: The typed entry (bufferext.h, header ABI 4): a capsule.
    __buffer_extended__: ClassVar[object]
    __dlpack_c_exchange_api__: ClassVar[CapsuleType]

    def __new__(
        cls,
        shape: _Shape,
        dtype: DTypeLike = "float64",
        *,
        device: int = 0,
        readonly: bool = False,
    ) -> Self: ...
    def copy_from_host(self, source: Buffer | NDArray[Any], /) -> None:
        """Copy a host buffer of the same size (raw bytes or same dtype)."""
    def to_host(self) -> NDArray[Any]:
        """A numpy array holding a copy of the contents."""
    def copy_from(self, other: CUDABuffer, /) -> None:
        """Copy another CUDABuffer of the same size and dtype (async)."""
    def fill(self, value: Any, /) -> None:
        """Set every item to ``value`` (async)."""
    def synchronize(self) -> None:
        """Wait for the queued work; exports then carry no event."""
    def close(self) -> None:
        """Free the memory now; BufferError while exported."""
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def __dlpack__(
        self,
        *,
        stream: int | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: _DLDevice | None = None,
        copy: bool | None = None,
    ) -> CapsuleType:
        """Export as a DLPack capsule (zero-copy)."""
    def __dlpack_device__(self) -> _DLDevice:
        """``(2, ordinal)``: kDLCUDA."""
    def __arrow_c_device_array__(
        self, requested_schema: CapsuleType | None = None, **kwargs: None
    ) -> tuple[CapsuleType, CapsuleType]:
        """Arrow C Device capsules ``("arrow_schema",
        "arrow_device_array")`` (zero-copy; CUDA: ``sync_event`` is the
        buffer's event)."""
    def __array__(self, dtype: Any = None, copy: bool | None = None) -> NDArray[Any]:
        """Refused with BufferError: device memory is not CPU memory."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def strides(self) -> tuple[int, ...]: ...
    @property
    def ndim(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def itemsize(self) -> int: ...
    @property
    def dtype(self) -> np.dtype[Any]: ...
    @property
    def format(self) -> str: ...
    @property
    def device(self) -> int:
        """The CUDA device ordinal."""
    @property
    def readonly(self) -> bool: ...
    @property
    def exports(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def ptr(self) -> int:
        """The CUdeviceptr."""
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA Array Interface v3."""

# ---- VEBuffer (vebuffer.c) --------------------------------------------------

@disjoint_base
class VEBuffer:
    """Memory on an NEC SX-Aurora VE node (VEO HMEM), exported through the
    extended buffer protocol (PyBUF_DEVICE only) and the VE Array Interface
    v1."""

    __buffer_supported_flags__: ClassVar[int]
    #: The typed entry (bufferext.h, header ABI 4): a capsule.
    __buffer_extended__: ClassVar[object]

    def __new__(
        cls,
        shape: _Shape,
        dtype: DTypeLike = "float64",
        *,
        node: int = 0,
        readonly: bool = False,
    ) -> Self: ...
    def copy_from_host(self, source: Buffer | NDArray[Any], /) -> None: ...
    def to_host(self) -> NDArray[Any]: ...
    def copy_from(self, other: VEBuffer, /) -> None: ...
    def close(self) -> None: ...
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...
    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: Any = None,
        copy: bool | None = None,
    ) -> NoReturn:
        """Refused: DLPack has no NEC VE device type."""
    def __dlpack_device__(self) -> NoReturn: ...
    def __array__(self, dtype: Any = None, copy: bool | None = None) -> NDArray[Any]:
        """Refused with BufferError: device memory is not CPU memory."""
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
        /,
    ) -> None: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def strides(self) -> tuple[int, ...]: ...
    @property
    def ndim(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def itemsize(self) -> int: ...
    @property
    def dtype(self) -> np.dtype[Any]: ...
    @property
    def format(self) -> str: ...
    @property
    def node(self) -> int: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def exports(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def ptr(self) -> int:
        """The HMEM address."""
    @property
    def __ve_array_interface__(self) -> dict[str, Any]:
        """VE Array Interface v1."""

# ---- BufferAdapter (adapter.c) ----------------------------------------------

@final
class BufferAdapter:
    """An extended-buffer exporter over memory another protocol described
    (see :func:`bufferext.as_buffer`)."""

    __buffer_supported_flags__: ClassVar[int]
    #: The typed entry (bufferext.h, header ABI 4): a capsule.
    __buffer_extended__: ClassVar[object]
    __dlpack_c_exchange_api__: ClassVar[CapsuleType]

    def __dlpack__(
        self,
        *,
        stream: int | Any | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: _DLDevice | None = None,
        copy: bool | None = None,
    ) -> CapsuleType: ...
    def __dlpack_device__(self) -> _DLDevice: ...
    def __arrow_c_array__(
        self, requested_schema: CapsuleType | None = None
    ) -> tuple[CapsuleType, CapsuleType]: ...
    def __arrow_c_device_array__(
        self, requested_schema: CapsuleType | None = None, **kwargs: None
    ) -> tuple[CapsuleType, CapsuleType]: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

    @property
    def source(self) -> object: ...
    @property
    def protocol(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def strides(self) -> tuple[int, ...]: ...
    @property
    def format(self) -> str: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def device(self) -> str | None: ...
    @property
    def exports(self) -> int: ...
    @property
    def ptr(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...

def _adapter_from_dlpack(
    source: object, capsule: CapsuleType, readonly: bool | None,
    stream: int | None = None, device: tuple[int, int] | None = ..., /,
) -> BufferAdapter: ...
def _adapter_from_layout(
    source: object, protocol: str, ptr: int, shape: tuple[int, ...],
    strides: tuple[int, ...], format: str, itemsize: int, readonly: bool,
    device: str | None, handle: int, keepalive: object, /,
) -> BufferAdapter: ...
def _adapter_from_arrow(
    source: object, schema: CapsuleType, array: CapsuleType, device: bool,
    readonly: bool | None, /,
) -> BufferAdapter: ...
def _adapter_from_buffer(source: object, readonly: bool, /) -> BufferAdapter: ...
def _cuda_bridge_stream(ordinal: int, /) -> int: ...
def as_buffer(obj: object, *, readonly: bool | None = None) -> Any:
    """An exporter of the extended buffer protocol for ``obj``, zero-copy."""
def _pass_through(obj: object, cls: type, readonly: bool | None, /) -> Any:
    """as_buffer's pass-through, a row of ``_bridges._STEPS``: ``obj`` (or a
    re-export with ``readonly``) if its own buffer is the answer, else
    NotImplemented."""
def _buffer_protocol(obj: object, cls: type, readonly: bool | None, /) -> Any:
    """as_buffer's buffer-protocol row, a row of ``_bridges._STEPS``: ``obj``
    (or a re-export with ``readonly``) if it exports a buffer, unless ``cls``
    speaks DLPack too and ``obj`` refuses a plain export; else
    NotImplemented."""

# ---- functions (module.c, view.c) ------------------------------------------

def check_buffer_supports(obj: object, /, flags: int = 0) -> bool:
    """True if ``obj`` exports buffers and supports (honours: serves or
    properly refuses) every flag in ``flags``."""

def supported_flags(obj: object, /) -> int:
    """The mask of request flags ``obj`` honours (0 and -1 translated)."""

def get_buffer(
    obj: object, /, flags: int = BufferFlags.FULL_RO | BufferFlags.DEVICE,
) -> BufferView:
    """Acquire an extended buffer of ``obj`` as a :class:`BufferView`."""

def _device_of(obj: object, /) -> str | None:
    """The device of the memory ``obj``'s getbuffer exports when asked
    directly with ``FULL_RO | DEVICE``, or None for CPU memory."""

def _has_typed_entry(cls: type, /) -> bool:
    """Whether extended requests to instances of the class ``cls`` reach a
    typed entry (for the checker)."""

def _native_declaration(cls: type, /) -> int | None:
    """The declaration of the class ``cls`` where the interpreter implements
    the draft (its slot, 0 where it says nothing), None in backport mode
    (for the checker)."""

def _exports_buffers(cls: type, /) -> bool:
    """Whether the instances of the class ``cls`` export buffers (its
    buffer slot), for the checker's report of a class."""

def _device_libraries() -> list[dict[str, Any]]:
    """One dict per device library: what was looked for and found."""
