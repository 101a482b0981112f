/* bufferext/core.h -- backport of the draft PEP "Extended buffer protocol
 * for device memory support": supported flags, PyBUF_DEVICE and the
 * extended buffer.  Part of bufferext.h; do not include it directly.
 *
 * What is decided where:
 *   compile time  PyBUF_DEVICE, PyBUF_REQUIRED_FLAGS, Py_buffer_extended and
 *                 its layout; each guarded so that a CPython which defines
 *                 the symbol wins.
 *   shims         Py_NewRef (3.10) and PyType_GetDict (3.12), in the style
 *                 of pythoncapi-compat, each guarded by PY_VERSION_HEX.
 *   run time      a type's supported flags.  Released CPythons have no
 *                 bf_supported_flags slot, so the declaration travels in the
 *                 type attribute __buffer_supported_flags__ (an int) and is
 *                 cached per type and per translation unit, keyed on the
 *                 type's version tag, so a lookup costs a few loads.
 *   PEP 688       on 3.12+, which request paths can carry an extended view:
 *                 BufferExt_SetSupportedFlags guards a type's __buffer__,
 *                 and the cache also records which getbuffer a device
 *                 request may call (docs/capi.rst, "The PEP 688 rule").
 *
 * Every function here is static inline: an extension that includes this
 * header needs nothing from the bufferext package at run time, and two
 * extensions built separately interoperate through the type attribute.
 * The normative text is docs/capi.rst.
 */
#ifndef BUFFEREXT_CORE_H
#define BUFFEREXT_CORE_H
#ifndef BUFFEREXT_H_INSIDE
#  error "include <bufferext.h>, not <bufferext/core.h>"
#endif

#include <stddef.h>
#include <string.h>

/* The header reads PyTypeObject fields (tp_name, tp_version_tag, tp_dict),
 * so it needs the full C API: say so clearly instead of failing later. */
#ifdef Py_LIMITED_API
#  error "bufferext.h does not support Py_LIMITED_API (stable ABI) yet"
#else /* the rest of this file */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- compat shims ----------------------------------------------------- */

/* Py_NewRef: added in CPython 3.10. */
#if PY_VERSION_HEX < 0x030A00A3 && !defined(Py_NewRef)
static inline PyObject *BufferExtCompat_NewRef(PyObject *obj)
{
    Py_INCREF(obj);
    return obj;
}
#  define Py_NewRef(obj) BufferExtCompat_NewRef((PyObject *)(obj))
#endif

/* PyType_GetDict: added in CPython 3.12 (before, tp_dict is the dict). */
#if PY_VERSION_HEX < 0x030C0000
static inline PyObject *BufferExtCompat_TypeGetDict(PyTypeObject *type)
{
    Py_XINCREF(type->tp_dict);
    return type->tp_dict;
}
#else
#  define BufferExtCompat_TypeGetDict PyType_GetDict
#endif

/* PEP 688 (CPython 3.12) gave every buffer type a __buffer__ method, which
 * calls the type's getbuffer with a bare Py_buffer and whatever flags its
 * caller chose, and made a Python class with __buffer__ an exporter.  Where
 * it exists, the header keeps PyBUF_DEVICE off both paths (see
 * BufferExt_SetSupportedFlags and BufferExt_GetBuffer). */
#if PY_VERSION_HEX >= 0x030C0000
#  define BUFFEREXT_PEP688 1
#endif

/* ---- flags ------------------------------------------------------------ */

/* PyBUF_DEVICE: extended request flag.  A consumer that passes it hands the
 * exporter a Py_buffer_extended; the exporter may then describe non-CPU
 * memory.  A soft request: exporters that do not know it ignore it.
 * 0x10000 stays clear of the bits CPython is likely to take next (0x400,
 * 0x800, ...), below the sign bit, and no request that includes it can equal
 * PyBUF_READ (0x100) or PyBUF_WRITE (0x200), which raise SystemError as exact
 * request values since 3.13. */
#ifndef PyBUF_DEVICE
#  define PyBUF_DEVICE 0x10000
#endif

/* PyBUF_REQUIRED_FLAGS: the flags an exporter must not ignore: WRITABLE,
 * FORMAT, ND, STRIDES and the three contiguity requests (0xFD).  The bit of
 * PyBUF_INDIRECT that is its own (0x100) and PyBUF_DEVICE are soft.
 * A CPython that defines this symbol also has PyObject_CheckBufferSupports. */
#ifndef PyBUF_REQUIRED_FLAGS
#  define PyBUF_REQUIRED_FLAGS                                         \
    (PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_ND | PyBUF_STRIDES |         \
     PyBUF_C_CONTIGUOUS | PyBUF_F_CONTIGUOUS | PyBUF_ANY_CONTIGUOUS)
#  define BUFFEREXT_BACKPORT_CHECK_SUPPORTS 1
#endif

/* Every request bit that existed before the draft (0x1FD): what a declared
 * value of 0, or no declaration at all, means. */
#define BUFFEREXT_LEGACY_FLAGS (PyBUF_REQUIRED_FLAGS | PyBUF_INDIRECT)

/* Extended request flags defined so far. */
#define BUFFEREXT_EXTENDED_FLAGS PyBUF_DEVICE

/* Declared values with a meaning of their own (any other value >= 0 is a
 * mask of the request flags the exporter honours). */
#define BUFFEREXT_SUPPORTS_LEGACY 0        /* the legacy flags: the default */
#define BUFFEREXT_SUPPORTS_SIMPLE_ONLY (-1) /* PyBUF_SIMPLE requests only */

/* Name of the type attribute that carries the declaration. */
#define BUFFEREXT_SUPPORTED_FLAGS_ATTR "__buffer_supported_flags__"

/* ---- the extended buffer ---------------------------------------------- */

/* Py_buffer_extended: what a consumer passes when it requests PyBUF_DEVICE.
 * It wraps Py_buffer (frozen in the stable ABI), so &ext.view is a valid
 * Py_buffer * and an exporter may cast its Py_buffer * back to this struct,
 * but only when PyBUF_DEVICE was requested.  Layout version: ABI 1. */
typedef struct {
    Py_buffer view;       /* the PEP 3118 buffer, unchanged */
    int flags;            /* extended flags the exporter honoured; 0 = none.
                             Consumers must test it before reading below. */
    int ext_flags;        /* reserved for future extensions; 0 */
    const char *device;   /* NULL: CPU memory.  Otherwise a unique UTF-8
                             device name ("bufferext.cuda", ...) of static
                             storage, owned by the exporter. */
    void *device_info;    /* device-specific description, its layout given by
                             the specification of `device`; owned by the
                             exporter, valid until the buffer is released. */
} Py_buffer_extended;

#define BUFFEREXT_ABI_VERSION 1

/* ---- run-time supported flags: lookup and per-type cache --------------- */

/* Cache entries remember (type, version tag) -> declared value.  CPython
 * gives a type a fresh version tag whenever its attributes change (and never
 * reuses one), so a matching tag proves the declaration is unchanged.  Types
 * without a valid tag are looked up every time.  The cache is disabled on
 * free-threaded builds. */
#define BUFFEREXT_CACHE_SIZE 64
#define BUFFEREXT_INVALID_DECLARATION (-2) /* cached: the attribute is bad */

/* What the header knows of a type: its declaration and, where PEP 688
 * exists, the getbuffer function a PyBUF_DEVICE request may call (NULL: the
 * type's getbuffer runs Python code, which can only hand back a memoryview,
 * so the request goes to it without PyBUF_DEVICE). */
typedef struct {
    int declared;           /* as read; BUFFEREXT_INVALID_DECLARATION if bad */
    int mask;               /* the request flags honoured: the declaration
                               translated (0: legacy, -1: none), less
                               PyBUF_DEVICE where it cannot reach getbuffer */
#ifdef BUFFEREXT_PEP688
    getbufferproc device_getbuffer;
    int guarded;            /* __buffer__ is the guard, or there is none */
#endif
} BufferExtInternal_TypeInfo;

/* An entry is guarded by a sequence lock: `seq` is odd while a writer
 * fills the entry, and a reader keeps what it read only if `seq` was even
 * and unchanged around its reads.  Interpreters with a GIL of their own
 * (PEP 684, 3.12+) and free-threaded builds share the table between
 * threads that run in parallel; a writer that finds the entry busy simply
 * does not cache. */
typedef struct {
    unsigned int seq;
    unsigned int tag;
    PyTypeObject *type;
    BufferExtInternal_TypeInfo info;
} BufferExtInternal_CacheEntry;

/* The atomic accesses the sequence lock needs (GCC and Clang builtins,
 * which C and C++ both accept).  Without them the cache is used only
 * where one thread at a time can run: GIL builds before 3.12, and the main
 * interpreter of 3.12+ (found by a call, which costs about 4 ns). */
#if defined(__GNUC__) || defined(__clang__)
#  define BUFFEREXT_INTERNAL_ATOMICS 1
#  define BUFFEREXT_INTERNAL_LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#  define BUFFEREXT_INTERNAL_LOAD_ACQUIRE(p) \
    __atomic_load_n((p), __ATOMIC_ACQUIRE)
#  define BUFFEREXT_INTERNAL_STORE(p, v) \
    __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#  define BUFFEREXT_INTERNAL_STORE_RELEASE(p, v) \
    __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#  define BUFFEREXT_INTERNAL_FENCE(order) __atomic_thread_fence(order)
#else
#  define BUFFEREXT_INTERNAL_LOAD(p) (*(p))
#  define BUFFEREXT_INTERNAL_LOAD_ACQUIRE(p) (*(p))
#  define BUFFEREXT_INTERNAL_STORE(p, v) (*(p) = (v))
#  define BUFFEREXT_INTERNAL_STORE_RELEASE(p, v) (*(p) = (v))
#  define BUFFEREXT_INTERNAL_FENCE(order) ((void)0)
#endif

#if defined(BUFFEREXT_INTERNAL_ATOMICS) || !defined(Py_GIL_DISABLED)
#  define BUFFEREXT_HAVE_TYPE_CACHE 1
#endif

#ifdef BUFFEREXT_ENABLE_CACHE_STATS
/* Test hook: hits and misses of this translation unit's cache. */
static inline Py_ssize_t *BufferExtInternal_CacheStats(void)
{
    static Py_ssize_t stats[2];
    return stats;
}
#  define BUFFEREXT_COUNT(i) (BufferExtInternal_CacheStats()[i]++)
#else
#  define BUFFEREXT_COUNT(i) ((void)0)
#endif

#ifdef BUFFEREXT_HAVE_TYPE_CACHE
static inline BufferExtInternal_CacheEntry *BufferExtInternal_Cache(void)
{
    static BufferExtInternal_CacheEntry cache[BUFFEREXT_CACHE_SIZE];
    return cache;
}

/* The type's version tag, or 0 when it has none. */
static inline unsigned int BufferExtInternal_TypeTag(PyTypeObject *type)
{
#  if PY_VERSION_HEX >= 0x030D0000
    /* 3.13 zeroes the tag on change and no longer keeps the flag below;
     * free-threaded builds change it while other threads read it. */
    return BUFFEREXT_INTERNAL_LOAD(&type->tp_version_tag);
#  else
    return PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG)
               ? type->tp_version_tag : 0;
#  endif
}
#endif

/* PyObject_CheckBuffer(obj), inlined where the type struct is visible: the
 * test is the same on every CPython 3.9-3.13 (a getbuffer slot is present),
 * and the call into libpython costs as much as the cache lookup. */
static inline int BufferExtInternal_CheckBuffer(PyObject *obj)
{
    PyBufferProcs *procs = Py_TYPE(obj)->tp_as_buffer;
    return procs != NULL && procs->bf_getbuffer != NULL;
}

/* BUFFEREXT_INLINE_DISPATCH: BufferExt_GetBuffer and BufferExt_Release
 * call the exporter's slots directly instead of PyObject_GetBuffer and
 * PyBuffer_Release where the bodies of those functions are known to be
 * exactly that (CPython 3.9-3.13 with the GIL, checked against each
 * release): it saves two calls into libpython per export.  Elsewhere, or
 * when compiled with -DBUFFEREXT_INLINE_DISPATCH=0, the functions are
 * called. */
#ifndef BUFFEREXT_INLINE_DISPATCH
#  if !defined(Py_GIL_DISABLED) && PY_VERSION_HEX < 0x030E0000
#    define BUFFEREXT_INLINE_DISPATCH 1
#  else
#    define BUFFEREXT_INLINE_DISPATCH 0
#  endif
#endif

/* PyObject_GetBuffer(obj, view, flags).  3.13 also refuses the bare values
 * PyBUF_READ and PyBUF_WRITE: those go through the function. */
static inline int
BufferExtInternal_CallGetBuffer(PyObject *obj, Py_buffer *view, int flags)
{
#if BUFFEREXT_INLINE_DISPATCH
    PyBufferProcs *procs = Py_TYPE(obj)->tp_as_buffer;
    if (procs != NULL && procs->bf_getbuffer != NULL &&
        flags != PyBUF_READ && flags != PyBUF_WRITE) {
        return procs->bf_getbuffer(obj, view, flags);
    }
#endif
    return PyObject_GetBuffer(obj, view, flags);
}

/* PyBuffer_Release(view): the exporter's releasebuffer, then the reference
 * to view->obj dropped; nothing when view->obj is NULL. */
static inline void
BufferExtInternal_CallRelease(Py_buffer *view)
{
#if BUFFEREXT_INLINE_DISPATCH
    PyObject *obj = view->obj;
    PyBufferProcs *procs;
    if (obj == NULL) {
        return;
    }
    procs = Py_TYPE(obj)->tp_as_buffer;
    if (procs != NULL && procs->bf_releasebuffer != NULL) {
        procs->bf_releasebuffer(obj, view);
    }
    view->obj = NULL;
    Py_DECREF(obj);
#else
    PyBuffer_Release(view);
#endif
}

/* Declares the error paths of the inline functions below: kept out of line
 * (where the compiler allows saying so) so that the hot path a consumer
 * inlines stays small. */
#if defined(__GNUC__) || defined(__clang__)
#  define BUFFEREXT_COLD_FUNC static __attribute__((noinline, cold, unused))
#else
#  define BUFFEREXT_COLD_FUNC static inline
#endif

/* The value of `name` in the dict of the first class of type's MRO that
 * has it, as a slot lookup finds it (never through the metaclass): a new
 * reference, or NULL (never raises). */
static inline PyObject *
BufferExtInternal_LookupMRO(PyTypeObject *type, const char *name)
{
    PyObject *key = PyUnicode_InternFromString(name), *found = NULL;
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *mro = type->tp_mro;
    Py_ssize_t i;

    for (i = 0; key != NULL && mro != NULL && i < PyTuple_GET_SIZE(mro);
         i++) {
        PyObject *dict = BufferExtCompat_TypeGetDict(
            (PyTypeObject *)PyTuple_GET_ITEM(mro, i));
        int rc;
        if (dict == NULL) {
            continue;
        }
#  if PY_VERSION_HEX >= 0x030D0000
        rc = PyDict_GetItemRef(dict, key, &found);
#  else
        found = PyDict_GetItemWithError(dict, key);
        Py_XINCREF(found);
        rc = found != NULL ? 1 : (PyErr_Occurred() ? -1 : 0);
#  endif
        Py_DECREF(dict);
        if (rc != 0) {
            break;
        }
    }
#else
    /* Before 3.12 the lookup that also gives the type a version tag (which
     * the cache needs) is _PyType_Lookup; it reads the MRO the same way. */
    if (key != NULL) {
        found = _PyType_Lookup(type, key);
        Py_XINCREF(found);
    }
#endif
    Py_XDECREF(key);
    PyErr_Clear();
    return found;
}

/* Read the declaration of `type`: the attribute found in its MRO.  Returns
 * the declared value (-1 included) or BUFFEREXT_INVALID_DECLARATION for a
 * value that is not an int in {-1} U [0, INT_MAX].  Never raises: a
 * missing attribute reads as 0 (the legacy default).  Like a slot, the
 * declaration belongs to the class: the metaclass is not consulted, and no
 * descriptor is called (so no Python code runs). */
static inline int BufferExtInternal_ReadDeclared(PyTypeObject *type)
{
    PyObject *value;
    long declared;
    int overflow;

    value = BufferExtInternal_LookupMRO(type, BUFFEREXT_SUPPORTED_FLAGS_ATTR);
    if (value == NULL) {
        return BUFFEREXT_SUPPORTS_LEGACY;
    }
    if (!PyLong_Check(value) || PyBool_Check(value)) {
        Py_DECREF(value);
        return BUFFEREXT_INVALID_DECLARATION;
    }
    declared = PyLong_AsLongAndOverflow(value, &overflow);
    Py_DECREF(value);
    if (overflow || declared < -1 || declared > INT_MAX) {
        PyErr_Clear();
        return BUFFEREXT_INVALID_DECLARATION;
    }
    return (int)declared;
}

#ifdef BUFFEREXT_PEP688
/* The guard BufferExt_SetSupportedFlags puts in place of a type's
 * __buffer__: an instancemethod around a builtin function whose self is
 * CPython's own __buffer__ wrapper of the type.  Its docstring marks it,
 * so that a header in another extension recognises it. */
#define BUFFEREXT_GUARD_DOC                                                 \
    "__buffer__($self, flags, /)\n--\n\n"                                   \
    "Return a memoryview of the buffer.  A request that includes\n"         \
    "PyBUF_DEVICE raises BufferError: a memoryview carries CPU memory\n"    \
    "only (bufferext guard, see bufferext.h)."

/* The __buffer__ wrapper inside a guard, or NULL if `found` is none. */
static inline PyObject *BufferExtInternal_GuardedWrapper(PyObject *found)
{
    PyObject *func;
    PyCFunctionObject *cfunc;

    if (!PyInstanceMethod_Check(found)) {
        return NULL;
    }
    func = PyInstanceMethod_GET_FUNCTION(found);
    if (!PyCFunction_Check(func)) {
        return NULL;
    }
    cfunc = (PyCFunctionObject *)func;
    if (cfunc->m_ml->ml_doc == NULL ||
        strcmp(cfunc->m_ml->ml_doc, BUFFEREXT_GUARD_DOC) != 0 ||
        cfunc->m_self == NULL ||
        !Py_IS_TYPE(cfunc->m_self, &PyWrapperDescr_Type)) {
        return NULL;
    }
    return cfunc->m_self;
}

/* Fill info->device_getbuffer, the getbuffer function a PyBUF_DEVICE
 * request to instances of `type` may call (NULL when the type's getbuffer
 * runs Python code: a class with its own __buffer__, or anything this
 * header cannot vouch for), and info->guarded.  A Python subclass of a
 * guarded type that keeps its base's __buffer__ gets the base's getbuffer:
 * CPython gave the subclass the generic slot only because it saw the guard
 * where it expected its wrapper. */
static inline void BufferExtInternal_ReadRoute(
    PyTypeObject *type, BufferExtInternal_TypeInfo *info)
{
    getbufferproc slot = type->tp_as_buffer != NULL
                             ? type->tp_as_buffer->bf_getbuffer : NULL;
    PyObject *found = BufferExtInternal_LookupMRO(type, "__buffer__");
    PyObject *wrapper;

    info->device_getbuffer = NULL;
    info->guarded = found == NULL;
    if (found == NULL) {
        info->device_getbuffer = slot;
        return;
    }
    wrapper = BufferExtInternal_GuardedWrapper(found);
    info->guarded = wrapper != NULL;
    if (wrapper == NULL && Py_IS_TYPE(found, &PyWrapperDescr_Type)) {
        wrapper = found;
    }
    if (wrapper != NULL && slot != NULL) {
        void *wrapped = ((PyWrapperDescrObject *)wrapper)->d_wrapped;
        if (wrapped == (void *)slot || info->guarded) {
            info->device_getbuffer = (getbufferproc)wrapped;
        }
    }
    Py_DECREF(found);
}
#endif

/* Everything the header needs to know of `type`, read afresh. */
static inline BufferExtInternal_TypeInfo
BufferExtInternal_ReadInfo(PyTypeObject *type)
{
    BufferExtInternal_TypeInfo info;

    info.declared = BufferExtInternal_ReadDeclared(type);
    /* 0 is the legacy default; -1 and invalid values, PyBUF_SIMPLE only */
    info.mask = info.declared == BUFFEREXT_SUPPORTS_LEGACY
                    ? BUFFEREXT_LEGACY_FLAGS
                    : (info.declared < 0 ? 0 : info.declared);
#ifdef BUFFEREXT_PEP688
    BufferExtInternal_ReadRoute(type, &info);
    if (info.device_getbuffer == NULL) {
        /* a device request cannot reach the type's getbuffer */
        info.mask &= ~PyBUF_DEVICE;
    }
#endif
    return info;
}

static inline int BufferExtInternal_SameInfo(BufferExtInternal_TypeInfo a,
                                             BufferExtInternal_TypeInfo b)
{
#ifdef BUFFEREXT_PEP688
    if (a.device_getbuffer != b.device_getbuffer || a.guarded != b.guarded) {
        return 0;
    }
#endif
    return a.declared == b.declared;
}

#ifdef BUFFEREXT_HAVE_TYPE_CACHE
/* Whether this thread may use the table.  Without atomics, from 3.12,
 * only the main interpreter does: interpreters with a GIL of their own
 * (PEP 684) run in parallel, and the table is one per translation unit,
 * shared by every interpreter of the process. */
static inline int BufferExtInternal_CacheOwner(void)
{
#  if PY_VERSION_HEX >= 0x030C0000 && !defined(BUFFEREXT_INTERNAL_ATOMICS)
    return PyInterpreterState_Get() == PyInterpreterState_Main();
#  else
    return 1;
#  endif
}

/* Store `info` for (type, tag) unless another thread is writing the entry. */
static inline void BufferExtInternal_CacheStore(
    BufferExtInternal_CacheEntry *entry, PyTypeObject *type,
    unsigned int tag, BufferExtInternal_TypeInfo info)
{
    unsigned int seq = BUFFEREXT_INTERNAL_LOAD(&entry->seq);

    if (seq & 1) {
        return;
    }
#  ifdef BUFFEREXT_INTERNAL_ATOMICS
    if (!__atomic_compare_exchange_n(&entry->seq, &seq, seq + 1, 0,
                                     __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        return;
    }
    __atomic_thread_fence(__ATOMIC_RELEASE);
#  else
    entry->seq = seq + 1;
#  endif
    BUFFEREXT_INTERNAL_STORE(&entry->type, type);
    BUFFEREXT_INTERNAL_STORE(&entry->tag, tag);
    BUFFEREXT_INTERNAL_STORE(&entry->info.declared, info.declared);
    BUFFEREXT_INTERNAL_STORE(&entry->info.mask, info.mask);
#  ifdef BUFFEREXT_PEP688
    BUFFEREXT_INTERNAL_STORE(&entry->info.device_getbuffer,
                             info.device_getbuffer);
    BUFFEREXT_INTERNAL_STORE(&entry->info.guarded, info.guarded);
#  endif
    BUFFEREXT_INTERNAL_STORE_RELEASE(&entry->seq, seq + 2);
}

/* The entry's info in *info if it holds (type, tag) and no writer
 * interfered: 1, else 0. */
static inline int BufferExtInternal_CacheLoad(
    BufferExtInternal_CacheEntry *entry, PyTypeObject *type,
    unsigned int tag, BufferExtInternal_TypeInfo *info)
{
    unsigned int seq = BUFFEREXT_INTERNAL_LOAD_ACQUIRE(&entry->seq);

    if (BUFFEREXT_INTERNAL_LOAD(&entry->tag) != tag ||
        BUFFEREXT_INTERNAL_LOAD(&entry->type) != type) {
        return 0;
    }
    info->declared = BUFFEREXT_INTERNAL_LOAD(&entry->info.declared);
    info->mask = BUFFEREXT_INTERNAL_LOAD(&entry->info.mask);
#  ifdef BUFFEREXT_PEP688
    info->device_getbuffer =
        BUFFEREXT_INTERNAL_LOAD(&entry->info.device_getbuffer);
    info->guarded = BUFFEREXT_INTERNAL_LOAD(&entry->info.guarded);
#  endif
    BUFFEREXT_INTERNAL_FENCE(__ATOMIC_ACQUIRE);
    return (seq & 1) == 0 && BUFFEREXT_INTERNAL_LOAD(&entry->seq) == seq;
}

/* Cache miss: read what the header needs and remember it under the type's
 * (new) version tag.  Out of line: the hit path below is what consumers
 * inline. */
BUFFEREXT_COLD_FUNC BufferExtInternal_TypeInfo
BufferExtInternal_InfoMiss(PyTypeObject *type)
{
    BufferExtInternal_CacheEntry *entry;
    BufferExtInternal_TypeInfo info;
    unsigned int before, tag;

    BUFFEREXT_COUNT(1);
#  if PY_VERSION_HEX >= 0x030C0000
    PyUnstable_Type_AssignVersionTag(type);
#  endif
    before = BufferExtInternal_TypeTag(type);
    info = BufferExtInternal_ReadInfo(type);
    /* On 3.9-3.11 the lookup itself may assign the tag. */
    tag = BufferExtInternal_TypeTag(type);
    /* Should the type change meanwhile (another thread, a dict key's
     * __eq__), a value is cached only under a tag that was valid for the
     * whole of one lookup. */
    if (tag != 0 && tag != before) {
        BufferExtInternal_TypeInfo again = BufferExtInternal_ReadInfo(type);
        if (!BufferExtInternal_SameInfo(again, info) ||
            BufferExtInternal_TypeTag(type) != tag) {
            return again;
        }
    }
    if (tag != 0 && BufferExtInternal_CacheOwner()) {
        entry = &BufferExtInternal_Cache()[tag % BUFFEREXT_CACHE_SIZE];
        BufferExtInternal_CacheStore(entry, type, tag, info);
    }
    return info;
}
#endif

/* What the header knows of `type`, through the cache.  Never raises. */
static inline BufferExtInternal_TypeInfo
BufferExtInternal_Info(PyTypeObject *type)
{
#ifdef BUFFEREXT_HAVE_TYPE_CACHE
    unsigned int tag = BufferExtInternal_TypeTag(type);
    BufferExtInternal_TypeInfo info;

    if (tag != 0 && BufferExtInternal_CacheOwner() &&
        BufferExtInternal_CacheLoad(
            &BufferExtInternal_Cache()[tag % BUFFEREXT_CACHE_SIZE], type,
            tag, &info)) {
        BUFFEREXT_COUNT(0);
        return info;
    }
    return BufferExtInternal_InfoMiss(type);
#else
    BUFFEREXT_COUNT(1);
    return BufferExtInternal_ReadInfo(type);
#endif
}

/* ---- public functions ------------------------------------------------- */

#ifdef BUFFEREXT_BACKPORT_CHECK_SUPPORTS
/* PyObject_CheckBufferSupports (draft PEP): 1 if `obj` exports buffers and
 * its type declares support for every bit of `flags`, else 0.  Never raises;
 * an invalid declaration supports PyBUF_SIMPLE only.  Call it without an
 * exception set, like most of the C API. */
static inline int PyObject_CheckBufferSupports(PyObject *obj, int flags)
{
    int mask;

    if (!BufferExtInternal_CheckBuffer(obj)) {
        return 0;
    }
    if (flags == 0) {
        return 1;
    }
    mask = BufferExtInternal_Info(Py_TYPE(obj)).mask;
    return (flags & ~mask) == 0;
}
#endif

/* BufferExt_SupportedFlags: the mask of request flags `obj` honours, with
 * the declared values 0 and -1 translated (so the result is >= 0).
 * Returns -1 with TypeError if `obj` does not export buffers, and with
 * TypeError naming the type and the value if its declaration is invalid. */
static inline int BufferExt_SupportedFlags(PyObject *obj)
{
    BufferExtInternal_TypeInfo info;

    if (!PyObject_CheckBuffer(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "a buffer exporter is required, not '%.200s'",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    info = BufferExtInternal_Info(Py_TYPE(obj));
    if (info.declared == BUFFEREXT_INVALID_DECLARATION) {
        PyObject *value = BufferExtInternal_LookupMRO(
            Py_TYPE(obj), BUFFEREXT_SUPPORTED_FLAGS_ATTR);
        if (value != NULL) {
            PyErr_Format(PyExc_TypeError,
                         "%.200s." BUFFEREXT_SUPPORTED_FLAGS_ATTR " = %R is "
                         "invalid: expected an int, -1 or a flag mask >= 0",
                         Py_TYPE(obj)->tp_name, value);
            Py_DECREF(value);
        }
        return -1;
    }
    return info.mask;
}

#ifdef BUFFEREXT_PEP688
/* The guard's body: __buffer__(self, flags) as CPython's wrapper computes
 * it (flags through __index__, once), BufferError if flags include
 * PyBUF_DEVICE, else the wrapper (`wrapper`, the guard's self) called with
 * the computed int. */
BUFFEREXT_COLD_FUNC PyObject *
BufferExtInternal_GuardCall(PyObject *wrapper, PyObject *const *args,
                            Py_ssize_t nargs)
{
    PyObject *call[2], *result;
    Py_ssize_t flags;

    if (nargs != 2) {
        return PyObject_Vectorcall(wrapper, args, (size_t)nargs, NULL);
    }
    flags = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
    if (flags == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (flags > INT_MAX || flags < INT_MIN) {
        PyErr_SetString(PyExc_OverflowError,
                        "buffer flags out of range");
        return NULL;
    }
    if (flags & PyBUF_DEVICE) {
        PyErr_Format(PyExc_BufferError,
                     "%.200s: __buffer__ cannot serve a PyBUF_DEVICE "
                     "request (flags=0x%x): it returns a memoryview, which "
                     "describes CPU memory only; request device memory "
                     "with BufferExt_GetBuffer or bufferext.get_buffer()",
                     Py_TYPE(args[0])->tp_name, (unsigned int)flags);
        return NULL;
    }
    call[0] = args[0];
    call[1] = PyLong_FromSsize_t(flags);
    if (call[1] == NULL) {
        return NULL;
    }
    result = PyObject_Vectorcall(wrapper, call, 2, NULL);
    Py_DECREF(call[1]);
    return result;
}

/* Put the guard in place of CPython's __buffer__ wrapper in `dict`, the
 * dict of `type`; nothing if the type has no wrapper of its own there.
 * 0, or -1 with an exception. */
static inline int BufferExtInternal_Guard(PyTypeObject *type, PyObject *dict)
{
    static PyMethodDef def = {
        "__buffer__", (PyCFunction)(void (*)(void))BufferExtInternal_GuardCall,
        METH_FASTCALL, BUFFEREXT_GUARD_DOC};
    PyObject *wrapper, *func, *method;
    int rc;

    wrapper = PyDict_GetItemString(dict, "__buffer__");     /* borrowed */
    if (wrapper == NULL || !Py_IS_TYPE(wrapper, &PyWrapperDescr_Type) ||
        ((PyWrapperDescrObject *)wrapper)->d_wrapped !=
            (void *)type->tp_as_buffer->bf_getbuffer) {
        return 0;
    }
    func = PyCFunction_New(&def, wrapper);
    method = func == NULL ? NULL : PyInstanceMethod_New(func);
    Py_XDECREF(func);
    if (method == NULL) {
        return -1;
    }
    rc = PyDict_SetItemString(dict, "__buffer__", method);
    Py_DECREF(method);
    return rc;
}
#endif

/* BufferExt_SetSupportedFlags: declare the request flags instances of `type`
 * honour (0 = the legacy flags, -1 = PyBUF_SIMPLE only, else a mask that
 * includes PyBUF_DEVICE if the type answers device requests).  Call it once
 * after the type is created (PyType_FromSpec / PyType_Ready).  Works for
 * static, heap and immutable types.  On CPython 3.12+ it also guards the
 * type's __buffer__ method (PEP 688), which hands the getbuffer function a
 * bare Py_buffer: through it a PyBUF_DEVICE request raises BufferError, so
 * a getbuffer that sees PyBUF_DEVICE may trust that its view is extended.
 * Every type whose getbuffer writes the extension must call it.
 * Returns 0, or -1 with an exception. */
static inline int BufferExt_SetSupportedFlags(PyTypeObject *type, int flags)
{
    PyObject *dict, *value;
    int rc;

    if (flags < -1) {
        PyErr_Format(PyExc_ValueError,
                     "%.200s: supported flags must be -1 or a mask >= 0, "
                     "not %d", type->tp_name, flags);
        return -1;
    }
    dict = BufferExtCompat_TypeGetDict(type);
    if (dict == NULL) {
        PyErr_Format(PyExc_SystemError, "%.200s: type is not ready",
                     type->tp_name);
        return -1;
    }
    value = PyLong_FromLong(flags);
    rc = value == NULL ? -1 : PyDict_SetItemString(
        dict, BUFFEREXT_SUPPORTED_FLAGS_ATTR, value);
    Py_XDECREF(value);
#ifdef BUFFEREXT_PEP688
    if (rc == 0 && type->tp_as_buffer != NULL &&
        type->tp_as_buffer->bf_getbuffer != NULL) {
        rc = BufferExtInternal_Guard(type, dict);
    }
#endif
    Py_DECREF(dict);
    PyType_Modified(type);   /* new version tag: cached values go stale */
    return rc;
}

/* Append the names of the request bits in `flags` to `out` ("FORMAT|ND"). */
static inline void BufferExtInternal_FlagNames(int flags, char *out,
                                               size_t size)
{
    static const struct { int bit; const char *name; } names[] = {
        {PyBUF_WRITABLE, "WRITABLE"}, {PyBUF_FORMAT, "FORMAT"},
        {PyBUF_ND, "ND"}, {0x10, "STRIDES"}, {0x20, "C_CONTIGUOUS"},
        {0x40, "F_CONTIGUOUS"}, {0x80, "ANY_CONTIGUOUS"},
        {0x100, "INDIRECT"}, {PyBUF_DEVICE, "DEVICE"},
    };
    size_t i, used = 0;

    out[0] = '\0';
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        size_t len = strlen(names[i].name);
        if (!(flags & names[i].bit) || used + len + 2 > size) {
            continue;
        }
        if (used) {
            out[used++] = '|';
        }
        memcpy(out + used, names[i].name, len + 1);
        used += len;
        flags &= ~names[i].bit;
    }
    if (flags && used + 12 < size) {
        PyOS_snprintf(out + used, size - used, "%s0x%x", used ? "|" : "",
                      (unsigned int)flags);
    }
}

/* Zero the extension fields of `view` (not the Py_buffer). */
static inline void BufferExtInternal_ClearExtension(Py_buffer_extended *view)
{
    view->flags = 0;
    view->ext_flags = 0;
    view->device = NULL;
    view->device_info = NULL;
}

/* Raise the BufferError of BufferExt_GetBuffer for request flags that the
 * type of `obj` does not declare.  Returns -1. */
BUFFEREXT_COLD_FUNC int
BufferExtInternal_RaiseUnsupported(PyObject *obj, int unsupported,
                                   int declared)
{
    char names[128], what[48];

    BufferExtInternal_FlagNames(unsupported, names, sizeof(names));
    if (declared >= 0) {
        PyOS_snprintf(what, sizeof(what), "0x%x", (unsigned int)declared);
    }
    else {
        PyOS_snprintf(what, sizeof(what), "%s",
                      declared == -1 ? "-1, PyBUF_SIMPLE only"
                                     : "an invalid value");
    }
    PyErr_Format(PyExc_BufferError,
                 "%.200s does not support the buffer request flags %s "
                 "(declared " BUFFEREXT_SUPPORTED_FLAGS_ATTR " = %s)",
                 Py_TYPE(obj)->tp_name, names, what);
    return -1;
}

/* What is wrong with the extension fields an exporter left in `view` for a
 * request of `flags`, or NULL when nothing is. */
static inline const char *
BufferExtInternal_ExtensionProblem(const Py_buffer_extended *view, int flags)
{
    if (!(flags & BUFFEREXT_EXTENDED_FLAGS)) {
        return (view->flags || view->ext_flags || view->device ||
                view->device_info)
                   ? "wrote the buffer extension although no extended "
                     "flag was requested" : NULL;
    }
    if (view->flags & ~(flags & BUFFEREXT_EXTENDED_FLAGS)) {
        return "set extended flags that were not requested";
    }
    if (!(view->flags & PyBUF_DEVICE) &&
        (view->device || view->device_info || view->ext_flags)) {
        return "filled device fields without setting PyBUF_DEVICE in flags";
    }
    return NULL;
}

/* Release the export in `view`, clear its extension and raise BufferError
 * "Type problem".  Returns -1. */
BUFFEREXT_COLD_FUNC int
BufferExtInternal_RejectExport(PyObject *obj, Py_buffer_extended *view,
                               const char *problem)
{
    PyBuffer_Release(&view->view);
    BufferExtInternal_ClearExtension(view);
    PyErr_Format(PyExc_BufferError, "%.200s %s", Py_TYPE(obj)->tp_name,
                 problem);
    return -1;
}

/* BufferExt_GetBuffer: what the draft makes PyObject_GetBuffer do.  Zeroes
 * the extension, raises BufferError up front (without calling the exporter)
 * if `flags & PyBUF_REQUIRED_FLAGS` is not supported, calls the exporter,
 * and raises BufferError (after releasing) if the exporter wrote extension
 * fields it was not asked for.  Returns 0 / -1 like PyObject_GetBuffer.
 * On success the caller must call BufferExt_Release(view) once; on failure
 * nothing is held and the extension fields are zero. */
static inline int BufferExt_GetBuffer(PyObject *obj, Py_buffer_extended *view,
                                      int flags)
{
    int required = flags & PyBUF_REQUIRED_FLAGS, rc;
    const char *problem;
#ifdef BUFFEREXT_PEP688
    getbufferproc direct = NULL;
#endif

    BufferExtInternal_ClearExtension(view);
    if ((required || (flags & PyBUF_DEVICE)) &&
        BufferExtInternal_CheckBuffer(obj)) {
        BufferExtInternal_TypeInfo info = BufferExtInternal_Info(Py_TYPE(obj));
        int unsupported = required & ~info.mask;
        if (unsupported) {
            return BufferExtInternal_RaiseUnsupported(obj, unsupported,
                                                      info.declared);
        }
#ifdef BUFFEREXT_PEP688
        /* PyBUF_DEVICE goes only to a getbuffer that gets this view. */
        if (flags & PyBUF_DEVICE) {
            if (info.device_getbuffer == NULL) {
                flags &= ~PyBUF_DEVICE;
            }
            else if (info.device_getbuffer !=
                     Py_TYPE(obj)->tp_as_buffer->bf_getbuffer) {
                direct = info.device_getbuffer;
            }
        }
#endif
    }
#ifdef BUFFEREXT_PEP688
    rc = direct != NULL ? direct(obj, &view->view, flags)
                        : BufferExtInternal_CallGetBuffer(obj, &view->view,
                                                          flags);
#else
    rc = BufferExtInternal_CallGetBuffer(obj, &view->view, flags);
#endif
    if (rc < 0) {
        /* an exporter may have written the extension before failing */
        BufferExtInternal_ClearExtension(view);
        return -1;
    }
    problem = BufferExtInternal_ExtensionProblem(view, flags);
    if (problem != NULL) {
        return BufferExtInternal_RejectExport(obj, view, problem);
    }
    return 0;
}

/* BufferExt_Release: PyBuffer_Release plus clearing the extension.  Safe to
 * call twice (the second call does nothing). */
static inline void BufferExt_Release(Py_buffer_extended *view)
{
    BufferExtInternal_CallRelease(&view->view);
    BufferExtInternal_ClearExtension(view);
}

/* BufferExt_IsDevice: 1 if the exporter described non-CPU memory (it set
 * PyBUF_DEVICE in flags and a non-NULL device), else 0. */
static inline int BufferExt_IsDevice(const Py_buffer_extended *view)
{
    return (view->flags & PyBUF_DEVICE) && view->device != NULL;
}

/* ---- exporter helpers ------------------------------------------------- */

/* BufferExt_Extended: inside a getbuffer function, the extended view behind
 * `view`, or NULL when the consumer did not request PyBUF_DEVICE (then the
 * memory after the Py_buffer is not the consumer's to write).  On CPython
 * 3.12+ use it only in a type that BufferExt_SetSupportedFlags guarded (or
 * use BufferExt_SetDevice, which checks). */
static inline Py_buffer_extended *BufferExt_Extended(Py_buffer *view,
                                                     int flags)
{
    return (flags & PyBUF_DEVICE) ? (Py_buffer_extended *)view : NULL;
}

/* The body of BufferExt_SetDevice without the check of the guard, for
 * exporters that know their type is guarded (bufferext's own). */
static inline int BufferExtInternal_WriteDevice(PyObject *exporter,
                                                Py_buffer_extended *ext,
                                                const char *device,
                                                void *device_info)
{
    if (ext == NULL) {
        if (device == NULL) {
            return 0;
        }
        PyErr_Format(PyExc_BufferError,
                     "%.200s: memory on device '%s' can only be exported to "
                     "consumers that request PyBUF_DEVICE (memoryview, "
                     "bytes() and numpy read CPU memory only)",
                     Py_TYPE(exporter)->tp_name, device);
        return -1;
    }
    ext->flags |= PyBUF_DEVICE;
    ext->device = device;
    ext->device_info = device_info;
    return 0;
}

/* BufferExt_SetDevice: inside a getbuffer function, say where the memory is.
 * device == NULL (CPU memory): answers a PyBUF_DEVICE request explicitly
 * (flags gets PyBUF_DEVICE, device stays NULL); does nothing otherwise.
 * device != NULL: fills device, device_info and flags if PyBUF_DEVICE was
 * requested; otherwise raises BufferError naming the exporter's type and the
 * device, so device memory never reaches a CPU-only consumer.
 * On CPython 3.12+ a PyBUF_DEVICE request is trusted only if the type of
 * `exporter` is guarded (BufferExt_SetSupportedFlags was called on it or a
 * base): CPython's own __buffer__ method passes any flags with a bare
 * Py_buffer.  An unguarded type's device memory is refused, with a message
 * that says so; its CPU memory is exported without the extension.
 * Call it before taking any reference or counting the export.
 * Returns 0, or -1 with BufferError. */
static inline int BufferExt_SetDevice(PyObject *exporter, Py_buffer *view,
                                      int flags, const char *device,
                                      void *device_info)
{
    Py_buffer_extended *ext = BufferExt_Extended(view, flags);

#ifdef BUFFEREXT_PEP688
    if (ext != NULL && !BufferExtInternal_Info(Py_TYPE(exporter)).guarded) {
        if (device == NULL) {
            return 0;
        }
        PyErr_Format(PyExc_BufferError,
                     "%.200s: cannot export memory on device '%s': the "
                     "type's __buffer__ is not guarded, so a PyBUF_DEVICE "
                     "request cannot be trusted (call "
                     "BufferExt_SetSupportedFlags on the type)",
                     Py_TYPE(exporter)->tp_name, device);
        return -1;
    }
#endif
    return BufferExtInternal_WriteDevice(exporter, ext, device, device_info);
}

#ifdef __cplusplus
}
#endif
#endif /* !Py_LIMITED_API */
#endif /* BUFFEREXT_CORE_H */
