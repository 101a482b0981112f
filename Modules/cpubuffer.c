/* cpubuffer.c -- CPUBuffer, the package's CPU allocator: DistArray's local
 * pieces in CPU memory are CPUBuffers (distarray/_buffers.py).  Its blocks
 * come from blockcache.c (huge pages, a cache of freed blocks); it exports
 * through the inline path of the
 * shared producer core (producer.c: no allocation per export, shape and
 * strides point into the object), answers PyBUF_DEVICE explicitly with CPU
 * memory, and refuses to be closed or resized while exported or pinned.
 * It is not a teaching sample: an exporter as an outside author writes it,
 * against the public header alone, is docs/examples/example.c. */
#include "arrow.h"
#include "blockcache.h"
#include "dlpack.h"
#include "producer.h"
#include "state.h"

/* The request flags CPUBuffer honours: every legacy flag and PyBUF_DEVICE. */
#define CPUBUFFER_SUPPORTED_FLAGS (BUFFEREXT_LEGACY_FLAGS | PyBUF_DEVICE)

typedef struct {
    bufferext_producer head;    /* open: data != NULL */
    void *allocation;           /* what was allocated (data lies inside) */
    size_t mapped;              /* its size if it came from mmap, else 0 */
} CPUBufferObject;

#define CPUBuffer_CAST(op) ((CPUBufferObject *)(op))

static void
cpubuffer_free_memory(PyObject *op)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    void *allocation = self->allocation;
    size_t mapped = self->mapped;

    /* closed first: giving the block back may wait for the cache's mutex,
     * which suspends the caller's critical section (without the GIL) and
     * lets other threads see the object meanwhile */
    self->allocation = NULL;
    self->mapped = 0;
    self->head.layout.buf = NULL;
    self->head.open = 0;
    bufferext_block_free(allocation, mapped);
}

static const bufferext_producer_kind cpubuffer_kind = {
    "CPUBuffer", "release the views, DLPack capsules and Arrow arrays first",
    cpubuffer_free_memory, bufferext_producer_close,
};

/* The object owns `allocation` from here on. */
static void
cpubuffer_install(CPUBufferObject *self, void *allocation, char *data,
                  size_t mapped)
{
    self->allocation = allocation;
    self->mapped = mapped;
    self->head.layout.buf = data;       /* CPU_ALIGNMENT-aligned */
    self->head.open = 1;
}

/* A new CPUBuffer of `type` from a parsed spec (its dtype references
 * move to the object, or are dropped on failure).  Runs no Python code
 * but tp_alloc's garbage collector, which cannot reach the new object. */
static PyObject *
cpubuffer_from_spec(PyTypeObject *type, bufferext_producer_spec *spec,
                    int readonly, int zeroed)
{
    CPUBufferObject *self;
    void *allocation;
    size_t mapped;
    char *data;

    allocation = bufferext_block_alloc(spec->layout.nbytes, zeroed, &data,
                                 &mapped);
    if (allocation == NULL) {
        bufferext_dtype_clear(&spec->dt);
        return NULL;
    }
    self = (CPUBufferObject *)type->tp_alloc(type, 0);
    if (self == NULL ||
        bufferext_producer_setup(&self->head, &cpubuffer_kind, spec,
                                 readonly) < 0) {
        bufferext_dtype_clear(&spec->dt);
        bufferext_block_free(allocation, mapped);
        Py_XDECREF(self);
        return NULL;
    }
    cpubuffer_install(self, allocation, data, mapped);
    return (PyObject *)self;
}

/* The constructors: every call that runs Python code (the dtype resolver,
 * the dimensions' __index__) comes first, on locals. */
static PyObject *
cpubuffer_make(PyTypeObject *type, PyObject *shape, PyObject *dtype,
               int readonly, int zeroed)
{
    bufferext_state *st = bufferext_state_from_type(type);
    bufferext_producer_spec spec;

    if (st == NULL ||
        bufferext_producer_parse("CPUBuffer", st, shape, dtype, &spec) < 0) {
        return NULL;
    }
    return cpubuffer_from_spec(type, &spec, readonly, zeroed);
}

static PyObject *
cpubuffer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"shape", "dtype", "readonly", NULL};
    PyObject *shape, *dtype = NULL;
    int readonly = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O$p:CPUBuffer",
                                     keywords, &shape, &dtype, &readonly)) {
        return NULL;
    }
    return cpubuffer_make(type, shape, dtype, readonly, 1);
}

static PyObject *
cpubuffer_empty(PyObject *cls, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"shape", "dtype", NULL};
    PyObject *shape, *dtype = NULL;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O:CPUBuffer.empty",
                                     keywords, &shape, &dtype)) {
        return NULL;
    }
    return cpubuffer_make((PyTypeObject *)cls, shape, dtype, 0, 0);
}

static PyObject *
cpubuffer_clear_cache(PyObject *cls, PyObject *unused)
{
    (void)cls;
    (void)unused;
    return PyLong_FromSize_t(bufferext_block_cache_clear());
}

/* ---- the buffer protocol ---------------------------------------------- */

static int
cpubuffer_export(PyObject *op, Py_buffer *view, int flags,
                 Py_buffer_extended *ext)
{
    /* CPU memory: answers a PyBUF_DEVICE request with device == NULL. */
    return bufferext_producer_export(op, view, flags, ext, NULL, NULL);
}

BUFFEREXT_DEFINE_GETBUFFER(cpubuffer_getbuffer, cpubuffer_export);

/* ---- methods ---------------------------------------------------------- */

static PyObject *
cpubuffer_copy_from_host(PyObject *op, PyObject *source)
{
    const char *who = "CPUBuffer.copy_from_host";
    CPUBufferObject *self = CPUBuffer_CAST(op);
    Py_buffer_extended ext;
    int rc;

    if (bufferext_producer_get_source(&self->head, who, source, &ext) < 0) {
        return NULL;
    }
    rc = bufferext_copy_to_contiguous(self->head.layout.buf, &ext.view);
    bufferext_release_ext_raised(&ext);
    bufferext_producer_unpin(&self->head);
    return rc < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *
cpubuffer_to_host(PyObject *op, PyObject *unused)
{
    PyObject *module, *view, *array;
    (void)unused;

    if (bufferext_producer_check_open(BufferExtProducer_CAST(op)) < 0) {
        return NULL;
    }
    if (CPUBuffer_CAST(op)->head.dt.format[0] != '[') {
        /* numpy.array copies; it reads through our buffer export. */
        module = PyImport_ImportModule("numpy");
        if (module == NULL) {
            return NULL;
        }
        array = PyObject_CallMethod(module, "array", "O", op);
        Py_DECREF(module);
        return array;
    }
    /* numpy cannot read the format of a low-precision float ("[bfloat16]"):
     * _dtypes.host_view reads the items as their dtype, through one export
     * (which keeps the shape it reads from changing); then a copy. */
    module = PyImport_ImportModule("bufferext._dtypes");
    if (module == NULL) {
        return NULL;
    }
    view = PyObject_CallMethod(module, "host_view", "O", op);
    Py_DECREF(module);
    if (view == NULL) {
        return NULL;
    }
    array = PyObject_CallMethod(view, "copy", NULL);
    Py_DECREF(view);
    return array;
}

/* The new shape is parsed (each dimension's __index__ is Python code that
 * may close, resize or export this very buffer) and its memory allocated
 * first; the checks and the swap then run in one critical section, as
 * one change that no export sees (exports.h), with no Python code in
 * between: the old block is given back after it. */
static PyObject *
cpubuffer_resize(PyObject *op, PyObject *shape)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    bufferext_layout layout;
    void *allocation, *old_allocation = NULL;
    size_t mapped, old_mapped = 0;
    char *data;
    int rc;

    BUFFEREXT_LOCKED_BEGIN(op);
    /* early, for a clear error */
    rc = bufferext_producer_check_open_locked(&self->head) < 0 ||
         bufferext_producer_check_not_exported(&self->head, "resize") < 0
         ? -1 : 0;
    BUFFEREXT_LOCKED_END();
    if (rc < 0 ||
        bufferext_layout_parse("CPUBuffer.resize", shape,
                               self->head.layout.itemsize, &layout) < 0 ||
        (allocation = bufferext_block_alloc(layout.nbytes, 1, &data, &mapped)) ==
            NULL) {
        return NULL;
    }
    BUFFEREXT_LOCKED_BEGIN(op);
    /* what the parse may have changed */
    rc = bufferext_producer_check_open_locked(&self->head) < 0 ||
         bufferext_producer_begin_change(&self->head, "resize") < 0
         ? -1 : 0;
    if (rc == 0) {
        Py_ssize_t old_len = self->head.layout.len;
        void *old = self->head.layout.buf;
        rc = bufferext_producer_set_layout(&self->head, &layout);
        if (rc == 0) {
            memcpy(data, old, (size_t)(old_len < layout.nbytes
                                           ? old_len : layout.nbytes));
            old_allocation = self->allocation;
            old_mapped = self->mapped;
            cpubuffer_install(self, allocation, data, mapped);
        }
        bufferext_producer_end_change(&self->head);
    }
    BUFFEREXT_LOCKED_END();
    if (rc < 0) {
        bufferext_block_free(allocation, mapped);
        return NULL;
    }
    bufferext_block_free(old_allocation, old_mapped);
    Py_RETURN_NONE;
}

static PyObject *
cpubuffer_dlpack_device(PyObject *op, PyObject *unused)
{
    (void)unused;
    /* closed: ValueError, as every method (a consumer asks this first) */
    if (bufferext_producer_check_open(BufferExtProducer_CAST(op)) < 0) {
        return NULL;
    }
    return Py_BuildValue("(ii)", 1, 0);   /* kDLCPU, device 0 */
}

/* ---- pickling and copying ---------------------------------------------
 * __reduce_ex__ gives (CPUBuffer._from_pickle, (data, shape, typestr,
 * readonly)).  From protocol 5 on `data` is a pickle.PickleBuffer holding
 * an export of this buffer: no copy is made, and a buffer_callback may
 * take the memory out of band; before 5 it is a bytes copy.  The typestr
 * ('<f8') names the byte order, so the contents keep their values on a
 * machine of the other order.  Loading copies the data once into new
 * memory.  A copy (copy(), copy.copy, copy.deepcopy) is one memcpy. */

/* What a Python subclass adds to an instance (its __dict__, __slots__, or
 * what its own __getstate__ gives) travels with the buffer: in the reduce
 * tuple's state, which pickle's BUILD step restores, and into copies.  The
 * rules are pickle's, written once in Lib/bufferext/_subclass.py and
 * fetched by name on first use; an exact CPUBuffer has no such state. */
static PyObject *
cpubuffer_subclass_helper(PyObject *op, const char *name)
{
    bufferext_state *st = bufferext_state_from_type(Py_TYPE(op));
    PyObject *module, *helper;

    if (st == NULL) {
        return NULL;
    }
    if (Py_IS_TYPE(op, st->CPUBuffer_Type)) {
        return Py_NewRef(Py_None);
    }
    module = PyImport_ImportModule("bufferext._subclass");
    if (module == NULL) {
        return NULL;
    }
    helper = PyObject_GetAttrString(module, name);
    Py_DECREF(module);
    return helper;
}

/* The subclass state of `op` (None when it has none).  New reference. */
static PyObject *
cpubuffer_subclass_state(PyObject *op)
{
    PyObject *helper = cpubuffer_subclass_helper(op, "state"), *state;

    if (helper == NULL || helper == Py_None) {
        return helper;
    }
    state = PyObject_CallOneArg(helper, op);
    Py_DECREF(helper);
    return state;
}

/* Give `copy` the subclass state of `op`: shallow (memo NULL), as
 * copy.copy does, or deep with copy.deepcopy's `memo`.  0 or -1. */
static int
cpubuffer_copy_state(PyObject *op, PyObject *copy, PyObject *memo)
{
    PyObject *helper = cpubuffer_subclass_helper(op, "copy_into"), *done;

    if (helper == NULL || helper == Py_None) {
        Py_XDECREF(helper);
        return helper == NULL ? -1 : 0;
    }
    done = PyObject_CallFunctionObjArgs(helper, op, copy,
                                        memo ? memo : Py_None, NULL);
    Py_DECREF(helper);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

/* ValueError naming the state when closed.  0 or -1. */
static int
cpubuffer_check_open_to(CPUBufferObject *self, const char *what)
{
    int open;

    BUFFEREXT_LOCKED_BEGIN((PyObject *)self);
    open = self->head.open;
    BUFFEREXT_LOCKED_END();
    if (!open) {
        PyErr_Format(PyExc_ValueError,
                     "CPUBuffer: cannot %s a closed buffer (close() freed "
                     "its memory)", what);
        return -1;
    }
    return 0;
}

static PyObject *
cpubuffer_reduce_ex(PyObject *op, PyObject *protocol_arg)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    PyObject *rebuild = NULL, *data = NULL, *shape = NULL, *state = NULL;
    PyObject *result = NULL;
    bufferext_producer_snapshot now;
    long protocol = PyLong_AsLong(protocol_arg);   /* __index__: first */

    if ((protocol == -1 && PyErr_Occurred()) ||
        cpubuffer_check_open_to(self, "pickle") < 0 ||
        bufferext_producer_pin(&self->head, "CPUBuffer.__reduce_ex__",
                               0) < 0) {
        return NULL;
    }
    /* Pinned from here: what runs Python code below (the subclass state,
     * the GC of each allocation) cannot resize or close the buffer
     * between the data and the shape read with it. */
    bufferext_producer_read(&self->head, &now);
    /* The buffer's own memory, the one the shape read with it describes:
     * a subclass's __buffer__ (3.12+) may export other bytes.  Out of band
     * (protocol 5) the PickleBuffer keeps its export, and so the memory,
     * until the pickler is done with it; a type whose getbuffer is not
     * ours gets a copy, pinned memory read here. */
    if (protocol >= 5 &&
        Py_TYPE(op)->tp_as_buffer->bf_getbuffer == cpubuffer_getbuffer) {
        data = PyPickleBuffer_FromObject(op);
    }
    else {
        data = PyBytes_FromStringAndSize(now.buf, now.len);
    }
    if (data == NULL ||
        (shape = bufferext_tuple_from_ssize(now.ndim, now.shape)) == NULL ||
        (state = cpubuffer_subclass_state(op)) == NULL ||
        (rebuild = PyObject_GetAttrString((PyObject *)Py_TYPE(op),
                                          "_from_pickle")) == NULL) {
        goto error;
    }
    result = state == Py_None
        ? Py_BuildValue("O(OOOO)", rebuild, data, shape,
                        self->head.dt.typestr,
                        self->head.layout.readonly ? Py_True : Py_False)
        : Py_BuildValue("O(OOOO)O", rebuild, data, shape,
                        self->head.dt.typestr,
                        self->head.layout.readonly ? Py_True : Py_False,
                        state);
error:
    bufferext_producer_unpin(&self->head);
    Py_XDECREF(rebuild);
    Py_XDECREF(data);
    Py_XDECREF(shape);
    Py_XDECREF(state);
    return result;
}

static PyObject *
cpubuffer_from_pickle(PyObject *cls, PyObject *args)
{
    const char *who = "CPUBuffer._from_pickle";
    PyObject *data, *shape, *dtype;
    CPUBufferObject *self;
    Py_buffer_extended ext;
    int readonly, rc;

    if (!PyArg_ParseTuple(args, "OOOp:_from_pickle", &data, &shape, &dtype,
                          &readonly) ||
        (self = (CPUBufferObject *)cpubuffer_make(
             (PyTypeObject *)cls, shape, dtype, readonly, 0)) == NULL) {
        return NULL;
    }
    /* The same number of bytes, raw or items of the dtype (checked). */
    if (bufferext_producer_get_source(&self->head, who, data, &ext) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    rc = bufferext_copy_to_contiguous(self->head.layout.buf, &ext.view);
    bufferext_release_ext_raised(&ext);
    bufferext_producer_unpin(&self->head);
    if (rc < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* A new buffer of the same type, shape and dtype holding a copy of the
 * contents; read-only if `readonly`.  The source is pinned first: the
 * garbage collector of the copy's allocation may run finalizers, which
 * then cannot resize or close it between the shape read and the copy;
 * the copy's spec is the source's own (no dtype resolver runs). */
static PyObject *
cpubuffer_duplicate(PyObject *op, int readonly, PyObject *memo)
{
    CPUBufferObject *self = CPUBuffer_CAST(op), *copy;
    bufferext_producer_spec spec;
    bufferext_producer_snapshot now;
    int i;

    if (cpubuffer_check_open_to(self, "copy") < 0 ||
        bufferext_producer_pin(&self->head, "CPUBuffer.copy", 0) < 0) {
        return NULL;
    }
    bufferext_producer_read(&self->head, &now);
    spec.dt = self->head.dt;
    Py_INCREF(spec.dt.dtype);
    Py_INCREF(spec.dt.typestr);
    spec.layout.ndim = now.ndim;
    spec.layout.nbytes = now.len;
    for (i = 0; i < now.ndim; i++) {
        spec.layout.shape[i] = now.shape[i];
        spec.layout.strides[i] = now.strides[i];
    }
    copy = (CPUBufferObject *)cpubuffer_from_spec(Py_TYPE(op), &spec,
                                                  readonly, 0);
    if (copy != NULL) {
        memcpy(copy->head.layout.buf, now.buf, (size_t)now.len);
    }
    bufferext_producer_unpin(&self->head);
    if (copy != NULL && cpubuffer_copy_state(op, (PyObject *)copy,
                                             memo) < 0) {
        Py_CLEAR(copy);
    }
    return (PyObject *)copy;
}

static PyObject *
cpubuffer_copy(PyObject *op, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"readonly", NULL};
    PyObject *readonly = Py_None;
    int flag;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O:copy", keywords,
                                     &readonly)) {
        return NULL;
    }
    if (readonly == Py_None) {
        flag = CPUBuffer_CAST(op)->head.layout.readonly;
    }
    else if ((flag = PyObject_IsTrue(readonly)) < 0) {
        return NULL;
    }
    return cpubuffer_duplicate(op, flag, NULL);
}

static PyObject *
cpubuffer_copy_same(PyObject *op, PyObject *unused)
{
    (void)unused;
    return cpubuffer_duplicate(op, CPUBuffer_CAST(op)->head.layout.readonly,
                               NULL);
}

static PyObject *
cpubuffer_deepcopy(PyObject *op, PyObject *memo)
{
    if (!PyDict_Check(memo)) {
        PyErr_Format(PyExc_TypeError, "__deepcopy__: memo must be a dict, "
                     "not '%.200s'", Py_TYPE(memo)->tp_name);
        return NULL;
    }
    return cpubuffer_duplicate(op, CPUBuffer_CAST(op)->head.layout.readonly,
                               memo);
}

static PyMethodDef cpubuffer_methods[] = {
    {"copy_from_host", cpubuffer_copy_from_host, METH_O,
     "copy_from_host($self, source, /)\n--\n\n"
     "Copy any buffer of the same size into this one (raw bytes, or items of\n"
     "the same dtype in any layout)."},
    {"to_host", cpubuffer_to_host, METH_NOARGS,
     "to_host($self, /)\n--\n\nA numpy array holding a copy of the contents."},
    {"close", bufferext_producer_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "Free the memory now.  BufferError while exported; closing twice is\n"
     "harmless."},
    {"resize", cpubuffer_resize, METH_O,
     "resize($self, shape, /)\n--\n\n"
     "Change the shape in place, keeping the leading bytes.  BufferError\n"
     "while exported."},
    {"__dlpack__", (PyCFunction)(void (*)(void))bufferext_producer_dlpack,
     METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__($self, /, *, stream=None, max_version=None, "
     "dl_device=None, copy=None)\n--\n\n"
     "Export as a DLPack capsule (zero-copy)."},
    {"__dlpack_device__", cpubuffer_dlpack_device, METH_NOARGS,
     "__dlpack_device__($self, /)\n--\n\n(1, 0): kDLCPU."},
    BUFFEREXT_ARROW_METHODS(bufferext_producer_arrow_c_array),
    BUFFEREXT_ARROW_DEVICE_METHOD(bufferext_producer_arrow_c_device_array),
    {"empty", (PyCFunction)(void (*)(void))cpubuffer_empty,
     METH_CLASS | METH_VARARGS | METH_KEYWORDS,
     "empty(shape, dtype='float64')\n--\n\n"
     "Like the constructor, but the contents are unspecified (as in\n"
     "numpy.empty): a large buffer may reuse a block this process freed\n"
     "earlier, already mapped, so filling it costs no page faults."},
    {"clear_cache", cpubuffer_clear_cache, METH_CLASS | METH_NOARGS,
     "clear_cache()\n--\n\n"
     "Unmap the freed blocks kept for empty() now; returns their bytes."},
    {"copy", (PyCFunction)(void (*)(void))cpubuffer_copy,
     METH_VARARGS | METH_KEYWORDS,
     "copy($self, /, *, readonly=None)\n--\n\n"
     "A new buffer with the same shape, dtype and contents (one memcpy).\n"
     "readonly=None keeps this buffer's flag; True or False sets it."},
    {"__copy__", cpubuffer_copy_same, METH_NOARGS,
     "__copy__($self, /)\n--\n\ncopy.copy(): the same as copy()."},
    {"__deepcopy__", cpubuffer_deepcopy, METH_O,
     "__deepcopy__($self, memo, /)\n--\n\n"
     "copy.deepcopy(): the same as copy() (a buffer holds no objects)."},
    {"__reduce_ex__", cpubuffer_reduce_ex, METH_O,
     "__reduce_ex__($self, protocol, /)\n--\n\n"
     "Pickle support: from protocol 5 on the memory goes out as a\n"
     "pickle.PickleBuffer (zero-copy, out of band with a buffer_callback);\n"
     "before 5 as bytes."},
    {"_from_pickle", cpubuffer_from_pickle, METH_CLASS | METH_VARARGS,
     "_from_pickle(data, shape, dtype, readonly, /)\n--\n\n"
     "Rebuild a pickled CPUBuffer: a copy of the bytes of data."},
    {"__enter__", bufferext_producer_enter, METH_NOARGS,
     BUFFEREXT_PRODUCER_ENTER_DOC},
    {"__exit__", bufferext_producer_exit, METH_VARARGS,
     BUFFEREXT_PRODUCER_EXIT_DOC},
    {NULL, NULL, 0, NULL},
};

/* ---- attributes ------------------------------------------------------- */

/* A closed buffer has no address: ValueError.  0 or -1. */
static int
check_snapshot_open(const bufferext_producer_snapshot *now)
{
    if (!now->open) {
        PyErr_SetString(PyExc_ValueError, "operation on a closed CPUBuffer");
        return -1;
    }
    return 0;
}

static PyObject *
get_ptr(PyObject *op, void *closure)
{
    bufferext_producer_snapshot now;
    (void)closure;

    bufferext_producer_read(BufferExtProducer_CAST(op), &now);
    return check_snapshot_open(&now) < 0 ? NULL : PyLong_FromVoidPtr(now.buf);
}

static PyObject *
get_array_interface(PyObject *op, void *closure)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    bufferext_producer_snapshot now;
    PyObject *shape;
    (void)closure;

    bufferext_producer_read(&self->head, &now);
    if (check_snapshot_open(&now) < 0 ||
        (shape = bufferext_tuple_from_ssize(now.ndim, now.shape)) == NULL) {
        return NULL;
    }
    /* NumPy's array interface v3; strides None: C-contiguous.  Like every
     * array interface, the address is valid while the buffer is neither
     * closed nor resized (numpy holds an export when it reads the buffer
     * protocol, which it tries first). */
    return Py_BuildValue("{s:N,s:O,s:[(s,O)],s:(NO),s:O,s:i}",
                         "shape", shape, "typestr", self->head.dt.typestr,
                         "descr", "", self->head.dt.typestr,
                         "data", PyLong_FromVoidPtr(now.buf),
                         self->head.layout.readonly ? Py_True : Py_False,
                         "strides", Py_None, "version", 3);
}

static PyGetSetDef cpubuffer_getset[] = {
    /* the shared attributes, without the device producers' refusal to be
     * pickled (see BUFFEREXT_PRODUCER_GETSET) */
    BUFFEREXT_PRODUCER_ATTRS(BUFFEREXT_PRODUCER_GETSET_ENTRY)
    {"ptr", get_ptr, NULL, "Address of the first byte (64-byte aligned).",
     NULL},
    {"__array_interface__", get_array_interface, NULL,
     "NumPy array interface, version 3.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *
cpubuffer_repr(PyObject *op)
{
    return bufferext_producer_repr(op, "", ", closed", "");
}

static PyType_Slot cpubuffer_slots[] = {
    {Py_tp_new, cpubuffer_new},
    {Py_tp_dealloc, bufferext_producer_dealloc},
    {Py_tp_traverse, bufferext_producer_traverse},
    {Py_tp_repr, cpubuffer_repr},
    {Py_tp_methods, cpubuffer_methods},
    {Py_tp_getset, cpubuffer_getset},
    {Py_tp_members, bufferext_producer_members},
    {Py_bf_getbuffer, cpubuffer_getbuffer},
    {Py_bf_releasebuffer, bufferext_producer_releasebuffer},
    {Py_sq_length, bufferext_producer_length},
    {Py_nb_bool, bufferext_producer_bool},
    {Py_tp_doc,
     "CPUBuffer(shape, dtype='float64', *, readonly=False)\n--\n\n"
     "Zero-filled CPU memory, 64-byte aligned, exported through the extended\n"
     "buffer protocol, DLPack and the NumPy array interface."},
    {0, NULL},
};

static PyType_Spec cpubuffer_spec = {
    "bufferext.CPUBuffer",
    sizeof(CPUBufferObject),
    0,
    BUFFEREXT_TYPE_FLAGS | Py_TPFLAGS_BASETYPE,
    cpubuffer_slots,
};

int
bufferext_init_cpubuffer(PyObject *module)
{
    if (bufferext_block_cache_configure() < 0) {
        return -1;
    }
    if (bufferext_add_type(module, &cpubuffer_spec, CPUBUFFER_SUPPORTED_FLAGS,
                           cpubuffer_getbuffer_ex, BUFFEREXT_PRODUCER_LAYOUT,
                           &bufferext_get_state(module)->CPUBuffer_Type) < 0) {
        return -1;
    }
    bufferext_cpubuffer_entry = bufferext_own_register(
        cpubuffer_getbuffer, cpubuffer_getbuffer_ex, BUFFEREXT_PRODUCER_LAYOUT);
    return 0;
}
