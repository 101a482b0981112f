/* vebuffer.c -- VEBuffer: memory on an NEC SX-Aurora Vector Engine,
 * allocated as VEO heterogeneous memory (HMEM) on its node's VEO process
 * (ve_driver.c: the library, loaded at run time, and the nodes).
 *
 * Exports: the extended buffer protocol under PyBUF_DEVICE only (device
 * "bufferext.ve", device_info a BufferExt_VEDeviceInfo held in the object,
 * so an export allocates nothing) and the VE Array Interface v1.  DLPack
 * has no VE device type, so __dlpack__ refuses (see docs/ve.rst). */
#include "dlpack.h"
#include "producer.h"
#include "state.h"
#include "ve_driver.h"

/* ---- the object -------------------------------------------------------- */

/* The request flags VEBuffer honours: every legacy flag and PyBUF_DEVICE. */
#define VEBUFFER_SUPPORTED_FLAGS (BUFFEREXT_LEGACY_FLAGS | PyBUF_DEVICE)

typedef struct {
    bufferext_producer head;    /* open: node != NULL */
    bufferext_ve_node *node;    /* NULL once closed */
    BufferExt_VEDeviceInfo info;          /* handed out by every export */
} VEBufferObject;

#define VEBuffer_CAST(op) ((VEBufferObject *)(op))

static void vebuffer_free_memory(PyObject *op);

static const bufferext_producer_kind vebuffer_kind = {
    "VEBuffer", "release the views first", vebuffer_free_memory,
    bufferext_producer_close,
};

static int
check_open(VEBufferObject *self)
{
    return bufferext_producer_check_open(&self->head);
}

/* Free the HMEM and leave the node; the object reads as closed after. */
static void
vebuffer_free_memory(PyObject *op)
{
    VEBufferObject *self = VEBuffer_CAST(op);

    if (self->node == NULL) {
        return;
    }
    if (self->head.layout.buf != NULL) {        /* NULL when zero-size */
        bufferext_ve_free(self->head.layout.buf);
        self->head.layout.buf = NULL;
    }
    self->head.open = 0;
    bufferext_ve_node_release(self->node);
    self->node = NULL;
}

/* Join node `number` and allocate the HMEM.  ValueError for a bad node,
 * DeviceUnavailableError without VEO, MemoryError when allocation fails. */
static int
vebuffer_allocate(bufferext_state *st, VEBufferObject *self, int number)
{
    bufferext_ve_node *node;
    void *hmem = NULL;

    node = bufferext_ve_node_acquire(st, number);
    if (node == NULL) {
        return -1;
    }
    if (self->head.layout.len > 0 &&
        bufferext_ve_alloc(node, (size_t)self->head.layout.len, &hmem) < 0) {
        bufferext_ve_node_release(node);
        PyErr_Format(PyExc_MemoryError,
                     "VEBuffer: cannot allocate %zd bytes of HMEM on VE "
                     "node %d", self->head.layout.len, number);
        return -1;
    }
    self->head.layout.buf = hmem;
    self->node = node;
    self->head.open = 1;
    self->info.version = BUFFEREXT_VE_INFO_VERSION;
    self->info.node = number;
    self->info.proc = node->proc;
    self->info.context = node->context;
    return 0;
}

/* `node=`: an int (not a bool, as CUDABuffer's device), 0 to
 * BUFFEREXT_VE_MAX_NODES - 1.  Runs no Python code.  0, or -1 with
 * TypeError or ValueError naming the value. */
static int
parse_node(PyObject *obj, int *number)
{
    long value;

    if (!PyLong_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "VEBuffer: node must be an int (a VE "
                     "node number), not '%.200s'", Py_TYPE(obj)->tp_name);
        return -1;
    }
    value = PyLong_AsLong(obj);
    if (value == -1 && PyErr_Occurred()) {
        PyErr_Clear();          /* past a long: out of range, as below */
    }
    if (value < 0 || value >= BUFFEREXT_VE_MAX_NODES) {
        PyErr_Format(PyExc_ValueError, "VEBuffer: node=%R is out of range "
                     "(0 to %d)", obj, BUFFEREXT_VE_MAX_NODES - 1);
        return -1;
    }
    *number = (int)value;
    return 0;
}

static PyObject *
vebuffer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"shape", "dtype", "node", "readonly", NULL};
    PyObject *shape, *dtype = NULL, *node = NULL;
    int number = 0, readonly = 0;
    bufferext_producer_spec spec;
    bufferext_state *st;
    VEBufferObject *self;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O$Op:VEBuffer",
                                     keywords, &shape, &dtype, &node,
                                     &readonly) ||
        (node != NULL && parse_node(node, &number) < 0)) {
        return NULL;
    }
    st = bufferext_state_from_type(type);
    /* the dtype resolver and __index__ run first, on locals */
    if (st == NULL ||
        bufferext_producer_parse("VEBuffer", st, shape, dtype, &spec) < 0) {
        return NULL;
    }
    self = (VEBufferObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        bufferext_dtype_clear(&spec.dt);
        return NULL;
    }
    if (bufferext_producer_setup(&self->head, &vebuffer_kind, &spec,
                                 readonly) < 0 ||
        vebuffer_allocate(st, self, number) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* ---- the buffer protocol ---------------------------------------------- */

static int
vebuffer_export(PyObject *op, Py_buffer *view, int flags,
                Py_buffer_extended *ext)
{
    /* VE memory: only consumers that asked for PyBUF_DEVICE through the
     * typed entry get it. */
    return bufferext_producer_export(op, view, flags, ext,
                                     BUFFEREXT_DEVICE_VE,
                                     &VEBuffer_CAST(op)->info);
}

BUFFEREXT_DEFINE_GETBUFFER(vebuffer_getbuffer, vebuffer_export);

/* ---- copies ----------------------------------------------------------- */

static PyObject *
vebuffer_copy_from_host(PyObject *op, PyObject *source)
{
    const char *who = "VEBuffer.copy_from_host";
    VEBufferObject *self = VEBuffer_CAST(op);
    Py_buffer_extended ext;
    void *staged;
    const void *src;
    int rc = -1;

    if (bufferext_producer_get_source(&self->head, who, source, &ext) < 0) {
        return NULL;
    }
    src = bufferext_contiguous_bytes(&ext.view, &staged);
    if (src != NULL) {
        rc = bufferext_ve_copy(bufferext_state_from_type(Py_TYPE(op)), who,
                               self->head.layout.buf, src, ext.view.len);
    }
    PyMem_RawFree(staged);
    bufferext_release_ext_raised(&ext);
    bufferext_producer_unpin(&self->head);
    return rc < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *
vebuffer_to_host(PyObject *op, PyObject *unused)
{
    VEBufferObject *self = VEBuffer_CAST(op);
    PyObject *array;
    Py_buffer view;
    int rc;
    (void)unused;

    array = bufferext_producer_host_array(&self->head, &view);
    if (array == NULL) {
        return NULL;
    }
    rc = bufferext_producer_pin(&self->head, "VEBuffer.to_host", 0);
    if (rc == 0) {
        rc = bufferext_ve_copy(bufferext_state_from_type(Py_TYPE(op)),
                               "VEBuffer.to_host", view.buf,
                               self->head.layout.buf, view.len);
        bufferext_producer_unpin(&self->head);
    }
    PyBuffer_Release(&view);
    if (rc < 0) {
        Py_CLEAR(array);
    }
    return array;
}

/* Copy `other` into `self` through host memory (different nodes). */
static int
copy_staged(bufferext_state *st, VEBufferObject *self, VEBufferObject *other)
{
    void *staging = PyMem_RawMalloc((size_t)self->head.layout.len);
    int rc;

    if (staging == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    rc = bufferext_ve_copy(st, "VEBuffer.copy_from", staging,
                           other->head.layout.buf, self->head.layout.len);
    if (rc == 0) {
        rc = bufferext_ve_copy(st, "VEBuffer.copy_from",
                               self->head.layout.buf, staging,
                               self->head.layout.len);
    }
    PyMem_RawFree(staging);
    return rc;
}

static PyObject *
vebuffer_copy_from(PyObject *op, PyObject *arg)
{
    VEBufferObject *self = VEBuffer_CAST(op), *other;
    bufferext_state *st = bufferext_state_from_type(Py_TYPE(op));
    int same, rc;

    if (st == NULL) {
        return NULL;
    }
    if (!PyObject_TypeCheck(arg, st->VEBuffer_Type)) {
        PyErr_Format(PyExc_TypeError,
                     "VEBuffer.copy_from: other must be a VEBuffer, not "
                     "'%.200s' (use copy_from_host for host memory)",
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    other = VEBuffer_CAST(arg);
    /* the element types never change: compared by their canonical
     * formats, not by numpy's dtypes (without ml_dtypes every float8 kind
     * is the same 'V1') */
    same = bufferext_producer_same_type(&other->head, &self->head);
    if (bufferext_producer_pin(&self->head, "VEBuffer.copy_from", 1) < 0) {
        return NULL;
    }
    rc = bufferext_producer_pin(&other->head, "VEBuffer.copy_from", 0);
    if (rc == 0) {
        if (!same || other->head.layout.len != self->head.layout.len) {
            PyErr_Format(PyExc_ValueError,
                         "VEBuffer.copy_from: other holds %zd bytes of %R "
                         "(format '%s'), this buffer %zd bytes of %R (format "
                         "'%s')", other->head.layout.len, other->head.dt.dtype,
                         other->head.dt.format, self->head.layout.len,
                         self->head.dt.dtype, self->head.dt.format);
            rc = -1;
        }
        else if (other != self) {
            rc = self->node == other->node
                     ? bufferext_ve_copy(st, "VEBuffer.copy_from",
                                         self->head.layout.buf,
                                         other->head.layout.buf,
                                         self->head.layout.len)
                     : copy_staged(st, self, other);
        }
        bufferext_producer_unpin(&other->head);
    }
    bufferext_producer_unpin(&self->head);
    return rc < 0 ? NULL : Py_NewRef(Py_None);
}

/* DLPack enumerates no device type for VE memory; see docs/ve.rst. */
static PyObject *
refuse_dlpack(PyObject *op)
{
    if (check_open(VEBuffer_CAST(op)) < 0) {
        return NULL;
    }
    PyErr_SetString(PyExc_BufferError,
                    "VEBuffer: DLPack has no device type for NEC SX-Aurora "
                    "VE memory, so it cannot be exported as DLPack; use "
                    "__ve_array_interface__ or the extended buffer "
                    "protocol (PyBUF_DEVICE, device 'bufferext.ve')");
    return NULL;
}

static PyObject *
vebuffer_dlpack(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
                PyObject *kwnames)
{
    (void)args;
    (void)nargs;
    (void)kwnames;
    return refuse_dlpack(op);
}

static PyObject *
vebuffer_dlpack_device(PyObject *op, PyObject *unused)
{
    (void)unused;
    return refuse_dlpack(op);
}

static PyMethodDef vebuffer_methods[] = {
    {"copy_from_host", vebuffer_copy_from_host, METH_O,
     "copy_from_host($self, source, /)\n--\n\n"
     "Copy a host buffer of the same size into VE memory (raw bytes, or\n"
     "items of the same dtype in any layout)."},
    {"to_host", vebuffer_to_host, METH_NOARGS,
     "to_host($self, /)\n--\n\nA numpy array holding a copy of the contents."},
    {"copy_from", vebuffer_copy_from, METH_O,
     "copy_from($self, other, /)\n--\n\n"
     "Copy another VEBuffer of the same dtype and size into this one\n"
     "(directly on one node, through host memory between nodes)."},
    {"close", bufferext_producer_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "Free the HMEM now.  BufferError while exported; closing twice is\n"
     "harmless."},
    {"__dlpack__", (PyCFunction)(void (*)(void))vebuffer_dlpack,
     METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, "
     "copy=None)\n--\n\n"
     "Always raises BufferError: DLPack has no VE device type."},
    {"__dlpack_device__", vebuffer_dlpack_device, METH_NOARGS,
     "__dlpack_device__($self, /)\n--\n\n"
     "Always raises BufferError: DLPack has no VE device type."},
    {"__array__", (PyCFunction)(void (*)(void))bufferext_refuse_array,
     METH_VARARGS | METH_KEYWORDS,
     "__array__($self, dtype=None, copy=None)\n--\n\n"
     "Refuses: device memory is not CPU memory (use to_host())."},
    {"__enter__", bufferext_producer_enter, METH_NOARGS,
     BUFFEREXT_PRODUCER_ENTER_DOC},
    {"__exit__", bufferext_producer_exit, METH_VARARGS,
     BUFFEREXT_PRODUCER_EXIT_DOC},
    {NULL, NULL, 0, NULL},
};

/* ---- attributes ------------------------------------------------------- */

#define VE_GETTER(name, expr)                                     \
    static PyObject *get_##name(PyObject *op, void *closure)      \
    {                                                             \
        VEBufferObject *self = VEBuffer_CAST(op);                 \
        (void)closure;                                            \
        return expr;                                              \
    }

VE_GETTER(node, PyLong_FromLong(self->info.node))

/* The state a getter reads (see bufferext_producer_read); ValueError when
 * the buffer is closed.  0 or -1. */
static int
ve_read(VEBufferObject *self, bufferext_producer_snapshot *now)
{
    bufferext_producer_read(&self->head, now);
    if (!now->open) {
        PyErr_SetString(PyExc_ValueError, "operation on a closed VEBuffer");
        return -1;
    }
    return 0;
}

static PyObject *
get_ptr(PyObject *op, void *closure)
{
    bufferext_producer_snapshot now;
    (void)closure;

    return ve_read(VEBuffer_CAST(op), &now) < 0
               ? NULL : PyLong_FromVoidPtr(now.buf);
}

/* The VE Array Interface, version 1 (see docs/ve.rst). */
static PyObject *
get_ve_array_interface(PyObject *op, void *closure)
{
    VEBufferObject *self = VEBuffer_CAST(op);
    bufferext_producer_snapshot now;
    PyObject *shape;
    (void)closure;

    if (ve_read(self, &now) < 0 ||
        (shape = bufferext_tuple_from_ssize(now.ndim, now.shape)) == NULL) {
        return NULL;
    }
    /* data: the HMEM address, 0 for zero-size; strides None: C order. */
    return Py_BuildValue("{s:N,s:O,s:[(s,O)],s:(NO),s:i,s:O,s:N}",
                         "shape", shape, "typestr", self->head.dt.typestr,
                         "descr", "", self->head.dt.typestr,
                         "data", PyLong_FromVoidPtr(now.buf),
                         self->head.layout.readonly ? Py_True : Py_False,
                         "version", 1, "strides", Py_None,
                         "veo_ctxt", PyLong_FromVoidPtr(self->info.context));
}

#define VE_ATTR(name, doc) {#name, get_##name, NULL, doc, NULL}

static PyGetSetDef vebuffer_getset[] = {
    BUFFEREXT_PRODUCER_GETSET
    VE_ATTR(node, "VE node number."),
    VE_ATTR(ptr, "HMEM address of the first byte (0 when zero-size)."),
    {"__ve_array_interface__", get_ve_array_interface, NULL,
     "VE Array Interface, version 1.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *
vebuffer_repr(PyObject *op)
{
    char extra[32];

    PyOS_snprintf(extra, sizeof(extra), ", node=%d",
                  VEBuffer_CAST(op)->info.node);
    return bufferext_producer_repr(op, extra, ", closed", "");
}

static PyType_Slot vebuffer_slots[] = {
    {Py_tp_new, vebuffer_new},
    {Py_tp_dealloc, bufferext_producer_dealloc},
    {Py_tp_traverse, bufferext_producer_traverse},
    {Py_tp_repr, vebuffer_repr},
    {Py_tp_methods, vebuffer_methods},
    {Py_tp_getset, vebuffer_getset},
    {Py_tp_members, bufferext_producer_members},
    {Py_bf_getbuffer, vebuffer_getbuffer},
    {Py_bf_releasebuffer, bufferext_producer_releasebuffer},
    {Py_sq_length, bufferext_producer_length},
    {Py_nb_bool, bufferext_producer_bool},
    {Py_tp_doc,
     "VEBuffer(shape, dtype='float64', *, node=0, readonly=False)\n--\n\n"
     "Memory on NEC SX-Aurora VE node `node`, allocated as VEO HMEM\n"
     "(contents undefined until written), exported through the extended\n"
     "buffer protocol (PyBUF_DEVICE only) and the VE Array Interface v1."},
    {0, NULL},
};

static PyType_Spec vebuffer_spec = {
    "bufferext.VEBuffer",
    sizeof(VEBufferObject),
    0,
    BUFFEREXT_TYPE_FLAGS | Py_TPFLAGS_BASETYPE,
    vebuffer_slots,
};

/* ---- init --------------------------------------------------------------- */

int
bufferext_init_ve(PyObject *module)
{
    bufferext_state *st = bufferext_get_state(module);

    if (bufferext_ve_register_atexit() < 0) {
        return -1;
    }
    return bufferext_add_type(module, &vebuffer_spec,
                              VEBUFFER_SUPPORTED_FLAGS,
                              vebuffer_getbuffer_ex, BUFFEREXT_PRODUCER_LAYOUT,
                              &st->VEBuffer_Type);
}
