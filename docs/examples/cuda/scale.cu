/* scale.cu -- a CUDA C++ consumer of the extended buffer protocol: the
 * extension module bufferext_cuda_scale, whose scale(obj, factor)
 * multiplies the float32 items of any exporter of "bufferext.cuda" memory
 * (a bufferext.CUDABuffer, say) by factor, in place, with a kernel.
 * Built by nvcc against bufferext.h (docs/cuda.rst gives the command);
 * tests/test_cuda_example.py builds it and runs it on a GPU.
 *
 * It uses the CUDA runtime only (linked statically by nvcc), so it builds
 * and imports without a CUDA driver; the driver's context calls come
 * through the runtime's cudaGetDriverEntryPointByVersion. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <bufferext.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>   /* PFN_cuCtxPushCurrent_v4000, ... */
#include <string.h>

__global__ void
scale_kernel(float *data, Py_ssize_t n, float factor)
{
    Py_ssize_t i = (Py_ssize_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i < n; i += (Py_ssize_t)gridDim.x * blockDim.x) {
        data[i] *= factor;
    }
}

static PyObject *
cuda_error(const char *call, cudaError_t rc)
{
    PyErr_Format(PyExc_RuntimeError, "scale: %s failed: %s (%s)", call,
                 cudaGetErrorName(rc), cudaGetErrorString(rc));
    return NULL;
}

/* The memory is valid in the context of the exporter's device_info, which
 * need not be the device's primary context that the runtime would use:
 * push it for the runtime calls (the runtime uses the current context). */
static PFN_cuCtxPushCurrent_v4000 push_context;
static PFN_cuCtxPopCurrent_v4000 pop_context;

static int
load_context_calls(void)
{
    cudaDriverEntryPointQueryResult found;
    cudaError_t rc;

    if (pop_context != NULL) {
        return 0;
    }
    rc = cudaGetDriverEntryPointByVersion("cuCtxPushCurrent",
                                          (void **)&push_context, 4000,
                                          cudaEnableDefault, &found);
    if (rc == cudaSuccess && found == cudaDriverEntryPointSuccess) {
        rc = cudaGetDriverEntryPointByVersion("cuCtxPopCurrent",
                                              (void **)&pop_context, 4000,
                                              cudaEnableDefault, &found);
    }
    if (rc != cudaSuccess || found != cudaDriverEntryPointSuccess) {
        push_context = NULL;
        pop_context = NULL;
        if (rc != cudaSuccess) {
            (void)cuda_error("cudaGetDriverEntryPointByVersion", rc);
        }
        else {
            PyErr_SetString(PyExc_RuntimeError, "scale: the CUDA driver has "
                            "no cuCtxPushCurrent or cuCtxPopCurrent");
        }
        return -1;
    }
    return 0;
}

/* Wait for the exporter's pending work, scale, wait for the kernel: the
 * memory is only borrowed until the buffer is released. */
static PyObject *
launch(const Py_buffer_extended *ext, float factor)
{
    const BufferExt_CUDADeviceInfo *info =
        (const BufferExt_CUDADeviceInfo *)ext->device_info;
    Py_ssize_t n = ext->view.len / 4;
    unsigned int blocks = (unsigned int)(n / 256 + 1 < 4096 ? n / 256 + 1
                                                             : 4096);
    cudaError_t rc = cudaSuccess;
    const char *call = NULL;
    CUcontext popped;

    if (info->version >> 16 != BUFFEREXT_CUDA_INFO_MAJOR) {
        PyErr_Format(PyExc_BufferError, "scale: CUDA device_info version "
                     "%u.%u, not %d.x", info->version >> 16,
                     info->version & 0xFFFF, BUFFEREXT_CUDA_INFO_MAJOR);
        return NULL;
    }
    if (n == 0) {
        Py_RETURN_NONE;
    }
    if (load_context_calls() < 0) {
        return NULL;
    }
    if (push_context((CUcontext)info->context) != CUDA_SUCCESS) {
        PyErr_SetString(PyExc_RuntimeError,
                        "scale: cuCtxPushCurrent of the buffer's context "
                        "failed");
        return NULL;
    }
    /* the exporter's event: its pending work, before the kernel reads */
    if (info->event != NULL) {
        rc = cudaStreamWaitEvent(0, (cudaEvent_t)info->event, 0);
        call = "cudaStreamWaitEvent";
    }
    if (rc == cudaSuccess) {
        scale_kernel<<<blocks, 256>>>((float *)ext->view.buf, n, factor);
        rc = cudaGetLastError();
        call = "the kernel launch";
    }
    if (rc == cudaSuccess) {
        Py_BEGIN_ALLOW_THREADS
        rc = cudaStreamSynchronize(0);
        Py_END_ALLOW_THREADS
        call = "cudaStreamSynchronize";
    }
    (void)pop_context(&popped);
    if (rc != cudaSuccess) {
        return cuda_error(call, rc);
    }
    Py_RETURN_NONE;
}

static PyObject *
scale(PyObject *module, PyObject *args)
{
    Py_buffer_extended ext;
    PyObject *obj, *result;
    float factor;

    (void)module;
    if (!PyArg_ParseTuple(args, "Of:scale", &obj, &factor)) {
        return NULL;
    }
    /* PyBUF_DEVICE: device memory is welcome (without it a device exporter
     * refuses); writable, C-contiguous, with its format */
    if (BufferExt_GetBuffer(obj, &ext, PyBUF_DEVICE | PyBUF_WRITABLE |
                                           PyBUF_C_CONTIGUOUS |
                                           PyBUF_FORMAT) < 0) {
        return NULL;
    }
    if (!(ext.flags & PyBUF_DEVICE) || ext.device == NULL ||
        strcmp(ext.device, BUFFEREXT_DEVICE_CUDA) != 0) {
        PyErr_Format(PyExc_BufferError, "scale: needs CUDA memory (device "
                     "\"%s\"), got %s", BUFFEREXT_DEVICE_CUDA,
                     ext.device == NULL ? "CPU memory" : ext.device);
        result = NULL;
    }
    else if (ext.view.itemsize != 4 || strcmp(ext.view.format, "f") != 0) {
        PyErr_Format(PyExc_TypeError, "scale: needs float32 items (format "
                     "'f'), got format '%s'", ext.view.format);
        result = NULL;
    }
    else {
        result = launch(&ext, factor);
    }
    BufferExt_Release(&ext);
    return result;
}

static PyMethodDef methods[] = {
    {"scale", scale, METH_VARARGS,
     "scale(obj, factor) -> None: multiply obj's float32 CUDA memory by "
     "factor, in place."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "bufferext_cuda_scale", NULL, 0, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit_bufferext_cuda_scale(void)
{
    return PyModule_Create(&module);
}
