/* cudabuffer.c -- the CUDA driver table (loaded lazily, no CUDA header
 * needed).  The CUDABuffer producer is added by the CUDA work. */
#include "parts.h"

/* The driver entry points the table uses, listed once. */
#define CUDA_SYMBOLS(X) \
    X(cuInit)           \
    X(cuDeviceGetCount)

#define AS_NAME(name) #name,
#define AS_SLOT(name) void *name;

static const char *const cuda_symbols[] = {CUDA_SYMBOLS(AS_NAME) NULL};
static struct { CUDA_SYMBOLS(AS_SLOT) } cuda_table;

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
    (void **)&cuda_table,
};

static bufferext_library cuda_library;

PyObject *
bufferext_cuda_status(void)
{
    PyObject *status = bufferext_library_status(&cuda_spec, &cuda_library);
    if (status != NULL &&
        PyDict_SetItemString(status, "device", Py_None) == 0) {
        PyObject *name = PyUnicode_FromString(BUFFEREXT_DEVICE_CUDA);
        if (name == NULL || PyDict_SetItemString(status, "device", name)) {
            Py_CLEAR(status);
        }
        Py_XDECREF(name);
    }
    return status;
}

int
bufferext_init_cuda(PyObject *module)
{
    (void)module;
    return 0;
}
