/* blockcache.c -- the memory of CPUBuffer (cpubuffer.c): blocks aligned
 * for any item, large ones mapped in huge pages, and a cache of freed mapped
 * blocks for the next buffer of the same size. */
#include "blockcache.h"

#include <errno.h>
#include <stdlib.h>
#ifdef __linux__
#  include <sys/mman.h>
#endif

#define CPU_ALIGNMENT 64
/* Blocks from this size on come straight from mmap, rounded up to whole
 * 2 MiB pages, and ask the kernel for transparent huge pages (Linux): the
 * first touch of fresh memory then faults once per 2 MiB instead of once
 * per 4 KiB.  Smaller blocks come from the C allocator. */
#define CPU_HUGE_BLOCK ((size_t)2 << 20)

#ifdef __linux__
/* ---- the block cache --------------------------------------------------
 * Even with huge pages, a fresh block costs the kernel's zeroing plus a
 * fault per page on first touch: about as long as filling it.  So freed
 * mapped blocks are kept, up to CACHE_SLOTS blocks and cache_limit bytes
 * (BUFFEREXT_CPU_CACHE_BYTES), and CPUBuffer.empty() of the same rounded
 * size takes one back: code that makes and drops buffers of one size in a
 * loop (a redistribution per step) writes into memory already mapped.
 * Kept blocks are marked MADV_FREE, so under memory pressure the kernel
 * takes their pages back (they read as zero then): the cache never holds
 * memory the system needs.  The zero-filled constructor takes kept blocks
 * too and clears them: no slower than the kernel's zeroing of fresh pages,
 * whereas faulting in fresh blocks while others sit in the cache measured
 * seven times slower on the 2-core VM this was written on.  Guarded by
 * the GIL, which every caller holds, and without it by cache_mutex. */
#define CACHE_SLOTS 8
#define CACHE_ENV "BUFFEREXT_CPU_CACHE_BYTES"

static struct { void *block; size_t size; } cache[CACHE_SLOTS];
static int cache_count;             /* oldest first */
static size_t cache_bytes;
static size_t cache_limit = (size_t)256 << 20;
BUFFEREXT_MUTEX(cache_mutex);

static void
cache_drop_oldest(void)
{
    (void)munmap(cache[0].block, cache[0].size);
    cache_bytes -= cache[0].size;
    cache_count--;
    memmove(&cache[0], &cache[1], (size_t)cache_count * sizeof cache[0]);
}

/* A kept block of exactly `size` bytes (the newest), or NULL. */
static void *
cache_take(size_t size)
{
    void *block = NULL;

    BUFFEREXT_MUTEX_LOCK(cache_mutex);
    for (int i = cache_count - 1; i >= 0; i--) {
        if (cache[i].size == size) {
            block = cache[i].block;
            cache_bytes -= size;
            cache_count--;
            memmove(&cache[i], &cache[i + 1],
                    (size_t)(cache_count - i) * sizeof cache[0]);
            break;
        }
    }
    BUFFEREXT_MUTEX_UNLOCK(cache_mutex);
    return block;
}

static void
cache_keep(void *block, size_t size)
{
    if (size > cache_limit) {
        (void)munmap(block, size);
        return;
    }
#  ifdef MADV_FREE
    (void)madvise(block, size, MADV_FREE);
#  endif
    BUFFEREXT_MUTEX_LOCK(cache_mutex);
    while (cache_count == CACHE_SLOTS || cache_bytes + size > cache_limit) {
        cache_drop_oldest();
    }
    cache[cache_count].block = block;
    cache[cache_count].size = size;
    cache_count++;
    cache_bytes += size;
    BUFFEREXT_MUTEX_UNLOCK(cache_mutex);
}
#endif  /* __linux__ */

void
bufferext_block_free(void *allocation, size_t mapped)
{
#ifdef __linux__
    if (mapped) {
        cache_keep(allocation, mapped);
        return;
    }
#endif
    (void)mapped;
    PyMem_RawFree(allocation);
}

void *
bufferext_block_alloc(Py_ssize_t nbytes, int zeroed, char **data,
                      size_t *mapped)
{
    void *allocation = NULL;

    if ((size_t)nbytes > (size_t)PY_SSIZE_T_MAX - CPU_HUGE_BLOCK) {
        PyErr_Format(PyExc_ValueError, "CPUBuffer: %zd bytes is too large "
                     "(at most %zd)", nbytes,
                     (Py_ssize_t)(PY_SSIZE_T_MAX - CPU_HUGE_BLOCK));
        return NULL;
    }
    *mapped = 0;
#ifdef __linux__
    if ((size_t)nbytes >= CPU_HUGE_BLOCK) {
        size_t size = ((size_t)nbytes + CPU_HUGE_BLOCK - 1) &
                      ~(CPU_HUGE_BLOCK - 1);
        void *block = cache_take(size);
        if (block != NULL) {
            if (zeroed) {
                memset(block, 0, (size_t)nbytes);
            }
        }
        else {
            block = mmap(NULL, size, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (block == MAP_FAILED) {  /* try the C allocator instead */
                block = NULL;
            }
            else {                      /* zero-filled by the kernel */
                (void)madvise(block, size, MADV_HUGEPAGE);
            }
        }
        if (block != NULL) {
            *mapped = size;
            *data = block;              /* page-aligned */
            return block;
        }
    }
#endif
    allocation = zeroed ? PyMem_RawCalloc(1, (size_t)nbytes + CPU_ALIGNMENT)
                        : PyMem_RawMalloc((size_t)nbytes + CPU_ALIGNMENT);
    if (allocation == NULL) {
        PyErr_Format(PyExc_MemoryError,
                     "CPUBuffer: cannot allocate %zd bytes", nbytes);
        return NULL;
    }
    *data = (char *)(((uintptr_t)allocation + CPU_ALIGNMENT - 1) &
                     ~(uintptr_t)(CPU_ALIGNMENT - 1));
    return allocation;
}

size_t
bufferext_block_cache_clear(void)
{
    size_t released = 0;
#ifdef __linux__
    BUFFEREXT_MUTEX_LOCK(cache_mutex);
    released = cache_bytes;
    while (cache_count) {
        cache_drop_oldest();
    }
    BUFFEREXT_MUTEX_UNLOCK(cache_mutex);
#endif
    return released;
}

int
bufferext_block_cache_configure(void)
{
#ifdef __linux__
    const char *env = getenv(CACHE_ENV);
    if (env != NULL && *env != '\0') {
        char *end;
        unsigned long long limit;
        errno = 0;
        limit = strtoull(env, &end, 10);
        if (errno || *end != '\0' || *env < '0' || *env > '9' ||
            limit > PY_SSIZE_T_MAX) {
            PyErr_Format(PyExc_ValueError,
                         CACHE_ENV "='%.100s': must be a byte count (0 turns the "
                         "CPUBuffer block cache off)", env);
            return -1;
        }
        cache_limit = (size_t)limit;
    }
#endif
    return 0;
}
