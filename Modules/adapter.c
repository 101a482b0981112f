/* adapter.c -- BufferAdapter: an extended-buffer exporter over memory that
 * another protocol described (DLPack capsules, the CUDA / VE / NumPy array
 * interfaces, the Arrow C Data / C Device interfaces, or a buffer
 * re-exported with another read-only policy).  Zero-copy: the adapter keeps
 * the source alive (and owns a consumed DLPack tensor or a moved Arrow
 * array) for as long as it or any of its exports lives.  The dispatch and
 * the dict parsing live in Lib/bufferext/_bridges.py. */
#include "arrow.h"
#include "cuda_driver.h"
#include "dlpack.h"
#include "dlpack_abi.h"
#include "export.h"
#include "gate.h"
#include "state.h"

typedef struct {
    PyObject_HEAD
    PyObject *source;           /* what as_buffer() was given */
    PyObject *protocol;         /* str: how it was read */
    PyObject *format_obj;       /* bytes holding layout.format */
    PyObject *keepalive;        /* e.g. a BufferView of the data object */
    bufferext_export_layout layout;
    Py_ssize_t *dims;           /* shape then strides */
    int64_t *items;             /* room for the strides in items */
    const char *device;         /* NULL (CPU) or a device name */
    union {
        BufferExt_CUDADeviceInfo cuda;
        BufferExt_VEDeviceInfo ve;
    } info;
    int owns_event;             /* info.cuda.event was made for us */
    void *dl_managed;           /* consumed DLPack tensor, or NULL */
    int dl_versioned;
    void *arrow;                /* moved Arrow array (arrow.c), or NULL */
    Py_buffer held;             /* re-exported buffer (policy change) */
    int has_held;
    Py_ssize_t exports;
    PyObject *weakreflist;
} AdapterObject;

#define Adapter_CAST(op) ((AdapterObject *)(op))

/* A new, empty adapter of `source`.  Its allocation may run the garbage
 * collector, whose finalizers may run Python code: callers make it before
 * they read what they describe (a capsule someone else could consume). */
static AdapterObject *
adapter_new(bufferext_state *st, PyObject *source)
{
    AdapterObject *self = (AdapterObject *)st->BufferAdapter_Type->tp_alloc(
        st->BufferAdapter_Type, 0);

    if (self != NULL) {
        self->source = Py_NewRef(source);
    }
    return self;
}

/* Say how the memory was read and make room for `ndim` dimensions (no
 * Python code runs).  0, or -1 with an exception. */
static int
adapter_set_dims(AdapterObject *self, const char *protocol, int ndim)
{
    self->protocol = PyUnicode_FromString(protocol);
    self->dims = bufferext_dims_alloc(ndim, &self->items);
    if (self->protocol == NULL || self->dims == NULL) {
        return -1;
    }
    self->layout.ndim = ndim;
    self->layout.shape = self->dims;
    self->layout.strides = self->dims + ndim;
    return 0;
}

/* Both, for callers that read nothing another party can change. */
static AdapterObject *
adapter_alloc(bufferext_state *st, PyObject *source, const char *protocol,
              int ndim)
{
    AdapterObject *self = adapter_new(st, source);

    if (self != NULL && adapter_set_dims(self, protocol, ndim) < 0) {
        Py_CLEAR(self);
    }
    return self;
}

static int
adapter_set_format(AdapterObject *self, const char *format)
{
    self->format_obj = PyBytes_FromString(format);
    if (self->format_obj == NULL) {
        return -1;
    }
    self->layout.format = PyBytes_AS_STRING(self->format_obj);
    return 0;
}

/* Total bytes of a strided layout (0 if any dimension is 0). */
static int
adapter_finish_layout(AdapterObject *self, const char *who)
{
    bufferext_export_layout *l = &self->layout;
    Py_ssize_t n = l->itemsize;
    int i;

    if (bufferext_gate_format(who, l->format, l->itemsize) < 0) {
        return -1;
    }
    for (i = 0; i < l->ndim; i++) {
        if (l->shape[i] < 0) {
            PyErr_Format(PyExc_BufferError, "%s: shape[%d] = %zd is "
                         "negative", who, i, l->shape[i]);
            return -1;
        }
        if (l->shape[i] != 0 && n > PY_SSIZE_T_MAX / l->shape[i]) {
            PyErr_Format(PyExc_BufferError, "%s: shape is too large", who);
            return -1;
        }
        n *= l->shape[i];
    }
    l->len = n;
    if (n != 0 && l->buf == NULL) {
        PyErr_Format(PyExc_BufferError,
                     "%s: data pointer is NULL but the size is %zd bytes",
                     who, n);
        return -1;
    }
    bufferext_layout_contiguity(l);
    bufferext_layout_dlpack(l, self->items);
    return 0;
}

/* ---- DLPack import ---------------------------------------------------- */

static int
dl_format(const BxDLDataType *dt, char *out, Py_ssize_t *itemsize)
{
    static const char ints[] = "bhiq", uints[] = "BHIQ";
    const char *name;
    int bits;
    int index = dt->bits == 8 ? 0 : dt->bits == 16 ? 1 : dt->bits == 32 ? 2
              : dt->bits == 64 ? 3 : -1;

    if (dt->lanes != 1) {
        PyErr_Format(PyExc_BufferError, "dlpack: dtype lanes = %d: only "
                     "scalar (lanes == 1) types have a buffer format",
                     (int)dt->lanes);
        return -1;
    }
    out[1] = out[2] = '\0';
    switch (dt->code) {
    case BX_kDLInt:
        if (index < 0) goto bad;
        out[0] = ints[index];
        break;
    case BX_kDLUInt:
        if (index < 0) goto bad;
        out[0] = uints[index];
        break;
    case BX_kDLFloat:
        if (index < 1 || index > 3) goto bad;
        out[0] = "efd"[index - 1];
        break;
    case BX_kDLComplex:
        if (dt->bits != 32 && dt->bits != 64 && dt->bits != 128) goto bad;
        out[0] = 'Z';
        out[1] = dt->bits == 32 ? 'e' : dt->bits == 64 ? 'f' : 'd';
        break;
    case BX_kDLBool:
        if (dt->bits != 8) goto bad;
        out[0] = '?';
        break;
    default:
        name = bufferext_lowp_name(dt->code, &bits);
        if (name == NULL || bits != dt->bits) goto bad;
        if (bits % 8 != 0) {
            PyErr_Format(PyExc_BufferError, "dlpack: dtype %s (code=%d, "
                         "bits=%d) packs items into less than a byte; a "
                         "buffer's items are whole bytes", name,
                         (int)dt->code, bits);
            return -1;
        }
        snprintf(out, BUFFEREXT_FORMAT_MAX, "[%s]", name);
        break;
    }
    *itemsize = dt->bits / 8;
    return 0;
bad:
    name = bufferext_lowp_name(dt->code, &bits);
    PyErr_Format(PyExc_BufferError,
                 "dlpack: dtype %s%s(code=%d, bits=%d) has no buffer-protocol "
                 "format", name ? name : "", name ? " " : "", (int)dt->code,
                 (int)dt->bits);
    return -1;
}

/* Where DLPack's (or Arrow's: the same numbering) device is; `who` names
 * the protocol in messages. */
static int
dl_device(AdapterObject *self, const BxDLDevice *device, const char *who)
{
    switch (device->device_type) {
    case BX_kDLCPU:
    case BX_kDLCUDAHost:        /* pinned host memory */
    case BX_kDLCUDAManaged:     /* CPU-accessible managed memory */
        return 0;
    case BX_kDLCUDA:
        self->device = BUFFEREXT_DEVICE_CUDA;
        self->info.cuda.version = BUFFEREXT_CUDA_INFO_VERSION;
        self->info.cuda.device = device->device_id;
        return 0;
    default:
        PyErr_Format(PyExc_BufferError,
                     "%s: device type %d is not supported (CPU, CUDA, "
                     "CUDA host and CUDA managed memory are)", who,
                     (int)device->device_type);
        return -1;
    }
}

/* Fill the adapter from a validated DLTensor. */
static int
adapter_from_tensor(AdapterObject *self, const BxDLTensor *t, int readonly)
{
    bufferext_export_layout *l = &self->layout;
    char format[BUFFEREXT_FORMAT_MAX];
    int i;

    if (dl_format(&t->dtype, format, &l->itemsize) < 0 ||
        adapter_set_format(self, format) < 0 ||
        dl_device(self, &t->device, "dlpack") < 0) {
        return -1;
    }
    for (i = 0; i < t->ndim; i++) {
        l->shape[i] = (Py_ssize_t)t->shape[i];
    }
    if (t->strides == NULL) {        /* allowed before DLPack 1.2 */
        Py_ssize_t stride = l->itemsize;
        for (i = t->ndim - 1; i >= 0; i--) {
            Py_ssize_t n = l->shape[i] ? l->shape[i] : 1;
            l->strides[i] = stride;
            if (i == 0) {
                break;              /* shape[0] makes no stride */
            }
            /* a zero-size dimension elsewhere keeps the total size 0, so
             * the strides must be checked on their own */
            if (stride > PY_SSIZE_T_MAX / n) {
                PyErr_Format(PyExc_BufferError, "dlpack: the C-contiguous "
                             "strides of shape[%d:] overflow", i);
                return -1;
            }
            stride *= n;
        }
    }
    else {
        for (i = 0; i < t->ndim; i++) {
            if (t->strides[i] > PY_SSIZE_T_MAX / l->itemsize ||
                t->strides[i] < -(PY_SSIZE_T_MAX / l->itemsize)) {
                PyErr_Format(PyExc_BufferError, "dlpack: strides[%d] = %lld "
                             "is out of range", i, (long long)t->strides[i]);
                return -1;
            }
            l->strides[i] = (Py_ssize_t)t->strides[i] * l->itemsize;
        }
    }
    if (t->data != NULL &&
        t->byte_offset > UINTPTR_MAX - (uintptr_t)t->data) {
        PyErr_Format(PyExc_BufferError, "dlpack: byte_offset = %llu puts "
                     "the data past the end of the address space",
                     (unsigned long long)t->byte_offset);
        return -1;
    }
    /* in integers: a pointer may not be moved out of its object */
    l->buf = t->data == NULL ? NULL
           : (void *)((uintptr_t)t->data + (uintptr_t)t->byte_offset);
    l->readonly = readonly;
    return adapter_finish_layout(self, "dlpack");
}

static int
check_tensor(const BxDLTensor *t)
{
    int i;

    if (t->ndim < 0 || t->ndim > PyBUF_MAX_NDIM) {
        PyErr_Format(PyExc_BufferError, "dlpack: ndim = %d is out of range "
                     "(0..%d)", (int)t->ndim, PyBUF_MAX_NDIM);
        return -1;
    }
    if (t->ndim > 0 && t->shape == NULL) {
        PyErr_Format(PyExc_BufferError, "dlpack: shape is NULL for ndim = %d",
                     (int)t->ndim);
        return -1;
    }
    for (i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0 || t->shape[i] > PY_SSIZE_T_MAX) {
            PyErr_Format(PyExc_BufferError, "dlpack: shape[%d] = %lld is "
                         "out of range", i, (long long)t->shape[i]);
            return -1;
        }
    }
    return 0;
}

/* CUDA memory: ordinal, context and (for a non-zero stream) an event we own
 * that completes after the producer's work on that stream. */
static int
adapter_import_cuda(bufferext_state *st, AdapterObject *self,
                    uintptr_t stream)
{
    if (bufferext_cuda_import(st, (uintptr_t)self->layout.buf, stream,
                              self->info.cuda.device, &self->info.cuda) < 0) {
        return -1;
    }
    self->owns_event = self->info.cuda.event != NULL;
    return 0;
}

/* _adapter_from_dlpack(source, capsule, readonly[, stream]): consume the
 * capsule.  `stream` is the CUstream (an int) the producer was asked to
 * make CUDA data ready on. */
static PyObject *
adapter_from_dlpack(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    bufferext_state *st = bufferext_get_state(module);
    PyObject *capsule;
    void *managed;
    const BxDLTensor *tensor;
    AdapterObject *self;
    int versioned, readonly = 0, force;

    uintptr_t stream = 0;

    if (nargs < 3 || nargs > 4) {
        PyErr_SetString(PyExc_TypeError, "_adapter_from_dlpack(source, "
                        "capsule, readonly[, stream])");
        return NULL;
    }
    if (!PyCapsule_CheckExact(args[1])) {
        PyErr_Format(PyExc_TypeError,
                     "%.200s.__dlpack__() returned a '%.200s', not a DLPack "
                     "capsule", Py_TYPE(args[0])->tp_name,
                     Py_TYPE(args[1])->tp_name);
        return NULL;
    }
    if (nargs == 4 && args[3] != Py_None) {
        stream = (uintptr_t)PyLong_AsVoidPtr(args[3]);
        if (PyErr_Occurred()) {
            return NULL;
        }
    }
    capsule = args[1];
    force = -1;                        /* readonly=None: as the tensor says */
    if (args[2] != Py_None && (force = PyObject_IsTrue(args[2])) < 0) {
        return NULL;
    }
    /* Everything that can run Python code (the arguments above, the GC of
     * this allocation) comes before the capsule is read: a finalizer could
     * hand the same capsule to another consumer, which renames it and owns
     * (and may free) its tensor. */
    self = adapter_new(st, args[0]);
    if (self == NULL) {
        return NULL;
    }
    if (PyCapsule_IsValid(capsule, BX_DLPACK_CAPSULE_VERSIONED)) {
        versioned = 1;
    }
    else if (PyCapsule_IsValid(capsule, BX_DLPACK_CAPSULE)) {
        versioned = 0;
    }
    else {
        const char *name = PyCapsule_GetName(capsule);
        PyErr_Clear();
        PyErr_Format(PyExc_BufferError,
                     "dlpack: capsule name is '%s', expected 'dltensor' or "
                     "'dltensor_versioned' (a consumed capsule cannot be "
                     "used twice)", name ? name : "(null)");
        goto error;
    }
    managed = PyCapsule_GetPointer(capsule, versioned
                                   ? BX_DLPACK_CAPSULE_VERSIONED
                                   : BX_DLPACK_CAPSULE);
    if (managed == NULL) {
        goto error;
    }
    if (versioned) {
        BxDLManagedTensorVersioned *m = managed;
        if (m->version.major != BX_DLPACK_MAJOR) {
            PyErr_Format(PyExc_BufferError,
                         "dlpack: capsule has DLPack version %u.%u; only "
                         "major version %d is understood",
                         (unsigned)m->version.major,
                         (unsigned)m->version.minor, BX_DLPACK_MAJOR);
            goto error;    /* not consumed: its destructor frees it */
        }
        readonly = (m->flags & BX_DLPACK_FLAG_READ_ONLY) != 0;
        tensor = &m->dl_tensor;
    }
    else {
        tensor = &((BxDLManagedTensor *)managed)->dl_tensor;
    }
    if (check_tensor(tensor) < 0) {
        goto error;
    }
    if (force == 0 && readonly) {
        PyErr_SetString(PyExc_BufferError, "dlpack: the tensor is "
                        "read-only (DLPack READ_ONLY flag) but readonly=False "
                        "was requested");
        goto error;
    }
    /* Validate everything first: a rejected capsule stays its producer's. */
    if (adapter_set_dims(self, versioned ? "dlpack" : "dlpack-legacy",
                         (int)tensor->ndim) < 0 ||
        adapter_from_tensor(self, tensor, force == 1 || readonly) < 0 ||
        (self->device != NULL && adapter_import_cuda(st, self, stream) < 0) ||
        PyCapsule_SetName(capsule, versioned ? "used_dltensor_versioned"
                                             : "used_dltensor") < 0) {
        goto error;
    }
    /* Consumed: from here on the adapter owns the tensor. */
    self->dl_managed = managed;
    self->dl_versioned = versioned;
    return (PyObject *)self;
error:
    Py_DECREF(self);
    return NULL;
}

/* ---- Arrow import -------------------------------------------------------- */

/* _adapter_from_arrow(source, schema, array, device, readonly): import the
 * capsules of __arrow_c_array__ (device False) or __arrow_c_device_array__
 * (True).  Arrow data is immutable: readonly=False is refused. */
static PyObject *
adapter_from_arrow(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    bufferext_state *st = bufferext_get_state(module);
    bufferext_arrow_import in;
    bufferext_export_layout *l;
    AdapterObject *self;
    BxDLDevice where;
    int device;

    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "_adapter_from_arrow(source, "
                        "schema, array, device, readonly)");
        return NULL;
    }
    if ((device = PyObject_IsTrue(args[3])) < 0) {
        return NULL;
    }
    if (args[4] == Py_False) {
        PyErr_SetString(PyExc_BufferError, "arrow: Arrow arrays are "
                        "immutable; readonly=False cannot be honoured");
        return NULL;
    }
    /* As for DLPack: everything that can run Python code (the GC of this
     * allocation) comes before the capsules are read. */
    self = adapter_new(st, args[0]);
    if (self == NULL || bufferext_arrow_read(args[1], args[2], device,
                                             &in) < 0) {
        goto error;
    }
    if (in.device_type != BX_kDLCUDA && in.event != NULL) {
        /* memory the CPU reads at once (CUDA host or managed): the
         * producer's pending work is waited for here, without the GIL, so
         * the capsules are read again after (another thread may have
         * taken the array meanwhile) */
        if (bufferext_cuda_event_wait(st, "arrow", in.event) < 0 ||
            bufferext_arrow_read(args[1], args[2], device, &in) < 0) {
            goto error;
        }
    }
    if (adapter_set_dims(self, device ? "arrow_device" : "arrow", 1) < 0 ||
        adapter_set_format(self, in.format) < 0) {
        goto error;
    }
    l = &self->layout;
    l->shape[0] = in.length;
    l->strides[0] = in.itemsize;
    l->itemsize = in.itemsize;
    l->buf = in.data;
    l->readonly = 1;
    where.device_type = in.device_type;
    where.device_id = (int32_t)in.device_id;
    if (in.device_id != (int64_t)where.device_id && in.device_type != BX_kDLCPU) {
        PyErr_Format(PyExc_BufferError, "arrow: device_id = %lld is out of "
                     "range", (long long)in.device_id);
        goto error;
    }
    if (dl_device(self, &where, "arrow") < 0 ||
        adapter_finish_layout(self, "arrow") < 0) {
        goto error;
    }
    if (self->device != NULL) {
        /* the producer's event (alive until its release), not ours */
        if (bufferext_cuda_import(st, (uintptr_t)l->buf, 0,
                                  self->info.cuda.device,
                                  &self->info.cuda) < 0) {
            goto error;
        }
        self->info.cuda.event = in.event;
    }

    /* Taken: from here on the adapter releases the array. */
    if ((self->arrow = bufferext_arrow_take(&in)) == NULL) {
        goto error;
    }
    return (PyObject *)self;
error:
    Py_XDECREF(self);
    return NULL;
}

/* ---- the dict protocols and re-exported buffers ----------------------- */

static int
adapter_set_device(bufferext_state *st, AdapterObject *self,
                   PyObject *device, uintptr_t handle)
{
    if (device == Py_None) {
        return 0;
    }
    if (PyUnicode_Check(device) &&
        PyUnicode_CompareWithASCIIString(device, BUFFEREXT_DEVICE_CUDA) == 0) {
        self->device = BUFFEREXT_DEVICE_CUDA;
        self->info.cuda.device = 0;
        return adapter_import_cuda(st, self, handle);
    }
    if (PyUnicode_Check(device) &&
        PyUnicode_CompareWithASCIIString(device, BUFFEREXT_DEVICE_VE) == 0) {
        /* The VAI names no node or process: only the VEO context. */
        self->device = BUFFEREXT_DEVICE_VE;
        self->info.ve.version = BUFFEREXT_VE_INFO_VERSION;
        self->info.ve.node = -1;
        self->info.ve.context = (void *)handle;
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "unknown device %R", device);
    return -1;
}

/* _adapter_from_layout(source, protocol, ptr, shape, strides, format,
 *                      itemsize, readonly, device, handle, keepalive): the
 * layout was parsed and checked in Python.  device is None,
 * 'bufferext.cuda' (handle: the CAI stream, 0 when the data is ready) or
 * 'bufferext.ve' (handle: the VAI veo_ctxt, 0 if none); keepalive is held
 * as long as the adapter lives. */
static PyObject *
adapter_from_layout(PyObject *module, PyObject *args)
{
    bufferext_state *st = bufferext_get_state(module);
    PyObject *source, *shape, *strides, *device, *keepalive;
    const char *protocol, *format;
    Py_ssize_t itemsize, i, n;
    unsigned long long ptr, handle;
    int readonly;
    AdapterObject *self;

    if (!PyArg_ParseTuple(args, "OsKO!O!snpOKO:_adapter_from_layout",
                          &source, &protocol, &ptr, &PyTuple_Type, &shape,
                          &PyTuple_Type, &strides, &format, &itemsize,
                          &readonly, &device, &handle, &keepalive)) {
        return NULL;
    }
    n = PyTuple_GET_SIZE(shape);
    if (n > PyBUF_MAX_NDIM || PyTuple_GET_SIZE(strides) != n ||
        itemsize <= 0) {
        PyErr_Format(PyExc_BufferError, "%s: bad layout (ndim %zd, "
                     "itemsize %zd)", protocol, n, itemsize);
        return NULL;
    }
    self = adapter_alloc(st, source, protocol, (int)n);
    if (self == NULL || adapter_set_format(self, format) < 0) {
        Py_XDECREF(self);
        return NULL;
    }
    for (i = 0; i < n; i++) {
        self->layout.shape[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        self->layout.strides[i] =
            PyLong_AsSsize_t(PyTuple_GET_ITEM(strides, i));
    }
    self->keepalive = Py_NewRef(keepalive);
    self->layout.buf = (void *)(uintptr_t)ptr;
    self->layout.itemsize = itemsize;
    self->layout.readonly = readonly;
    if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_OverflowError)) {
        PyErr_Format(PyExc_BufferError, "%s: a shape or stride does not fit "
                     "a Py_ssize_t", protocol);
    }
    if (PyErr_Occurred() || adapter_finish_layout(self, protocol) < 0 ||
        adapter_set_device(st, self, device, (uintptr_t)handle) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* Re-export a buffer exporter with readonly=True (exports become read-only)
 * or False (must be writable): as_buffer(obj, readonly=...) of step 1, and
 * _adapter_from_buffer(source, readonly) for _bridges. */
static PyObject *
adapter_reexport(bufferext_state *st, PyObject *source, int readonly)
{
    Py_buffer_extended ext;
    AdapterObject *self;
    int i, flags;

    flags = (readonly ? PyBUF_FULL_RO : PyBUF_FULL) | PyBUF_DEVICE;
    if (bufferext_gate_acquire(source, &ext, flags) < 0) {
        return NULL;
    }
    self = adapter_alloc(st, source, "buffer", ext.view.ndim);
    if (self == NULL) {
        bufferext_release_ext_raised(&ext);
        return NULL;
    }
    self->held = ext.view;
    self->has_held = 1;
    /* the gate let through a NULL shape only for ndim 0; NULL strides mean
     * C order (PEP 3118; ctypes leaves them NULL) */
    for (i = 0; i < ext.view.ndim; i++) {
        self->layout.shape[i] = ext.view.shape[i];
    }
    if (ext.view.strides != NULL) {
        memcpy(self->layout.strides, ext.view.strides,
               sizeof(Py_ssize_t) * (size_t)ext.view.ndim);
    }
    else {
        bufferext_c_strides(ext.view.ndim, ext.view.shape,
                            ext.view.itemsize, self->layout.strides);
    }
    self->layout.buf = ext.view.buf;
    self->layout.itemsize = ext.view.itemsize;
    self->layout.readonly = readonly || ext.view.readonly;
    self->layout.suboffsets = ext.view.ndim > 0 ? ext.view.suboffsets : NULL;
    if (adapter_set_format(self, ext.view.format ? ext.view.format : "B") < 0) {
        Py_DECREF(self);
        return NULL;
    }
    if (BufferExt_IsDevice(&ext)) {
        /* Only the two device layouts bufferext knows can be carried. */
        if (strcmp(ext.device, BUFFEREXT_DEVICE_CUDA) == 0) {
            self->device = BUFFEREXT_DEVICE_CUDA;
            memcpy(&self->info.cuda, ext.device_info, sizeof(self->info.cuda));
        }
        else if (strcmp(ext.device, BUFFEREXT_DEVICE_VE) == 0) {
            self->device = BUFFEREXT_DEVICE_VE;
            memcpy(&self->info.ve, ext.device_info, sizeof(self->info.ve));
        }
        else {
            PyErr_Format(PyExc_BufferError, "buffer: device '%s' is unknown "
                         "to bufferext and cannot be re-exported",
                         ext.device);
            Py_DECREF(self);
            return NULL;
        }
    }
    if (adapter_finish_layout(self, "buffer") < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyObject *
adapter_from_buffer(PyObject *module, PyObject *args)
{
    PyObject *source;
    int readonly;

    if (!PyArg_ParseTuple(args, "Op:_adapter_from_buffer", &source,
                          &readonly)) {
        return NULL;
    }
    return adapter_reexport(bufferext_get_state(module), source, readonly);
}

/* ---- the exporter ----------------------------------------------------- */

static int
adapter_getbuffer(PyObject *op, Py_buffer *view, int flags)
{
    AdapterObject *self = Adapter_CAST(op);
    Py_buffer_extended *ext = BufferExt_Extended(view, flags);   /* first */
    int rc;

    view->obj = NULL;
    BUFFEREXT_LOCKED_BEGIN(op);
    rc = bufferext_export(op, view, flags, ext, &self->layout, self->device,
                          self->device ? (void *)&self->info : NULL,
                          &self->exports);
    BUFFEREXT_LOCKED_END();
    return rc;
}

static void
adapter_releasebuffer(PyObject *op, Py_buffer *view)
{
    (void)view;
    BUFFEREXT_LOCKED_BEGIN(op);
    Adapter_CAST(op)->exports--;
    BUFFEREXT_LOCKED_END();
}

static int
adapter_traverse(PyObject *op, visitproc visit, void *arg)
{
    AdapterObject *self = Adapter_CAST(op);
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->source);
    Py_VISIT(self->keepalive);
    return 0;
}

static void
adapter_dealloc(PyObject *op)
{
    AdapterObject *self = Adapter_CAST(op);
    PyTypeObject *type = Py_TYPE(op);

    PyObject_GC_UnTrack(op);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs(op);
    }
    if (self->dl_managed != NULL || self->has_held || self->arrow != NULL) {
        /* The producer's deleter or releasebuffer may run Python code: keep
         * any pending exception out of its way. */
        PyObject *type_, *value, *tb;
        PyErr_Fetch(&type_, &value, &tb);
        if (self->dl_managed != NULL) {
            bufferext_dlpack_delete_locked(self->dl_managed,
                                           self->dl_versioned);
        }
        if (self->has_held) {
            PyBuffer_Release(&self->held);
        }
        if (self->arrow != NULL) {
            bufferext_arrow_release(self->arrow);
        }
        PyErr_Restore(type_, value, tb);
    }
    if (self->owns_event) {
        bufferext_cuda_release_event(&self->info.cuda);
    }
    PyMem_Free(self->dims);
    Py_XDECREF(self->format_obj);
    Py_XDECREF(self->keepalive);
    Py_XDECREF(self->protocol);
    Py_XDECREF(self->source);
    type->tp_free(op);
    Py_DECREF(type);
}

static PyObject *
adapter_dlpack(PyObject *op, PyObject *const *args, Py_ssize_t nargs,
               PyObject *kwnames)
{
    return bufferext_dlpack(op, args, nargs, kwnames);
}

static PyObject *
adapter_dlpack_device(PyObject *op, PyObject *unused)
{
    (void)unused;
    return bufferext_dlpack_device(op);
}

static PyMethodDef adapter_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))adapter_dlpack,
     METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, "
     "copy=None)\n--\n\nExport as a DLPack capsule (zero-copy)."},
    {"__dlpack_device__", adapter_dlpack_device, METH_NOARGS,
     "__dlpack_device__($self, /)\n--\n\n(DLPack device type, device id)."},
    BUFFEREXT_ARROW_METHODS(bufferext_arrow_c_array),
    BUFFEREXT_ARROW_DEVICE_METHOD(bufferext_arrow_c_device_array),
    {NULL, NULL, 0, NULL},
};

static PyObject *
adapter_get_source(PyObject *op, void *closure)
{
    (void)closure;
    return Py_NewRef(Adapter_CAST(op)->source);
}

static PyObject *
adapter_get_protocol(PyObject *op, void *closure)
{
    (void)closure;
    return Py_NewRef(Adapter_CAST(op)->protocol);
}

static PyObject *
adapter_get_shape(PyObject *op, void *closure)
{
    AdapterObject *self = Adapter_CAST(op);
    (void)closure;
    return bufferext_tuple_from_ssize(self->layout.ndim, self->layout.shape);
}

static PyObject *
adapter_get_strides(PyObject *op, void *closure)
{
    AdapterObject *self = Adapter_CAST(op);
    (void)closure;
    return bufferext_tuple_from_ssize(self->layout.ndim,
                                      self->layout.strides);
}

static PyObject *
adapter_get_format(PyObject *op, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(Adapter_CAST(op)->layout.format);
}

static PyObject *
adapter_get_readonly(PyObject *op, void *closure)
{
    (void)closure;
    return PyBool_FromLong(Adapter_CAST(op)->layout.readonly);
}

static PyObject *
adapter_get_device(PyObject *op, void *closure)
{
    AdapterObject *self = Adapter_CAST(op);
    (void)closure;
    if (self->device == NULL) {
        Py_RETURN_NONE;
    }
    return PyUnicode_FromString(self->device);
}

static PyObject *
adapter_get_exports(PyObject *op, void *closure)
{
    Py_ssize_t exports;
    (void)closure;

    BUFFEREXT_LOCKED_BEGIN(op);
    exports = Adapter_CAST(op)->exports;
    BUFFEREXT_LOCKED_END();
    return PyLong_FromSsize_t(exports);
}

static PyObject *
adapter_get_ptr(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromVoidPtr(Adapter_CAST(op)->layout.buf);
}

static PyObject *
adapter_get_nbytes(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(Adapter_CAST(op)->layout.len);
}

/* CUDA Array Interface v3 of CUDA memory.  The adapter's rule is an event,
 * CAI's a stream: with an event pending there is no stream to give, so the
 * attribute refuses rather than hand out data that may not be ready. */
static PyObject *
adapter_get_cai(PyObject *op, void *closure)
{
    AdapterObject *self = Adapter_CAST(op);
    PyObject *typestr, *result, *shape, *strides;
    (void)closure;

    if (self->device == NULL ||
        strcmp(self->device, BUFFEREXT_DEVICE_CUDA) != 0) {
        PyErr_SetString(PyExc_AttributeError,
                        "__cuda_array_interface__: the memory is not CUDA "
                        "device memory");
        return NULL;
    }
    if (self->info.cuda.event != NULL) {
        PyErr_SetString(PyExc_BufferError,
                        "__cuda_array_interface__: the data is ready only "
                        "after a CUDA event; use the extended buffer "
                        "protocol or __dlpack__(stream=...)");
        return NULL;
    }
    {
        PyObject *mod = PyImport_ImportModule("bufferext._bridges");
        if (mod == NULL) {
            return NULL;
        }
        typestr = PyObject_CallMethod(mod, "format_to_typestr", "s",
                                      self->layout.format);
        Py_DECREF(mod);
    }
    if (typestr == NULL) {
        return NULL;
    }
    shape = adapter_get_shape(op, NULL);
    strides = self->layout.c_contiguous ? Py_NewRef(Py_None)
                                        : adapter_get_strides(op, NULL);
    if (shape == NULL || strides == NULL) {
        Py_XDECREF(shape);
        Py_XDECREF(strides);
        Py_DECREF(typestr);
        return NULL;
    }
    result = Py_BuildValue("{s:N,s:N,s:(NO),s:N,s:O,s:i}",
                           "shape", shape, "typestr", typestr,
                           "data", PyLong_FromVoidPtr(self->layout.buf),
                           self->layout.readonly ? Py_True : Py_False,
                           "strides", strides, "stream", Py_None,
                           "version", 3);
    return result;
}

#define ADAPTER_ATTR(name, doc) {#name, adapter_get_##name, NULL, doc, NULL}

static PyObject *
adapter_get_array(PyObject *op, void *closure)
{
    (void)closure;
    return bufferext_array_attr(op, Adapter_CAST(op)->device);
}

static PyGetSetDef adapter_getset[] = {
    {"__array__", adapter_get_array, NULL,
     "Present only over device memory, to refuse numpy's conversion.", NULL},
    ADAPTER_ATTR(source, "The object the memory came from."),
    ADAPTER_ATTR(protocol, "How it was read: 'buffer', 'dlpack', "
                 "'dlpack-legacy', 'arrow', 'arrow_device', "
                 "'cuda_array_interface', 've_array_interface' or "
                 "'array_interface'."),
    ADAPTER_ATTR(shape, "Shape, a tuple of ints."),
    ADAPTER_ATTR(strides, "Strides in bytes."),
    ADAPTER_ATTR(format, "struct-module format of an item."),
    ADAPTER_ATTR(readonly, "True if exports are read-only."),
    ADAPTER_ATTR(device, "Device name, or None for CPU memory."),
    ADAPTER_ATTR(exports, "Number of live exports."),
    ADAPTER_ATTR(ptr, "Address of the first item."),
    ADAPTER_ATTR(nbytes, "Size in bytes."),
    {"__cuda_array_interface__", adapter_get_cai, NULL,
     "CUDA Array Interface v3 (CUDA memory only).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *
adapter_repr(PyObject *op)
{
    AdapterObject *self = Adapter_CAST(op);
    PyObject *shape = adapter_get_shape(op, NULL);
    PyObject *device = adapter_get_device(op, NULL), *result = NULL;

    /* device= shows adapter.device: None for CPU memory */
    if (shape != NULL && device != NULL) {
        result = PyUnicode_FromFormat(
            "<BufferAdapter of %.200s via %U: shape=%R format='%s' "
            "device=%R%s>",
            Py_TYPE(self->source)->tp_name, self->protocol, shape,
            self->layout.format, device,
            self->layout.readonly ? " readonly" : "");
    }
    Py_XDECREF(shape);
    Py_XDECREF(device);
    return result;
}

static PyMemberDef adapter_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(AdapterObject, weakreflist),
     READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot adapter_slots[] = {
    {Py_tp_dealloc, adapter_dealloc},
    {Py_tp_traverse, adapter_traverse},
    {Py_tp_repr, adapter_repr},
    {Py_tp_methods, adapter_methods},
    {Py_tp_getset, adapter_getset},
    {Py_tp_members, adapter_members},
    {Py_bf_getbuffer, adapter_getbuffer},
    {Py_bf_releasebuffer, adapter_releasebuffer},
    {Py_tp_doc,
     "An extended-buffer exporter over memory described by another protocol\n"
     "(see bufferext.as_buffer).  Zero-copy; keeps its source alive."},
    {0, NULL},
};

static PyType_Spec adapter_spec = {
    "bufferext.BufferAdapter",
    sizeof(AdapterObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
        Py_TPFLAGS_DISALLOW_INSTANTIATION,
    adapter_slots,
};

static PyObject *
adapter_cuda_bridge_stream(PyObject *module, PyObject *arg)
{
    long ordinal = PyLong_AsLong(arg);
    if (ordinal == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (ordinal < 0 || ordinal > INT_MAX) {
        PyErr_Format(PyExc_BufferError, "as_buffer: CUDA device %R does "
                     "not exist", arg);
        return NULL;
    }
    return bufferext_cuda_bridge_stream(bufferext_get_state(module),
                                        (int)ordinal);
}

/* ---- as_buffer ---------------------------------------------------------- */

#define AS_BUFFER_DOC                                                        \
    "An exporter of the extended buffer protocol for ``obj``, zero-copy.\n" \
    "\n"                                                                     \
    "``readonly=None`` keeps the source's policy, ``True`` makes every\n"    \
    "export read-only, ``False`` requires writable memory (BufferError\n"   \
    "otherwise).  The source stays alive as long as the result or any of\n" \
    "its exports.  Raises TypeError if ``obj`` speaks none of the\n"        \
    "supported protocols, and BufferError (naming the field and the\n"      \
    "value) for malformed descriptions."

/* The protocols as_buffer tries, in order, each written once:
 *   1. a type whose buffer is always CPU memory (exactly one of
 *      bufferext._bridges._CPU_TYPES, numpy's array only with a builtin
 *      dtype), or an exporter that supports PyBUF_DEVICE: its own buffer
 *      is the answer -- here, in C, with no Python frame for the common
 *      case;
 *   1 for numpy's arrays of ml_dtypes' types, then 2.-8.: the Arrow
 *      interfaces, DLPack of device memory, the buffer protocol, DLPack
 *      of CPU memory, then the CUDA, VE and NumPy array interfaces:
 *      bufferext._bridges._dispatch (whose docstring lists them).
 * Those two names of _bridges are fetched on first use (importing it
 * imports numpy), under a mutex never held while Python code runs. */
BUFFEREXT_MUTEX(bridges_mutex);

/* _dispatch and _CPU_TYPES (a tuple of types), as new references.  0, or
 * -1 with an exception. */
static int
bridges(bufferext_state *st, PyObject **dispatch, PyObject **cpu_types)
{
    PyObject *module, *d = NULL, *t = NULL;

    BUFFEREXT_MUTEX_LOCK(bridges_mutex);
    *dispatch = st->as_buffer_dispatch;
    *cpu_types = st->cpu_types;
    Py_XINCREF(*dispatch);
    Py_XINCREF(*cpu_types);
    BUFFEREXT_MUTEX_UNLOCK(bridges_mutex);
    if (*dispatch != NULL) {
        return 0;
    }
    module = PyImport_ImportModule("bufferext._bridges");
    if (module != NULL) {
        d = PyObject_GetAttrString(module, "_dispatch");
        t = d == NULL ? NULL : PyObject_GetAttrString(module, "_CPU_TYPES");
        Py_DECREF(module);
    }
    if (t != NULL && !PyTuple_Check(t)) {
        PyErr_SetString(PyExc_TypeError,
                        "bufferext._bridges._CPU_TYPES must be a tuple");
        Py_CLEAR(t);
    }
    if (t == NULL) {
        Py_XDECREF(d);
        return -1;
    }
    BUFFEREXT_MUTEX_LOCK(bridges_mutex);
    if (st->as_buffer_dispatch == NULL) {      /* else a racing thread won */
        st->as_buffer_dispatch = Py_NewRef(d);
        st->cpu_types = Py_NewRef(t);
    }
    BUFFEREXT_MUTEX_UNLOCK(bridges_mutex);
    *dispatch = d;
    *cpu_types = t;
    return 0;
}

/* Whether numpy's array `obj` holds a user-defined dtype (dtype.isbuiltin
 * 2: ml_dtypes' low-precision floats), whose items numpy exports neither
 * through the buffer protocol nor DLPack: _dispatch reads them by name. */
static int
numpy_user_dtype(bufferext_state *st, PyObject *obj)
{
    PyObject *dtype = PyObject_GetAttr(obj, st->str_dtype), *kind = NULL;
    long builtin = -1;

    if (dtype != NULL) {
        kind = PyObject_GetAttr(dtype, st->str_isbuiltin);
        Py_DECREF(dtype);
    }
    if (kind != NULL) {
        builtin = PyLong_AsLong(kind);
        Py_DECREF(kind);
    }
    PyErr_Clear();                  /* numpy's own attributes: cannot fail */
    return builtin == 2;
}

/* Step 1 above: whether `obj`'s own buffer is the answer (numpy's array,
 * the first of the CPU types, unless its dtype is user-defined). */
static int
passes_through(bufferext_state *st, PyObject *obj, PyObject *cpu_types)
{
    PyTypeObject *type = Py_TYPE(obj);
    Py_ssize_t i;

    for (i = 0; i < PyTuple_GET_SIZE(cpu_types); i++) {
        if ((PyObject *)type == PyTuple_GET_ITEM(cpu_types, i)) {
            return i != 0 || !numpy_user_dtype(st, obj);
        }
    }
    return PyObject_CheckBufferSupports(obj, PyBUF_DEVICE);
}

/* as_buffer(obj, *, readonly=None). */
static PyObject *
adapter_as_buffer(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                  PyObject *kwnames)
{
    bufferext_state *st = bufferext_get_state(module);
    PyObject *obj, *readonly = Py_None, *dispatch, *cpu_types, *result;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);

    if (nargs != 1 || nkw > 1 ||
        (nkw == 1 && PyUnicode_CompareWithASCIIString(
                         PyTuple_GET_ITEM(kwnames, 0), "readonly") != 0)) {
        PyErr_Format(PyExc_TypeError, "as_buffer() takes one positional "
                     "argument, obj, and the keyword argument readonly "
                     "(%zd positional and %zd keyword arguments given)",
                     nargs, nkw);
        return NULL;
    }
    obj = args[0];
    if (nkw == 1) {
        readonly = args[1];
        if (readonly != Py_None && !PyBool_Check(readonly)) {
            PyErr_Format(PyExc_TypeError, "as_buffer: readonly must be None "
                         "or a bool, not %R", readonly);
            return NULL;
        }
    }
    if (bridges(st, &dispatch, &cpu_types) < 0) {
        return NULL;
    }
    if (!passes_through(st, obj, cpu_types)) {
        result = PyObject_CallFunctionObjArgs(dispatch, obj, readonly, NULL);
    }
    else if (readonly == Py_None) {
        result = Py_NewRef(obj);
    }
    else {
        result = adapter_reexport(st, obj, readonly == Py_True);
    }
    Py_DECREF(dispatch);
    Py_DECREF(cpu_types);
    return result;
}

static PyMethodDef adapter_functions[] = {
    {"as_buffer", (PyCFunction)(void (*)(void))adapter_as_buffer,
     METH_FASTCALL | METH_KEYWORDS,
     "as_buffer($module, /, obj, *, readonly=None)\n--\n\n"
     AS_BUFFER_DOC},
    {"_cuda_bridge_stream", adapter_cuda_bridge_stream, METH_O,
     "The CUstream (an int) DLPack producers make CUDA data ready on."},
    {"_adapter_from_dlpack", (PyCFunction)(void (*)(void))adapter_from_dlpack,
     METH_FASTCALL, "Consume a DLPack capsule into a BufferAdapter."},
    {"_adapter_from_arrow", (PyCFunction)(void (*)(void))adapter_from_arrow,
     METH_FASTCALL, "Import Arrow C Data / C Device capsules into a "
     "BufferAdapter."},
    {"_adapter_from_layout", adapter_from_layout, METH_VARARGS,
     "A BufferAdapter over a layout parsed from an interface dict."},
    {"_adapter_from_buffer", adapter_from_buffer, METH_VARARGS,
     "A BufferAdapter re-exporting a buffer with another read-only policy."},
    {NULL, NULL, 0, NULL},
};

int
bufferext_init_adapter(PyObject *module)
{
    bufferext_state *st = bufferext_get_state(module);

    if (PyModule_AddFunctions(module, adapter_functions) < 0 ||
        (st->str_dtype = PyUnicode_InternFromString("dtype")) == NULL ||
        (st->str_isbuiltin = PyUnicode_InternFromString("isbuiltin")) ==
            NULL) {
        return -1;
    }
    if (bufferext_add_type(module, &adapter_spec,
                           BUFFEREXT_LEGACY_FLAGS | PyBUF_DEVICE,
                           &st->BufferAdapter_Type) < 0) {
        return -1;
    }
    bufferext_disallow_instantiation(st->BufferAdapter_Type);
    return 0;
}
