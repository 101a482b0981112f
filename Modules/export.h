/* export.h -- element types and layouts (export.c), and the request-filling
 * step every exporter's getbuffer shares (inline below: it sits on the hot
 * path of every export). */
#ifndef BUFFEREXT_MODULES_EXPORT_H
#define BUFFEREXT_MODULES_EXPORT_H
#include "parts.h"
#include "exports.h"

/* Room for any format we make: "<[float8_e4m3b11fnuz]" and its NUL. */
#define BUFFEREXT_FORMAT_MAX 24

/* A producer's element type, from bufferext._dtypes.resolve() (fetched
 * by name on first use). */
typedef struct {
    char format[BUFFEREXT_FORMAT_MAX];  /* buffer format, NUL-terminated */
    Py_ssize_t itemsize;
    PyObject *dtype;        /* numpy.dtype (strong reference) */
    PyObject *typestr;      /* array-interface typestr, e.g. '<f8' */
} bufferext_dtype;

/* Resolve a numpy-style dtype or struct format into `out` (references are
 * new; clear them with bufferext_dtype_clear).  0 or -1 with TypeError. */
int bufferext_dtype_resolve(bufferext_state *st, PyObject *dtype,
                            bufferext_dtype *out);
void bufferext_dtype_clear(bufferext_dtype *dt);

/* A C-contiguous shape, parsed from an int or a sequence of ints. */
typedef struct {
    int ndim;
    Py_ssize_t nbytes;
    Py_ssize_t shape[PyBUF_MAX_NDIM];
    Py_ssize_t strides[PyBUF_MAX_NDIM];
} bufferext_layout;

/* Parse `shape` for items of `itemsize` bytes; `who` names the caller in
 * messages.  ValueError for negative/too many dims or overflow, TypeError
 * for non-integers.  Returns 0 or -1. */
int bufferext_layout_parse(const char *who, PyObject *shape,
                           Py_ssize_t itemsize, bufferext_layout *out);
PyObject *bufferext_tuple_from_ssize(int n, const Py_ssize_t *values);

/* Why a layout of unknown format (a BufferView acquired without
 * PyBUF_FORMAT, of items of several bytes) has no format to give. */
#define BUFFEREXT_FORMAT_UNKNOWN                                            \
    "the item format is unknown (the view was acquired without "           \
    "PyBUF_FORMAT)"

/* A layout an exporter holds, filled into every request (below);
 * `format` is NULL only where it is unknown. */
typedef struct {
    void *buf;
    Py_ssize_t len;
    Py_ssize_t itemsize;
    const char *format;
    int ndim;
    int readonly;
    Py_ssize_t *shape;
    Py_ssize_t *strides;
    Py_ssize_t *suboffsets;
    int c_contiguous;       /* precomputed: the hot path calls nothing */
    int f_contiguous;
    /* Request bits refused without further thought, for a C-contiguous
     * layout without suboffsets (WRITABLE when read-only, F_CONTIGUOUS's
     * own bit when not Fortran-ordered); -1 for any other layout, which
     * takes the full checks. */
    int refused;
    /* DLPack's view of the layout, computed once (bufferext_layout_dlpack):
     * strides in items (NULL when a stride is not a whole number of items)
     * and the packed dtype (code | bits << 8 | lanes << 16; 0 if none). */
    int64_t *item_strides;
    uint32_t dl_dtype;
} bufferext_export_layout;

/* Our exporters put their layout in view->internal (the field is the
 * exporter's own): dlpack.c, which serves only our types, reads it back. */

/* Contiguity of a layout, for filling c_contiguous/f_contiguous and
 * refused (call it after readonly is set). */
void bufferext_layout_contiguity(bufferext_export_layout *layout);
/* One block for shape and strides (2 * ndim entries) plus room for `ndim`
 * item strides (*items); free it with PyMem_Free.  NULL with MemoryError. */
Py_ssize_t *bufferext_dims_alloc(int ndim, int64_t **items);
/* Compute DLPack's view of a layout: fill `storage` (ndim entries) with
 * the strides in items and point layout->item_strides at it (NULL when a
 * stride is not a whole number of items), and set layout->dl_dtype.  Needs
 * format, itemsize, ndim and strides set. */
void bufferext_layout_dlpack(bufferext_export_layout *layout,
                             int64_t *storage);
/* The packed DLPack dtype of a struct format: 0 and *packed set; 1 when the
 * byte order is not native on items of more than one byte; 2 when DLPack has no such type; 3 when the
 * format's item size is not `itemsize`. */
int bufferext_format_dlpack(const char *format, Py_ssize_t itemsize,
                            uint32_t *packed);
/* The name of a DLPack float type that has no struct code (bfloat16, the
 * float8, float6 and float4 kinds) by its type code, and *bits its width;
 * NULL if the code is none of those.  Its buffer format is "[name]". */
const char *bufferext_lowp_name(int code, int *bits);


/* A copy from host memory must bring raw bytes ('B' or no format) or
 * items of the element type `dt` names, of the source's own itemsize (its
 * format read by struct's rules); else ValueError naming `who`, the source
 * format and the dtype.  0 or -1; only the error runs Python code (the
 * dtype's repr). */
int bufferext_check_source_format(const char *who, const Py_buffer *view,
                                  const bufferext_dtype *dt);

/* __array__ of memory on a device: numpy swallows the BufferError
 * of the buffer protocol and would build a 0-d object array; this refuses
 * with BufferError.  A METH_VARARGS | METH_KEYWORDS method, and the
 * __array__ attribute of types whose memory may be on the CPU or a device
 * (AttributeError for CPU memory, so numpy takes the buffer protocol). */
PyObject *bufferext_refuse_array(PyObject *self, PyObject *args,
                                 PyObject *kwargs);
PyObject *bufferext_array_attr(PyObject *self, const char *device);

/* __reduce_ex__ of the types that hold an export (BufferView,
 * BufferAdapter): an export is this process's, so they refuse every
 * protocol.  Without it protocols 0 and 1 pickled an empty object that
 * only failed once loaded, maybe in another process.  A METH_O method. */
PyObject *bufferext_refuse_pickle(PyObject *self, PyObject *protocol);
#define BUFFEREXT_REFUSE_PICKLE_METHOD                                      \
    {"__reduce_ex__", bufferext_refuse_pickle, METH_O,                      \
     "__reduce_ex__($self, protocol, /)\n--\n\n"                            \
     "Refuses: an export belongs to the process that holds it."}

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
    if (REQ_FORMAT(flags) && layout->format == NULL) {
        return bufferext_refuse(exporter, BUFFEREXT_FORMAT_UNKNOWN);
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
    view->internal = (void *)layout;         /* ours: see state.h */
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
 * fill the request, say where the memory is (`device` NULL: CPU memory)
 * in `ext` (the extended struct of a request through the typed entry,
 * NULL through the plain getbuffer), count the export in `exports` and take
 * the reference.  Nothing is committed before both steps succeed (a refused
 * request leaves extension fields the consumer clears, as
 * BufferExt_GetBuffer does).  0 or -1. */
static inline int
bufferext_export(PyObject *exporter, Py_buffer *view, int flags,
                 Py_buffer_extended *ext,
                 const bufferext_export_layout *layout, const char *device,
                 void *device_info, bufferext_exports *exports)
{
    if (BufferExt_SetDevice(ext, exporter, flags, device, device_info) < 0 ||
        bufferext_fill_request(exporter, view, flags, layout) < 0) {
        return -1;
    }
    bufferext_exports_add(exports);
    view->obj = Py_NewRef(exporter);
    return 0;
}

#endif
