/* abimix.c -- one exporter type and one consumer, written once and built
 * against either release of bufferext.h: the header of ABI 3 (the last
 * with the per-thread mark, kept as it was released in tests/abi3/) and the
 * installed one.  tests/test_abi_mixing.py loads both builds into one
 * process and makes each consume the other's exports.
 *
 * Mix(device=False): 16 bytes of host memory; with device=True the same
 * bytes labelled "bufferext.cuda" (a test double, as in testcapi.c), which
 * an exporter may hand only to a PyBUF_DEVICE request that reaches it with
 * an extended view.  get(obj, flags) -> (device or None, ext.flags) through
 * BufferExt_GetBuffer of this build.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <bufferext.h>

#define STR(x) #x
#define XSTR(x) STR(x)

typedef struct {
    PyObject_HEAD
    char data[16];
    int device;
    BufferExt_CUDADeviceInfo info;
    Py_ssize_t exports;
} MixObject;

/* The PEP 3118 part of every export, once the device is settled. */
static int
mix_fill(PyObject *op, Py_buffer *view, int flags)
{
    MixObject *self = (MixObject *)op;

    if (PyBuffer_FillInfo(view, NULL, self->data, sizeof(self->data), 1,
                          flags) < 0) {
        return -1;
    }
    self->exports++;
    view->obj = Py_NewRef(op);
    return 0;
}

#if BUFFEREXT_ABI_VERSION >= 4
static int
mix_export(PyObject *op, Py_buffer *view, int flags, Py_buffer_extended *ext)
{
    MixObject *self = (MixObject *)op;
    const char *device = self->device ? BUFFEREXT_DEVICE_CUDA : NULL;

    view->obj = NULL;
    if (BufferExt_SetDevice(ext, op, flags, device,
                            device ? &self->info : NULL) < 0) {
        return -1;
    }
    return mix_fill(op, view, flags);
}

BUFFEREXT_DEFINE_GETBUFFER(mix_getbuffer, mix_export);
#else
static int
mix_getbuffer(PyObject *op, Py_buffer *view, int flags)
{
    MixObject *self = (MixObject *)op;
    const char *device = self->device ? BUFFEREXT_DEVICE_CUDA : NULL;

    view->obj = NULL;
    if (BufferExt_SetDevice(op, view, flags, device,
                            device ? &self->info : NULL) < 0) {
        return -1;
    }
    return mix_fill(op, view, flags);
}
#endif

static void
mix_releasebuffer(PyObject *op, Py_buffer *view)
{
    (void)view;
    ((MixObject *)op)->exports--;
}

static PyObject *
mix_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static const char *kwlist[] = {"device", NULL};
    MixObject *self;
    int device = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:Mix",
                                     (char **)kwlist, &device)) {
        return NULL;
    }
    self = (MixObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    memset(self->data, 7, sizeof(self->data));
    self->device = device;
    memset(&self->info, 0, sizeof(self->info));
    self->info.version = BUFFEREXT_CUDA_INFO_VERSION;
    self->exports = 0;
    return (PyObject *)self;
}

static void
mix_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);

    type->tp_free(op);
    Py_DECREF(type);
}

static PyObject *
mix_get_exports(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(((MixObject *)op)->exports);
}

static PyGetSetDef mix_getset[] = {
    {(char *)"exports", mix_get_exports, NULL,
     (char *)"number of live exports", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot mix_slots[] = {
    {Py_tp_new, (void *)mix_new},
    {Py_tp_dealloc, (void *)mix_dealloc},
    {Py_tp_getset, (void *)mix_getset},
    {Py_bf_getbuffer, (void *)mix_getbuffer},
    {Py_bf_releasebuffer, (void *)mix_releasebuffer},
    {0, NULL},
};

static PyType_Spec mix_spec = {
    XSTR(MODNAME) ".Mix", sizeof(MixObject), 0, Py_TPFLAGS_DEFAULT, mix_slots,
};

/* get(obj, flags) -> (device or None, flags the exporter answered) */
static PyObject *
mix_get(PyObject *module, PyObject *args)
{
    Py_buffer_extended ext;
    PyObject *obj, *result;
    int flags;

    (void)module;
    if (!PyArg_ParseTuple(args, "Oi:get", &obj, &flags)) {
        return NULL;
    }
    if (BufferExt_GetBuffer(obj, &ext, flags) < 0) {
        return NULL;
    }
    result = Py_BuildValue("(si)", BufferExt_IsDevice(&ext) ? ext.device
                                                             : NULL,
                           ext.flags);
    BufferExt_Release(&ext);
    return result;
}

static PyMethodDef mix_methods[] = {
    {"get", mix_get, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static int
mix_exec(PyObject *module)
{
    PyObject *type = PyType_FromSpec(&mix_spec);

    if (type == NULL ||
#if BUFFEREXT_ABI_VERSION >= 4
        BufferExt_SetExtendedGetBuffer((PyTypeObject *)type,
                                       BUFFEREXT_LEGACY_FLAGS | PyBUF_DEVICE,
                                       mix_getbuffer_ex) < 0 ||
#else
        BufferExt_SetSupportedFlags((PyTypeObject *)type,
                                    BUFFEREXT_LEGACY_FLAGS |
                                        PyBUF_DEVICE) < 0 ||
#endif
        PyModule_AddObject(module, "Mix", type) < 0) {
        Py_XDECREF(type);
        return -1;
    }
    return PyModule_AddIntConstant(module, "ABI_VERSION",
                                   BUFFEREXT_ABI_VERSION);
}

static PyModuleDef_Slot mix_module_slots[] = {
    {Py_mod_exec, (void *)mix_exec},
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef mix_module = {
    PyModuleDef_HEAD_INIT, XSTR(MODNAME), NULL, 0, mix_methods,
    mix_module_slots, NULL, NULL, NULL,
};

#define INIT2(name) PyInit_##name
#define INIT(name) INIT2(name)

PyMODINIT_FUNC
INIT(MODNAME)(void)
{
    return PyModuleDef_Init(&mix_module);
}
