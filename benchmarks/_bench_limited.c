/* _bench_limited.c -- timing loops for benchmarks/bench_limited.py.
 *
 * Built twice against the INSTALLED headers: once with the full C API
 * (module _bench_full: the accelerator of internal/accel.h) and once with
 * -DPy_LIMITED_API=0x030B0000 (module _bench_limited: internal/limited.h),
 * so the two modes of bufferext.h are measured with the same loops.
 *
 *   time_loop(op, obj, flags, n) -> int   ns for n iterations of `op`
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "bufferext.h"

#include <time.h>

#ifndef MODNAME
#  define MODNAME _bench_full
#endif
#define BL_STR2(x) #x
#define BL_STR(x) BL_STR2(x)
#define BL_CAT2(a, b) a##b
#define BL_CAT(a, b) BL_CAT2(a, b)

enum {
    OP_CHECK_BUFFER = 0,   /* PyObject_CheckBuffer(obj) */
    OP_CHECK_SUPPORTS,     /* PyObject_CheckBufferSupports(obj, flags) */
    OP_GET_PLAIN,          /* PyObject_GetBuffer + PyBuffer_Release */
    OP_GET_EXTENDED,       /* BufferExt_GetBuffer + BufferExt_Release */
    OP_COUNT
};

static volatile Py_ssize_t sink;

static long long
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static PyObject *
time_loop(PyObject *module, PyObject *args)
{
    PyObject *obj;
    int op, flags;
    Py_ssize_t i, n, acc = 0;
    Py_buffer view;
    Py_buffer_extended ext;
    long long start;

    (void)module;
    if (!PyArg_ParseTuple(args, "iOin", &op, &obj, &flags, &n)) {
        return NULL;
    }
    start = now_ns();
    switch (op) {
    case OP_CHECK_BUFFER:
        for (i = 0; i < n; i++) {
            acc += PyObject_CheckBuffer(obj);
        }
        break;
    case OP_CHECK_SUPPORTS:
        for (i = 0; i < n; i++) {
            acc += PyObject_CheckBufferSupports(obj, flags);
        }
        break;
    case OP_GET_PLAIN:
        for (i = 0; i < n; i++) {
            if (PyObject_GetBuffer(obj, &view, flags) < 0) {
                return NULL;
            }
            acc += view.len;
            PyBuffer_Release(&view);
        }
        break;
    case OP_GET_EXTENDED:
        for (i = 0; i < n; i++) {
            if (BufferExt_GetBuffer(obj, &ext, flags) < 0) {
                return NULL;
            }
            acc += ext.view.len + BufferExt_IsDevice(&ext);
            BufferExt_Release(&ext);
        }
        break;
    default:
        PyErr_SetString(PyExc_ValueError, "unknown op");
        return NULL;
    }
    sink = acc;
    return PyLong_FromLongLong(now_ns() - start);
}

static PyMethodDef methods[] = {
    {"time_loop", time_loop, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static int
exec_module(PyObject *module)
{
    return PyModule_AddIntConstant(module, "OP_CHECK_BUFFER",
                                   OP_CHECK_BUFFER) < 0 ||
           PyModule_AddIntConstant(module, "OP_CHECK_SUPPORTS",
                                   OP_CHECK_SUPPORTS) < 0 ||
           PyModule_AddIntConstant(module, "OP_GET_PLAIN", OP_GET_PLAIN) < 0 ||
           PyModule_AddIntConstant(module, "OP_GET_EXTENDED",
                                   OP_GET_EXTENDED) < 0 ? -1 : 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, (void *)exec_module},
    {0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, BL_STR(MODNAME), NULL, 0, methods, slots,
    NULL, NULL, NULL,
};

PyMODINIT_FUNC
BL_CAT(PyInit_, MODNAME)(void)
{
    return PyModuleDef_Init(&moduledef);
}
