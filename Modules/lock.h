/* lock.h -- the locks of free-threaded builds, and what each shared
 * global of the module is protected by (parts.h includes this for every
 * file). */
#ifndef BUFFEREXT_MODULES_LOCK_H
#define BUFFEREXT_MODULES_LOCK_H
#include <Python.h>

/* Without the GIL (a build with Py_GIL_DISABLED, docs/platforms.rst).  With
 * the GIL all of these are nothing and the code is as it always was.
 * - BUFFEREXT_LOCKED_BEGIN(op) ... BUFFEREXT_LOCKED_END(): the object's
 *   critical section, held by every slot and method that changes its open
 *   state, pins or layout (close, resize, release, the pins around
 *   copies) and by the readers that copy them; a producer's and an
 *   adapter's getbuffer and releasebuffer count their exports without it
 *   (exports.h: a change refuses while they are counted).  A
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
/* A field that another thread may store while it is read without the
 * object's lock: CUDABuffer's device_info.event, which every export hands
 * out and synchronize() clears; a BufferView's `acquired`, which
 * __enter__ reads and release() clears in the view's critical section;
 * the bridges' steps (adapter.c).  Loaded once and whole (a reader keeps
 * what it loaded), stored whole. */
#if defined(__GNUC__) || defined(__clang__)
#  define BUFFEREXT_LOAD(field) __atomic_load_n(&(field), __ATOMIC_ACQUIRE)
#  define BUFFEREXT_STORE(field, value) \
       __atomic_store_n(&(field), (value), __ATOMIC_RELEASE)
#else
#  define BUFFEREXT_LOAD(field) (field)
#  define BUFFEREXT_STORE(field, value) ((field) = (value))
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

/* The process-wide globals and what protects each (every one also under
 * the GIL where there is one):
 * - loader.c: every bufferext_library's state, path and message
 *   (cuda_library, veo_library): load_mutex, written by the first try only.
 * - cuda_driver.c: cuda_init and bridge_streams: cuda_mutex.
 * - ve_driver.c: ve_nodes, ve_exiting, ve_atexit_registered: ve_mutex.
 * - blockcache.c: the cache (cache, cache_count, cache_bytes): cache_mutex;
 *   cache_limit is written once, at module init.
 * - export.c: the state's resolve_dtype: resolver_mutex; its
 *   dtype_answers: the dict's own (the GIL, or its lock without one).
 * - adapter.c: the state's as_buffer_steps, as_buffer_in_place and
 *   cpu_types: written once, under bridges_mutex, the steps stored last
 *   (BUFFEREXT_STORE); read without it once the steps are there.
 * - state.c: module_def, own_entries, bufferext_cpubuffer_entry; and
 *   dlpack_exchange.c: exchange_module: written at module init (the
 *   import lock runs one at a time), the same values each time, read only
 *   after.
 * - view.c, fastmethod.c, dlpack.c: the freelists: the GIL; without it,
 *   each thread keeps its own (freelist.c), their `open` stored whole.
 * Everything else lives in an object, under that object's critical
 * section (BUFFEREXT_LOCKED_BEGIN above) or its export and busy counts;
 * a capsule an import consumes (dlpack.c, arrow.c) is taken, and given
 * back if refused, in the capsule's critical section. */

#endif
