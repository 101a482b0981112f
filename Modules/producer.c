/* producer.c -- what the sample producers share (see producer.h): setting
 * up the head, the common checks, attributes and slots. */
#include "gate.h"
#include "producer.h"
#include "state.h"

/* ---- setting up -------------------------------------------------------- */

int
bufferext_producer_parse(const char *who, bufferext_state *st,
                         PyObject *shape, PyObject *dtype,
                         bufferext_producer_spec *spec)
{
    if (bufferext_dtype_resolve(st, dtype == NULL ? st->str_float64 : dtype,
                                &spec->dt) < 0) {
        return -1;
    }
    if (bufferext_layout_parse(who, shape, spec->dt.itemsize,
                               &spec->layout) < 0) {
        bufferext_dtype_clear(&spec->dt);
        return -1;
    }
    return 0;
}

int
bufferext_producer_setup(bufferext_producer *p,
                         const bufferext_producer_kind *kind,
                         bufferext_producer_spec *spec, int readonly)
{
    p->kind = kind;
    bufferext_exports_init(&p->exports);
    p->dt = spec->dt;               /* the references move */
    memset(&spec->dt, 0, sizeof(spec->dt));
    p->layout.itemsize = p->dt.itemsize;
    p->layout.format = p->dt.format;
    p->layout.readonly = readonly;
    return bufferext_producer_set_layout(p, &spec->layout);
}

int
bufferext_producer_set_layout(bufferext_producer *p,
                              const bufferext_layout *layout)
{
    int ndim = layout->ndim;
    int64_t *items;
    Py_ssize_t *dims = bufferext_dims_alloc(ndim, &items);

    if (dims == NULL) {
        return -1;
    }
    memcpy(dims, layout->shape, sizeof(Py_ssize_t) * (size_t)ndim);
    memcpy(dims + ndim, layout->strides, sizeof(Py_ssize_t) * (size_t)ndim);
    PyMem_Free(p->dims);
    p->dims = dims;
    p->layout.len = layout->nbytes;
    p->layout.ndim = ndim;
    p->layout.shape = dims;
    p->layout.strides = dims + ndim;
    bufferext_layout_contiguity(&p->layout);
    bufferext_layout_dlpack(&p->layout, items);
    return 0;
}

/* ---- reading the state -------------------------------------------------- */

void
bufferext_producer_read(bufferext_producer *p,
                        bufferext_producer_snapshot *out)
{
    BUFFEREXT_LOCKED_BEGIN((PyObject *)p);
    out->open = p->open;
    out->ndim = p->layout.ndim;
    out->buf = p->layout.buf;
    out->len = p->layout.len;
    out->exports = bufferext_exports_count(&p->exports);
    if (out->ndim > 0) {
        memcpy(out->shape, p->layout.shape,
               sizeof(Py_ssize_t) * (size_t)out->ndim);
        memcpy(out->strides, p->layout.strides,
               sizeof(Py_ssize_t) * (size_t)out->ndim);
    }
    BUFFEREXT_LOCKED_END();
}

/* ---- checks ------------------------------------------------------------ */

static int
raise_closed(bufferext_producer *p)
{
    PyErr_Format(PyExc_ValueError, "operation on a closed %s",
                 p->kind->name);
    return -1;
}

int
bufferext_producer_check_open_locked(bufferext_producer *p)
{
    return p->open ? 0 : raise_closed(p);
}

int
bufferext_producer_check_open(bufferext_producer *p)
{
    int open;

    /* read without the lock (exports.h) */
    if (bufferext_exports_read_begin(&p->exports)) {
        open = p->open;
        bufferext_exports_read_end(&p->exports);
    }
    else {
        BUFFEREXT_LOCKED_BEGIN((PyObject *)p);
        open = p->open;
        BUFFEREXT_LOCKED_END();
    }
    /* the refusal is raised outside the section: it allocates */
    return open ? 0 : raise_closed(p);
}

static int
raise_exported(bufferext_producer *p, const char *what, Py_ssize_t live)
{
    PyErr_Format(PyExc_BufferError,
                 "%s: cannot %s while %zd export(s) are alive (%s)",
                 p->kind->name, what, live, p->kind->release_hint);
    return -1;
}

int
bufferext_producer_check_not_exported(bufferext_producer *p,
                                      const char *what)
{
    Py_ssize_t live = bufferext_exports_count(&p->exports);

    return live > 0 ? raise_exported(p, what, live) : 0;
}

int
bufferext_producer_begin_change(bufferext_producer *p, const char *what)
{
    Py_ssize_t live = bufferext_exports_begin_change(&p->exports);

    return live != 0 ? raise_exported(p, what, live) : 0;
}

/* ---- copies to and from the host --------------------------------------- */

PyObject *
bufferext_producer_host_array(bufferext_producer *p, Py_buffer *view)
{
    PyObject *numpy, *shape, *array = NULL;

    if (bufferext_producer_check_open(p) < 0 ||
        (numpy = PyImport_ImportModule("numpy")) == NULL) {
        return NULL;
    }
    shape = bufferext_tuple_from_ssize(p->layout.ndim, p->layout.shape);
    if (shape != NULL) {
        array = PyObject_CallMethod(numpy, "empty", "OO", shape,
                                    p->dt.dtype);
    }
    Py_DECREF(numpy);
    Py_XDECREF(shape);
    if (array != NULL &&
        PyObject_GetBuffer(array, view,
                           PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        Py_CLEAR(array);
    }
    return array;
}

int
bufferext_producer_get_source(bufferext_producer *p, const char *who,
                              PyObject *source, Py_buffer_extended *ext)
{
    Py_buffer *view = &ext->view;

    /* The source's exporter may run Python code (a __buffer__ method, 3.12+)
     * that closes or resizes this buffer: pinned, they refuse.  Its export
     * goes through the gate, as every export we did not make: the copy
     * writes as many bytes as its shape says, into room sized by its len. */
    if (bufferext_producer_pin(p, who, 1) < 0) {
        return -1;
    }
    if (bufferext_gate_acquire(source, ext, PyBUF_FULL_RO) < 0) {
        bufferext_producer_unpin(p);
        return -1;
    }
    if (view->len != p->layout.len) {
        PyErr_Format(PyExc_ValueError,
                     "%s: source has %zd bytes, the buffer %zd", who,
                     view->len, p->layout.len);
    }
    else if (bufferext_check_source_format(who, view, &p->dt) == 0) {
        return 0;
    }
    bufferext_release_ext_raised(ext);
    bufferext_producer_unpin(p);
    return -1;
}

/* Whether the bytes of a strided view (not C-contiguous: it has strides),
 * which passed the gate, may overlap [dst, dst + len): a view of the
 * destination itself.  Suboffsets: maybe. */
static int
may_overlap(const Py_buffer *view, const void *dst, Py_ssize_t len)
{
    Py_ssize_t low, high;
    uintptr_t at = (uintptr_t)view->buf, to = (uintptr_t)dst;

    if (view->len == 0 || len == 0) {
        return 0;
    }
    if (view->suboffsets != NULL) {
        return 1;
    }
    bufferext_span_bounds(view->ndim, view->shape, view->strides,
                          view->itemsize, &low, &high);
    return at - (uintptr_t)-low < to + (uintptr_t)len &&
           to < at + (uintptr_t)high;
}

int
bufferext_copy_to_contiguous(void *dst, Py_buffer *view)
{
    void *staged;
    const void *src;

    if (PyBuffer_IsContiguous(view, 'C')) {
        memmove(dst, view->buf, (size_t)view->len);
        return 0;
    }
    if (!may_overlap(view, dst, view->len)) {
        return PyBuffer_ToContiguous(dst, view, view->len, 'C');
    }
    /* read every item before writing any (a transposed or reversed view
     * of the destination would read items already overwritten) */
    src = bufferext_contiguous_bytes(view, &staged);
    if (src == NULL) {
        return -1;
    }
    memcpy(dst, src, (size_t)view->len);
    PyMem_RawFree(staged);
    return 0;
}

const void *
bufferext_contiguous_bytes(Py_buffer *view, void **staged)
{
    *staged = NULL;
    if (PyBuffer_IsContiguous(view, 'C')) {
        return view->buf;
    }
    *staged = PyMem_RawMalloc(view->len ? (size_t)view->len : 1);
    if (*staged == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    if (PyBuffer_ToContiguous(*staged, view, view->len, 'C') < 0) {
        PyMem_RawFree(*staged);
        *staged = NULL;
        return NULL;
    }
    return *staged;
}

/* ---- slots and methods ------------------------------------------------- */

/* len(): the first dimension, as memoryview and NumPy answer; TypeError
 * for a 0-d buffer, ValueError when closed. */
Py_ssize_t
bufferext_producer_length(PyObject *op)
{
    bufferext_producer *p = BufferExtProducer_CAST(op);
    Py_ssize_t n = 0;
    int open, ndim;

    BUFFEREXT_LOCKED_BEGIN(op);
    open = p->open;
    ndim = p->layout.ndim;
    if (open && ndim > 0) {
        n = p->layout.shape[0];
    }
    BUFFEREXT_LOCKED_END();
    if (!open) {
        return raise_closed(p);
    }
    if (ndim == 0) {
        PyErr_Format(PyExc_TypeError, "len() of a 0-d %s (shape ())",
                     p->kind->name);
        return -1;
    }
    return n;
}

/* A buffer is true, empty, 0-d or closed (its length would decide
 * otherwise, and raise for the last two). */
int
bufferext_producer_bool(PyObject *op)
{
    (void)op;
    return 1;
}

PyObject *
bufferext_producer_repr(PyObject *op, const char *extra, const char *closed,
                        const char *after)
{
    bufferext_producer *p = BufferExtProducer_CAST(op);
    bufferext_producer_snapshot now;
    PyObject *shape, *result;

    bufferext_producer_read(p, &now);
    shape = bufferext_tuple_from_ssize(now.ndim, now.shape);
    if (shape == NULL) {
        return NULL;
    }
    if (p->dt.format[0] == '[') {
        /* a low-precision float by its name ("[bfloat16]"): without
         * ml_dtypes its numpy stand-in ('|V1') is every float8 kind's */
        char name[64];
        size_t n = strlen(p->dt.format) - 2;
        n = n < sizeof(name) - 1 ? n : sizeof(name) - 1;
        memcpy(name, p->dt.format + 1, n);
        name[n] = '\0';
        result = PyUnicode_FromFormat(
            "%s(%R, dtype='%s'%s%s%s)%s", p->kind->name, shape, name, extra,
            p->layout.readonly ? ", readonly=True" : "",
            now.open ? "" : closed, now.open ? "" : after);
    }
    else {
        result = PyUnicode_FromFormat(
            "%s(%R, dtype='%S'%s%s%s)%s", p->kind->name, shape, p->dt.dtype,
            extra, p->layout.readonly ? ", readonly=True" : "",
            now.open ? "" : closed, now.open ? "" : after);
    }
    Py_DECREF(shape);
    return result;
}

int
bufferext_producer_pin(bufferext_producer *p, const char *who, int write)
{
    Py_ssize_t live;
    int rc = 0;

    BUFFEREXT_LOCKED_BEGIN((PyObject *)p);
    if (!p->open || bufferext_exports_changing(&p->exports)) {
        /* closed, or being closed by a thread that let the section go */
        PyErr_Format(PyExc_ValueError, "%s: operation on a closed %s", who,
                     p->kind->name);
        rc = -1;
    }
    else if (write && p->layout.readonly) {
        /* no export may start between the check and the pin */
        live = bufferext_exports_begin_change(&p->exports);
        if (live != 0) {
            PyErr_Format(PyExc_BufferError,
                         "%s: cannot write a read-only %s while %zd "
                         "export(s) are alive (%s)", who, p->kind->name,
                         live, p->kind->release_hint);
            rc = -1;
        }
        else {
            bufferext_exports_add(&p->exports);
            bufferext_exports_end_change(&p->exports);
        }
    }
    else {
        bufferext_exports_add(&p->exports);
    }
    BUFFEREXT_LOCKED_END();
    return rc;
}

void
bufferext_producer_releasebuffer(PyObject *op, Py_buffer *view)
{
    (void)view;
    bufferext_producer_unpin(BufferExtProducer_CAST(op));
}

int
bufferext_producer_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(BufferExtProducer_CAST(op)->dt.dtype);
    return 0;
}

void
bufferext_producer_dealloc(PyObject *op)
{
    bufferext_producer *p = BufferExtProducer_CAST(op);
    PyTypeObject *type = Py_TYPE(op);

    PyObject_GC_UnTrack(op);
    if (p->weakreflist != NULL) {
        PyObject_ClearWeakRefs(op);
    }
    if (p->kind != NULL) {
        p->kind->free_memory(op);
    }
    PyMem_Free(p->dims);
    bufferext_dtype_clear(&p->dt);
    type->tp_free(op);
    Py_DECREF(type);
}

PyObject *
bufferext_producer_enter(PyObject *op, PyObject *unused)
{
    (void)unused;
    return Py_NewRef(op);
}

static PyObject *
producer_close(PyObject *op, PyObject *unused)
{
    bufferext_producer *p = BufferExtProducer_CAST(op);
    (void)unused;

    if (p->open) {
        if (bufferext_producer_begin_change(p, "close") < 0) {
            return NULL;
        }
        p->kind->free_memory(op);
        bufferext_producer_end_change(p);
    }
    Py_RETURN_NONE;
}

BUFFEREXT_LOCKED_METHOD(bufferext_producer_close, producer_close)

PyObject *
bufferext_producer_exit(PyObject *op, PyObject *args)
{
    (void)args;
    return BufferExtProducer_CAST(op)->kind->close(op, NULL);
}

/* ---- pickling and copying of device memory: refused ------------------- */

static PyObject *
producer_refuse_reduce(PyObject *op, PyObject *args, PyObject *kwargs)
{
    (void)args;
    (void)kwargs;
    PyErr_Format(PyExc_TypeError,
                 "cannot pickle or copy a %s: its memory is on a device, "
                 "which pickle and copy cannot carry; use to_host() for a "
                 "numpy copy on the host",
                 BufferExtProducer_CAST(op)->kind != NULL
                     ? BufferExtProducer_CAST(op)->kind->name
                     : Py_TYPE(op)->tp_name);
    return NULL;
}

static PyMethodDef producer_refuse_reduce_def = {
    "__reduce_ex__", (PyCFunction)(void (*)(void))producer_refuse_reduce,
    METH_VARARGS | METH_KEYWORDS,
    "__reduce_ex__($self, protocol, /)\n--\n\n"
    "Raises TypeError: device memory cannot be pickled or copied (use\n"
    "to_host()).",
};

PyObject *
bufferext_producer_get_refuse_reduce(PyObject *op, void *closure)
{
    (void)closure;
    return PyCFunction_NewEx(&producer_refuse_reduce_def, op, NULL);
}

PyMemberDef bufferext_producer_members[] = {
    {"__weaklistoffset__", T_PYSSIZET,
     offsetof(bufferext_producer, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* ---- attributes -------------------------------------------------------- */

/* Attributes that never change after tp_new, read as they are. */
#define PRODUCER_GETTER(name, expr)                                         \
    PyObject *                                                              \
    bufferext_producer_get_##name(PyObject *op, void *closure)              \
    {                                                                       \
        bufferext_producer *p = BufferExtProducer_CAST(op);                 \
        (void)closure;                                                      \
        return (expr);                                                      \
    }

PRODUCER_GETTER(itemsize, PyLong_FromSsize_t(p->layout.itemsize))
PRODUCER_GETTER(dtype, Py_NewRef(p->dt.dtype))
PRODUCER_GETTER(format, PyUnicode_FromString(p->dt.format))
PRODUCER_GETTER(readonly, PyBool_FromLong(p->layout.readonly))

/* The others, built from a snapshot (see bufferext_producer_read). */
#define PRODUCER_STATE_GETTER(name, expr)                                   \
    PyObject *                                                              \
    bufferext_producer_get_##name(PyObject *op, void *closure)              \
    {                                                                       \
        bufferext_producer_snapshot now;                                    \
        (void)closure;                                                      \
        bufferext_producer_read(BufferExtProducer_CAST(op), &now);          \
        return (expr);                                                      \
    }

PRODUCER_STATE_GETTER(shape, bufferext_tuple_from_ssize(now.ndim, now.shape))
PRODUCER_STATE_GETTER(strides,
                      bufferext_tuple_from_ssize(now.ndim, now.strides))
PRODUCER_STATE_GETTER(ndim, PyLong_FromLong(now.ndim))
PRODUCER_STATE_GETTER(nbytes, PyLong_FromSsize_t(now.len))
PRODUCER_STATE_GETTER(exports, PyLong_FromSsize_t(now.exports))
PRODUCER_STATE_GETTER(closed, PyBool_FromLong(!now.open))
