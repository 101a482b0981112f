/* producer.h -- what the sample producers (CPUBuffer, CUDABuffer, VEBuffer)
 * share: the head every producer object starts with, the dtype/shape part
 * of tp_new, the common attributes, checks and slots.  The buffer protocol
 * itself (getbuffer/releasebuffer) stays in each type: it reads the head's
 * fields directly, with no call in between. */
#ifndef BUFFEREXT_MODULES_PRODUCER_H
#define BUFFEREXT_MODULES_PRODUCER_H
#include "parts.h"
#include "export.h"

/* What differs between the producers where shared code needs it. */
typedef struct {
    const char *name;           /* "CPUBuffer": messages and repr */
    const char *release_hint;   /* check_not_exported's advice, e.g.
                                   "release the views first" */
    /* Free the memory and mark the object closed (dealloc and
     * bufferext_producer_close; harmless when never set up). */
    void (*free_memory)(PyObject *op);
    /* The type's close() (called by __exit__): bufferext_producer_close
     * unless freeing can fail. */
    PyObject *(*close)(PyObject *op, PyObject *unused);
} bufferext_producer_kind;

/* The head of every producer object (its first member). */
typedef struct {
    PyObject_HEAD
    const bufferext_producer_kind *kind;
    int open;                   /* 0 once closed (or never set up) */
    bufferext_export_layout layout;
    Py_ssize_t *dims;           /* bufferext_dims_alloc: shape, strides,
                                   then the item strides */
    bufferext_exports exports;  /* exports and pins (exports.h) */
    bufferext_dtype dt;
    PyObject *weakreflist;
} bufferext_producer;

#define BufferExtProducer_CAST(op) ((bufferext_producer *)(op))
/* Where every producer keeps the layout its exports point at (each type's
 * object starts with the head). */
#define BUFFEREXT_PRODUCER_LAYOUT offsetof(bufferext_producer, layout)

/* The body of every producer's getbuffer: refuse a closed buffer (or one
 * that another thread is changing), fill the request, say where the
 * memory is (`device` NULL: CPU memory), count the export, in the
 * object's critical section (without the GIL).  Each type calls it with
 * its constant device, so the compiler drops what that device does not
 * need.  0 or -1 with BufferError.  Out of line: what
 * bufferext_producer_export leaves to it. */
BUFFEREXT_INTERNAL_COLD int
bufferext_producer_export_checked(PyObject *op, Py_buffer *view, int flags,
                                  Py_buffer_extended *ext, const char *device,
                                  void *device_info)
{
    bufferext_producer *p = (bufferext_producer *)op;
    int rc;

    view->obj = NULL;
    BUFFEREXT_LOCKED_BEGIN(op);
    rc = !p->open ? bufferext_refuse(op, "buffer is closed")
         : bufferext_exports_changing(&p->exports)
             ? bufferext_refuse(op, "another thread is closing or resizing "
                                    "it")
             : bufferext_export(op, view, flags, ext, &p->layout, device,
                                device_info, &p->exports);
    BUFFEREXT_LOCKED_END();
    return rc;
}

/* The same, inline and without the lock: a request that an open buffer of
 * the common layout meets as it is (no check can refuse it, no device
 * memory for a consumer that did not ask for it through the typed entry)
 * is counted and filled here without a call, so a getbuffer is a leaf
 * function on that path; anything else, and a buffer another thread is
 * changing, goes to bufferext_producer_export_checked (a tail call).
 * `ext` as for bufferext_export. */
static inline int
bufferext_producer_export(PyObject *op, Py_buffer *view, int flags,
                          Py_buffer_extended *ext, const char *device,
                          void *device_info)
{
    bufferext_producer *p = (bufferext_producer *)op;

    if (bufferext_exports_enter(&p->exports)) {
        if (p->open && !BUFFEREXT_NEEDS_CHECK(&p->layout, flags) &&
            (device == NULL || (ext != NULL && (flags & PyBUF_DEVICE)))) {
            bufferext_fill_view(view, flags, &p->layout);
            (void)BufferExt_SetDevice(ext, op, flags, device, device_info);
            view->obj = Py_NewRef(op);
            return 0;
        }
        bufferext_exports_remove(&p->exports);
    }
    return bufferext_producer_export_checked(op, view, flags, ext, device,
                                             device_info);
}

/* The dtype/shape part of tp_new, in two steps.  Parsing runs every call
 * that can run Python code (the dtype resolver, each dimension's
 * __index__) on locals, before the object exists; setting up the new
 * object from the result runs none. */
typedef struct {
    bufferext_dtype dt;
    bufferext_layout layout;
} bufferext_producer_spec;

/* Resolve `dtype` (NULL: float64) and parse `shape`; `who` names the
 * caller in messages.  0, or -1 with an exception and nothing held. */
int bufferext_producer_parse(const char *who, bufferext_state *st,
                             PyObject *shape, PyObject *dtype,
                             bufferext_producer_spec *spec);
/* Set p->kind and the layout (everything but buf) from `spec`, whose dtype
 * references move to `p` (the spec is empty afterwards, success or not).
 * Runs no Python code.  0, or -1 with MemoryError (the caller drops the
 * object; dealloc frees what was set). */
int bufferext_producer_setup(bufferext_producer *p,
                             const bufferext_producer_kind *kind,
                             bufferext_producer_spec *spec, int readonly);
/* Replace shape and strides by those of `layout` (same itemsize): new
 * dims, length, contiguity and DLPack's view.  0, or -1 with MemoryError
 * and nothing changed. */
int bufferext_producer_set_layout(bufferext_producer *p,
                                  const bufferext_layout *layout);

/* The state a producer's layout and lifetime can change (resize, close,
 * exports), copied in the object's critical section: what a getter builds
 * afterwards (a tuple, a dict: allocations that may run the garbage
 * collector and its finalizers, and without the GIL other threads) reads
 * only the copy.  The dtype, format, item size and readonly flag never
 * change after tp_new. */
typedef struct {
    int open, ndim;
    void *buf;
    Py_ssize_t len, exports;
    Py_ssize_t shape[PyBUF_MAX_NDIM], strides[PyBUF_MAX_NDIM];
} bufferext_producer_snapshot;

void bufferext_producer_read(bufferext_producer *p,
                             bufferext_producer_snapshot *out);

/* ValueError "operation on a closed Name" when closed.  0 or -1.  The
 * first reads under an export count (the object's critical section only
 * while another thread changes it), the second is for code that holds the
 * section already (a nested section on the same object may be suspended
 * meanwhile without the GIL, letting another thread in). */
int bufferext_producer_check_open(bufferext_producer *p);
int bufferext_producer_check_open_locked(bufferext_producer *p);
/* BufferError "Name: cannot <what> while N export(s) are alive (<hint>)"
 * and -1 while exported, else 0.  The first only reads the count (an
 * early check, before the Python code of a resize's shape); the second,
 * in the object's critical section, starts a change (close, resize) that
 * no export may see: after 0, end it with bufferext_producer_end_change
 * before the section ends (exports.h). */
int bufferext_producer_check_not_exported(bufferext_producer *p,
                                          const char *what);
int bufferext_producer_begin_change(bufferext_producer *p, const char *what);
static inline void
bufferext_producer_end_change(bufferext_producer *p)
{
    bufferext_exports_end_change(&p->exports);
}

/* numpy.empty(shape, dtype) and a writable C-contiguous export of it in
 * `view` (when `view` is not NULL): where to_host() copies to. */
PyObject *bufferext_producer_host_array(bufferext_producer *p,
                                        Py_buffer *view);
/* Whether `a` and `b` hold items of one element type: their canonical
 * buffer formats, which name every type bufferext holds (numpy's dtypes
 * do not: without ml_dtypes every float8 kind is 'V1').  No Python code. */
static inline int
bufferext_producer_same_type(const bufferext_producer *a,
                             const bufferext_producer *b)
{
    return strcmp(a->dt.format, b->dt.format) == 0;
}

/* Export `source` (PyBUF_FULL_RO, through the gate) into `ext` for
 * copy_from_host: the same number of bytes, raw bytes or items of the
 * dtype, else ValueError naming `who`.  0 with `p` pinned for writing
 * (bufferext_producer_pin) and `ext` held: release both after the copy
 * (bufferext_release_ext_raised).  -1 with neither held. */
int bufferext_producer_get_source(bufferext_producer *p, const char *who,
                                  PyObject *source, Py_buffer_extended *ext);
/* Copy `view`'s items in C order to `dst` (view->len bytes), right also
 * when they overlap it (a transposed view of the destination itself).
 * 0, or -1 with an exception. */
int bufferext_copy_to_contiguous(void *dst, Py_buffer *view);
/* The bytes of `view` in C order: view->buf when contiguous, else a copy
 * in *staged (PyMem_RawFree it; NULL when none was made).  NULL with an
 * exception. */
const void *bufferext_contiguous_bytes(Py_buffer *view, void **staged);

/* "Name(shape, dtype='...'<extra>[, readonly=True]<closed>)<after>":
 * `closed` and `after` are shown only when the buffer is closed. */
/* The len() (first dimension) and truth (always true) slots. */
Py_ssize_t bufferext_producer_length(PyObject *op);
int bufferext_producer_bool(PyObject *op);
PyObject *bufferext_producer_repr(PyObject *op, const char *extra,
                                  const char *closed, const char *after);

/* Slots and methods every producer uses as they are. */
/* Hold the memory of an open producer while Python code runs or a thread
 * waits without the GIL (an export that close and resize refuse), checked
 * in the same critical section: ValueError naming `who` when it is closed,
 * and when `write`, BufferError when it is read-only and exported (its
 * consumers hold it as read-only memory).  0, or -1.  Unpin when done. */
int bufferext_producer_pin(bufferext_producer *p, const char *who,
                           int write);
/* The end of a pin or of an export (releasebuffer): inline and without
 * the lock, it is on the hot path of every export. */
static inline void
bufferext_producer_unpin(bufferext_producer *p)
{
    bufferext_exports_remove(&p->exports);
}
void bufferext_producer_releasebuffer(PyObject *op, Py_buffer *view);
int bufferext_producer_traverse(PyObject *op, visitproc visit, void *arg);
void bufferext_producer_dealloc(PyObject *op);
/* The with statement: __enter__ returns the producer (CUDABuffer's own
 * also refuses a closed one), __exit__ closes it and lets any exception
 * propagate.  Varargs, like memoryview.__exit__. */
PyObject *bufferext_producer_enter(PyObject *op, PyObject *unused);
#define BUFFEREXT_PRODUCER_ENTER_DOC                                       \
    "__enter__($self, /)\n--\n\n"                                          \
    "Return self; the end of the with block closes the buffer."
#define BUFFEREXT_PRODUCER_EXIT_DOC                                        \
    "__exit__($self, /, *exc_info)\n--\n\n"                                \
    "Close the buffer (close(): BufferError while exported); never\n"      \
    "suppresses the exception of the with block."
/* close(): free the memory now (kind->free_memory must leave the object
 * closed); BufferError while exported, None when already closed. */
PyObject *bufferext_producer_close(PyObject *op, PyObject *unused);
PyObject *bufferext_producer_exit(PyObject *op, PyObject *args);
extern PyMemberDef bufferext_producer_members[];   /* __weaklistoffset__ */

/* The shared attributes. */
PyObject *bufferext_producer_get_shape(PyObject *op, void *closure);
PyObject *bufferext_producer_get_strides(PyObject *op, void *closure);
PyObject *bufferext_producer_get_ndim(PyObject *op, void *closure);
PyObject *bufferext_producer_get_nbytes(PyObject *op, void *closure);
PyObject *bufferext_producer_get_itemsize(PyObject *op, void *closure);
PyObject *bufferext_producer_get_dtype(PyObject *op, void *closure);
PyObject *bufferext_producer_get_format(PyObject *op, void *closure);
PyObject *bufferext_producer_get_readonly(PyObject *op, void *closure);
PyObject *bufferext_producer_get_exports(PyObject *op, void *closure);
PyObject *bufferext_producer_get_closed(PyObject *op, void *closure);

/* Their PyGetSetDef entries, for the start of each type's getset array
 * (a heap type takes one array): name, doc. */
#define BUFFEREXT_PRODUCER_ATTRS(X)                                        \
    X(shape, "Shape, a tuple of ints.")                                    \
    X(strides, "Strides in bytes (C order).")                              \
    X(ndim, "Number of dimensions.")                                       \
    X(nbytes, "Size in bytes.")                                            \
    X(itemsize, "Bytes per item.")                                         \
    X(dtype, "Element type, a numpy.dtype.")                               \
    X(format, "Element type as a struct format.")                          \
    X(readonly, "True if exports are read-only.")                          \
    X(exports, "Number of live exports.")                                  \
    X(closed, "True once close() freed the memory.")

#define BUFFEREXT_PRODUCER_GETSET_ENTRY(name, doc)                         \
    {#name, bufferext_producer_get_##name, NULL, doc, NULL},

/* `__reduce_ex__` of a device producer: a bound callable that raises
 * TypeError (device memory cannot be pickled or copied; use to_host()).
 * pickle, copy.copy and copy.deepcopy all look it up on the instance, so
 * the refusal reaches them with its reason instead of object's generic
 * "cannot pickle". */
PyObject *bufferext_producer_get_refuse_reduce(PyObject *op, void *closure);

/* The getset entries of a device producer (CUDABuffer, VEBuffer): the
 * shared attributes and the pickling/copying refusal.  CPUBuffer, which
 * pickles and copies, takes BUFFEREXT_PRODUCER_ATTRS alone. */
#define BUFFEREXT_PRODUCER_GETSET                                          \
    BUFFEREXT_PRODUCER_ATTRS(BUFFEREXT_PRODUCER_GETSET_ENTRY)              \
    {"__reduce_ex__", bufferext_producer_get_refuse_reduce, NULL,          \
     "Refuses: device memory cannot be pickled or copied (use "            \
     "to_host()).", NULL},

#endif
