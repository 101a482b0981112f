/* parts.h -- what the C files of the _bufferext module share: the module
 * state and one init function per file, called from module.c. */
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
    PyObject *resolve_dtype;   /* bufferext._dtypes.resolve, imported lazily */
    /* as_buffer() (adapter.c): the dispatch of Lib/bufferext/_bridges.py
     * and the exact types whose buffer is always CPU memory, set by
     * _bridges when it is imported (NULL until then) */
    PyObject *as_buffer_dispatch;
    PyObject *cpu_types;        /* a tuple of types */
} bufferext_state;

bufferext_state *bufferext_get_state(PyObject *module);
/* The state of the module that defined `type` (or a base of it). */
bufferext_state *bufferext_state_from_type(PyTypeObject *type);

/* Make a heap type of `module` from `spec`, store it in *slot, declare its
 * supported request flags and add it to the module under the last part of
 * spec->name.  0 or -1 with an exception. */
int bufferext_add_type(PyObject *module, PyType_Spec *spec,
                       int supported_flags, PyTypeObject **slot);

/* One init per file; each returns 0 or -1 with an exception. */
int bufferext_init_view(PyObject *module);       /* view.c */
int bufferext_init_cpubuffer(PyObject *module);  /* cpubuffer.c */
int bufferext_init_cuda(PyObject *module);       /* cudabuffer.c */
int bufferext_init_ve(PyObject *module);         /* vebuffer.c */
int bufferext_init_adapter(PyObject *module);    /* adapter.c */

/* fastmethod.c: replace each of `names`, methods in type's dict, by a
 * descriptor that binds without an allocation (the with statement binds
 * __enter__ and __exit__ on every use).  0 or -1 with an exception.  The
 * clear function frees its freelist (at module clear). */
int bufferext_fastmethods(PyObject *module, PyTypeObject *type,
                          const char *const *names);
void bufferext_fastmethods_clear(void);
/* view.c: the same for BufferView's freelist. */
void bufferext_view_freelist_clear(void);

/* Freelists (BufferView, fastmethod's bound methods): how many dead
 * objects each keeps for reuse.  Off (0) without the GIL, which they would
 * need a lock for, and under AddressSanitizer, where a reused object would
 * hide a use after free; -DBUFFEREXT_FREELIST=0 turns them off. */
#ifndef BUFFEREXT_FREELIST
#  if defined(Py_GIL_DISABLED) || defined(__SANITIZE_ADDRESS__)
#    define BUFFEREXT_FREELIST 0
#  elif defined(__has_feature)
#    if __has_feature(address_sanitizer)
#      define BUFFEREXT_FREELIST 0
#    endif
#  endif
#endif
#ifndef BUFFEREXT_FREELIST
#  define BUFFEREXT_FREELIST 16
#endif

#if BUFFEREXT_FREELIST > 0
/* The memory of dead GC objects of one type, kept for the next; open from
 * module init until the module is cleared. */
typedef struct {
    void *items[BUFFEREXT_FREELIST];
    int count, open;
} bufferext_freelist;

/* Memory for a new object, or NULL (then allocate). */
static inline void *
bufferext_freelist_pop(bufferext_freelist *f)
{
    return f->count > 0 ? f->items[--f->count] : NULL;
}

/* Keep the memory of a dead, untracked object: 1, or 0 when the list is
 * full or closed (the caller frees it then). */
static inline int
bufferext_freelist_push(bufferext_freelist *f, void *op)
{
    if (!f->open || f->count == BUFFEREXT_FREELIST) {
        return 0;
    }
    f->items[f->count++] = op;
    return 1;
}

/* Close the list and free what it keeps. */
static inline void
bufferext_freelist_close(bufferext_freelist *f)
{
    f->open = 0;
    while (f->count > 0) {
        PyObject_GC_Del(f->items[--f->count]);
    }
}
#endif

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

/* Types only bufferext makes (BufferView, BufferAdapter): the flag, and on
 * 3.9, which lacks it, no tp_new (Type() -> TypeError). */
#ifndef Py_TPFLAGS_DISALLOW_INSTANTIATION
#  define Py_TPFLAGS_DISALLOW_INSTANTIATION 0
#endif
static inline void
bufferext_disallow_instantiation(PyTypeObject *type)
{
#if PY_VERSION_HEX < 0x030A0000
    type->tp_new = NULL;
#else
    (void)type;
#endif
}

/* gate.c: BufferExt_GetBuffer(obj, ext, flags) and the one validation of
 * the export another exporter filled, before anything reads it: the C
 * conventions (an exception iff it failed), ndim, itemsize, len, readonly,
 * format, shape, strides, suboffsets, the extent and our device names'
 * device_info.  0 with `ext` held, or -1 with an exception and nothing held
 * (a refusal is BufferError "Type: exported an invalid buffer: field = value
 * ..."). */
int bufferext_gate_acquire(PyObject *exporter, Py_buffer_extended *ext,
                           int flags);
/* Its format rule alone (printable, and the item size of a format it can
 * size equal to `itemsize`), for layouts read from other protocols; `who`
 * names the source in the BufferError. */
int bufferext_gate_format(const char *who, const char *format,
                          Py_ssize_t itemsize);
/* C-order strides for a layout that passed the gate (sizes of 0 count as 1;
 * the outer strides of an empty array too large to multiply are 0). */
void bufferext_c_strides(int ndim, const Py_ssize_t *shape,
                         Py_ssize_t itemsize, Py_ssize_t *strides);

/* module.c: our own types' getbuffer functions.  bufferext_own_register
 * records a type's (at init); bufferext_own_getbuffer finds the one of the
 * bufferext type `obj` is an instance of (its type or a base), the only
 * getbuffer whose exports carry our layout in view->internal (a subclass
 * may override __buffer__, and from 3.12 CPython gives every Python
 * subclass of a guarded type a generic slot).  NULL with TypeError if
 * `obj` is not an instance of one of our types. */
void bufferext_own_register(PyTypeObject *type);
getbufferproc bufferext_own_getbuffer(PyObject *obj);
/* cpubuffer.c: CPUBuffer's getbuffer.  A type whose slot is this function
 * is CPUBuffer or a subclass that keeps its export (before 3.12 every
 * subclass): its objects are producers of CPU memory (producer.h), which
 * dlpack.c describes without an export. */
int bufferext_cpubuffer_getbuffer(PyObject *op, Py_buffer *view, int flags);

/* export.c: __array__ of memory on a device: numpy swallows the BufferError
 * of the buffer protocol and would build a 0-d object array; this refuses
 * with BufferError.  A METH_VARARGS | METH_KEYWORDS method, and the
 * __array__ attribute of types whose memory may be on the CPU or a device
 * (AttributeError for CPU memory, so numpy takes the buffer protocol). */
PyObject *bufferext_refuse_array(PyObject *self, PyObject *args,
                                 PyObject *kwargs);
PyObject *bufferext_array_attr(PyObject *self, const char *device);

/* A dict per device library for bufferext.devices(). */
PyObject *bufferext_cuda_status(void);           /* cudabuffer.c */
PyObject *bufferext_ve_status(void);             /* vebuffer.c */

/* ---- shared helpers ---------------------------------------------------- */

/* PyBuffer_Release of an export of a foreign exporter while an exception is
 * set: its releasebuffer may run Python code (a __release_buffer__), which
 * must not run with an exception pending; the exception is kept. */
static inline void
bufferext_release_raised(Py_buffer *view)
{
    PyObject *type, *value, *tb;

    PyErr_Fetch(&type, &value, &tb);
    PyBuffer_Release(view);
    PyErr_Restore(type, value, tb);
}

/* The same for an extended view (BufferExt_Release). */
static inline void
bufferext_release_ext_raised(Py_buffer_extended *view)
{
    PyObject *type, *value, *tb;

    PyErr_Fetch(&type, &value, &tb);
    BufferExt_Release(view);
    PyErr_Restore(type, value, tb);
}

/* A producer's element type, from bufferext._dtypes.resolve(). */
typedef struct {
    char format[8];         /* struct-module format, NUL-terminated */
    Py_ssize_t itemsize;
    PyObject *dtype;        /* numpy.dtype (strong reference) */
    PyObject *typestr;      /* array-interface typestr, e.g. '<f8' */
} bufferext_dtype;

/* Resolve a numpy-style dtype or struct format into `out` (references are
 * new; clear them with bufferext_dtype_clear).  0 or -1 with TypeError. */
int bufferext_dtype_resolve(bufferext_state *st, PyObject *dtype,
                            bufferext_dtype *out);
void bufferext_dtype_clear(bufferext_dtype *dt);

/* A C-contiguous shape, parsed from an int or a sequence of ints. */
typedef struct {
    int ndim;
    Py_ssize_t nbytes;
    Py_ssize_t shape[PyBUF_MAX_NDIM];
    Py_ssize_t strides[PyBUF_MAX_NDIM];
} bufferext_layout;

/* Parse `shape` for items of `itemsize` bytes; `who` names the caller in
 * messages.  ValueError for negative/too many dims or overflow, TypeError
 * for non-integers.  Returns 0 or -1. */
int bufferext_layout_parse(const char *who, PyObject *shape,
                           Py_ssize_t itemsize, bufferext_layout *out);
PyObject *bufferext_tuple_from_ssize(int n, const Py_ssize_t *values);

int bufferext_parse_obj_flags(const char *fname, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames,
                              PyObject **obj, int *flags);

/* Fill `view` from a held layout (export.h, inline), honouring `flags` the way CPython's
 * memoryview does (checks in a fixed order, BufferError "Type: reason").
 * Sets everything but view->obj and the extension. 0 or -1. */
typedef struct {
    void *buf;
    Py_ssize_t len;
    Py_ssize_t itemsize;
    const char *format;
    int ndim;
    int readonly;
    Py_ssize_t *shape;
    Py_ssize_t *strides;
    Py_ssize_t *suboffsets;
    int c_contiguous;       /* precomputed: the hot path calls nothing */
    int f_contiguous;
    /* Request bits refused without further thought, for a C-contiguous
     * layout without suboffsets (WRITABLE when read-only, F_CONTIGUOUS's
     * own bit when not Fortran-ordered); -1 for any other layout, which
     * takes the full checks. */
    int refused;
    /* DLPack's view of the layout, computed once (bufferext_layout_dlpack):
     * strides in items (NULL when a stride is not a whole number of items)
     * and the packed dtype (code | bits << 8 | lanes << 16; 0 if none). */
    int64_t *item_strides;
    uint32_t dl_dtype;
} bufferext_export_layout;

/* Our exporters put their layout in view->internal (the field is the
 * exporter's own): dlpack.c, which serves only our types, reads it back. */

/* Contiguity of a layout, for filling c_contiguous/f_contiguous and
 * refused (call it after readonly is set). */
void bufferext_layout_contiguity(bufferext_export_layout *layout);
/* One block for shape and strides (2 * ndim entries) plus room for `ndim`
 * item strides (*items); free it with PyMem_Free.  NULL with MemoryError. */
Py_ssize_t *bufferext_dims_alloc(int ndim, int64_t **items);
/* Compute DLPack's view of a layout: fill `storage` (ndim entries) with
 * the strides in items and point layout->item_strides at it (NULL when a
 * stride is not a whole number of items), and set layout->dl_dtype.  Needs
 * format, itemsize, ndim and strides set. */
void bufferext_layout_dlpack(bufferext_export_layout *layout,
                             int64_t *storage);
/* The packed DLPack dtype of a struct format: 0 and *packed set; 1 when the
 * byte order is not native; 2 when DLPack has no such type; 3 when the
 * format's item size is not `itemsize`. */
int bufferext_format_dlpack(const char *format, Py_ssize_t itemsize,
                            uint32_t *packed);

/* dlpack.c: DLPack export of any extended-buffer exporter.  The capsule
 * holds one extended-buffer export of `exporter` for its lifetime. */
PyObject *bufferext_dlpack(PyObject *exporter, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames);
PyObject *bufferext_dlpack_device(PyObject *exporter);
/* For the C exchange API: an owning versioned tensor (CUDA work ordered
 * before the legacy default stream), or a non-owning fill of `out` whose
 * shape and strides point into the exporter.  NULL / -1 with an exception. */
struct BxDLManagedTensorVersioned *bufferext_dlpack_managed(PyObject *exporter);
struct BxDLTensor;
/* The exchange API's dltensor_from_py_object_no_sync itself (its table
 * points here: no call in between). */
int bufferext_dlpack_fill(void *py_object, struct BxDLTensor *out);
int bufferext_init_dlpack_exchange(PyObject *module);   /* dlpack_exchange.c */
/* Free a consumed managed tensor (`versioned` says which struct) with the
 * GIL held: one made by dlpack.c is released directly, so also while the
 * interpreter finalizes; any other producer's deleter is called. */
void bufferext_dlpack_delete_locked(void *managed, int versioned);

/* cudabuffer.c: the DLPack stream rule for an export of "bufferext.cuda"
 * memory.  `stream` is __dlpack__'s argument (NULL or None: the legacy
 * default stream, 1 legacy, 2 per-thread, > 2 a CUstream, -1 no
 * synchronisation, 0 and other values ValueError).  If device_info carries
 * an event, the consumer's stream is made to wait on it.  0 or -1. */
int bufferext_cuda_dlpack_sync(PyObject *exporter,
                               const Py_buffer_extended *ext,
                               PyObject *stream);

/* Host staging of device memory, for BufferView.synchronize, copy_to_host
 * and copy_from_host (view.c). */
typedef enum {
    BUFFEREXT_STAGE_WAIT,       /* wait for the exporter's pending work */
    BUFFEREXT_STAGE_TO_HOST,    /* ... then copy the memory to the host */
    BUFFEREXT_STAGE_FROM_HOST   /* ... then copy host bytes into it */
} bufferext_stage;

/* cuda_driver.c: "bufferext.cuda" memory at `device` described by `info`:
 * wait on the host for info->event when it is not NULL (loading the driver
 * only then or for a copy), then copy `nbytes` between it and `host` in
 * info->context; all without the GIL, complete on return.  The caller keeps
 * the export and `host` pinned meanwhile.  0, or -1 with an exception
 * naming `who`. */
int bufferext_cuda_stage(bufferext_state *st, const char *who,
                         const BufferExt_CUDADeviceInfo *info,
                         bufferext_stage what, void *device, void *host,
                         Py_ssize_t nbytes);

/* vebuffer.c: veo_hmemcpy of `size` bytes without the GIL (VEO copies are
 * synchronous), loading the VEO library first when no VEBuffer did.  The
 * caller keeps both sides pinned.  0, or -1 with an exception naming
 * `who`. */
int bufferext_ve_hmemcpy(bufferext_state *st, const char *who, void *dst,
                         const void *src, Py_ssize_t size);

/* cudabuffer.c: a copy from host memory must bring raw bytes ('B' or no
 * format) or items equal to `dtype`; else ValueError naming `who`, the
 * source format and the dtype.  0 or -1. */
int bufferext_check_source_format(bufferext_state *st, const char *who,
                                  const Py_buffer *view, PyObject *dtype);

/* loader.c: lazy loading of device libraries. */
typedef struct {
    const char *label;          /* "CUDA driver" */
    const char *env_var;        /* "BUFFEREXT_CUDA_DRIVER" */
    const char *const *defaults;/* NULL-terminated candidate paths */
    const char *const *symbols; /* NULL-terminated symbol names */
    void **table;               /* filled in symbol order */
} bufferext_library_spec;

typedef struct {
    int state;                  /* 0 untried, 1 loaded, -1 failed, -2 off */
    void *handle;
    char path[512];             /* what was loaded, or the last candidate */
    char message[1024];         /* why it failed, naming what was tried */
} bufferext_library;

/* Load once (thread-safe under the GIL).  Returns 0 when loaded; -1 with
 * DeviceUnavailableError (of `st`) otherwise, its message from lib->message. */
int bufferext_library_load(bufferext_state *st,
                           const bufferext_library_spec *spec,
                           bufferext_library *lib);
/* A dict describing the library for bufferext.devices() (tries to load). */
PyObject *bufferext_library_status(const bufferext_library_spec *spec,
                                   bufferext_library *lib);

#endif
