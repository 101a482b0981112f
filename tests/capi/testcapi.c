/* testcapi.c -- compiled test extension for the public header bufferext.h.
 *
 * Includes only <Python.h> and <bufferext.h>, exactly as an outside
 * extension would.  The same source is compiled as C99, C11, C++11 and
 * C++17 (tests/capi/build.py); -DMODNAME=<name> names each build so several
 * can be imported into one process and talk to each other.
 *
 * Producer side: Exporter* heap types (a configurable test exporter in the
 * spirit of CPython's _testbuffer; one type per supported-flags declaration
 * since the declaration belongs to the type) and make_exporter_type().
 * Consumer side: module functions wrapping every consumer helper.
 *
 * Device memory here is a TEST DOUBLE: host memory labelled with a device
 * name, so the device paths run on a machine without any device.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <bufferext.h>

#ifndef MODNAME
#  error "compile with -DMODNAME=<module name>"
#endif

#define TC_CAT2(a, b) a##b
#define TC_CAT(a, b) TC_CAT2(a, b)
#define TC_STR2(x) #x
#define TC_STR(x) TC_STR2(x)
#define TC_MODNAME TC_STR(MODNAME)

/* Which standard this build is, reported as testcapi.STANDARD. */
#if defined(__cplusplus)
#  define TC_STANDARD "c++" TC_STR(__cplusplus)
#elif defined(__STDC_VERSION__)
#  define TC_STANDARD "c" TC_STR(__STDC_VERSION__)
#else
#  define TC_STANDARD "c89"
#endif

/* ---- the test exporter ------------------------------------------------ */

/* "liar" modes: an exporter that breaks the extended protocol. */
enum {
    LIAR_NONE = 0,
    LIAR_UNASKED,       /* writes the extension without PyBUF_DEVICE */
    LIAR_UNASKED_CPU,   /* the same, saying "CPU memory" (device NULL) */
    LIAR_DEVICE_NOFLAG, /* fills device fields, leaves flags at 0 */
    LIAR_EXTRA_FLAGS,   /* sets an extended flag nobody requested */
    LIAR_FAIL_LATE,     /* fills the extension, then fails the request */
    /* lies in the PEP 3118 fields or the device info, after an honest fill
     * (what bufferext's gate must refuse) */
    LIAR_NDIM_65,
    LIAR_NDIM_NEGATIVE,
    LIAR_ITEMSIZE_0,
    LIAR_LEN_PAST_SHAPE,
    LIAR_SHAPE_NULL,
    LIAR_FORMAT_LONG,
    LIAR_INFO_NULL,     /* our device name, device_info NULL */
    LIAR_INFO_VERSION,  /* our device name, device_info of major version 2 */
    LIAR_READONLY,      /* read-only memory although PyBUF_WRITABLE was asked */
    /* broken C conventions */
    LIAR_SILENT_FAIL,   /* returns -1 without an exception */
    LIAR_ERROR_SET,     /* returns 0 with an exception set */
    LIAR_DEVICE_TO_PLAIN    /* its device memory to a plain request too */
};

static const char *const liar_names[] = {
    "none", "unasked", "unasked_cpu", "device_noflag", "extra_flags",
    "fail_late", "ndim_65", "ndim_negative", "itemsize_0", "len_past_shape", "shape_null",
    "format_long", "info_null", "info_version", "readonly", "silent_fail",
    "error_set", "device_to_plain", NULL,
};

typedef struct {
    PyObject_HEAD
    int *data;                  /* 2 * nitems ints when strided */
    Py_ssize_t nitems;
    Py_ssize_t shape[1];
    Py_ssize_t strides[1];
    int readonly;
    int strided;
    int fail;                   /* forced getbuffer failure */
    int liar;
    PyObject *device;           /* str or NULL (host memory) */
    union {
        BufferExt_CUDADeviceInfo cuda;
        BufferExt_VEDeviceInfo ve;
    } info;                     /* device_info, owned by the exporter */
    Py_ssize_t exports;
    Py_ssize_t getbuffer_calls;
    /* releasebuffer calls made with an exception pending: a consumer must
     * not run an exporter's code (Python code, for some) in that state */
    Py_ssize_t released_with_error;
    /* releasebuffer calls whose view->obj was not the exporter (as
     * PyBuffer_Release leaves it set during the call) */
    Py_ssize_t released_astray;
} ExporterObject;

#define Exporter_CAST(op) ((ExporterObject *)(op))

static int
parse_liar(const char *name)
{
    int i;

    for (i = 0; liar_names[i] != NULL; i++) {
        if (strcmp(name, liar_names[i]) == 0) {
            return i;
        }
    }
    PyErr_Format(PyExc_ValueError, "Exporter: unknown liar mode '%s'", name);
    return -1;
}

/* Fill a device_info double (cuda and ve share storage) for the device
 * name `name`; `owner` stands for the context or process handle. */
static void
exporter_fill_info_for(BufferExt_CUDADeviceInfo *cuda,
                       BufferExt_VEDeviceInfo *ve, const char *name,
                       void *owner)
{
    if (strcmp(name, BUFFEREXT_DEVICE_VE) == 0) {
        memset(ve, 0, sizeof(*ve));
        ve->version = BUFFEREXT_VE_INFO_VERSION;
        ve->node = 3;
        ve->proc = owner;
    }
    else {
        memset(cuda, 0, sizeof(*cuda));
        cuda->version = BUFFEREXT_CUDA_INFO_VERSION;
        cuda->device = 1;
        cuda->context = owner;
    }
}

static void
exporter_fill_info(ExporterObject *self, const char *name)
{
    memset(&self->info, 0, sizeof(self->info));
    exporter_fill_info_for(&self->info.cuda, &self->info.ve, name, self);
}

static int
exporter_setup(ExporterObject *self, Py_ssize_t nitems, const char *liar,
               PyObject *device)
{
    Py_ssize_t i, n = self->strided ? 2 * nitems : nitems;

    if (nitems < 0 || nitems > 1 << 20) {
        PyErr_Format(PyExc_ValueError,
                     "Exporter: nitems must be in [0, 2**20], not %zd",
                     nitems);
        return -1;
    }
    self->liar = liar == NULL ? LIAR_NONE : parse_liar(liar);
    if (self->liar < 0) {
        return -1;
    }
    if (device != Py_None) {
        const char *name = PyUnicode_AsUTF8(device);
        if (name == NULL) {
            return -1;
        }
        self->device = Py_NewRef(device);
        exporter_fill_info(self, name);
    }
    self->data = (int *)PyMem_Calloc((size_t)(n ? n : 1), sizeof(int));
    if (self->data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < nitems; i++) {
        self->data[self->strided ? 2 * i : i] = (int)i;
    }
    self->nitems = nitems;
    self->shape[0] = nitems;
    self->strides[0] = (Py_ssize_t)sizeof(int) * (self->strided ? 2 : 1);
    return 0;
}

static PyObject *
exporter_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {
        (char *)"nitems", (char *)"readonly", (char *)"strided",
        (char *)"fail", (char *)"device", (char *)"liar", NULL,
    };
    Py_ssize_t nitems = 4;
    int readonly = 0, strided = 0, fail = 0;
    PyObject *device = Py_None;
    const char *liar = NULL;
    ExporterObject *self;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|n$pppUz:Exporter",
                                     kwlist, &nitems, &readonly, &strided,
                                     &fail, &device, &liar)) {
        return NULL;
    }
    self = (ExporterObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->readonly = readonly;
    self->strided = strided;
    self->fail = fail;
    if (exporter_setup(self, nitems, liar, device) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void
exporter_dealloc(PyObject *op)
{
    ExporterObject *self = Exporter_CAST(op);
    PyTypeObject *tp = Py_TYPE(op);

    PyMem_Free(self->data);
    Py_XDECREF(self->device);
    tp->tp_free(op);
    Py_DECREF(tp);
}

#define REQ_WRITABLE(f) (((f) & PyBUF_WRITABLE) == PyBUF_WRITABLE)
#define REQ_FORMAT(f) (((f) & PyBUF_FORMAT) == PyBUF_FORMAT)
#define REQ_SHAPE(f) (((f) & PyBUF_ND) == PyBUF_ND)
#define REQ_STRIDES(f) (((f) & PyBUF_STRIDES) == PyBUF_STRIDES)
#define REQ_CONTIGUOUS(f) \
    (((f) & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS || \
     ((f) & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS ||     \
     ((f) & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS)

/* Refuse what this instance cannot honour; 0 or -1 with BufferError. */
static int
exporter_check_request(ExporterObject *self, PyObject *op, int flags)
{
    const char *problem = NULL;

    if (self->fail) {
        problem = "forced getbuffer failure";
    }
    else if (REQ_WRITABLE(flags) && self->readonly) {
        problem = "buffer is read-only";
    }
    else if (self->strided && !REQ_STRIDES(flags)) {
        problem = "buffer is not contiguous: PyBUF_STRIDES is required";
    }
    else if (self->strided && REQ_CONTIGUOUS(flags) && self->nitems > 1) {
        problem = "buffer is not contiguous";
    }
    if (problem != NULL) {
        PyErr_Format(PyExc_BufferError, "%s: %s", Py_TYPE(op)->tp_name,
                     problem);
        return -1;
    }
    return 0;
}

/* Break the protocol as `self->liar` says: a liar writes the extension
 * whatever path the request took, as a C exporter that ignores the header
 * may (the tests that use liars always pass a Py_buffer_extended). */
static int
exporter_lie(ExporterObject *self, PyObject *op, Py_buffer *view, int flags)
{
    Py_buffer_extended *ext = (Py_buffer_extended *)view;

    switch (self->liar) {
    case LIAR_UNASKED:
        (void)flags;   /* lies the same whatever was requested */
        ext->flags = PyBUF_DEVICE;
        ext->device = "liar.unasked";
        break;
    case LIAR_UNASKED_CPU:
        ext->flags = PyBUF_DEVICE;
        break;
    case LIAR_DEVICE_NOFLAG:
        ext->device = "liar.noflag";
        ext->device_info = &self->info;
        break;
    case LIAR_EXTRA_FLAGS:
        ext->flags = PyBUF_DEVICE | 0x20000;
        break;
    case LIAR_FAIL_LATE:
        ext->flags = PyBUF_DEVICE;
        ext->device = "liar.fail_late";
        ext->device_info = &self->info;
        PyErr_Format(PyExc_BufferError, "%s: failed after writing the "
                     "extension", Py_TYPE(op)->tp_name);
        return -1;
    }
    return 0;
}

/* The lies told after an honest fill of the PEP 3118 fields. */
static void
exporter_lie_fields(ExporterObject *self, Py_buffer *view)
{
    static char long_format[300];

    switch (self->liar) {
    case LIAR_NDIM_65: view->ndim = 65; break;
    case LIAR_NDIM_NEGATIVE: view->ndim = -1; break;
    case LIAR_ITEMSIZE_0: view->itemsize = 0; break;
    case LIAR_LEN_PAST_SHAPE: view->len = 1 << 20; break;
    case LIAR_SHAPE_NULL: view->shape = NULL; break;
    case LIAR_READONLY: view->readonly = 1; break;
    case LIAR_FORMAT_LONG:
        memset(long_format, 'i', sizeof(long_format) - 1);
        view->format = long_format;
        break;
    default: break;
    }
}

/* The one function of the exporter: `ext` is NULL for a request through
 * its plain getbuffer, the consumer's extended view through its entry. */
static int
exporter_export(PyObject *op, Py_buffer *view, int flags,
                Py_buffer_extended *ext)
{
    ExporterObject *self = Exporter_CAST(op);
    const char *device;
    void *info;

    self->getbuffer_calls++;
    view->obj = NULL;
    if (self->liar == LIAR_SILENT_FAIL) {
        return -1;
    }
    if (exporter_check_request(self, op, flags) < 0) {
        return -1;
    }
    device = self->device ? PyUnicode_AsUTF8(self->device) : NULL;
    info = device && self->liar != LIAR_INFO_NULL ? &self->info : NULL;
    if (self->liar == LIAR_INFO_VERSION) {
        self->info.cuda.version = 2u << 16;      /* ve's is first too */
    }
    if (self->liar != LIAR_NONE && self->liar <= LIAR_FAIL_LATE) {
        if (exporter_lie(self, op, view, flags) < 0) {
            return -1;
        }
    }
    else if ((self->liar != LIAR_DEVICE_TO_PLAIN || ext != NULL) &&
             BufferExt_SetDevice(ext, op, flags, device, info) < 0) {
        return -1;
    }
    view->buf = self->data;
    view->len = self->nitems * (Py_ssize_t)sizeof(int);
    view->readonly = self->readonly;
    view->itemsize = sizeof(int);
    view->format = REQ_FORMAT(flags) ? (char *)"i" : NULL;
    view->ndim = 1;
    view->shape = REQ_SHAPE(flags) ? self->shape : NULL;
    view->strides = REQ_STRIDES(flags) ? self->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    exporter_lie_fields(self, view);
    view->obj = Py_NewRef(op);
    self->exports++;
    if (self->liar == LIAR_ERROR_SET) {
        PyErr_SetString(PyExc_RuntimeError, "left over by the exporter");
    }
    return 0;
}

BUFFEREXT_DEFINE_GETBUFFER(exporter_getbuffer, exporter_export);

static void
exporter_releasebuffer(PyObject *op, Py_buffer *view)
{
    Exporter_CAST(op)->exports--;
    if (PyErr_Occurred()) {
        Exporter_CAST(op)->released_with_error++;
    }
    if (view->obj != op) {
        Exporter_CAST(op)->released_astray++;
    }
}

static PyObject *
exporter_get_exports(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(Exporter_CAST(op)->exports);
}

static PyObject *
exporter_get_calls(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(Exporter_CAST(op)->getbuffer_calls);
}

static PyObject *
exporter_get_released_with_error(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(Exporter_CAST(op)->released_with_error);
}

static PyObject *
exporter_get_released_astray(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(Exporter_CAST(op)->released_astray);
}

static PyObject *
exporter_get_address(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromVoidPtr(Exporter_CAST(op)->data);
}

static PyObject *
exporter_get_info_address(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromVoidPtr(&Exporter_CAST(op)->info);
}

static PyGetSetDef exporter_getset[] = {
    {(char *)"exports", exporter_get_exports, NULL,
     (char *)"number of live exports", NULL},
    {(char *)"getbuffer_calls", exporter_get_calls, NULL,
     (char *)"how often getbuffer was called", NULL},
    {(char *)"released_with_error", exporter_get_released_with_error, NULL,
     (char *)"releasebuffer calls made with an exception pending", NULL},
    {(char *)"released_astray", exporter_get_released_astray, NULL,
     (char *)"releasebuffer calls whose view->obj was not the exporter",
     NULL},
    {(char *)"address", exporter_get_address, NULL,
     (char *)"address of the data", NULL},
    {(char *)"info_address", exporter_get_info_address, NULL,
     (char *)"address of the device_info struct", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot exporter_slots[] = {
    {Py_tp_new, (void *)exporter_new},
    {Py_tp_dealloc, (void *)exporter_dealloc},
    {Py_tp_getset, (void *)exporter_getset},
    {Py_bf_getbuffer, (void *)exporter_getbuffer},
    {Py_bf_releasebuffer, (void *)exporter_releasebuffer},
    {0, NULL},
};

/* One spec per declaration; the names are static, as tp_name needs. */
#define EXPORTER_SPEC(var, name)                                        \
    static PyType_Spec var = {                                          \
        TC_MODNAME "." name, sizeof(ExporterObject), 0,                 \
        Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, exporter_slots,       \
    }

EXPORTER_SPEC(spec_undeclared, "ExporterUndeclared");
EXPORTER_SPEC(spec_legacy, "ExporterLegacy");
EXPORTER_SPEC(spec_simple, "ExporterSimpleOnly");
EXPORTER_SPEC(spec_full, "ExporterFull");
EXPORTER_SPEC(spec_nodevice, "ExporterNoDevice");
EXPORTER_SPEC(spec_noentry, "ExporterNoEntry");

/* Py_TPFLAGS_IMMUTABLETYPE is 3.10's; on 3.9 the types below are mutable
 * (the tests that need them run on 3.11+). */
#ifdef Py_TPFLAGS_IMMUTABLETYPE
#  define TC_IMMUTABLE Py_TPFLAGS_IMMUTABLETYPE
#else
#  define TC_IMMUTABLE 0
#endif

/* ExporterFull as an immutable type (Py_TPFLAGS_IMMUTABLETYPE, as modern
 * extensions make theirs): a consumer may cache what it read of it for
 * good, so what it read must be the declaration. */
static PyType_Spec spec_full_immutable = {
    TC_MODNAME ".ExporterFullImmutable", sizeof(ExporterObject), 0,
    Py_TPFLAGS_DEFAULT | TC_IMMUTABLE, exporter_slots,
};

/* ExporterNoDevice honours FORMAT, ND and STRIDES only (no WRITABLE, no
 * contiguity, no DEVICE); ExporterFull every legacy flag and DEVICE;
 * ExporterNoEntry declares what ExporterFull does but publishes no typed
 * entry (BufferExt_SetSupportedFlags), so DEVICE never reaches it. */
#define MASK_FULL (BUFFEREXT_LEGACY_FLAGS | PyBUF_DEVICE)
#define MASK_NODEVICE (PyBUF_FORMAT | PyBUF_STRIDES)
#define NO_DECLARATION (-100)

/* Make the type of `spec`, declare `declared` (NO_DECLARATION: nothing)
 * with `entry` (NULL: none) and add it to `module`.  0 or -1. */
static int
add_exporter_type(PyObject *module, PyType_Spec *spec, int declared,
                  BufferExt_GetBufferExProc entry)
{
    const char *name = strrchr(spec->name, '.') + 1;
    PyObject *type = PyType_FromSpec(spec);

    if (type == NULL) {
        return -1;
    }
    if (declared != NO_DECLARATION &&
        (entry != NULL
             ? BufferExt_SetExtendedGetBuffer((PyTypeObject *)type, declared,
                                              entry)
             : BufferExt_SetSupportedFlags((PyTypeObject *)type,
                                           declared)) < 0) {
        Py_DECREF(type);
        return -1;
    }
    if (PyModule_AddObject(module, name, type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

/* ---- the configurable liar -------------------------------------------- */

/* Configurable(block_size, len, itemsize, ndim, format=None, shape=None,
 * strides=None, suboffsets=None, readonly=False, device=None,
 * info="valid", offset=0): an exporter that answers every request with
 * exactly these fields, whatever was asked (it honours no request flag),
 * over a zeroed block of block_size bytes (buf = block + offset).  device
 * is None, "bufferext.cuda", "bufferext.ve" or a foreign name; info is
 * "valid", "null" or "bad_version".  The fuzz corpus and the property
 * test (tests/test_hostile.py, tests/test_property_exporters.py) drive it;
 * the arrays hold PyBUF_MAX_NDIM + 8 entries (zeros past those given), so
 * a consumer that trusts an ndim up to that reads no further than ours. */
#define CONF_DIMS (PyBUF_MAX_NDIM + 8)

typedef struct {
    PyObject_HEAD
    char *block;
    Py_ssize_t block_size, len, itemsize, offset;
    int ndim, readonly, info_mode;
    char *format;                     /* owned copy, or NULL */
    Py_ssize_t *dims[3];              /* shape, strides, suboffsets */
    char device[64];
    int has_device;
    union {
        BufferExt_CUDADeviceInfo cuda;
        BufferExt_VEDeviceInfo ve;
    } info;
    Py_ssize_t exports;
} ConfObject;

#define Conf_CAST(op) ((ConfObject *)(op))

/* dims[which] from a tuple of ints, or NULL for None.  0 or -1. */
static int
conf_dims(ConfObject *self, int which, PyObject *values)
{
    Py_ssize_t i, n;

    if (values == Py_None) {
        return 0;
    }
    if (!PyTuple_Check(values) || PyTuple_GET_SIZE(values) > CONF_DIMS) {
        PyErr_SetString(PyExc_TypeError, "Configurable: shape, strides and "
                        "suboffsets are None or short tuples of ints");
        return -1;
    }
    self->dims[which] =
        (Py_ssize_t *)PyMem_Calloc(CONF_DIMS, sizeof(Py_ssize_t));
    if (self->dims[which] == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    n = PyTuple_GET_SIZE(values);
    for (i = 0; i < n; i++) {
        self->dims[which][i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(values, i));
        if (self->dims[which][i] == -1 && PyErr_Occurred()) {
            return -1;
        }
    }
    return 0;
}

static PyObject *
conf_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {
        (char *)"block_size", (char *)"len", (char *)"itemsize",
        (char *)"ndim", (char *)"format", (char *)"shape", (char *)"strides",
        (char *)"suboffsets", (char *)"readonly", (char *)"device",
        (char *)"info", (char *)"offset", NULL};
    Py_ssize_t block_size, len, itemsize, offset = 0;
    int ndim, readonly = 0;
    const char *format = NULL, *device = NULL, *info = "valid";
    PyObject *shape = Py_None, *strides = Py_None, *suboffsets = Py_None;
    ConfObject *self;

    if (!PyArg_ParseTupleAndKeywords(
            args, kwargs, "nnni|zOOOpzsn:Configurable", kwlist, &block_size,
            &len, &itemsize, &ndim, &format, &shape, &strides, &suboffsets,
            &readonly, &device, &info, &offset)) {
        return NULL;
    }
    if (block_size < 0 || block_size > (1 << 24) || offset < 0 ||
        offset > block_size || (device && strlen(device) >= 64)) {
        PyErr_SetString(PyExc_ValueError, "Configurable: block_size in "
                        "[0, 2**24], offset in [0, block_size], short device");
        return NULL;
    }
    self = (ConfObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->block = (char *)PyMem_Calloc((size_t)block_size + 1, 1);
    self->format = format ? (char *)PyMem_Malloc(strlen(format) + 1) : NULL;
    if (self->block == NULL || (format && self->format == NULL)) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    if (format) {
        strcpy(self->format, format);
    }
    self->block_size = block_size;
    self->len = len;
    self->itemsize = itemsize;
    self->offset = offset;
    self->ndim = ndim;
    self->readonly = readonly;
    self->has_device = device != NULL;
    if (device) {
        strcpy(self->device, device);
    }
    self->info_mode = strcmp(info, "null") == 0 ? 0
                      : strcmp(info, "bad_version") == 0 ? 2 : 1;
    exporter_fill_info_for(&self->info.cuda, &self->info.ve,
                           device ? device : "", self);
    if (self->info_mode == 2) {
        self->info.cuda.version = 2u << 16;   /* ve's version is first too */
    }
    if (conf_dims(self, 0, shape) < 0 || conf_dims(self, 1, strides) < 0 ||
        conf_dims(self, 2, suboffsets) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void
conf_dealloc(PyObject *op)
{
    ConfObject *self = Conf_CAST(op);
    PyTypeObject *tp = Py_TYPE(op);
    int i;

    PyMem_Free(self->block);
    PyMem_Free(self->format);
    for (i = 0; i < 3; i++) {
        PyMem_Free(self->dims[i]);
    }
    tp->tp_free(op);
    Py_DECREF(tp);
}

static int
conf_export(PyObject *op, Py_buffer *view, int flags, Py_buffer_extended *ext)
{
    ConfObject *self = Conf_CAST(op);
    const char *device = self->has_device ? self->device : NULL;

    view->obj = NULL;
    if (BufferExt_SetDevice(ext, op, flags, device,
                            device && self->info_mode ? &self->info
                                                      : NULL) < 0) {
        return -1;
    }
    view->buf = self->block + self->offset;
    view->len = self->len;
    view->readonly = self->readonly;
    view->itemsize = self->itemsize;
    view->format = self->format;
    view->ndim = self->ndim;
    view->shape = self->dims[0];
    view->strides = self->dims[1];
    view->suboffsets = self->dims[2];
    view->internal = NULL;
    view->obj = Py_NewRef(op);
    self->exports++;
    return 0;
}

BUFFEREXT_DEFINE_GETBUFFER(conf_getbuffer, conf_export);

static void
conf_releasebuffer(PyObject *op, Py_buffer *view)
{
    (void)view;
    Conf_CAST(op)->exports--;
}

static PyObject *
conf_get_exports(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(Conf_CAST(op)->exports);
}

static PyObject *
conf_get_address(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromVoidPtr(Conf_CAST(op)->block);
}

/* The version field of its device_info (CUDA and VE share the first
 * member): an exporter may change it after the gate has read it. */
static PyObject *
conf_get_info_version(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLong(Conf_CAST(op)->info.cuda.version);
}

static int
conf_set_info_version(PyObject *op, PyObject *value, void *closure)
{
    unsigned long v;
    (void)closure;
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "cannot delete info_version");
        return -1;
    }
    v = PyLong_AsUnsignedLong(value);
    if (v == (unsigned long)-1 && PyErr_Occurred()) {
        return -1;
    }
    Conf_CAST(op)->info.cuda.version = (uint32_t)v;
    return 0;
}

static PyGetSetDef conf_getset[] = {
    {(char *)"exports", conf_get_exports, NULL,
     (char *)"number of live exports", NULL},
    {(char *)"info_version", conf_get_info_version, conf_set_info_version,
     (char *)"device_info's version field", NULL},
    {(char *)"address", conf_get_address, NULL,
     (char *)"address of the block", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot conf_slots[] = {
    {Py_tp_new, (void *)conf_new},
    {Py_tp_dealloc, (void *)conf_dealloc},
    {Py_tp_getset, (void *)conf_getset},
    {Py_bf_getbuffer, (void *)conf_getbuffer},
    {Py_bf_releasebuffer, (void *)conf_releasebuffer},
    {0, NULL},
};

static PyType_Spec conf_spec = {
    TC_MODNAME ".Configurable", sizeof(ConfObject), 0, Py_TPFLAGS_DEFAULT,
    conf_slots,
};

/* ---- consumer side ---------------------------------------------------- */

/* Steal `value` into d[key]; -1 on error (value NULL counts as error). */
static int
dict_put(PyObject *d, const char *key, PyObject *value)
{
    int rc;

    if (value == NULL) {
        return -1;
    }
    rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

static PyObject *
ssize_tuple(const Py_ssize_t *values, int n)
{
    PyObject *t;
    int i;

    if (values == NULL) {
        Py_RETURN_NONE;
    }
    t = PyTuple_New(n);
    for (i = 0; t != NULL && i < n; i++) {
        PyObject *item = PyLong_FromSsize_t(values[i]);
        if (item == NULL) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, i, item);
    }
    return t;
}

static PyObject *
optional_str(const char *s)
{
    if (s == NULL) {
        Py_RETURN_NONE;
    }
    return PyUnicode_FromString(s);
}

static PyObject *
optional_address(const void *p)
{
    if (p == NULL) {
        Py_RETURN_NONE;
    }
    return PyLong_FromVoidPtr((void *)p);
}

/* The device_info fields a consumer may read, for the known devices. */
static PyObject *
info_dict(const Py_buffer_extended *ext)
{
    if (!BufferExt_IsDevice(ext) || ext->device_info == NULL) {
        Py_RETURN_NONE;
    }
    if (strcmp(ext->device, BUFFEREXT_DEVICE_CUDA) == 0) {
        const BufferExt_CUDADeviceInfo *cuda =
            (const BufferExt_CUDADeviceInfo *)ext->device_info;
        return Py_BuildValue("{sIsisNsN}", "version", cuda->version,
                             "device", (int)cuda->device,
                             "context", PyLong_FromVoidPtr(cuda->context),
                             "event", optional_address(cuda->event));
    }
    if (strcmp(ext->device, BUFFEREXT_DEVICE_VE) == 0) {
        const BufferExt_VEDeviceInfo *ve =
            (const BufferExt_VEDeviceInfo *)ext->device_info;
        return Py_BuildValue("{sIsisN}", "version", ve->version,
                             "node", (int)ve->node,
                             "proc", PyLong_FromVoidPtr(ve->proc));
    }
    Py_RETURN_NONE;
}

/* Items of a 1-d host buffer of C ints, read through its strides. */
static PyObject *
int_items(const Py_buffer_extended *ext)
{
    const Py_buffer *v = &ext->view;
    Py_ssize_t i, n, step;
    PyObject *list;

    if (BufferExt_IsDevice(ext) || v->format == NULL ||
        strcmp(v->format, "i") != 0 || v->ndim != 1 || v->shape == NULL) {
        Py_RETURN_NONE;
    }
    n = v->shape[0];
    step = v->strides ? v->strides[0] : v->itemsize;
    list = PyList_New(n);
    for (i = 0; list != NULL && i < n; i++) {
        int value;
        PyObject *item;
        memcpy(&value, (const char *)v->buf + i * step, sizeof(int));
        item = PyLong_FromLong(value);
        if (item == NULL) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* Every field of an acquired extended buffer, as a dict. */
static PyObject *
view_dict(PyObject *obj, const Py_buffer_extended *ext)
{
    const Py_buffer *v = &ext->view;
    PyObject *d = PyDict_New();

    if (d == NULL) {
        return NULL;
    }
    if (dict_put(d, "buf", optional_address(v->buf)) < 0 ||
        dict_put(d, "obj_is_exporter", PyBool_FromLong(v->obj == obj)) < 0 ||
        dict_put(d, "len", PyLong_FromSsize_t(v->len)) < 0 ||
        dict_put(d, "itemsize", PyLong_FromSsize_t(v->itemsize)) < 0 ||
        dict_put(d, "readonly", PyBool_FromLong(v->readonly)) < 0 ||
        dict_put(d, "ndim", PyLong_FromLong(v->ndim)) < 0 ||
        dict_put(d, "format", optional_str(v->format)) < 0 ||
        dict_put(d, "shape", ssize_tuple(v->shape, v->ndim)) < 0 ||
        dict_put(d, "strides", ssize_tuple(v->strides, v->ndim)) < 0 ||
        dict_put(d, "suboffsets", ssize_tuple(v->suboffsets, v->ndim)) < 0 ||
        dict_put(d, "flags", PyLong_FromLong(ext->flags)) < 0 ||
        dict_put(d, "ext_flags", PyLong_FromLong(ext->ext_flags)) < 0 ||
        dict_put(d, "device", optional_str(ext->device)) < 0 ||
        dict_put(d, "device_info", optional_address(ext->device_info)) < 0 ||
        dict_put(d, "is_device", PyBool_FromLong(BufferExt_IsDevice(ext))) < 0 ||
        dict_put(d, "info", info_dict(ext)) < 0 ||
        dict_put(d, "items", int_items(ext)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* Fill the extension with garbage, to prove the helper zeroes it. */
static void
poison(Py_buffer_extended *ext)
{
    memset(ext, 0xA5, sizeof(*ext));
}

static int
extension_is_clear(const Py_buffer_extended *ext)
{
    return ext->flags == 0 && ext->ext_flags == 0 && ext->device == NULL &&
           ext->device_info == NULL;
}

/* get_buffer(obj, flags) -> dict: BufferExt_GetBuffer on a poisoned view,
 * every field read, then BufferExt_Release.  On failure the extension must
 * be clear (AssertionError otherwise) and the exception propagates. */
static PyObject *
tc_get_buffer(PyObject *module, PyObject *args)
{
    PyObject *obj, *result;
    Py_buffer_extended ext;
    int flags;

    (void)module;
    if (!PyArg_ParseTuple(args, "Oi:get_buffer", &obj, &flags)) {
        return NULL;
    }
    poison(&ext);
    if (BufferExt_GetBuffer(obj, &ext, flags) < 0) {
        if (!extension_is_clear(&ext)) {
            PyErr_SetString(PyExc_AssertionError,
                            "BufferExt_GetBuffer failed and left the "
                            "extension fields set");
        }
        return NULL;
    }
    result = view_dict(obj, &ext);
    BufferExt_Release(&ext);
    return result;
}

/* plain_get_buffer(obj, flags) -> dict: PyObject_GetBuffer with a plain
 * Py_buffer (the legacy path), for comparisons.  Extension keys are absent. */
static PyObject *
tc_plain_get_buffer(PyObject *module, PyObject *args)
{
    PyObject *obj, *result;
    Py_buffer_extended ext;
    int flags;

    (void)module;
    if (!PyArg_ParseTuple(args, "Oi:plain_get_buffer", &obj, &flags)) {
        return NULL;
    }
    memset(&ext, 0, sizeof(ext));
    if (PyObject_GetBuffer(obj, &ext.view, flags) < 0) {
        return NULL;
    }
    result = view_dict(obj, &ext);
    PyBuffer_Release(&ext.view);
    return result;
}

static PyObject *
tc_check_supports(PyObject *module, PyObject *args)
{
    PyObject *obj;
    int flags;

    (void)module;
    if (!PyArg_ParseTuple(args, "Oi:check_supports", &obj, &flags)) {
        return NULL;
    }
    return PyLong_FromLong(PyObject_CheckBufferSupports(obj, flags));
}

static PyObject *
tc_supported_flags(PyObject *module, PyObject *obj)
{
    int mask;

    (void)module;
    mask = BufferExt_SupportedFlags(obj);
    if (mask < 0) {
        return NULL;
    }
    return PyLong_FromLong(mask);
}

static PyObject *
tc_set_supported_flags(PyObject *module, PyObject *args)
{
    PyObject *type;
    int flags;

    (void)module;
    if (!PyArg_ParseTuple(args, "O!i:set_supported_flags", &PyType_Type,
                          &type, &flags)) {
        return NULL;
    }
    if (BufferExt_SetSupportedFlags((PyTypeObject *)type, flags) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* set_extended_getbuffer(type, flags, with_entry=True) -> None:
 * BufferExt_SetExtendedGetBuffer with the exporter's entry, or NULL. */
static PyObject *
tc_set_extended_getbuffer(PyObject *module, PyObject *args)
{
    PyObject *type;
    int flags, with_entry = 1;

    (void)module;
    if (!PyArg_ParseTuple(args, "O!i|p:set_extended_getbuffer", &PyType_Type,
                          &type, &flags, &with_entry)) {
        return NULL;
    }
    if (BufferExt_SetExtendedGetBuffer(
            (PyTypeObject *)type, flags,
            with_entry ? exporter_getbuffer_ex : NULL) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* is_device(obj, flags) -> bool: acquire, BufferExt_IsDevice, release. */
static PyObject *
tc_is_device(PyObject *module, PyObject *args)
{
    PyObject *obj;
    Py_buffer_extended ext;
    int flags, result;

    (void)module;
    if (!PyArg_ParseTuple(args, "Oi:is_device", &obj, &flags)) {
        return NULL;
    }
    if (BufferExt_GetBuffer(obj, &ext, flags) < 0) {
        return NULL;
    }
    result = BufferExt_IsDevice(&ext);
    BufferExt_Release(&ext);
    return PyBool_FromLong(result);
}

/* is_device_fields(flags, device) -> bool: BufferExt_IsDevice on a view
 * built by hand, for its truth table. */
static PyObject *
tc_is_device_fields(PyObject *module, PyObject *args)
{
    Py_buffer_extended ext;
    const char *device;

    (void)module;
    memset(&ext, 0, sizeof(ext));
    if (!PyArg_ParseTuple(args, "iz:is_device_fields", &ext.flags,
                          &device)) {
        return NULL;
    }
    ext.device = device;
    return PyBool_FromLong(BufferExt_IsDevice(&ext));
}

/* release_twice(obj, flags) -> dict of the fields after two releases. */
static PyObject *
tc_release_twice(PyObject *module, PyObject *args)
{
    PyObject *obj;
    Py_buffer_extended ext;
    int flags;

    (void)module;
    if (!PyArg_ParseTuple(args, "Oi:release_twice", &obj, &flags)) {
        return NULL;
    }
    if (BufferExt_GetBuffer(obj, &ext, flags) < 0) {
        return NULL;
    }
    BufferExt_Release(&ext);
    BufferExt_Release(&ext);
    return Py_BuildValue("{sNsisisNsN}",
                         "obj", PyBool_FromLong(ext.view.obj != NULL),
                         "flags", ext.flags, "ext_flags", ext.ext_flags,
                         "device", optional_str(ext.device),
                         "device_info", optional_address(ext.device_info));
}

/* acquire_loop(obj, flags, n) -> None: n acquire/release pairs; stops at
 * the first failure with its exception. */
static PyObject *
tc_acquire_loop(PyObject *module, PyObject *args)
{
    PyObject *obj;
    Py_buffer_extended ext;
    Py_ssize_t i, n;
    int flags;

    (void)module;
    if (!PyArg_ParseTuple(args, "Oin:acquire_loop", &obj, &flags, &n)) {
        return NULL;
    }
    for (i = 0; i < n; i++) {
        if (BufferExt_GetBuffer(obj, &ext, flags) < 0) {
            return NULL;
        }
        BufferExt_Release(&ext);
    }
    Py_RETURN_NONE;
}

/* failing_loop(obj, flags, n) -> int: n acquires expected to fail; returns
 * how many failed with BufferError (the error is cleared each time). */
static PyObject *
tc_failing_loop(PyObject *module, PyObject *args)
{
    PyObject *obj;
    Py_buffer_extended ext;
    Py_ssize_t i, n, failed = 0;
    int flags;

    (void)module;
    if (!PyArg_ParseTuple(args, "Oin:failing_loop", &obj, &flags, &n)) {
        return NULL;
    }
    for (i = 0; i < n; i++) {
        if (BufferExt_GetBuffer(obj, &ext, flags) == 0) {
            BufferExt_Release(&ext);
            continue;
        }
        if (!PyErr_ExceptionMatches(PyExc_BufferError)) {
            return NULL;
        }
        PyErr_Clear();
        failed++;
    }
    return PyLong_FromSsize_t(failed);
}

/* check_loop(obj, flags, n) -> int: n PyObject_CheckBufferSupports calls,
 * returns how many answered 1. */
static PyObject *
tc_check_loop(PyObject *module, PyObject *args)
{
    PyObject *obj;
    Py_ssize_t i, n, yes = 0;
    int flags;

    (void)module;
    if (!PyArg_ParseTuple(args, "Oin:check_loop", &obj, &flags, &n)) {
        return NULL;
    }
    for (i = 0; i < n; i++) {
        yes += PyObject_CheckBufferSupports(obj, flags);
    }
    return PyLong_FromSsize_t(yes);
}

static PyObject *
tc_cache_stats(PyObject *module, PyObject *noargs)
{
    (void)module;
    (void)noargs;
    return Py_BuildValue("(nn)", BufferExtAccel_CacheStats()[0],
                         BufferExtAccel_CacheStats()[1]);
}

static PyObject *
tc_reset_cache_stats(PyObject *module, PyObject *noargs)
{
    (void)module;
    (void)noargs;
    BufferExtAccel_CacheStats()[0] = 0;
    BufferExtAccel_CacheStats()[1] = 0;
    Py_RETURN_NONE;
}

/* ---- producer helpers called directly --------------------------------- */

/* set_device(exporter, flags, device, with_info, extended=True) -> dict
 * of the extension after BufferExt_SetDevice on a zeroed extended view
 * (the exporter only names the type in errors); `extended` False: as an
 * exporter's function called through its plain getbuffer (ext NULL). */
static PyObject *
tc_set_device(PyObject *module, PyObject *args)
{
    static BufferExt_CUDADeviceInfo info;
    Py_buffer_extended ext;
    PyObject *exporter;
    const char *device;
    int flags, with_info, extended = 1, rc;

    (void)module;
    if (!PyArg_ParseTuple(args, "Oizp|p:set_device", &exporter, &flags,
                          &device, &with_info, &extended)) {
        return NULL;
    }
    memset(&ext, 0, sizeof(ext));
    rc = BufferExt_SetDevice(extended ? &ext : NULL, exporter, flags, device,
                             with_info ? &info : NULL);
    if (rc < 0) {
        if (!extension_is_clear(&ext)) {
            PyErr_SetString(PyExc_AssertionError,
                            "BufferExt_SetDevice failed and wrote fields");
        }
        return NULL;
    }
    return Py_BuildValue("{sisisNsO}", "flags", ext.flags,
                         "ext_flags", ext.ext_flags,
                         "device", optional_str(ext.device),
                         "device_info",
                         ext.device_info == &info ? Py_True : Py_False);
}

/* make_exporter_type(name, declared, entry=True) -> a new subclass of
 * ExporterUndeclared named `name`; declared None = no declaration; with
 * `entry`, the declaration comes with the exporter's typed entry. */
static PyObject *
tc_make_exporter_type(PyObject *module, PyObject *args)
{
    PyObject *name, *declared, *base, *type;
    int flags, entry = 1;

    if (!PyArg_ParseTuple(args, "UO|p:make_exporter_type", &name, &declared,
                          &entry)) {
        return NULL;
    }
    base = PyObject_GetAttrString(module, "ExporterUndeclared");
    if (base == NULL) {
        return NULL;
    }
    type = PyObject_CallFunction((PyObject *)&PyType_Type, "O(O){s()ss}",
                                 name, base, "__slots__", "__module__",
                                 TC_MODNAME);
    Py_DECREF(base);
    if (type == NULL || declared == Py_None) {
        return type;
    }
    flags = (int)PyLong_AsLong(declared);   /* tests pass small ints */
    if ((flags == -1 && PyErr_Occurred()) ||
        (entry ? BufferExt_SetExtendedGetBuffer((PyTypeObject *)type, flags,
                                                exporter_getbuffer_ex)
               : BufferExt_SetSupportedFlags((PyTypeObject *)type,
                                             flags)) < 0) {
        Py_DECREF(type);
        return NULL;
    }
    return type;
}

/* make_immutable_subclass(base) -> a new subclass of `base` that is
 * immutable (Py_TPFLAGS_IMMUTABLETYPE), as an extension may make one of a
 * mutable (Python) class: its own attributes cannot change, but what it
 * inherits from `base` can. */
static PyType_Slot immutable_subclass_slots[] = {
    {0, NULL},
};

static PyType_Spec spec_immutable_subclass = {
    TC_MODNAME ".ImmutableSubclass", 0, 0,
    Py_TPFLAGS_DEFAULT | TC_IMMUTABLE, immutable_subclass_slots,
};

static PyObject *
tc_make_immutable_subclass(PyObject *module, PyObject *args)
{
    PyObject *base;

    (void)module;
    if (!PyArg_ParseTuple(args, "O!:make_immutable_subclass", &PyType_Type,
                          &base)) {
        return NULL;
    }
    return PyType_FromSpecWithBases(&spec_immutable_subclass, base);
}

/* A DLPack exchange allocator's SetError that does what DLPack's header
 * expects of a Python consumer's: sets a Python error (RuntimeError "kind:
 * message").  set_error_address() is its address, for ctypes. */
static void
tc_set_error(void *ctx, const char *kind, const char *message)
{
    (void)ctx;
    PyErr_Format(PyExc_RuntimeError, "%s: %s", kind, message);
}

static PyObject *
tc_set_error_address(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyLong_FromVoidPtr((void *)(uintptr_t)&tc_set_error);
}

#define VARARGS(name) \
    {#name, (PyCFunction)(void (*)(void))tc_##name, METH_VARARGS, NULL}

static PyMethodDef tc_methods[] = {
    VARARGS(get_buffer),
    VARARGS(plain_get_buffer),
    VARARGS(check_supports),
    {"supported_flags", tc_supported_flags, METH_O, NULL},
    VARARGS(set_supported_flags),
    VARARGS(set_extended_getbuffer),
    VARARGS(is_device),
    VARARGS(is_device_fields),
    VARARGS(release_twice),
    VARARGS(acquire_loop),
    VARARGS(failing_loop),
    VARARGS(check_loop),
    {"cache_stats", tc_cache_stats, METH_NOARGS, NULL},
    {"reset_cache_stats", tc_reset_cache_stats, METH_NOARGS, NULL},
    VARARGS(set_device),
    VARARGS(make_exporter_type),
    VARARGS(make_immutable_subclass),
    {"set_error_address", tc_set_error_address, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

/* ---- module ----------------------------------------------------------- */

static int
add_constants(PyObject *module)
{
#define ADD_INT(name, value) \
    if (PyModule_AddIntConstant(module, name, value) < 0) return -1
    ADD_INT("PyBUF_SIMPLE", PyBUF_SIMPLE);
    ADD_INT("PyBUF_WRITABLE", PyBUF_WRITABLE);
    ADD_INT("PyBUF_FORMAT", PyBUF_FORMAT);
    ADD_INT("PyBUF_ND", PyBUF_ND);
    ADD_INT("PyBUF_STRIDES", PyBUF_STRIDES);
    ADD_INT("PyBUF_C_CONTIGUOUS", PyBUF_C_CONTIGUOUS);
    ADD_INT("PyBUF_F_CONTIGUOUS", PyBUF_F_CONTIGUOUS);
    ADD_INT("PyBUF_ANY_CONTIGUOUS", PyBUF_ANY_CONTIGUOUS);
    ADD_INT("PyBUF_INDIRECT", PyBUF_INDIRECT);
    ADD_INT("PyBUF_CONTIG", PyBUF_CONTIG);
    ADD_INT("PyBUF_CONTIG_RO", PyBUF_CONTIG_RO);
    ADD_INT("PyBUF_STRIDED", PyBUF_STRIDED);
    ADD_INT("PyBUF_STRIDED_RO", PyBUF_STRIDED_RO);
    ADD_INT("PyBUF_RECORDS", PyBUF_RECORDS);
    ADD_INT("PyBUF_RECORDS_RO", PyBUF_RECORDS_RO);
    ADD_INT("PyBUF_FULL", PyBUF_FULL);
    ADD_INT("PyBUF_FULL_RO", PyBUF_FULL_RO);
    ADD_INT("PyBUF_READ", PyBUF_READ);
    ADD_INT("PyBUF_WRITE", PyBUF_WRITE);
    ADD_INT("PyBUF_DEVICE", PyBUF_DEVICE);
    ADD_INT("PyBUF_REQUIRED_FLAGS", PyBUF_REQUIRED_FLAGS);
    ADD_INT("BUFFEREXT_LEGACY_FLAGS", BUFFEREXT_LEGACY_FLAGS);
    ADD_INT("BUFFEREXT_EXTENDED_FLAGS", BUFFEREXT_EXTENDED_FLAGS);
    ADD_INT("BUFFEREXT_ABI_VERSION", BUFFEREXT_ABI_VERSION);
    ADD_INT("BUFFEREXT_VERSION_HEX", BUFFEREXT_VERSION_HEX);
    ADD_INT("BUFFEREXT_CUDA_INFO_VERSION", BUFFEREXT_CUDA_INFO_VERSION);
    ADD_INT("BUFFEREXT_VE_INFO_VERSION", BUFFEREXT_VE_INFO_VERSION);
    ADD_INT("MASK_FULL", MASK_FULL);
    ADD_INT("MASK_NODEVICE", MASK_NODEVICE);
    ADD_INT("SIZEOF_PY_BUFFER", (int)sizeof(Py_buffer));
    ADD_INT("SIZEOF_PY_BUFFER_EXTENDED", (int)sizeof(Py_buffer_extended));
#ifdef BUFFEREXT_NATIVE
    ADD_INT("NATIVE", 1);     /* the header maps onto a native CPython */
#else
    ADD_INT("NATIVE", 0);
#endif
#undef ADD_INT
    if (PyModule_AddStringConstant(module, "DEVICE_CUDA",
                                   BUFFEREXT_DEVICE_CUDA) < 0 ||
        PyModule_AddStringConstant(module, "DEVICE_VE",
                                   BUFFEREXT_DEVICE_VE) < 0 ||
        PyModule_AddStringConstant(module, "STANDARD", TC_STANDARD) < 0) {
        return -1;
    }
    return 0;
}

static int
tc_exec(PyObject *module)
{
    if (add_constants(module) < 0 ||
        add_exporter_type(module, &spec_undeclared, NO_DECLARATION,
                          NULL) < 0 ||
        add_exporter_type(module, &spec_legacy, BUFFEREXT_SUPPORTS_LEGACY,
                          exporter_getbuffer_ex) < 0 ||
        add_exporter_type(module, &spec_simple,
                          BUFFEREXT_SUPPORTS_SIMPLE_ONLY,
                          exporter_getbuffer_ex) < 0 ||
        add_exporter_type(module, &spec_full, MASK_FULL,
                          exporter_getbuffer_ex) < 0 ||
        add_exporter_type(module, &spec_nodevice, MASK_NODEVICE,
                          exporter_getbuffer_ex) < 0 ||
        add_exporter_type(module, &spec_noentry, MASK_FULL, NULL) < 0 ||
        add_exporter_type(module, &spec_full_immutable, MASK_FULL,
                          exporter_getbuffer_ex) < 0 ||
        add_exporter_type(module, &conf_spec,
                          BUFFEREXT_LEGACY_FLAGS | PyBUF_DEVICE,
                          conf_getbuffer_ex) < 0) {
        return -1;
    }
    return 0;
}

/* The header must be safe in an extension that runs in interpreters with a
 * GIL of their own (PEP 684) and without the GIL: this one says it is, and
 * tests/test_interpreters.py holds it to that. */
static PyModuleDef_Slot tc_slots[] = {
    {Py_mod_exec, (void *)tc_exec},
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef tc_module = {
    PyModuleDef_HEAD_INIT, TC_MODNAME,
    "Compiled tests of bufferext.h (" TC_STANDARD ").",
    0, tc_methods, tc_slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC
TC_CAT(PyInit_, MODNAME)(void)
{
    return PyModuleDef_Init(&tc_module);
}
