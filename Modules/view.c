/* view.c -- BufferView: one acquired extended buffer, seen from Python.
 * memoryview cannot carry the extension (it copies sizeof(Py_buffer)), so
 * this type holds a Py_buffer_extended, shows its fields, shows device_info
 * as a typed object, re-exports the buffer itself (CPU memory to anyone,
 * device memory only under PyBUF_DEVICE), and pins it while staging.c waits
 * for and stages its memory through host memory.  Also get_buffer(). */
#include "arrow.h"
#include "dlpack.h"
#include "export.h"
#include "fastmethod.h"
#include "freelist.h"
#include "gate.h"
#include "staging.h"
#include "state.h"
#include "view.h"

typedef struct {
    PyObject_HEAD
    Py_buffer_extended ext;
    int acquired;
    int request_flags;
    bufferext_export_layout layout; /* shape/strides never NULL here */
    int layout_done;                /* its derived part computed (below) */
    Py_ssize_t len_items;           /* shape when the exporter gave none */
    Py_ssize_t itemsize_one;        /* stride then */
    Py_ssize_t *computed_strides;   /* C strides when it gave none */
    int64_t *items;                 /* strides in items (see export.h) */
    int64_t items_inline[8];        /* ... without an allocation */
    bufferext_exports exports;      /* under the lock here (exports.h) */
    Py_ssize_t busy;                /* waits and copies without the GIL */
    PyObject *weakreflist;
} BufferViewObject;

#define BufferView_CAST(op) ((BufferViewObject *)(op))

#if BUFFEREXT_FREELIST > 0
/* Memory of dead views, for the next get_buffer(); open while the module
 * is (see freelist.h). */
static bufferext_freelist view_freelist = {.kind = BUFFEREXT_FREELIST_VIEW};
#endif

/* A new GC-tracked BufferView, from the freelist when it has one; the
 * fields get_buffer() fills are left as they are. */
static BufferViewObject *
view_alloc(PyTypeObject *type)
{
    BufferViewObject *self;
#if BUFFEREXT_FREELIST > 0
    self = bufferext_freelist_pop(&view_freelist);
    if (self != NULL) {
        (void)PyObject_Init((PyObject *)self, type);
        /* what tp_alloc's zeroing gives and get_buffer does not set (a
         * memset of the whole object costs more than the rest of it) */
        self->acquired = 0;
        self->layout_done = 0;
        self->computed_strides = NULL;
        self->items = NULL;
        memset(&self->exports, 0, sizeof(self->exports));
        bufferext_exports_init(&self->exports);
        self->busy = 0;
        self->weakreflist = NULL;
        PyObject_GC_Track(self);
        return self;
    }
#endif
    self = (BufferViewObject *)type->tp_alloc(type, 0);
    if (self != NULL) {
        bufferext_exports_init(&self->exports);
    }
    return self;
}

void
bufferext_view_freelist_clear(void)
{
#if BUFFEREXT_FREELIST > 0
    bufferext_freelist_close(&view_freelist);
#endif
}

static int view_pin(BufferViewObject *self);
static void view_unpin(BufferViewObject *self);

/* ValueError once released; call it in the view's critical section, or
 * pinned (see view_pin), or use check_acquired_now. */
static int
check_acquired(BufferViewObject *self)
{
    if (!self->acquired) {
        PyErr_SetString(PyExc_ValueError,
                        "operation on a released BufferView");
        return -1;
    }
    return 0;
}

/* Complete the layout: a NULL shape means 1-D bytes, NULL strides C order. */
static int
view_build_layout(BufferViewObject *self)
{
    Py_buffer *v = &self->ext.view;
    bufferext_export_layout *l = &self->layout;

    l->buf = v->buf;
    l->len = v->len;
    l->readonly = v->readonly;
    l->itemsize = v->itemsize;
    /* no format asked for: unsigned bytes if the items are bytes, else
     * unknown (NULL: an export asking for PyBUF_FORMAT is refused, a 'B'
     * for items of several bytes would be read byte by byte) */
    l->format = v->format != NULL ? v->format
                                  : (v->itemsize == 1 ? "B" : NULL);
    l->ndim = v->ndim;
    l->shape = v->shape;
    l->strides = v->strides;
    /* a 0-d buffer has no dimension to offset (CPython would follow an
     * empty suboffsets array into its indirect copy) */
    l->suboffsets = v->ndim > 0 ? v->suboffsets : NULL;
    if (v->shape == NULL &&
        !(v->ndim == 0 && REQ_SHAPE(self->request_flags))) {
        /* PEP 3118: without a shape, the consumer assumes bytes (but a
         * 0-d export answering a PyBUF_ND request may leave shape NULL). */
        self->len_items = v->len;
        self->itemsize_one = 1;
        l->itemsize = 1;
        l->format = "B";
        l->ndim = 1;
        l->shape = &self->len_items;
        l->strides = &self->itemsize_one;
    }
    else if (v->strides == NULL && v->ndim > 0) {
        self->computed_strides =
            PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)v->ndim);
        if (self->computed_strides == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        bufferext_c_strides(v->ndim, v->shape, v->itemsize,
                            self->computed_strides);
        l->strides = self->computed_strides;
    }
    self->items = self->items_inline;
    if (l->ndim > 8) {
        self->items = PyMem_Malloc(sizeof(int64_t) * (size_t)l->ndim);
        if (self->items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

/* The layout's derived part (contiguity, DLPack's item strides and dtype)
 * is computed on first use, by an export of the view or a reader of
 * contiguity: `with get_buffer(obj):` needs none of it.  The view is
 * acquired. */
static void
view_complete_layout(BufferViewObject *self)
{
    if (!self->layout_done) {
        bufferext_layout_contiguity(&self->layout);
        bufferext_layout_dlpack(&self->layout, self->items);
        self->layout_done = 1;
    }
}

/* layout.c_contiguous ('C') or f_contiguous ('F'), completed first. */
static int
view_contiguous(BufferViewObject *self, char order)
{
    int result;

    BUFFEREXT_LOCKED_BEGIN((PyObject *)self);
    view_complete_layout(self);
    result = order == 'C' ? self->layout.c_contiguous
                          : self->layout.f_contiguous;
    BUFFEREXT_LOCKED_END();
    return result;
}

static void
view_release_held(BufferViewObject *self)
{
    if (self->acquired) {
        /* the exporter's release may run Python code (a dealloc or a
         * failed get_buffer() may have an exception pending) */
        BUFFEREXT_STORE(self->acquired, 0);     /* check_acquired_now */
        bufferext_release_ext_raised(&self->ext);
    }
    if (self->computed_strides != NULL) {
        PyMem_Free(self->computed_strides);
        self->computed_strides = NULL;
    }
    if (self->items != self->items_inline && self->items != NULL) {
        PyMem_Free(self->items);
    }
    self->items = NULL;
    self->layout.item_strides = NULL;
}

void
bufferext_hint_as_buffer(const char *who, PyObject *obj)
{
    static const char *const bridged[][2] = {   /* as_buffer's order */
        {"__arrow_c_device_array__", "the Arrow C Device interface"},
        {"__arrow_c_array__", "the Arrow C Data interface"},
        {"__dlpack__", "DLPack"},
        {"__cuda_array_interface__", "the CUDA Array Interface"},
        {"__ve_array_interface__", "the VE Array Interface"},
        {"__array_interface__", "the NumPy array interface"},
    };
    PyTypeObject *type = Py_TYPE(obj);
    PyObject *exc_type, *exc, *tb, *found = NULL;
    size_t i;

    if (!PyErr_ExceptionMatches(PyExc_TypeError) ||
        (type->tp_as_buffer != NULL &&
         type->tp_as_buffer->bf_getbuffer != NULL)) {
        return;
    }
    PyErr_Fetch(&exc_type, &exc, &tb);
    for (i = 0; i < sizeof bridged / sizeof bridged[0]; i++) {
        found = PyObject_GetAttrString((PyObject *)type, bridged[i][0]);
        if (found != NULL) {
            break;
        }
        PyErr_Clear();
    }
    if (found == NULL) {
        PyErr_Restore(exc_type, exc, tb);
        return;
    }
    Py_DECREF(found);
    Py_XDECREF(exc_type);
    Py_XDECREF(exc);
    Py_XDECREF(tb);
    PyErr_Format(PyExc_TypeError,
                 "%s: a '%.200s' object is not a buffer exporter; "
                 "it speaks %s (%s): bufferext.as_buffer(obj) bridges it "
                 "into an extended buffer", who, type->tp_name, bridged[i][1],
                 bridged[i][0]);
}

PyObject *
bufferext_get_buffer(PyObject *module, PyObject *const *args,
                     Py_ssize_t nargs, PyObject *kwnames)
{
    bufferext_state *st = bufferext_get_state(module);
    PyObject *obj;
    int flags = PyBUF_FULL_RO | PyBUF_DEVICE;
    BufferViewObject *self;

    if (nargs == 1 && kwnames == NULL) {
        obj = args[0];                  /* get_buffer(obj): the default */
    }
    else if (bufferext_parse_obj_flags("get_buffer", args, nargs, kwnames,
                                       &obj, &flags) < 0) {
        return NULL;
    }
    if (flags == PyBUF_READ || flags == PyBUF_WRITE) {
        /* CPython 3.13 raises SystemError for these two request values */
        PyErr_Format(PyExc_ValueError,
                     "get_buffer: flags = 0x%x is %s, a memoryview access "
                     "mode, not a buffer request", (unsigned int)flags,
                     flags == PyBUF_READ ? "PyBUF_READ" : "PyBUF_WRITE");
        return NULL;
    }
    self = view_alloc(st->BufferView_Type);
    if (self == NULL) {
        return NULL;
    }
    if (bufferext_gate_acquire(obj, &self->ext, flags) < 0) {
        Py_DECREF(self);
        bufferext_hint_as_buffer("get_buffer", obj);
        return NULL;
    }
    self->acquired = 1;
    self->request_flags = flags;
    if (view_build_layout(self) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
view_traverse(PyObject *op, visitproc visit, void *arg)
{
    BufferViewObject *self = BufferView_CAST(op);
    Py_VISIT(Py_TYPE(op));
    if (self->acquired) {
        Py_VISIT(self->ext.view.obj);
    }
    return 0;
}

static int
view_clear(PyObject *op)
{
    BufferViewObject *self = BufferView_CAST(op);
    if (bufferext_exports_count(&self->exports) == 0 && self->busy == 0) {
        view_release_held(self);
    }
    return 0;
}

static void
view_dealloc(PyObject *op)
{
    BufferViewObject *self = BufferView_CAST(op);
    PyTypeObject *type = Py_TYPE(op);

    PyObject_GC_UnTrack(op);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs(op);
    }
    view_release_held(self);
#if BUFFEREXT_FREELIST > 0
    if (bufferext_freelist_push(&view_freelist, self)) {
        Py_DECREF(type);
        return;
    }
#endif
    type->tp_free(op);
    Py_DECREF(type);
}

/* ---- re-export -------------------------------------------------------- */

static int
view_export(PyObject *op, Py_buffer *view, int flags, Py_buffer_extended *ext)
{
    BufferViewObject *self = BufferView_CAST(op);
    int device, rc;

    view->obj = NULL;
    BUFFEREXT_LOCKED_BEGIN(op);
    device = BufferExt_IsDevice(&self->ext);
    if (self->acquired) {
        view_complete_layout(self);
    }
    rc = !self->acquired
             ? bufferext_refuse(op, "BufferView is released")
             : bufferext_export(op, view, flags, ext, &self->layout,
                                device ? self->ext.device : NULL,
                                device ? self->ext.device_info : NULL,
                                &self->exports);
    BUFFEREXT_LOCKED_END();
    return rc;
}

BUFFEREXT_DEFINE_GETBUFFER(view_getbuffer, view_export);

static void
view_releasebuffer(PyObject *op, Py_buffer *view)
{
    (void)view;
    BUFFEREXT_LOCKED_BEGIN(op);
    bufferext_exports_remove(&BufferView_CAST(op)->exports);
    BUFFEREXT_LOCKED_END();
}

/* ---- methods ---------------------------------------------------------- */

static PyObject *
view_release_impl(PyObject *op, PyObject *unused)
{
    BufferViewObject *self = BufferView_CAST(op);
    Py_ssize_t exports = bufferext_exports_count(&self->exports);
    (void)unused;

    if (exports > 0) {
        PyErr_Format(PyExc_BufferError,
                     "BufferView has %zd export(s) (a memoryview?): release "
                     "them first", exports);
        return NULL;
    }
    if (self->busy > 0) {
        PyErr_SetString(PyExc_BufferError,
                        "BufferView: cannot release while it is in use (a "
                        "wait or copy without the GIL: synchronize, "
                        "copy_to_host, copy_from_host; or an attribute "
                        "being read, by another thread or by the code that "
                        "runs this release)");
        return NULL;
    }
    view_release_held(self);
    Py_RETURN_NONE;
}

/* from two threads: the first releases, the second finds nothing held */
static BUFFEREXT_LOCKED_METHOD(view_release, view_release_impl)

/* check_acquired, outside the critical section: `acquired` only ever goes
 * from 1 to 0, stored whole (view_release_held). */
static int
check_acquired_now(BufferViewObject *self)
{
    return BUFFEREXT_LOAD(self->acquired) ? 0 : check_acquired(self);
}

static PyObject *
view_enter(PyObject *op, PyObject *unused)
{
    (void)unused;
    if (check_acquired_now(BufferView_CAST(op)) < 0) {
        return NULL;
    }
    return Py_NewRef(op);
}

static PyObject *
view_exit(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "BufferView.__exit__() takes exactly "
                     "3 arguments (exc_type, exc_value, traceback), %zd "
                     "given", nargs);
        return NULL;
    }
    return view_release(op, NULL);
}

static int view_pin(BufferViewObject *self);
static void view_unpin(BufferViewObject *self);

/* BufferError unless the memory is the CPU's; call it pinned (view_pin:
 * no other thread releases the view meanwhile). */
static int
check_cpu(BufferViewObject *self, const char *what)
{
    if (BufferExt_IsDevice(&self->ext)) {
        PyErr_Format(PyExc_BufferError,
                     "BufferView.%s(): memory on device '%s' is not "
                     "CPU-accessible", what, self->ext.device);
        return -1;
    }
    return 0;
}

static PyObject *
view_tobytes(PyObject *op, PyObject *unused)
{
    BufferViewObject *self = BufferView_CAST(op);
    Py_buffer copy;
    PyObject *bytes;
    (void)unused;

    if (view_pin(self) < 0) {
        return NULL;
    }
    if (check_cpu(self, "tobytes") < 0 ||
        (bytes = PyBytes_FromStringAndSize(NULL, self->layout.len)) == NULL) {
        view_unpin(self);
        return NULL;
    }
    copy = self->ext.view;
    copy.ndim = self->layout.ndim;
    copy.shape = self->layout.shape;
    copy.strides = self->layout.strides;
    copy.suboffsets = self->layout.suboffsets;
    copy.itemsize = self->layout.itemsize;
    if (PyBuffer_ToContiguous(PyBytes_AS_STRING(bytes), &copy,
                              self->layout.len, 'C') < 0) {
        Py_CLEAR(bytes);
    }
    view_unpin(self);
    return bytes;
}

static PyObject *
view_memoryview(PyObject *op, PyObject *unused)
{
    BufferViewObject *self = BufferView_CAST(op);
    int rc;
    (void)unused;

    if (view_pin(self) < 0) {
        return NULL;
    }
    rc = check_cpu(self, "memoryview");
    view_unpin(self);
    /* the view's own export checks again, under its lock */
    return rc < 0 ? NULL : PyMemoryView_FromObject(op);
}

static PyObject *
view_dlpack(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
            PyObject *kwnames)
{
    if (check_acquired_now(BufferView_CAST(op)) < 0) {
        return NULL;
    }
    return bufferext_dlpack(op, args, nargs, kwnames);
}

static PyObject *
view_arrow_c_array(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames)
{
    if (check_acquired_now(BufferView_CAST(op)) < 0) {
        return NULL;
    }
    return bufferext_arrow_c_array(op, args, nargs, kwnames);
}

static PyObject *
view_arrow_c_device_array(PyObject *op, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    if (check_acquired_now(BufferView_CAST(op)) < 0) {
        return NULL;
    }
    return bufferext_arrow_c_device_array(op, args, nargs, kwnames);
}

static PyObject *
view_dlpack_device(PyObject *op, PyObject *unused)
{
    (void)unused;
    if (check_acquired_now(BufferView_CAST(op)) < 0) {
        return NULL;
    }
    return bufferext_dlpack_device(op);
}

/* ---- staging through host memory (staging.c) ------------------------------ */

/* Hold the export while Python code runs or a thread waits or copies
 * without the GIL: release() refuses while `busy` (another thread may call
 * it then, or a finalizer, or the target's getbuffer).  0, or -1 with
 * ValueError when the view is released. */
static int
view_pin(BufferViewObject *self)
{
    int rc;

    BUFFEREXT_LOCKED_BEGIN((PyObject *)self);
    rc = check_acquired(self);
    if (rc == 0) {
        self->busy++;
    }
    BUFFEREXT_LOCKED_END();
    return rc;
}

static void
view_unpin(BufferViewObject *self)
{
    BUFFEREXT_LOCKED_BEGIN((PyObject *)self);
    self->busy--;
    BUFFEREXT_LOCKED_END();
}

static PyObject *
view_synchronize(PyObject *op, PyObject *unused)
{
    const char *who = "BufferView.synchronize";
    BufferViewObject *self = BufferView_CAST(op);
    bufferext_state *st = bufferext_state_from_type(Py_TYPE(self));
    int rc;
    (void)unused;

    if (st == NULL || view_pin(self) < 0) {
        return NULL;
    }
    rc = bufferext_stage_check(&self->ext, who);
    if (rc == 0) {
        rc = bufferext_stage_memory(st, who, &self->ext, &self->layout,
                                    BUFFEREXT_STAGE_WAIT, NULL);
    }
    view_unpin(self);
    return rc < 0 ? NULL : Py_NewRef(Py_None);
}

/* copy_to_host and copy_from_host: `obj` is the target or the source. */
static PyObject *
view_copy_host(PyObject *op, PyObject *obj, bufferext_stage what)
{
    const char *who = what == BUFFEREXT_STAGE_TO_HOST
                      ? "BufferView.copy_to_host"
                      : "BufferView.copy_from_host";
    BufferViewObject *self = BufferView_CAST(op);
    bufferext_state *st = bufferext_state_from_type(Py_TYPE(self));
    int rc;

    if (st == NULL || view_pin(self) < 0) {
        return NULL;
    }
    rc = bufferext_stage_copy(st, who, &self->ext, &self->layout,
                              view_contiguous(self, 'C'), obj, what);
    view_unpin(self);
    return rc < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *
view_copy_to_host(PyObject *op, PyObject *target)
{
    return view_copy_host(op, target, BUFFEREXT_STAGE_TO_HOST);
}

static PyObject *
view_copy_from_host(PyObject *op, PyObject *source)
{
    return view_copy_host(op, source, BUFFEREXT_STAGE_FROM_HOST);
}

/* What the exporter wrote, NULLs included (for conformance checks). */
static PyObject *
view_raw(PyObject *op, PyObject *unused)
{
    BufferViewObject *self = BufferView_CAST(op);
    Py_buffer *v = &self->ext.view;
    int n = v->ndim > 0 ? v->ndim : 0;
    (void)unused;

    PyObject *result;

    if (view_pin(self) < 0) {
        return NULL;
    }
    result = Py_BuildValue(
        "{s:n,s:n,s:i,s:i,s:N,s:N,s:N,s:N}",
        "len", v->len, "itemsize", v->itemsize, "readonly", v->readonly,
        "ndim", v->ndim,
        "format", v->format ? PyUnicode_FromString(v->format)
                            : Py_NewRef(Py_None),
        "shape", v->shape ? bufferext_tuple_from_ssize(n, v->shape)
                          : Py_NewRef(Py_None),
        "strides", v->strides ? bufferext_tuple_from_ssize(n, v->strides)
                              : Py_NewRef(Py_None),
        "suboffsets", v->suboffsets
                          ? bufferext_tuple_from_ssize(n, v->suboffsets)
                          : Py_NewRef(Py_None));
    view_unpin(self);
    return result;
}

static PyMethodDef view_methods[] = {
    {"_raw", view_raw, METH_NOARGS,
     "_raw($self, /)\n--\n\nThe fields as the exporter wrote them (None for NULL)."},
    {"release", view_release, METH_NOARGS,
     "release($self, /)\n--\n\n"
     "Release the buffer now.  Releasing twice is harmless; BufferError\n"
     "while this view is itself exported."},
    {"tobytes", view_tobytes, METH_NOARGS,
     "tobytes($self, /)\n--\n\n"
     "A copy of the contents in C order (CPU memory only)."},
    {"memoryview", view_memoryview, METH_NOARGS,
     "memoryview($self, /)\n--\n\n"
     "A memoryview of the memory (CPU memory only)."},
    {"synchronize", view_synchronize, METH_NOARGS,
     "synchronize($self, /)\n--\n\n"
     "Block until the exported data is ready: for 'bufferext.cuda' memory,\n"
     "wait on the host for device_info.event when it is not 0 (the GIL is\n"
     "released); nothing to wait for with CPU or VE memory.  BufferError\n"
     "for another device."},
    {"copy_to_host", view_copy_to_host, METH_O,
     "copy_to_host($self, target, /)\n--\n\n"
     "Copy the memory (CPU, CUDA or VE) into target, a writable C-contiguous\n"
     "host buffer of exactly nbytes bytes, after waiting for it as\n"
     "synchronize() does; complete on return.  The view must be\n"
     "C-contiguous."},
    {"copy_from_host", view_copy_from_host, METH_O,
     "copy_from_host($self, source, /)\n--\n\n"
     "Copy source, a C-contiguous host buffer of exactly nbytes bytes, into\n"
     "the memory (CPU, CUDA or VE), after waiting for the exporter's pending\n"
     "work as synchronize() does; complete on return.  The view must be\n"
     "writable and C-contiguous."},
    {"__dlpack__", (PyCFunction)(void (*)(void))view_dlpack,
     METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__($self, /, *, stream=None, max_version=None, "
     "dl_device=None, copy=None)\n--\n\n"
     "Export as a DLPack capsule (zero-copy)."},
    {"__dlpack_device__", view_dlpack_device, METH_NOARGS,
     "__dlpack_device__($self, /)\n--\n\n(DLPack device type, device id)."},
    BUFFEREXT_ARROW_METHODS(view_arrow_c_array),
    BUFFEREXT_ARROW_DEVICE_METHOD(view_arrow_c_device_array),
    {"__enter__", view_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\n"
     "Return the view itself; ValueError once it is released."},
    {"__exit__", (PyCFunction)(void (*)(void))view_exit, METH_FASTCALL,
     "__exit__($self, exc_type, exc_value, traceback, /)\n--\n\n"
     "Release the buffer, as release() does; the exception, if any, goes\n"
     "on."},
    BUFFEREXT_REFUSE_PICKLE_METHOD,
    {NULL, NULL, 0, NULL},
};

/* ---- attributes ------------------------------------------------------- */

static PyObject *view_device_info(BufferViewObject *self);

/* A getter runs pinned (see view_pin): what it builds may run the garbage
 * collector, whose finalizers (or, without the GIL, other threads) cannot
 * release the view meanwhile, and the fields it reads never change while
 * the view is held. */
#define VIEW_GETTER(name, expr)                                         \
    static PyObject *view_get_##name(PyObject *op, void *closure)       \
    {                                                                   \
        BufferViewObject *self = BufferView_CAST(op);                   \
        PyObject *result;                                               \
        (void)closure;                                                  \
        if (view_pin(self) < 0) {                                       \
            return NULL;                                                \
        }                                                               \
        result = (expr);                                                \
        view_unpin(self);                                               \
        return result;                                                  \
    }

VIEW_GETTER(obj, Py_NewRef(self->ext.view.obj ? self->ext.view.obj
                                              : Py_None))
VIEW_GETTER(ptr, PyLong_FromVoidPtr(self->layout.buf))
VIEW_GETTER(nbytes, PyLong_FromSsize_t(self->layout.len))
VIEW_GETTER(itemsize, PyLong_FromSsize_t(self->layout.itemsize))
VIEW_GETTER(format, self->layout.format != NULL
                        ? PyUnicode_FromString(self->layout.format)
                        : Py_NewRef(Py_None))
VIEW_GETTER(ndim, PyLong_FromLong(self->layout.ndim))
VIEW_GETTER(shape, bufferext_tuple_from_ssize(self->layout.ndim,
                                              self->layout.shape))
VIEW_GETTER(strides, bufferext_tuple_from_ssize(self->layout.ndim,
                                                self->layout.strides))
VIEW_GETTER(suboffsets,
            self->layout.suboffsets == NULL
                ? Py_NewRef(Py_None)
                : bufferext_tuple_from_ssize(self->layout.ndim,
                                             self->layout.suboffsets))
VIEW_GETTER(readonly, PyBool_FromLong(self->layout.readonly))
VIEW_GETTER(c_contiguous, PyBool_FromLong(view_contiguous(self, 'C')))
VIEW_GETTER(f_contiguous, PyBool_FromLong(view_contiguous(self, 'F')))
VIEW_GETTER(request_flags, PyLong_FromLong(self->request_flags))
VIEW_GETTER(flags, PyLong_FromLong(self->ext.flags))
VIEW_GETTER(device, BufferExt_IsDevice(&self->ext)
                        ? PyUnicode_FromString(self->ext.device)
                        : Py_NewRef(Py_None))
VIEW_GETTER(device_info, view_device_info(self))

static PyObject *
view_get_released(PyObject *op, void *closure)
{
    int acquired;
    (void)closure;

    BUFFEREXT_LOCKED_BEGIN(op);
    acquired = BufferView_CAST(op)->acquired;
    BUFFEREXT_LOCKED_END();
    return PyBool_FromLong(!acquired);
}

/* device_info as a typed, read-only object: one struct sequence type per
 * known device, an opaque (device, address) pair for the others. */
static PyObject *
new_structseq(PyTypeObject *type, int n, PyObject **items)
{
    PyObject *result = PyStructSequence_New(type);
    int i;

    for (i = 0; i < n; i++) {
        if (items[i] == NULL) {
            Py_XDECREF(result);
            for (; i < n; i++) {
                Py_XDECREF(items[i]);
            }
            return NULL;
        }
        if (result == NULL) {
            Py_DECREF(items[i]);
            continue;
        }
        PyStructSequence_SET_ITEM(result, i, items[i]);
    }
    return result;
}

static PyObject *
view_device_info(BufferViewObject *self)
{
    bufferext_state *st = bufferext_state_from_type(Py_TYPE(self));
    const char *device = self->ext.device;
    void *info = self->ext.device_info;
    PyObject *items[4];

    if (st == NULL) {
        return NULL;
    }
    if (!BufferExt_IsDevice(&self->ext)) {
        Py_RETURN_NONE;
    }
    if (info != NULL && strcmp(device, BUFFEREXT_DEVICE_CUDA) == 0 &&
        ((const BufferExt_CUDADeviceInfo *)info)->version >> 16 ==
            BUFFEREXT_CUDA_INFO_MAJOR) {
        const BufferExt_CUDADeviceInfo *cuda = info;
        items[0] = PyLong_FromUnsignedLong(cuda->version);
        items[1] = PyLong_FromLong(cuda->device);
        items[2] = PyLong_FromVoidPtr(cuda->context);
        items[3] = PyLong_FromVoidPtr(BUFFEREXT_LOAD(cuda->event));
        return new_structseq(st->CUDADeviceInfo_Type, 4, items);
    }
    if (info != NULL && strcmp(device, BUFFEREXT_DEVICE_VE) == 0 &&
        ((const BufferExt_VEDeviceInfo *)info)->version >> 16 ==
            BUFFEREXT_VE_INFO_MAJOR) {
        const BufferExt_VEDeviceInfo *ve = info;
        items[0] = PyLong_FromUnsignedLong(ve->version);
        items[1] = PyLong_FromLong(ve->node);
        items[2] = PyLong_FromVoidPtr(ve->proc);
        items[3] = PyLong_FromVoidPtr(ve->context);
        return new_structseq(st->VEDeviceInfo_Type, 4, items);
    }
    items[0] = PyUnicode_FromString(device);
    items[1] = PyLong_FromVoidPtr(info);
    return new_structseq(st->OpaqueDeviceInfo_Type, 2, items);
}

#define VIEW_ATTR(name, doc) {#name, view_get_##name, NULL, doc, NULL}

static PyObject *
view_get_array(PyObject *op, void *closure)
{
    BufferViewObject *self = BufferView_CAST(op);
    const char *device;
    (void)closure;

    BUFFEREXT_LOCKED_BEGIN(op);
    device = self->acquired && BufferExt_IsDevice(&self->ext)
                 ? self->ext.device : NULL;
    BUFFEREXT_LOCKED_END();
    return bufferext_array_attr(op, device);
}

static PyGetSetDef view_getset[] = {
    {"__array__", view_get_array, NULL,
     "Present only over device memory, to refuse numpy's conversion.", NULL},
    VIEW_ATTR(obj, "The exporting object."),
    VIEW_ATTR(ptr, "Address of the first byte (a device address for "
                   "device memory)."),
    VIEW_ATTR(nbytes, "Size in bytes (view.len)."),
    VIEW_ATTR(itemsize, "Bytes per item."),
    VIEW_ATTR(format, "struct-module format of an item ('B' if none and the "
                      "items are bytes; None if none and they are not: "
                      "acquired without PyBUF_FORMAT)."),
    VIEW_ATTR(ndim, "Number of dimensions."),
    VIEW_ATTR(shape, "Shape, a tuple of ints."),
    VIEW_ATTR(strides, "Strides in bytes."),
    VIEW_ATTR(suboffsets, "PIL-style suboffsets, or None."),
    VIEW_ATTR(readonly, "True if the memory must not be written."),
    VIEW_ATTR(c_contiguous, "True if the layout is C-contiguous."),
    VIEW_ATTR(f_contiguous, "True if the layout is Fortran-contiguous."),
    VIEW_ATTR(request_flags, "The request flags passed to the exporter."),
    VIEW_ATTR(flags, "Extended flags the exporter honoured (PyBUF_DEVICE "
                     "when it answered the device request)."),
    VIEW_ATTR(device, "Device name, or None for CPU memory."),
    VIEW_ATTR(device_info, "Typed, read-only description of the device "
                           "memory, or None for CPU memory."),
    VIEW_ATTR(released, "True once release() was called."),
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *
view_repr(PyObject *op)
{
    BufferViewObject *self = BufferView_CAST(op);
    PyObject *shape, *device, *result = NULL;

    if (view_pin(self) < 0) {
        PyErr_Clear();
        return PyUnicode_FromString("<released BufferView>");
    }
    /* device= shows view.device: None for CPU memory */
    shape = view_get_shape(op, NULL);
    device = view_get_device(op, NULL);
    if (shape != NULL && device != NULL) {
        result = PyUnicode_FromFormat(
            "<BufferView of %.200s: shape=%R format=%s%s%s device=%R%s>",
            Py_TYPE(self->ext.view.obj ? self->ext.view.obj
                                       : Py_None)->tp_name,
            shape, self->layout.format ? "'" : "",
            self->layout.format ? self->layout.format : "None",
            self->layout.format ? "'" : "", device,
            self->layout.readonly ? " readonly" : "");
    }
    view_unpin(self);
    Py_XDECREF(shape);
    Py_XDECREF(device);
    return result;
}

static PyMemberDef view_members[] = {
    {"__weaklistoffset__", T_PYSSIZET,
     offsetof(BufferViewObject, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot view_slots[] = {
    {Py_tp_dealloc, view_dealloc},
    {Py_tp_traverse, view_traverse},
    {Py_tp_clear, view_clear},
    {Py_tp_repr, view_repr},
    {Py_tp_methods, view_methods},
    {Py_tp_getset, view_getset},
    {Py_tp_members, view_members},
    {Py_bf_getbuffer, view_getbuffer},
    {Py_bf_releasebuffer, view_releasebuffer},
    {Py_tp_doc,
     "One acquired extended buffer (see bufferext.get_buffer).  A context\n"
     "manager; release() gives the buffer back.  Device memory is described\n"
     "but never handed to CPU-only accessors."},
    {0, NULL},
};

/* Only get_buffer() makes BufferViews (3.9 lacks the flag: see init). */
static PyType_Spec view_spec = {
    "bufferext.BufferView",
    sizeof(BufferViewObject),
    0,
    BUFFEREXT_TYPE_FLAGS | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    view_slots,
};

/* ---- device_info types ------------------------------------------------ */

static PyStructSequence_Field cuda_fields[] = {
    {"version", "struct version (major << 16 | minor)"},
    {"device", "CUDA device ordinal"},
    {"context", "CUcontext, as an int"},
    {"event", "CUevent to wait on before access, 0 when the data is ready"},
    {NULL, NULL},
};

static PyStructSequence_Field ve_fields[] = {
    {"version", "struct version (major << 16 | minor)"},
    {"node", "VE node number"},
    {"proc", "struct veo_proc_handle *, as an int"},
    {"context", "struct veo_thr_ctxt *, as an int"},
    {NULL, NULL},
};

static PyStructSequence_Field opaque_fields[] = {
    {"device", "device name"},
    {"address", "address of the exporter's device_info, or None"},
    {NULL, NULL},
};

static PyStructSequence_Desc cuda_desc = {
    "bufferext.CUDADeviceInfo",
    "device_info of 'bufferext.cuda' memory (see bufferext/cuda.h).",
    cuda_fields, 4,
};

static PyStructSequence_Desc ve_desc = {
    "bufferext.VEDeviceInfo",
    "device_info of 'bufferext.ve' memory (see bufferext/ve.h).",
    ve_fields, 4,
};

static PyStructSequence_Desc opaque_desc = {
    "bufferext.OpaqueDeviceInfo",
    "device_info of a device bufferext does not know.",
    opaque_fields, 2,
};

/* `with get_buffer(obj):` binds these two on every use */
static const char *const context_methods[] = {"__enter__", "__exit__", NULL};

int
bufferext_init_view(PyObject *module)
{
    bufferext_state *st = bufferext_get_state(module);

    st->BufferView_Type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &view_spec, NULL);
    if (st->BufferView_Type != NULL) {
        bufferext_disallow_instantiation(st->BufferView_Type);
        bufferext_own_register(view_getbuffer, view_getbuffer_ex,
                               offsetof(BufferViewObject, layout));
    }
    if (st->BufferView_Type == NULL ||
        BufferExt_SetExtendedGetBuffer(st->BufferView_Type,
                                       BUFFEREXT_LEGACY_FLAGS | PyBUF_DEVICE,
                                       view_getbuffer_ex) < 0 ||
        bufferext_fastmethods(module, st->BufferView_Type,
                              context_methods) < 0 ||
        bufferext_add_object(module, "BufferView",
                             (PyObject *)st->BufferView_Type) < 0) {
        return -1;
    }
#if BUFFEREXT_FREELIST > 0
    bufferext_freelist_open(&view_freelist, PyObject_GC_Del);
#endif
    st->CUDADeviceInfo_Type = PyStructSequence_NewType(&cuda_desc);
    st->VEDeviceInfo_Type = PyStructSequence_NewType(&ve_desc);
    st->OpaqueDeviceInfo_Type = PyStructSequence_NewType(&opaque_desc);
    if (st->CUDADeviceInfo_Type == NULL || st->VEDeviceInfo_Type == NULL ||
        st->OpaqueDeviceInfo_Type == NULL ||
        bufferext_add_object(module, "CUDADeviceInfo",
                             (PyObject *)st->CUDADeviceInfo_Type) < 0 ||
        bufferext_add_object(module, "VEDeviceInfo",
                             (PyObject *)st->VEDeviceInfo_Type) < 0 ||
        bufferext_add_object(module, "OpaqueDeviceInfo",
                             (PyObject *)st->OpaqueDeviceInfo_Type) < 0) {
        return -1;
    }
    return 0;
}
