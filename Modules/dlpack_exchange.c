/* dlpack_exchange.c -- the DLPack 1.3 C exchange API of our producer types:
 * a static DLPackExchangeAPI table in a PyCapsule named
 * "dlpack_exchange_api", the type attribute __dlpack_c_exchange_api__ of
 * CPUBuffer, CUDABuffer and BufferAdapter.  Frameworks that speak it get
 * tensors without a Python call, and dltensor_from_py_object_no_sync fills
 * a caller's DLTensor without any allocation. */
#include "dlpack.h"
#include "dlpack_abi.h"
#include "export.h"
#include "state.h"

/* The table, declared from the DLPack 1.3 specification. */
typedef struct BxDLPackExchangeAPIHeader {
    BxDLPackVersion version;
    struct BxDLPackExchangeAPIHeader *prev_api;
} BxDLPackExchangeAPIHeader;

typedef struct {
    BxDLPackExchangeAPIHeader header;
    int (*managed_tensor_allocator)(
        BxDLTensor *prototype, BxDLManagedTensorVersioned **out,
        void *error_ctx,
        void (*set_error)(void *error_ctx, const char *kind,
                          const char *message));
    int (*managed_tensor_from_py_object_no_sync)(
        void *py_object, BxDLManagedTensorVersioned **out);
    int (*managed_tensor_to_py_object_no_sync)(
        BxDLManagedTensorVersioned *tensor, void **out_py_object);
    int (*dltensor_from_py_object_no_sync)(void *py_object, BxDLTensor *out);
    int (*current_work_stream)(int32_t device_type, int32_t device_id,
                               void **out_current_stream);
} BxDLPackExchangeAPI;

#define EXCHANGE_CAPSULE "dlpack_exchange_api"
#define EXCHANGE_ATTR "__dlpack_c_exchange_api__"

/* The table is process-wide (the specification asks for a static one), so
 * the types it builds are those of the first module instance. */
static PyObject *exchange_module;

static int
from_py_object(void *py_object, BxDLManagedTensorVersioned **out)
{
    *out = bufferext_dlpack_managed((PyObject *)py_object);
    return *out == NULL ? -1 : 0;
}

/* Steals `tensor`: a BufferAdapter owning it. */
static int
to_py_object(BxDLManagedTensorVersioned *tensor, void **out_py_object)
{
    PyObject *capsule, *adapter;

    capsule = PyCapsule_New(tensor, BX_DLPACK_CAPSULE_VERSIONED, NULL);
    if (capsule == NULL) {
        if (tensor->deleter != NULL) {
            tensor->deleter(tensor);
        }
        return -1;
    }
    adapter = PyObject_CallMethod(exchange_module, "_adapter_from_dlpack",
                                  "OOO", Py_None, capsule, Py_None);
    if (adapter == NULL && PyCapsule_IsValid(capsule,
                                             BX_DLPACK_CAPSULE_VERSIONED)) {
        /* refused before consuming: the tensor is still ours to free */
        if (tensor->deleter != NULL) {
            tensor->deleter(tensor);
        }
    }
    Py_DECREF(capsule);
    *out_py_object = adapter;
    return adapter == NULL ? -1 : 0;
}

/* Whether a CPUBuffer has a dtype of `code` and `bits` (one lane), for
 * the codes bufferext names by letter: int, uint, float, complex, bool. */
static int
allocatable_bits(uint8_t code, uint8_t bits)
{
    switch (code) {
    case BX_kDLInt:
    case BX_kDLUInt:
        return bits == 8 || bits == 16 || bits == 32 || bits == 64;
    case BX_kDLFloat:
        return bits == 16 || bits == 32 || bits == 64;
    case BX_kDLComplex:
        return bits == 64 || bits == 128;
    case BX_kDLBool:
        return bits == 8;
    default:
        return 0;
    }
}

/* A new zero-filled CPUBuffer shaped like `prototype` (CPU only).  An
 * error's kind is the class name of the exception that refused (a bad
 * shape: ValueError; MemoryError only when memory ran out); a request
 * refused here before any Python call is a BufferError. */
static int
allocate(BxDLTensor *prototype, BxDLManagedTensorVersioned **out,
         void *error_ctx,
         void (*set_error)(void *, const char *, const char *))
{
    static const char codes[][2] = {"i", "u", "f", "", "", "c", "b"};
    PyGILState_STATE gil = PyGILState_Ensure();
    bufferext_state *st = bufferext_get_state(exchange_module);
    PyObject *shape = NULL, *buffer = NULL, *dtype = NULL;
    const char *message = NULL;
    char dtype_message[160];
    int i, bits;
    /* bfloat16 and the float8 kinds: by name */
    const char *lowp = bufferext_lowp_name(prototype->dtype.code, &bits);

    *out = NULL;
    if (prototype->device.device_type != BX_kDLCPU) {
        message = "bufferext allocates CPU memory only through this API";
    }
    else if (prototype->dtype.lanes != 1 ||
             (lowp != NULL ? bits != prototype->dtype.bits || bits % 8 != 0
              : !allocatable_bits(prototype->dtype.code,
                                  prototype->dtype.bits))) {
        PyOS_snprintf(dtype_message, sizeof(dtype_message),
                      "unsupported dtype (code=%d, bits=%d, lanes=%d): "
                      "bufferext allocates int and uint of 8..64 bits, "
                      "float of 16..64, complex of 64 or 128, bool of 8, "
                      "bfloat16 and float8_*",
                      (int)prototype->dtype.code, (int)prototype->dtype.bits,
                      (int)prototype->dtype.lanes);
        message = dtype_message;
    }
    else if (prototype->ndim < 0 || prototype->ndim > PyBUF_MAX_NDIM ||
             (prototype->ndim > 0 && prototype->shape == NULL)) {
        message = "ndim out of range, or shape NULL";
    }
    else {
        /* the prototype is read before anything allocates (a collection
         * then may run finalizers, which could free its owner) */
        Py_ssize_t dims[PyBUF_MAX_NDIM];
        for (i = 0; i < prototype->ndim; i++) {
            dims[i] = (Py_ssize_t)prototype->shape[i];
        }
        shape = bufferext_tuple_from_ssize(prototype->ndim, dims);
        dtype = lowp != NULL
              ? PyUnicode_FromString(lowp)
              : PyUnicode_FromFormat("%s%d", codes[prototype->dtype.code],
                                     (int)prototype->dtype.bits / 8);
        if (shape != NULL && dtype != NULL) {
            buffer = PyObject_CallFunctionObjArgs(
                (PyObject *)st->CPUBuffer_Type, shape, dtype, NULL);
        }
        if (buffer != NULL) {
            *out = bufferext_dlpack_managed(buffer);
        }
    }
    if (*out == NULL) {
        PyObject *type, *value, *tb, *text = NULL;
        const char *detail = NULL;
        PyErr_Fetch(&type, &value, &tb);
        text = value != NULL ? PyObject_Str(value) : NULL;
        detail = text != NULL ? PyUnicode_AsUTF8(text) : NULL;
        /* before the consumer's SetError, which may set a Python error of
         * its own (DLPack's header expects it to) */
        PyErr_Clear();
        if (message != NULL) {
            set_error(error_ctx, "BufferError", message);
        }
        else {
            /* the type is kept alive until after the call */
            set_error(error_ctx,
                      type != NULL && PyType_Check(type)
                          ? ((PyTypeObject *)type)->tp_name : "RuntimeError",
                      detail != NULL ? detail : "allocation failed");
        }
        Py_XDECREF(text);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
    Py_XDECREF(shape);
    Py_XDECREF(dtype);
    Py_XDECREF(buffer);      /* the tensor holds its own export */
    PyGILState_Release(gil);
    return *out == NULL ? -1 : 0;
}

/* CPU: no stream.  CUDA: the legacy default stream, on which the no-sync
 * conversions above have ordered each buffer's pending work. */
static int
current_work_stream(int32_t device_type, int32_t device_id, void **out)
{
    (void)device_id;
    *out = device_type == BX_kDLCUDA ? (void *)(uintptr_t)1 : NULL;
    return 0;
}

static BxDLPackExchangeAPI exchange_api = {
    {{BX_DLPACK_MAJOR, BX_DLPACK_MINOR}, NULL},
    allocate,
    from_py_object,
    to_py_object,
    bufferext_dlpack_fill,
    current_work_stream,
};

int
bufferext_init_dlpack_exchange(PyObject *module)
{
    bufferext_state *st = bufferext_get_state(module);
    PyTypeObject *types[3];
    PyObject *capsule;
    int i, rc = 0;

    if (exchange_module == NULL) {
        exchange_module = Py_NewRef(module);
    }
    types[0] = st->CPUBuffer_Type;
    types[1] = st->CUDABuffer_Type;
    types[2] = st->BufferAdapter_Type;
    capsule = PyCapsule_New(&exchange_api, EXCHANGE_CAPSULE, NULL);
    if (capsule == NULL) {
        return -1;
    }
    /* in the dicts: the types are immutable once made (state.h) */
    for (i = 0; i < 3 && rc == 0; i++) {
        rc = PyDict_SetItemString(types[i]->tp_dict, EXCHANGE_ATTR, capsule);
        PyType_Modified(types[i]);
    }
    Py_DECREF(capsule);
    return rc;
}
