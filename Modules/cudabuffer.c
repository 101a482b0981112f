/* cudabuffer.c -- CUDABuffer, device memory allocated through the CUDA
 * driver API (the table is in cuda_driver.c).  Every buffer owns a retained
 * primary context, a non-blocking stream on which all its work is queued and
 * an event recorded after asynchronous work: that event is what device_info
 * exports (NULL once the stream has been synchronised).  Specification:
 * docs/cuda.rst. */
#include "cuda_driver.h"
#include "arrow.h"
#include "dlpack.h"
#include "loader.h"
#include "producer.h"
#include "state.h"

/* ---- the object -------------------------------------------------------- */

/* The request flags CUDABuffer honours: every legacy flag (its memory is
 * C-contiguous) and PyBUF_DEVICE, which every request must include. */
#define CUDABUFFER_SUPPORTED_FLAGS (BUFFEREXT_LEGACY_FLAGS | PyBUF_DEVICE)

typedef struct {
    bufferext_producer head;
    int busy;                   /* driver calls running without the GIL */
    CUdevice device;
    CUcontext context;          /* retained primary context, or NULL */
    CUstream stream;            /* this buffer's work queue */
    CUevent event;              /* recorded after asynchronous work */
    CUdeviceptr ptr;            /* 0 for zero bytes */
    BufferExt_CUDADeviceInfo info;  /* what exports point to */
} CUDABufferObject;

#define CUDABuffer_CAST(op) ((CUDABufferObject *)(op))

static PyObject *cudabuffer_close(PyObject *op, PyObject *arg);
static CUresult tear_down(CUDABufferObject *self, const char **call);

static void
cudabuffer_free_memory(PyObject *op)
{
    const char *call = NULL;
    /* nobody to report a failure to */
    (void)tear_down((CUDABufferObject *)op, &call);
}

static const bufferext_producer_kind cudabuffer_kind = {
    "CUDABuffer", "release the views, DLPack capsules and Arrow arrays first",
    cudabuffer_free_memory, cudabuffer_close,
};

static int
check_open(CUDABufferObject *self)
{
    return bufferext_producer_check_open(&self->head);
}

/* In the critical section: start a change that no export sees
 * (bufferext_producer_begin_change), also refused while another thread
 * copies without the GIL.  0 (end the change after it) or -1. */
static int
begin_change(CUDABufferObject *self, const char *what)
{
    if (bufferext_producer_begin_change(&self->head, what) < 0) {
        return -1;
    }
    if (self->busy > 0) {
        bufferext_producer_end_change(&self->head);
        PyErr_Format(PyExc_BufferError,
                     "CUDABuffer: cannot %s while another thread copies",
                     what);
        return -1;
    }
    return 0;
}

/* Every operation's first driver call: refused in a forked child. */
static int
ctx_push(CUDABufferObject *self, const char *who)
{
    if (bufferext_cuda_forked()) {
        return bufferext_fork_error(
            bufferext_state_from_type(Py_TYPE(self)), who, "CUDA");
    }
    return CU_CHECK(who, cuCtxPushCurrent_v2, (self->context));
}

/* After asynchronous work: record the event that exports hand out. */
static int
record_event(CUDABufferObject *self, const char *who)
{
    if (CU_CHECK(who, cuEventRecord, (self->event, self->stream)) < 0) {
        return -1;
    }
    /* work queued since the last sync */
    BUFFEREXT_STORE(self->info.event, (void *)self->event);
    return 0;
}

/* A copy between the buffer and host memory, queued on its stream. */
typedef struct {
    int to_host;
    void *host;
    size_t nbytes;
} host_copy;

/* Queue `copy` (NULL: none), then wait for the stream, all without the GIL:
 * a copy to or from pageable host memory returns only once it is done,
 * behind everything queued before it on the stream (a kernel).  The data
 * is then ready.  The caller has pinned the buffer (close refuses
 * meanwhile) and pushed its context. */
static int
stream_sync(CUDABufferObject *self, const char *who, const host_copy *copy)
{
    CUstream stream = self->stream;
    CUdeviceptr ptr = self->ptr;
    const char *call = "cuStreamSynchronize";
    CUresult rc = CUDA_SUCCESS;

    BUFFEREXT_LOCKED_BEGIN((PyObject *)self);
    self->busy++;
    BUFFEREXT_LOCKED_END();
    Py_BEGIN_ALLOW_THREADS
    if (copy != NULL && copy->to_host) {
        call = "cuMemcpyDtoHAsync_v2";
        rc = bufferext_cuda.cuMemcpyDtoHAsync_v2(copy->host, ptr,
                                                 copy->nbytes, stream);
    }
    else if (copy != NULL) {
        call = "cuMemcpyHtoDAsync_v2";
        rc = bufferext_cuda.cuMemcpyHtoDAsync_v2(ptr, copy->host,
                                                 copy->nbytes, stream);
    }
    if (rc == CUDA_SUCCESS) {
        call = "cuStreamSynchronize";
        rc = bufferext_cuda.cuStreamSynchronize(stream);
    }
    Py_END_ALLOW_THREADS
    BUFFEREXT_LOCKED_BEGIN((PyObject *)self);
    self->busy--;
    BUFFEREXT_LOCKED_END();
    if (rc != CUDA_SUCCESS) {
        return bufferext_cuda_error(rc, who, call);
    }
    BUFFEREXT_STORE(self->info.event, NULL);
    return 0;
}

/* Give everything back, in reverse order of set_up.  Never raises; returns
 * the first failed CUresult (and its entry point in *call) or CUDA_SUCCESS.
 * The fields are cleared first (the buffer is then closed), and the driver
 * calls run after, on copies, without the GIL: the stream's wait lasts as
 * long as the work queued on it, and cuMemFree may wait for the whole
 * device.  Whatever another thread does meanwhile finds the buffer closed
 * (in close(), an export that counted itself meets the change begun,
 * exports.h). */
static CUresult
tear_down(CUDABufferObject *self, const char **call)
{
    CUresult first = CUDA_SUCCESS, rc;
    CUcontext context = self->context;
    CUdeviceptr ptr = self->ptr;
    CUevent event = self->event;
    CUstream stream = self->stream;
    CUdevice device = self->device;

#define KEEP(name, args)                                                    \
    do {                                                                    \
        rc = bufferext_cuda.name args;                                      \
        if (rc != CUDA_SUCCESS && first == CUDA_SUCCESS) {                  \
            first = rc;                                                     \
            *call = #name;                                                  \
        }                                                                   \
    } while (0)

    self->head.open = 0;
    self->head.layout.buf = NULL;
    self->ptr = 0;
    self->event = NULL;
    self->stream = NULL;
    self->context = NULL;
    BUFFEREXT_STORE(self->info.event, NULL);
    self->info.context = NULL;
    if (context == NULL || bufferext_cuda_forked()) {
        return first;           /* forked: the parent's resources */
    }
    Py_BEGIN_ALLOW_THREADS
    KEEP(cuCtxPushCurrent_v2, (context));
    if (rc == CUDA_SUCCESS) {
        if (stream != NULL) {
            KEEP(cuStreamSynchronize, (stream));
        }
        if (ptr != 0) {
            KEEP(cuMemFree_v2, (ptr));
        }
        if (event != NULL) {
            KEEP(cuEventDestroy_v2, (event));
        }
        if (stream != NULL) {
            KEEP(cuStreamDestroy_v2, (stream));
        }
        bufferext_cuda_ctx_pop();
    }
    KEEP(cuDevicePrimaryCtxRelease_v2, (device));
    Py_END_ALLOW_THREADS
#undef KEEP
    return first;
}

/* Retain the primary context of `ordinal`, create the stream and event and
 * allocate `nbytes` zeroed bytes.  0, or -1 (the caller tears down). */
static int
set_up(CUDABufferObject *self, int ordinal, Py_ssize_t nbytes)
{
    const char *who = "CUDABuffer";
    int rc;

    if (CU_CHECK(who, cuDeviceGet, (&self->device, ordinal)) < 0 ||
        CU_CHECK(who, cuDevicePrimaryCtxRetain,
                 (&self->context, self->device)) < 0) {
        self->context = NULL;
        return -1;
    }
    if (ctx_push(self, who) < 0) {
        return -1;
    }
    rc = CU_CHECK(who, cuStreamCreate,
                  (&self->stream, CU_STREAM_NON_BLOCKING));
    if (rc == 0) {
        rc = CU_CHECK(who, cuEventCreate,
                      (&self->event, CU_EVENT_DISABLE_TIMING));
    }
    if (rc == 0 && nbytes > 0) {
        CUresult res = bufferext_cuda.cuMemAlloc_v2(&self->ptr, (size_t)nbytes);
        if (res != CUDA_SUCCESS) {
            self->ptr = 0;
            rc = bufferext_cuda_error(res, who, "cuMemAlloc_v2");
            if (res == CUDA_ERROR_OUT_OF_MEMORY) {
                PyErr_Format(PyExc_MemoryError,
                             "CUDABuffer: cannot allocate %zd bytes on CUDA "
                             "device %d: CUDA_ERROR_OUT_OF_MEMORY", nbytes,
                             ordinal);
            }
        }
        else {
            rc = CU_CHECK(who, cuMemsetD8Async,
                          (self->ptr, 0, (size_t)nbytes, self->stream));
        }
    }
    self->head.open = 1;
    if (rc == 0 && nbytes > 0) {
        rc = record_event(self, who);
    }
    bufferext_cuda_ctx_pop();
    return rc;
}

static int
parse_ordinal(PyObject *device, int *ordinal)
{
    long value;

    if (!PyLong_Check(device) || PyBool_Check(device)) {
        PyErr_Format(PyExc_TypeError,
                     "CUDABuffer: device must be an int (a CUDA device "
                     "ordinal), not '%.200s'", Py_TYPE(device)->tp_name);
        return -1;
    }
    value = PyLong_AsLong(device);
    if (value == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        value = -1;
    }
    if (value < 0 || value >= bufferext_cuda_device_count()) {
        PyObject *names = bufferext_cuda_device_names();
        if (names != NULL) {
            PyErr_Format(PyExc_ValueError,
                         "CUDABuffer: device=%R is out of range: %d CUDA "
                         "device(s) found: %R", device, bufferext_cuda_device_count(),
                         names);
            Py_DECREF(names);
        }
        return -1;
    }
    *ordinal = (int)value;
    return 0;
}

static PyObject *
cudabuffer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"shape", "dtype", "device", "readonly", NULL};
    PyObject *shape, *dtype = NULL, *device = NULL;
    int readonly = 0, ordinal = 0;
    bufferext_producer_spec spec;
    bufferext_state *st;
    CUDABufferObject *self;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O$Op:CUDABuffer",
                                     keywords, &shape, &dtype, &device,
                                     &readonly)) {
        return NULL;
    }
    st = bufferext_state_from_type(type);
    if (st == NULL || bufferext_cuda_ready(st) < 0) {
        return NULL;
    }
    /* What runs Python code (the ordinal's and dimensions' __index__, the
     * dtype resolver) runs first, on locals. */
    if ((device != NULL && parse_ordinal(device, &ordinal) < 0) ||
        bufferext_producer_parse("CUDABuffer", st, shape, dtype,
                                 &spec) < 0) {
        return NULL;
    }
    self = (CUDABufferObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        bufferext_dtype_clear(&spec.dt);
        return NULL;
    }
    if (bufferext_producer_setup(&self->head, &cudabuffer_kind, &spec,
                                 readonly) < 0 ||
        set_up(self, ordinal, self->head.layout.len) < 0) {
        Py_DECREF(self);        /* dealloc tears down what was set up */
        return NULL;
    }
    self->head.layout.buf = (void *)(uintptr_t)self->ptr;
    self->info.version = BUFFEREXT_CUDA_INFO_VERSION;
    self->info.device = ordinal;
    self->info.context = self->context;
    return (PyObject *)self;
}

/* ---- the buffer protocol ---------------------------------------------- */

static int
cudabuffer_export(PyObject *op, Py_buffer *view, int flags,
                  Py_buffer_extended *ext)
{
    /* Device memory: only for consumers that asked for PyBUF_DEVICE
     * through the typed entry. */
    return bufferext_producer_export(op, view, flags, ext,
                                     BUFFEREXT_DEVICE_CUDA,
                                     &CUDABuffer_CAST(op)->info);
}

BUFFEREXT_DEFINE_GETBUFFER(cudabuffer_getbuffer, cudabuffer_export);

/* ---- copies ------------------------------------------------------------ */

/* Copy `nbytes` from host memory and wait for the copy: the source may be
 * released as soon as this returns. */
static int
copy_in(CUDABufferObject *self, const char *who, const void *src,
        Py_ssize_t nbytes)
{
    host_copy copy = {0, (void *)src, (size_t)nbytes};
    int rc;

    if (nbytes == 0) {
        return 0;
    }
    if (ctx_push(self, who) < 0) {
        return -1;
    }
    rc = stream_sync(self, who, &copy);
    bufferext_cuda_ctx_pop();
    return rc;
}

static PyObject *
cudabuffer_copy_from_host(PyObject *op, PyObject *source)
{
    const char *who = "CUDABuffer.copy_from_host";
    CUDABufferObject *self = CUDABuffer_CAST(op);
    void *staged;
    const void *src;
    Py_buffer_extended ext;
    int rc = -1;

    if (bufferext_producer_get_source(&self->head, who, source, &ext) < 0) {
        return NULL;
    }
    src = bufferext_contiguous_bytes(&ext.view, &staged);
    if (src != NULL) {
        rc = copy_in(self, who, src, ext.view.len);
    }
    PyMem_RawFree(staged);
    bufferext_release_ext_raised(&ext);
    bufferext_producer_unpin(&self->head);
    return rc < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *
cudabuffer_to_host(PyObject *op, PyObject *unused)
{
    const char *who = "CUDABuffer.to_host";
    CUDABufferObject *self = CUDABuffer_CAST(op);
    PyObject *array;
    Py_buffer view;
    int rc = 0;
    (void)unused;

    /* pinned first: numpy.empty runs Python code (and the GC) */
    if (bufferext_producer_pin(&self->head, who, 0) < 0) {
        return NULL;
    }
    array = bufferext_producer_host_array(&self->head, &view);
    if (array == NULL) {
        bufferext_producer_unpin(&self->head);
        return NULL;
    }
    if (self->head.layout.len > 0 && (rc = ctx_push(self, who)) == 0) {
        host_copy copy = {1, view.buf, (size_t)self->head.layout.len};
        rc = stream_sync(self, who, &copy);
        bufferext_cuda_ctx_pop();
    }
    PyBuffer_Release(&view);
    bufferext_producer_unpin(&self->head);
    if (rc < 0) {
        Py_CLEAR(array);
    }
    return array;
}

/* Queue a device-to-device copy from `src`: our stream first waits for the
 * source's pending work; the source's stream then waits for the copy, so
 * nothing later on the source (a write, close()) overtakes the read. */
static int
copy_device(CUDABufferObject *self, CUDABufferObject *src, const char *who)
{
    int rc = 0;

    if (ctx_push(self, who) < 0) {
        return -1;
    }
    if (src->info.event != NULL) {
        rc = CU_CHECK(who, cuStreamWaitEvent, (self->stream, src->event, 0));
    }
    if (rc == 0) {
        rc = CU_CHECK(who, cuMemcpyDtoDAsync_v2,
                      (self->ptr, src->ptr, (size_t)self->head.layout.len,
                       self->stream));
    }
    if (rc == 0) {
        rc = record_event(self, who);
    }
    if (rc == 0) {
        rc = CU_CHECK(who, cuStreamWaitEvent, (src->stream, self->event, 0));
    }
    bufferext_cuda_ctx_pop();
    return rc;
}

static PyObject *
cudabuffer_copy_from(PyObject *op, PyObject *other)
{
    const char *who = "CUDABuffer.copy_from";
    CUDABufferObject *self = CUDABuffer_CAST(op), *src;
    bufferext_state *st = bufferext_state_from_type(Py_TYPE(op));
    int rc;

    if (st == NULL) {
        return NULL;
    }
    if (!PyObject_TypeCheck(other, st->CUDABuffer_Type)) {
        PyErr_Format(PyExc_TypeError,
                     "%s: source must be a CUDABuffer, not '%.200s' (use "
                     "copy_from_host for host memory)", who,
                     Py_TYPE(other)->tp_name);
        return NULL;
    }
    src = CUDABuffer_CAST(other);
    /* the element types never change: compared by their canonical
     * formats, not by numpy's dtypes (without ml_dtypes every float8 kind
     * is the same 'V1') */
    if (!bufferext_producer_same_type(&src->head, &self->head)) {
        PyErr_Format(PyExc_ValueError,
                     "%s: source dtype %R (format '%s') does not match the "
                     "buffer's dtype %R (format '%s')", who,
                     src->head.dt.dtype, src->head.dt.format,
                     self->head.dt.dtype, self->head.dt.format);
        return NULL;
    }
    if (bufferext_producer_pin(&self->head, who, 1) < 0) {
        return NULL;
    }
    rc = bufferext_producer_pin(&src->head, who, 0);
    if (rc == 0) {
        if (src->head.layout.len != self->head.layout.len) {
            PyErr_Format(PyExc_ValueError,
                         "%s: source has %zd bytes, the buffer %zd", who,
                         src->head.layout.len, self->head.layout.len);
            rc = -1;
        }
        else if (src != self && self->head.layout.len > 0) {
            rc = copy_device(self, src, who);
        }
        bufferext_producer_unpin(&src->head);
    }
    bufferext_producer_unpin(&self->head);
    return rc < 0 ? NULL : Py_NewRef(Py_None);
}

/* ---- fill -------------------------------------------------------------- */

/* The bytes of `value` as one item of the buffer's dtype, into `out`
 * (bufferext._dtypes.fill_item: the kind rule and numpy's conversion, a
 * value past the dtype's range refused).  Runs Python code (numpy, the
 * value's __array__): the caller pins the buffer after it.  0, or -1 with
 * ValueError, OverflowError or what the value raised. */
static int
fill_pattern(CUDABufferObject *self, PyObject *value, char *out)
{
    PyObject *module, *bytes;
    int rc = -1;

    module = PyImport_ImportModule("bufferext._dtypes");
    bytes = module == NULL ? NULL
          : PyObject_CallMethod(module, "fill_item", "OOss", value,
                                self->head.dt.dtype, self->head.dt.format,
                                "CUDABuffer.fill");
    if (bytes != NULL && PyBytes_Check(bytes) &&
        PyBytes_GET_SIZE(bytes) == self->head.dt.itemsize) {
        memcpy(out, PyBytes_AS_STRING(bytes), (size_t)self->head.dt.itemsize);
        rc = 0;
    }
    else if (bytes != NULL) {
        PyErr_Format(PyExc_SystemError, "CUDABuffer.fill: numpy gave %R for "
                     "one item", bytes);
    }
    Py_XDECREF(module);
    Py_XDECREF(bytes);
    return rc;
}

/* The memset width (1, 2 or 4) that writes `pattern` repeated, or 0. */
static int
memset_width(const char *pattern, Py_ssize_t itemsize)
{
    Py_ssize_t i;
    int width;

    for (width = 1; width <= 4; width *= 2) {
        if (itemsize % width != 0) {
            break;
        }
        for (i = width; i < itemsize; i++) {
            if (pattern[i] != pattern[i % width]) {
                break;
            }
        }
        if (i == itemsize) {
            return width;
        }
    }
    return 0;
}

/* Queue a memset of the pattern; 0, -1 with an exception. */
static int
fill_memset(CUDABufferObject *self, const char *pattern, int width,
            const char *who)
{
    size_t n = (size_t)self->head.layout.len / (size_t)width;
    unsigned short u16;
    unsigned int u32;
    int rc;

    if (ctx_push(self, who) < 0) {
        return -1;
    }
    if (width == 1) {
        rc = CU_CHECK(who, cuMemsetD8Async,
                      (self->ptr, (unsigned char)pattern[0], n,
                       self->stream));
    }
    else if (width == 2) {
        memcpy(&u16, pattern, 2);
        rc = CU_CHECK(who, cuMemsetD16Async,
                      (self->ptr, u16, n, self->stream));
    }
    else {
        memcpy(&u32, pattern, 4);
        rc = CU_CHECK(who, cuMemsetD32Async,
                      (self->ptr, u32, n, self->stream));
    }
    if (rc == 0) {
        rc = record_event(self, who);
    }
    bufferext_cuda_ctx_pop();
    return rc;
}

/* No memset writes the pattern: stage it on the host.  0 or -1. */
static int
fill_staged(CUDABufferObject *self, const char *pattern, const char *who)
{
    Py_ssize_t i, itemsize = self->head.dt.itemsize;
    char *staged = PyMem_RawMalloc((size_t)self->head.layout.len);
    int rc;

    if (staged == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < self->head.layout.len; i += itemsize) {
        memcpy(staged + i, pattern, (size_t)itemsize);
    }
    rc = copy_in(self, who, staged, self->head.layout.len);
    PyMem_RawFree(staged);
    return rc;
}

static PyObject *
cudabuffer_fill(PyObject *op, PyObject *value)
{
    const char *who = "CUDABuffer.fill";
    CUDABufferObject *self = CUDABuffer_CAST(op);
    Py_ssize_t itemsize = self->head.dt.itemsize;
    char pattern[32];
    int width, rc;

    /* the value's conversion runs numpy code first; then the buffer is
     * pinned (and checked) for the write */
    if (fill_pattern(self, value, pattern) < 0 ||
        bufferext_producer_pin(&self->head, who, 1) < 0) {
        return NULL;
    }
    width = memset_width(pattern, itemsize);
    rc = self->head.layout.len == 0 ? 0
       : width != 0 ? fill_memset(self, pattern, width, who)
                    : fill_staged(self, pattern, who);
    bufferext_producer_unpin(&self->head);
    return rc < 0 ? NULL : Py_NewRef(Py_None);
}

/* ---- other methods ----------------------------------------------------- */

static PyObject *
cudabuffer_synchronize(PyObject *op, PyObject *unused)
{
    const char *who = "CUDABuffer.synchronize";
    CUDABufferObject *self = CUDABuffer_CAST(op);
    int rc;
    (void)unused;

    /* pinned, as every wait: a close from another thread between the
     * check and the wait would free the stream and release the context */
    if (bufferext_producer_pin(&self->head, who, 0) < 0) {
        return NULL;
    }
    if ((rc = ctx_push(self, who)) == 0) {
        rc = stream_sync(self, who, NULL);
        bufferext_cuda_ctx_pop();
    }
    bufferext_producer_unpin(&self->head);
    return rc < 0 ? NULL : Py_NewRef(Py_None);
}

static PyObject *
cudabuffer_close_impl(PyObject *op, PyObject *unused)
{
    CUDABufferObject *self = CUDABuffer_CAST(op);
    const char *call = NULL;
    CUresult rc;
    (void)unused;

    if (!self->head.open) {
        Py_RETURN_NONE;
    }
    if (begin_change(self, "close") < 0) {
        return NULL;
    }
    rc = tear_down(self, &call);
    bufferext_producer_end_change(&self->head);
    if (rc != CUDA_SUCCESS) {
        bufferext_cuda_error(rc, "CUDABuffer.close", call);
        return NULL;
    }
    Py_RETURN_NONE;
}

static BUFFEREXT_LOCKED_METHOD(cudabuffer_close, cudabuffer_close_impl)

static PyObject *
cudabuffer_dlpack_device(PyObject *op, PyObject *unused)
{
    (void)unused;
    /* closed: ValueError, as every method (a consumer asks this first) */
    if (check_open(CUDABuffer_CAST(op)) < 0) {
        return NULL;
    }
    return Py_BuildValue("(ii)", 2, (int)CUDABuffer_CAST(op)->info.device);
}

/* numpy.asarray() would wrap a refused buffer in an object array. */
static PyObject *
cudabuffer_enter(PyObject *op, PyObject *unused)
{
    (void)unused;
    if (check_open(CUDABuffer_CAST(op)) < 0) {
        return NULL;
    }
    return Py_NewRef(op);
}

static PyMethodDef cudabuffer_methods[] = {
    {"copy_from_host", cudabuffer_copy_from_host, METH_O,
     "copy_from_host($self, source, /)\n--\n\n"
     "Copy any host buffer or array of the same size into the device memory\n"
     "(raw bytes, or items of the same dtype in any layout); returns when\n"
     "the copy is done."},
    {"to_host", cudabuffer_to_host, METH_NOARGS,
     "to_host($self, /)\n--\n\nA numpy array holding a copy of the contents."},
    {"copy_from", cudabuffer_copy_from, METH_O,
     "copy_from($self, other, /)\n--\n\n"
     "Queue a copy of another CUDABuffer of the same size and dtype\n"
     "(asynchronous: exports then carry an event)."},
    {"fill", cudabuffer_fill, METH_O,
     "fill($self, value, /)\n--\n\n"
     "Set every item to value, a scalar of the dtype (asynchronous when a\n"
     "memset can write it)."},
    {"synchronize", cudabuffer_synchronize, METH_NOARGS,
     "synchronize($self, /)\n--\n\n"
     "Wait for the queued work; exports then carry no event."},
    {"close", cudabuffer_close, METH_NOARGS,
     "close($self, /)\n--\n\n"
     "Free the device memory now.  BufferError while exported; closing\n"
     "twice is harmless."},
    {"__dlpack__", (PyCFunction)(void (*)(void))bufferext_producer_dlpack,
     METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, "
     "copy=None)\n--\n\n"
     "Export as a DLPack capsule (zero-copy).  Pending work is ordered\n"
     "before the consumer's stream (None: legacy default stream, -1: no\n"
     "synchronisation)."},
    {"__dlpack_device__", cudabuffer_dlpack_device, METH_NOARGS,
     "__dlpack_device__($self, /)\n--\n\n(2, ordinal): kDLCUDA."},
    BUFFEREXT_ARROW_DEVICE_METHOD(bufferext_producer_arrow_c_device_array),
    {"__array__", (PyCFunction)(void (*)(void))bufferext_refuse_array,
     METH_VARARGS | METH_KEYWORDS,
     "__array__($self, dtype=None, copy=None)\n--\n\n"
     "Refuses: device memory is not CPU memory (use to_host())."},
    {"__enter__", cudabuffer_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\n"
     "Return self (ValueError if closed); the end of the with block closes\n"
     "the buffer."},
    {"__exit__", bufferext_producer_exit, METH_VARARGS,
     BUFFEREXT_PRODUCER_EXIT_DOC},
    {NULL, NULL, 0, NULL},
};

/* ---- attributes ------------------------------------------------------- */

static PyObject *
get_device(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromLong(CUDABuffer_CAST(op)->info.device);
}

/* ptr and the CAI's stream, read with the rest of the state (close
 * zeroes them; synchronize() clears the event). */
typedef struct {
    bufferext_producer_snapshot head;
    CUdeviceptr ptr;
    void *pending_stream;       /* the stream while work is pending */
} cuda_snapshot;

static int
cuda_read(CUDABufferObject *self, cuda_snapshot *now)
{
    bufferext_producer_read(&self->head, &now->head);
    BUFFEREXT_LOCKED_BEGIN((PyObject *)self);
    now->ptr = self->ptr;
    now->pending_stream = BUFFEREXT_LOAD(self->info.event) != NULL
                              ? (void *)self->stream : NULL;
    BUFFEREXT_LOCKED_END();
    if (!now->head.open) {
        PyErr_SetString(PyExc_ValueError, "operation on a closed CUDABuffer");
        return -1;
    }
    return 0;
}

static PyObject *
get_ptr(PyObject *op, void *closure)
{
    cuda_snapshot now;
    (void)closure;

    if (cuda_read(CUDABuffer_CAST(op), &now) < 0) {
        return NULL;
    }
    return PyLong_FromUnsignedLongLong(now.ptr);
}

/* CUDA Array Interface v3.  `stream` is this buffer's own stream while work
 * is pending on it (its event was recorded there, so synchronising with it
 * covers everything), None once the data is ready. */
static PyObject *
get_cuda_array_interface(PyObject *op, void *closure)
{
    CUDABufferObject *self = CUDABuffer_CAST(op);
    cuda_snapshot now;
    PyObject *shape, *stream;
    (void)closure;

    if (cuda_read(self, &now) < 0 ||
        (shape = bufferext_tuple_from_ssize(now.head.ndim,
                                            now.head.shape)) == NULL) {
        return NULL;
    }
    stream = now.pending_stream != NULL
                 ? PyLong_FromVoidPtr(now.pending_stream)
                 : Py_NewRef(Py_None);
    return Py_BuildValue("{s:N,s:O,s:(NO),s:O,s:i,s:N}",
                         "shape", shape, "typestr", self->head.dt.typestr,
                         "data", PyLong_FromUnsignedLongLong(now.ptr),
                         self->head.layout.readonly ? Py_True : Py_False,
                         "strides", Py_None, "version", 3,
                         "stream", stream);
}

static PyGetSetDef cudabuffer_getset[] = {
    BUFFEREXT_PRODUCER_GETSET
    {"device", get_device, NULL, "CUDA device ordinal.", NULL},
    {"ptr", get_ptr, NULL, "Device address (CUdeviceptr) of the first byte; "
                           "0 for zero bytes.", NULL},
    {"__cuda_array_interface__", get_cuda_array_interface, NULL,
     "CUDA Array Interface, version 3.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *
cudabuffer_repr(PyObject *op)
{
    char extra[32];

    PyOS_snprintf(extra, sizeof(extra), ", device=%d",
                  (int)CUDABuffer_CAST(op)->info.device);
    return bufferext_producer_repr(op, extra, "", " (closed)");
}

static PyType_Slot cudabuffer_slots[] = {
    {Py_tp_new, cudabuffer_new},
    {Py_tp_dealloc, bufferext_producer_dealloc},
    {Py_tp_traverse, bufferext_producer_traverse},
    {Py_tp_repr, cudabuffer_repr},
    {Py_tp_methods, cudabuffer_methods},
    {Py_tp_getset, cudabuffer_getset},
    {Py_tp_members, bufferext_producer_members},
    {Py_bf_getbuffer, cudabuffer_getbuffer},
    {Py_bf_releasebuffer, bufferext_producer_releasebuffer},
    {Py_sq_length, bufferext_producer_length},
    {Py_nb_bool, bufferext_producer_bool},
    {Py_tp_doc,
     "CUDABuffer(shape, dtype='float64', *, device=0, readonly=False)\n--\n\n"
     "Zero-filled memory on a CUDA device, allocated in its primary context\n"
     "through the CUDA driver API.  Exported through the extended buffer\n"
     "protocol (PyBUF_DEVICE requests only), DLPack and the CUDA Array\n"
     "Interface v3."},
    {0, NULL},
};

static PyType_Spec cudabuffer_spec = {
    "bufferext.CUDABuffer",
    sizeof(CUDABufferObject),
    0,
    BUFFEREXT_TYPE_FLAGS | Py_TPFLAGS_BASETYPE,
    cudabuffer_slots,
};

int
bufferext_init_cuda(PyObject *module)
{
    return bufferext_add_type(module, &cudabuffer_spec,
                              CUDABUFFER_SUPPORTED_FLAGS,
                              cudabuffer_getbuffer_ex,
                              BUFFEREXT_PRODUCER_LAYOUT,
                              &bufferext_get_state(module)->CUDABuffer_Type);
}
