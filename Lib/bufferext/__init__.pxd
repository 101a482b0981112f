# bufferext/__init__.pxd -- Cython declarations of the C API in bufferext.h.
#
#     from bufferext cimport (Py_buffer_extended, PyBUF_DEVICE,
#                             BufferExt_GetBuffer, BufferExt_Release)
#
# Compile the generated C with bufferext.get_include() on the include path
# (the header is header-only: nothing is linked, nothing imported at run
# time).  The normative text is docs/capi.rst; every name below is declared
# as bufferext.h defines it.  Functions that raise return -1 with an
# exception set (``except -1``); the others never raise (``noexcept``).

from cpython.object cimport PyObject, PyTypeObject
from libc.stdint cimport int32_t, uint32_t, uint64_t

cdef extern from *:
    """
    static inline void BufferExtCython_SetObj(Py_buffer *view, PyObject *exporter)
    {
        Py_INCREF(exporter);
        view->obj = exporter;
    }
    """
    # A typed entry written in Cython stores the view's reference to its
    # exporter with this: Cython manages Py_buffer.obj as an object field,
    # which holds a reference where Cython set it up (in __getbuffer__) and
    # nothing a consumer initialised (in the entry), so `view.obj = self`
    # would release garbage there.
    void BufferExtCython_SetObj(Py_buffer *view, object exporter) noexcept

cdef extern from "bufferext.h":
    # ---- version ---------------------------------------------------------
    enum:
        BUFFEREXT_VERSION_MAJOR
        BUFFEREXT_VERSION_MINOR
        BUFFEREXT_VERSION_MICRO
        BUFFEREXT_VERSION_HEX
        BUFFEREXT_ABI_VERSION

    # ---- request flags and declarations ----------------------------------
    enum:
        PyBUF_DEVICE                     # 0x10000, the extended request
        PyBUF_REQUIRED_FLAGS             # 0xFD, flags an exporter must honour
        BUFFEREXT_LEGACY_FLAGS           # 0x1FD, what 0 declares
        BUFFEREXT_EXTENDED_FLAGS         # 0x7FFF0000, the extended family
        BUFFEREXT_SUPPORTS_LEGACY        # 0
        BUFFEREXT_SUPPORTS_SIMPLE_ONLY   # -1
    const char *BUFFEREXT_SUPPORTED_FLAGS_ATTR   # "__buffer_supported_flags__"

    # ---- the extended buffer (Py_buffer first) ----------------------------
    ctypedef struct Py_buffer_extended:
        Py_buffer view          # the PEP 3118 buffer, unchanged
        int flags               # extended flags honoured; test before reading on
        int ext_flags           # reserved; 0
        const char *device      # NULL: CPU memory; else a unique UTF-8 name
        void *device_info       # layout given by `device`; exporter-owned

    # ---- consumer side ----------------------------------------------------
    int PyObject_CheckBufferSupports(object obj, int flags) noexcept
    int BufferExt_SupportedFlags(object obj) except -1
    int BufferExt_GetBuffer(object obj, Py_buffer_extended *view,
                            int flags) except -1
    void BufferExt_Release(Py_buffer_extended *view) noexcept
    int BufferExt_IsDevice(const Py_buffer_extended *view) noexcept

    # ---- producer side ----------------------------------------------------
    # One function serves both doors: __getbuffer__ calls it with ext NULL,
    # the typed entry with the consumer's Py_buffer_extended; publish the
    # entry once on the type, e.g. at module level (tests/cython/producer.pyx):
    #     BufferExt_SetExtendedGetBuffer(<PyTypeObject *>MyType, flags,
    #                                    my_getbuffer_ex)
    # A type whose getbuffer never writes the extension declares with
    #     BufferExt_SetSupportedFlags(<PyTypeObject *>MyType, flags)
    ctypedef int (*BufferExt_GetBufferExProc)(
        PyObject *obj, Py_buffer_extended *view, int flags) except -1

    int BufferExt_SetSupportedFlags(PyTypeObject *type, int flags) except -1
    int BufferExt_SetExtendedGetBuffer(
        PyTypeObject *type, int flags,
        BufferExt_GetBufferExProc getbuffer_ex) except -1
    int BufferExt_SetDevice(Py_buffer_extended *ext, object exporter,
                            int flags, const char *device,
                            void *device_info) except -1

    # ---- device "bufferext.cuda" (bufferext/cuda.h) ------------------------
    const char *BUFFEREXT_DEVICE_CUDA    # "bufferext.cuda"; compare by strcmp
    enum:
        BUFFEREXT_CUDA_INFO_MAJOR
        BUFFEREXT_CUDA_INFO_MINOR
        BUFFEREXT_CUDA_INFO_VERSION
    ctypedef struct BufferExt_CUDADeviceInfo:
        uint32_t version        # BUFFEREXT_CUDA_INFO_VERSION; always first
        int32_t device          # CUDA device ordinal
        void *context           # CUcontext of the pointer
        void *event             # CUevent to wait on before access, or NULL
        uint64_t reserved[4]    # zero

    # ---- device "bufferext.ve" (bufferext/ve.h) ----------------------------
    const char *BUFFEREXT_DEVICE_VE      # "bufferext.ve"
    enum:
        BUFFEREXT_VE_INFO_MAJOR
        BUFFEREXT_VE_INFO_MINOR
        BUFFEREXT_VE_INFO_VERSION
    ctypedef struct BufferExt_VEDeviceInfo:
        uint32_t version        # BUFFEREXT_VE_INFO_VERSION; always first
        int32_t node            # VE node number; -1 when unknown
        void *proc              # struct veo_proc_handle *
        void *context           # struct veo_thr_ctxt *
        uint64_t reserved[4]    # zero
