/* _bench_cuda.c -- timing helper of bench_cuda.py, loaded with ctypes.PyDLL
 * (so it runs with the GIL held and calls the C API of the running
 * interpreter).  Includes only the public header. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <time.h>
#include "bufferext.h"

static double
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* ns per PyObject_GetBuffer + PyBuffer_Release, or -1 with an exception. */
double
bench_plain(PyObject *obj, long n, int flags)
{
    Py_buffer view;
    double start = now_ns();
    long i;

    for (i = 0; i < n; i++) {
        if (PyObject_GetBuffer(obj, &view, flags) < 0) {
            return -1.0;
        }
        PyBuffer_Release(&view);
    }
    return (now_ns() - start) / (double)n;
}

/* ns per BufferExt_GetBuffer + BufferExt_Release. */
double
bench_extended(PyObject *obj, long n, int flags)
{
    Py_buffer_extended view;
    double start = now_ns();
    long i;

    for (i = 0; i < n; i++) {
        if (BufferExt_GetBuffer(obj, &view, flags) < 0) {
            return -1.0;
        }
        BufferExt_Release(&view);
    }
    return (now_ns() - start) / (double)n;
}

/* ---- counting allocator ------------------------------------------------ */

static PyMemAllocatorEx saved[3];
static long allocations;

#define DOMAIN_CTX(ctx) (&saved[(PyMemAllocatorDomain)(intptr_t)(ctx)])

static void *
count_malloc(void *ctx, size_t size)
{
    allocations++;
    return DOMAIN_CTX(ctx)->malloc(DOMAIN_CTX(ctx)->ctx, size);
}

static void *
count_calloc(void *ctx, size_t nelem, size_t size)
{
    allocations++;
    return DOMAIN_CTX(ctx)->calloc(DOMAIN_CTX(ctx)->ctx, nelem, size);
}

static void *
count_realloc(void *ctx, void *ptr, size_t size)
{
    allocations++;
    return DOMAIN_CTX(ctx)->realloc(DOMAIN_CTX(ctx)->ctx, ptr, size);
}

static void
count_free(void *ctx, void *ptr)
{
    DOMAIN_CTX(ctx)->free(DOMAIN_CTX(ctx)->ctx, ptr);
}

/* Python-heap allocations (raw, mem and object domains) made by n extended
 * exports of obj, or -1 with an exception. */
long
count_extended_allocations(PyObject *obj, long n, int flags)
{
    PyMemAllocatorDomain domains[3] = {PYMEM_DOMAIN_RAW, PYMEM_DOMAIN_MEM,
                                       PYMEM_DOMAIN_OBJ};
    Py_buffer_extended view;
    long i, failed = 0;
    int d;

    for (d = 0; d < 3; d++) {
        PyMemAllocatorEx hook = {(void *)(intptr_t)domains[d], count_malloc,
                                 count_calloc, count_realloc, count_free};
        PyMem_GetAllocator(domains[d], &saved[domains[d]]);
        PyMem_SetAllocator(domains[d], &hook);
    }
    allocations = 0;
    for (i = 0; i < n && !failed; i++) {
        if (BufferExt_GetBuffer(obj, &view, flags) < 0) {
            failed = 1;
            break;
        }
        BufferExt_Release(&view);
    }
    for (d = 0; d < 3; d++) {
        PyMem_SetAllocator(domains[d], &saved[domains[d]]);
    }
    return failed ? -1 : allocations;
}
