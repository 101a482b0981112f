/* adapter.c -- BufferAdapter: an extended-buffer exporter over memory that
 * another protocol described, and as_buffer, which picks the protocol.
 * Zero-copy: the adapter keeps the source alive (and owns a consumed DLPack
 * tensor or a moved Arrow array) for as long as it or any of its exports
 * lives.  Each protocol's import lives with the protocol (dlpack.c,
 * arrow.c, arrayiface.c), filling the object of adapterobject.h; here is
 * the re-export of a buffer with another read-only policy.  The order of
 * the protocols (a table) and the dict parsing live in
 * Lib/bufferext/_bridges.py; as_buffer walks that table. */
#include "adapterobject.h"
#include "arrayiface.h"
#include "arrow.h"
#include "dlpack.h"

/* Re-export a buffer exporter with readonly=True (exports become read-only)
 * or False (must be writable): as_buffer's pass-through with readonly, and
 * _adapter_from_buffer(source, readonly) for _bridges. */
static PyObject *
adapter_reexport(bufferext_state *st, PyObject *source, int readonly)
{
    Py_buffer_extended ext;
    AdapterObject *self;
    int i, flags;

    flags = (readonly ? PyBUF_FULL_RO : PyBUF_FULL) | PyBUF_DEVICE;
    if (bufferext_gate_acquire(source, &ext, flags) < 0) {
        return NULL;
    }
    self = adapter_alloc(st, source, "buffer", ext.view.ndim);
    if (self == NULL) {
        bufferext_release_ext_raised(&ext);
        return NULL;
    }
    self->held = ext;
    self->has_held = 1;
    /* the gate let through a NULL shape only for ndim 0; NULL strides mean
     * C order (PEP 3118; ctypes leaves them NULL) */
    for (i = 0; i < ext.view.ndim; i++) {
        self->layout.shape[i] = ext.view.shape[i];
    }
    if (ext.view.strides != NULL) {
        memcpy(self->layout.strides, ext.view.strides,
               sizeof(Py_ssize_t) * (size_t)ext.view.ndim);
    }
    else {
        bufferext_c_strides(ext.view.ndim, ext.view.shape,
                            ext.view.itemsize, self->layout.strides);
    }
    self->layout.buf = ext.view.buf;
    self->layout.itemsize = ext.view.itemsize;
    self->layout.readonly = readonly || ext.view.readonly;
    self->layout.suboffsets = ext.view.ndim > 0 ? ext.view.suboffsets : NULL;
    if (adapter_set_format(self, ext.view.format ? ext.view.format : "B") < 0) {
        Py_DECREF(self);
        return NULL;
    }
    if (BufferExt_IsDevice(&ext)) {
        /* Only the two device layouts bufferext knows can be carried. */
        if (strcmp(ext.device, BUFFEREXT_DEVICE_CUDA) == 0) {
            self->device = BUFFEREXT_DEVICE_CUDA;
        }
        else if (strcmp(ext.device, BUFFEREXT_DEVICE_VE) == 0) {
            self->device = BUFFEREXT_DEVICE_VE;
        }
        else {
            PyErr_Format(PyExc_BufferError, "buffer: device '%s' is unknown "
                         "to bufferext and cannot be re-exported",
                         ext.device);
            Py_DECREF(self);
            return NULL;
        }
    }
    if (adapter_finish_layout(self, "buffer") < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return adapter_done(self);
}

static PyObject *
adapter_from_buffer(PyObject *module, PyObject *args)
{
    PyObject *source;
    int readonly;

    if (!PyArg_ParseTuple(args, "Op:_adapter_from_buffer", &source,
                          &readonly)) {
        return NULL;
    }
    return adapter_reexport(bufferext_get_state(module), source, readonly);
}

/* ---- the exporter ----------------------------------------------------- */

static int
adapter_export(PyObject *op, Py_buffer *view, int flags,
               Py_buffer_extended *ext)
{
    AdapterObject *self = Adapter_CAST(op);

    /* Without a lock: nothing an export reads changes after the adapter
     * is made, and nothing refuses to while it is exported (the count is
     * the `exports` attribute's). */
    view->obj = NULL;
    return bufferext_export(op, view, flags, ext, &self->layout,
                            self->device,
                            self->device ? adapter_device_info(self) : NULL,
                            &self->exports);
}

BUFFEREXT_DEFINE_GETBUFFER(adapter_getbuffer, adapter_export);

static void
adapter_releasebuffer(PyObject *op, Py_buffer *view)
{
    (void)view;
    bufferext_exports_remove(&Adapter_CAST(op)->exports);
}

static int
adapter_traverse(PyObject *op, visitproc visit, void *arg)
{
    AdapterObject *self = Adapter_CAST(op);
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->source);
    if (self->has_held) {
        Py_VISIT(self->held.view.obj);      /* a strong reference too */
    }
    return 0;
}

static void
adapter_dealloc(PyObject *op)
{
    AdapterObject *self = Adapter_CAST(op);
    PyTypeObject *type = Py_TYPE(op);

    PyObject_GC_UnTrack(op);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs(op);
    }
    if (self->dl_managed != NULL || self->has_held || self->arrow != NULL) {
        /* The producer's deleter or releasebuffer may run Python code: keep
         * any pending exception out of its way. */
        PyObject *type_, *value, *tb;
        PyErr_Fetch(&type_, &value, &tb);
        if (self->dl_managed != NULL) {
            bufferext_dlpack_delete_locked(self->dl_managed,
                                           self->dl_versioned);
        }
        if (self->has_held) {
            BufferExt_Release(&self->held);     /* as the gate got it */
        }
        if (self->arrow != NULL) {
            bufferext_arrow_release(self->arrow);
        }
        PyErr_Restore(type_, value, tb);
    }
    if (self->owns_event) {
        bufferext_cuda_release_event(&self->info.cuda);
    }
    PyMem_Free(self->dims);
    Py_XDECREF(self->format_obj);
    Py_XDECREF(self->protocol);
    Py_XDECREF(self->source);
    type->tp_free(op);
    Py_DECREF(type);
}

static PyObject *
adapter_dlpack(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
               PyObject *kwnames)
{
    return bufferext_dlpack(op, args, nargs, kwnames);
}

static PyObject *
adapter_dlpack_device(PyObject *op, PyObject *unused)
{
    (void)unused;
    return bufferext_dlpack_device(op);
}

static PyMethodDef adapter_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))adapter_dlpack,
     METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, "
     "copy=None)\n--\n\nExport as a DLPack capsule (zero-copy)."},
    {"__dlpack_device__", adapter_dlpack_device, METH_NOARGS,
     "__dlpack_device__($self, /)\n--\n\n(DLPack device type, device id)."},
    BUFFEREXT_ARROW_METHODS(bufferext_arrow_c_array),
    BUFFEREXT_ARROW_DEVICE_METHOD(bufferext_arrow_c_device_array),
    BUFFEREXT_REFUSE_PICKLE_METHOD,
    {NULL, NULL, 0, NULL},
};

static PyObject *
adapter_get_source(PyObject *op, void *closure)
{
    (void)closure;
    return Py_NewRef(Adapter_CAST(op)->source);
}

static PyObject *
adapter_get_protocol(PyObject *op, void *closure)
{
    (void)closure;
    return Py_NewRef(Adapter_CAST(op)->protocol);
}

static PyObject *
adapter_get_shape(PyObject *op, void *closure)
{
    AdapterObject *self = Adapter_CAST(op);
    (void)closure;
    return bufferext_tuple_from_ssize(self->layout.ndim, self->layout.shape);
}

static PyObject *
adapter_get_strides(PyObject *op, void *closure)
{
    AdapterObject *self = Adapter_CAST(op);
    (void)closure;
    return bufferext_tuple_from_ssize(self->layout.ndim,
                                      self->layout.strides);
}

static PyObject *
adapter_get_format(PyObject *op, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(Adapter_CAST(op)->layout.format);
}

static PyObject *
adapter_get_readonly(PyObject *op, void *closure)
{
    (void)closure;
    return PyBool_FromLong(Adapter_CAST(op)->layout.readonly);
}

static PyObject *
adapter_get_device(PyObject *op, void *closure)
{
    AdapterObject *self = Adapter_CAST(op);
    (void)closure;
    if (self->device == NULL) {
        Py_RETURN_NONE;
    }
    return PyUnicode_FromString(self->device);
}

static PyObject *
adapter_get_exports(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(
        bufferext_exports_count(&Adapter_CAST(op)->exports));
}

static PyObject *
adapter_get_ptr(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromVoidPtr(Adapter_CAST(op)->layout.buf);
}

static PyObject *
adapter_get_nbytes(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(Adapter_CAST(op)->layout.len);
}

/* CUDA Array Interface v3 of CUDA memory.  The adapter's rule is an event,
 * CAI's a stream: `stream` is None once the event completed, else a stream
 * made to wait on it (bufferext_cuda_cai_stream).  Asked for last, after
 * everything that can refuse, so a refusal leaves no stream waiting. */
static PyObject *
adapter_get_cai(PyObject *op, void *closure)
{
    AdapterObject *self = Adapter_CAST(op);
    PyObject *typestr, *result, *shape, *strides, *stream;
    (void)closure;

    if (self->device == NULL ||
        strcmp(self->device, BUFFEREXT_DEVICE_CUDA) != 0) {
        PyErr_SetString(PyExc_AttributeError,
                        "__cuda_array_interface__: the memory is not CUDA "
                        "device memory");
        return NULL;
    }
    if (self->layout.suboffsets != NULL) {
        /* pointers to follow, which the interface cannot say (DLPack and
         * Arrow refuse them too) */
        PyErr_SetString(PyExc_AttributeError,
                        "__cuda_array_interface__: the buffer has "
                        "suboffsets (PIL-style pointers), which the "
                        "interface cannot describe");
        return NULL;
    }
    {
        PyObject *mod = PyImport_ImportModule("bufferext._bridges");
        if (mod == NULL) {
            return NULL;
        }
        typestr = PyObject_CallMethod(mod, "format_to_typestr", "s",
                                      self->layout.format);
        Py_DECREF(mod);
    }
    if (typestr == NULL) {
        /* a format the interface cannot name: the object has no CUDA
         * Array Interface (hasattr() says False), as for host memory */
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyObject *type_, *value, *tb;

            PyErr_Fetch(&type_, &value, &tb);
            PyErr_NormalizeException(&type_, &value, &tb);
            PyErr_Format(PyExc_AttributeError,
                         "__cuda_array_interface__: %S", value);
            Py_XDECREF(type_);
            Py_XDECREF(value);
            Py_XDECREF(tb);
        }
        return NULL;
    }
    shape = adapter_get_shape(op, NULL);
    strides = self->layout.c_contiguous ? Py_NewRef(Py_None)
                                        : adapter_get_strides(op, NULL);
    stream = shape == NULL || strides == NULL
                 ? NULL
                 : bufferext_cuda_cai_stream(
                       bufferext_state_from_type(Py_TYPE(op)),
                       "__cuda_array_interface__",
                       (const BufferExt_CUDADeviceInfo *)adapter_device_info(
                           self));
    if (stream == NULL) {
        Py_XDECREF(shape);
        Py_XDECREF(strides);
        Py_DECREF(typestr);
        return NULL;
    }
    result = Py_BuildValue("{s:N,s:N,s:(NO),s:N,s:N,s:i}",
                           "shape", shape, "typestr", typestr,
                           "data", PyLong_FromVoidPtr(self->layout.buf),
                           self->layout.readonly ? Py_True : Py_False,
                           "strides", strides, "stream", stream,
                           "version", 3);
    return result;
}

#define ADAPTER_ATTR(name, doc) {#name, adapter_get_##name, NULL, doc, NULL}

static PyObject *
adapter_get_array(PyObject *op, void *closure)
{
    (void)closure;
    return bufferext_array_attr(op, Adapter_CAST(op)->device);
}

static PyGetSetDef adapter_getset[] = {
    {"__array__", adapter_get_array, NULL,
     "Present only over device memory, to refuse numpy's conversion.", NULL},
    ADAPTER_ATTR(source, "The object the memory came from."),
    ADAPTER_ATTR(protocol, "How it was read: 'buffer', 'dlpack', "
                 "'dlpack-legacy', 'arrow', 'arrow_device', "
                 "'cuda_array_interface', 've_array_interface' or "
                 "'array_interface'."),
    ADAPTER_ATTR(shape, "Shape, a tuple of ints."),
    ADAPTER_ATTR(strides, "Strides in bytes."),
    ADAPTER_ATTR(format, "struct-module format of an item."),
    ADAPTER_ATTR(readonly, "True if exports are read-only."),
    ADAPTER_ATTR(device, "Device name, or None for CPU memory."),
    ADAPTER_ATTR(exports, "Number of live exports."),
    ADAPTER_ATTR(ptr, "Address of the first item."),
    ADAPTER_ATTR(nbytes, "Size in bytes."),
    {"__cuda_array_interface__", adapter_get_cai, NULL,
     "CUDA Array Interface v3 (CUDA memory only).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *
adapter_repr(PyObject *op)
{
    AdapterObject *self = Adapter_CAST(op);
    PyObject *shape = adapter_get_shape(op, NULL);
    PyObject *device = adapter_get_device(op, NULL), *result = NULL;

    /* device= shows adapter.device: None for CPU memory */
    if (shape != NULL && device != NULL) {
        result = PyUnicode_FromFormat(
            "<BufferAdapter of %.200s via %U: shape=%R format='%s' "
            "device=%R%s>",
            Py_TYPE(self->source)->tp_name, self->protocol, shape,
            self->layout.format, device,
            self->layout.readonly ? " readonly" : "");
    }
    Py_XDECREF(shape);
    Py_XDECREF(device);
    return result;
}

static PyMemberDef adapter_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(AdapterObject, weakreflist),
     READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot adapter_slots[] = {
    {Py_tp_dealloc, adapter_dealloc},
    {Py_tp_traverse, adapter_traverse},
    {Py_tp_repr, adapter_repr},
    {Py_tp_methods, adapter_methods},
    {Py_tp_getset, adapter_getset},
    {Py_tp_members, adapter_members},
    {Py_bf_getbuffer, adapter_getbuffer},
    {Py_bf_releasebuffer, adapter_releasebuffer},
    {Py_tp_doc,
     "An extended-buffer exporter over memory described by another protocol\n"
     "(see bufferext.as_buffer).  Zero-copy; keeps its source alive."},
    {0, NULL},
};

static PyType_Spec adapter_spec = {
    "bufferext.BufferAdapter",
    sizeof(AdapterObject),
    0,
    BUFFEREXT_TYPE_FLAGS | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    adapter_slots,
};

/* ---- as_buffer ---------------------------------------------------------- */

#define AS_BUFFER_DOC                                                        \
    "An exporter of the extended buffer protocol for ``obj``, zero-copy.\n" \
    "\n"                                                                     \
    "``readonly=None`` keeps the source's policy, ``True`` makes every\n"    \
    "export read-only, ``False`` requires writable memory (BufferError\n"   \
    "otherwise).  The source stays alive as long as the result or any of\n" \
    "its exports.  Raises TypeError if ``obj`` speaks none of the\n"        \
    "supported protocols, and BufferError (naming the field and the\n"      \
    "value) for malformed descriptions."

/* as_buffer's order is bufferext._bridges._STEPS, written there once: rows
 * (name, step, needs), each step(obj, type(obj), readonly) answering the
 * exporter or NotImplemented (try the next).  `needs` is the row's guard: a
 * tuple of attribute names of which the type must have one (looked up on
 * the type, through its MRO and metaclass, as hasattr(cls, name) does) for
 * the step to be called; empty, the step is always called.  A guard only
 * names what the step itself asks the type for first (hasattr(cls, ...)), so
 * a failing guard skips only a call that would answer NotImplemented; a step
 * that reads the instance (the array interfaces' getattr, the low-precision
 * row's isinstance, which follows a __class__ property) has an empty guard.
 * as_buffer reads the table on first use (importing _bridges imports numpy)
 * and keeps a tuple of (function, needs) pairs, the names interned, with
 * _CPU_TYPES, under a mutex never held while Python code runs; then it
 * walks those pairs, calling each function whose guard holds.  The
 * pass-through's row holds adapter_pass_through below, known by its C
 * function (whose it is, not where it was found): as_buffer runs it in
 * place, with no call and no Python frame, the common case.  Replacing
 * _STEPS after the first as_buffer changes nothing: the tuple is kept. */
BUFFEREXT_MUTEX(bridges_mutex);

static PyObject *adapter_pass_through(PyObject *, PyObject *const *,
                                      Py_ssize_t);
static PyObject *adapter_buffer_protocol(PyObject *, PyObject *const *,
                                         Py_ssize_t);

/* Whether `step` is our row `fn` (adapter_pass_through or
 * adapter_buffer_protocol): a builtin function whose C function is `fn`,
 * bound to any instance of the module. */
static inline int
is_c_step(PyObject *step,
          PyObject *(*fn)(PyObject *, PyObject *const *, Py_ssize_t))
{
    return PyCFunction_Check(step) &&
           PyCFunction_GET_FUNCTION(step) == (PyCFunction)(void (*)(void))fn;
}

static inline int
is_pass_through(PyObject *step)
{
    return is_c_step(step, adapter_pass_through);
}

/* A row's guard as as_buffer keeps it: a new tuple of the interned names
 * and the types of `needs`, or NULL with TypeError naming row `i` if `needs`
 * is not a tuple of str (an attribute the object's type has) and types (a
 * class the object is an instance of).  Runs no Python code but the
 * allocations'. */
static PyObject *
step_needs(PyObject *needs, Py_ssize_t i)
{
    PyObject *names, *name;
    Py_ssize_t j;

    if (!PyTuple_Check(needs)) {
        PyErr_Format(PyExc_TypeError, "bufferext._bridges._STEPS[%zd]'s "
                     "needs must be a tuple of attribute names (str) and "
                     "types, not %.200s", i, Py_TYPE(needs)->tp_name);
        return NULL;
    }
    names = PyTuple_New(PyTuple_GET_SIZE(needs));
    for (j = 0; names != NULL && j < PyTuple_GET_SIZE(needs); j++) {
        name = PyTuple_GET_ITEM(needs, j);
        if (PyType_Check(name)) {
            PyTuple_SET_ITEM(names, j, Py_NewRef(name));
            continue;
        }
        if (!PyUnicode_Check(name)) {
            PyErr_Format(PyExc_TypeError, "bufferext._bridges._STEPS[%zd]'s "
                         "needs must be a tuple of attribute names (str) and "
                         "types, not one holding %.200s", i,
                         Py_TYPE(name)->tp_name);
            Py_CLEAR(names);
            break;
        }
        /* an exact str (a subclass's copy), interned */
        name = PyUnicode_FromObject(name);
        if (name == NULL) {
            Py_CLEAR(names);
            break;
        }
        PyUnicode_InternInPlace(&name);
        PyTuple_SET_ITEM(names, j, name);
    }
    return names;
}

/* The (function, needs) pairs of the rows of `table` (_bridges._STEPS), in
 * order: a new tuple, or NULL with TypeError naming the malformed row.  Runs
 * no Python code but the allocations': the table and its rows are tuples,
 * held. */
static PyObject *
step_functions(PyObject *table)
{
    PyObject *pairs, *row, *needs;
    Py_ssize_t i;

    if (!PyTuple_Check(table)) {
        PyErr_Format(PyExc_TypeError, "bufferext._bridges._STEPS must be a "
                     "tuple of (name, function, needs) rows, not %.200s",
                     Py_TYPE(table)->tp_name);
        return NULL;
    }
    pairs = PyTuple_New(PyTuple_GET_SIZE(table));
    for (i = 0; pairs != NULL && i < PyTuple_GET_SIZE(table); i++) {
        row = PyTuple_GET_ITEM(table, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 3 ||
            !PyUnicode_Check(PyTuple_GET_ITEM(row, 0)) ||
            !PyCallable_Check(PyTuple_GET_ITEM(row, 1))) {
            PyErr_Format(PyExc_TypeError, "bufferext._bridges._STEPS[%zd] "
                         "must be a row (name: str, function, needs), not a "
                         "malformed %.200s", i, Py_TYPE(row)->tp_name);
            Py_CLEAR(pairs);
            break;
        }
        needs = step_needs(PyTuple_GET_ITEM(row, 2), i);
        if (needs == NULL) {
            Py_CLEAR(pairs);
            break;
        }
        PyTuple_SET_ITEM(pairs, i,
                         Py_BuildValue("(ON)", PyTuple_GET_ITEM(row, 1),
                                       needs));
        if (PyTuple_GET_ITEM(pairs, i) == NULL) {
            Py_CLEAR(pairs);
        }
    }
    return pairs;
}

/* hasattr(cls, name): 1 or 0, or -1 with the exception the lookup raised
 * other than AttributeError.  The lookup may run Python code (a metaclass's
 * __getattribute__ or __getattr__, a descriptor's __get__). */
static int
type_has(PyObject *cls, PyObject *name)
{
    PyObject *found;

#if PY_VERSION_HEX >= 0x030D0000
    if (PyObject_GetOptionalAttr(cls, name, &found) < 0) {
        return -1;
    }
#else
    found = PyObject_GetAttr(cls, name);
    if (found == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            return -1;
        }
        PyErr_Clear();
    }
#endif
    Py_XDECREF(found);
    return found != NULL;
}

/* A row's guard: whether `cls` has one of the attributes `needs` names or
 * `obj` is an instance of one of its types (1; also when `needs` is empty),
 * neither (0), or -1 with the exception a lookup raised other than
 * AttributeError: hasattr(cls, name) or isinstance(obj, type) for each in
 * turn.  A lookup may run Python code (a metaclass's __getattribute__ or
 * __getattr__, a descriptor's __get__, a __class__ property, an
 * __instancecheck__). */
static int
row_applies(PyObject *obj, PyObject *cls, PyObject *needs)
{
    PyObject *need;
    Py_ssize_t i;
    int is;

    for (i = 0; i < PyTuple_GET_SIZE(needs); i++) {
        need = PyTuple_GET_ITEM(needs, i);
        is = PyType_Check(need) ? PyObject_IsInstance(obj, need)
                                : type_has(cls, need);
        if (is != 0) {
            return is;                          /* 1, or -1: it raised */
        }
    }
    return PyTuple_GET_SIZE(needs) == 0;
}

/* Mirrors the head of numpy's PyArrayObject_fields, whose descr
 * PyArray_DESCR, inlined by every extension built against numpy, reads:
 * its offset is numpy's ABI (numpy_items). */
struct numpy_array_head {
    PyObject_HEAD
    char *data;
    int nd;
    Py_ssize_t *dimensions, *strides;
    PyObject *base, *descr;
};

/* Whether `types` is a tuple whose first item is numpy's array type itself
 * (numpy_items reads its instances' fields): numpy's own static type, by
 * its name and size, which no Python code can make or rename (an attribute
 * numpy.ndarray can be rebound). */
static int
starts_with_ndarray(PyObject *types)
{
    PyTypeObject *first;

    if (!PyTuple_Check(types) || PyTuple_GET_SIZE(types) == 0 ||
        !PyType_Check(PyTuple_GET_ITEM(types, 0))) {
        return 0;
    }
    first = (PyTypeObject *)PyTuple_GET_ITEM(types, 0);
    return !PyType_HasFeature(first, Py_TPFLAGS_HEAPTYPE) &&
           strcmp(first->tp_name, "numpy.ndarray") == 0 &&
           first->tp_basicsize >= (Py_ssize_t)sizeof(struct numpy_array_head);
}

/* Read _bridges' _STEPS and _CPU_TYPES into the state, unless a racing
 * thread did first.  0, or -1 with an exception (nothing kept: the next
 * call reads again). */
BUFFEREXT_INTERNAL_COLD int
load_bridges(bufferext_state *st)
{
    PyObject *module, *table = NULL, *f = NULL, *t = NULL;

    module = PyImport_ImportModule("bufferext._bridges");
    if (module != NULL) {
        table = PyObject_GetAttrString(module, "_STEPS");
        t = table == NULL ? NULL
                          : PyObject_GetAttrString(module, "_CPU_TYPES");
        Py_DECREF(module);
    }
    if (t != NULL && !starts_with_ndarray(t)) {
        PyErr_SetString(PyExc_TypeError, "bufferext._bridges._CPU_TYPES "
                        "must be a tuple starting with numpy.ndarray");
        Py_CLEAR(t);
    }
    f = t == NULL ? NULL : step_functions(table);
    Py_XDECREF(table);
    if (f == NULL) {
        Py_XDECREF(t);
        return -1;
    }
    BUFFEREXT_MUTEX_LOCK(bridges_mutex);
    if (st->as_buffer_steps == NULL) {      /* else a racing thread's won */
        st->as_buffer_in_place =
            PyTuple_GET_SIZE(f) > 0 &&
            is_pass_through(PyTuple_GET_ITEM(PyTuple_GET_ITEM(f, 0), 0));
        st->cpu_types = t;
        /* published last: a reader that sees the steps sees the rest */
        BUFFEREXT_STORE(st->as_buffer_steps, f);
        f = t = NULL;
    }
    BUFFEREXT_MUTEX_UNLOCK(bridges_mutex);
    Py_XDECREF(f);
    Py_XDECREF(t);
    return 0;
}

/* The steps' (function, needs) pairs (a tuple), _CPU_TYPES (a tuple of
 * types) and whether the first step is our pass-through, borrowed from the
 * state: read on first use and kept unchanged until the module is cleared,
 * which no call of its functions outlives (each holds the module), so a
 * read takes no lock and no reference.  0, or -1 with an exception.
 * Inline: every as_buffer takes them. */
static inline int
bridges(bufferext_state *st, PyObject **steps, PyObject **cpu_types,
        int *in_place)
{
    while ((*steps = BUFFEREXT_LOAD(st->as_buffer_steps)) == NULL) {
        if (load_bridges(st) < 0) {
            return -1;
        }
    }
    *cpu_types = st->cpu_types;
    *in_place = st->as_buffer_in_place;
    return 0;
}

/* What numpy's array `obj` (an instance of numpy's type or of a subclass)
 * holds: NUMPY_ITEMS, items a consumer reads as memory; NUMPY_USER, a
 * user-defined dtype (dtype.isbuiltin 2: ml_dtypes' low-precision
 * floats), whose items numpy exports neither through the buffer protocol
 * nor DLPack: a later row of the table (_bridges._lowp_ndarray) reads
 * them; or -1 with BufferError naming the dtype: items that hold
 * references (dtype object, a structured one holding objects, numpy 2's
 * StringDType: no consumer can read them as plain memory) or
 * datetime/timedelta items (no buffer format describes them), refused as
 * the interface dicts' typestr is. */
enum { NUMPY_ITEMS, NUMPY_USER };

/* The int value of numpy's dtype attribute `name` (hasobject, a bool;
 * isbuiltin), or -1. */
static int
numpy_flag(PyObject *dtype, PyObject *name)
{
    PyObject *attr = PyObject_GetAttr(dtype, name);
    long flag = -1;

    if (attr != NULL) {
        flag = PyLong_AsLong(attr);
        Py_DECREF(attr);
    }
    PyErr_Clear();                  /* numpy's own attributes: cannot fail */
    return (int)flag;
}

static int
numpy_items(bufferext_state *st, PyObject *obj)
{
    PyObject *dtype;
    const char *expected = NULL;
    int type_num;

    /* Mirrors: the head of PyArray_Descr, whose type_num numpy keeps at
     * this offset on purpose ("to ensure type_num is stable",
     * ndarraytypes.h, 1.x-2.x); the numbers are numpy's NPY_TYPES (stable
     * ABI).  Re-check at numpy 3. */
    struct descr_head {
        PyObject_HEAD
        PyTypeObject *typeobj;
        char kind, type, byteorder, former_flags;
        int type_num;
    };
    enum { NPY_OBJECT = 17, NPY_VOID = 20, NPY_DATETIME = 21,
           NPY_TIMEDELTA = 22, NPY_USERDEF = 256 };

    /* the array's own field, as numpy's getter reads it, whatever a
     * subclass calls `dtype` (its property could return anything, or run
     * code) */
    dtype = Py_NewRef(((struct numpy_array_head *)obj)->descr);
    type_num = ((struct descr_head *)dtype)->type_num;
    if (type_num >= 0 && type_num < NPY_USERDEF && type_num != NPY_OBJECT &&
        type_num != NPY_VOID && type_num != NPY_DATETIME &&
        type_num != NPY_TIMEDELTA) {
        Py_DECREF(dtype);           /* the common path: no more lookups */
        return NUMPY_ITEMS;
    }
    if (type_num == NPY_DATETIME || type_num == NPY_TIMEDELTA) {
        expected = "a type the buffer protocol can describe (not "
                   "datetime/timedelta)";
    }
    else if (numpy_flag(dtype, st->str_hasobject) == 1) {
        /* object, a structured type holding them, a dtype not numpy's
         * own whose items hold references (StringDType's) */
        expected = "a fixed-size type without Python objects";
    }
    else if (type_num >= NPY_USERDEF &&
             numpy_flag(dtype, st->str_isbuiltin) == 2) {
        Py_DECREF(dtype);
        return NUMPY_USER;
    }
    if (expected != NULL) {
        PyErr_Format(PyExc_BufferError, "as_buffer: %s of dtype %S; "
                     "expected %s", Py_TYPE(obj)->tp_name, dtype, expected);
        Py_DECREF(dtype);
        return -1;
    }
    Py_DECREF(dtype);
    return NUMPY_ITEMS;
}

/* Whether `obj`'s own buffer is the answer (1, or 0; -1 with the error of
 * numpy_items): an exact type of _CPU_TYPES (numpy's array, the first,
 * unless its items are a user-defined dtype's) or an exporter that
 * supports PyBUF_DEVICE. */
static inline int
passes_through(bufferext_state *st, PyObject *obj, PyObject *cpu_types)
{
    PyTypeObject *type = Py_TYPE(obj);
    Py_ssize_t i;
    int items;

    for (i = 0; i < PyTuple_GET_SIZE(cpu_types); i++) {
        if ((PyObject *)type == PyTuple_GET_ITEM(cpu_types, i)) {
            if (i != 0) {
                return 1;
            }
            items = numpy_items(st, obj);
            return items < 0 ? -1 : items == NUMPY_ITEMS;
        }
    }
    return PyObject_CheckBufferSupports(obj, PyBUF_DEVICE);
}

/* What a row answers when `obj`'s own buffer is the answer: `obj` itself
 * (readonly None) or re-exported with the policy (a bool). */
static inline PyObject *
as_is(bufferext_state *st, PyObject *obj, PyObject *readonly)
{
    if (readonly == Py_None) {
        return Py_NewRef(obj);
    }
    return adapter_reexport(st, obj, readonly == Py_True);
}

/* The pass-through: as_is, or NotImplemented.  `readonly` is None or a
 * bool. */
static inline PyObject *
pass_through(bufferext_state *st, PyObject *obj, PyObject *readonly,
             PyObject *cpu_types)
{
    int passes = passes_through(st, obj, cpu_types);

    if (passes <= 0) {
        return passes < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    }
    return as_is(st, obj, readonly);
}

/* The buffer protocol's row: `obj` itself (readonly None), or re-exported
 * with the policy, if it exports a buffer, unless its type `cls` speaks
 * DLPack too and it refuses a plain request for a formatted, strided
 * read-only buffer (memoryview's: JAX's bfloat16 arrays), which the DLPack
 * row then reads; else NotImplemented.  NULL with the exception the lookup
 * or the request raised, other than a plain refusal's (BufferError,
 * ValueError, TypeError, NotImplementedError).  The lookup and the request
 * may run Python code (a metaclass's, a __buffer__ and __release_buffer__):
 * after them only `obj` and `readonly`, held by the caller, are read. */
static PyObject *
buffer_protocol(bufferext_state *st, PyObject *obj, PyObject *cls,
                PyObject *readonly, PyObject *cpu_types)
{
    PyTypeObject *ndarray = (PyTypeObject *)PyTuple_GET_ITEM(cpu_types, 0);
    Py_buffer view;
    int speaks_dlpack, items;

    if (!PyObject_CheckBufferSupports(obj, 0)) {
        return Py_NewRef(Py_NotImplemented);
    }
    /* an array of a subclass of numpy's: its items as the pass-through
     * reads them */
    if (PyObject_TypeCheck(obj, ndarray) &&
        (items = numpy_items(st, obj)) != NUMPY_ITEMS) {
        return items < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    }
    speaks_dlpack = type_has(cls, st->str_dlpack);
    if (speaks_dlpack < 0) {
        return NULL;
    }
    if (speaks_dlpack) {
        if (PyObject_GetBuffer(obj, &view, PyBUF_FULL_RO) < 0) {
            if (!PyErr_ExceptionMatches(PyExc_BufferError) &&
                !PyErr_ExceptionMatches(PyExc_ValueError) &&
                !PyErr_ExceptionMatches(PyExc_TypeError) &&
                !PyErr_ExceptionMatches(PyExc_NotImplementedError)) {
                return NULL;
            }
            PyErr_Clear();
            return Py_NewRef(Py_NotImplemented);
        }
        PyBuffer_Release(&view);
    }
    return as_is(st, obj, readonly);
}

/* The first answer of steps[start:] that is not NotImplemented for `obj`
 * and `readonly` (the caller's references), as a new reference; NULL with the
 * exception a guard's lookup or a step raised, or TypeError if none
 * answered.  The Python steps are called with (obj, cls, readonly), cls the
 * type of obj when the first of their rows is tried, held until the last: a
 * guard's lookup or a step may reassign __class__, and the guards look up
 * that same cls (what the steps' own hasattr(cls, ...) read).  After each
 * lookup and each step the walk reads only what it holds. */
static PyObject *
walk_steps(bufferext_state *st, PyObject *steps, PyObject *cpu_types,
           PyObject *obj, PyObject *readonly, Py_ssize_t start)
{
    PyObject *args[3] = {obj, NULL, readonly}, *pair, *step, *result = NULL;
    PyObject *name;
    Py_ssize_t i;
    int applies;

    for (i = start; i < PyTuple_GET_SIZE(steps); i++) {
        pair = PyTuple_GET_ITEM(steps, i);
        step = PyTuple_GET_ITEM(pair, 0);
        if (is_pass_through(step)) {
            result = pass_through(st, obj, readonly, cpu_types);
        }
        else {
            if (args[1] == NULL) {
                args[1] = Py_NewRef(Py_TYPE(obj));
            }
            applies = row_applies(obj, args[1], PyTuple_GET_ITEM(pair, 1));
            if (applies < 0) {
                Py_DECREF(args[1]);
                return NULL;
            }
            if (!applies) {
                continue;
            }
            /* our buffer protocol's row in place, else a call */
            result = is_c_step(step, adapter_buffer_protocol)
                         ? buffer_protocol(st, obj, args[1], readonly,
                                           cpu_types)
                         : PyObject_Vectorcall(step, args, 3, NULL);
        }
        if (result != Py_NotImplemented) {
            Py_XDECREF(args[1]);
            return result;                      /* or NULL: it raised */
        }
        Py_DECREF(result);
    }
    name = PyObject_GetAttrString(args[1] != NULL ? args[1]
                                  : (PyObject *)Py_TYPE(obj), "__name__");
    Py_XDECREF(args[1]);
    if (name != NULL) {                 /* _bridges._speaks_none's text */
        PyErr_Format(PyExc_TypeError, "as_buffer: %R object speaks none of "
                     "the buffer protocol, the Arrow PyCapsule interface, "
                     "DLPack, __cuda_array_interface__, "
                     "__ve_array_interface__ or __array_interface__", name);
        Py_DECREF(name);
    }
    return NULL;
}

/* Check as_buffer's `readonly`: None or a bool.  0, or -1 with TypeError. */
static int
check_readonly(const char *fname, PyObject *readonly)
{
    if (readonly != Py_None && !PyBool_Check(readonly)) {
        PyErr_Format(PyExc_TypeError, "%s: readonly must be None or a bool, "
                     "not %R", fname, readonly);
        return -1;
    }
    return 0;
}

/* as_buffer(obj, *, readonly=None). */
static PyObject *
adapter_as_buffer(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                  PyObject *kwnames)
{
    bufferext_state *st = bufferext_get_state(module);
    PyObject *readonly, *steps, *cpu_types;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    int ours, passes;

    if (nargs != 1 || nkw > 1 ||
        (nkw == 1 && PyUnicode_CompareWithASCIIString(
                         PyTuple_GET_ITEM(kwnames, 0), "readonly") != 0)) {
        PyErr_Format(PyExc_TypeError, "as_buffer() takes one positional "
                     "argument, obj, and the keyword argument readonly "
                     "(%zd positional and %zd keyword arguments given)",
                     nargs, nkw);
        return NULL;
    }
    readonly = nkw == 1 ? args[1] : Py_None;
    if (check_readonly("as_buffer", readonly) < 0 ||
        bridges(st, &steps, &cpu_types, &ours) < 0) {
        return NULL;
    }
    /* The pass-through in place when the table starts with ours (unless
     * replaced, it does): the common case, with no walk. */
    passes = ours ? passes_through(st, args[0], cpu_types) : 0;
    if (passes != 0) {
        return passes < 0 ? NULL : as_is(st, args[0], readonly);
    }
    return walk_steps(st, steps, cpu_types, args[0], readonly, ours);
}

/* Check the arguments of our C row `fname` called as a row of the table:
 * (obj, cls, readonly), readonly None or a bool.  0, or -1 with TypeError. */
static int
check_row_args(const char *fname, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s() takes 3 positional arguments, "
                     "obj, cls and readonly (%zd given)", fname, nargs);
        return -1;
    }
    return check_readonly(fname, args[2]);
}

/* _pass_through(obj, cls, readonly): the pass-through called as a row of
 * the table (by _bridges._dispatch; as_buffer runs it in place).  It reads
 * the type of `obj` itself; `cls` is the row signature's. */
static PyObject *
adapter_pass_through(PyObject *module, PyObject *const *args,
                     Py_ssize_t nargs)
{
    bufferext_state *st = bufferext_get_state(module);
    PyObject *steps, *cpu_types;
    int in_place;

    if (check_row_args("_pass_through", args, nargs) < 0 ||
        bridges(st, &steps, &cpu_types, &in_place) < 0) {
        return NULL;
    }
    return pass_through(st, args[0], args[2], cpu_types);
}

/* _buffer_protocol(obj, cls, readonly): the buffer protocol's row of the
 * table, called as a row (by _bridges._dispatch; as_buffer runs it in
 * place). */
static PyObject *
adapter_buffer_protocol(PyObject *module, PyObject *const *args,
                        Py_ssize_t nargs)
{
    bufferext_state *st = bufferext_get_state(module);
    PyObject *steps, *cpu_types;
    int in_place;

    if (check_row_args("_buffer_protocol", args, nargs) < 0 ||
        bridges(st, &steps, &cpu_types, &in_place) < 0) {
        return NULL;
    }
    return buffer_protocol(st, args[0], args[1], args[2], cpu_types);
}

static PyMethodDef adapter_functions[] = {
    {"as_buffer", (PyCFunction)(void (*)(void))adapter_as_buffer,
     METH_FASTCALL | METH_KEYWORDS,
     "as_buffer($module, /, obj, *, readonly=None)\n--\n\n"
     AS_BUFFER_DOC},
    {"_pass_through", (PyCFunction)(void (*)(void))adapter_pass_through,
     METH_FASTCALL, "_pass_through($module, obj, cls, readonly, /)\n--\n\n"
     "as_buffer's pass-through, a row of bufferext._bridges._STEPS: obj (or\n"
     "a re-export with readonly) if its own buffer is the answer, else\n"
     "NotImplemented."},
    {"_buffer_protocol", (PyCFunction)(void (*)(void))adapter_buffer_protocol,
     METH_FASTCALL, "_buffer_protocol($module, obj, cls, readonly, /)\n--\n\n"
     "as_buffer's buffer-protocol row, a row of bufferext._bridges._STEPS:\n"
     "obj (or a re-export with readonly) if it exports a buffer, unless cls\n"
     "speaks DLPack too and obj refuses a plain export; else NotImplemented."},
    {"_cuda_bridge_stream", bufferext_dlpack_bridge_stream, METH_O,
     "The CUstream (an int) DLPack producers make CUDA data ready on."},
    {"_adapter_from_dlpack",
     (PyCFunction)(void (*)(void))bufferext_adapter_from_dlpack,
     METH_FASTCALL, "Consume a DLPack capsule into a BufferAdapter."},
    {"_adapter_from_arrow",
     (PyCFunction)(void (*)(void))bufferext_adapter_from_arrow,
     METH_FASTCALL, "Import Arrow C Data / C Device capsules into a "
     "BufferAdapter."},
    {"_adapter_from_layout", bufferext_adapter_from_layout, METH_VARARGS,
     "A BufferAdapter over a layout parsed from an interface dict."},
    {"_adapter_from_buffer", adapter_from_buffer, METH_VARARGS,
     "A BufferAdapter re-exporting a buffer with another read-only policy."},
    {NULL, NULL, 0, NULL},
};

int
bufferext_init_adapter(PyObject *module)
{
    bufferext_state *st = bufferext_get_state(module);

    if (PyModule_AddFunctions(module, adapter_functions) < 0 ||
        (st->str_dlpack = PyUnicode_InternFromString("__dlpack__")) == NULL ||
        (st->str_isbuiltin = PyUnicode_InternFromString("isbuiltin")) ==
            NULL ||
        (st->str_hasobject = PyUnicode_InternFromString("hasobject")) ==
            NULL) {
        return -1;
    }
    if (bufferext_add_type(module, &adapter_spec,
                           BUFFEREXT_LEGACY_FLAGS | PyBUF_DEVICE,
                           adapter_getbuffer_ex,
                           offsetof(AdapterObject, layout),
                           &st->BufferAdapter_Type) < 0) {
        return -1;
    }
    bufferext_disallow_instantiation(st->BufferAdapter_Type);
    return 0;
}
