/* foreign_consumer.c -- a consumer of the extended buffer protocol as an
 * outside author writes one: Python.h and the installed bufferext.h, no
 * code of the project's benchmark module, built by run.py with the
 * interpreter's own compiler flags (sysconfig's CFLAGS, as setuptools
 * builds an extension).  It shows that the figures of _bench.c are the
 * header's, not the harness's.
 *
 *   loop(obj, flags, n, extended) -> None
 *       n requests of `flags` on `obj` and their releases: through
 *       BufferExt_GetBuffer/BufferExt_Release when `extended`, else
 *       PyObject_GetBuffer/PyBuffer_Release.  run.py times the call. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <bufferext.h>

static PyObject *
loop(PyObject *module, PyObject *args)
{
    PyObject *obj;
    Py_ssize_t n, i;
    int flags, extended;
    (void)module;

    if (!PyArg_ParseTuple(args, "Oinp:loop", &obj, &flags, &n, &extended)) {
        return NULL;
    }
    for (i = 0; i < n; i++) {
        if (extended) {
            Py_buffer_extended view;
            if (BufferExt_GetBuffer(obj, &view, flags) < 0) {
                return NULL;
            }
            BufferExt_Release(&view);
        }
        else {
            Py_buffer view;
            if (PyObject_GetBuffer(obj, &view, flags) < 0) {
                return NULL;
            }
            PyBuffer_Release(&view);
        }
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"loop", loop, METH_VARARGS,
     "loop(obj, flags, n, extended)\n--\n\n"
     "n requests of flags on obj and their releases."},
    {NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot slots[] = {
#ifdef Py_mod_gil
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "foreign_consumer", NULL, 0, methods, slots,
    NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit_foreign_consumer(void)
{
    return PyModuleDef_Init(&module_def);
}
