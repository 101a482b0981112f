/* export.c -- what every producer shares outside the hot path: element
 * types (through bufferext._dtypes), shapes, contiguity. */
#include "export.h"
#include "dlpack_abi.h"
#include "state.h"

BUFFEREXT_MUTEX(resolver_mutex);

/* bufferext._dtypes.resolve, imported once (a new reference), or NULL. */
static PyObject *
resolver(bufferext_state *st)
{
    PyObject *mod, *found;

    BUFFEREXT_MUTEX_LOCK(resolver_mutex);
    found = st->resolve_dtype;
    Py_XINCREF(found);
    BUFFEREXT_MUTEX_UNLOCK(resolver_mutex);
    if (found != NULL) {
        return found;
    }
    /* the import runs Python code: outside the mutex; a thread that loses
     * the race drops its copy */
    mod = PyImport_ImportModule("bufferext._dtypes");
    if (mod == NULL) {
        return NULL;
    }
    found = PyObject_GetAttrString(mod, "resolve");
    Py_DECREF(mod);
    if (found == NULL) {
        return NULL;
    }
    BUFFEREXT_MUTEX_LOCK(resolver_mutex);
    if (st->resolve_dtype == NULL) {
        st->resolve_dtype = Py_NewRef(found);
    }
    BUFFEREXT_MUTEX_UNLOCK(resolver_mutex);
    return found;
}

/* resolve's answers are kept for dtypes spelled as an exact str ("f8",
 * "float32": how most constructions name one), for which resolve spends
 * some microseconds of Python on an answer numpy alone decides; a str's
 * hash and comparison run no Python code.  Up to DTYPE_ANSWERS spellings,
 * the first ones used (a table started over when full would miss on every
 * construction of a program that cycles through a few more).  Resolved on
 * every use: any other dtype (a numpy or torch dtype, a type, a str
 * subclass), and the low-precision floats (format "[name]"), whose numpy
 * dtype depends on whether ml_dtypes imports at the time. */
#define DTYPE_ANSWERS 64

/* The kept answer for `dtype` (a new reference), or NULL: none (no
 * exception) or an error. */
static PyObject *
dtype_answer_get(bufferext_state *st, PyObject *dtype)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *answer;

    return PyDict_GetItemRef(st->dtype_answers, dtype, &answer) < 0
               ? NULL : answer;
#else
    PyObject *answer = PyDict_GetItemWithError(st->dtype_answers, dtype);

    Py_XINCREF(answer);
    return answer;
#endif
}

int
bufferext_dtype_resolve(bufferext_state *st, PyObject *dtype,
                        bufferext_dtype *out)
{
    PyObject *res, *fmt, *resolve;
    const char *fmt_utf8;
    Py_ssize_t len;
    int keep = PyUnicode_CheckExact(dtype);

    memset(out, 0, sizeof(*out));
    res = keep ? dtype_answer_get(st, dtype) : NULL;
    if (res == NULL) {
        if (PyErr_Occurred() || (resolve = resolver(st)) == NULL) {
            return -1;
        }
        res = PyObject_CallFunctionObjArgs(resolve, dtype, NULL);
        Py_DECREF(resolve);
        if (res == NULL) {
            return -1;
        }
    }
    else {
        keep = 0;               /* kept already */
    }
    if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 4 ||
        !PyUnicode_Check(fmt = PyTuple_GET_ITEM(res, 0))) {
        Py_DECREF(res);
        PyErr_SetString(PyExc_SystemError,
                        "bufferext._dtypes.resolve returned a bad value");
        return -1;
    }
    fmt_utf8 = PyUnicode_AsUTF8AndSize(fmt, &len);
    out->itemsize = PyLong_AsSsize_t(PyTuple_GET_ITEM(res, 1));
    if (fmt_utf8 == NULL || len >= (Py_ssize_t)sizeof(out->format) ||
        out->itemsize <= 0) {
        Py_DECREF(res);
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_SystemError,
                            "bufferext._dtypes.resolve returned a bad "
                            "format or itemsize");
        }
        return -1;
    }
    if (keep && fmt_utf8[0] != '[' &&
        PyDict_GET_SIZE(st->dtype_answers) < DTYPE_ANSWERS &&
        PyDict_SetItem(st->dtype_answers, dtype, res) < 0) {
        Py_DECREF(res);
        return -1;
    }
    memcpy(out->format, fmt_utf8, (size_t)len + 1);
    out->dtype = Py_NewRef(PyTuple_GET_ITEM(res, 2));
    out->typestr = Py_NewRef(PyTuple_GET_ITEM(res, 3));
    Py_DECREF(res);
    return 0;
}

void
bufferext_dtype_clear(bufferext_dtype *dt)
{
    Py_CLEAR(dt->dtype);
    Py_CLEAR(dt->typestr);
}

static int
layout_dim(const char *who, PyObject *item, int i, Py_ssize_t *out)
{
    Py_ssize_t n;

    if (!PyIndex_Check(item) || PyBool_Check(item)) {
        PyErr_Format(PyExc_TypeError,
                     "%s: shape[%d] must be an int, not '%.200s'", who, i,
                     Py_TYPE(item)->tp_name);
        return -1;
    }
    n = PyNumber_AsSsize_t(item, NULL);
    if (n == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (n < 0) {
        PyErr_Format(PyExc_ValueError, "%s: shape[%d] = %zd is negative",
                     who, i, n);
        return -1;
    }
    if (n == PY_SSIZE_T_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: shape[%d] = %R is too large",
                     who, i, item);
        return -1;
    }
    *out = n;
    return 0;
}

int
bufferext_layout_parse(const char *who, PyObject *shape, Py_ssize_t itemsize,
                       bufferext_layout *out)
{
    PyObject *seq;
    Py_ssize_t n, i, nbytes, total = itemsize;

    if (PyIndex_Check(shape) && !PySequence_Check(shape)) {
        out->ndim = 1;
        if (layout_dim(who, shape, 0, &out->shape[0]) < 0) {
            return -1;
        }
    }
    else {
        /* a dict or set is iterable but not a shape; a tuple, because an
         * item's __index__ may change a list while we read it */
        seq = PySequence_Check(shape) ? PySequence_Tuple(shape) : NULL;
        if (seq == NULL) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "%s: shape must be an int or a sequence of ints, "
                         "not '%.200s'", who, Py_TYPE(shape)->tp_name);
            return -1;
        }
        n = PyTuple_GET_SIZE(seq);
        if (n > PyBUF_MAX_NDIM) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError,
                         "%s: shape has %zd dimensions, at most %d are "
                         "supported", who, n, PyBUF_MAX_NDIM);
            return -1;
        }
        out->ndim = (int)n;
        for (i = 0; i < n; i++) {
            if (layout_dim(who, PyTuple_GET_ITEM(seq, i), (int)i,
                           &out->shape[i]) < 0) {
                Py_DECREF(seq);
                return -1;
            }
        }
        Py_DECREF(seq);
    }
    /* numpy-style strides: a zero-length dimension counts as 1 for them */
    nbytes = itemsize;
    for (i = out->ndim - 1; i >= 0; i--) {
        Py_ssize_t dim = out->shape[i] ? out->shape[i] : 1;
        out->strides[i] = total;
        if (total > PY_SSIZE_T_MAX / dim) {
            PyErr_Format(PyExc_ValueError,
                         "%s: shape %R of %zd-byte items is too large", who,
                         shape, itemsize);
            return -1;
        }
        total *= dim;
        nbytes *= out->shape[i];
    }
    out->nbytes = nbytes;
    return 0;
}

PyObject *
bufferext_tuple_from_ssize(int n, const Py_ssize_t *values)
{
    /* Copied first: allocating the tuple may run the garbage collector,
     * whose finalizers may change or free the array `values` points into
     * (a shape that resize() replaces); the ints allocate no GC object. */
    Py_ssize_t copy[PyBUF_MAX_NDIM];
    PyObject *tuple;
    int i;

    if (n < 0 || n > PyBUF_MAX_NDIM) {
        PyErr_Format(PyExc_SystemError, "bufferext: ndim = %d", n);
        return NULL;
    }
    if (n > 0) {
        memcpy(copy, values, sizeof(Py_ssize_t) * (size_t)n);
    }
    tuple = PyTuple_New(n);
    for (i = 0; tuple != NULL && i < n; i++) {
        PyObject *item = PyLong_FromSsize_t(copy[i]);
        if (item == NULL) {
            Py_CLEAR(tuple);
            break;
        }
        PyTuple_SET_ITEM(tuple, i, item);
    }
    return tuple;
}

Py_ssize_t *
bufferext_dims_alloc(int ndim, int64_t **items)
{
    /* shape and strides, then 8-aligned room for the item strides */
    size_t head = sizeof(Py_ssize_t) * (size_t)(2 * ndim);
    size_t offset = (head + 7) & ~(size_t)7;
    char *block = PyMem_Malloc(offset + sizeof(int64_t) * (size_t)ndim + 8);

    if (block == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    *items = (int64_t *)(block + offset);
    return (Py_ssize_t *)block;
}

/* Bytes of the item a single-code format names, 0 if DLPack has no such
 * type.  `native`: no prefix or '@', so 'l', 'L', 'n', 'N', 'P' have the
 * platform's sizes ('=', '<', '>', '!' mean struct's standard sizes, which
 * 'n', 'N' and 'P' have none of). */
static Py_ssize_t
format_item_size(const char *f, int native)
{
    switch (f[0]) {
    case '?': case 'b': case 'B': return 1;
    case 'h': case 'H': case 'e': return 2;
    case 'i': case 'I': case 'f': return 4;
    case 'q': case 'Q': case 'd': return 8;
    case 'l': case 'L': return native ? (Py_ssize_t)sizeof(long) : 4;
    case 'n': case 'N': return native ? (Py_ssize_t)sizeof(size_t) : 0;
    case 'P': return native ? (Py_ssize_t)sizeof(void *) : 0;
    case 'Z': return (f[1] == 'e' || f[1] == 'f' || f[1] == 'd')
                         ? 2 * format_item_size(f + 1, native) : 0;
    default: return 0;
    }
}

/* The floats DLPack 1.3 names beyond IEEE binary16/32/64: type code,
 * bits, and name.  The name is also the buffer format, as "[name]" (with
 * the optional byte-order prefix of any format): see "Low-precision
 * floats" in docs/draft-notes.rst.  The sub-byte ones have no format. */
static const struct {
    uint8_t code, bits;
    const char *name;
} lowp_floats[] = {
    {BX_kDLBfloat, 16, "bfloat16"},
    {BX_kDLFloat8_e3m4, 8, "float8_e3m4"},
    {BX_kDLFloat8_e4m3, 8, "float8_e4m3"},
    {BX_kDLFloat8_e4m3b11fnuz, 8, "float8_e4m3b11fnuz"},
    {BX_kDLFloat8_e4m3fn, 8, "float8_e4m3fn"},
    {BX_kDLFloat8_e4m3fnuz, 8, "float8_e4m3fnuz"},
    {BX_kDLFloat8_e5m2, 8, "float8_e5m2"},
    {BX_kDLFloat8_e5m2fnuz, 8, "float8_e5m2fnuz"},
    {BX_kDLFloat8_e8m0fnu, 8, "float8_e8m0fnu"},
    {BX_kDLFloat6_e2m3fn, 6, "float6_e2m3fn"},
    {BX_kDLFloat6_e3m2fn, 6, "float6_e3m2fn"},
    {BX_kDLFloat4_e2m1fn, 4, "float4_e2m1fn"},
};
#define N_LOWP (sizeof(lowp_floats) / sizeof(lowp_floats[0]))

const char *
bufferext_lowp_name(int code, int *bits)
{
    size_t i;

    for (i = 0; i < N_LOWP; i++) {
        if (lowp_floats[i].code == code) {
            *bits = lowp_floats[i].bits;
            return lowp_floats[i].name;
        }
    }
    return NULL;
}

/* The DLPack code and item size of a "[name]" format (f after any
 * prefix): 1, or 0 if it names no float of whole bytes. */
static int
lowp_format(const char *f, uint32_t *code, Py_ssize_t *size)
{
    size_t i, n;

    if (f[0] != '[') {
        return 0;               /* every struct format: no name to compare */
    }
    for (i = 0; i < N_LOWP; i++) {
        n = strlen(lowp_floats[i].name);
        if (lowp_floats[i].bits % 8 == 0 &&
            strncmp(f + 1, lowp_floats[i].name, n) == 0 &&
            f[n + 1] == ']' && f[n + 2] == '\0') {
            *code = lowp_floats[i].code;
            *size = lowp_floats[i].bits / 8;
            return 1;
        }
    }
    return 0;
}

/* A packed DLPack dtype (export.h): one lane of `bits` bits of `code`. */
#define PACKED_DTYPE(code, bits) \
    ((uint32_t)(code) | (uint32_t)(bits) << 8 | (uint32_t)1 << 16)

/* What bufferext_format_dlpack says of `format`, with a byte-swapped type
 * of more than one byte described too: 0 and *packed set, *swapped 1 when
 * the byte order is not native (a byte has no order: '>b' is 'b'); 2; 3. */
static int
format_type(const char *format, Py_ssize_t itemsize, uint32_t *packed,
            int *swapped)
{
    const unsigned int one = 1;
    const int little = *(const unsigned char *)&one == 1;
    const char *f = format;
    Py_ssize_t size;
    uint32_t code;
    int native = 1;

    *swapped = 0;
    if (*f == '@') {
        f++;
    }
    else if (*f == '=' || *f == '<' || *f == '>' || *f == '!') {
        /* sized before the byte order is judged: a swapped format of the
         * wrong item size is that first */
        *swapped = *f != '=' && (*f == '<') != little;
        native = 0;
        f++;
    }
    if (lowp_format(f, &code, &size)) {
        goto sized;
    }
    switch (f[0]) {                    /* DLDataTypeCode values */
    case '?': code = 6; break;
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
        code = 0; break;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': case 'P':
        code = 1; break;                 /* 'P', a void *: numpy's uintp */
    case 'e': case 'f': case 'd': code = 2; break;
    case 'Z': code = 5; break;
    default:
        return 2;
    }
    size = format_item_size(f, native);
    if (size == 0 || f[f[0] == 'Z' ? 2 : 1] != '\0') {
        return 2;
    }
sized:
    if (itemsize != size) {
        return 3;
    }
    *swapped = *swapped && size > 1;
    *packed = PACKED_DTYPE(code, size * 8);
    return 0;
}

int
bufferext_format_dlpack(const char *format, Py_ssize_t itemsize,
                        uint32_t *packed)
{
    uint32_t type;
    int swapped, rc = format_type(format, itemsize, &type, &swapped);

    if (rc == 0 && swapped) {
        return 1;
    }
    if (rc == 0) {
        *packed = type;
    }
    return rc;
}

/* *out = stride / itemsize and 1, or 0 when it is not a whole number of
 * items.  The usual sizes are constants here, so the compiler needs no
 * division (40-90 cycles each with a run-time divisor). */
static inline int
item_stride(Py_ssize_t stride, Py_ssize_t itemsize, int64_t *out)
{
    switch (itemsize) {
    case 1: *out = stride; return 1;
    case 2: *out = stride / 2; return stride % 2 == 0;
    case 4: *out = stride / 4; return stride % 4 == 0;
    case 8: *out = stride / 8; return stride % 8 == 0;
    case 16: *out = stride / 16; return stride % 16 == 0;
    default: *out = stride / itemsize; return stride % itemsize == 0;
    }
}

void
bufferext_layout_dlpack(bufferext_export_layout *layout, int64_t *storage)
{
    int i;

    layout->dl_dtype = 0;
    if (layout->format != NULL &&
        bufferext_format_dlpack(layout->format, layout->itemsize,
                                &layout->dl_dtype) != 0) {
        layout->dl_dtype = 0;
    }
    layout->item_strides = NULL;
    for (i = 0; i < layout->ndim; i++) {
        if (!item_stride(layout->strides[i], layout->itemsize, &storage[i])) {
            return;                        /* DLPack cannot express it */
        }
    }
    layout->item_strides = storage;
}

/* PyBuffer_IsContiguous(view, 'C') and (view, 'F') of a layout, in one
 * pass and without two calls into libpython: the rules of
 * Objects/abstract.c (_IsCContiguous, _IsFortranContiguous), which are
 * the same in 3.9-3.15.  Without strides it asks CPython. */
static void
layout_contiguous(const bufferext_export_layout *layout, int *c, int *f)
{
    Py_ssize_t c_step = layout->itemsize, f_step = layout->itemsize;
    int i, n = layout->ndim;

    if (layout->strides == NULL) {
        Py_buffer view;
        memset(&view, 0, sizeof(view));
        view.buf = layout->buf;
        view.len = layout->len;
        view.itemsize = layout->itemsize;
        view.ndim = layout->ndim;
        view.shape = layout->shape;
        view.suboffsets = layout->suboffsets;
        *c = PyBuffer_IsContiguous(&view, 'C');
        *f = PyBuffer_IsContiguous(&view, 'F');
        return;
    }
    *c = *f = layout->suboffsets == NULL;
    if (layout->suboffsets != NULL || layout->len == 0) {
        return;
    }
    /* len != 0: no dimension is 0, and the products fit (len does) */
    for (i = 0; i < n; i++) {
        Py_ssize_t cd = layout->shape[n - 1 - i], fd = layout->shape[i];
        if (cd > 1 && layout->strides[n - 1 - i] != c_step) {
            *c = 0;
        }
        if (fd > 1 && layout->strides[i] != f_step) {
            *f = 0;
        }
        c_step *= cd;
        f_step *= fd;
    }
}

void
bufferext_layout_contiguity(bufferext_export_layout *layout)
{
    layout_contiguous(layout, &layout->c_contiguous, &layout->f_contiguous);
    layout->refused = -1;
    if (layout->c_contiguous && layout->suboffsets == NULL) {
        /* 0x40 is F_CONTIGUOUS's own bit (the rest is STRIDES) */
        layout->refused = (layout->readonly ? PyBUF_WRITABLE : 0) |
                          (layout->f_contiguous ? 0 : 0x40) |
                          (layout->format == NULL ? PyBUF_FORMAT : 0);
    }
}

/* The element-type check of copies from the host: raw bytes (no format,
 * or unsigned bytes in any byte order: 'B', '<B', ...) copy as they are,
 * typed sources must name the element type of `dt` in items of the
 * source's own itemsize.  The format is read by struct's rules, as every
 * export of the package reads it ('=l' is a 4-byte int, where numpy's 'l'
 * has 8), and compared by DLPack type and byte order: every dtype a
 * producer holds has one, so a format without one names another type
 * (without ml_dtypes every float8 kind has the same numpy stand-in, 'V1';
 * their formats differ).  0, or -1 with ValueError naming the caller, the
 * format, its item size and the dtype. */
int
bufferext_check_source_format(const char *who, const Py_buffer *view,
                              const bufferext_dtype *dt)
{
    uint32_t src_type, dt_type;
    int src_swapped, dt_swapped, read;

    if (view->format == NULL) {
        return 0;
    }
    read = format_type(view->format, view->itemsize, &src_type, &src_swapped);
    if (read == 0 &&
        (src_type == PACKED_DTYPE(1, 8) ||      /* uint8: raw bytes */
         (format_type(dt->format, dt->itemsize, &dt_type, &dt_swapped) == 0 &&
          src_type == dt_type && src_swapped == dt_swapped))) {
        return 0;
    }
    PyErr_Format(PyExc_ValueError,
                 "%s: source format '%s' with %zd-byte items does not match "
                 "the buffer's dtype %R (format '%s', %zd-byte items)", who,
                 view->format, view->itemsize, dt->dtype, dt->format,
                 dt->itemsize);
    return -1;
}

PyObject *
bufferext_refuse_array(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)args;
    (void)kwargs;
    /* the copy each type offers: a producer's to_host(), a view's
     * copy_to_host(target), an adapter's through a view of it */
    PyErr_Format(PyExc_BufferError,
                 "%.200s: device memory cannot be converted to a numpy array "
                 "implicitly; %s", Py_TYPE(self)->tp_name,
                 PyObject_HasAttrString((PyObject *)Py_TYPE(self), "to_host")
                     ? "use to_host() to copy it"
                 : PyObject_HasAttrString((PyObject *)Py_TYPE(self),
                                          "copy_to_host")
                     ? "use copy_to_host(target) to copy it"
                     : "copy it with bufferext.get_buffer(obj)."
                       "copy_to_host(target)");
    return NULL;
}

PyObject *
bufferext_refuse_pickle(PyObject *self, PyObject *protocol)
{
    (void)protocol;
    PyErr_Format(PyExc_TypeError, "cannot pickle '%.200s' object: it holds "
                 "an export, which belongs to this process (pickle the "
                 "exporter, or a copy of its memory)", Py_TYPE(self)->tp_name);
    return NULL;
}

PyObject *
bufferext_array_attr(PyObject *self, const char *device)
{
    static PyMethodDef refuse = {
        "__array__", (PyCFunction)(void (*)(void))bufferext_refuse_array,
        METH_VARARGS | METH_KEYWORDS,
        "__array__($self, dtype=None, copy=None)\n--\n\n"
        "Refuses: device memory is not CPU memory."};

    if (device == NULL) {
        PyErr_Format(PyExc_AttributeError,
                     "%.200s over CPU memory has no __array__: numpy reads "
                     "it through the buffer protocol",
                     Py_TYPE(self)->tp_name);
        return NULL;
    }
    return PyCFunction_New(&refuse, self);
}
