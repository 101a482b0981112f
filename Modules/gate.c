/* gate.c -- the one validation of a buffer that another exporter filled.
 * get_buffer() (view.c) and as_buffer() of a buffer (adapter.c) acquire
 * every export through bufferext_gate_acquire() before any code reads its
 * fields (an export our own code made, bufferext_own_export(), is valid by
 * construction); the DLPack paths (dlpack.c) read only our own exports,
 * found through bufferext_own_entry().  A refusal is a BufferError naming
 * the exporter's type, the field and the value. */
#include "export.h"
#include "gate.h"
#include "state.h"

/* Longest format or device name we read (they are NUL-terminated strings
 * of the exporter; a longer one is refused rather than scanned on). */
#define GATE_MAX_NAME 256

/* The words that tell the gate's refusals (a lying exporter) from an
 * exporter's own; bufferext.check reports them as violations. */
#define GATE_LIE "exported an invalid buffer: "

/* BufferError "who: <lie>what", -1. */
static int
refuse(const char *who, const char *lie, const char *format, ...)
{
    char what[320];
    va_list va;

    va_start(va, format);
    PyOS_vsnprintf(what, sizeof(what), format, va);
    va_end(va);
    PyErr_Format(PyExc_BufferError, "%.200s: %s%s", who, lie, what);
    return -1;
}

#define gate_refuse(exporter, ...) \
    refuse(Py_TYPE(exporter)->tp_name, GATE_LIE, __VA_ARGS__)

/* 1 if `s` is a NUL-terminated string of printable ASCII, at most
 * GATE_MAX_NAME bytes long (the terminator not counted). */
static int
printable(const char *s)
{
    int i;

    for (i = 0; i <= GATE_MAX_NAME; i++) {
        if (s[i] == '\0') {
            return 1;
        }
        if (s[i] < 0x20 || s[i] > 0x7e) {
            return 0;
        }
    }
    return 0;
}

/* The device-info checks: our device names promise a layout. */
static int
gate_device(PyObject *exporter, const Py_buffer_extended *ext)
{
    uint32_t major;

    if (!printable(ext->device)) {
        return gate_refuse(exporter, "device name is not a short printable "
                                     "ASCII string");
    }
    if (strcmp(ext->device, BUFFEREXT_DEVICE_CUDA) == 0) {
        major = BUFFEREXT_CUDA_INFO_MAJOR;
    }
    else if (strcmp(ext->device, BUFFEREXT_DEVICE_VE) == 0) {
        major = BUFFEREXT_VE_INFO_MAJOR;
    }
    else {
        return 0;                   /* a foreign device: opaque to us */
    }
    if (ext->device_info == NULL) {
        return gate_refuse(exporter, "device '%s' with device_info NULL",
                           ext->device);
    }
    /* both layouts start with uint32_t version = major << 16 | minor */
    if (*(const uint32_t *)ext->device_info >> 16 != major) {
        return gate_refuse(exporter, "device '%s': device_info version "
                           "0x%x, expected major version %u", ext->device,
                           (unsigned int)*(const uint32_t *)ext->device_info,
                           (unsigned int)major);
    }
    return 0;
}

/* *out = a * b for a, b >= 0; 1 if the product exceeds PY_SSIZE_T_MAX.
 * The compiler's overflow check where it has one: a 64-bit division costs
 * 40-90 cycles, and the checks below would take five for a 2-d array. */
static inline int
mul_overflows(Py_ssize_t a, Py_ssize_t b, Py_ssize_t *out)
{
#if defined(__GNUC__) && __GNUC__ >= 5 || defined(__clang__)
    return __builtin_mul_overflow(a, b, out);
#else
    if (b != 0 && a > PY_SSIZE_T_MAX / b) {
        return 1;
    }
    *out = a * b;
    return 0;
#endif
}

/* The first dimension of a non-empty array whose stride, with those
 * before it, reaches more than PY_SSIZE_T_MAX bytes from its first item,
 * or -1 when none does (and for an empty array, which reaches nothing).
 * Shapes are >= 0. */
int
bufferext_span_overflow(int ndim, const Py_ssize_t *shape,
                        const Py_ssize_t *strides, Py_ssize_t itemsize)
{
    Py_ssize_t span = itemsize;
    int i;

    for (i = 0; i < ndim; i++) {
        if (shape[i] == 0) {
            return -1;
        }
    }
    for (i = 0; i < ndim; i++) {
        Py_ssize_t stride = strides[i], reach;
        if (stride == PY_SSIZE_T_MIN ||
            mul_overflows(stride < 0 ? -stride : stride, shape[i] - 1,
                          &reach) ||
            reach > PY_SSIZE_T_MAX - span) {
            return i;
        }
        span += reach;
    }
    return -1;
}

void
bufferext_span_bounds(int ndim, const Py_ssize_t *shape,
                      const Py_ssize_t *strides, Py_ssize_t itemsize,
                      Py_ssize_t *low, Py_ssize_t *high)
{
    Py_ssize_t reach;
    int i;

    *low = 0;
    *high = itemsize;
    for (i = 0; i < ndim; i++) {    /* each reach fits: the span was checked */
        reach = strides[i] * (shape[i] - 1);
        if (reach < 0) {
            *low += reach;
        }
        else {
            *high += reach;
        }
    }
}

/* The shape and strides checks: sizes >= 0, len == product(shape) *
 * itemsize (PEP 3118), and no span past PY_SSIZE_T_MAX.  An empty array
 * (a dimension of 0) addresses no memory: its other sizes and its strides
 * are not bounded. */
static int
gate_dims(PyObject *exporter, const Py_buffer *v)
{
    Py_ssize_t items = 1, bytes;
    int i, empty = 0;

    for (i = 0; i < v->ndim; i++) {
        if (v->shape[i] < 0) {
            return gate_refuse(exporter, "shape[%d] = %zd is negative", i,
                               v->shape[i]);
        }
        empty |= v->shape[i] == 0;
    }
    for (i = 0; i < v->ndim && !empty; i++) {
        if (mul_overflows(items, v->shape[i], &items)) {
            return gate_refuse(exporter, "shape[%d] = %zd: the element "
                               "count overflows", i, v->shape[i]);
        }
    }
    if (v->strides != NULL &&
        (i = bufferext_span_overflow(v->ndim, v->shape, v->strides,
                                     v->itemsize)) >= 0) {
        return gate_refuse(exporter, "strides[%d] = %zd with shape[%d] "
                           "= %zd spans more than PY_SSIZE_T_MAX bytes",
                           i, v->strides[i], i, v->shape[i]);
    }
    if (empty) {
        items = 0;
    }
    if (mul_overflows(items, v->itemsize, &bytes)) {
        return gate_refuse(exporter, "len = %zd bytes, but shape and itemsize "
                           "describe %zd elements of %zd bytes, more than "
                           "PY_SSIZE_T_MAX bytes", v->len, items, v->itemsize);
    }
    if (bytes != v->len) {
        return gate_refuse(exporter, "len = %zd bytes, but shape and itemsize "
                           "describe %zd elements of %zd bytes = %zd bytes",
                           v->len, items, v->itemsize, bytes);
    }
    return 0;
}

/* "(a, b, c)" of `n` sizes, cut short with "...)" when it does not fit
 * `size` bytes. */
static void
ssizes_text(char *out, size_t size, int n, const Py_ssize_t *values)
{
    size_t at = 0;
    int i;

    for (i = 0; i < n && at + 32 < size; i++) {
        at += (size_t)PyOS_snprintf(out + at, size - at, "%s%zd",
                                    i ? ", " : "(", values[i]);
    }
    PyOS_snprintf(out + at, size - at, "%s", n == 0 ? "()"
                                             : i < n ? ", ...)"
                                             : n == 1 ? ",)" : ")");
}

/* The order the request asked for (PEP 3118): a consumer that did not ask
 * for strides reads one C-contiguous block, whatever strides the exporter
 * filled in anyway, and a *_CONTIGUOUS request takes only that order.
 * NULL strides are C order by definition (PyBuffer_IsContiguous). */
static int
gate_contiguity(PyObject *exporter, const Py_buffer *v, int flags)
{
    const char *asked;
    char order;

    if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES) {
        asked = "without PyBUF_STRIDES";
        order = 'C';
    }
    else if ((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS) {
        asked = "PyBUF_C_CONTIGUOUS";
        order = 'C';
    }
    else if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS) {
        asked = "PyBUF_F_CONTIGUOUS";
        order = 'F';
    }
    else if ((flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS) {
        asked = "PyBUF_ANY_CONTIGUOUS";
        order = 'A';
    }
    else {
        return 0;
    }
    if (PyBuffer_IsContiguous(v, order)) {
        return 0;
    }
    {
        char shape[120], strides[120];
        ssizes_text(shape, sizeof(shape), v->ndim, v->shape);
        if (v->strides != NULL) {
            ssizes_text(strides, sizeof(strides), v->ndim, v->strides);
        }
        else {
            strcpy(strides, "NULL (C order)");
        }
        return gate_refuse(exporter, "shape = %s, strides = %s%s are not "
                           "%s-contiguous, although the request was %s",
                           shape, strides,
                           v->suboffsets != NULL ? " with suboffsets" : "",
                           order == 'A' ? "C- or F" : order == 'C' ? "C"
                                                                 : "F",
                           asked);
    }
}

/* C-order strides of a layout the gate let through.  Sizes of 0 count as 1
 * (as numpy does); only an empty array can make the product overflow, and
 * as its strides address nothing, the outer ones are then 0. */
void
bufferext_c_strides(int ndim, const Py_ssize_t *shape, Py_ssize_t itemsize,
                    Py_ssize_t *strides)
{
    Py_ssize_t stride = itemsize;
    int i;

    for (i = ndim - 1; i >= 0; i--) {
        Py_ssize_t n = shape[i] ? shape[i] : 1;
        strides[i] = stride;
        stride = stride <= PY_SSIZE_T_MAX / n ? stride * n : 0;
    }
}

/* The format rule; `lie` says whose fault it is (see GATE_LIE). */
static int
gate_format(const char *who, const char *lie, const char *format,
            Py_ssize_t itemsize)
{
    uint32_t packed;

    if (!printable(format)) {
        return refuse(who, lie, "format is not a short printable ASCII "
                                "string");
    }
    if (bufferext_format_dlpack(format, itemsize, &packed) == 3) {
        return refuse(who, lie, "format '%s' does not describe items of "
                      "itemsize = %zd bytes", format, itemsize);
    }
    return 0;
}

int
bufferext_gate_format(const char *who, const char *format,
                      Py_ssize_t itemsize)
{
    return gate_format(who, "", format, itemsize);
}

static int
gate_export(PyObject *exporter, const Py_buffer_extended *ext, int flags)
{
    const Py_buffer *v = &ext->view;

    if (v->ndim < 0 || v->ndim > PyBUF_MAX_NDIM) {
        return gate_refuse(exporter, "ndim = %d is outside [0, %d]", v->ndim,
                           PyBUF_MAX_NDIM);
    }
    if (v->itemsize <= 0) {
        return gate_refuse(exporter, "itemsize = %zd (an item must have at "
                           "least one byte)", v->itemsize);
    }
    if (v->len < 0) {
        return gate_refuse(exporter, "len = %zd is negative", v->len);
    }
    if ((flags & PyBUF_WRITABLE) && v->readonly) {
        return gate_refuse(exporter, "readonly = %d although PyBUF_WRITABLE "
                           "was requested", v->readonly);
    }
    if (v->format != NULL) {
        if (gate_format(Py_TYPE(exporter)->tp_name, GATE_LIE, v->format,
                        v->itemsize) < 0) {
            return -1;
        }
    }
    else if ((flags & PyBUF_FORMAT) && v->itemsize != 1) {
        return gate_refuse(exporter, "format is NULL (unsigned bytes) "
                           "although PyBUF_FORMAT was requested, and "
                           "itemsize = %zd", v->itemsize);
    }
    if (v->suboffsets != NULL && (flags & PyBUF_INDIRECT) != PyBUF_INDIRECT) {
        return gate_refuse(exporter, "suboffsets is set although "
                                     "PyBUF_INDIRECT was not requested");
    }
    if (v->shape == NULL) {
        /* PEP 3118: no shape, 1-D unsigned bytes; a 0-d export may leave
         * it NULL even when asked */
        if ((flags & PyBUF_ND) == PyBUF_ND && v->ndim > 0) {
            return gate_refuse(exporter, "shape is NULL although PyBUF_ND "
                                         "was requested (ndim = %d)",
                               v->ndim);
        }
        if ((flags & PyBUF_ND) == PyBUF_ND && v->len != v->itemsize) {
            return gate_refuse(exporter, "len = %zd, but a 0-d buffer holds "
                               "one item of itemsize %zd", v->len,
                               v->itemsize);
        }
    }
    else if (gate_dims(exporter, v) < 0 || gate_contiguity(exporter, v,
                                                           flags) < 0) {
        return -1;
    }
    if (BufferExt_IsDevice(ext)) {
        return gate_device(exporter, ext);
    }
    if (v->buf == NULL && v->len > 0) {
        return gate_refuse(exporter, "buf is NULL but len = %zd", v->len);
    }
    return 0;
}

int
bufferext_gate_acquire(PyObject *exporter, Py_buffer_extended *ext, int flags)
{
    PyObject *type, *value, *tb, *type2, *value2, *tb2;

    if (BufferExt_GetBuffer(exporter, ext, flags) < 0) {
        if (!PyErr_Occurred()) {
            return gate_refuse(exporter, "getbuffer failed without setting "
                                         "an exception");
        }
        return -1;
    }
    if (PyErr_Occurred()) {
        /* the exporter's pending exception becomes our refusal's context */
        PyErr_Fetch(&type, &value, &tb);
        BufferExt_Release(ext);
        PyErr_NormalizeException(&type, &value, &tb);
        gate_refuse(exporter, "getbuffer succeeded with an exception set");
        PyErr_Fetch(&type2, &value2, &tb2);
        PyErr_NormalizeException(&type2, &value2, &tb2);
        if (tb != NULL) {
            PyException_SetTraceback(value, tb);
        }
        PyException_SetContext(value2, value);   /* steals value */
        PyErr_Restore(type2, value2, tb2);
        Py_XDECREF(type);
        Py_XDECREF(tb);
        return -1;
    }
    /* our own exports are valid by construction: the gate is for the
     * exporters we did not write */
    if (!bufferext_own_export(exporter, &ext->view) &&
        gate_export(exporter, ext, flags) < 0) {
        bufferext_release_ext_raised(ext);
        return -1;
    }
    return 0;
}
