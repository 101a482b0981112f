/* adapterobject.h -- BufferAdapter's object and what an import fills it
 * with: adapter.c owns the type, dlpack.c, arrow.c and arrayiface.c read
 * their protocols into it.  Inline, so each import runs as it did when all
 * of them lived in adapter.c. */
#ifndef BUFFEREXT_MODULES_ADAPTEROBJECT_H
#define BUFFEREXT_MODULES_ADAPTEROBJECT_H
#include "cuda_driver.h"
#include "dlpack_abi.h"
#include "export.h"
#include "gate.h"
#include "state.h"

typedef struct {
    PyObject_HEAD
    PyObject *source;           /* what as_buffer() was given */
    PyObject *protocol;         /* str: how it was read */
    PyObject *format_obj;       /* bytes holding layout.format */
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
    Py_buffer_extended held;    /* re-exported buffer (policy change), or
                                 * the pin of an array interface's data */
    int has_held;
    bufferext_exports exports;  /* the `exports` attribute (exports.h) */
    PyObject *weakreflist;
} AdapterObject;

#define Adapter_CAST(op) ((AdapterObject *)(op))

/* The device info exports hand out (for device memory): a re-exported
 * buffer's own, held as long as the adapter (its exporter may record a new
 * event in it at each asynchronous write, which a copy would not see), or
 * the adapter's. */
static inline void *
adapter_device_info(AdapterObject *self)
{
    return self->has_held ? self->held.device_info : (void *)&self->info;
}

/* A new, empty adapter of `source`.  Its allocation may run the garbage
 * collector, whose finalizers may run Python code: callers make it before
 * they read what they describe (a capsule someone else could consume).
 * The collector does not track it until adapter_done(): an import may wait
 * without the GIL (an event, a mutex), and another thread walking the
 * collector's objects (gc.get_objects(), gc.get_referrers(), as debuggers
 * and profilers do) would find it half made, its memory not ready. */
static inline AdapterObject *
adapter_new(bufferext_state *st, PyObject *source)
{
    AdapterObject *self = (AdapterObject *)st->BufferAdapter_Type->tp_alloc(
        st->BufferAdapter_Type, 0);

    if (self != NULL) {
        PyObject_GC_UnTrack(self);
        bufferext_exports_init(&self->exports);
        self->source = Py_NewRef(source);
    }
    return self;
}

/* The adapter, made: tracked from now on.  Once, on success. */
static inline PyObject *
adapter_done(AdapterObject *self)
{
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* Say how the memory was read and make room for `ndim` dimensions (no
 * Python code runs).  0, or -1 with an exception. */
static inline int
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
static inline AdapterObject *
adapter_alloc(bufferext_state *st, PyObject *source, const char *protocol,
              int ndim)
{
    AdapterObject *self = adapter_new(st, source);

    if (self != NULL && adapter_set_dims(self, protocol, ndim) < 0) {
        Py_CLEAR(self);
    }
    return self;
}

static inline int
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
static inline int
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
            PyErr_Format(PyExc_BufferError, "%s: shape[%d] = %zd makes "
                         "more than PY_SSIZE_T_MAX bytes of %zd-byte items",
                         who, i, l->shape[i], l->itemsize);
            return -1;
        }
        n *= l->shape[i];
    }
    l->len = n;
    if ((i = bufferext_span_overflow(l->ndim, l->shape, l->strides,
                                     l->itemsize)) >= 0) {
        PyErr_Format(PyExc_BufferError, "%s: strides[%d] = %zd with "
                     "shape[%d] = %zd spans more than PY_SSIZE_T_MAX bytes",
                     who, i, l->strides[i], i, l->shape[i]);
        return -1;
    }
    if (n != 0 && l->buf == NULL) {
        PyErr_Format(PyExc_BufferError,
                     "%s: data pointer is NULL but the size is %zd bytes",
                     who, n);
        return -1;
    }
    if (n != 0) {
        /* the items' bytes, [buf + low, buf + high), in the address space */
        Py_ssize_t low, high;
        uintptr_t at = (uintptr_t)l->buf;
        bufferext_span_bounds(l->ndim, l->shape, l->strides, l->itemsize,
                              &low, &high);
        if ((uintptr_t)-low > at || (uintptr_t)high > UINTPTR_MAX - at + 1) {
            PyErr_Format(PyExc_BufferError, "%s: the items reach bytes %zd "
                         "to %zd from the data pointer %p, outside the "
                         "address space", who, low, high, l->buf);
            return -1;
        }
    }
    bufferext_layout_contiguity(l);
    bufferext_layout_dlpack(l, self->items);
    return 0;
}

/* Where DLPack's (or Arrow's: the same numbering) device is; `who` names
 * the protocol in messages. */
static inline int
adapter_dl_device(AdapterObject *self, const BxDLDevice *device, const char *who)
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

/* Memory of DLPack's or Arrow's `device_type`, its layout made: CUDA host
 * or managed memory must be what the CPU reads (cuda_driver.h). */
static inline int
adapter_check_host(bufferext_state *st, AdapterObject *self,
                   int device_type, const char *who)
{
    if ((device_type != BX_kDLCUDAHost && device_type != BX_kDLCUDAManaged) ||
        self->layout.len == 0) {
        return 0;
    }
    return bufferext_cuda_check_host(st, who, self->layout.buf, device_type);
}

/* CUDA memory: ordinal, context and (for a non-zero stream) an event we own
 * that completes after the producer's work on that stream. */
static inline int
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

#endif
