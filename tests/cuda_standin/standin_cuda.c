/* standin_cuda.c -- TEST DOUBLE of the CUDA driver (libcuda) for bufferext's
 * tests.  Built by the tests (gcc -shared -fPIC), never shipped.
 *
 * It implements exactly the driver entry points of the table in
 * Modules/cudabuffer.c, over host memory:
 *   - device pointers lie in an address range reserved PROT_NONE, so a
 *     CPU-only consumer that dereferences one crashes instead of reading
 *     plausible bytes; the bytes live in separate host blocks;
 *   - "asynchronous" work runs at once by default (a stream is an ordered
 *     queue that is always drained), or late (STANDIN_CUDA_LATE);
 *     events and streams are checked handles;
 *   - every call that needs a context fails with CUDA_ERROR_INVALID_CONTEXT
 *     unless one was pushed, so a missing push/pop is caught.
 *
 * Read from the environment at every call (all off when unset):
 *   STANDIN_CUDA_DEVICES=N        device count (default 1; 0: cuInit says
 *                                 CUDA_ERROR_NO_DEVICE)
 *   STANDIN_CUDA_INIT_ERROR=code  cuInit returns this CUresult
 *   STANDIN_CUDA_MEM_LIMIT=bytes  cuMemAlloc_v2 beyond it: out of memory
 *   STANDIN_CUDA_FAIL=a[=code],b  these entry points return `code`
 *                                 (default 999, CUDA_ERROR_UNKNOWN)
 *   STANDIN_CUDA_LATE=1           writes queued on a stream (HtoD, DtoD,
 *                                 memsets) stay pending until someone waits
 *                                 for them: cuStreamSynchronize of the
 *                                 stream, cuEventSynchronize or
 *                                 cuStreamWaitEvent of an event recorded
 *                                 after them, a later read of device memory
 *                                 on the same stream (DtoH), destroying the
 *                                 stream or freeing the memory; or until the
 *                                 test lands them (standin_land_all).
 *                                 Nothing lands by itself, so a consumer
 *                                 that skips the wait reads the old bytes
 *                                 however long it takes to look;
 *                                 cuEventQuery says CUDA_ERROR_NOT_READY
 *                                 meanwhile.
 *   STANDIN_CUDA_HOST_VISIBLE=1   cuMemAlloc_v2 hands out the host block
 *                                 itself (256-byte aligned), which the CPU
 *                                 can read and write: memory that, say, a
 *                                 CUDA-aware MPI library reads directly.
 *   STANDIN_CUDA_NO_POINTER_CONTEXT=1
 *                                 cuPointerGetAttribute(CONTEXT) answers
 *                                 NULL, as the driver does for memory no
 *                                 context owns (cuMemCreate mappings,
 *                                 cuMemAllocAsync pools: JAX's arrays).
 * Holds, so that a test makes an interleaving happen instead of waiting for
 * the scheduler to produce it: standin_hold(name) stops every later call of
 * that entry point on entry, where bufferext calls it without the GIL, until
 * standin_let_go(); standin_wait_held(n) returns how many calls are stopped
 * there once n are, or once the hold is let go (by a thread that failed
 * before it got there, say: a bug then fails the test, never hangs it).
 * Counters for the tests (read through ctypes): standin_live_allocations,
 * standin_live_bytes, standin_live_streams, standin_live_events,
 * standin_pending_work, standin_context_refs, standin_context_depth,
 * standin_calls(name), standin_last_wait_stream, standin_last_wait_event,
 * standin_reset_calls; and standin_land_all. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* The driver's types as cuda.h declares them (its enums as ints of the
 * same size); the handles point to our own definitions of cuda.h's
 * incomplete structs.  tests/test_cuda_headers.py compiles this file with
 * -DSTANDIN_WITH_CUDA_H, against the real declarations: every entry point
 * and constant below must then match cuda.h's. */
#ifdef STANDIN_WITH_CUDA_H
#include <cuda.h>
#else
typedef int CUresult;
typedef int CUdevice;
typedef int CUpointer_attribute;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
#endif

struct CUctx_st { uint32_t magic; int device; int refs; };
struct CUstream_st { uint32_t magic; CUcontext ctx; };
/* An event remembers where it was last recorded: the stream's queue key
 * and the last sequence number handed out then (late work, see below). */
struct CUevent_st {
    uint32_t magic;
    long records;
    uintptr_t stream;
    unsigned long long seq;
};

#define OK 0
#define ERR_INVALID_VALUE 1
#define ERR_OUT_OF_MEMORY 2
#define ERR_NOT_INITIALIZED 3
#define ERR_NO_DEVICE 100
#define ERR_INVALID_DEVICE 101
#define ERR_INVALID_CONTEXT 201
#define ERR_INVALID_HANDLE 400
#define ERR_NOT_READY 600
#define ERR_UNKNOWN 999
#define ATTRIBUTE_CONTEXT 1
#define ATTRIBUTE_MEMORY_TYPE 2
#define ATTRIBUTE_IS_MANAGED 8
#define ATTRIBUTE_DEVICE_ORDINAL 9
#define MEMORYTYPE_DEVICE 2
#define STREAM_LEGACY ((CUstream)0x1)
#define STREAM_PER_THREAD ((CUstream)0x2)
#define STREAM_NON_BLOCKING 0x1

#ifdef STANDIN_WITH_CUDA_H
#define SAME(ours, theirs)                                                  \
    _Static_assert((ours) == (theirs), #ours " is not " #theirs " of cuda.h")
SAME(OK, CUDA_SUCCESS);
SAME(ERR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE);
SAME(ERR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY);
SAME(ERR_NOT_INITIALIZED, CUDA_ERROR_NOT_INITIALIZED);
SAME(ERR_NO_DEVICE, CUDA_ERROR_NO_DEVICE);
SAME(ERR_INVALID_DEVICE, CUDA_ERROR_INVALID_DEVICE);
SAME(ERR_INVALID_CONTEXT, CUDA_ERROR_INVALID_CONTEXT);
SAME(ERR_INVALID_HANDLE, CUDA_ERROR_INVALID_HANDLE);
SAME(ERR_NOT_READY, CUDA_ERROR_NOT_READY);
SAME(ERR_UNKNOWN, CUDA_ERROR_UNKNOWN);
SAME(ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_CONTEXT);
SAME(ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
SAME(ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_IS_MANAGED);
SAME(ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
SAME(MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE);
/* pointer constants: GCC folds these casts (an extension) */
SAME((uintptr_t)STREAM_LEGACY, (uintptr_t)CU_STREAM_LEGACY);
SAME((uintptr_t)STREAM_PER_THREAD, (uintptr_t)CU_STREAM_PER_THREAD);
SAME(STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING);
#endif

#define MAGIC_CTX 0x43545830u
#define MAGIC_STREAM 0x5354524du
#define MAGIC_EVENT 0x45564e54u
#define MAX_DEVICES 8
#define MAX_DEPTH 32
#define RANGE_SIZE ((size_t)1 << 32)    /* reserved device address space */
#define ALIGN 256

#define EXPORT __attribute__((visibility("default")))

/* the allocations, the counters and the late-work queue (any thread: the
 * module calls the driver without the GIL) */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialised;
static struct CUctx_st contexts[MAX_DEVICES];
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

/* ---- holds (standin_hold) --------------------------------------------- */

/* all under hold_lock, which no other lock is taken inside; hold_cond is
 * signalled at every change */
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static char hold_name[64];              /* the entry point held; "" none */
static long held;                       /* calls stopped since the hold */
static unsigned long hold_round;        /* bumped by each let-go */

/* Stop here while `name` is held: with none of the stand-in's other locks
 * taken, so the rest of the driver works meanwhile. */
static void
hold_point(const char *name)
{
    unsigned long round;

    pthread_mutex_lock(&hold_lock);
    if (strcmp(hold_name, name) == 0) {
        round = hold_round;
        held++;
        pthread_cond_broadcast(&hold_cond);
        while (round == hold_round) {
            pthread_cond_wait(&hold_cond, &hold_lock);
        }
    }
    pthread_mutex_unlock(&hold_lock);
}

EXPORT void standin_hold(const char *name)
{
    pthread_mutex_lock(&hold_lock);
    snprintf(hold_name, sizeof(hold_name), "%s", name);
    held = 0;
    pthread_mutex_unlock(&hold_lock);
}

EXPORT long standin_wait_held(long n)
{
    long got;

    pthread_mutex_lock(&hold_lock);
    while (held < n && hold_name[0] != '\0') {
        pthread_cond_wait(&hold_cond, &hold_lock);
    }
    got = held;
    pthread_mutex_unlock(&hold_lock);
    return got;
}

EXPORT void standin_let_go(void)
{
    pthread_mutex_lock(&hold_lock);
    hold_name[0] = '\0';
    hold_round++;
    pthread_cond_broadcast(&hold_cond);
    pthread_mutex_unlock(&hold_lock);
}

#define ENTER(name)                                                         \
    do {                                                                    \
        CUresult injected_rc = injected(#name);                             \
        if (injected_rc != OK) {                                            \
            return injected_rc;                                             \
        }                                                                   \
        hold_point(#name);                                                  \
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
 * them all (hold `lock`). */
static char *
host_of_locked(CUdeviceptr ptr, size_t size)
{
    size_t i;

    for (i = 0; i < nallocs; i++) {
        allocation *a = &allocs[i];
        if (ptr >= a->base && ptr - a->base <= a->size &&
            size <= a->size - (ptr - a->base)) {
            return a->host + (ptr - a->base);
        }
    }
    return NULL;
}

static int
env_flag(const char *name)
{
    const char *value = getenv(name);
    return value != NULL && value[0] != '\0' && strcmp(value, "0") != 0;
}

/* ---- late work (STANDIN_CUDA_LATE) ------------------------------------- */

/* A write queued on a stream that has not landed yet.  The queue is one
 * list in submission order (`seq`), under `lock`; the work of one stream
 * lands in that order whoever applies it. */
enum { WORK_HTOD, WORK_DTOD, WORK_MEMSET };

typedef struct work {
    struct work *next;
    uintptr_t stream;           /* queue key (stream_key) */
    unsigned long long seq;
    int kind;
    CUdeviceptr dst, src;       /* src: WORK_DTOD only */
    size_t size;                /* bytes written */
    size_t width;               /* WORK_MEMSET: 1, 2 or 4 */
    unsigned char value[4];     /* WORK_MEMSET: the pattern */
    char bytes[];               /* WORK_HTOD: the source, captured when
                                   queued (the caller may free it) */
} work;

static work *queue_head, *queue_tail;
static unsigned long long queue_seq;   /* the last one handed out */
static long pending_work;

/* The legacy default stream answers to NULL and 0x1. */
static uintptr_t
stream_key(const void *stream)
{
    return stream == NULL ? (uintptr_t)STREAM_LEGACY : (uintptr_t)stream;
}

static int
late(void)
{
    return env_flag("STANDIN_CUDA_LATE");
}

/* Do one write now; the destination (or the DtoD source) may have been
 * freed with the write pending only through a bug of the caller's, and is
 * then skipped rather than written. */
static void
write_locked(const work *w, const void *from)
{
    char *d = host_of_locked(w->dst, w->size), *s;
    size_t i;

    if (d == NULL) {
        return;
    }
    if (w->kind == WORK_MEMSET) {
        for (i = 0; i < w->size; i += w->width) {
            memcpy(d + i, w->value, w->width);
        }
    }
    else if (w->kind == WORK_DTOD) {
        if ((s = host_of_locked(w->src, w->size)) != NULL) {
            memmove(d, s, w->size);
        }
    }
    else {
        memcpy(d, from, w->size);
    }
}

static void
unlink_locked(work *w, work *prev)
{
    if (prev == NULL) {
        queue_head = w->next;
    }
    else {
        prev->next = w->next;
    }
    if (queue_tail == w) {
        queue_tail = prev;
    }
    pending_work--;
}

/* Land the work of `stream` queued up to `seq`, in order. */
static void
drain_locked(uintptr_t stream, unsigned long long seq)
{
    work *w = queue_head, *prev = NULL, *next;

    for (; w != NULL && w->seq <= seq; w = next) {
        next = w->next;
        if (w->stream != stream) {
            prev = w;
            continue;
        }
        unlink_locked(w, prev);
        write_locked(w, w->bytes);
        free(w);
    }
}

static int
touches(const work *w, CUdeviceptr base, size_t size)
{
    return (w->dst < base + size && base < w->dst + w->size) ||
           (w->kind == WORK_DTOD && w->src < base + size &&
            base < w->src + w->size);
}

/* Land every write that touches [base, base + size), with the earlier work
 * of its stream first. */
static void
drain_range_locked(CUdeviceptr base, size_t size)
{
    work *w;

    for (w = queue_head; w != NULL;) {
        if (touches(w, base, size)) {
            drain_locked(w->stream, w->seq);
            w = queue_head;             /* the list changed: start over */
        }
        else {
            w = w->next;
        }
    }
}

/* Queue `job` (its fields but next, stream and seq) on `stream`: pending
 * (late), or at once after the stream's earlier work.  `from` is an HtoD
 * copy's source.  The destination (and DtoD source) must be allocated. */
static CUresult
submit(CUstream stream, work *job, const void *from)
{
    size_t extra = job->kind == WORK_HTOD ? job->size : 0;
    CUresult rc = OK;
    work *w;

    pthread_mutex_lock(&lock);
    if (host_of_locked(job->dst, job->size) == NULL ||
        (job->kind == WORK_DTOD &&
         host_of_locked(job->src, job->size) == NULL)) {
        rc = ERR_INVALID_VALUE;
    }
    else if (!late()) {
        drain_locked(stream_key(stream), queue_seq);
        write_locked(job, from);
    }
    else if ((w = malloc(sizeof(*w) + extra)) == NULL) {
        rc = ERR_OUT_OF_MEMORY;
    }
    else {
        *w = *job;
        memcpy(w->bytes, from, extra);
        w->next = NULL;
        w->stream = stream_key(stream);
        w->seq = ++queue_seq;
        if (queue_tail == NULL) {
            queue_head = w;
        }
        else {
            queue_tail->next = w;
        }
        queue_tail = w;
        pending_work++;
    }
    pthread_mutex_unlock(&lock);
    return rc;
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
    char *host = NULL;
    int visible;

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
    /* host-visible memory is the block itself: 256-byte aligned like
     * device allocations, so the alignment checks hold in both modes */
    visible = env_flag("STANDIN_CUDA_HOST_VISIBLE");
    if (visible ? posix_memalign((void **)&host, ALIGN, size) != 0
                : (host = malloc(size)) == NULL) {
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
    if (visible) {
        *out = (CUdeviceptr)(uintptr_t)host;
        rc = OK;
    }
    else {
        rc = reserve(size, out);
    }
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
            /* work still queued on it lands first (the driver synchronises
             * here); none can reach the block once it is freed */
            drain_range_locked(allocs[i].base, allocs[i].size);
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

/* Context, device ordinal, memory type (device) or managed-ness (host-visible
 * allocations, STANDIN_CUDA_HOST_VISIBLE) of a pointer inside one of our
 * allocations; host (or unknown) pointers are an invalid value, as with the
 * driver. */
EXPORT CUresult cuPointerGetAttribute(void *data,
                                      CUpointer_attribute attribute,
                                      CUdeviceptr ptr)
{
    CUcontext ctx = NULL;
    int visible = 0;
    size_t i;

    ENTER(cuPointerGetAttribute);
    if (!initialised) {
        return ERR_NOT_INITIALIZED;
    }
    pthread_mutex_lock(&lock);
    for (i = 0; i < nallocs; i++) {
        if (ptr >= allocs[i].base && ptr - allocs[i].base < allocs[i].size) {
            ctx = allocs[i].ctx;
            visible = allocs[i].base == (CUdeviceptr)(uintptr_t)allocs[i].host;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    if (ctx == NULL || data == NULL) {
        return ERR_INVALID_VALUE;
    }
    if (attribute == ATTRIBUTE_CONTEXT) {
        *(CUcontext *)data =
            env_flag("STANDIN_CUDA_NO_POINTER_CONTEXT") ? NULL : ctx;
    }
    else if (attribute == ATTRIBUTE_DEVICE_ORDINAL) {
        *(int *)data = ctx->device;
    }
    else if (attribute == ATTRIBUTE_MEMORY_TYPE) {
        *(unsigned int *)data = MEMORYTYPE_DEVICE;  /* cuMemAlloc's, all */
    }
    else if (attribute == ATTRIBUTE_IS_MANAGED) {
        /* host-visible memory is the CPU's too, as managed memory is */
        *(int *)data = visible;
    }
    else {
        return ERR_INVALID_VALUE;
    }
    return OK;
}

/* Whether `ptr` lies in the reserved device range. */
static int
in_range(CUdeviceptr ptr)
{
    return range != NULL && ptr >= (CUdeviceptr)(uintptr_t)range &&
           ptr < (CUdeviceptr)(uintptr_t)range + RANGE_SIZE;
}

/* A device address: in the reservation, or inside a live allocation (the
 * host-visible ones are ordinary host addresses). */
static int
is_device(CUdeviceptr ptr)
{
    int found = 0;
    size_t i;

    if (in_range(ptr)) {
        return 1;
    }
    pthread_mutex_lock(&lock);
    for (i = 0; i < nallocs && !found; i++) {
        found = ptr >= allocs[i].base && ptr - allocs[i].base < allocs[i].size;
    }
    pthread_mutex_unlock(&lock);
    return found;
}

static int
valid_stream(CUstream s)
{
    return s == NULL || s == STREAM_LEGACY || s == STREAM_PER_THREAD ||
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
    work job = {0};
    CUresult rc;

    ENTER(cuMemcpyHtoDAsync_v2);
    if ((rc = check_async(stream)) != OK) {
        return rc;
    }
    if (src == NULL || is_device((CUdeviceptr)(uintptr_t)src)) {
        return ERR_INVALID_VALUE;
    }
    job.kind = WORK_HTOD;
    job.dst = dst;
    job.size = size;
    return submit(stream, &job, src);
}

/* Reads device memory: the stream's earlier work lands first, so the copy
 * sees it in order (and only it: other streams' pending writes are not
 * there yet, as on a device). */
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t size,
                                     CUstream stream)
{
    CUresult rc;
    char *s;

    ENTER(cuMemcpyDtoHAsync_v2);
    if ((rc = check_async(stream)) != OK) {
        return rc;
    }
    pthread_mutex_lock(&lock);
    drain_locked(stream_key(stream), queue_seq);
    if ((s = host_of_locked(src, size)) == NULL || dst == NULL) {
        rc = ERR_INVALID_VALUE;
    }
    else {
        memcpy(dst, s, size);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Queued like a write; it reads its source when it lands, after the
 * stream's earlier work. */
EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src,
                                     size_t size, CUstream stream)
{
    work job = {0};
    CUresult rc;

    ENTER(cuMemcpyDtoDAsync_v2);
    if ((rc = check_async(stream)) != OK) {
        return rc;
    }
    job.kind = WORK_DTOD;
    job.dst = dst;
    job.src = src;
    job.size = size;
    return submit(stream, &job, NULL);
}

static CUresult
memset_n(CUdeviceptr dst, const void *value, size_t width, size_t n,
         CUstream stream)
{
    CUresult rc = check_async(stream);
    work job = {0};

    if (rc != OK) {
        return rc;
    }
    if (dst % width != 0 || n > SIZE_MAX / width) {
        return ERR_INVALID_VALUE;
    }
    job.kind = WORK_MEMSET;
    job.dst = dst;
    job.size = n * width;
    job.width = width;
    memcpy(job.value, value, width);
    return submit(stream, &job, NULL);
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
    if ((flags & ~(unsigned int)STREAM_NON_BLOCKING) != 0) {
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
    if (s == NULL || s == STREAM_LEGACY || s == STREAM_PER_THREAD ||
        s->magic != MAGIC_STREAM) {
        return ERR_INVALID_HANDLE;
    }
    /* the driver finishes a destroyed stream's work; nothing may name the
     * handle once it is freed (a new stream may get its address) */
    pthread_mutex_lock(&lock);
    drain_locked(stream_key(s), queue_seq);
    pthread_mutex_unlock(&lock);
    s->magic = 0;
    free(s);
    __atomic_sub_fetch(&live_streams, 1, __ATOMIC_SEQ_CST);
    return OK;
}

EXPORT CUresult cuStreamSynchronize(CUstream s)
{
    ENTER(cuStreamSynchronize);
    if (!valid_stream(s)) {
        return ERR_INVALID_HANDLE;
    }
    pthread_mutex_lock(&lock);
    drain_locked(stream_key(s), queue_seq);
    pthread_mutex_unlock(&lock);
    return OK;
}

/* Land the work `e` was recorded after (hold `lock`). */
static void
drain_event_locked(CUevent e)
{
    if (e->records > 0) {
        drain_locked(e->stream, e->seq);
    }
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
    /* the simplest correct wait: the event's work lands now, so whatever
     * `s` does next comes after it */
    pthread_mutex_lock(&lock);
    drain_event_locked(e);
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
    /* the event covers what was queued on `s` until now */
    pthread_mutex_lock(&lock);
    e->records++;
    e->stream = stream_key(s);
    e->seq = queue_seq;
    pthread_mutex_unlock(&lock);
    return OK;
}

EXPORT CUresult cuEventSynchronize(CUevent e)
{
    ENTER(cuEventSynchronize);
    if (e == NULL || e->magic != MAGIC_EVENT) {
        return ERR_INVALID_HANDLE;
    }
    pthread_mutex_lock(&lock);
    drain_event_locked(e);
    pthread_mutex_unlock(&lock);
    return OK;
}

/* Complete (OK) once the work `e` was recorded after has landed; by
 * default it lands at once, so only late work (STANDIN_CUDA_LATE) is not
 * ready.  It waits for nothing and lands nothing, as the driver's. */
EXPORT CUresult cuEventQuery(CUevent e)
{
    CUresult rc = OK;
    const work *w;

    ENTER(cuEventQuery);
    if (e == NULL || e->magic != MAGIC_EVENT) {
        return ERR_INVALID_HANDLE;
    }
    pthread_mutex_lock(&lock);
    for (w = queue_head; e->records > 0 && w != NULL && w->seq <= e->seq;
         w = w->next) {
        if (w->stream == e->stream) {
            rc = ERR_NOT_READY;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* ---- counters for the tests ------------------------------------------- */

EXPORT long standin_live_allocations(void) { return (long)nallocs; }
EXPORT long standin_live_bytes(void) { return live_bytes; }
EXPORT long standin_live_streams(void) { return live_streams; }
EXPORT long standin_live_events(void) { return live_events; }
EXPORT long standin_pending_work(void) { return pending_work; }
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

/* Land every pending write (STANDIN_CUDA_LATE), each stream's in order, as
 * a device would by itself some time later. */
EXPORT void standin_land_all(void)
{
    pthread_mutex_lock(&lock);
    while (queue_head != NULL) {
        drain_locked(queue_head->stream, queue_seq);
    }
    pthread_mutex_unlock(&lock);
}

/* Whether `ptr` is a device address of the stand-in (inside the range, or
 * a host-visible allocation). */
EXPORT int standin_is_device_pointer(CUdeviceptr ptr)
{
    return is_device(ptr);
}
