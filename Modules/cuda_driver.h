/* cuda_driver.h -- the CUDA driver as the module sees it: our own minimal
 * declarations of the few CUDA types (no CUDA header needed to build), the
 * table of entry points, and the runtime every CUDA path shares: errors,
 * bridges, the DLPack stream rule, host staging (cuda_driver.c). */
#ifndef BUFFEREXT_MODULES_CUDA_DRIVER_H
#define BUFFEREXT_MODULES_CUDA_DRIVER_H
#include "parts.h"

/* Each type as cuda.h declares it (the handles: pointers to the same
 * incomplete structs), but for its enums, which are ints of the same size
 * here.  tests/test_cuda_headers.py compiles these declarations beside the
 * real cuda.h and fails on any difference. */
typedef int CUresult;                      /* an enum in cuda.h */
typedef int CUpointer_attribute;           /* an enum in cuda.h */
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUevent_st *CUevent;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_NOT_READY 600
#define CU_STREAM_NON_BLOCKING 0x1
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#define CU_POINTER_ATTRIBUTE_CONTEXT 1
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_MEMORYTYPE_DEVICE 2

/* The driver entry points used, with their exported symbol names (the _v2
 * names are what cuda.h maps the plain names to). */
#define CUDA_SYMBOLS(X)                                                     \
    X(cuGetErrorName, (CUresult, const char **))                            \
    X(cuGetErrorString, (CUresult, const char **))                          \
    X(cuInit, (unsigned int))                                               \
    X(cuDeviceGetCount, (int *))                                            \
    X(cuDeviceGet, (CUdevice *, int))                                       \
    X(cuDeviceGetName, (char *, int, CUdevice))                             \
    X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                    \
    X(cuDevicePrimaryCtxRelease_v2, (CUdevice))                             \
    X(cuCtxPushCurrent_v2, (CUcontext))                                     \
    X(cuCtxPopCurrent_v2, (CUcontext *))                                    \
    X(cuMemAlloc_v2, (CUdeviceptr *, size_t))                               \
    X(cuMemFree_v2, (CUdeviceptr))                                          \
    X(cuMemcpyHtoDAsync_v2, (CUdeviceptr, const void *, size_t, CUstream))  \
    X(cuMemcpyDtoHAsync_v2, (void *, CUdeviceptr, size_t, CUstream))        \
    X(cuMemcpyDtoDAsync_v2, (CUdeviceptr, CUdeviceptr, size_t, CUstream))   \
    X(cuMemsetD8Async, (CUdeviceptr, unsigned char, size_t, CUstream))      \
    X(cuMemsetD16Async, (CUdeviceptr, unsigned short, size_t, CUstream))    \
    X(cuMemsetD32Async, (CUdeviceptr, unsigned int, size_t, CUstream))      \
    X(cuStreamCreate, (CUstream *, unsigned int))                           \
    X(cuStreamDestroy_v2, (CUstream))                                       \
    X(cuStreamSynchronize, (CUstream))                                      \
    X(cuStreamWaitEvent, (CUstream, CUevent, unsigned int))                 \
    X(cuEventCreate, (CUevent *, unsigned int))                             \
    X(cuEventDestroy_v2, (CUevent))                                         \
    X(cuEventRecord, (CUevent, CUstream))                                   \
    X(cuEventSynchronize, (CUevent))                                        \
    X(cuEventQuery, (CUevent))                                              \
    X(cuPointerGetAttribute, (void *, CUpointer_attribute, CUdeviceptr))

#define BUFFEREXT_CU_FIELD(name, params) CUresult (*name) params;

typedef struct { CUDA_SYMBOLS(BUFFEREXT_CU_FIELD) } bufferext_cuda_table;

/* The loaded entry points (all NULL until bufferext_cuda_ready succeeds). */
extern bufferext_cuda_table bufferext_cuda;

/* Load the driver and run cuInit once.  0, or -1 with
 * DeviceUnavailableError saying what was looked for and why it failed. */
int bufferext_cuda_ready(bufferext_state *st);
/* Whether this process is the child of a fork() made after cuInit
 * succeeded: no driver call may be made then (bufferext_cuda_ready refuses,
 * and so does every operation of an inherited CUDABuffer; teardown gives
 * nothing back, the parent owns it). */
int bufferext_cuda_forked(void);
/* Number of devices (valid after bufferext_cuda_ready succeeded). */
int bufferext_cuda_device_count(void);
/* A list of "ordinal: name" strings, one per device. */
PyObject *bufferext_cuda_device_names(void);

/* Raise for a failed driver call: MemoryError for out of memory, else
 * RuntimeError, both naming the caller, the entry point and the CUresult.
 * Returns -1. */
int bufferext_cuda_error(CUresult rc, const char *who, const char *call);

static inline int
bufferext_cuda_check(CUresult rc, const char *who, const char *call)
{
    return rc == CUDA_SUCCESS ? 0 : bufferext_cuda_error(rc, who, call);
}

/* Call a driver entry point; 0, or -1 with the exception above. */
#define CU_CHECK(who, name, args)                                           \
    bufferext_cuda_check(bufferext_cuda.name args, (who), #name)

/* Pop the context pushed before driver calls (nothing to report). */
static inline void
bufferext_cuda_ctx_pop(void)
{
    CUcontext popped;
    (void)bufferext_cuda.cuCtxPopCurrent_v2(&popped);
}

/* Bridges (dlpack.c).  The per-device stream DLPack producers are asked to
 * make their data ready on, as an int; NULL with an exception. */
PyObject *bufferext_cuda_bridge_stream(bufferext_state *st, int ordinal);
/* Describe CUDA memory at `ptr` imported from another protocol: ordinal and
 * context from the driver (the device's primary context for memory no
 * context owns: cuMemCreate mappings, cuMemAllocAsync pools); if `stream`
 * is not 0, an event recorded on it (the producer's pending work), owned
 * by the caller.  `ordinal` is the device the producer named (DLPack,
 * Arrow), or -1 where it names none (the CUDA Array Interface): memory the
 * driver places on another device is refused, naming both.  A NULL `ptr`
 * (an empty array) gets `ordinal` (0 for -1) and no event.  0, or -1 with
 * BufferError / DeviceUnavailableError. */
int bufferext_cuda_import(bufferext_state *st, uintptr_t ptr, uintptr_t stream,
                          int ordinal, BufferExt_CUDADeviceInfo *info);
/* Memory a producer called CUDA host or managed memory (DLPack's and
 * Arrow's device types 3 and 13), which the CPU then reads as its own:
 * refused, naming `who`, the type and the pointer, when the driver says
 * `ptr` is plain device memory (neither host memory it knows nor
 * managed).  Where no driver loads there is no device memory either: 0.
 * 0, or -1 with BufferError. */
int bufferext_cuda_check_host(bufferext_state *st, const char *who,
                              const void *ptr, int device_type);
/* Wait on the host, without the GIL, for a producer's CUevent (the Arrow
 * sync_event of memory the CPU reads directly) or, with a NULL `event`,
 * for a bridge stream (bufferext_cuda_bridge_stream) a DLPack producer
 * ordered its work before (CUDA host and managed memory).  0, or -1 with
 * DeviceUnavailableError or the driver's error. */
int bufferext_cuda_host_wait(bufferext_state *st, const char *who,
                             void *event, uintptr_t stream);
/* The CUDA Array Interface v3 `stream` of memory described by `info`:
 * None when it has no event or the event has completed (cuEventQuery), else
 * the device's bridge stream, made to wait on the event first.  A new
 * reference, or NULL with an exception naming `who`. */
PyObject *bufferext_cuda_cai_stream(bufferext_state *st, const char *who,
                                   const BufferExt_CUDADeviceInfo *info);
/* Destroy an event made by bufferext_cuda_import (safe if there is none). */
void bufferext_cuda_release_event(BufferExt_CUDADeviceInfo *info);

/* The dict of bufferext.devices() for the driver (tries to load it). */
PyObject *bufferext_cuda_status(void);

/* The DLPack stream rule for an export of "bufferext.cuda" memory.
 * `stream` is __dlpack__'s argument (NULL or None: the legacy default
 * stream, 1 legacy, 2 per-thread, > 2 a CUstream, -1 no synchronisation, 0
 * and other values ValueError).  If device_info carries an event, the
 * consumer's stream is made to wait on it.  0 or -1. */
int bufferext_cuda_dlpack_sync(bufferext_state *st, PyObject *exporter,
                               const Py_buffer_extended *ext,
                               PyObject *stream);

/* Host staging of device memory, for BufferView.synchronize, copy_to_host
 * and copy_from_host (staging.c). */
typedef enum {
    BUFFEREXT_STAGE_WAIT,       /* wait for the exporter's pending work */
    BUFFEREXT_STAGE_TO_HOST,    /* ... then copy the memory to the host */
    BUFFEREXT_STAGE_FROM_HOST   /* ... then copy host bytes into it */
} bufferext_stage;

/* "bufferext.cuda" memory at `device` described by `info`: wait on the
 * host for info->event when it is not NULL (loading the driver only then or
 * for a copy), then copy `nbytes` between it and `host` in info->context;
 * all without the GIL, complete on return.  The caller keeps the export and
 * `host` pinned meanwhile.  0, or -1 with an exception naming `who`. */
int bufferext_cuda_stage(bufferext_state *st, const char *who,
                         const BufferExt_CUDADeviceInfo *info,
                         bufferext_stage what, void *device, void *host,
                         Py_ssize_t nbytes);

#endif
