/* bufferext/cuda.h -- device_info of the device "bufferext.cuda": memory
 * allocated through the CUDA driver API.  Part of bufferext.h; do not
 * include it directly.  Specification: docs/devices.rst.
 */
#ifndef BUFFEREXT_CUDA_H
#define BUFFEREXT_CUDA_H
#ifndef BUFFEREXT_H_INSIDE
#  error "include <bufferext.h>, not <bufferext/cuda.h>"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The device name an exporter of CUDA memory puts in view->device.  A
 * consumer may compare with strcmp, never by pointer: every extension has
 * its own copy of the string. */
#define BUFFEREXT_DEVICE_CUDA "bufferext.cuda"

/* Version of the struct below: major in the high 16 bits, minor in the low
 * 16.  A new major means an incompatible layout: consumers refuse it.  A new
 * minor only gives meaning to reserved space, which older producers zero. */
#define BUFFEREXT_CUDA_INFO_MAJOR 1
#define BUFFEREXT_CUDA_INFO_MINOR 0
#define BUFFEREXT_CUDA_INFO_VERSION \
    ((BUFFEREXT_CUDA_INFO_MAJOR << 16) | BUFFEREXT_CUDA_INFO_MINOR)

/* Describes the CUDA memory behind view->buf (a CUdeviceptr).  Owned by the
 * exporter; valid until the buffer is released.
 * Synchronisation (one rule): if `event` is not NULL, the data is ready only
 * once that event has completed.  The consumer must make the stream it uses
 * wait on it (cuStreamWaitEvent) or wait on the host (cuEventSynchronize)
 * before touching the memory; it never records into or destroys the event.
 * `event` NULL means the data is ready now. */
typedef struct {
    uint32_t version;     /* BUFFEREXT_CUDA_INFO_VERSION; always first */
    int32_t device;       /* CUDA device ordinal (CUdevice) of the memory */
    void *context;        /* CUcontext the pointer belongs to (the device's
                             primary context for the sample producer); for
                             memory no context owns (cuMemCreate mappings,
                             cuMemAllocAsync pools) a context of `device`
                             in which it is valid (imports: the primary) */
    void *event;          /* CUevent to wait on before access, or NULL */
    uint64_t reserved[4]; /* zero */
} BufferExt_CUDADeviceInfo;

#ifdef __cplusplus
}
#endif
#endif /* BUFFEREXT_CUDA_H */
