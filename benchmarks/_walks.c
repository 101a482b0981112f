/* _walks.c -- the C side of benchmarks/walks.py (a measurement tool).
 *
 * Two things in one extension module:
 *
 *  - the -finstrument-functions hooks.  An extension built with that flag
 *    calls __cyg_profile_func_enter/exit around every function; this module
 *    defines them, and is loaded with LD_PRELOAD so that its definitions
 *    come before glibc's empty ones.
 *    Between start() and stop() the hooks log (enter or exit, function
 *    address) for the thread that called start(); stop() gives the log with
 *    each address as (shared object path, offset in it), for addr2line.
 *
 *  - a C consumer of bufferext.h: get_release(obj) makes the extended
 *    request (PyBUF_FULL_RO | PyBUF_DEVICE) through BufferExt_GetBuffer and
 *    releases it with BufferExt_Release.  Built with -finstrument-functions
 *    too, so that the header's inline functions are logged (as the header's
 *    file); this file's own functions are not instrumented.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <bufferext.h>
#include <dlfcn.h>
#include <pthread.h>

#define NOI __attribute__((no_instrument_function))
#define CAPACITY (1 << 20)

static void *log_fn[CAPACITY];
static char log_enter[CAPACITY];
static Py_ssize_t log_len;
static int log_on;
static int log_lost;
static pthread_t log_thread;

NOI static void record(void *fn, char enter)
{
    if (!log_on || !pthread_equal(pthread_self(), log_thread)) {
        return;
    }
    if (log_len == CAPACITY) {
        log_lost = 1;
        return;
    }
    log_fn[log_len] = fn;
    log_enter[log_len++] = enter;
}

NOI __attribute__((visibility("default")))
void __cyg_profile_func_enter(void *fn, void *site)
{
    (void)site;
    record(fn, 1);
}

NOI __attribute__((visibility("default")))
void __cyg_profile_func_exit(void *fn, void *site)
{
    (void)site;
    record(fn, 0);
}

NOI static PyObject *start(PyObject *self, PyObject *unused)
{
    (void)self; (void)unused;
    log_len = 0;
    log_lost = 0;
    log_thread = pthread_self();
    log_on = 1;
    Py_RETURN_NONE;
}

/* mark(enter): log a Python frame's call (1) or return (0), so that the
 * log shows where the C calls go through Python; called by walks.py's
 * sys.setprofile function.  Logged with address NULL. */
NOI static PyObject *mark(PyObject *self, PyObject *enter)
{
    (void)self;
    record(NULL, (char)PyObject_IsTrue(enter));
    Py_RETURN_NONE;
}

/* stop() -> [(enter: bool, object path, offset), ...]; path "" for a mark */
NOI static PyObject *stop(PyObject *self, PyObject *unused)
{
    (void)self; (void)unused;
    log_on = 0;
    if (log_lost) {
        PyErr_SetString(PyExc_RuntimeError, "_walks: the log overflowed");
        return NULL;
    }
    PyObject *out = PyList_New(log_len);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < log_len; i++) {
        Dl_info info;
        const char *path = log_fn[i] == NULL ? "" : "?";
        size_t offset = (size_t)log_fn[i];
        if (log_fn[i] != NULL && dladdr(log_fn[i], &info)
                && info.dli_fname != NULL) {
            path = info.dli_fname;
            offset -= (size_t)info.dli_fbase;
        }
        PyObject *item = Py_BuildValue("(Nsn)", PyBool_FromLong(log_enter[i]),
                                       path, (Py_ssize_t)offset);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

/* get_release(obj): the extended get and its release, as a C consumer
 * makes them; returns whether the view described device memory. */
NOI static PyObject *get_release(PyObject *self, PyObject *obj)
{
    (void)self;
    Py_buffer_extended ext;
    if (BufferExt_GetBuffer(obj, &ext, PyBUF_FULL_RO | PyBUF_DEVICE) < 0) {
        return NULL;
    }
    /* BufferExt_IsDevice's test, written out: not a header call */
    int device = (ext.flags & PyBUF_DEVICE) && ext.device != NULL;
    BufferExt_Release(&ext);
    return PyBool_FromLong(device);
}

static PyMethodDef methods[] = {
    {"start", start, METH_NOARGS, "start logging this thread's calls"},
    {"mark", mark, METH_O, "log a Python frame's call (True) or return"},
    {"stop", stop, METH_NOARGS, "stop logging; the log"},
    {"get_release", get_release, METH_O,
     "BufferExt_GetBuffer(obj, PyBUF_FULL_RO | PyBUF_DEVICE), then release"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_walks", NULL, -1, methods,
    NULL, NULL, NULL, NULL,
};

NOI PyMODINIT_FUNC PyInit__walks(void)
{
    return PyModule_Create(&module);
}
