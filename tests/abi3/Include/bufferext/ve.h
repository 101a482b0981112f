/* bufferext/ve.h -- device_info of the device "bufferext.ve": NEC SX-Aurora
 * Vector Engine memory allocated as VEO heterogeneous memory (HMEM).  Part of
 * bufferext.h; do not include it directly.  Specification: docs/devices.rst.
 */
#ifndef BUFFEREXT_VE_H
#define BUFFEREXT_VE_H
#ifndef BUFFEREXT_H_INSIDE
#  error "include <bufferext.h>, not <bufferext/ve.h>"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The device name an exporter of VE memory puts in view->device (compare
 * with strcmp). */
#define BUFFEREXT_DEVICE_VE "bufferext.ve"

/* Version: major in the high 16 bits, minor in the low 16 (rules as for
 * BUFFEREXT_CUDA_INFO_VERSION). */
#define BUFFEREXT_VE_INFO_MAJOR 1
#define BUFFEREXT_VE_INFO_MINOR 0
#define BUFFEREXT_VE_INFO_VERSION \
    ((BUFFEREXT_VE_INFO_MAJOR << 16) | BUFFEREXT_VE_INFO_MINOR)

/* Describes the VE memory behind view->buf (a VEO HMEM address).  Owned by
 * the exporter; valid until the buffer is released.
 * Synchronisation: the exporter completes its own work on the memory before
 * it answers the request (VEO calls on `context` are ordered), so the data is
 * ready when the buffer is handed out. */
typedef struct {
    uint32_t version;     /* BUFFEREXT_VE_INFO_VERSION; always first */
    int32_t node;         /* VE node number; -1 when unknown (memory
                             imported through the VE Array Interface) */
    void *proc;           /* struct veo_proc_handle * owning the memory */
    void *context;        /* struct veo_thr_ctxt * (the VAI's veo_ctxt) */
    uint64_t reserved[4]; /* zero */
} BufferExt_VEDeviceInfo;

#ifdef __cplusplus
}
#endif
#endif /* BUFFEREXT_VE_H */
