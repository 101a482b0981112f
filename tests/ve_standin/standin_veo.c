/* standin_veo.c -- TEST DOUBLE of NEC's VEO library (libveo.so.1), built by
 * the tests with `gcc -shared -fPIC`; never shipped.  It implements exactly
 * the entry points bufferext's VEO table loads, over host memory:
 *
 *   - HMEM addresses are tagged like AVEO's: bit 63 marks a VE address and
 *     bits 62:59 carry the identifier of the owning VEO process; the low
 *     bits are the host block that stands in for VE memory.  veo_hmemcpy
 *     refuses a copy in which neither side is tagged (host to host), and
 *     refuses a tagged address that is not inside a live allocation.
 *   - Failure injection through environment variables read at every call:
 *       STANDIN_VEO_NODES=N          nodes 0..N-1 exist (default 4)
 *       STANDIN_VEO_FAIL_PROC=1      veo_proc_create fails
 *       STANDIN_VEO_FAIL_CONTEXT=1   veo_context_open fails
 *       STANDIN_VEO_FAIL_ALLOC=1     veo_alloc_hmem fails
 *       STANDIN_VEO_FAIL_COPY=1      veo_hmemcpy fails
 *   - Counters read through ctypes: standin_live_hmem(), standin_live_procs(),
 *     standin_live_contexts(), standin_errors() (misuse: freeing an unknown
 *     address, destroying a process with live HMEM or open contexts...),
 *     standin_calls(name); standin_set_errors(n) resets the misuse count.
 *   - STANDIN_VEO_REPORT=path: at process exit, writes the counters there
 *     ("hmem=0 procs=0 contexts=0 errors=0"), so tests can prove teardown.
 *   - Thread-safe as VEO is: one caller at a time inside (the entry points
 *     at the end of the file take a mutex around the *_unlocked bodies).
 *
 * With -DSTANDIN_OMIT_HMEM the HMEM entry points are left out, as in a VEO
 * older than veoffload-aveo 2.7.6. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VE_FLAG (UINT64_C(1) << 63)
#define IDENT_SHIFT 59
#define IDENT_MASK (UINT64_C(0xF) << IDENT_SHIFT)
#define MAX_PROCS 16
#define MAX_ALLOCS 4096

struct veo_proc_handle {
    int node;
    int ident;
    int contexts;
};

struct veo_thr_ctxt {
    struct veo_proc_handle *proc;
};

typedef struct {
    char *block;            /* host memory standing in for VE memory */
    size_t size;
    int ident;              /* owning process */
} allocation;

static struct veo_proc_handle *procs[MAX_PROCS];
static allocation allocs[MAX_ALLOCS];
static long live_hmem, live_procs, live_contexts, errors;
static long n_create, n_alloc, n_free, n_copy;
/* VEO may be called from several threads at once (a free-threaded
 * CPython runs them in parallel): one caller at a time in here */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int
env_flag(const char *name)
{
    const char *value = getenv(name);
    return value != NULL && value[0] != '\0' && strcmp(value, "0") != 0;
}

/* ---- counters (read by the tests) ------------------------------------- */

long standin_live_hmem(void) { return live_hmem; }
long standin_live_procs(void) { return live_procs; }
long standin_live_contexts(void) { return live_contexts; }
long standin_errors(void) { return errors; }
void standin_set_errors(long value) { errors = value; }

long
standin_calls(const char *name)
{
    if (strcmp(name, "veo_proc_create") == 0) return n_create;
    if (strcmp(name, "veo_alloc_hmem") == 0) return n_alloc;
    if (strcmp(name, "veo_free_hmem") == 0) return n_free;
    if (strcmp(name, "veo_hmemcpy") == 0) return n_copy;
    return -1;
}

__attribute__((destructor)) static void
standin_report(void)
{
    const char *path = getenv("STANDIN_VEO_REPORT");
    FILE *out;

    if (path == NULL || (out = fopen(path, "w")) == NULL) {
        return;
    }
    fprintf(out, "hmem=%ld procs=%ld contexts=%ld errors=%ld\n", live_hmem,
            live_procs, live_contexts, errors);
    fclose(out);
}

/* ---- processes and contexts ------------------------------------------- */

static struct veo_proc_handle *
veo_proc_create_unlocked(int node)
{
    const char *nodes = getenv("STANDIN_VEO_NODES");
    int i;

    n_create++;
    if (env_flag("STANDIN_VEO_FAIL_PROC") || node < 0 ||
        node >= (nodes != NULL ? atoi(nodes) : 4)) {
        return NULL;
    }
    for (i = 0; i < MAX_PROCS; i++) {
        if (procs[i] == NULL) {
            procs[i] = calloc(1, sizeof(struct veo_proc_handle));
            if (procs[i] == NULL) {
                return NULL;
            }
            procs[i]->node = node;
            procs[i]->ident = i;
            live_procs++;
            return procs[i];
        }
    }
    return NULL;
}

static int
proc_valid(struct veo_proc_handle *proc)
{
    return proc != NULL && proc->ident >= 0 && proc->ident < MAX_PROCS &&
           procs[proc->ident] == proc;
}

static int
veo_proc_destroy_unlocked(struct veo_proc_handle *proc)
{
    int i;

    if (!proc_valid(proc)) {
        errors++;
        return -1;
    }
    if (proc->contexts != 0) {
        errors++;               /* VEO wants contexts closed first */
    }
    for (i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].block != NULL && allocs[i].ident == proc->ident) {
            errors++;           /* HMEM freed by process teardown */
            free(allocs[i].block);
            allocs[i].block = NULL;
            live_hmem--;
        }
    }
    procs[proc->ident] = NULL;
    free(proc);
    live_procs--;
    return 0;
}

static struct veo_thr_ctxt *
veo_context_open_unlocked(struct veo_proc_handle *proc)
{
    struct veo_thr_ctxt *ctx;

    if (!proc_valid(proc) || env_flag("STANDIN_VEO_FAIL_CONTEXT")) {
        return NULL;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        return NULL;
    }
    ctx->proc = proc;
    proc->contexts++;
    live_contexts++;
    return ctx;
}

static int
veo_context_close_unlocked(struct veo_thr_ctxt *ctx)
{
    if (ctx == NULL || !proc_valid(ctx->proc)) {
        errors++;
        return -1;
    }
    ctx->proc->contexts--;
    live_contexts--;
    free(ctx);
    return 0;
}

int
veo_api_version(void)
{
    return 11;
}

const char *
veo_version_string(void)
{
    return "standin-veo 0 (bufferext test double, not NEC's VEO)";
}

#ifndef STANDIN_OMIT_HMEM
/* ---- heterogeneous memory --------------------------------------------- */

int
veo_is_ve_addr(const void *addr)
{
    return ((uint64_t)(uintptr_t)addr & VE_FLAG) ? 1 : 0;
}

/* The live allocation holding [addr, addr + size), or NULL. */
static allocation *
find_allocation(const void *addr, size_t size)
{
    uint64_t tagged = (uint64_t)(uintptr_t)addr;
    int ident = (int)((tagged & IDENT_MASK) >> IDENT_SHIFT);
    char *host = (char *)(uintptr_t)(tagged & ~(VE_FLAG | IDENT_MASK));
    int i;

    for (i = 0; i < MAX_ALLOCS; i++) {
        allocation *a = &allocs[i];
        if (a->block != NULL && a->ident == ident && host >= a->block &&
            size <= a->size && (size_t)(host - a->block) <= a->size - size) {
            return a;
        }
    }
    return NULL;
}

static char *
host_address(const void *addr)
{
    return (char *)(uintptr_t)((uint64_t)(uintptr_t)addr &
                               ~(VE_FLAG | IDENT_MASK));
}

static int
veo_alloc_hmem_unlocked(struct veo_proc_handle *proc, void **addr, size_t size)
{
    int i;

    n_alloc++;
    if (!proc_valid(proc) || addr == NULL ||
        env_flag("STANDIN_VEO_FAIL_ALLOC")) {
        return -1;
    }
    for (i = 0; i < MAX_ALLOCS; i++) {
        if (allocs[i].block == NULL) {
            char *block = malloc(size ? size : 1);
            if (block == NULL) {
                return -1;
            }
            memset(block, 0xA5, size);   /* VE memory is not zeroed */
            allocs[i].block = block;
            allocs[i].size = size;
            allocs[i].ident = proc->ident;
            *addr = (void *)(uintptr_t)(VE_FLAG |
                                        ((uint64_t)proc->ident << IDENT_SHIFT) |
                                        (uint64_t)(uintptr_t)block);
            live_hmem++;
            return 0;
        }
    }
    return -1;
}

static int
veo_free_hmem_unlocked(void *addr)
{
    allocation *a;

    n_free++;
    a = veo_is_ve_addr(addr) ? find_allocation(addr, 0) : NULL;
    if (a == NULL || a->block != host_address(addr)) {
        errors++;
        return -1;
    }
    free(a->block);
    a->block = NULL;
    live_hmem--;
    return 0;
}

static int
veo_hmemcpy_unlocked(void *dst, const void *src, size_t size)
{
    int dst_ve = veo_is_ve_addr(dst), src_ve = veo_is_ve_addr(src);

    n_copy++;
    if (env_flag("STANDIN_VEO_FAIL_COPY")) {
        return -1;
    }
    if (!dst_ve && !src_ve) {
        errors++;               /* host to host: not an HMEM copy */
        return -1;
    }
    if ((dst_ve && find_allocation(dst, size) == NULL) ||
        (src_ve && find_allocation(src, size) == NULL)) {
        errors++;
        return -1;
    }
    memmove(dst_ve ? host_address(dst) : dst,
            src_ve ? host_address(src) : src, size);
    return 0;
}
#endif

/* ---- the entry points: one caller at a time ---------------------------- */

struct veo_proc_handle *
veo_proc_create(int node)
{
    struct veo_proc_handle *result;

    pthread_mutex_lock(&lock);
    result = veo_proc_create_unlocked(node);
    pthread_mutex_unlock(&lock);
    return result;
}

int
veo_proc_destroy(struct veo_proc_handle *proc)
{
    int result;

    pthread_mutex_lock(&lock);
    result = veo_proc_destroy_unlocked(proc);
    pthread_mutex_unlock(&lock);
    return result;
}

struct veo_thr_ctxt *
veo_context_open(struct veo_proc_handle *proc)
{
    struct veo_thr_ctxt *result;

    pthread_mutex_lock(&lock);
    result = veo_context_open_unlocked(proc);
    pthread_mutex_unlock(&lock);
    return result;
}

int
veo_context_close(struct veo_thr_ctxt *ctx)
{
    int result;

    pthread_mutex_lock(&lock);
    result = veo_context_close_unlocked(ctx);
    pthread_mutex_unlock(&lock);
    return result;
}
#ifndef STANDIN_OMIT_HMEM
int
veo_alloc_hmem(struct veo_proc_handle *proc, void **addr, size_t size)
{
    int result;

    pthread_mutex_lock(&lock);
    result = veo_alloc_hmem_unlocked(proc, addr, size);
    pthread_mutex_unlock(&lock);
    return result;
}
#endif
#ifndef STANDIN_OMIT_HMEM
int
veo_free_hmem(void *addr)
{
    int result;

    pthread_mutex_lock(&lock);
    result = veo_free_hmem_unlocked(addr);
    pthread_mutex_unlock(&lock);
    return result;
}
#endif
#ifndef STANDIN_OMIT_HMEM
int
veo_hmemcpy(void *dst, const void *src, size_t size)
{
    int result;

    pthread_mutex_lock(&lock);
    result = veo_hmemcpy_unlocked(dst, src, size);
    pthread_mutex_unlock(&lock);
    return result;
}
#endif
