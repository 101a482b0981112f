/* arrow.h -- the Arrow C Data and C Device interfaces (arrow.c): export of
 * any of our exporters through the PyCapsule protocol, and the import of an
 * array into a BufferAdapter. */
#ifndef BUFFEREXT_MODULES_ARROW_H
#define BUFFEREXT_MODULES_ARROW_H
#include "parts.h"
#include "arrow_abi.h"

/* __arrow_c_array__(requested_schema=None) and
 * __arrow_c_device_array__(requested_schema=None, **kwargs) of one of our
 * exporters: (schema capsule, array capsule) over one extended-buffer export
 * that the array's release callback gives back. */
PyObject *bufferext_arrow_c_array(PyObject *exporter, PyObject *const *args,
                                  Py_ssize_t nargs, PyObject *kwnames);
PyObject *bufferext_arrow_c_device_array(PyObject *exporter,
                                         PyObject *const *args,
                                         Py_ssize_t nargs, PyObject *kwnames);

/* The same for the sample producers: ValueError once closed (as their
 * __dlpack__). */
PyObject *bufferext_producer_arrow_c_array(PyObject *op,
                                           PyObject *const *args,
                                           Py_ssize_t nargs,
                                           PyObject *kwnames);
PyObject *bufferext_producer_arrow_c_device_array(PyObject *op,
                                                  PyObject *const *args,
                                                  Py_ssize_t nargs,
                                                  PyObject *kwnames);

/* Method table entries over those functions. */
#define BUFFEREXT_ARROW_METHODS(fn)                                         \
    {"__arrow_c_array__", (PyCFunction)(void (*)(void))(fn),                \
     METH_FASTCALL | METH_KEYWORDS,                                         \
     "__arrow_c_array__($self, /, requested_schema=None)\n--\n\n"          \
     "Export as Arrow C Data capsules (ArrowSchema, ArrowArray), zero-copy:\n" \
     "1-D contiguous CPU memory of fixed-width numbers only."}
#define BUFFEREXT_ARROW_DEVICE_METHOD(fn)                                   \
    {"__arrow_c_device_array__", (PyCFunction)(void (*)(void))(fn),         \
     METH_FASTCALL | METH_KEYWORDS,                                         \
     "__arrow_c_device_array__($self, /, requested_schema=None, **kwargs)"  \
     "\n--\n\n"                                                             \
     "Export as Arrow C Device capsules (ArrowSchema, ArrowDeviceArray),\n" \
     "zero-copy; a CUDA export's sync_event is the buffer's event."}

/* An imported fixed-width array, taken and validated. */
typedef struct {
    const char *format;         /* struct-module format (static) */
    Py_ssize_t itemsize;
    Py_ssize_t length;
    void *data;                 /* the first item: offset applied */
    int32_t device_type;        /* Arrow = DLPack numbering */
    int64_t device_id;
    void *event;                /* CUDA: the CUevent to wait on, or NULL */
    void *source;               /* the array moved out (internal) */
    int device;                 /* an ArrowDeviceArray (internal) */
} bufferext_arrow_import;

/* Move the array of __arrow_c_array__'s capsules (`device` 0) or
 * __arrow_c_device_array__'s (1) out of its capsule (marking the capsule's
 * copy released) and read both into `out`; BufferError naming the field
 * and value for what bufferext cannot wrap, and for an array already
 * moved (imported), in which case nothing is taken.  The move is one step
 * in the array capsule's critical section: of threads importing it at
 * once, exactly one takes it.  What fails validation is given back before
 * -1 returns.  Python code (the repr of what was given) runs only when the
 * capsule names are wrong, before anything is read.  0 or -1. */
int bufferext_arrow_take(PyObject *schema, PyObject *array, int device,
                         bufferext_arrow_import *out);
/* Put a taken array back into its capsule `array` (the producer's again:
 * an import refused after bufferext_arrow_take).  Runs no Python code. */
void bufferext_arrow_give_back(PyObject *array, bufferext_arrow_import *in);
/* Call a taken array's release callback (once) and free it; the GIL is
 * held. */
void bufferext_arrow_release(void *taken);

/* _adapter_from_arrow(source, schema, array, device, readonly), for
 * _bridges (adapter.c lists it). */
PyObject *bufferext_adapter_from_arrow(PyObject *module, PyObject *const *args,
                                       Py_ssize_t nargs);

#endif
