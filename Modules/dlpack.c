/* dlpack.c -- DLPack both ways.  Out: __dlpack__ and __dlpack_device__
 * for every producer type and for BufferView.  The capsule holds one
 * extended-buffer export of the exporter for its whole life, so export
 * counting (and refusing close() meanwhile) comes for free; one allocation
 * per capsule holds the managed tensor, shape and strides.  In: a consumed
 * capsule's tensor owned by a BufferAdapter (at the end of the file). */
#include "adapterobject.h"
#include "cuda_driver.h"
#include "dlpack.h"
#include "dlpack_abi.h"
#include "freelist.h"
#include "producer.h"
#include "state.h"

typedef struct {
    BxDLManagedTensorVersioned versioned;   /* used for 1.x capsules */
    BxDLManagedTensor legacy;               /* used for legacy capsules */
    Py_buffer_extended ext;                 /* the held export */
    int held;
    void *copy;                             /* copy=True: our own bytes */
    int64_t dims[];                         /* copy=True: shape, strides */
} dlpack_holder;

typedef struct {
    PyObject *stream;
    int versioned;
    BxDLPackVersion version;
    int dl_device;                          /* 0: None; else these two */
    int device_type, device_id;
    int copy;                               /* -1 None, 0 False, 1 True */
} dlpack_options;

#if BUFFEREXT_FREELIST > 0
/* The memory of holders without a copy (every capsule but copy=True's),
 * kept for the next __dlpack__; open while the module is (freelist.h). */
static bufferext_freelist holder_freelist = {.kind = BUFFEREXT_FREELIST_HOLDER};
#endif

/* A holder with room for `dims` int64 (shape and strides of a copy),
 * from the freelist when it needs none.  PyMem: the GIL is held. */
static dlpack_holder *
holder_alloc(size_t dims)
{
#if BUFFEREXT_FREELIST > 0
    dlpack_holder *holder;

    if (dims == 0 &&
        (holder = bufferext_freelist_pop(&holder_freelist)) != NULL) {
        return holder;
    }
#endif
    return PyMem_Malloc(sizeof(dlpack_holder) + sizeof(int64_t) * dims);
}

/* Free a holder, with the GIL held (a capsule's destructor, a deleter
 * after PyGILState_Ensure). */
static void
holder_free_locked(dlpack_holder *holder)
{
    if (holder->held) {
        BufferExt_Release(&holder->ext);
    }
    if (holder->copy != NULL) {
        PyMem_RawFree(holder->copy);
    }
#if BUFFEREXT_FREELIST > 0
    else if (bufferext_freelist_push(&holder_freelist, holder)) {
        return;
    }
#endif
    PyMem_Free(holder);          /* pymalloc: freed with the GIL held */
}

void
bufferext_dlpack_freelist_open(void)
{
#if BUFFEREXT_FREELIST > 0
    bufferext_freelist_open(&holder_freelist, PyMem_Free);
#endif
}

void
bufferext_dlpack_freelist_clear(void)
{
#if BUFFEREXT_FREELIST > 0
    bufferext_freelist_close(&holder_freelist);
#endif
}

/* Free a holder from a deleter: on any thread, with or without the GIL,
 * and at interpreter shutdown (then it leaks rather than touch a dead
 * runtime). */
static void
holder_free(dlpack_holder *holder)
{
    PyGILState_STATE gil;

    if (!Py_IsInitialized()) {
        return;
    }
    gil = PyGILState_Ensure();
    holder_free_locked(holder);
    PyGILState_Release(gil);
}

/* dlpack.h: bufferext_acquire_own.  They honour every request flag: no
 * capability lookup. */
int
bufferext_acquire_own(PyObject *exporter, Py_buffer_extended *ext)
{
    PyBufferProcs *procs = Py_TYPE(exporter)->tp_as_buffer;
    const BufferExt_GetBufferEntry *entry;

    BufferExtInternal_ClearExtension(ext);
    /* a CPUBuffer's getbuffer is its own: no search */
    entry = procs != NULL &&
                    procs->bf_getbuffer == bufferext_cpubuffer_entry->getbuffer
                ? bufferext_cpubuffer_entry
                : bufferext_own_entry(exporter);
    return entry == NULL ? -1
                         : entry->getbuffer_ex(exporter, ext,
                                               PyBUF_RECORDS_RO | PyBUF_DEVICE);
}

static void
deleter_versioned(BxDLManagedTensorVersioned *self)
{
    holder_free((dlpack_holder *)self->manager_ctx);
}

static void
deleter_legacy(BxDLManagedTensor *self)
{
    holder_free((dlpack_holder *)self->manager_ctx);
}

/* The capsule destructor calls the deleter only if nobody consumed it. */
static void
capsule_destructor_versioned(PyObject *capsule)
{
    if (PyCapsule_IsValid(capsule, BX_DLPACK_CAPSULE_VERSIONED)) {
        BxDLManagedTensorVersioned *managed = PyCapsule_GetPointer(
            capsule, BX_DLPACK_CAPSULE_VERSIONED);
        /* a destructor runs with the GIL held: no PyGILState round trip */
        holder_free_locked((dlpack_holder *)managed->manager_ctx);
    }
}

static void
capsule_destructor_legacy(PyObject *capsule)
{
    if (PyCapsule_IsValid(capsule, BX_DLPACK_CAPSULE)) {
        BxDLManagedTensor *managed =
            PyCapsule_GetPointer(capsule, BX_DLPACK_CAPSULE);
        holder_free_locked((dlpack_holder *)managed->manager_ctx);
    }
}

/* Call a consumed tensor's deleter with the GIL held (adapter.c): ours are
 * freed without the PyGILState round trip, so this works while the
 * interpreter finalizes too. */
void
bufferext_dlpack_delete_locked(void *managed, int versioned)
{
    if (versioned) {
        BxDLManagedTensorVersioned *m = managed;
        if (m->deleter == deleter_versioned) {
            holder_free_locked((dlpack_holder *)m->manager_ctx);
        }
        else if (m->deleter != NULL) {
            m->deleter(m);
        }
    }
    else {
        BxDLManagedTensor *m = managed;
        if (m->deleter == deleter_legacy) {
            holder_free_locked((dlpack_holder *)m->manager_ctx);
        }
        else if (m->deleter != NULL) {
            m->deleter(m);
        }
    }
}

/* The DLPack dtype of the exported layout (precomputed by our exporters),
 * or BufferError saying why there is none. */
static int
layout_dtype(PyObject *exporter, const bufferext_export_layout *layout,
             BxDLDataType *out)
{
    uint32_t packed = layout->dl_dtype;
    int why = 0;

    if (layout->format == NULL) {
        return bufferext_refuse(exporter, BUFFEREXT_FORMAT_UNKNOWN);
    }
    if (packed == 0) {
        why = bufferext_format_dlpack(layout->format, layout->itemsize,
                                      &packed);
    }
    if (why == 1) {
        PyErr_Format(PyExc_BufferError,
                     "%.200s: format '%s' is not in native byte order; "
                     "DLPack requires native byte order",
                     Py_TYPE(exporter)->tp_name, layout->format);
        return -1;
    }
    if (why == 3) {
        PyErr_Format(PyExc_BufferError,
                     "%.200s: format '%s' does not match the buffer's "
                     "itemsize %zd", Py_TYPE(exporter)->tp_name,
                     layout->format, layout->itemsize);
        return -1;
    }
    if (why != 0) {
        PyErr_Format(PyExc_BufferError,
                     "%.200s: format '%s' has no DLPack data type",
                     Py_TYPE(exporter)->tp_name, layout->format);
        return -1;
    }
    out->code = (uint8_t)(packed & 0xFF);
    out->bits = (uint8_t)(packed >> 8 & 0xFF);
    out->lanes = (uint16_t)(packed >> 16);
    return 0;
}

/* DLPack device of an acquired extended buffer. */
static int
buffer_device(PyObject *exporter, const Py_buffer_extended *ext,
              BxDLDevice *out)
{
    if (!BufferExt_IsDevice(ext)) {
        out->device_type = BX_kDLCPU;
        out->device_id = 0;
        return 0;
    }
    if (strcmp(ext->device, BUFFEREXT_DEVICE_CUDA) == 0 &&
        ext->device_info != NULL) {
        const BufferExt_CUDADeviceInfo *info = ext->device_info;
        if (info->version >> 16 != BUFFEREXT_CUDA_INFO_MAJOR) {
            PyErr_Format(PyExc_BufferError,
                         "%.200s: CUDA device_info version 0x%x is not "
                         "understood (major %d is)", Py_TYPE(exporter)->tp_name,
                         (unsigned int)info->version,
                         BUFFEREXT_CUDA_INFO_MAJOR);
            return -1;
        }
        out->device_type = BX_kDLCUDA;
        out->device_id = info->device;
        return 0;
    }
    PyErr_Format(PyExc_BufferError,
                 "%.200s: memory on device '%s' has no DLPack device type",
                 Py_TYPE(exporter)->tp_name, ext->device);
    return -1;
}

/* Whether `value` is a tuple of two ints; a bool is no number here, as
 * for stream. */
static int
is_int_pair(PyObject *value)
{
    Py_ssize_t i;

    if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 2) {
        return 0;
    }
    for (i = 0; i < 2; i++) {
        PyObject *item = PyTuple_GET_ITEM(value, i);
        if (!PyLong_Check(item) || PyBool_Check(item)) {
            return 0;
        }
    }
    return 1;
}

static int
parse_version(PyObject *value, dlpack_options *opts)
{
    unsigned long major, minor;

    if (value == Py_None) {
        return 0;
    }
    if (!is_int_pair(value)) {
        PyErr_Format(PyExc_TypeError,
                     "__dlpack__: max_version must be None or a tuple "
                     "(major, minor) of ints, not %R", value);
        return -1;
    }
    major = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(value, 0));
    minor = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(value, 1));
    if (PyErr_Occurred()) {
        PyErr_Format(PyExc_ValueError,
                     "__dlpack__: max_version = %R is out of range", value);
        return -1;
    }
    if (major >= BX_DLPACK_MAJOR) {
        opts->versioned = 1;
        opts->version.major = BX_DLPACK_MAJOR;
        opts->version.minor = BX_DLPACK_MINOR;
        if (major == BX_DLPACK_MAJOR && minor < BX_DLPACK_MINOR) {
            opts->version.minor = (uint32_t)minor;
        }
    }
    return 0;
}

/* dl_device: None, or (device_type, device_id), read here, before the
 * export (an item's __index__ is Python code, a numpy integer's). */
static int
parse_device(PyObject *value, dlpack_options *opts)
{
    if (value == Py_None) {
        return 0;
    }
    if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 2 ||
        PyBool_Check(PyTuple_GET_ITEM(value, 0)) ||
        PyBool_Check(PyTuple_GET_ITEM(value, 1)) ||
        !PyArg_ParseTuple(value, "ii", &opts->device_type,
                          &opts->device_id)) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "__dlpack__: dl_device must be None or a tuple "
                         "(device_type, device_id) of ints, not %R", value);
        }
        else if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "__dlpack__: dl_device = %R is "
                         "out of range (32-bit ints)", value);
        }
        return -1;
    }
    opts->dl_device = 1;
    return 0;
}

static int
parse_options(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
              dlpack_options *opts)
{
    Py_ssize_t i, nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);

    memset(opts, 0, sizeof(*opts));
    opts->copy = -1;
    if (nargs != 0) {
        PyErr_SetString(PyExc_TypeError,
                        "__dlpack__() takes keyword arguments only");
        return -1;
    }
    for (i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i), *value = args[i];
        if (PyUnicode_CompareWithASCIIString(name, "stream") == 0) {
            opts->stream = value;
        }
        else if (PyUnicode_CompareWithASCIIString(name, "max_version") == 0) {
            if (parse_version(value, opts) < 0) {
                return -1;
            }
        }
        else if (PyUnicode_CompareWithASCIIString(name, "dl_device") == 0) {
            if (parse_device(value, opts) < 0) {
                return -1;
            }
        }
        else if (PyUnicode_CompareWithASCIIString(name, "copy") == 0) {
            if (value != Py_None && !PyBool_Check(value)) {
                PyErr_Format(PyExc_TypeError,
                             "__dlpack__: copy must be None or a bool, not "
                             "%R", value);
                return -1;
            }
            opts->copy = value == Py_None ? -1 : value == Py_True;
        }
        else {
            PyErr_Format(PyExc_TypeError,
                         "__dlpack__() got an unexpected keyword argument %R",
                         name);
            return -1;
        }
    }
    return 0;
}

/* Check dl_device and stream against the buffer's device. */
static int
check_target(PyObject *exporter, const dlpack_options *opts,
             const BxDLDevice *device)
{
    if (opts->dl_device &&
        (opts->device_type != (int)device->device_type ||
         opts->device_id != (int)device->device_id)) {
        PyErr_Format(PyExc_BufferError,
                     "%.200s: cannot export to dl_device (%d, %d): the data "
                     "is on (%d, %d) and bufferext copies only within a "
                     "device", Py_TYPE(exporter)->tp_name, opts->device_type,
                     opts->device_id, (int)device->device_type,
                     (int)device->device_id);
        return -1;
    }
    if (device->device_type == BX_kDLCPU && opts->stream != NULL &&
        opts->stream != Py_None) {
        PyErr_Format(PyExc_BufferError,
                     "%.200s: stream must be None for CPU memory, not %R",
                     Py_TYPE(exporter)->tp_name, opts->stream);
        return -1;
    }
    return 0;
}

/* Check the buffer against the request; fill the tensor's device, dtype,
 * data, shape and strides (lent by the exporter's layout, valid while the
 * export is held).  CUDA memory gets its pending work ordered before
 * opts->stream: last, once nothing can refuse, so that a refused request
 * leaves the consumer's stream as it was. */
static int
describe(PyObject *exporter, Py_buffer_extended *ext,
         const dlpack_options *opts, BxDLTensor *tensor)
{
    const bufferext_export_layout *layout = ext->view.internal;
    Py_buffer *v = &ext->view;

    memset(tensor, 0, sizeof(*tensor));
    if (buffer_device(exporter, ext, &tensor->device) < 0 ||
        check_target(exporter, opts, &tensor->device) < 0 ||
        layout_dtype(exporter, layout, &tensor->dtype) < 0) {
        return -1;
    }
    if (opts->copy == 1 && tensor->device.device_type != BX_kDLCPU) {
        PyErr_Format(PyExc_BufferError,
                     "%.200s: copy=True is supported for CPU memory only",
                     Py_TYPE(exporter)->tp_name);
        return -1;
    }
    /* A copy (holder_copy) is new writable memory with its own C-order
     * strides in items: these two limits are the zero-copy export's. */
    if (v->readonly && !opts->versioned && opts->copy != 1) {
        PyErr_Format(PyExc_BufferError,
                     "%.200s: read-only memory needs a versioned DLPack "
                     "capsule (pass max_version=(1, 0) or later)",
                     Py_TYPE(exporter)->tp_name);
        return -1;
    }
    if (v->ndim > 0 && layout->item_strides == NULL && opts->copy != 1) {
        int i;
        for (i = 0; i < v->ndim && v->strides[i] % v->itemsize == 0; i++) {
        }
        PyErr_Format(PyExc_BufferError,
                     "%.200s: stride %zd of dimension %d is not a multiple "
                     "of the item size %zd; DLPack counts strides in items",
                     Py_TYPE(exporter)->tp_name, v->strides[i], i,
                     v->itemsize);
        return -1;
    }
    if (tensor->device.device_type == BX_kDLCUDA &&
        bufferext_cuda_dlpack_sync(bufferext_state_from_type(Py_TYPE(exporter)),
                                   exporter, ext, opts->stream) < 0) {
        return -1;
    }
    tensor->data = v->buf;
    tensor->ndim = v->ndim;
    if (v->ndim > 0) {
        /* Py_ssize_t is int64_t wherever bufferext is built (64-bit) */
        tensor->shape = (int64_t *)v->shape;
        tensor->strides = layout->item_strides;
    }
    return 0;
}

/* copy=True: our own C-ordered copy of the bytes (the holder has room for
 * its own strides: the export is released). */
static int
holder_copy(dlpack_holder *holder, Py_buffer_extended *ext,
            BxDLTensor *tensor)
{
    Py_buffer *v = &ext->view;
    int64_t stride = 1;
    int i, ndim = v->ndim;

    holder->copy = PyMem_RawMalloc(v->len ? (size_t)v->len : 1);
    if (holder->copy == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (PyBuffer_ToContiguous(holder->copy, v, v->len, 'C') < 0) {
        return -1;
    }
    for (i = ndim - 1; i >= 0; i--) {
        int64_t n = v->shape[i] ? v->shape[i] : 1;
        holder->dims[i] = v->shape[i];
        holder->dims[ndim + i] = stride;
        /* only a zero-size copy can get here with strides that overflow
         * (its other dimensions may be huge): any stride will do there */
        if (stride <= INT64_MAX / n) {
            stride *= n;
        }
    }
    tensor->data = holder->copy;
    tensor->shape = ndim ? holder->dims : NULL;
    tensor->strides = ndim ? holder->dims + ndim : NULL;
    BufferExt_Release(ext);
    return 0;
}

/* A managed tensor (versioned or legacy per opts) over one export of
 * `exporter`; NULL with an exception. */
static dlpack_holder *
make_holder(PyObject *exporter, const dlpack_options *opts)
{
    Py_buffer_extended ext;
    BxDLTensor tensor;
    dlpack_holder *holder;
    uint64_t flags;
    size_t dims;

    if (bufferext_acquire_own(exporter, &ext) < 0) {
        return NULL;
    }
    if (describe(exporter, &ext, opts, &tensor) < 0) {
        BufferExt_Release(&ext);
        return NULL;
    }
    dims = opts->copy == 1 ? 2 * (size_t)ext.view.ndim : 0;
    holder = holder_alloc(dims);
    if (holder == NULL) {
        BufferExt_Release(&ext);
        PyErr_NoMemory();
        return NULL;
    }
    holder->copy = NULL;
    holder->held = 0;
    flags = ext.view.readonly ? BX_DLPACK_FLAG_READ_ONLY : 0;
    if (opts->copy == 1) {
        if (holder_copy(holder, &ext, &tensor) < 0) {
            PyMem_RawFree(holder->copy);
            PyMem_Free(holder);
            BufferExt_Release(&ext);
            return NULL;
        }
        flags = BX_DLPACK_FLAG_IS_COPIED;
    }
    else {
        holder->ext = ext;
        holder->held = 1;
    }
    /* only the struct the capsule will hold */
    if (opts->versioned) {
        holder->versioned.version = opts->version;
        holder->versioned.manager_ctx = holder;
        holder->versioned.deleter = deleter_versioned;
        holder->versioned.flags = flags;
        holder->versioned.dl_tensor = tensor;
    }
    else {
        holder->legacy.dl_tensor = tensor;
        holder->legacy.manager_ctx = holder;
        holder->legacy.deleter = deleter_legacy;
    }
    return holder;
}

PyObject *
bufferext_dlpack(PyObject *exporter, PyObject *const *args,
                 Py_ssize_t nargs, PyObject *kwnames)
{
    dlpack_options opts;
    dlpack_holder *holder;
    PyObject *capsule;

    if (parse_options(args, nargs, kwnames, &opts) < 0 ||
        (holder = make_holder(exporter, &opts)) == NULL) {
        return NULL;
    }
    if (opts.versioned) {
        capsule = PyCapsule_New(&holder->versioned,
                                BX_DLPACK_CAPSULE_VERSIONED,
                                capsule_destructor_versioned);
    }
    else {
        capsule = PyCapsule_New(&holder->legacy, BX_DLPACK_CAPSULE,
                                capsule_destructor_legacy);
    }
    if (capsule == NULL) {
        holder_free_locked(holder);
    }
    return capsule;
}

/* ---- the DLPack C exchange API (dlpack_exchange.c) --------------------- */

BxDLManagedTensorVersioned *
bufferext_dlpack_managed(PyObject *exporter)
{
    dlpack_options opts;
    dlpack_holder *holder;

    memset(&opts, 0, sizeof(opts));
    opts.copy = -1;
    opts.versioned = 1;
    opts.version.major = BX_DLPACK_MAJOR;
    opts.version.minor = BX_DLPACK_MINOR;
    holder = make_holder(exporter, &opts);
    return holder == NULL ? NULL : &holder->versioned;
}

/* What describe() makes of an export of a CPUBuffer (`exporter`, whose
 * type's getbuffer is CPUBuffer's), read from its layout without the
 * export: acquiring and releasing one at once would change nothing that
 * outlives this call, and describe() would only copy these fields.  0 with
 * `out` filled, or 1 where describe() has more to say (a closed buffer, a
 * dtype or strides DLPack cannot express, suboffsets): then the general
 * path runs and raises.  Without the GIL the layout is read under an
 * export count (bufferext_exports_read_begin: no close or resize
 * meanwhile), and a buffer another thread is changing takes the general
 * path too. */
static inline int
fill_cpubuffer(PyObject *exporter, BxDLTensor *out)
{
    bufferext_producer *p = BufferExtProducer_CAST(exporter);
    const bufferext_export_layout *layout = &p->layout;
    uint32_t packed;
    int rc = 1;

    if (!bufferext_exports_read_begin(&p->exports)) {
        return 1;
    }
    packed = layout->dl_dtype;
    if (p->open && packed != 0 && layout->suboffsets == NULL &&
        (layout->ndim == 0 || layout->item_strides != NULL)) {
        out->data = layout->buf;
        out->device.device_type = BX_kDLCPU;
        out->device.device_id = 0;
        out->ndim = layout->ndim;
        out->dtype.code = (uint8_t)(packed & 0xFF);
        out->dtype.bits = (uint8_t)(packed >> 8 & 0xFF);
        out->dtype.lanes = (uint16_t)(packed >> 16);
        /* Py_ssize_t is int64_t wherever bufferext is built (64-bit) */
        out->shape = layout->ndim > 0 ? (int64_t *)layout->shape : NULL;
        out->strides = layout->ndim > 0 ? layout->item_strides : NULL;
        out->byte_offset = 0;
        rc = 0;
    }
    bufferext_exports_read_end(&p->exports);
    return rc;
}

/* The general path of bufferext_dlpack_fill: one export, described and
 * released.  Out of line, so that the path above stays a leaf. */
BUFFEREXT_INTERNAL_COLD int
fill_exported(PyObject *exporter, BxDLTensor *out)
{
    dlpack_options opts;
    Py_buffer_extended ext;
    int rc;

    memset(&opts, 0, sizeof(opts));
    opts.copy = -1;
    opts.versioned = 1;
    if (bufferext_acquire_own(exporter, &ext) < 0) {
        return -1;
    }
    /* Non-owning: shape and strides stay valid while the exporter lives
     * unchanged (the DLPack contract: until control returns). */
    rc = describe(exporter, &ext, &opts, out);
    BufferExt_Release(&ext);
    return rc;
}

int
bufferext_dlpack_fill(void *py_object, BxDLTensor *out)
{
    PyObject *exporter = (PyObject *)py_object;
    PyBufferProcs *procs = Py_TYPE(exporter)->tp_as_buffer;

    if (procs != NULL &&
        procs->bf_getbuffer == bufferext_cpubuffer_entry->getbuffer &&
        fill_cpubuffer(exporter, out) == 0) {
        return 0;
    }
    return fill_exported(exporter, out);
}

PyObject *
bufferext_dlpack_device(PyObject *exporter)
{
    Py_buffer_extended ext;
    BxDLDevice device;
    int rc;

    /* the most permissive request: any layout may be asked where it is */
    if (BufferExt_GetBuffer(exporter, &ext, PyBUF_FULL_RO | PyBUF_DEVICE) < 0) {
        return NULL;
    }
    rc = buffer_device(exporter, &ext, &device);
    BufferExt_Release(&ext);
    if (rc < 0) {
        return NULL;
    }
    return Py_BuildValue("(ii)", (int)device.device_type,
                         (int)device.device_id);
}

/* __dlpack__ of the producers (dlpack.h). */
PyObject *
bufferext_producer_dlpack(PyObject *op, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    if (bufferext_producer_check_open(BufferExtProducer_CAST(op)) < 0) {
        return NULL;
    }
    return bufferext_dlpack(op, args, nargs, kwnames);
}

/* ---- import: a consumed tensor into a BufferAdapter -------------------- */

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

/* Fill the adapter from a validated DLTensor. */
static int
adapter_from_tensor(AdapterObject *self, const BxDLTensor *t, int readonly)
{
    bufferext_export_layout *l = &self->layout;
    char format[BUFFEREXT_FORMAT_MAX];
    int i;

    if (dl_format(&t->dtype, format, &l->itemsize) < 0 ||
        adapter_set_format(self, format) < 0 ||
        adapter_dl_device(self, &t->device, "dlpack") < 0) {
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

/* _cuda_bridge_stream(ordinal): the stream _bridges asks a DLPack producer
 * to make CUDA data ready on. */
PyObject *
bufferext_dlpack_bridge_stream(PyObject *module, PyObject *arg)
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

/* Take a DLPack capsule: its tensor in *managed and the capsule renamed
 * "used_...", 1 (versioned) or 0 (legacy); or -1 and its name in *name
 * when it is not an unconsumed DLPack capsule.  No exception is left set
 * and no Python code runs: the caller holds the capsule's critical section
 * (free-threaded builds), which makes the check and the rename one step. */
static int
dl_take(PyObject *capsule, void **managed, const char **name)
{
    int versioned;

    if (PyCapsule_IsValid(capsule, BX_DLPACK_CAPSULE_VERSIONED)) {
        versioned = 1;
    }
    else if (PyCapsule_IsValid(capsule, BX_DLPACK_CAPSULE)) {
        versioned = 0;
    }
    else {
        *name = PyCapsule_GetName(capsule);
        PyErr_Clear();
        return -1;
    }
    /* valid: neither call fails (the pointer is not NULL) */
    *managed = PyCapsule_GetPointer(capsule, versioned
                                    ? BX_DLPACK_CAPSULE_VERSIONED
                                    : BX_DLPACK_CAPSULE);
    (void)PyCapsule_SetName(capsule, versioned ? "used_dltensor_versioned"
                                               : "used_dltensor");
    return versioned;
}

/* Undo dl_take (in the capsule's critical section): the capsule is its
 * producer's again; the exception that refused it is kept. */
static void
dl_give_back(PyObject *capsule, int versioned)
{
    (void)PyCapsule_SetName(capsule, versioned ? BX_DLPACK_CAPSULE_VERSIONED
                                               : BX_DLPACK_CAPSULE);
}

/* _adapter_from_dlpack(source, capsule, readonly[, stream[, device]]):
 * consume the capsule.  `stream` is the CUstream (an int) the producer was
 * asked to make CUDA data ready on; `device`, the (type, id) its
 * __dlpack_device__ named, which the tensor must be on (the stream, or
 * none, was chosen for it), or None: it has none, and CPU memory was asked
 * for. */
PyObject *
bufferext_adapter_from_dlpack(PyObject *module, PyObject *const *args,
                              Py_ssize_t nargs)
{
    bufferext_state *st = bufferext_get_state(module);
    PyObject *capsule;
    void *managed = NULL;
    const BxDLTensor *tensor;
    const char *name = NULL;
    AdapterObject *self;
    int versioned, readonly = 0, force, named_type = -1, named_id = -1;
    int assumed = nargs == 5 && args[4] == Py_None;
    uintptr_t stream = 0;

    if (nargs < 3 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError, "_adapter_from_dlpack(source, "
                        "capsule, readonly[, stream[, device]])");
        return NULL;
    }
    if (!PyCapsule_CheckExact(args[1])) {
        PyErr_Format(PyExc_TypeError,
                     "%.200s.__dlpack__() returned a '%.200s', not a DLPack "
                     "capsule", Py_TYPE(args[0])->tp_name,
                     Py_TYPE(args[1])->tp_name);
        return NULL;
    }
    if (nargs >= 4 && args[3] != Py_None) {
        stream = (uintptr_t)PyLong_AsVoidPtr(args[3]);
        if (PyErr_Occurred()) {
            return NULL;
        }
    }
    if (assumed) {
        named_type = BX_kDLCPU;
        named_id = 0;
    }
    else if (nargs == 5 && !PyArg_ParseTuple(args[4],
                                             "ii:_adapter_from_dlpack",
                                             &named_type, &named_id)) {
        return NULL;
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
    /* Taken first, then read: the capsule is renamed (consumed) in its
     * critical section, so of two threads importing it at once without the
     * GIL exactly one gets the tensor, the other the error a second import
     * gets; a tensor refused below is given back (renamed again).  Held
     * across the checks, a critical section would not be enough: it is
     * suspended whenever the thread waits (the CUDA mutex), and a second
     * importer could then read, and take, the same tensor. */
    BUFFEREXT_LOCKED_BEGIN(capsule);
    versioned = dl_take(capsule, &managed, &name);
    BUFFEREXT_LOCKED_END();
    if (versioned < 0) {
        PyErr_Format(PyExc_BufferError,
                     "dlpack: capsule name is '%s', expected 'dltensor' or "
                     "'dltensor_versioned' (a consumed capsule cannot be "
                     "used twice)", name ? name : "(null)");
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
            goto error;    /* given back: its destructor frees it */
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
    if (nargs == 5 && ((int)tensor->device.device_type != named_type ||
                       (int)tensor->device.device_id != named_id)) {
        if (assumed) {
            PyErr_Format(PyExc_BufferError, "dlpack: %.200s has no "
                         "__dlpack_device__(), so CPU memory (1, 0) was "
                         "asked for, but the tensor __dlpack__() returned "
                         "is on (%d, %d)", Py_TYPE(args[0])->tp_name,
                         (int)tensor->device.device_type,
                         (int)tensor->device.device_id);
        }
        else {
            PyErr_Format(PyExc_BufferError, "dlpack: %.200s.__dlpack_device__"
                         "() said (%d, %d), but the tensor __dlpack__() "
                         "returned is on (%d, %d)", Py_TYPE(args[0])->tp_name,
                         named_type, named_id,
                         (int)tensor->device.device_type,
                         (int)tensor->device.device_id);
        }
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
        adapter_check_host(st, self, (int)tensor->device.device_type,
                           "dlpack") < 0 ||
        (self->device != NULL && adapter_import_cuda(st, self, stream) < 0)) {
        goto error;
    }
    /* CUDA host or managed memory, which the CPU reads: the producer
     * ordered its work before the bridge stream; the host waits for it */
    if (self->device == NULL && stream != 0 &&
        bufferext_cuda_host_wait(st, "as_buffer", NULL, stream) < 0) {
        goto error;
    }
    /* Consumed: from here on the adapter owns the tensor. */
    self->dl_managed = managed;
    self->dl_versioned = versioned;
    return adapter_done(self);
error:
    if (managed != NULL) {      /* refused: the producer's again */
        BUFFEREXT_LOCKED_BEGIN(capsule);
        dl_give_back(capsule, versioned);
        BUFFEREXT_LOCKED_END();
    }
    Py_DECREF(self);
    return NULL;
}
