/* cuda_driver.c -- the CUDA driver table: loaded on first use (libcuda.so.1,
 * or BUFFEREXT_CUDA_DRIVER; "none" disables it) into one table of typed
 * function pointers listed once in cuda_driver.h, cuInit run once, and the
 * driver-level services the rest of the module shares: errors, device
 * names, bufferext.devices() status, the DLPack stream rule, what the
 * bridges need to import CUDA memory described by other protocols, and the
 * host staging of any exporter's CUDA memory for BufferView. */
#include "cuda_driver.h"
#include "loader.h"
#include "state.h"

#define AS_NAME(name, params) #name,
#define AS_ONE(name, params) +1

static const char *const cuda_symbols[] = {CUDA_SYMBOLS(AS_NAME) NULL};
bufferext_cuda_table bufferext_cuda;

/* loader.c fills the table as an array of pointers. */
typedef char cuda_table_is_an_array[
    sizeof(bufferext_cuda) == (0 CUDA_SYMBOLS(AS_ONE)) * sizeof(void *) ? 1 : -1];

static const char *const cuda_defaults[] = {
#ifdef _WIN32
    "nvcuda.dll",
#else
    "libcuda.so.1",
#endif
    NULL,
};

static const bufferext_library_spec cuda_spec = {
    "CUDA driver", "BUFFEREXT_CUDA_DRIVER", cuda_defaults, cuda_symbols,
    (void **)&bufferext_cuda,
};

static bufferext_library cuda_library;

/* cuInit runs once per process; its outcome is kept. */
static struct {
    int tried;
    CUresult rc;
    int count;
    char message[256];
} cuda_init;

/* CUDA state does not survive fork(): a child of a process that ran cuInit
 * may not call the driver (CUDA's rule; the real driver fails or hangs
 * there).  Set in the child by a pthread_atfork handler registered when
 * cuInit succeeded, read by bufferext_cuda_forked. */
#ifndef _WIN32
#  include <pthread.h>
static volatile int cuda_forked;

static void
cuda_atfork_child(void)
{
    cuda_forked = 1;
}
#endif

int
bufferext_cuda_forked(void)
{
#ifndef _WIN32
    return cuda_forked;
#else
    return 0;
#endif
}

/* ---- errors ------------------------------------------------------------ */

static void
error_text(CUresult rc, const char **name, const char **text)
{
    *name = NULL;
    *text = NULL;
    if (bufferext_cuda.cuGetErrorName == NULL ||
        bufferext_cuda.cuGetErrorName(rc, name) != CUDA_SUCCESS || *name == NULL) {
        *name = "unknown CUresult";
    }
    if (bufferext_cuda.cuGetErrorString == NULL ||
        bufferext_cuda.cuGetErrorString(rc, text) != CUDA_SUCCESS || *text == NULL) {
        *text = "no description";
    }
}

int
bufferext_cuda_error(CUresult rc, const char *who, const char *call)
{
    const char *name, *text;

    error_text(rc, &name, &text);
    PyErr_Format(rc == CUDA_ERROR_OUT_OF_MEMORY ? PyExc_MemoryError
                                                : PyExc_RuntimeError,
                 "%s: %s failed: %s (%d): %s", who, call, name, (int)rc,
                 text);
    return -1;
}

/* ---- driver start-up --------------------------------------------------- */

/* cuda_init and bridge_streams, without the GIL */
BUFFEREXT_MUTEX(cuda_mutex);

static void
cuda_init_locked(void)
{
    const char *name, *text, *call;

    if (cuda_init.tried) {
        return;
    }
    cuda_init.tried = 1;
    call = "cuInit";
    cuda_init.rc = bufferext_cuda.cuInit(0);
    if (cuda_init.rc == CUDA_SUCCESS) {
#ifndef _WIN32
        (void)pthread_atfork(NULL, NULL, cuda_atfork_child);
#endif
        call = "cuDeviceGetCount";
        cuda_init.rc = bufferext_cuda.cuDeviceGetCount(&cuda_init.count);
    }
    if (cuda_init.rc == CUDA_ERROR_NO_DEVICE ||
        (cuda_init.rc == CUDA_SUCCESS && cuda_init.count <= 0)) {
        cuda_init.count = 0;
        PyOS_snprintf(cuda_init.message, sizeof(cuda_init.message),
                      "the CUDA driver at %s reports no CUDA device",
                      cuda_library.path);
    }
    else if (cuda_init.rc != CUDA_SUCCESS) {
        error_text(cuda_init.rc, &name, &text);
        PyOS_snprintf(cuda_init.message, sizeof(cuda_init.message),
                      "the CUDA driver at %s failed to start: %s: %s "
                      "(%d): %s", cuda_library.path, call, name,
                      (int)cuda_init.rc, text);
        cuda_init.count = 0;
    }
}

static void
cuda_init_once(void)
{
    BUFFEREXT_MUTEX_LOCK(cuda_mutex);
    cuda_init_locked();
    BUFFEREXT_MUTEX_UNLOCK(cuda_mutex);
}

int
bufferext_cuda_ready(bufferext_state *st)
{
    if (bufferext_library_load(st, &cuda_spec, &cuda_library) < 0) {
        return -1;
    }
    cuda_init_once();
    if (cuda_init.count == 0) {
        PyErr_SetString(st->DeviceUnavailableError, cuda_init.message);
        return -1;
    }
    if (bufferext_cuda_forked()) {
        return bufferext_fork_error(st, "CUDA", "CUDA");
    }
    return 0;
}

PyObject *
bufferext_cuda_device_names(void)
{
    PyObject *names = PyList_New(0);
    int i;

    for (i = 0; names != NULL && i < cuda_init.count; i++) {
        char name[256] = "?";
        CUdevice dev;
        PyObject *item;
        if (bufferext_cuda.cuDeviceGet(&dev, i) != CUDA_SUCCESS ||
            bufferext_cuda.cuDeviceGetName(name, (int)sizeof(name), dev) !=
                CUDA_SUCCESS) {
            PyOS_snprintf(name, sizeof(name), "(name unavailable)");
        }
        name[sizeof(name) - 1] = '\0';
        item = PyUnicode_FromFormat("%d: %s", i, name);
        if (item == NULL || PyList_Append(names, item) < 0) {
            Py_CLEAR(names);
        }
        Py_XDECREF(item);
    }
    return names;
}


int
bufferext_cuda_device_count(void)
{
    return cuda_init.count;
}

/* ---- DLPack stream rule (called by dlpack.c) ---------------------------- */

/* Make `target` wait on `event` (read from `info`), in the memory's context
 * (the event's).  0, or -1 with the driver's error. */
static int
stream_wait(const char *who, const BufferExt_CUDADeviceInfo *info,
            CUstream target, CUevent event)
{
    int rc;

    if (CU_CHECK(who, cuCtxPushCurrent_v2, ((CUcontext)info->context)) < 0) {
        return -1;
    }
    rc = CU_CHECK(who, cuStreamWaitEvent, (target, event, 0));
    bufferext_cuda_ctx_pop();
    return rc;
}

/* The CUstream a DLPack `stream` argument names; *nosync for -1. */
static int
dlpack_stream(PyObject *stream, CUstream *out, int *nosync)
{
    long long value;
    int overflow;

    *nosync = 0;
    if (stream == NULL || stream == Py_None) {
        *out = CU_STREAM_LEGACY;
        return 0;
    }
    if (!PyLong_Check(stream) || PyBool_Check(stream)) {
        PyErr_Format(PyExc_TypeError,
                     "__dlpack__: stream must be None or an int, not "
                     "'%.200s'", Py_TYPE(stream)->tp_name);
        return -1;
    }
    value = PyLong_AsLongLongAndOverflow(stream, &overflow);
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow > 0 || value > 2) {
        *out = (CUstream)PyLong_AsVoidPtr(stream);
        if (*out != NULL || !PyErr_Occurred()) {
            return 0;
        }
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            return -1;
        }
        /* wider than a pointer: no CUstream, refused below by name */
        PyErr_Clear();
    }
    else if (value == -1 && !overflow) {
        *nosync = 1;
        return 0;
    }
    else if (value == 1 || value == 2) {
        *out = value == 1 ? CU_STREAM_LEGACY : CU_STREAM_PER_THREAD;
        return 0;
    }
    PyErr_Format(PyExc_ValueError,
                 "__dlpack__: stream=%R is not valid for CUDA memory: use "
                 "None or 1 (legacy default stream), 2 (per-thread default "
                 "stream), a CUstream handle, or -1 (no synchronisation)%s",
                 stream, value == 0 ? "; 0 is ambiguous and disallowed" : "");
    return -1;
}

int
bufferext_cuda_dlpack_sync(bufferext_state *st, PyObject *exporter,
                           const Py_buffer_extended *ext, PyObject *stream)
{
    const char *who = "__dlpack__";
    const BufferExt_CUDADeviceInfo *info = ext->device_info;
    CUstream target = NULL;
    CUevent event;
    int nosync;

    if (dlpack_stream(stream, &target, &nosync) < 0) {
        return -1;
    }
    if (bufferext_cuda_forked()) {
        /* the parent's memory: nothing a consumer here may touch */
        return bufferext_fork_error(st, who, "CUDA");
    }
    /* read once: another thread's synchronize() may clear it meanwhile */
    event = info == NULL ? NULL : (CUevent)BUFFEREXT_LOAD(info->event);
    if (nosync || event == NULL) {
        return 0;               /* no sync asked for, or the data is ready */
    }
    if (info->version >> 16 != BUFFEREXT_CUDA_INFO_MAJOR) {
        PyErr_Format(PyExc_BufferError,
                     "%.200s: device_info version 0x%x is not supported",
                     Py_TYPE(exporter)->tp_name, (unsigned int)info->version);
        return -1;
    }
    if (info->context == NULL) {
        /* as the staging copies refuse it: the driver's own error would
         * not say which field */
        PyErr_Format(PyExc_BufferError,
                     "%.200s: device_info.context is NULL beside event %p: "
                     "no CUDA context to wait in", Py_TYPE(exporter)->tp_name,
                     (void *)event);
        return -1;
    }
    if (st == NULL || bufferext_cuda_ready(st) < 0) {
        return -1;
    }
    return stream_wait(who, info, target, event);
}

/* ---- bridges: CUDA memory described by other protocols ---------------- */

/* One stream per device on which DLPack producers are asked to make their
 * data ready, and which an adapter's CUDA Array Interface names for pending
 * work (created in the retained primary context, kept for the life of the
 * process). */
static CUstream bridge_streams[64];
/* their contexts, kept retained: also the context of imported memory that
 * no context owns (bufferext_cuda_import) */
static CUcontext bridge_contexts[64];

/* This device's bridge stream, made on first use, in *out, and its context
 * (the device's primary context) in *ctx_out unless NULL.  0, or -1 with
 * an exception naming `who`. */
static int
bridge_stream(bufferext_state *st, const char *who, int ordinal,
              CUstream *out, CUcontext *ctx_out)
{
    CUcontext ctx;
    CUdevice dev;
    CUstream stream = NULL;
    int rc;

    if (bufferext_cuda_ready(st) < 0) {
        return -1;
    }
    if (ordinal < 0 || ordinal >= cuda_init.count || ordinal >= 64) {
        PyErr_Format(PyExc_BufferError, "%s: CUDA device %d does not exist "
                     "(%d found)", who, ordinal, cuda_init.count);
        return -1;
    }
    BUFFEREXT_MUTEX_LOCK(cuda_mutex);
    if (bridge_streams[ordinal] == NULL) {
        rc = -1;
        if (CU_CHECK(who, cuDeviceGet, (&dev, ordinal)) == 0 &&
            CU_CHECK(who, cuDevicePrimaryCtxRetain, (&ctx, dev)) == 0) {
            /* the stream keeps the context retained for the process; a
             * failure gives the retain back */
            if (CU_CHECK(who, cuCtxPushCurrent_v2, (ctx)) == 0) {
                rc = CU_CHECK(who, cuStreamCreate,
                              (&stream, CU_STREAM_NON_BLOCKING));
                bufferext_cuda_ctx_pop();
            }
            if (rc < 0) {
                (void)bufferext_cuda.cuDevicePrimaryCtxRelease_v2(dev);
            }
        }
        bridge_contexts[ordinal] = rc < 0 ? NULL : ctx;
        bridge_streams[ordinal] = rc < 0 ? NULL : stream;
    }
    stream = bridge_streams[ordinal];
    if (ctx_out != NULL) {
        *ctx_out = bridge_contexts[ordinal];
    }
    BUFFEREXT_MUTEX_UNLOCK(cuda_mutex);
    *out = stream;
    return stream == NULL ? -1 : 0;
}

PyObject *
bufferext_cuda_bridge_stream(bufferext_state *st, int ordinal)
{
    CUstream stream;

    if (bridge_stream(st, "as_buffer", ordinal, &stream, NULL) < 0) {
        return NULL;
    }
    return PyLong_FromVoidPtr(stream);
}

/* CAI has no event, only a stream, on which the consumer synchronises or
 * enqueues its work (the producer's, or one that waits for all of it).  A
 * completed event needs neither: None.  A pending one is waited on by the
 * device's bridge stream, which lives as long as the process, as a CAI
 * stream must outlive the object. */
PyObject *
bufferext_cuda_cai_stream(bufferext_state *st, const char *who,
                          const BufferExt_CUDADeviceInfo *info)
{
    CUevent event = (CUevent)BUFFEREXT_LOAD(info->event);
    CUstream stream;
    CUresult res;

    if (event == NULL) {
        Py_RETURN_NONE;
    }
    if (bufferext_cuda_ready(st) < 0) {
        return NULL;
    }
    res = bufferext_cuda.cuEventQuery(event);
    if (res == CUDA_SUCCESS) {
        Py_RETURN_NONE;             /* the work is done */
    }
    if (res != CUDA_ERROR_NOT_READY) {
        bufferext_cuda_error(res, who, "cuEventQuery");
        return NULL;
    }
    if (bridge_stream(st, who, info->device, &stream, NULL) < 0 ||
        stream_wait(who, info, stream, event) < 0) {
        return NULL;
    }
    return PyLong_FromVoidPtr(stream);
}

int
bufferext_cuda_import(bufferext_state *st, uintptr_t ptr, uintptr_t stream,
                      int ordinal, BufferExt_CUDADeviceInfo *info)
{
    const char *who = "as_buffer";
    CUcontext ctx = NULL;
    CUresult res;
    int rc;

    memset(info, 0, sizeof(*info));
    info->version = BUFFEREXT_CUDA_INFO_VERSION;
    info->device = ordinal < 0 ? 0 : ordinal;
    if (bufferext_cuda_ready(st) < 0) {
        return -1;
    }
    if (ptr == 0) {
        /* an empty array (the only kind whose data may be NULL): no
         * memory, so nothing to wait for, whatever stream it names */
        return 0;
    }
    res = bufferext_cuda.cuPointerGetAttribute(
        &info->device, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)ptr);
    if (res == CUDA_ERROR_INVALID_VALUE) {
        /* what the driver says of an address it did not allocate */
        PyErr_Format(PyExc_BufferError,
                     "%s: %p is not CUDA device memory "
                     "(cuPointerGetAttribute: CUDA_ERROR_INVALID_VALUE)", who,
                     (void *)(uintptr_t)ptr);
        return -1;
    }
    if (res != CUDA_SUCCESS) {
        /* any other failure says nothing about the address */
        return bufferext_cuda_error(res, who, "cuPointerGetAttribute");
    }
    if (ordinal >= 0 && info->device != ordinal) {
        /* its stream was asked of that device's bridge: a lie either way */
        PyErr_Format(PyExc_BufferError,
                     "%s: the producer said CUDA device %d, but the memory "
                     "at %p is on device %d (cuPointerGetAttribute)", who,
                     ordinal, (void *)(uintptr_t)ptr, info->device);
        return -1;
    }
    if (bufferext_cuda.cuPointerGetAttribute(
            &ctx, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)ptr) !=
        CUDA_SUCCESS) {
        ctx = NULL;
    }
    if (ctx == NULL) {
        /* memory no context owns: mapped by virtual memory management
         * (cuMemCreate) or from a stream-ordered pool (cuMemAllocAsync),
         * as JAX's allocator and others hand out.  The device's primary
         * context, kept retained with its bridge stream, serves for the
         * event and the copies. */
        CUstream unused;
        if (bridge_stream(st, who, info->device, &unused, &ctx) < 0) {
            return -1;
        }
    }
    info->context = ctx;
    if (stream == 0) {
        return 0;                   /* the producer says the data is ready */
    }
    if (CU_CHECK(who, cuCtxPushCurrent_v2, (ctx)) < 0) {
        return -1;
    }
    rc = CU_CHECK(who, cuEventCreate, ((CUevent *)&info->event,
                                       CU_EVENT_DISABLE_TIMING));
    if (rc == 0) {
        rc = CU_CHECK(who, cuEventRecord, ((CUevent)info->event,
                                           (CUstream)stream));
        if (rc < 0) {
            (void)bufferext_cuda.cuEventDestroy_v2((CUevent)info->event);
        }
    }
    bufferext_cuda_ctx_pop();
    if (rc < 0) {
        info->event = NULL;
    }
    return rc;
}

void
bufferext_cuda_release_event(BufferExt_CUDADeviceInfo *info)
{
    if (info->event == NULL || bufferext_cuda.cuEventDestroy_v2 == NULL) {
        return;
    }
    if (bufferext_cuda_forked()) {
        info->event = NULL;         /* the parent's: not ours to destroy */
        return;
    }
    if (bufferext_cuda.cuCtxPushCurrent_v2((CUcontext)info->context) ==
        CUDA_SUCCESS) {
        (void)bufferext_cuda.cuEventDestroy_v2((CUevent)info->event);
        bufferext_cuda_ctx_pop();
    }
    info->event = NULL;
}

int
bufferext_cuda_check_host(bufferext_state *st, const char *who,
                          const void *ptr, int device_type)
{
    unsigned int memory_type = 0;
    int managed = 0;

    if (bufferext_cuda_ready(st) < 0) {
        PyErr_Clear();              /* no driver: no device memory either */
        return 0;
    }
    /* an address the driver did not allocate (pageable host memory) is an
     * invalid value to it */
    if (bufferext_cuda.cuPointerGetAttribute(
            &memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS ||
        memory_type != CU_MEMORYTYPE_DEVICE ||
        (bufferext_cuda.cuPointerGetAttribute(
             &managed, CU_POINTER_ATTRIBUTE_IS_MANAGED,
             (CUdeviceptr)(uintptr_t)ptr) == CUDA_SUCCESS && managed)) {
        return 0;
    }
    PyErr_Format(PyExc_BufferError,
                 "%s: device type %d (%s) names memory the CPU reads, but "
                 "%p is CUDA device memory (cuPointerGetAttribute)", who,
                 device_type, device_type == 3 ? "CUDA host" : "CUDA managed",
                 ptr);
    return -1;
}

int
bufferext_cuda_host_wait(bufferext_state *st, const char *who, void *event,
                         uintptr_t stream)
{
    CUresult rc;

    if (bufferext_cuda_ready(st) < 0) {
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = event != NULL ? bufferext_cuda.cuEventSynchronize((CUevent)event)
                       : bufferext_cuda.cuStreamSynchronize((CUstream)stream);
    Py_END_ALLOW_THREADS
    if (rc != CUDA_SUCCESS) {
        return bufferext_cuda_error(rc, who, event != NULL
                                                 ? "cuEventSynchronize"
                                                 : "cuStreamSynchronize");
    }
    return 0;
}

/* ---- host staging (BufferView, view.c) --------------------------------- */

/* The driver calls of bufferext_cuda_stage, run without the GIL on values
 * read with it.  CUDA_SUCCESS, or the failed CUresult with its entry point
 * in *call.
 *
 * The copy goes on the legacy default stream (NULL) of the exporter's
 * context, and that stream is synchronised at once.  Not a bridge stream
 * (bufferext_cuda_bridge_stream): those live in the device's primary
 * context, a stream may only be used in its own context, and another
 * exporter's memory may belong to a context of its own.  The legacy stream
 * also waits for earlier work on the context's blocking streams, which can
 * make the copy wait longer but never makes it wrong; the exporter's own
 * pending work is waited for through its event (its streams may be
 * non-blocking), as the synchronisation rule says. */
static CUresult
stage_calls(CUcontext ctx, CUevent event, bufferext_stage what,
            CUdeviceptr device, void *host, size_t nbytes, const char **call)
{
    CUresult rc = CUDA_SUCCESS;

#define STEP(name, args) (*call = #name, rc = bufferext_cuda.name args)
    /* cuEventSynchronize needs no context; the copies need the memory's */
    if (ctx != NULL && STEP(cuCtxPushCurrent_v2, (ctx)) != CUDA_SUCCESS) {
        return rc;
    }
    if (event != NULL) {
        STEP(cuEventSynchronize, (event));
    }
    if (rc == CUDA_SUCCESS && what == BUFFEREXT_STAGE_TO_HOST) {
        STEP(cuMemcpyDtoHAsync_v2, (host, device, nbytes, NULL));
    }
    else if (rc == CUDA_SUCCESS && what == BUFFEREXT_STAGE_FROM_HOST) {
        STEP(cuMemcpyHtoDAsync_v2, (device, host, nbytes, NULL));
    }
    if (rc == CUDA_SUCCESS && what != BUFFEREXT_STAGE_WAIT) {
        STEP(cuStreamSynchronize, (NULL));
    }
#undef STEP
    if (ctx != NULL) {
        bufferext_cuda_ctx_pop();
    }
    return rc;
}

int
bufferext_cuda_stage(bufferext_state *st, const char *who,
                     const BufferExt_CUDADeviceInfo *info,
                     bufferext_stage what, void *device, void *host,
                     Py_ssize_t nbytes)
{
    /* read once, with the GIL: the exporter may re-record meanwhile (the
     * event and context stay valid while the export is held) */
    CUcontext ctx = (CUcontext)info->context;
    CUevent event = (CUevent)BUFFEREXT_LOAD(info->event);
    const char *call = NULL;
    CUresult rc;

    if (nbytes == 0) {
        what = BUFFEREXT_STAGE_WAIT;
    }
    if (info->version >> 16 != BUFFEREXT_CUDA_INFO_MAJOR) {
        /* the gate checked it at export; an exporter may change it since */
        PyErr_Format(PyExc_BufferError,
                     "%s: device_info version 0x%x is not supported", who,
                     (unsigned int)info->version);
        return -1;
    }
    if (what == BUFFEREXT_STAGE_WAIT && event == NULL) {
        return 0;               /* ready: no driver needed */
    }
    if (what != BUFFEREXT_STAGE_WAIT && ctx == NULL) {
        PyErr_Format(PyExc_BufferError,
                     "%s: device_info.context is NULL: no CUDA context to "
                     "copy in", who);
        return -1;
    }
    if (bufferext_cuda_ready(st) < 0) {
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = stage_calls(ctx, event, what, (CUdeviceptr)(uintptr_t)device, host,
                     (size_t)nbytes, &call);
    Py_END_ALLOW_THREADS
    return rc == CUDA_SUCCESS ? 0 : bufferext_cuda_error(rc, who, call);
}

/* ---- module glue ------------------------------------------------------- */

/* The dict of bufferext.devices(): the library, and once it loads the
 * device count and names (or why the driver would not start). */
PyObject *
bufferext_cuda_status(void)
{
    PyObject *status = bufferext_library_status(&cuda_spec, &cuda_library);
    PyObject *name, *names;
    int rc;

    if (status == NULL) {
        return NULL;
    }
    name = PyUnicode_FromString(BUFFEREXT_DEVICE_CUDA);
    rc = name == NULL ? -1 : PyDict_SetItemString(status, "device", name);
    Py_XDECREF(name);
    if (rc < 0 || cuda_library.state != 1) {
        goto done;
    }
    cuda_init_once();
    names = bufferext_cuda_device_names();
    rc = names == NULL ? -1 : PyDict_SetItemString(status, "devices", names);
    Py_XDECREF(names);
    if (rc == 0 && cuda_init.count == 0) {
        name = PyUnicode_FromString(cuda_init.message);
        rc = name == NULL ? -1 : PyDict_SetItemString(status, "error", name);
        Py_XDECREF(name);
    }
done:
    if (rc < 0) {
        Py_CLEAR(status);
    }
    return status;
}

