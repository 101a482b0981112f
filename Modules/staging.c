/* staging.c -- host staging of the memory of any exporter of CPU, CUDA or
 * VE memory: the wait for its pending work and the copies to and from a
 * host buffer, by the rules of its device (cuda_driver.c, ve_driver.c).
 * BufferView (view.c) pins its export around each call. */
#include "gate.h"
#include "staging.h"
#include "state.h"
#include "ve_driver.h"

int
bufferext_stage_check(const Py_buffer_extended *ext, const char *who)
{
    const char *device = ext->device;

    if (!BufferExt_IsDevice(ext) ||
        strcmp(device, BUFFEREXT_DEVICE_CUDA) == 0 ||
        strcmp(device, BUFFEREXT_DEVICE_VE) == 0) {
        return 0;
    }
    PyErr_Format(PyExc_BufferError,
                 "%s: device '%s' is not supported (bufferext waits for and "
                 "copies CPU memory, '" BUFFEREXT_DEVICE_CUDA "' and '"
                 BUFFEREXT_DEVICE_VE "')", who, device);
    return -1;
}

/* The copies move nbytes as one block, on both sides. */
static int
check_c_contiguous(const bufferext_export_layout *l, int c_contiguous,
                   const char *who)
{
    PyObject *shape, *strides;

    if (c_contiguous) {
        return 0;
    }
    shape = bufferext_tuple_from_ssize(l->ndim, l->shape);
    strides = shape != NULL ? bufferext_tuple_from_ssize(l->ndim, l->strides)
                            : NULL;
    if (strides != NULL) {
        PyErr_Format(PyExc_BufferError,
                     "%s: the view is not C-contiguous (shape=%R, "
                     "strides=%R%s)", who, shape, strides,
                     l->suboffsets ? ", with suboffsets" : "");
    }
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    return -1;
}

/* Why `obj` refused the host side's request, in our words when a request
 * that describes it tells (read-only, not C-contiguous: BufferError "who:
 * name is ..."), else its own refusal kept.  A refusal the gate made (a
 * lying exporter) is kept as it is. */
static void
explain_refusal(const char *who, const char *name, PyObject *obj,
                int writable)
{
    Py_buffer_extended probe;
    const char *why = NULL;

    if (!PyErr_ExceptionMatches(PyExc_BufferError) &&
        !PyErr_ExceptionMatches(PyExc_ValueError)) {
        return;
    }
    {
        PyObject *type, *value, *tb;

        PyErr_Fetch(&type, &value, &tb);
        if (bufferext_gate_acquire(obj, &probe, PyBUF_FULL_RO) == 0) {
            why = writable && probe.view.readonly ? "is read-only"
                : !PyBuffer_IsContiguous(&probe.view, 'C')
                    ? "is not C-contiguous" : NULL;
            bufferext_release_ext_raised(&probe);
        }
        else {
            PyErr_Clear();
        }
        if (why == NULL) {
            PyErr_Restore(type, value, tb);
            return;
        }
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
    PyErr_Format(PyExc_BufferError, "%s: %s %s", who, name, why);
}

/* Acquire `obj`, the host side of a copy (`name` "target" or "source"):
 * CPU memory, one C-contiguous block of exactly `len` bytes (the view's),
 * asked for as such (PyBUF_SIMPLE) and writable when `writable`
 * (PyBUF_WRITABLE: an exporter that refuses to be written is not).  Asked
 * with PyBUF_DEVICE so that device memory is named as such rather than
 * refused by its exporter.  0 with `host` held, or -1. */
static int
get_host_buffer(Py_ssize_t len, const char *who, const char *name,
                PyObject *obj, int writable, Py_buffer_extended *host)
{
    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s: %s must be a C-contiguous%s buffer of %zd bytes "
                     "(a numpy array, bytearray...), not '%.200s'", who,
                     name, writable ? " writable" : "", len,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (bufferext_gate_acquire(obj, host, (writable ? PyBUF_WRITABLE : 0) |
                                              PyBUF_DEVICE) < 0) {
        explain_refusal(who, name, obj, writable);
        return -1;
    }
    if (BufferExt_IsDevice(host)) {
        PyErr_Format(PyExc_BufferError,
                     "%s: %s is memory on device '%s', not host memory", who,
                     name, host->device);
    }
    else if (host->view.len != len) {
        PyErr_Format(PyExc_ValueError, "%s: %s has %zd bytes, the view %zd",
                     who, name, host->view.len, len);
    }
    else {
        return 0;
    }
    bufferext_release_ext_raised(host);
    return -1;
}

int
bufferext_stage_memory(bufferext_state *st, const char *who,
                       const Py_buffer_extended *ext,
                       const bufferext_export_layout *l,
                       bufferext_stage what, void *host)
{
    void *memory = l->buf;
    size_t n = (size_t)l->len;

    if (!BufferExt_IsDevice(ext)) {
        if (what != BUFFEREXT_STAGE_WAIT && n > 0) {
            /* memmove: a target may share memory with the view */
            Py_BEGIN_ALLOW_THREADS
            if (what == BUFFEREXT_STAGE_TO_HOST) {
                memmove(host, memory, n);
            }
            else {
                memmove(memory, host, n);
            }
            Py_END_ALLOW_THREADS
        }
        return 0;
    }
    if (strcmp(ext->device, BUFFEREXT_DEVICE_CUDA) == 0) {
        return bufferext_cuda_stage(st, who, ext->device_info, what,
                                    memory, host, l->len);
    }
    /* VE: veo_hmemcpy is synchronous, so the data is always ready */
    if (what == BUFFEREXT_STAGE_TO_HOST) {
        return bufferext_ve_hmemcpy(st, who, host, memory, l->len);
    }
    if (what == BUFFEREXT_STAGE_FROM_HOST) {
        return bufferext_ve_hmemcpy(st, who, memory, host, l->len);
    }
    return 0;
}

int
bufferext_stage_copy(bufferext_state *st, const char *who,
                     const Py_buffer_extended *ext,
                     const bufferext_export_layout *l, int c_contiguous,
                     PyObject *obj, bufferext_stage what)
{
    int to_host = what == BUFFEREXT_STAGE_TO_HOST;
    Py_buffer_extended host;
    int rc;

    rc = bufferext_stage_check(ext, who);
    if (rc == 0 && !to_host && l->readonly) {
        PyErr_Format(PyExc_BufferError, "%s: the view is read-only", who);
        rc = -1;
    }
    if (rc == 0) {
        rc = check_c_contiguous(l, c_contiguous, who);
    }
    if (rc == 0 && l->buf == NULL && l->len > 0) {
        /* the gate refuses this for CPU memory only; a device library
         * may not check it either */
        PyErr_Format(PyExc_BufferError, "%s: the view's buf is NULL with "
                     "nbytes = %zd", who, l->len);
        rc = -1;
    }
    if (rc == 0) {
        rc = get_host_buffer(l->len, who, to_host ? "target" : "source", obj,
                             to_host, &host);
    }
    if (rc == 0) {
        rc = bufferext_stage_memory(st, who, ext, l, what, host.view.buf);
        bufferext_release_ext_raised(&host);
    }
    return rc;
}
