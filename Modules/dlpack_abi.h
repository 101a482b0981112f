/* dlpack_abi.h -- the DLPack 1.x binary interface, declared from its
 * specification (struct layouts, enum values, capsule names) so that no
 * DLPack header is needed to build.  Private to the module. */
#ifndef BUFFEREXT_MODULES_DLPACK_ABI_H
#define BUFFEREXT_MODULES_DLPACK_ABI_H
#include <stdint.h>

#define BX_DLPACK_MAJOR 1
#define BX_DLPACK_MINOR 3

enum {                       /* DLDeviceType values used here */
    BX_kDLCPU = 1,
    BX_kDLCUDA = 2,
    BX_kDLCUDAHost = 3,
    BX_kDLCUDAManaged = 13,
};

enum {                       /* DLDataTypeCode */
    BX_kDLInt = 0,
    BX_kDLUInt = 1,
    BX_kDLFloat = 2,
    BX_kDLBfloat = 4,
    BX_kDLComplex = 5,
    BX_kDLBool = 6,
    BX_kDLFloat8_e3m4 = 7,
    BX_kDLFloat8_e4m3 = 8,
    BX_kDLFloat8_e4m3b11fnuz = 9,
    BX_kDLFloat8_e4m3fn = 10,
    BX_kDLFloat8_e4m3fnuz = 11,
    BX_kDLFloat8_e5m2 = 12,
    BX_kDLFloat8_e5m2fnuz = 13,
    BX_kDLFloat8_e8m0fnu = 14,
    BX_kDLFloat6_e2m3fn = 15,
    BX_kDLFloat6_e3m2fn = 16,
    BX_kDLFloat4_e2m1fn = 17,
};

#define BX_DLPACK_FLAG_READ_ONLY (UINT64_C(1) << 0)
#define BX_DLPACK_FLAG_IS_COPIED (UINT64_C(1) << 1)

typedef struct { int32_t device_type; int32_t device_id; } BxDLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } BxDLDataType;

typedef struct BxDLTensor {
    void *data;
    BxDLDevice device;
    int32_t ndim;
    BxDLDataType dtype;
    int64_t *shape;
    int64_t *strides;        /* in elements */
    uint64_t byte_offset;
} BxDLTensor;

typedef struct BxDLManagedTensor {
    BxDLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct BxDLManagedTensor *self);
} BxDLManagedTensor;

typedef struct { uint32_t major; uint32_t minor; } BxDLPackVersion;

typedef struct BxDLManagedTensorVersioned {
    BxDLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct BxDLManagedTensorVersioned *self);
    uint64_t flags;
    BxDLTensor dl_tensor;
} BxDLManagedTensorVersioned;

/* Capsule names: static strings; a consumer renames on consume. */
#define BX_DLPACK_CAPSULE "dltensor"
#define BX_DLPACK_CAPSULE_VERSIONED "dltensor_versioned"

#endif
