/* arrow_abi.h -- the Arrow C Data and C Device interfaces' binary layout,
 * declared from their specification (docs/bridges.rst cites it): struct
 * layouts, device types, flags and PyCapsule names, so that no Arrow header
 * is needed to build.  Private to the module. */
#ifndef BUFFEREXT_MODULES_ARROW_ABI_H
#define BUFFEREXT_MODULES_ARROW_ABI_H
#include <stdint.h>

/* ArrowDeviceType: DLPack's DLDeviceType numbering (the spec keeps them
 * equal), so dlpack_abi.h's BX_kDL* values name the same devices. */
#define BX_ARROW_FLAG_NULLABLE 2

typedef struct BxArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct BxArrowSchema **children;
    struct BxArrowSchema *dictionary;
    void (*release)(struct BxArrowSchema *);   /* NULL: released/moved */
    void *private_data;
} BxArrowSchema;

typedef struct BxArrowArray {
    int64_t length;
    int64_t null_count;      /* -1: not computed */
    int64_t offset;          /* in items, into every buffer */
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;    /* fixed width: [validity bitmap, values] */
    struct BxArrowArray **children;
    struct BxArrowArray *dictionary;
    void (*release)(struct BxArrowArray *);    /* NULL: released/moved */
    void *private_data;
} BxArrowArray;

typedef struct {
    BxArrowArray array;      /* its release frees everything below too */
    int64_t device_id;
    int32_t device_type;
    void *sync_event;        /* CUDA: a CUevent *, to wait on; NULL: ready */
    int64_t reserved[3];     /* zero */
} BxArrowDeviceArray;

#define BX_ARROW_SCHEMA_CAPSULE "arrow_schema"
#define BX_ARROW_ARRAY_CAPSULE "arrow_array"
#define BX_ARROW_DEVICE_ARRAY_CAPSULE "arrow_device_array"

#endif
