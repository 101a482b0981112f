/* layout.c -- compile-only test freezing the binary interface of
 * bufferext.h: the layout of Py_buffer_extended and of the device_info
 * structs, and the flag values.  Compiled (never run) as C11, C++11 and
 * C++17 by tests/capi/build.py; a failing assertion is a compile error.
 *
 * Changing anything asserted here breaks every extension built against an
 * earlier header: that needs a new BUFFEREXT_ABI_VERSION (or a new major
 * version of the device_info struct), not an edit of this file.
 *
 * -DLAYOUT_SELFTEST_BREAK adds one false assertion, so the test suite can
 * prove that a broken layout does fail to compile.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <bufferext.h>

#ifdef __cplusplus
#  define FREEZE(cond) static_assert(cond, #cond)
#  define ALIGNOF(t) alignof(t)
#else
#  define FREEZE(cond) _Static_assert(cond, #cond)
#  define ALIGNOF(t) _Alignof(t)
#endif

#define PTR ((size_t)sizeof(void *))

/* ---- flags ------------------------------------------------------------ */
FREEZE(PyBUF_DEVICE == 0x10000);
FREEZE(PyBUF_REQUIRED_FLAGS == 0xFD);
FREEZE(BUFFEREXT_LEGACY_FLAGS == 0x1FD);
FREEZE(BUFFEREXT_EXTENDED_FLAGS == 0x7FFF0000);
FREEZE((PyBUF_DEVICE & BUFFEREXT_EXTENDED_FLAGS) == PyBUF_DEVICE);
FREEZE((BUFFEREXT_EXTENDED_FLAGS & BUFFEREXT_LEGACY_FLAGS) == 0);
FREEZE((PyBUF_DEVICE & BUFFEREXT_LEGACY_FLAGS) == 0);
FREEZE(PyBUF_DEVICE > 0 && PyBUF_DEVICE <= INT_MAX);
/* since 3.13 exactly PyBUF_READ / PyBUF_WRITE raise SystemError */
FREEZE(PyBUF_DEVICE != PyBUF_READ && PyBUF_DEVICE != PyBUF_WRITE);
FREEZE((PyBUF_DEVICE | PyBUF_SIMPLE) != PyBUF_READ);
FREEZE((PyBUF_DEVICE | PyBUF_SIMPLE) != PyBUF_WRITE);
FREEZE((PyBUF_DEVICE & (PyBUF_READ | PyBUF_WRITE)) == 0);
FREEZE(BUFFEREXT_SUPPORTS_LEGACY == 0);
FREEZE(BUFFEREXT_SUPPORTS_SIMPLE_ONLY == -1);
FREEZE(BUFFEREXT_ABI_VERSION == 4);
#ifdef BUFFEREXT_NATIVE
/* a CPython that implements the draft (cpython/): its values are ours, and
 * Py_buffer_extended below is its struct, held to the backport's layout */
FREEZE(PyBUF_EXTENDED_FLAGS == BUFFEREXT_EXTENDED_FLAGS);
FREEZE(PyBUF_LEGACY_FLAGS == BUFFEREXT_LEGACY_FLAGS);
FREEZE(Py_bf_supported_flags == 84);
FREEZE(Py_bf_getbuffer_ex == 85);
#endif

/* ---- Py_buffer_extended: the Py_buffer, then the extension ------------ */
FREEZE(offsetof(Py_buffer_extended, view) == 0);
FREEZE(offsetof(Py_buffer_extended, flags) == sizeof(Py_buffer));
FREEZE(offsetof(Py_buffer_extended, ext_flags) == sizeof(Py_buffer) + 4);
FREEZE(offsetof(Py_buffer_extended, device) == sizeof(Py_buffer) + 8);
FREEZE(offsetof(Py_buffer_extended, device_info) ==
       sizeof(Py_buffer) + 8 + PTR);
FREEZE(sizeof(Py_buffer_extended) == sizeof(Py_buffer) + 8 + 2 * PTR);
FREEZE(sizeof(((Py_buffer_extended *)0)->flags) == 4);
FREEZE(sizeof(((Py_buffer_extended *)0)->ext_flags) == 4);
FREEZE(offsetof(Py_buffer_extended, device) % PTR == 0);

/* ---- the typed entry: version first ------------------------------------ */
FREEZE(offsetof(BufferExt_GetBufferEntry, version) == 0);
FREEZE(sizeof(((BufferExt_GetBufferEntry *)0)->version) == 4);
FREEZE(offsetof(BufferExt_GetBufferEntry, getbuffer) == PTR);
FREEZE(offsetof(BufferExt_GetBufferEntry, getbuffer_ex) == 2 * PTR);
FREEZE(offsetof(BufferExt_GetBufferEntry, releasebuffer) == 3 * PTR);
FREEZE(sizeof(BufferExt_GetBufferEntry) == 4 * PTR);

/* ---- device_info structs: version first, fixed-width, reserved -------- */
FREEZE(offsetof(BufferExt_CUDADeviceInfo, version) == 0);
FREEZE(sizeof(((BufferExt_CUDADeviceInfo *)0)->version) == 4);
FREEZE(offsetof(BufferExt_CUDADeviceInfo, device) == 4);
FREEZE(sizeof(((BufferExt_CUDADeviceInfo *)0)->device) == 4);
FREEZE(offsetof(BufferExt_CUDADeviceInfo, context) == 8);
FREEZE(offsetof(BufferExt_CUDADeviceInfo, event) == 8 + PTR);
FREEZE(offsetof(BufferExt_CUDADeviceInfo, reserved) == 8 + 2 * PTR);
FREEZE(sizeof(((BufferExt_CUDADeviceInfo *)0)->reserved) == 32);
FREEZE(BUFFEREXT_CUDA_INFO_VERSION == 0x10000);

FREEZE(offsetof(BufferExt_VEDeviceInfo, version) == 0);
FREEZE(sizeof(((BufferExt_VEDeviceInfo *)0)->version) == 4);
FREEZE(offsetof(BufferExt_VEDeviceInfo, node) == 4);
FREEZE(sizeof(((BufferExt_VEDeviceInfo *)0)->node) == 4);
FREEZE(offsetof(BufferExt_VEDeviceInfo, proc) == 8);
FREEZE(offsetof(BufferExt_VEDeviceInfo, context) == 8 + PTR);
FREEZE(offsetof(BufferExt_VEDeviceInfo, reserved) == 8 + 2 * PTR);
FREEZE(sizeof(((BufferExt_VEDeviceInfo *)0)->reserved) == 32);
FREEZE(BUFFEREXT_VE_INFO_VERSION == 0x10000);

/* ---- exact figures on LP64 (Linux, macOS x86_64 / arm64) -------------- */
#if defined(__LP64__) || defined(_LP64)
FREEZE(sizeof(Py_buffer) == 80);
FREEZE(offsetof(Py_buffer_extended, flags) == 80);
FREEZE(offsetof(Py_buffer_extended, ext_flags) == 84);
FREEZE(offsetof(Py_buffer_extended, device) == 88);
FREEZE(offsetof(Py_buffer_extended, device_info) == 96);
FREEZE(sizeof(Py_buffer_extended) == 104);
FREEZE(offsetof(BufferExt_CUDADeviceInfo, context) == 8);
FREEZE(offsetof(BufferExt_CUDADeviceInfo, event) == 16);
FREEZE(offsetof(BufferExt_CUDADeviceInfo, reserved) == 24);
FREEZE(sizeof(BufferExt_CUDADeviceInfo) == 56);
FREEZE(offsetof(BufferExt_VEDeviceInfo, proc) == 8);
FREEZE(offsetof(BufferExt_VEDeviceInfo, context) == 16);
FREEZE(offsetof(BufferExt_VEDeviceInfo, reserved) == 24);
FREEZE(sizeof(BufferExt_VEDeviceInfo) == 56);
/* pointers and the reserved words 8-byte aligned */
FREEZE(ALIGNOF(BufferExt_CUDADeviceInfo) == 8);
FREEZE(ALIGNOF(BufferExt_VEDeviceInfo) == 8);
FREEZE(ALIGNOF(Py_buffer_extended) == 8);
FREEZE(offsetof(BufferExt_CUDADeviceInfo, context) % 8 == 0);
FREEZE(offsetof(BufferExt_CUDADeviceInfo, event) % 8 == 0);
FREEZE(offsetof(BufferExt_VEDeviceInfo, proc) % 8 == 0);
FREEZE(offsetof(BufferExt_VEDeviceInfo, context) % 8 == 0);
FREEZE(offsetof(Py_buffer_extended, device_info) % 8 == 0);
#endif

#ifdef LAYOUT_SELFTEST_BREAK
FREEZE(sizeof(Py_buffer_extended) == sizeof(Py_buffer));
#endif

/* The exporter's macro, expanded as an extension expands it: the file is
 * compiled with -Wpedantic too (tests/capi/build.py), where the header must
 * be as clean as Python.h. */
static int
layout_export(PyObject *obj, Py_buffer *view, int flags,
              Py_buffer_extended *ext)
{
    return BufferExt_SetDevice(ext, obj, flags, NULL, NULL) < 0
               ? -1
               : PyBuffer_FillInfo(view, obj, NULL, 0, 1, flags);
}

BUFFEREXT_DEFINE_GETBUFFER(layout_getbuffer, layout_export);

/* Something to compile, so the object file is not empty (and the
 * functions the macro defined are used). */
struct layout_procs {
    getbufferproc getbuffer;
    BufferExt_GetBufferExProc getbuffer_ex;
};
extern const struct layout_procs bufferext_layout_procs;
const struct layout_procs bufferext_layout_procs = {layout_getbuffer,
                                                    layout_getbuffer_ex};
