/* _bench.c -- timing loops for benchmarks/run.py.
 *
 * Compiled at benchmark time against the INSTALLED bufferext headers
 * (bufferext.get_include()), exactly as an outside extension would be, so the
 * figures are those a consumer of the header gets: its own per-type cache,
 * its own inlined BufferExt_GetBuffer.
 *
 *   time_loop(op, obj, flags, n) -> int   ns for n iterations of `op`
 *   count_allocs(op, obj, flags, n) -> (raw, mem, obj, frees)
 *                                         allocator calls made by the loop
 *   cache_state(obj) -> (tag, cached)     the header's cache entry for
 *                                         type(obj), as this module sees it
 *
 * Each op is its own tight loop (the switch is outside the loop); results go
 * to a volatile sink so the compiler cannot drop the work. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "bufferext.h"

#ifdef _WIN32
#  include <windows.h>
#else
#  include <time.h>
#endif

enum {
    OP_EMPTY = 0,          /* loop overhead only */
    OP_CHECK_BUFFER,       /* PyObject_CheckBuffer(obj) */
    OP_CHECK_SUPPORTS,     /* PyObject_CheckBufferSupports(obj, flags) */
    OP_GET_PLAIN,          /* PyObject_GetBuffer + PyBuffer_Release */
    OP_GET_EXTENDED,       /* BufferExt_GetBuffer + BufferExt_Release */
    OP_LONG_ALLOC,         /* PyLong_FromLong(large) + Py_DECREF: allocates */
    OP_MEMORYVIEW,         /* PyMemoryView_FromObject + Py_DECREF: allocates */
    OP_EXCHANGE_FILL,      /* DLPack 1.3 dltensor_from_py_object_no_sync */
    OP_CHECK_INLINE,       /* PyObject_CheckBuffer's reads, inline */
    OP_GET_EX_CALL,        /* PyObject_GetBufferEx + BufferExt_Release,
                              where CPython implements the draft */
    OP_COUNT
};

static volatile Py_ssize_t sink;

/* Keep `x` alive in a register without a memory round trip per iteration
 * (a volatile read-modify-write would add a store-to-load chain of several
 * cycles to every loop and swamp the few-ns operations measured here). */
#if defined(__GNUC__) || defined(__clang__)
#  define KEEP(x) __asm__ volatile("" : "+r"(x))
#else
#  define KEEP(x) (sink = (x))
#endif

/* ---- clock ------------------------------------------------------------ */

static long long
now_ns(void)
{
#ifdef _WIN32
    static LARGE_INTEGER freq;
    LARGE_INTEGER t;
    if (freq.QuadPart == 0) {
        QueryPerformanceFrequency(&freq);
    }
    QueryPerformanceCounter(&t);
    return (long long)((double)t.QuadPart * 1e9 / (double)freq.QuadPart);
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
#endif
}

/* ---- the loops: each returns 0, or -1 with an exception ---------------- */

static int
loop_empty(PyObject *obj, int flags, Py_ssize_t n)
{
    Py_ssize_t i, acc = 0;
    (void)obj;
    (void)flags;
    for (i = 0; i < n; i++) {
        acc += i;
        KEEP(acc);
    }
    sink = acc;
    return 0;
}

static int
loop_check_buffer(PyObject *obj, int flags, Py_ssize_t n)
{
    Py_ssize_t i, acc = 0;
    (void)flags;
    for (i = 0; i < n; i++) {
        KEEP(obj);              /* as in loop_check_supports */
        acc += PyObject_CheckBuffer(obj);
    }
    sink = acc;
    return 0;
}

static int
loop_check_supports(PyObject *obj, int flags, Py_ssize_t n)
{
    Py_ssize_t i, acc = 0;
    for (i = 0; i < n; i++) {
        /* an opaque pointer each time: an inline query (CPython's, where
         * it implements the draft) cannot be hoisted out of the loop */
        KEEP(obj);
        acc += PyObject_CheckBufferSupports(obj, flags);
    }
    sink = acc;
    return 0;
}

/* The floor of any query: the reads PyObject_CheckBuffer makes (the type,
 * its procs, their getbuffer), inline; a query reads the declaration too. */
static int
loop_check_inline(PyObject *obj, int flags, Py_ssize_t n)
{
    Py_ssize_t i, acc = 0;
    (void)flags;
    for (i = 0; i < n; i++) {
        PyBufferProcs *procs;

        KEEP(obj);              /* as in loop_check_supports */
        procs = Py_TYPE(obj)->tp_as_buffer;
        acc += procs != NULL && procs->bf_getbuffer != NULL;
    }
    sink = acc;
    return 0;
}

static int
loop_get_plain(PyObject *obj, int flags, Py_ssize_t n)
{
    Py_buffer view;
    Py_ssize_t i, acc = 0;
    for (i = 0; i < n; i++) {
        if (PyObject_GetBuffer(obj, &view, flags) < 0) {
            sink = acc;
            return -1;
        }
        acc += view.len;
        PyBuffer_Release(&view);
    }
    sink = acc;
    return 0;
}

/* An extended get/release loop through GET, one function of
 * BufferExt_GetBuffer's signature: the two loops below differ in it only. */
#define LOOP_GET_EXTENDED(NAME, GET)                                        \
    static int                                                              \
    NAME(PyObject *obj, int flags, Py_ssize_t n)                            \
    {                                                                       \
        Py_buffer_extended ext;                                             \
        Py_ssize_t i, acc = 0;                                              \
        for (i = 0; i < n; i++) {                                           \
            if (GET(obj, &ext, flags) < 0) {                                \
                sink = acc;                                                 \
                return -1;                                                  \
            }                                                               \
            acc += ext.view.len + BufferExt_IsDevice(&ext);                 \
            BufferExt_Release(&ext);                                        \
        }                                                                   \
        sink = acc;                                                         \
        return 0;                                                           \
    }

LOOP_GET_EXTENDED(loop_get_extended, BufferExt_GetBuffer)

/* CPython's own extended request, called directly: BufferExt_GetBuffer
 * makes its two common cases inline (bufferext/core.h, native mode). */
#ifdef BUFFEREXT_NATIVE
LOOP_GET_EXTENDED(loop_get_ex_call, PyObject_GetBufferEx)
#else
static int
loop_get_ex_call(PyObject *obj, int flags, Py_ssize_t n)
{
    (void)obj;
    (void)flags;
    (void)n;
    PyErr_SetString(PyExc_NotImplementedError,
                    "OP_GET_EX_CALL: this CPython has no PyObject_GetBufferEx");
    return -1;
}
#endif

static int
loop_long_alloc(PyObject *obj, int flags, Py_ssize_t n)
{
    Py_ssize_t i, acc = 0;
    (void)obj;
    (void)flags;
    for (i = 0; i < n; i++) {
        /* well outside the small-int cache: one object allocation each */
        PyObject *value = PyLong_FromLong(1000000L + (long)i);
        if (value == NULL) {
            sink = acc;
            return -1;
        }
        acc += Py_REFCNT(value);
        Py_DECREF(value);
    }
    sink = acc;
    return 0;
}

static int
loop_memoryview(PyObject *obj, int flags, Py_ssize_t n)
{
    Py_ssize_t i, acc = 0;
    (void)flags;
    for (i = 0; i < n; i++) {
        PyObject *mv = PyMemoryView_FromObject(obj);
        if (mv == NULL) {
            sink = acc;
            return -1;
        }
        acc += Py_REFCNT(mv);
        Py_DECREF(mv);
    }
    sink = acc;
    return 0;
}

/* The DLPack 1.3 C exchange API as a consumer declares it (layouts from the
 * DLPack specification; only what this loop touches is typed). */
typedef struct {
    void *data;
    struct { int32_t device_type, device_id; } device;
    int32_t ndim;
    struct { uint8_t code, bits; uint16_t lanes; } dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} bench_DLTensor;

typedef struct {
    struct { uint32_t major, minor; } version;
    void *prev_api;
    void *managed_tensor_allocator;
    void *managed_tensor_from_py_object_no_sync;
    void *managed_tensor_to_py_object_no_sync;
    int (*dltensor_from_py_object_no_sync)(void *, bench_DLTensor *);
    void *current_work_stream;
} bench_ExchangeAPI;

/* The consumer looks the table up on the type once (it may cache it per
 * type, as the specification says), then fills a stack DLTensor per use. */
static int
loop_exchange_fill(PyObject *obj, int flags, Py_ssize_t n)
{
    PyObject *capsule;
    const bench_ExchangeAPI *api;
    bench_DLTensor tensor;
    Py_ssize_t i, acc = 0;
    (void)flags;

    static PyObject *name;      /* made once: the loop itself allocates 0 */

    if (name == NULL &&
        (name = PyUnicode_InternFromString("__dlpack_c_exchange_api__")) ==
            NULL) {
        return -1;
    }
    capsule = PyObject_GetAttr((PyObject *)Py_TYPE(obj), name);
    if (capsule == NULL) {
        return -1;
    }
    api = (const bench_ExchangeAPI *)PyCapsule_GetPointer(
        capsule, "dlpack_exchange_api");
    Py_DECREF(capsule);         /* the table itself is static */
    if (api == NULL) {
        return -1;
    }
    for (i = 0; i < n; i++) {
        if (api->dltensor_from_py_object_no_sync(obj, &tensor) < 0) {
            sink = acc;
            return -1;
        }
        acc += tensor.ndim + (Py_ssize_t)tensor.shape[0];
    }
    sink = acc;
    return 0;
}

typedef int (*loop_func)(PyObject *, int, Py_ssize_t);

static const loop_func loops[OP_COUNT] = {
    loop_empty, loop_check_buffer, loop_check_supports, loop_get_plain,
    loop_get_extended, loop_long_alloc, loop_memoryview, loop_exchange_fill,
    loop_check_inline, loop_get_ex_call,
};

static int
parse_args(PyObject *args, const char *fname, loop_func *func,
           PyObject **obj, int *flags, Py_ssize_t *n)
{
    int op;
    char format[32];

    PyOS_snprintf(format, sizeof(format), "iOin:%s", fname);
    if (!PyArg_ParseTuple(args, format, &op, obj, flags, n)) {
        return -1;
    }
    if (op < 0 || op >= OP_COUNT) {
        PyErr_Format(PyExc_ValueError, "%s: op must be in [0, %d), not %d",
                     fname, OP_COUNT, op);
        return -1;
    }
    if (*n < 1) {
        PyErr_Format(PyExc_ValueError, "%s: n must be >= 1, not %zd",
                     fname, *n);
        return -1;
    }
    *func = loops[op];
    return 0;
}

/* get_release(obj, flags): one BufferExt_GetBuffer + BufferExt_Release,
 * as a C consumer of the extended buffer protocol does it. */
static PyObject *
get_release(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer_extended ext;
    long flags;
    (void)module;

    if (nargs != 2 || (flags = PyLong_AsLong(args[1])) == -1) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "get_release(obj, flags)");
        }
        return NULL;
    }
    if (BufferExt_GetBuffer(args[0], &ext, (int)flags) < 0) {
        return NULL;
    }
    BufferExt_Release(&ext);
    Py_RETURN_NONE;
}

/* time_loop(op, obj, flags, n) -> ns taken by n iterations */
static PyObject *
time_loop(PyObject *module, PyObject *args)
{
    loop_func func;
    PyObject *obj;
    int flags;
    Py_ssize_t n;
    long long start, stop;
    (void)module;

    if (parse_args(args, "time_loop", &func, &obj, &flags, &n) < 0) {
        return NULL;
    }
    start = now_ns();
    if (func(obj, flags, n) < 0) {
        return NULL;
    }
    stop = now_ns();
    return PyLong_FromLongLong(stop - start);
}

/* ---- allocation counting ---------------------------------------------- */

/* One hook per domain wraps the allocator that was installed before it. */
typedef struct {
    PyMemAllocatorEx orig;
    Py_ssize_t allocs;   /* malloc + calloc + realloc calls */
    Py_ssize_t frees;
} counting_ctx;

static counting_ctx counters[3];   /* RAW, MEM, OBJ */

static void *
counting_malloc(void *ctx, size_t size)
{
    counting_ctx *c = (counting_ctx *)ctx;
    c->allocs++;
    return c->orig.malloc(c->orig.ctx, size);
}

static void *
counting_calloc(void *ctx, size_t nelem, size_t elsize)
{
    counting_ctx *c = (counting_ctx *)ctx;
    c->allocs++;
    return c->orig.calloc(c->orig.ctx, nelem, elsize);
}

static void *
counting_realloc(void *ctx, void *ptr, size_t size)
{
    counting_ctx *c = (counting_ctx *)ctx;
    c->allocs++;
    return c->orig.realloc(c->orig.ctx, ptr, size);
}

static void
counting_free(void *ctx, void *ptr)
{
    counting_ctx *c = (counting_ctx *)ctx;
    if (ptr != NULL) {
        c->frees++;
    }
    c->orig.free(c->orig.ctx, ptr);
}

static const PyMemAllocatorDomain domains[3] = {
    PYMEM_DOMAIN_RAW, PYMEM_DOMAIN_MEM, PYMEM_DOMAIN_OBJ,
};

static void
hooks_install(void)
{
    int d;
    for (d = 0; d < 3; d++) {
        PyMemAllocatorEx hook = {&counters[d], counting_malloc,
                                 counting_calloc, counting_realloc,
                                 counting_free};
        PyMem_GetAllocator(domains[d], &counters[d].orig);
        counters[d].allocs = 0;
        counters[d].frees = 0;
        PyMem_SetAllocator(domains[d], &hook);
    }
}

static void
hooks_remove(void)
{
    int d;
    for (d = 0; d < 3; d++) {
        PyMem_SetAllocator(domains[d], &counters[d].orig);
    }
}

/* count_allocs(op, obj, flags, n) -> (raw, mem, obj, frees): allocator
 * calls made while the loop ran, per domain, and frees in all domains. */
static PyObject *
count_allocs(PyObject *module, PyObject *args)
{
    loop_func func;
    PyObject *obj;
    int flags, rc;
    Py_ssize_t n;
    (void)module;

    if (parse_args(args, "count_allocs", &func, &obj, &flags, &n) < 0) {
        return NULL;
    }
    hooks_install();
    rc = func(obj, flags, n);
    hooks_remove();
    if (rc < 0) {
        return NULL;
    }
    return Py_BuildValue("(nnnn)", counters[0].allocs, counters[1].allocs,
                         counters[2].allocs,
                         counters[0].frees + counters[1].frees +
                             counters[2].frees);
}

/* ---- cache inspection ------------------------------------------------- */

/* cache_state(obj) -> (tag, cached): type(obj)'s version tag and whether
 * this module's copy of the header cache holds a valid entry for it. */
static PyObject *
cache_state(PyObject *module, PyObject *obj)
{
    (void)module;
    (void)obj;
#ifdef BUFFEREXT_ACCEL_HAVE_CACHE
    {
        PyTypeObject *type = Py_TYPE(obj);
        unsigned int tag = BufferExtAccel_TypeTag(type);
        BufferExtAccel_CacheEntry *entry =
            &BufferExtAccel_Cache()[tag % BUFFEREXT_ACCEL_CACHE_SIZE];
        int cached = tag != 0 && entry->tag == tag && entry->type == type;
        return Py_BuildValue("(kO)", (unsigned long)tag,
                             cached ? Py_True : Py_False);
    }
#else
    return Py_BuildValue("(kO)", 0UL, Py_False);
#endif
}

static PyMethodDef bench_methods[] = {
    {"time_loop", time_loop, METH_VARARGS,
     "time_loop(op, obj, flags, n) -> ns for n iterations of op"},
    {"count_allocs", count_allocs, METH_VARARGS,
     "count_allocs(op, obj, flags, n) -> (raw, mem, obj, frees)"},
    {"cache_state", cache_state, METH_O,
     "cache_state(obj) -> (version tag, cached)"},
    {"get_release", (PyCFunction)(void (*)(void))get_release, METH_FASTCALL,
     "get_release(obj, flags): one extended get + release"},
    {NULL, NULL, 0, NULL},
};

static int
bench_exec(PyObject *module)
{
    static const char *names[OP_COUNT] = {
        "OP_EMPTY", "OP_CHECK_BUFFER", "OP_CHECK_SUPPORTS", "OP_GET_PLAIN",
        "OP_GET_EXTENDED", "OP_LONG_ALLOC", "OP_MEMORYVIEW",
        "OP_EXCHANGE_FILL", "OP_CHECK_INLINE", "OP_GET_EX_CALL",
    };
    int i;
    for (i = 0; i < OP_COUNT; i++) {
        if (PyModule_AddIntConstant(module, names[i], i) < 0) {
            return -1;
        }
    }
    return 0;
}

/* A free-threaded build keeps its GIL off for this module: switched on,
 * it would measure another interpreter than the one a user runs.  run.py
 * calls every function from one thread (count_allocs swaps the process's
 * allocators for the loop's length). */
static PyModuleDef_Slot bench_slots[] = {
    {Py_mod_exec, (void *)bench_exec},
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef bench_module = {
    PyModuleDef_HEAD_INIT, "_bench",
    "Timing loops for the bufferext benchmarks.", 0, bench_methods,
    bench_slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__bench(void)
{
    return PyModuleDef_Init(&bench_module);
}
