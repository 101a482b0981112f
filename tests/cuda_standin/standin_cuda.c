/* standin_cuda.c -- TEST DOUBLE of the CUDA driver (libcuda) for bufferext's
 * tests.  Built by the tests (gcc -shared -fPIC), never shipped.
 *
 * It implements exactly the driver entry points of the table in
 * Modules/cudabuffer.c, over host memory:
 *   - device pointers lie in an address range reserved PROT_NONE, so a
 *     CPU-only consumer that dereferences one crashes instead of reading
 *     plausible bytes; the bytes live in separate host blocks;
 *   - "asynchronous" work runs at once (a stream is an ordered queue that
 *     is always drained); events and streams are checked handles;
 *   - every call that needs a context fails with CUDA_ERROR_INVALID_CONTEXT
 *     unless one was pushed, so a missing push/pop is caught.
 *
 * Failure injection, read from the environment at every call:
 *   STANDIN_CUDA_DEVICES=N        device count (default 1; 0: cuInit says
 *                                 CUDA_ERROR_NO_DEVICE)
 *   STANDIN_CUDA_INIT_ERROR=code  cuInit returns this CUresult
 *   STANDIN_CUDA_MEM_LIMIT=bytes  cuMemAlloc_v2 beyond it: out of memory
 *   STANDIN_CUDA_FAIL=a[=code],b  these entry points return `code`
 *                                 (default 999, CUDA_ERROR_UNKNOWN)
 * Counters for the tests (read through ctypes): standin_live_allocations,
 * standin_live_bytes, standin_live_streams, standin_live_events,
 * standin_context_refs, standin_context_depth, standin_calls(name),
 * standin_last_wait_stream, standin_last_wait_event, standin_reset_calls. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

typedef struct standin_ctx { uint32_t magic; int device; int refs; } *CUcontext;
typedef struct standin_stream { uint32_t magic; CUcontext ctx; } *CUstream;
typedef struct standin_event { uint32_t magic; long records; } *CUevent;

#define OK 0
#define ERR_INVALID_VALUE 1
#define ERR_OUT_OF_MEMORY 2
#define ERR_NOT_INITIALIZED 3
#define ERR_NO_DEVICE 100
#define ERR_INVALID_DEVICE 101
#define ERR_INVALID_CONTEXT 201
#define ERR_INVALID_HANDLE 400
#define ERR_UNKNOWN 999

#define MAGIC_CTX 0x43545830u
#define MAGIC_STREAM 0x5354524du
#define MAGIC_EVENT 0x45564e54u
#define MAX_DEVICES 8
#define MAX_DEPTH 32
#define RANGE_SIZE ((size_t)1 << 32)    /* reserved device address space */
#define ALIGN 256

#define EXPORT __attribute__((visibility("default")))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialised;
static struct standin_ctx contexts[MAX_DEVICES];
static __thread CUcontext stack[MAX_DEPTH];
static __thread int depth;

typedef struct {
    CUdeviceptr base;
    size_t size;
    char *host;
    CUcontext ctx;                      /* current when it was allocated */
} allocation;
static allocation *allocs;
static size_t nallocs, capacity;
static char *range;                     /* PROT_NONE reservation */
static size_t range_used;
static long live_bytes, live_streams, live_events;
static void *last_wait_stream, *last_wait_event;

/* ---- call counting and failure injection ------------------------------ */

typedef struct { const char *name; long calls; } counter;
static counter counters[64];

static void
count(const char *name)
{
    int i;
    pthread_mutex_lock(&lock);
    for (i = 0; i < 64 && counters[i].name != NULL; i++) {
        if (strcmp(counters[i].name, name) == 0) {
            break;
        }
    }
    if (i < 64) {
        counters[i].name = name;
        counters[i].calls++;
    }
    pthread_mutex_unlock(&lock);
}

/* The CUresult STANDIN_CUDA_FAIL injects into `name`, or OK. */
static CUresult
injected(const char *name)
{
    const char *spec = getenv("STANDIN_CUDA_FAIL"), *p;
    size_t len = strlen(name);

    count(name);
    for (p = spec; p != NULL && *p != '\0';) {
        if (strncmp(p, name, len) == 0 &&
            (p[len] == '\0' || p[len] == ',' || p[len] == '=')) {
            return p[len] == '=' ? (CUresult)atoi(p + len + 1) : ERR_UNKNOWN;
        }
        p = strchr(p, ',');
        p = p == NULL ? NULL : p + 1;
    }
    return OK;
}

#define ENTER(name)                                                         \
    do {                                                                    \
        CUresult injected_rc = injected(#name);                             \
        if (injected_rc != OK) {                                            \
            return injected_rc;                                             \
        }                                                                   \
    } while (0)

static int
device_count(void)
{
    const char *env = getenv("STANDIN_CUDA_DEVICES");
    int n = env == NULL ? 1 : atoi(env);
    return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

/* Calls that need cuInit and a current context. */
static CUresult
need_context(void)
{
    if (!initialised) {
        return ERR_NOT_INITIALIZED;
    }
    return depth > 0 && stack[depth - 1] != NULL ? OK : ERR_INVALID_CONTEXT;
}

/* ---- errors ----------------------------------------------------------- */

static const struct { CUresult rc; const char *name, *text; } errors[] = {
    {OK, "CUDA_SUCCESS", "no error"},
    {ERR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {ERR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {ERR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED",
     "initialization error"},
    {ERR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is "
     "detected"},
    {ERR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device "
     "ordinal"},
    {ERR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device "
     "context"},
    {ERR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource "
     "handle"},
    {ERR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult
lookup_error(CUresult rc, const char **out, int text)
{
    size_t i;
    for (i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
        if (errors[i].rc == rc) {
            *out = text ? errors[i].text : errors[i].name;
            return OK;
        }
    }
    *out = NULL;
    return ERR_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorName(CUresult rc, const char **out)
{
    count("cuGetErrorName");
    return lookup_error(rc, out, 0);
}

EXPORT CUresult cuGetErrorString(CUresult rc, const char **out)
{
    count("cuGetErrorString");
    return lookup_error(rc, out, 1);
}

/* ---- initialisation and devices ---------------------------------------- */

EXPORT CUresult cuInit(unsigned int flags)
{
    const char *env = getenv("STANDIN_CUDA_INIT_ERROR");

    ENTER(cuInit);
    if (flags != 0) {
        return ERR_INVALID_VALUE;
    }
    if (env != NULL && atoi(env) != 0) {
        return (CUresult)atoi(env);
    }
    if (device_count() == 0) {
        return ERR_NO_DEVICE;
    }
    initialised = 1;
    return OK;
}

EXPORT CUresult cuDeviceGetCount(int *out)
{
    ENTER(cuDeviceGetCount);
    if (!initialised) {
        return ERR_NOT_INITIALIZED;
    }
    *out = device_count();
    return OK;
}

EXPORT CUresult cuDeviceGet(CUdevice *out, int ordinal)
{
    ENTER(cuDeviceGet);
    if (!initialised) {
        return ERR_NOT_INITIALIZED;
    }
    if (ordinal < 0 || ordinal >= device_count()) {
        return ERR_INVALID_DEVICE;
    }
    *out = ordinal;
    return OK;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    ENTER(cuDeviceGetName);
    if (dev < 0 || dev >= device_count() || name == NULL || len <= 0) {
        return dev < 0 || dev >= device_count() ? ERR_INVALID_DEVICE
                                                : ERR_INVALID_VALUE;
    }
    snprintf(name, (size_t)len, "bufferext stand-in CUDA device %d", dev);
    return OK;
}

/* ---- contexts ---------------------------------------------------------- */

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *out, CUdevice dev)
{
    ENTER(cuDevicePrimaryCtxRetain);
    if (!initialised) {
        return ERR_NOT_INITIALIZED;
    }
    if (dev < 0 || dev >= device_count()) {
        return ERR_INVALID_DEVICE;
    }
    pthread_mutex_lock(&lock);
    contexts[dev].magic = MAGIC_CTX;
    contexts[dev].device = dev;
    contexts[dev].refs++;
    pthread_mutex_unlock(&lock);
    *out = &contexts[dev];
    return OK;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult rc = OK;

    ENTER(cuDevicePrimaryCtxRelease_v2);
    if (dev < 0 || dev >= MAX_DEVICES) {
        return ERR_INVALID_DEVICE;
    }
    pthread_mutex_lock(&lock);
    if (contexts[dev].refs <= 0) {
        rc = ERR_INVALID_CONTEXT;   /* released more often than retained */
    }
    else {
        contexts[dev].refs--;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    ENTER(cuCtxPushCurrent_v2);
    if (ctx == NULL || ctx->magic != MAGIC_CTX || ctx->refs <= 0) {
        return ERR_INVALID_CONTEXT;
    }
    if (depth == MAX_DEPTH) {
        return ERR_UNKNOWN;
    }
    stack[depth++] = ctx;
    return OK;
}

EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *out)
{
    ENTER(cuCtxPopCurrent_v2);
    if (depth == 0) {
        return ERR_INVALID_CONTEXT;
    }
    depth--;
    if (out != NULL) {
        *out = stack[depth];
    }
    return OK;
}

/* ---- memory ------------------------------------------------------------ */

/* Host bytes behind [ptr, ptr + size), or NULL if no allocation holds
 * them all. */
static char *
host_of(CUdeviceptr ptr, size_t size)
{
    size_t i;
    char *host = NULL;

    pthread_mutex_lock(&lock);
    for (i = 0; i < nallocs; i++) {
        allocation *a = &allocs[i];
        if (ptr >= a->base && ptr - a->base <= a->size &&
            size <= a->size - (ptr - a->base)) {
            host = a->host + (ptr - a->base);
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return host;
}

static CUresult
reserve(size_t size, CUdeviceptr *out)
{
    size_t rounded = (size + ALIGN - 1) & ~(size_t)(ALIGN - 1);

    if (range == NULL) {
        void *p = mmap(NULL, RANGE_SIZE, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            return ERR_OUT_OF_MEMORY;
        }
        range = p;
    }
    if (rounded > RANGE_SIZE - range_used) {
        return ERR_OUT_OF_MEMORY;
    }
    /* 256-byte aligned addresses inside the reservation; never reused. */
    *out = (CUdeviceptr)(uintptr_t)(range + range_used);
    range_used += rounded;
    return OK;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t size)
{
    const char *limit = getenv("STANDIN_CUDA_MEM_LIMIT");
    CUresult rc;
    char *host;

    ENTER(cuMemAlloc_v2);
    if ((rc = need_context()) != OK) {
        return rc;
    }
    if (size == 0) {
        return ERR_INVALID_VALUE;
    }
    if (limit != NULL &&
        (unsigned long long)live_bytes + size > strtoull(limit, NULL, 10)) {
        return ERR_OUT_OF_MEMORY;
    }
    host = malloc(size);
    if (host == NULL) {
        return ERR_OUT_OF_MEMORY;
    }
    memset(host, 0xA5, size);           /* like real memory: not zeroed */
    pthread_mutex_lock(&lock);
    if (nallocs == capacity) {
        size_t n = capacity ? 2 * capacity : 16;
        allocation *grown = realloc(allocs, n * sizeof(allocation));
        if (grown == NULL) {
            pthread_mutex_unlock(&lock);
            free(host);
            return ERR_OUT_OF_MEMORY;
        }
        allocs = grown;
        capacity = n;
    }
    rc = reserve(size, out);
    if (rc == OK) {
        allocs[nallocs].base = *out;
        allocs[nallocs].size = size;
        allocs[nallocs].host = host;
        allocs[nallocs].ctx = stack[depth - 1];
        nallocs++;
        live_bytes += (long)size;
    }
    pthread_mutex_unlock(&lock);
    if (rc != OK) {
        free(host);
    }
    return rc;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr)
{
    size_t i;
    CUresult rc;

    ENTER(cuMemFree_v2);
    if ((rc = need_context()) != OK) {
        return rc;
    }
    pthread_mutex_lock(&lock);
    for (i = 0; i < nallocs; i++) {
        if (allocs[i].base == ptr) {
            free(allocs[i].host);
            live_bytes -= (long)allocs[i].size;
            allocs[i] = allocs[--nallocs];
            pthread_mutex_unlock(&lock);
            return OK;
        }
    }
    pthread_mutex_unlock(&lock);
    return ERR_INVALID_VALUE;
}

/* Whether `ptr` lies in the reserved device range. */
#define ATTRIBUTE_CONTEXT 1
#define ATTRIBUTE_DEVICE_ORDINAL 9

/* Context or device ordinal of a pointer inside one of our allocations;
 * host (or unknown) pointers are an invalid value, as with the driver. */
EXPORT CUresult cuPointerGetAttribute(void *data, int attribute,
                                      CUdeviceptr ptr)
{
    CUcontext ctx = NULL;
    size_t i;

    ENTER(cuPointerGetAttribute);
    if (!initialised) {
        return ERR_NOT_INITIALIZED;
    }
    pthread_mutex_lock(&lock);
    for (i = 0; i < nallocs; i++) {
        if (ptr >= allocs[i].base && ptr - allocs[i].base < allocs[i].size) {
            ctx = allocs[i].ctx;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    if (ctx == NULL || data == NULL) {
        return ERR_INVALID_VALUE;
    }
    if (attribute == ATTRIBUTE_CONTEXT) {
        *(CUcontext *)data = ctx;
    }
    else if (attribute == ATTRIBUTE_DEVICE_ORDINAL) {
        *(int *)data = ctx->device;
    }
    else {
        return ERR_INVALID_VALUE;
    }
    return OK;
}

static int
in_range(CUdeviceptr ptr)
{
    return range != NULL && ptr >= (CUdeviceptr)(uintptr_t)range &&
           ptr < (CUdeviceptr)(uintptr_t)range + RANGE_SIZE;
}

static int
valid_stream(CUstream s)
{
    return s == NULL || s == (CUstream)0x1 || s == (CUstream)0x2 ||
           s->magic == MAGIC_STREAM;
}

/* The common checks of a copy or memset on `stream`. */
static CUresult
check_async(CUstream stream)
{
    CUresult rc = need_context();
    if (rc == OK && !valid_stream(stream)) {
        rc = ERR_INVALID_HANDLE;
    }
    return rc;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src,
                                     size_t size, CUstream stream)
{
    CUresult rc;
    char *d;

    ENTER(cuMemcpyHtoDAsync_v2);
    if ((rc = check_async(stream)) != OK) {
        return rc;
    }
    if ((d = host_of(dst, size)) == NULL || src == NULL ||
        in_range((CUdeviceptr)(uintptr_t)src)) {
        return ERR_INVALID_VALUE;
    }
    memcpy(d, src, size);
    return OK;
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t size,
                                     CUstream stream)
{
    CUresult rc;
    char *s;

    ENTER(cuMemcpyDtoHAsync_v2);
    if ((rc = check_async(stream)) != OK) {
        return rc;
    }
    if ((s = host_of(src, size)) == NULL || dst == NULL) {
        return ERR_INVALID_VALUE;
    }
    memcpy(dst, s, size);
    return OK;
}

EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src,
                                     size_t size, CUstream stream)
{
    CUresult rc;
    char *d, *s;

    ENTER(cuMemcpyDtoDAsync_v2);
    if ((rc = check_async(stream)) != OK) {
        return rc;
    }
    if ((d = host_of(dst, size)) == NULL || (s = host_of(src, size)) == NULL) {
        return ERR_INVALID_VALUE;
    }
    memmove(d, s, size);
    return OK;
}

static CUresult
memset_n(CUdeviceptr dst, const void *value, size_t width, size_t n,
         CUstream stream)
{
    CUresult rc = check_async(stream);
    char *d;
    size_t i;

    if (rc != OK) {
        return rc;
    }
    if (dst % width != 0 || n > SIZE_MAX / width ||
        (d = host_of(dst, n * width)) == NULL) {
        return ERR_INVALID_VALUE;
    }
    for (i = 0; i < n; i++) {
        memcpy(d + i * width, value, width);
    }
    return OK;
}

EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value,
                                size_t n, CUstream stream)
{
    ENTER(cuMemsetD8Async);
    return memset_n(dst, &value, 1, n, stream);
}

EXPORT CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short value,
                                 size_t n, CUstream stream)
{
    ENTER(cuMemsetD16Async);
    return memset_n(dst, &value, 2, n, stream);
}

EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value,
                                 size_t n, CUstream stream)
{
    ENTER(cuMemsetD32Async);
    return memset_n(dst, &value, 4, n, stream);
}

/* ---- streams and events ------------------------------------------------ */

EXPORT CUresult cuStreamCreate(CUstream *out, unsigned int flags)
{
    CUresult rc;
    CUstream s;

    ENTER(cuStreamCreate);
    if ((rc = need_context()) != OK) {
        return rc;
    }
    if (flags > 1) {
        return ERR_INVALID_VALUE;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return ERR_OUT_OF_MEMORY;
    }
    s->magic = MAGIC_STREAM;
    s->ctx = stack[depth - 1];
    __atomic_add_fetch(&live_streams, 1, __ATOMIC_SEQ_CST);
    *out = s;
    return OK;
}

EXPORT CUresult cuStreamDestroy_v2(CUstream s)
{
    ENTER(cuStreamDestroy_v2);
    if (s == NULL || s == (CUstream)0x1 || s == (CUstream)0x2 ||
        s->magic != MAGIC_STREAM) {
        return ERR_INVALID_HANDLE;
    }
    s->magic = 0;
    free(s);
    __atomic_sub_fetch(&live_streams, 1, __ATOMIC_SEQ_CST);
    return OK;
}

EXPORT CUresult cuStreamSynchronize(CUstream s)
{
    ENTER(cuStreamSynchronize);
    return valid_stream(s) ? OK : ERR_INVALID_HANDLE;
}

EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags)
{
    ENTER(cuStreamWaitEvent);
    if (!valid_stream(s) || e == NULL || e->magic != MAGIC_EVENT) {
        return ERR_INVALID_HANDLE;
    }
    if (flags != 0) {
        return ERR_INVALID_VALUE;
    }
    pthread_mutex_lock(&lock);
    last_wait_stream = s;
    last_wait_event = e;
    pthread_mutex_unlock(&lock);
    return OK;
}

EXPORT CUresult cuEventCreate(CUevent *out, unsigned int flags)
{
    CUresult rc;
    CUevent e;

    ENTER(cuEventCreate);
    if ((rc = need_context()) != OK) {
        return rc;
    }
    if (flags > 0xF) {
        return ERR_INVALID_VALUE;
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return ERR_OUT_OF_MEMORY;
    }
    e->magic = MAGIC_EVENT;
    __atomic_add_fetch(&live_events, 1, __ATOMIC_SEQ_CST);
    *out = e;
    return OK;
}

EXPORT CUresult cuEventDestroy_v2(CUevent e)
{
    ENTER(cuEventDestroy_v2);
    if (e == NULL || e->magic != MAGIC_EVENT) {
        return ERR_INVALID_HANDLE;
    }
    e->magic = 0;
    free(e);
    __atomic_sub_fetch(&live_events, 1, __ATOMIC_SEQ_CST);
    return OK;
}

EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
    ENTER(cuEventRecord);
    if (e == NULL || e->magic != MAGIC_EVENT || !valid_stream(s)) {
        return ERR_INVALID_HANDLE;
    }
    e->records++;
    return OK;
}

/* ---- counters for the tests ------------------------------------------- */

EXPORT long standin_live_allocations(void) { return (long)nallocs; }
EXPORT long standin_live_bytes(void) { return live_bytes; }
EXPORT long standin_live_streams(void) { return live_streams; }
EXPORT long standin_live_events(void) { return live_events; }
EXPORT int standin_context_depth(void) { return depth; }
EXPORT void *standin_last_wait_stream(void) { return last_wait_stream; }
EXPORT void *standin_last_wait_event(void) { return last_wait_event; }

EXPORT long standin_event_records(CUevent e)
{
    return e != NULL && e->magic == MAGIC_EVENT ? e->records : -1;
}

EXPORT long standin_context_refs(void)
{
    long total = 0;
    int i;
    for (i = 0; i < MAX_DEVICES; i++) {
        total += contexts[i].refs;
    }
    return total;
}

EXPORT long standin_calls(const char *name)
{
    int i;
    for (i = 0; i < 64 && counters[i].name != NULL; i++) {
        if (strcmp(counters[i].name, name) == 0) {
            return counters[i].calls;
        }
    }
    return 0;
}

EXPORT void standin_reset_calls(void)
{
    pthread_mutex_lock(&lock);
    memset(counters, 0, sizeof(counters));
    last_wait_stream = NULL;
    last_wait_event = NULL;
    pthread_mutex_unlock(&lock);
}

/* Whether `ptr` is a device address of the stand-in (inside the range). */
EXPORT int standin_is_device_pointer(CUdeviceptr ptr)
{
    return in_range(ptr);
}
