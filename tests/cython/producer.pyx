# cython: language_level=3, freethreading_compatible=True
"""A Cython producer: a cdef class whose __getbuffer__ answers PyBUF_DEVICE
requests with CPU memory through the header's helpers, and declares its
supported flags (tests/test_cython.py builds it)."""

from cpython.buffer cimport PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND
from cpython.buffer cimport PyBUF_STRIDES
from cpython.object cimport PyTypeObject

from bufferext cimport (
    Py_buffer_extended, PyBUF_DEVICE, BufferExt_Extended, BufferExt_SetDevice,
    BufferExt_SetSupportedFlags)

cdef char *FORMAT_B = b"B"

#: what Bytes declares: read-only, 1-D, contiguous, and device requests
DECLARED = PyBUF_FORMAT | PyBUF_ND | PyBUF_STRIDES | PyBUF_DEVICE


cdef class Bytes:
    """A read-only buffer of bytes, in CPU memory."""
    cdef bytes data
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t strides[1]
    cdef public int exports
    cdef public int device_requests

    def __cinit__(self, bytes data):
        self.data = data
        self.shape[0] = len(data)
        self.strides[0] = 1

    def __getbuffer__(self, Py_buffer *view, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("Bytes: the buffer is read-only")
        # CPU memory: answer a PyBUF_DEVICE request explicitly (flags gets
        # PyBUF_DEVICE, device stays NULL); nothing otherwise
        BufferExt_SetDevice(self, view, flags, NULL, NULL)
        if BufferExt_Extended(view, flags) != NULL:
            self.device_requests += 1
        view.buf = <char *>self.data
        view.len = self.shape[0]
        view.itemsize = 1
        view.readonly = 1
        view.format = FORMAT_B if flags & PyBUF_FORMAT else NULL
        view.ndim = 1
        view.shape = self.shape if flags & PyBUF_ND else NULL
        view.strides = self.strides if flags & PyBUF_STRIDES else NULL
        view.suboffsets = NULL
        view.internal = NULL
        view.obj = self
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self.exports -= 1


BufferExt_SetSupportedFlags(<PyTypeObject *>Bytes, DECLARED)
