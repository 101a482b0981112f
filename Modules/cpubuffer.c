/* cpubuffer.c -- CPUBuffer, the sample CPU producer.  Written against the
 * public header as an outside author would: declares its supported flags,
 * answers PyBUF_DEVICE explicitly with CPU memory, counts its exports and
 * refuses to be closed or resized while exported.  No allocation per
 * export: shape and strides point into the object. */
#include "producer.h"

#ifdef __linux__
#  include <sys/mman.h>
#endif

#define CPU_ALIGNMENT 64
/* Blocks from this size on come straight from mmap and ask the kernel for
 * transparent huge pages (Linux): the first touch of fresh memory then
 * faults once per 2 MiB instead of once per 4 KiB, which is most of the
 * cost of filling a new large buffer.  Smaller blocks come from calloc. */
#define CPU_HUGE_BLOCK ((size_t)2 << 20)

/* The request flags CPUBuffer honours: every legacy flag and PyBUF_DEVICE. */
#define CPUBUFFER_SUPPORTED_FLAGS (BUFFEREXT_LEGACY_FLAGS | PyBUF_DEVICE)

typedef struct {
    bufferext_producer head;    /* open: data != NULL */
    char *data;                 /* CPU_ALIGNMENT-aligned; NULL once closed */
    void *allocation;           /* what was allocated (data lies inside) */
    size_t mapped;              /* its size if it came from mmap, else 0 */
} CPUBufferObject;

#define CPUBuffer_CAST(op) ((CPUBufferObject *)(op))

static PyObject *cpubuffer_close(PyObject *op, PyObject *unused);

/* Give back a block from cpubuffer_calloc. */
static void
cpubuffer_free_block(void *allocation, size_t mapped)
{
#ifdef __linux__
    if (mapped) {
        (void)munmap(allocation, mapped);
        return;
    }
#endif
    (void)mapped;
    PyMem_RawFree(allocation);
}

static void
cpubuffer_free_memory(PyObject *op)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    cpubuffer_free_block(self->allocation, self->mapped);
}

static const bufferext_producer_kind cpubuffer_kind = {
    "CPUBuffer", "release the views and DLPack capsules first",
    cpubuffer_free_memory, cpubuffer_close,
};

/* Zeroed memory for `nbytes` bytes: the block to free, its aligned start
 * in *data, its mmap size in *mapped (0 for calloc).  NULL with ValueError
 * or MemoryError. */
static void *
cpubuffer_calloc(Py_ssize_t nbytes, char **data, size_t *mapped)
{
    void *allocation = NULL;

    if ((size_t)nbytes > (size_t)PY_SSIZE_T_MAX - CPU_ALIGNMENT) {
        PyErr_SetString(PyExc_ValueError, "CPUBuffer: size is too large");
        return NULL;
    }
    *mapped = 0;
#ifdef __linux__
    if ((size_t)nbytes >= CPU_HUGE_BLOCK) {
        void *block = mmap(NULL, (size_t)nbytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (block != MAP_FAILED) {      /* zero-filled by the kernel */
            (void)madvise(block, (size_t)nbytes, MADV_HUGEPAGE);
            *mapped = (size_t)nbytes;
            *data = block;              /* page-aligned */
            return block;
        }
    }
#endif
    allocation = PyMem_RawCalloc(1, (size_t)nbytes + CPU_ALIGNMENT);
    if (allocation == NULL) {
        PyErr_Format(PyExc_MemoryError,
                     "CPUBuffer: cannot allocate %zd bytes", nbytes);
        return NULL;
    }
    *data = (char *)(((uintptr_t)allocation + CPU_ALIGNMENT - 1) &
                     ~(uintptr_t)(CPU_ALIGNMENT - 1));
    return allocation;
}

/* The object owns `allocation` from here on. */
static void
cpubuffer_install(CPUBufferObject *self, void *allocation, char *data,
                  size_t mapped)
{
    self->allocation = allocation;
    self->mapped = mapped;
    self->data = data;
    self->head.layout.buf = data;
    self->head.open = 1;
}

static PyObject *
cpubuffer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"shape", "dtype", "readonly", NULL};
    PyObject *shape, *dtype = NULL;
    int readonly = 0;
    bufferext_state *st;
    CPUBufferObject *self;
    void *allocation;
    size_t mapped;
    char *data;

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
    if (bufferext_producer_init(&self->head, &cpubuffer_kind, st, shape,
                                dtype, readonly) < 0 ||
        (allocation = cpubuffer_calloc(self->head.layout.len,
                                       &data, &mapped)) == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    cpubuffer_install(self, allocation, data, mapped);
    return (PyObject *)self;
}

/* ---- the buffer protocol ---------------------------------------------- */

static int
cpubuffer_getbuffer(PyObject *op, Py_buffer *view, int flags)
{
    /* CPU memory: answers a PyBUF_DEVICE request with device == NULL. */
    return bufferext_producer_export(op, view, flags, NULL, NULL);
}

/* ---- methods ---------------------------------------------------------- */

static PyObject *
cpubuffer_copy_from_host(PyObject *op, PyObject *source)
{
    const char *who = "CPUBuffer.copy_from_host";
    CPUBufferObject *self = CPUBuffer_CAST(op);
    bufferext_state *st = bufferext_state_from_type(Py_TYPE(op));
    Py_buffer view;
    int rc;

    if (st == NULL || bufferext_producer_check_writable(&self->head) < 0 ||
        bufferext_producer_get_source(&self->head, st, who, source,
                                      &view) < 0) {
        return NULL;
    }
    rc = PyBuffer_ToContiguous(self->data, &view, view.len, 'C');
    PyBuffer_Release(&view);
    return rc < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *
cpubuffer_to_host(PyObject *op, PyObject *unused)
{
    PyObject *numpy, *array;
    (void)unused;

    if (bufferext_producer_check_open(BufferExtProducer_CAST(op)) < 0) {
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

    if (!self->head.open) {
        Py_RETURN_NONE;
    }
    if (bufferext_producer_check_not_exported(&self->head, "close") < 0) {
        return NULL;
    }
    cpubuffer_free_block(self->allocation, self->mapped);
    self->allocation = NULL;
    self->mapped = 0;
    self->data = NULL;
    self->head.layout.buf = NULL;
    self->head.open = 0;
    Py_RETURN_NONE;
}

static PyObject *
cpubuffer_resize(PyObject *op, PyObject *shape)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    bufferext_layout layout;
    Py_ssize_t old_len = self->head.layout.len;
    void *allocation;
    size_t mapped;
    char *data;

    if (bufferext_producer_check_open(&self->head) < 0 ||
        bufferext_producer_check_not_exported(&self->head, "resize") < 0 ||
        bufferext_layout_parse("CPUBuffer.resize", shape,
                               self->head.layout.itemsize, &layout) < 0 ||
        (allocation = cpubuffer_calloc(layout.nbytes, &data, &mapped)) ==
            NULL) {
        return NULL;
    }
    if (bufferext_producer_set_layout(&self->head, &layout) < 0) {
        cpubuffer_free_block(allocation, mapped);
        PyErr_Format(PyExc_MemoryError,
                     "CPUBuffer: cannot allocate %zd bytes", layout.nbytes);
        return NULL;
    }
    memcpy(data, self->data,
           (size_t)(old_len < layout.nbytes ? old_len : layout.nbytes));
    cpubuffer_free_block(self->allocation, self->mapped);
    cpubuffer_install(self, allocation, data, mapped);
    Py_RETURN_NONE;
}

static PyObject *
cpubuffer_dlpack(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    if (bufferext_producer_check_open(BufferExtProducer_CAST(op)) < 0) {
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
    {"__enter__", bufferext_producer_enter, METH_NOARGS, NULL},
    {"__exit__", bufferext_producer_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

/* ---- attributes ------------------------------------------------------- */

static PyObject *
get_ptr(PyObject *op, void *closure)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    (void)closure;
    if (bufferext_producer_check_open(&self->head) < 0) {
        return NULL;
    }
    return PyLong_FromVoidPtr(self->data);
}

static PyObject *
get_array_interface(PyObject *op, void *closure)
{
    CPUBufferObject *self = CPUBuffer_CAST(op);
    PyObject *shape;
    (void)closure;

    if (bufferext_producer_check_open(&self->head) < 0 ||
        (shape = bufferext_producer_get_shape(op, NULL)) == NULL) {
        return NULL;
    }
    /* NumPy's array interface v3; strides None: C-contiguous. */
    return Py_BuildValue("{s:N,s:O,s:[(s,O)],s:(NO),s:O,s:i}",
                         "shape", shape, "typestr", self->head.dt.typestr,
                         "descr", "", self->head.dt.typestr,
                         "data", PyLong_FromVoidPtr(self->data),
                         self->head.layout.readonly ? Py_True : Py_False,
                         "strides", Py_None, "version", 3);
}

static PyGetSetDef cpubuffer_getset[] = {
    BUFFEREXT_PRODUCER_GETSET
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
    return bufferext_add_type(module, &cpubuffer_spec,
                              CPUBUFFER_SUPPORTED_FLAGS,
                              &bufferext_get_state(module)->CPUBuffer_Type);
}
