# cython: language_level=3, freethreading_compatible=True
"""A Cython consumer of the extended buffer protocol: everything through
``from bufferext cimport ...`` (tests/test_cython.py builds it)."""

from libc.string cimport strcmp
from cpython.buffer cimport PyBUF_FULL_RO, PyBUF_SIMPLE, PyBUF_WRITABLE

from bufferext cimport (
    Py_buffer_extended, PyBUF_DEVICE, PyBUF_REQUIRED_FLAGS,
    BUFFEREXT_LEGACY_FLAGS, BUFFEREXT_ABI_VERSION,
    BUFFEREXT_DEVICE_CUDA, BUFFEREXT_DEVICE_VE,
    BUFFEREXT_CUDA_INFO_MAJOR, BUFFEREXT_VE_INFO_MAJOR,
    BufferExt_CUDADeviceInfo, BufferExt_VEDeviceInfo,
    PyObject_CheckBufferSupports, BufferExt_SupportedFlags,
    BufferExt_GetBuffer, BufferExt_Release, BufferExt_IsDevice)

DEVICE = PyBUF_DEVICE
REQUIRED = PyBUF_REQUIRED_FLAGS
LEGACY = BUFFEREXT_LEGACY_FLAGS
ABI_VERSION = BUFFEREXT_ABI_VERSION
FULL_RO = PyBUF_FULL_RO


def check_supports(obj, int flags):
    return PyObject_CheckBufferSupports(obj, flags)


def supported_flags(obj):
    return BufferExt_SupportedFlags(obj)


cdef dict describe(Py_buffer_extended *ext):
    cdef const BufferExt_CUDADeviceInfo *cuda
    cdef const BufferExt_VEDeviceInfo *ve
    info = None
    device = None
    if BufferExt_IsDevice(ext):
        device = (<bytes>ext.device).decode()
        if strcmp(ext.device, BUFFEREXT_DEVICE_CUDA) == 0:
            cuda = <const BufferExt_CUDADeviceInfo *>ext.device_info
            if (cuda.version >> 16) == BUFFEREXT_CUDA_INFO_MAJOR:
                info = {"version": cuda.version, "device": cuda.device,
                        "context": <size_t>cuda.context,
                        "event": <size_t>cuda.event}
        elif strcmp(ext.device, BUFFEREXT_DEVICE_VE) == 0:
            ve = <const BufferExt_VEDeviceInfo *>ext.device_info
            if (ve.version >> 16) == BUFFEREXT_VE_INFO_MAJOR:
                info = {"version": ve.version, "node": ve.node,
                        "proc": <size_t>ve.proc,
                        "context": <size_t>ve.context}
    return {"ptr": <size_t>ext.view.buf, "len": ext.view.len,
            "readonly": ext.view.readonly, "ndim": ext.view.ndim,
            "flags": ext.flags, "device": device, "device_info": info}


def acquire(obj, int flags=PyBUF_FULL_RO | PyBUF_DEVICE):
    """Acquire, describe and release one extended buffer."""
    cdef Py_buffer_extended ext
    BufferExt_GetBuffer(obj, &ext, flags)
    try:
        result = describe(&ext)
        if not BufferExt_IsDevice(&ext):
            result["data"] = (<char *>ext.view.buf)[:ext.view.len]
        return result
    finally:
        BufferExt_Release(&ext)
        # released: the extension is cleared and nothing is held
        assert <void *>ext.view.obj == NULL and ext.device == NULL


def acquire_many(obj, Py_ssize_t n, int flags=PyBUF_FULL_RO | PyBUF_DEVICE):
    """n acquire/release pairs (refcount drift checks)."""
    cdef Py_buffer_extended ext
    cdef Py_ssize_t i
    for i in range(n):
        BufferExt_GetBuffer(obj, &ext, flags)
        BufferExt_Release(&ext)
