/* cpubuffer.c -- CPUBuffer, the sample CPU producer.  Written against the
 * public header as an outside author would: declares its supported flags,
 * answers PyBUF_DEVICE explicitly with CPU memory, counts its exports and
 * refuses to be closed or resized while exported.  No allocation per
 * export: shape and strides point into the object. */
#include "parts.h"
#include "export.h"

#define CPU_ALIGNMENT 64

/* The request flags CPUBuffer honours: every legacy flag and PyBUF_DEVICE. */
#define CPUBUFFER_SUPPORTED_FLAGS (BUFFEREXT_LEGACY_FLAGS | PyBUF_DEVICE)

typedef struct {
    PyObject_HEAD
    char *data;                 /* CPU_ALIGNMENT-aligned; NULL once closed */
    void *allocation;           /* what was allocated (data lies inside) */
    bufferext_export_layout layout;
    Py_ssize_t *dims;           /* shape then strides, 2 * ndim entries */
    Py_ssize_t exports;
    bufferext_dtype dt;
    PyObject *weakreflist;
} CPUBufferObject;

#define CPUBuffer_CAST(op) ((CPUBufferObject *)(op))

static int
check_open(CPUBufferObject *self)
{
    if (self->data == NULL) {
        PyErr_SetString(PyExc_ValueError, "operation on a closed CPUBuffer");
        return -1;
    }
    return 0;
}

static int
check_not_exported(CPUBufferObject *self, const char *what)
{
    if (self->exports > 0) {
        PyErr_Format(PyExc_BufferError,
                     "CPUBuffer: cannot %s while %zd export(s) are alive "
                     "(release the views and DLPack capsules first)",
                     what, self->exports);
        return -1;
    }
    return 0;
}

/* Allocate zeroed memory for `layout`; on success the object owns it. */
static int
cpubuffer_allocate(CPUBufferObject *self, const bufferext_layout *layout)
{
    size_t size = (size_t)layout->nbytes + CPU_ALIGNMENT;
    Py_ssize_t *dims;
    int64_t *items;
    void *allocation;
    int ndim = layout->ndim;

    if ((size_t)layout->nbytes > (size_t)PY_SSIZE_T_MAX - CPU_ALIGNMENT) {
        PyErr_SetString(PyExc_ValueError, "CPUBuffer: size is too large");
        return -1;
    }
    allocation = PyMem_RawCalloc(1, size);
    dims = bufferext_dims_alloc(ndim, &items);
    if (allocation == NULL || dims == NULL) {
        PyMem_RawFree(allocation);
        PyMem_Free(dims);
        PyErr_Format(PyExc_MemoryError,
                     "CPUBuffer: cannot allocate %zd bytes", layout->nbytes);
        return -1;
    }
    memcpy(dims, layout->shape, sizeof(Py_ssize_t) * (size_t)ndim);
    memcpy(dims + ndim, layout->strides, sizeof(Py_ssize_t) * (size_t)ndim);
    PyMem_RawFree(self->allocation);
    PyMem_Free(self->dims);
    self->allocation = allocation;
    self->dims = dims;
    self->data = (char *)(((uintptr_t)allocation + CPU_ALIGNMENT - 1) &
                          ~(uintptr_t)(CPU_ALIGNMENT - 1));
    self->layout.buf = self->data;
    self->layout.len = layout->nbytes;
    self->layout.ndim = ndim;
    self->layout.shape = dims;
    self->layout.strides = dims + ndim;
    bufferext_layout_contiguity(&self->layout);
    bufferext_layout_dlpack(&self->layout, items);
    return 0;
}

static PyObject *
cpubuffer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"shape", "dtype", "readonly", NULL};
    PyObject *shape, *dtype = NULL;
    int readonly = 0;
    bufferext_state *st;
    bufferext_layout layout;
    CPUBufferObject *self;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O$p:CPUBuffer",
                                     keywords, &shape, &dtype, &readonly)) {
        return NULL;
    }
    st = bufferext_state_from_type(type);
    if (st == NULL) {
        return NULL;
    }
    self = (CPUBufferObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    if (dtype == NULL) {
        dtype = PyUnicode_FromString("float64");
    }
    else {
        Py_INCREF(dtype);
    }
    if (dtype == NULL ||
        bufferext_dtype_resolve(st, dtype, &self->dt) < 0) {
        goto error;
    }
    /* The item layout first: allocation computes contiguity from it. */
    self->layout.itemsize = self->dt.itemsize;
    self->layout.format = self->dt.format;
    self->layout.readonly = readonly;
    if (bufferext_layout_parse("CPUBuffer", shape, self->dt.itemsize,
                               &layout) < 0 ||
        cpubuffer_allocate(self, &layout) < 0) {
        goto error;
    }
    Py_DECREF(dtype);
    return (PyObject *)self;
error:
    Py_XDECREF(dtype);
    Py_DECREF(self);
    return NULL;
}

static int
cpubuffer_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(CPUBuffer_CAST(op)->dt.dtype);
    return 0;
}

static void
cpubuffer_dealloc(PyObject *op)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    PyTypeObject *type = Py_TYPE(op);

    PyObject_GC_UnTrack(op);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs(op);
    }
    PyMem_RawFree(self->allocation);
    PyMem_Free(self->dims);
    bufferext_dtype_clear(&self->dt);
    type->tp_free(op);
    Py_DECREF(type);
}

/* ---- the buffer protocol ---------------------------------------------- */

static int
cpubuffer_getbuffer(PyObject *op, Py_buffer *view, int flags)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);

    view->obj = NULL;
    if (self->data == NULL) {
        return bufferext_refuse(op, "buffer is closed");
    }
    if (bufferext_fill_request(op, view, flags, &self->layout) < 0) {
        return -1;
    }
    /* CPU memory: answers a PyBUF_DEVICE request with device == NULL. */
    (void)BufferExt_SetDevice(op, view, flags, NULL, NULL);
    self->exports++;
    view->obj = Py_NewRef(op);
    return 0;
}

static void
cpubuffer_releasebuffer(PyObject *op, Py_buffer *view)
{
    (void)view;
    CPUBuffer_CAST(op)->exports--;
}

/* ---- methods ---------------------------------------------------------- */

static PyObject *
cpubuffer_copy_from_host(PyObject *op, PyObject *source)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    bufferext_state *st = bufferext_state_from_type(Py_TYPE(op));
    Py_buffer view;

    if (st == NULL || check_open(self) < 0) {
        return NULL;
    }
    if (self->layout.readonly &&
        check_not_exported(self, "be written while read-only") < 0) {
        return NULL;
    }
    if (PyObject_GetBuffer(source, &view, PyBUF_FULL_RO) < 0) {
        return NULL;
    }
    if (view.len != self->layout.len) {
        PyErr_Format(PyExc_ValueError,
                     "CPUBuffer.copy_from_host: source has %zd bytes, the "
                     "buffer %zd", view.len, self->layout.len);
        goto error;
    }
    if (bufferext_check_source_format(st, "CPUBuffer.copy_from_host", &view,
                                      self->dt.dtype) < 0) {
        goto error;
    }
    if (PyBuffer_ToContiguous(self->data, &view, view.len, 'C') < 0) {
        goto error;
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    PyBuffer_Release(&view);
    return NULL;
}

static PyObject *
cpubuffer_to_host(PyObject *op, PyObject *unused)
{
    PyObject *numpy, *array;
    (void)unused;

    if (check_open(CPUBuffer_CAST(op)) < 0) {
        return NULL;
    }
    numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL) {
        return NULL;
    }
    /* numpy.array copies; it reads through our buffer export. */
    array = PyObject_CallMethod(numpy, "array", "O", op);
    Py_DECREF(numpy);
    return array;
}

static PyObject *
cpubuffer_close(PyObject *op, PyObject *unused)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    (void)unused;

    if (self->data == NULL) {
        Py_RETURN_NONE;
    }
    if (check_not_exported(self, "close") < 0) {
        return NULL;
    }
    PyMem_RawFree(self->allocation);
    self->allocation = NULL;
    self->data = NULL;
    self->layout.buf = NULL;
    Py_RETURN_NONE;
}

static PyObject *
cpubuffer_resize(PyObject *op, PyObject *shape)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    bufferext_layout layout;
    char *old_data = self->data;
    void *old_allocation = self->allocation;
    Py_ssize_t old_len = self->layout.len;

    if (check_open(self) < 0 || check_not_exported(self, "resize") < 0 ||
        bufferext_layout_parse("CPUBuffer.resize", shape,
                               self->layout.itemsize, &layout) < 0) {
        return NULL;
    }
    self->allocation = NULL;   /* keep the old block for the copy */
    if (cpubuffer_allocate(self, &layout) < 0) {
        self->allocation = old_allocation;
        return NULL;
    }
    memcpy(self->data, old_data,
           (size_t)(old_len < layout.nbytes ? old_len : layout.nbytes));
    PyMem_RawFree(old_allocation);
    Py_RETURN_NONE;
}

static PyObject *
cpubuffer_dlpack(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    if (check_open(CPUBuffer_CAST(op)) < 0) {
        return NULL;
    }
    return bufferext_dlpack(op, args, nargs, kwnames);
}

static PyObject *
cpubuffer_dlpack_device(PyObject *op, PyObject *unused)
{
    (void)op;
    (void)unused;
    return Py_BuildValue("(ii)", 1, 0);   /* kDLCPU, device 0 */
}

static PyObject *
cpubuffer_enter(PyObject *op, PyObject *unused)
{
    (void)unused;
    return Py_NewRef(op);
}

static PyObject *
cpubuffer_exit(PyObject *op, PyObject *args)
{
    (void)args;
    return cpubuffer_close(op, NULL);
}

static PyMethodDef cpubuffer_methods[] = {
    {"copy_from_host", cpubuffer_copy_from_host, METH_O,
     "copy_from_host($self, source, /)\n--\n\n"
     "Copy any buffer of the same size into this one (raw bytes, or items of\n"
     "the same dtype in any layout)."},
    {"to_host", cpubuffer_to_host, METH_NOARGS,
     "to_host($self, /)\n--\n\nA numpy array holding a copy of the contents."},
    {"close", cpubuffer_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "Free the memory now.  BufferError while exported; closing twice is\n"
     "harmless."},
    {"resize", cpubuffer_resize, METH_O,
     "resize($self, shape, /)\n--\n\n"
     "Change the shape in place, keeping the leading bytes.  BufferError\n"
     "while exported."},
    {"__dlpack__", (PyCFunction)(void (*)(void))cpubuffer_dlpack,
     METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__($self, /, *, stream=None, max_version=None, "
     "dl_device=None, copy=None)\n--\n\n"
     "Export as a DLPack capsule (zero-copy)."},
    {"__dlpack_device__", cpubuffer_dlpack_device, METH_NOARGS,
     "__dlpack_device__($self, /)\n--\n\n(1, 0): kDLCPU."},
    {"__enter__", cpubuffer_enter, METH_NOARGS, NULL},
    {"__exit__", cpubuffer_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

/* ---- attributes ------------------------------------------------------- */

static PyObject *
get_shape(PyObject *op, void *closure)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    (void)closure;
    return bufferext_tuple_from_ssize(self->layout.ndim, self->layout.shape);
}

static PyObject *
get_strides(PyObject *op, void *closure)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    (void)closure;
    return bufferext_tuple_from_ssize(self->layout.ndim,
                                      self->layout.strides);
}

static PyObject *
get_ndim(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromLong(CPUBuffer_CAST(op)->layout.ndim);
}

static PyObject *
get_nbytes(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(CPUBuffer_CAST(op)->layout.len);
}

static PyObject *
get_itemsize(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(CPUBuffer_CAST(op)->layout.itemsize);
}

static PyObject *
get_dtype(PyObject *op, void *closure)
{
    (void)closure;
    return Py_NewRef(CPUBuffer_CAST(op)->dt.dtype);
}

static PyObject *
get_format(PyObject *op, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(CPUBuffer_CAST(op)->dt.format);
}

static PyObject *
get_readonly(PyObject *op, void *closure)
{
    (void)closure;
    return PyBool_FromLong(CPUBuffer_CAST(op)->layout.readonly);
}

static PyObject *
get_exports(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(CPUBuffer_CAST(op)->exports);
}

static PyObject *
get_closed(PyObject *op, void *closure)
{
    (void)closure;
    return PyBool_FromLong(CPUBuffer_CAST(op)->data == NULL);
}

static PyObject *
get_ptr(PyObject *op, void *closure)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    (void)closure;
    if (check_open(self) < 0) {
        return NULL;
    }
    return PyLong_FromVoidPtr(self->data);
}

static PyObject *
get_array_interface(PyObject *op, void *closure)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    PyObject *shape, *result;
    (void)closure;

    if (check_open(self) < 0) {
        return NULL;
    }
    shape = get_shape(op, NULL);
    if (shape == NULL) {
        return NULL;
    }
    /* NumPy's array interface v3; strides None: C-contiguous. */
    result = Py_BuildValue("{s:N,s:O,s:[(s,O)],s:(NO),s:O,s:i}",
                           "shape", shape, "typestr", self->dt.typestr,
                           "descr", "", self->dt.typestr,
                           "data", PyLong_FromVoidPtr(self->data),
                           self->layout.readonly ? Py_True : Py_False,
                           "strides", Py_None, "version", 3);
    return result;
}

static PyGetSetDef cpubuffer_getset[] = {
    {"shape", get_shape, NULL, "Shape, a tuple of ints.", NULL},
    {"strides", get_strides, NULL, "Strides in bytes (C order).", NULL},
    {"ndim", get_ndim, NULL, "Number of dimensions.", NULL},
    {"nbytes", get_nbytes, NULL, "Size in bytes.", NULL},
    {"itemsize", get_itemsize, NULL, "Bytes per item.", NULL},
    {"dtype", get_dtype, NULL, "Element type, a numpy.dtype.", NULL},
    {"format", get_format, NULL, "Element type as a struct format.", NULL},
    {"readonly", get_readonly, NULL, "True if exports are read-only.", NULL},
    {"exports", get_exports, NULL, "Number of live exports.", NULL},
    {"closed", get_closed, NULL, "True once close() freed the memory.", NULL},
    {"ptr", get_ptr, NULL, "Address of the first byte (64-byte aligned).",
     NULL},
    {"__array_interface__", get_array_interface, NULL,
     "NumPy array interface, version 3.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *
cpubuffer_repr(PyObject *op)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    PyObject *shape = get_shape(op, NULL), *result;

    if (shape == NULL) {
        return NULL;
    }
    result = PyUnicode_FromFormat("CPUBuffer(%R, dtype='%S'%s%s)", shape,
                                  self->dt.dtype,
                                  self->layout.readonly ? ", readonly=True"
                                                        : "",
                                  self->data == NULL ? ", closed" : "");
    Py_DECREF(shape);
    return result;
}

static PyMemberDef cpubuffer_members[] = {
    {"__weaklistoffset__", T_PYSSIZET,
     offsetof(CPUBufferObject, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot cpubuffer_slots[] = {
    {Py_tp_new, cpubuffer_new},
    {Py_tp_dealloc, cpubuffer_dealloc},
    {Py_tp_traverse, cpubuffer_traverse},
    {Py_tp_repr, cpubuffer_repr},
    {Py_tp_methods, cpubuffer_methods},
    {Py_tp_getset, cpubuffer_getset},
    {Py_tp_members, cpubuffer_members},
    {Py_bf_getbuffer, cpubuffer_getbuffer},
    {Py_bf_releasebuffer, cpubuffer_releasebuffer},
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
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    cpubuffer_slots,
};

int
bufferext_init_cpubuffer(PyObject *module)
{
    bufferext_state *st = bufferext_get_state(module);

    st->CPUBuffer_Type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &cpubuffer_spec, NULL);
    if (st->CPUBuffer_Type == NULL ||
        BufferExt_SetSupportedFlags(st->CPUBuffer_Type,
                                    CPUBUFFER_SUPPORTED_FLAGS) < 0) {
        return -1;
    }
    return PyModule_AddObject(module, "CPUBuffer",
                              Py_NewRef(st->CPUBuffer_Type));
}
