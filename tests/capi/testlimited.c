/* testlimited.c -- a test extension of bufferext.h built with
 * Py_LIMITED_API=0x030B0000 (the stable ABI of CPython 3.11, abi3) and
 * nothing but <Python.h> and <bufferext.h>.  tests/test_limited_api.py
 * builds it (C99, C11, C++11; -Wall -Wextra -Werror), checks it with
 * abi3audit and makes it interoperate with the full-API producers.
 *
 * Consumer side: check_supports, supported_flags, get (acquire, describe,
 * release), get_release (n pairs), cache_stats.
 * Producer side: LimitedExporter(data, device=None): a mutable heap type
 * declaring FORMAT|ND|STRIDES|DEVICE, exporting `data` (bytes) read-only;
 * with `device`, labels the memory as on that device (a test double: host
 * memory) with a CUDA device_info.  Counters: exports, device_requests.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <bufferext.h>

#ifndef MODNAME
#  define MODNAME testlimited
#endif
#define TL_STR2(x) #x
#define TL_STR(x) TL_STR2(x)
#define TL_CAT2(a, b) a##b
#define TL_CAT(a, b) TL_CAT2(a, b)

#define DECLARED (PyBUF_FORMAT | PyBUF_ND | PyBUF_STRIDES | PyBUF_DEVICE)

/* ---- consumer side ------------------------------------------------------ */

static PyObject *
check_supports(PyObject *module, PyObject *args)
{
    PyObject *obj;
    int flags;

    (void)module;
    if (!PyArg_ParseTuple(args, "Oi", &obj, &flags)) {
        return NULL;
    }
    return PyLong_FromLong(PyObject_CheckBufferSupports(obj, flags));
}

static PyObject *
supported_flags(PyObject *module, PyObject *obj)
{
    int mask = BufferExt_SupportedFlags(obj);

    (void)module;
    return mask < 0 ? NULL : PyLong_FromLong(mask);
}

/* get(obj, flags) -> (flags, device or None, len, readonly, bytes or None,
 * device ordinal or None) */
static PyObject *
get(PyObject *module, PyObject *args)
{
    PyObject *obj, *data, *ordinal = Py_None, *result;
    Py_buffer_extended ext;
    int flags;

    (void)module;
    if (!PyArg_ParseTuple(args, "Oi", &obj, &flags)) {
        return NULL;
    }
    if (BufferExt_GetBuffer(obj, &ext, flags) < 0) {
        return NULL;
    }
    if (BufferExt_IsDevice(&ext)) {
        data = Py_None;
        Py_INCREF(data);
        if (strcmp(ext.device, BUFFEREXT_DEVICE_CUDA) == 0 &&
            ext.device_info != NULL) {
            const BufferExt_CUDADeviceInfo *info =
                (const BufferExt_CUDADeviceInfo *)ext.device_info;
            ordinal = PyLong_FromLong(info->device);
        }
    }
    else {
        data = PyBytes_FromStringAndSize((const char *)ext.view.buf,
                                         ext.view.len);
    }
    result = data == NULL || ordinal == NULL ? NULL : Py_BuildValue(
        "izniOO", ext.flags, ext.device, ext.view.len, ext.view.readonly,
        data, ordinal);
    Py_XDECREF(data);
    if (ordinal != Py_None) {
        Py_XDECREF(ordinal);
    }
    BufferExt_Release(&ext);
    if (ext.view.obj != NULL || ext.device != NULL || ext.flags != 0) {
        Py_XDECREF(result);
        PyErr_SetString(PyExc_AssertionError, "release left state behind");
        return NULL;
    }
    return result;
}

static PyObject *
get_release(PyObject *module, PyObject *args)
{
    PyObject *obj;
    Py_buffer_extended ext;
    Py_ssize_t i, n;
    int flags;

    (void)module;
    if (!PyArg_ParseTuple(args, "Oin", &obj, &flags, &n)) {
        return NULL;
    }
    for (i = 0; i < n; i++) {
        if (BufferExt_GetBuffer(obj, &ext, flags) < 0) {
            return NULL;
        }
        BufferExt_Release(&ext);
    }
    Py_RETURN_NONE;
}

static PyObject *
cache_stats(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return Py_BuildValue("nn", BufferExtAccel_CacheStats()[0],
                         BufferExtAccel_CacheStats()[1]);
}

/* ---- producer side ------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *data;                 /* bytes */
    PyObject *device;               /* str or NULL */
    Py_ssize_t shape[1], strides[1];
    Py_ssize_t exports, device_requests;
    BufferExt_CUDADeviceInfo info;
} LimitedExporter;

static PyObject *
lexp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static const char *kwlist[] = {"data", "device", NULL};
    PyObject *data, *device = NULL;
    LimitedExporter *self;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "S|U:LimitedExporter",
                                     (char **)kwlist, &data, &device)) {
        return NULL;
    }
    self = (LimitedExporter *)alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    Py_INCREF(data);
    self->data = data;
    Py_XINCREF(device);
    self->device = device;
    self->shape[0] = PyBytes_Size(data);
    self->strides[0] = 1;
    memset(&self->info, 0, sizeof(self->info));
    self->info.version = BUFFEREXT_CUDA_INFO_VERSION;
    self->info.device = 3;
    return (PyObject *)self;
}

static void
lexp_dealloc(PyObject *op)
{
    LimitedExporter *self = (LimitedExporter *)op;
    PyTypeObject *type = Py_TYPE(op);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);

    Py_XDECREF(self->data);
    Py_XDECREF(self->device);
    tp_free(op);
    Py_DECREF((PyObject *)type);
}

static int
lexp_export(PyObject *op, Py_buffer *view, int flags, Py_buffer_extended *ext)
{
    LimitedExporter *self = (LimitedExporter *)op;
    const char *device = NULL;

    view->obj = NULL;
    if (flags & PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError,
                        "LimitedExporter: the buffer is read-only");
        return -1;
    }
    if (self->device != NULL) {
        device = PyUnicode_AsUTF8AndSize(self->device, NULL);
        if (device == NULL) {
            return -1;
        }
    }
    if (BufferExt_SetDevice(ext, op, flags, device,
                            device ? &self->info : NULL) < 0) {
        return -1;
    }
    if (ext != NULL) {
        self->device_requests++;
    }
    view->buf = (void *)PyBytes_AsString(self->data);
    view->len = self->shape[0];
    view->itemsize = 1;
    view->readonly = 1;
    view->format = (flags & PyBUF_FORMAT) ? (char *)"B" : NULL;
    view->ndim = 1;
    view->shape = (flags & PyBUF_ND) ? self->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->strides
                                                             : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    Py_INCREF(op);
    view->obj = op;
    self->exports++;
    return 0;
}

BUFFEREXT_DEFINE_GETBUFFER(lexp_getbuffer, lexp_export);

static void
lexp_releasebuffer(PyObject *op, Py_buffer *view)
{
    (void)view;
    ((LimitedExporter *)op)->exports--;
}

static PyObject *
lexp_exports(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(((LimitedExporter *)op)->exports);
}

static PyObject *
lexp_device_requests(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(((LimitedExporter *)op)->device_requests);
}

static PyGetSetDef lexp_getset[] = {
    {"exports", lexp_exports, NULL, "number of live exports", NULL},
    {"device_requests", lexp_device_requests, NULL,
     "requests that reached the typed entry", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot lexp_slots[] = {
    {Py_tp_new, (void *)lexp_new},
    {Py_tp_dealloc, (void *)lexp_dealloc},
    {Py_tp_getset, (void *)lexp_getset},
    {Py_bf_getbuffer, (void *)lexp_getbuffer},
    {Py_bf_releasebuffer, (void *)lexp_releasebuffer},
#ifdef BUFFEREXT_NATIVE
    /* the limited API cannot write a type's slots once it is made: natively
     * the declaration and the typed entry are in its spec */
    {Py_bf_getbuffer_ex, (void *)lexp_getbuffer_ex},
    {Py_bf_supported_flags, (void *)(intptr_t)DECLARED},
#endif
    {0, NULL},
};

static PyType_Spec lexp_spec = {
    TL_STR(MODNAME) ".LimitedExporter", sizeof(LimitedExporter), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, lexp_slots,
};

static PyType_Spec lexp_immutable_spec = {
    TL_STR(MODNAME) ".ImmutableExporter", sizeof(LimitedExporter), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE, lexp_slots,
};

/* ---- module ------------------------------------------------------------- */

static PyObject *
set_supported_flags_immutable(PyObject *module, PyObject *unused)
{
    PyObject *type = PyType_FromSpec(&lexp_immutable_spec);
    int rc;

    (void)module;
    (void)unused;
    if (type == NULL) {
        return NULL;
    }
    rc = BufferExt_SetExtendedGetBuffer((PyTypeObject *)type, DECLARED,
                                        lexp_getbuffer_ex);
    Py_DECREF(type);
    if (rc < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"check_supports", check_supports, METH_VARARGS, NULL},
    {"supported_flags", supported_flags, METH_O, NULL},
    {"get", get, METH_VARARGS, NULL},
    {"get_release", get_release, METH_VARARGS, NULL},
    {"cache_stats", cache_stats, METH_NOARGS, NULL},
    {"set_supported_flags_immutable", set_supported_flags_immutable,
     METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static int
exec_module(PyObject *module)
{
    PyObject *type = PyType_FromSpec(&lexp_spec);

    if (type == NULL ||
        BufferExt_SetExtendedGetBuffer((PyTypeObject *)type, DECLARED,
                                       lexp_getbuffer_ex) < 0 ||
        PyModule_AddObject(module, "LimitedExporter", type) < 0) {
        Py_XDECREF(type);
        return -1;
    }
    if (PyModule_AddIntConstant(module, "DECLARED", DECLARED) < 0 ||
        PyModule_AddIntConstant(module, "LIMITED_API", Py_LIMITED_API) < 0 ||
#ifdef BUFFEREXT_NATIVE
        PyModule_AddIntConstant(module, "NATIVE", 1) < 0 ||
#else
        PyModule_AddIntConstant(module, "NATIVE", 0) < 0 ||
#endif
#ifdef __cplusplus
        PyModule_AddIntConstant(module, "STANDARD", (long)__cplusplus) < 0
#else
        PyModule_AddIntConstant(module, "STANDARD", (long)__STDC_VERSION__) < 0
#endif
        ) {
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, (void *)exec_module},
    {0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, TL_STR(MODNAME), NULL, 0, methods, slots,
    NULL, NULL, NULL,
};

PyMODINIT_FUNC
TL_CAT(PyInit_, MODNAME)(void)
{
    return PyModuleDef_Init(&moduledef);
}
