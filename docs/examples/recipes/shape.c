/* shape.c -- the smallest consumer of bufferext.h: shape(obj) returns the
 * shape of any exporter that honours PyBUF_ND, CPU or device memory (it
 * reads no data).  Built by every recipe in this directory; tested by
 * tests/test_recipes.py against bufferext.CPUBuffer. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <bufferext.h>

static PyObject *
shape(PyObject *module, PyObject *obj)
{
    Py_buffer_extended ext;
    PyObject *result;
    Py_ssize_t i;

    (void)module;
    if (!PyObject_CheckBufferSupports(obj, PyBUF_ND)) {
        PyErr_Format(PyExc_TypeError, "%.200s: need an N-d buffer",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    if (BufferExt_GetBuffer(obj, &ext, PyBUF_ND | PyBUF_DEVICE) < 0) {
        return NULL;
    }
    result = PyTuple_New(ext.view.ndim);
    for (i = 0; result != NULL && i < ext.view.ndim; i++) {
        PyObject *n = PyLong_FromSsize_t(ext.view.shape[i]);
        if (n == NULL) {
            Py_CLEAR(result);
            break;
        }
        PyTuple_SET_ITEM(result, i, n);
    }
    BufferExt_Release(&ext);
    return result;
}

static PyMethodDef methods[] = {
    {"shape", shape, METH_O, "shape(obj) -> the shape of obj's N-d buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "bufferext_recipe", NULL, 0, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit_bufferext_recipe(void)
{
    PyObject *m = PyModule_Create(&module);
#ifdef Py_GIL_DISABLED
    /* nothing here needs the GIL: a free-threaded CPython keeps it off */
    if (m != NULL && PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED) < 0) {
        Py_CLEAR(m);
    }
#endif
    return m;
}
