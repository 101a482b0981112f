# cython: language_level=3, freethreading_compatible=True
"""A Cython producer: a cdef class whose one fill function serves its
__getbuffer__ (a plain request: ext NULL) and its typed entry (an extended
request: the consumer's Py_buffer_extended), answering PyBUF_DEVICE requests
with CPU memory through the header's helpers, and that declares its supported
flags with the entry (tests/test_cython.py builds it)."""

from cpython.buffer cimport PyBUF_WRITABLE, PyBUF_FORMAT, PyBUF_ND
from cpython.buffer cimport PyBUF_STRIDES
from cpython.object cimport PyObject, PyTypeObject

from bufferext cimport (
    Py_buffer_extended, PyBUF_DEVICE, BufferExt_SetDevice,
    BufferExt_SetExtendedGetBuffer, BufferExtCython_SetObj)

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

    cdef int fill(self, Py_buffer *view, int flags,
                  Py_buffer_extended *ext) except -1:
        """Everything of the export but view.obj, which the caller sets."""
        if flags & PyBUF_WRITABLE:
            raise BufferError("Bytes: the buffer is read-only")
        # CPU memory: answer a PyBUF_DEVICE request explicitly (flags gets
        # PyBUF_DEVICE, device stays NULL); nothing otherwise
        BufferExt_SetDevice(ext, self, flags, NULL, NULL)
        if ext != NULL:
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
        self.exports += 1
        return 0

    def __getbuffer__(self, Py_buffer *view, int flags):
        self.fill(view, flags, NULL)
        view.obj = self

    def __releasebuffer__(self, Py_buffer *view):
        self.exports -= 1


cdef int bytes_getbuffer_ex(PyObject *obj, Py_buffer_extended *ext,
                            int flags) except -1:
    """The typed entry: the same fill, with the consumer's extended view."""
    (<Bytes>obj).fill(&ext.view, flags, ext)
    BufferExtCython_SetObj(&ext.view, <object>obj)
    return 0


BufferExt_SetExtendedGetBuffer(<PyTypeObject *>Bytes, DECLARED,
                               bytes_getbuffer_ex)
