/* arrayiface.c -- the import of the three dict protocols: the NumPy array
 * interface v3, the CUDA Array Interface v3 and the VE Array Interface v1.
 * Lib/bufferext/_bridges.py parses and checks the dict; this file makes the
 * BufferAdapter over the layout it found.  Their export is each type's own
 * getter (cpubuffer.c, cudabuffer.c, vebuffer.c, adapter.c). */
#include "adapterobject.h"
#include "arrayiface.h"

static int
adapter_set_device(bufferext_state *st, AdapterObject *self,
                   PyObject *device, uintptr_t handle)
{
    if (device == Py_None) {
        return 0;
    }
    if (PyUnicode_Check(device) &&
        PyUnicode_CompareWithASCIIString(device, BUFFEREXT_DEVICE_CUDA) == 0) {
        self->device = BUFFEREXT_DEVICE_CUDA;
        self->info.cuda.device = -1;        /* the interface names none */
        return adapter_import_cuda(st, self, handle);
    }
    if (PyUnicode_Check(device) &&
        PyUnicode_CompareWithASCIIString(device, BUFFEREXT_DEVICE_VE) == 0) {
        /* The VAI names no node or process: only the VEO context. */
        self->device = BUFFEREXT_DEVICE_VE;
        self->info.ve.version = BUFFEREXT_VE_INFO_VERSION;
        self->info.ve.node = -1;
        self->info.ve.context = (void *)handle;
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "unknown device %R", device);
    return -1;
}

/* _adapter_from_layout(source, protocol, ptr, shape, strides, format,
 *                      itemsize, readonly, device, handle, keepalive): the
 * layout was parsed and checked in Python.  device is None,
 * 'bufferext.cuda' (handle: the CAI stream, 0 when the data is ready) or
 * 'bufferext.ve' (handle: the VAI veo_ctxt, 0 if none); pin is None or
 * the BufferView of the array interface's 'data' buffer, of which the
 * adapter holds an export as long as it lives: the view is reachable
 * (gc.get_referents), and its release() is refused while exported. */
PyObject *
bufferext_adapter_from_layout(PyObject *module, PyObject *args)
{
    bufferext_state *st = bufferext_get_state(module);
    PyObject *source, *shape, *strides, *device, *pin;
    const char *protocol, *format;
    Py_ssize_t itemsize, i, n;
    unsigned long long ptr, handle;
    int readonly;
    AdapterObject *self;

    if (!PyArg_ParseTuple(args, "OsKO!O!snpOKO:_adapter_from_layout",
                          &source, &protocol, &ptr, &PyTuple_Type, &shape,
                          &PyTuple_Type, &strides, &format, &itemsize,
                          &readonly, &device, &handle, &pin)) {
        return NULL;
    }
    n = PyTuple_GET_SIZE(shape);
    if (n > PyBUF_MAX_NDIM || PyTuple_GET_SIZE(strides) != n ||
        itemsize <= 0) {
        PyErr_Format(PyExc_BufferError, "%s: bad layout (ndim %zd, "
                     "itemsize %zd)", protocol, n, itemsize);
        return NULL;
    }
    self = adapter_alloc(st, source, protocol, (int)n);
    if (self == NULL || adapter_set_format(self, format) < 0) {
        Py_XDECREF(self);
        return NULL;
    }
    for (i = 0; i < n; i++) {
        self->layout.shape[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        self->layout.strides[i] =
            PyLong_AsSsize_t(PyTuple_GET_ITEM(strides, i));
    }
    if (pin != Py_None) {
        if (bufferext_gate_acquire(pin, &self->held, PyBUF_SIMPLE) < 0) {
            Py_DECREF(self);
            return NULL;
        }
        self->has_held = 1;
    }
    self->layout.buf = (void *)(uintptr_t)ptr;
    self->layout.itemsize = itemsize;
    self->layout.readonly = readonly;
    if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_OverflowError)) {
        PyErr_Format(PyExc_BufferError, "%s: a shape or stride does not fit "
                     "a Py_ssize_t", protocol);
    }
    if (PyErr_Occurred() || adapter_finish_layout(self, protocol) < 0 ||
        adapter_set_device(st, self, device, (uintptr_t)handle) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return adapter_done(self);
}
