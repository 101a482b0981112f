/* example.c -- the C examples of the bufferext documentation, as one
 * extension module that is compiled and run by docs/examples/check.sh.
 * The guide and README show fragments of this file (between the
 * "[name]" / "[name end]" markers), so what they show is what was tested.
 *
 *   HostArray   a CPU producer: one export function serves its plain
 *               getbuffer and its typed entry; it declares its supported
 *               flags and answers a PyBUF_DEVICE request with CPU memory.
 *   DemoDevice  a producer that announces its memory as living on the
 *               device "bufferext_example.demo" (a documentation double:
 *               the bytes are really host memory), to show that device
 *               memory never reaches a CPU-only consumer.
 *   describe()  a consumer: where is the memory of any buffer exporter?
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <bufferext.h>

/* [producer] */
typedef struct {
    PyObject_HEAD
    char data[64];
    Py_ssize_t exports;
} HostArray;

/* The one function of both doors: `ext` is NULL for a plain request (the
 * type's bf_getbuffer: memoryview, bytes(), numpy...) and the consumer's
 * Py_buffer_extended for an extended one (the typed entry). */
static int
hostarray_export(PyObject *self, Py_buffer *view, int flags,
                 Py_buffer_extended *ext)
{
    HostArray *a = (HostArray *)self;

    /* CPU memory answers a PyBUF_DEVICE request explicitly (flags gets
     * PyBUF_DEVICE, device stays NULL).  Without it, or through the plain
     * getbuffer, it does nothing, so plain consumers are served as
     * before; it never fails.  With a device name instead of NULL it
     * refuses a plain request (BufferError) before anything is counted:
     * keep the check. */
    if (BufferExt_SetDevice(ext, self, flags, NULL, NULL) < 0) {
        return -1;
    }
    /* Fill the PEP 3118 fields (BufferError for PyBUF_WRITABLE on
     * read-only memory); the reference to self is stored last. */
    if (PyBuffer_FillInfo(view, NULL, a->data, sizeof(a->data), 0,
                          flags) < 0) {
        return -1;
    }
    a->exports++;
    view->obj = Py_NewRef(self);
    return 0;
}

/* hostarray_getbuffer (the slot) and hostarray_getbuffer_ex (the entry) */
BUFFEREXT_DEFINE_GETBUFFER(hostarray_getbuffer, hostarray_export);

static void
hostarray_releasebuffer(PyObject *self, Py_buffer *view)
{
    (void)view;
    ((HostArray *)self)->exports--;
}
/* [producer end] */

/* [device producer] */
#define DEMO_DEVICE "bufferext_example.demo"

typedef struct {
    uint32_t version;            /* the device spec's own version field */
    int32_t ordinal;
} DemoDeviceInfo;

typedef struct {
    PyObject_HEAD
    char *device_ptr;            /* stands for memory on the device */
    DemoDeviceInfo info;
} DemoDevice;

static int
demodevice_export(PyObject *self, Py_buffer *view, int flags,
                  Py_buffer_extended *ext)
{
    DemoDevice *d = (DemoDevice *)self;

    view->obj = NULL;
    /* First refuse a consumer that did not request PyBUF_DEVICE through
     * the typed entry (this raises BufferError), so device memory never
     * reaches CPU-only code. */
    if (BufferExt_SetDevice(ext, self, flags, DEMO_DEVICE, &d->info) < 0 ||
        PyBuffer_FillInfo(view, NULL, d->device_ptr, 16, 1, flags) < 0) {
        return -1;
    }
    view->obj = Py_NewRef(self);
    return 0;
}

BUFFEREXT_DEFINE_GETBUFFER(demodevice_getbuffer, demodevice_export);
/* [device producer end] */

/* [consumer] */
/* describe(obj) -> (device name or "cpu", nbytes) */
static PyObject *
describe(PyObject *module, PyObject *obj)
{
    Py_buffer_extended ext;
    PyObject *result;
    (void)module;

    /* Optional: ask first.  Legacy exporters (bytes, numpy...) ignore
     * PyBUF_DEVICE, which is fine: they answer with CPU memory. */
    if (!PyObject_CheckBufferSupports(obj, PyBUF_ND | PyBUF_FORMAT)) {
        PyErr_Format(PyExc_TypeError, "%.200s: need an N-d typed buffer",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    if (BufferExt_GetBuffer(obj, &ext, PyBUF_RECORDS_RO | PyBUF_DEVICE) < 0) {
        return NULL;
    }
    if (!BufferExt_IsDevice(&ext)) {
        /* CPU memory: ext.view is an ordinary Py_buffer. */
        result = Py_BuildValue("(sn)", "cpu", ext.view.len);
    }
    else if (strcmp(ext.device, BUFFEREXT_DEVICE_CUDA) == 0) {
        const BufferExt_CUDADeviceInfo *info =
            (const BufferExt_CUDADeviceInfo *)ext.device_info;
        if (info->version >> 16 != BUFFEREXT_CUDA_INFO_MAJOR) {
            PyErr_SetString(PyExc_BufferError, "unknown CUDA info version");
            BufferExt_Release(&ext);
            return NULL;
        }
        /* wait on info->event (if not NULL) before touching the memory */
        result = Py_BuildValue("(sn)", ext.device, ext.view.len);
    }
    else {
        /* a device this consumer does not know: never dereference buf */
        result = Py_BuildValue("(sn)", ext.device, ext.view.len);
    }
    BufferExt_Release(&ext);
    return result;
}
/* [consumer end] */

/* ---- module boilerplate ----------------------------------------------- */

static PyObject *
demodevice_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    DemoDevice *d;

    if (PyTuple_GET_SIZE(args) != 0 ||
        (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "DemoDevice() takes no arguments");
        return NULL;
    }
    d = (DemoDevice *)type->tp_alloc(type, 0);
    if (d == NULL) {
        return NULL;
    }
    d->device_ptr = (char *)PyMem_Calloc(1, 16);
    if (d->device_ptr == NULL) {
        Py_DECREF(d);
        return PyErr_NoMemory();
    }
    d->info.version = 1u << 16;
    d->info.ordinal = 0;
    return (PyObject *)d;
}

static void
demodevice_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyMem_Free(((DemoDevice *)self)->device_ptr);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyObject *
hostarray_get_exports(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(((HostArray *)self)->exports);
}

static PyGetSetDef hostarray_getset[] = {
    {"exports", hostarray_get_exports, NULL, "live exports", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot hostarray_slots[] = {
    {Py_tp_getset, (void *)hostarray_getset},
    {Py_bf_getbuffer, (void *)hostarray_getbuffer},
    {Py_bf_releasebuffer, (void *)hostarray_releasebuffer},
    {0, NULL},
};

static PyType_Spec hostarray_spec = {
    "bufferext_example.HostArray", sizeof(HostArray), 0,
    Py_TPFLAGS_DEFAULT, hostarray_slots,
};

static PyType_Slot demodevice_slots[] = {
    {Py_tp_new, (void *)demodevice_new},
    {Py_tp_dealloc, (void *)demodevice_dealloc},
    {Py_bf_getbuffer, (void *)demodevice_getbuffer},
    {0, NULL},
};

static PyType_Spec demodevice_spec = {
    "bufferext_example.DemoDevice", sizeof(DemoDevice), 0,
    Py_TPFLAGS_DEFAULT, demodevice_slots,
};

static PyMethodDef example_methods[] = {
    {"describe", describe, METH_O,
     "describe(obj) -> (device name or 'cpu', nbytes)"},
    {NULL, NULL, 0, NULL},
};

/* [declare] */
static int
add_type(PyObject *module, PyType_Spec *spec, int supported_flags,
         BufferExt_GetBufferExProc getbuffer_ex)
{
    PyObject *type = PyType_FromSpec(spec);

    if (type == NULL) {
        return -1;
    }
    /* The backported bf_supported_flags and the typed entry that serves
     * PyBUF_DEVICE: once, right after creation. */
    if (BufferExt_SetExtendedGetBuffer((PyTypeObject *)type,
                                       supported_flags, getbuffer_ex) < 0 ||
        PyModule_AddObject(module, strrchr(spec->name, '.') + 1,
                           type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

static int
example_exec(PyObject *module)
{
    /* HostArray: 1-D bytes, every legacy flag, and PyBUF_DEVICE. */
    if (add_type(module, &hostarray_spec,
                 BUFFEREXT_LEGACY_FLAGS | PyBUF_DEVICE,
                 hostarray_getbuffer_ex) < 0) {
        return -1;
    }
    /* DemoDevice: read-only bytes on a device, requested with DEVICE. */
    return add_type(module, &demodevice_spec,
                    (BUFFEREXT_LEGACY_FLAGS & ~PyBUF_WRITABLE) |
                        PyBUF_DEVICE,
                    demodevice_getbuffer_ex);
}
/* [declare end] */

static PyModuleDef_Slot example_slots[] = {
    {Py_mod_exec, (void *)example_exec},
#if PY_VERSION_HEX >= 0x030D0000
    /* nothing here needs the GIL: a free-threaded CPython keeps it off */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef example_module = {
    PyModuleDef_HEAD_INIT, "bufferext_example",
    "Examples of the bufferext documentation.", 0, example_methods,
    example_slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit_bufferext_example(void)
{
    return PyModuleDef_Init(&example_module);
}
