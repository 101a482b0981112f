/* export.h -- the request-filling step every producer's getbuffer shares.
 * Inline, because it sits on the hot path of every export. */
#ifndef BUFFEREXT_MODULES_EXPORT_H
#define BUFFEREXT_MODULES_EXPORT_H
#include "parts.h"

#define REQ_WRITABLE(f) ((f) & PyBUF_WRITABLE)
#define REQ_FORMAT(f) ((f) & PyBUF_FORMAT)
#define REQ_SHAPE(f) (((f) & PyBUF_ND) == PyBUF_ND)
#define REQ_STRIDES(f) (((f) & PyBUF_STRIDES) == PyBUF_STRIDES)
#define REQ_C_CONTIGUOUS(f) \
    (((f) & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS)
#define REQ_F_CONTIGUOUS(f) \
    (((f) & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS)
#define REQ_ANY_CONTIGUOUS(f) \
    (((f) & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS)
#define REQ_INDIRECT(f) (((f) & PyBUF_INDIRECT) == PyBUF_INDIRECT)

static inline int
bufferext_refuse(PyObject *exporter, const char *reason)
{
    PyErr_Format(PyExc_BufferError, "%.200s: %s",
                 Py_TYPE(exporter)->tp_name, reason);
    return -1;
}

/* The request checks in a fixed order, as CPython's memoryview makes them;
 * BufferError "Type: reason" for the first one that fails.  0 or -1. */
BUFFEREXT_INTERNAL_COLD int
bufferext_check_request(PyObject *exporter, int flags,
                        const bufferext_export_layout *layout)
{
    int c = layout->c_contiguous;

    if (REQ_WRITABLE(flags) && layout->readonly) {
        return bufferext_refuse(exporter, "buffer is read-only");
    }
    if (REQ_C_CONTIGUOUS(flags) && !c) {
        return bufferext_refuse(exporter, "buffer is not C-contiguous");
    }
    if (REQ_F_CONTIGUOUS(flags) && !layout->f_contiguous) {
        return bufferext_refuse(exporter,
                                "buffer is not Fortran contiguous");
    }
    if (REQ_ANY_CONTIGUOUS(flags) && !c && !layout->f_contiguous) {
        return bufferext_refuse(exporter, "buffer is not contiguous");
    }
    if (!REQ_INDIRECT(flags) && layout->suboffsets != NULL) {
        return bufferext_refuse(exporter,
                                "buffer has suboffsets: request "
                                "PyBUF_INDIRECT");
    }
    if (!REQ_STRIDES(flags) && !c) {
        return bufferext_refuse(exporter,
                                "buffer is not C-contiguous: request "
                                "PyBUF_STRIDES");
    }
    return 0;
}

/* Fill `view` from `layout` for a request of `flags` that the layout meets
 * (no checks).  Sets everything but view->obj and the extension. */
static inline void
bufferext_fill_view(Py_buffer *view, int flags,
                    const bufferext_export_layout *layout)
{
    view->buf = layout->buf;
    view->len = layout->len;
    view->readonly = layout->readonly;
    view->itemsize = layout->itemsize;
    view->format = REQ_FORMAT(flags) ? (char *)layout->format : NULL;
    view->ndim = layout->ndim;
    view->shape = layout->shape;
    view->strides = REQ_STRIDES(flags) ? layout->strides : NULL;
    view->suboffsets = layout->suboffsets;
    view->internal = (void *)layout;         /* ours: see parts.h */
    if (!REQ_SHAPE(flags)) {
        view->ndim = 1;
        view->shape = NULL;
    }
}

/* Whether a request of `flags` needs bufferext_check_request: the common
 * layout (C-contiguous, no suboffsets) can only refuse the bits in
 * layout->refused; any other layout takes the full checks. */
#define BUFFEREXT_NEEDS_CHECK(layout, flags) \
    ((layout)->refused < 0 || ((flags) & (layout)->refused))

/* Fill `view` from `layout` as CPython's memoryview does (the checks above);
 * a request the layout cannot meet raises BufferError "Type: reason".  Sets
 * everything but view->obj and the extension.  Returns 0 or -1. */
static inline int
bufferext_fill_request(PyObject *exporter, Py_buffer *view, int flags,
                       const bufferext_export_layout *layout)
{
    if (BUFFEREXT_NEEDS_CHECK(layout, flags) &&
        bufferext_check_request(exporter, flags, layout) < 0) {
        return -1;
    }
    bufferext_fill_view(view, flags, layout);
    return 0;
}

/* The rest of every getbuffer of ours once it has refused what it must:
 * fill the request, say where the memory is (`device` NULL: CPU memory),
 * count the export in *exports and take the reference.  Nothing is
 * committed before both steps succeed.  0 or -1. */
static inline int
bufferext_export(PyObject *exporter, Py_buffer *view, int flags,
                 const bufferext_export_layout *layout, const char *device,
                 void *device_info, Py_ssize_t *exports)
{
    /* first: the consumer's mark is read from the view, which filling
     * overwrites (a refused request leaves extension fields the consumer
     * clears, as BufferExt_GetBuffer does) */
    if (BufferExt_SetDevice(exporter, view, flags, device, device_info) < 0 ||
        bufferext_fill_request(exporter, view, flags, layout) < 0) {
        return -1;
    }
    (*exports)++;
    view->obj = Py_NewRef(exporter);
    return 0;
}

#endif
