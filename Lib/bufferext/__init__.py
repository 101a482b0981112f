"""bufferext: the extended buffer protocol for device memory, backported.

Share CPU, CUDA and NEC SX-Aurora VE memory through the buffer protocol on
every CPython from 3.9, with a capability query before every request.

    >>> import bufferext
    >>> buf = bufferext.CPUBuffer((2, 3), "float32")
    >>> bufferext.check_buffer_supports(buf, bufferext.BufferFlags.DEVICE)
    True
    >>> with bufferext.get_buffer(buf) as view:
    ...     print(view.shape, view.format, view.device)
    (2, 3) f None
"""

from __future__ import annotations

from typing import Any, Dict, List

try:
    from . import _bufferext
except ImportError as error:
    if "subinterpreter" not in str(error):
        raise
    raise ImportError(
        "bufferext cannot be imported in a subinterpreter: its C core keeps "
        "process-wide state (the CPU block cache, the CUDA and VEO driver "
        "tables, the DLPack exchange API) that is not yet isolated per "
        "interpreter; import it in the main interpreter (the header, "
        "bufferext.h, has no such limit)") from error
from ._bufferext import (
    BufferAdapter,
    BufferView,
    CPUBuffer,
    CUDABuffer,
    CUDADeviceInfo,
    DeviceUnavailableError,
    OpaqueDeviceInfo,
    VEBuffer,
    VEDeviceInfo,
    as_buffer,      # its Python part (_bridges, numpy) loads on first use
    check_buffer_supports,
    get_buffer,
)
from ._flags import BufferFlags
from ._paths import get_include

__version__ = "0.1.0"

__all__ = [
    "BufferAdapter",
    "BufferFlags",
    "BufferView",
    "CPUBuffer",
    "CUDABuffer",
    "CUDADeviceInfo",
    "DeviceUnavailableError",
    "OpaqueDeviceInfo",
    "VEBuffer",
    "VEDeviceInfo",
    "as_buffer",
    "check_buffer_supports",
    "devices",
    "get_buffer",
    "get_include",
    "supported_flags",
]


def supported_flags(obj: Any) -> BufferFlags:
    """The request flags ``obj`` honours, as :class:`BufferFlags`.

    A declared ``__buffer_supported_flags__`` of 0 (or none) reads as
    :attr:`BufferFlags.LEGACY`, -1 as :attr:`BufferFlags.SIMPLE`.  Raises
    TypeError if ``obj`` does not export buffers (naming
    :func:`as_buffer` where it speaks a protocol that bridges) or declares
    a bad value.
    """
    return BufferFlags(_bufferext.supported_flags(obj))


def devices() -> List[Dict[str, Any]]:
    """What was found of each device library.

    One dict per library: ``device`` (the device name), ``library``,
    ``env_var`` (the variable that overrides the path; ``none`` disables
    it), ``looked_for`` (paths tried), ``loaded``, ``path`` and ``error``
    (why it is unavailable, or None).  Never raises for a missing library.
    """
    return _bufferext._device_libraries()
