/* parts.h -- what every C file of the _bufferext module shares: the module
 * state, one init function per file (module.c calls them), and the locks of
 * free-threaded builds.  Each file's own shared declarations live in a
 * header beside it (docs/internals.rst, "The files", gives the floors). */
#ifndef BUFFEREXT_MODULES_PARTS_H
#define BUFFEREXT_MODULES_PARTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "bufferext.h"
#include "structmember.h"   /* T_PYSSIZET, READONLY (3.9-3.11) */

/* Module state.  Types are heap types made from specs. */
typedef struct {
    PyTypeObject *BufferView_Type;
    PyTypeObject *CPUBuffer_Type;
    PyTypeObject *CUDABuffer_Type;
    PyTypeObject *VEBuffer_Type;
    PyTypeObject *BufferAdapter_Type;
    PyTypeObject *CUDADeviceInfo_Type;
    PyTypeObject *VEDeviceInfo_Type;
    PyTypeObject *OpaqueDeviceInfo_Type;
    PyTypeObject *FastMethod_Type;      /* fastmethod.c */
    PyTypeObject *FastBound_Type;
    PyObject *DeviceUnavailableError;
    PyObject *resolve_dtype;   /* bufferext._dtypes.resolve, fetched lazily */
    PyObject *as_buffer_dispatch;   /* bufferext._bridges._dispatch, lazily */
    PyObject *cpu_types;       /* bufferext._bridges._CPU_TYPES (a tuple) */
    PyObject *str_dtype;       /* "dtype" and "isbuiltin", interned (adapter.c) */
    PyObject *str_isbuiltin;
} bufferext_state;

/* One init per file, in the order module.c calls them; each returns 0 or
 * -1 with an exception. */
int bufferext_init_view(PyObject *module);           /* view.c */
int bufferext_init_cpubuffer(PyObject *module);      /* cpubuffer.c */
int bufferext_init_cuda(PyObject *module);           /* cudabuffer.c */
int bufferext_init_ve(PyObject *module);             /* vebuffer.c */
int bufferext_init_adapter(PyObject *module);        /* adapter.c */
int bufferext_init_dlpack_exchange(PyObject *module);   /* dlpack_exchange.c */

/* Without the GIL (a build with Py_GIL_DISABLED, docs/platforms.rst).  With
 * the GIL all of these are nothing and the code is as it always was.
 * - BUFFEREXT_LOCKED_BEGIN(op) ... BUFFEREXT_LOCKED_END(): the object's
 *   critical section, held by every slot and method that reads or changes
 *   its export count, open state, pins or layout (getbuffer,
 *   releasebuffer, close, resize, release, the pins around copies).  A
 *   critical section is suspended whenever its thread waits without its
 *   thread state: in Py_BEGIN_ALLOW_THREADS, in a contended PyMutex (such
 *   as the mutexes below), in Python code: so inside one, the object's
 *   state is consistent before anything that may wait (cpubuffer.c gives
 *   a block back to its cache after the swap), and what must survive a
 *   wait is pinned first (an export or `busy` count that close and resize
 *   refuse).
 * - BUFFEREXT_MUTEX(name), BUFFEREXT_MUTEX_LOCK/UNLOCK(name): a mutex for
 *   process-wide state made lazily (the CPU block cache, the device
 *   library tables, the VE nodes, the dtype resolver); never held while
 *   Python code runs. */
#ifdef Py_GIL_DISABLED
#  define BUFFEREXT_LOCKED_BEGIN(op) Py_BEGIN_CRITICAL_SECTION(op)
#  define BUFFEREXT_LOCKED_END() Py_END_CRITICAL_SECTION()
#  define BUFFEREXT_MUTEX(name) static PyMutex name
#  define BUFFEREXT_MUTEX_LOCK(name) PyMutex_Lock(&(name))
#  define BUFFEREXT_MUTEX_UNLOCK(name) PyMutex_Unlock(&(name))
#else
#  define BUFFEREXT_LOCKED_BEGIN(op) {
#  define BUFFEREXT_LOCKED_END() }
#  define BUFFEREXT_MUTEX(name) struct bufferext_unused_##name
#  define BUFFEREXT_MUTEX_LOCK(name) ((void)0)
#  define BUFFEREXT_MUTEX_UNLOCK(name) ((void)0)
#endif
/* A pointer field that another thread may store while it is read without
 * the object's lock: CUDABuffer's device_info.event, which every export
 * hands out and synchronize() clears.  Loaded once and whole (a reader
 * keeps what it loaded), stored whole. */
#if defined(__GNUC__) || defined(__clang__)
#  define BUFFEREXT_LOAD_PTR(field) __atomic_load_n(&(field), __ATOMIC_ACQUIRE)
#  define BUFFEREXT_STORE_PTR(field, value) \
       __atomic_store_n(&(field), (value), __ATOMIC_RELEASE)
#else
#  define BUFFEREXT_LOAD_PTR(field) (field)
#  define BUFFEREXT_STORE_PTR(field, value) ((field) = (value))
#endif

/* `name`, a METH_NOARGS or METH_O method: `impl` in the critical section
 * (write `static` before it for a file's own method). */
#define BUFFEREXT_LOCKED_METHOD(name, impl)                                 \
    PyObject *name(PyObject *op, PyObject *arg)                             \
    {                                                                       \
        PyObject *result;                                                   \
        BUFFEREXT_LOCKED_BEGIN(op);                                         \
        result = impl(op, arg);                                             \
        BUFFEREXT_LOCKED_END();                                             \
        return result;                                                      \
    }

#endif
