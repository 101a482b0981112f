/* bufferext/internal/accel.h -- the accelerator of bufferext/core.h: the
 * lookup of a type's declaration and typed entry, their per-type cache and
 * the inlined dispatch of getbuffer/releasebuffer.  Internal: included
 * by core.h only; every name here (BufferExtAccel_*, BUFFEREXT_ACCEL_*) may
 * change in any release.  The public functions in core.h are all that
 * extensions call.
 *
 * It must not grow.  Everything here is compiled into other people's
 * extensions and read against a CPython that was not there when they were
 * built; each read of CPython's internals says below (a "Mirrors:" line)
 * which upstream function and versions it copies and the release at which
 * to check it again.  New work goes into bufferext's own module, behind a
 * function, where one wheel per interpreter can follow CPython.
 *
 * What it reads of CPython, by version, and when it falls back:
 *   all          tp_as_buffer->bf_getbuffer (CheckBuffer, inlined).
 *   3.9-3.11     tp_flags (Py_TPFLAGS_VALID_VERSION_TAG) and tp_version_tag:
 *                the cache key.
 *   3.12+        tp_version_tag alone (zeroed on change), atomically.
 *   3.9-3.11 with the GIL
 *                the cache entries with plain loads (one thread at a time);
 *                3.12+ and free-threaded builds through a sequence lock.
 *   3.9-3.11     the declaration and the entry through _PyType_Lookup,
 *                which reads the MRO's tp_dict and also gives the type its
 *                version tag.
 *   3.12+        the declaration and the entry through tp_mro and
 *                PyType_GetDict, after
 *                PyUnstable_Type_AssignVersionTag.
 *   3.9-3.15 GIL builds, free-threaded 3.13
 *                BufferExt_GetBuffer/Release call bf_getbuffer and
 *                bf_releasebuffer directly, as PyObject_GetBuffer and
 *                PyBuffer_Release do there (checked against each release:
 *                3.14.10 and 3.15.2 by their machine code in Debian's
 *                libpython; 3.13's Objects/abstract.c has no branch for
 *                free-threaded builds, so 3.13t runs the same code).
 *   3.16+, free-threaded 3.14+, or -DBUFFEREXT_ACCEL_INLINE_DISPATCH=0
 *                the public PyObject_GetBuffer and PyBuffer_Release.
 *   compilers without GCC/Clang atomics
 *                the cache only where one thread runs at a time (GIL builds
 *                before 3.12, the main interpreter from 3.12), none on
 *                free-threaded builds: every query reads the declaration.
 */
#ifndef BUFFEREXT_INTERNAL_ACCEL_H
#define BUFFEREXT_INTERNAL_ACCEL_H
#ifndef BUFFEREXT_ACCEL_INSIDE
#  error "include <bufferext.h>, not <bufferext/internal/accel.h>"
#endif

/* ---- run-time supported flags: lookup and per-type cache --------------- */

/* Cache entries remember (type, version tag) -> declared value.  CPython
 * gives a type a fresh version tag whenever its attributes change (and never
 * reuses one within an interpreter: see BufferExtAccel_CacheOwner for
 * several), so a matching tag proves the declaration is unchanged.  Types
 * without a valid tag are looked up every time. */
#define BUFFEREXT_ACCEL_CACHE_SIZE 64
#define BUFFEREXT_ACCEL_INVALID_DECLARATION (-2) /* cached: the attribute is bad */

/* What the header knows of a type: its declaration and its typed entry. */
typedef struct {
    int declared;           /* as read; BUFFEREXT_ACCEL_INVALID_DECLARATION if bad */
    int mask;               /* the request flags honoured: the declaration
                               translated (0: legacy, -1: none), less the
                               extended flags where there is no entry */
    BufferExt_GetBufferExProc entry;    /* the trusted typed entry, or NULL */
} BufferExtAccel_TypeInfo;

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
    BufferExtAccel_TypeInfo info;
} BufferExtAccel_CacheEntry;

/* The atomic accesses the sequence lock needs (GCC and Clang builtins,
 * which C and C++ both accept).  Without them the cache is used only
 * where one thread at a time can run: GIL builds before 3.12, and the main
 * interpreter of 3.12+ (found by a call, which costs about 4 ns). */
#if defined(__GNUC__) || defined(__clang__)
#  define BUFFEREXT_ACCEL_ATOMICS 1
#  define BUFFEREXT_ACCEL_LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#  define BUFFEREXT_ACCEL_LOAD_ACQUIRE(p) \
    __atomic_load_n((p), __ATOMIC_ACQUIRE)
#  define BUFFEREXT_ACCEL_STORE(p, v) \
    __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#  define BUFFEREXT_ACCEL_STORE_RELEASE(p, v) \
    __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#  define BUFFEREXT_ACCEL_FENCE(order) __atomic_thread_fence(order)
#else
#  define BUFFEREXT_ACCEL_LOAD(p) (*(p))
#  define BUFFEREXT_ACCEL_LOAD_ACQUIRE(p) (*(p))
#  define BUFFEREXT_ACCEL_STORE(p, v) (*(p) = (v))
#  define BUFFEREXT_ACCEL_STORE_RELEASE(p, v) (*(p) = (v))
#  define BUFFEREXT_ACCEL_FENCE(order) ((void)0)
#endif

#if defined(BUFFEREXT_ACCEL_ATOMICS) || !defined(Py_GIL_DISABLED)
#  define BUFFEREXT_ACCEL_HAVE_CACHE 1
#endif

/* Before 3.12 a GIL build runs one thread at a time in the whole process
 * (no interpreter has a GIL of its own): the table is written (InfoMiss,
 * which runs no Python code between its stores) and read with the GIL
 * held, so a reader never meets a writer and the hit path reads the entry
 * with plain loads, without the sequence checks.  Mirrors: the GIL as one
 * per process (3.9-3.11; PEP 684 gave interpreters their own in 3.12). */
#if PY_VERSION_HEX < 0x030C0000 && !defined(Py_GIL_DISABLED)
#  define BUFFEREXT_ACCEL_ONE_THREAD 1
#endif

#ifdef BUFFEREXT_ACCEL_HAVE_CACHE
static inline BufferExtAccel_CacheEntry *BufferExtAccel_Cache(void)
{
    static BufferExtAccel_CacheEntry cache[BUFFEREXT_ACCEL_CACHE_SIZE];
    return cache;
}

/* The type's version tag, or 0 when it has none.
 * Mirrors: the tag test of _PyType_Lookup (Objects/typeobject.c) -- the
 * Py_TPFLAGS_VALID_VERSION_TAG flag 3.9-3.11; the tag alone 3.12-3.15
 * (3.12 zeroes the tag wherever it clears the flag, in type_modified and
 * type_mro_modified, and its _PyType_Lookup compares the tag only;
 * 3.13 drops the flag).  Re-check at 3.16. */
static inline unsigned int BufferExtAccel_TypeTag(PyTypeObject *type)
{
#  if PY_VERSION_HEX >= 0x030C0000
    /* a zero tag is no tag; free-threaded builds change it while other
     * threads read it */
    return BUFFEREXT_ACCEL_LOAD(&type->tp_version_tag);
#  else
    return PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG)
               ? type->tp_version_tag : 0;
#  endif
}
#endif

typedef getbufferproc BufferExtAccel_GetBufferProc;

/* The getbuffer slot of `type`, or NULL when its instances export no
 * buffers: PyObject_CheckBuffer inlined where the type struct is visible
 * (the test is the same on every CPython 3.9-3.15: a getbuffer slot is
 * present, and the call into libpython costs as much as the cache lookup).
 * Mirrors: PyObject_CheckBuffer (Objects/abstract.c, 3.9-3.15).  Re-check
 * at 3.16. */
static inline BufferExtAccel_GetBufferProc
BufferExtAccel_TypeSlot(PyTypeObject *type)
{
    PyBufferProcs *procs = type->tp_as_buffer;
    return procs != NULL ? procs->bf_getbuffer : NULL;
}

/* The releasebuffer slot of `type`, or NULL. */
static inline releasebufferproc
BufferExtAccel_ReleaseSlot(PyTypeObject *type)
{
    PyBufferProcs *procs = type->tp_as_buffer;
    return procs != NULL ? procs->bf_releasebuffer : NULL;
}

/* The getbuffer slot of the type of `obj`: BufferExt_GetBuffer reads it
 * once and calls what it read. */
static inline BufferExtAccel_GetBufferProc
BufferExtAccel_BufferSlot(PyObject *obj)
{
    return BufferExtAccel_TypeSlot(Py_TYPE(obj));
}

/* PyObject_CheckBuffer(obj), inlined. */
static inline int BufferExtAccel_CheckBuffer(PyObject *obj)
{
    return BufferExtAccel_BufferSlot(obj) != NULL;
}

/* BUFFEREXT_ACCEL_INLINE_DISPATCH: BufferExt_GetBuffer and BufferExt_Release
 * call the exporter's slots directly instead of PyObject_GetBuffer and
 * PyBuffer_Release where the bodies of those functions are known to be
 * exactly that (CPython 3.9-3.15 with the GIL and the free-threaded 3.13,
 * checked against each release): it saves two calls into libpython per
 * export.  Elsewhere (3.16, free-threaded 3.14 and 3.15, whose sources
 * were not read), or when compiled with -DBUFFEREXT_ACCEL_INLINE_DISPATCH=0,
 * the functions are called.  Mirrors: PyObject_GetBuffer and
 * PyBuffer_Release (Objects/abstract.c, 3.9-3.15, with no branch for
 * free-threaded builds in 3.13; 3.14.10 and 3.15.2 also by the machine code
 * of Debian's libpython).  Re-check at 3.16, which gets the calls until
 * then. */
#ifndef BUFFEREXT_ACCEL_INLINE_DISPATCH
#  if PY_VERSION_HEX < 0x03100000 && \
      (!defined(Py_GIL_DISABLED) || PY_VERSION_HEX < 0x030E0000)
#    define BUFFEREXT_ACCEL_INLINE_DISPATCH 1
#  else
#    define BUFFEREXT_ACCEL_INLINE_DISPATCH 0
#  endif
#endif

/* BUFFEREXT_ACCEL_FAST_GETBUFFER: BufferExt_GetBuffer inlines only the
 * common case (the slot called directly, the type's entry in the cache,
 * every request flag supported) and leaves the rest to an out-of-line copy
 * of the whole function; where the slot is not called directly it is that
 * whole function, inline. */
#if BUFFEREXT_ACCEL_INLINE_DISPATCH && defined(BUFFEREXT_ACCEL_HAVE_CACHE)
#  define BUFFEREXT_ACCEL_FAST_GETBUFFER 1
#endif

/* PyObject_GetBuffer(obj, view, flags), given `slot` =
 * BufferExtAccel_BufferSlot(obj).  3.13+ also refuses the bare values
 * PyBUF_READ and PyBUF_WRITE: from 3.12 on (in case a 3.12 release has
 * the check too) those go through the function.  Mirrors: PyObject_GetBuffer
 * (Objects/abstract.c, 3.9-3.15).  Re-check at 3.16. */
static inline int
BufferExtAccel_CallSlot(BufferExtAccel_GetBufferProc slot, PyObject *obj,
                        Py_buffer *view, int flags)
{
#if BUFFEREXT_ACCEL_INLINE_DISPATCH
    if (slot != NULL
#  if PY_VERSION_HEX >= 0x030C0000
        && flags != PyBUF_READ && flags != PyBUF_WRITE
#  endif
        ) {
        return slot(obj, view, flags);
    }
#else
    (void)slot;
#endif
    return PyObject_GetBuffer(obj, view, flags);
}

/* PyBuffer_Release(view): the exporter's releasebuffer, then the reference
 * to view->obj dropped; nothing when view->obj is NULL.  Mirrors:
 * PyBuffer_Release (Objects/abstract.c, 3.9-3.15).  Re-check at 3.16. */
static inline void
BufferExtAccel_CallRelease(Py_buffer *view)
{
#if BUFFEREXT_ACCEL_INLINE_DISPATCH
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


/* The value of `name` in the dict of the first class of type's MRO that
 * has it, as a slot lookup finds it (never through the metaclass): a new
 * reference, or NULL (never raises); *failed is set when NULL means that
 * the lookup failed (no memory for the key, a dict key's __eq__ raised)
 * rather than that nothing was found.  Mirrors: find_name_in_mro
 * (Objects/typeobject.c, 3.12-3.15: tp_mro walked, each type's dict) and,
 * 3.9-3.11, calls _PyType_Lookup itself (private, unchanged 3.9-3.11).
 * Re-check at 3.16. */
static inline PyObject *
BufferExtAccel_FindInMRO(PyTypeObject *type, const char *name, int *failed)
{
    PyObject *key = PyUnicode_InternFromString(name), *found = NULL;
#if PY_VERSION_HEX >= 0x030C0000
    /* held, as find_name_in_mro holds it: a dict key's __eq__ (or another
     * thread) may assign __bases__, which frees the old MRO */
    PyObject *mro = Py_XNewRef(type->tp_mro);
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
    Py_XDECREF(mro);
#else
    /* Before 3.12 the lookup that also gives the type a version tag (which
     * the cache needs) is _PyType_Lookup; it reads the MRO the same way. */
    if (key != NULL) {
        found = _PyType_Lookup(type, key);
        Py_XINCREF(found);
    }
#endif
    Py_XDECREF(key);
    if (PyErr_Occurred()) {
        *failed = 1;
        PyErr_Clear();
    }
    return found;
}

/* The same, for a caller that cannot tell failure from absence. */
static inline PyObject *
BufferExtAccel_LookupMRO(PyTypeObject *type, const char *name)
{
    int failed = 0;

    return BufferExtAccel_FindInMRO(type, name, &failed);
}

/* Read the declaration of `type`: the attribute found in its MRO.  Returns
 * the declared value (-1 included) or BUFFEREXT_ACCEL_INVALID_DECLARATION for a
 * value that is not an int in {-1} U [0, INT_MAX].  Never raises: a
 * missing attribute reads as 0 (the legacy default).  Like a slot, the
 * declaration belongs to the class: the metaclass is not consulted, and no
 * descriptor is called (so no Python code runs). */
static inline int BufferExtAccel_ReadDeclared(PyTypeObject *type,
                                              int *failed)
{
    PyObject *value;
    long declared;
    int overflow;

    value = BufferExtAccel_FindInMRO(type, BUFFEREXT_SUPPORTED_FLAGS_ATTR,
                                     failed);
    if (value == NULL) {
        return BUFFEREXT_SUPPORTS_LEGACY;
    }
    if (!PyLong_Check(value) || PyBool_Check(value)) {
        Py_DECREF(value);
        return BUFFEREXT_ACCEL_INVALID_DECLARATION;
    }
    declared = PyLong_AsLongAndOverflow(value, &overflow);
    Py_DECREF(value);
    if (overflow || declared < -1 || declared > INT_MAX) {
        PyErr_Clear();
        return BUFFEREXT_ACCEL_INVALID_DECLARATION;
    }
    return (int)declared;
}

/* The typed entry of `type`, or NULL: the capsule BUFFEREXT_ENTRY_ATTR
 * found in its MRO (as the declaration is), trusted only for its owner (the
 * capsule's context) and subclasses whose getbuffer and releasebuffer are
 * still the ones the entry was published with.  Whose it is, not
 * where it was found: a capsule copied into another class's dict, a
 * subclass whose getbuffer runs a __buffer__ of its own, or one whose
 * __release_buffer__ would hand the view to Python code as a memoryview
 * (device memory read as CPU memory), gets no extended request.  Runs
 * Python code only as the declaration's lookup does (a dict key's
 * __eq__). */
static inline BufferExt_GetBufferExProc
BufferExtAccel_ReadEntry(PyTypeObject *type, int *failed)
{
    PyObject *found = BufferExtAccel_FindInMRO(type, BUFFEREXT_ENTRY_ATTR,
                                               failed);
    const BufferExt_GetBufferEntry *entry = NULL;
    BufferExt_GetBufferExProc getbuffer_ex = NULL;
    PyTypeObject *owner;

    if (found != NULL && PyCapsule_IsValid(found, BUFFEREXT_ENTRY_CAPSULE)) {
        entry = (const BufferExt_GetBufferEntry *)PyCapsule_GetPointer(
            found, BUFFEREXT_ENTRY_CAPSULE);
        owner = (PyTypeObject *)PyCapsule_GetContext(found);
        /* PyType_IsSubtype compares owner with the members of type's MRO,
         * never reading it */
        if (entry->version != BUFFEREXT_ABI_VERSION || owner == NULL ||
            !PyType_IsSubtype(type, owner) ||
            BufferExtAccel_TypeSlot(type) != entry->getbuffer ||
            (void (*)(PyObject *, Py_buffer *))BufferExtAccel_ReleaseSlot(
                type) != entry->releasebuffer) {
            entry = NULL;
        }
        /* read while the capsule, which owns the entry, is held (without
         * the GIL another thread may delete the attribute meanwhile) */
        getbuffer_ex = entry != NULL ? entry->getbuffer_ex : NULL;
    }
    Py_XDECREF(found);
    PyErr_Clear();
    return getbuffer_ex;
}

/* Everything the header needs to know of `type`, read afresh; *failed is
 * set when a lookup failed (the info is then the legacy default's, for
 * this query only: never cached). */
static inline BufferExtAccel_TypeInfo
BufferExtAccel_ReadInfo(PyTypeObject *type, int *failed)
{
    BufferExtAccel_TypeInfo info;

    info.declared = BufferExtAccel_ReadDeclared(type, failed);
    /* 0 is the legacy default; -1 and invalid values, PyBUF_SIMPLE only */
    info.mask = info.declared == BUFFEREXT_SUPPORTS_LEGACY
                    ? BUFFEREXT_LEGACY_FLAGS
                    : (info.declared < 0 ? 0 : info.declared);
    info.entry = BufferExtAccel_ReadEntry(type, failed);
    if (info.entry == NULL) {
        /* only a typed entry serves an extended flag */
        info.mask &= ~BUFFEREXT_EXTENDED_FLAGS;
    }
    return info;
}

static inline int BufferExtAccel_SameInfo(BufferExtAccel_TypeInfo a,
                                          BufferExtAccel_TypeInfo b)
{
    return a.declared == b.declared && a.entry == b.entry;
}

#ifdef BUFFEREXT_ACCEL_HAVE_CACHE
/* Whether this thread may use the table for a type of version tag `tag`.
 * The table is one per translation unit, shared by every interpreter of
 * the process.  From 3.12 each interpreter numbers the mutable heap types
 * it makes from its own counter, which every interpreter starts at
 * _Py_TYPE_BASE_VERSION_TAG (2 << 16): a type of one interpreter and a
 * type of another made at the first one's address once it is freed may
 * carry the same tag, so such tags are the main interpreter's only (it is
 * never freed before the process ends); the tags below (static and
 * immutable types) come from one counter of the process and name one type
 * wherever they are read.  Without atomics, from 3.12, only the main
 * interpreter uses the table at all: interpreters with a GIL of their own
 * (PEP 684) run in parallel.  Mirrors: assign_version_tag
 * (Objects/typeobject.c) and _Py_TYPE_BASE_VERSION_TAG
 * (Include/internal/pycore_typeobject.h), 3.12-3.15; PEP 684.  Re-check
 * at 3.16. */
static inline int BufferExtAccel_CacheOwner(unsigned int tag)
{
#  if PY_VERSION_HEX >= 0x030C0000
    /* Mirrors: the main interpreter is a static of the runtime from 3.12
     * (_PyRuntime._main_interpreter), the same for the process's life:
     * kept, it spares a call. */
    static PyInterpreterState *main_interp;
    PyInterpreterState *main = BUFFEREXT_ACCEL_LOAD(&main_interp);

#    ifdef BUFFEREXT_ACCEL_ATOMICS
    if (tag < (2u << 16)) {
        return 1;
    }
#    endif
    if (main == NULL) {
        main = PyInterpreterState_Main();
        BUFFEREXT_ACCEL_STORE(&main_interp, main);
    }
    return PyInterpreterState_Get() == main;
#  else
    (void)tag;
    return 1;
#  endif
}

/* Store `info` for (type, tag) unless another thread is writing the entry. */
static inline void BufferExtAccel_CacheStore(
    BufferExtAccel_CacheEntry *entry, PyTypeObject *type,
    unsigned int tag, BufferExtAccel_TypeInfo info)
{
    unsigned int seq = BUFFEREXT_ACCEL_LOAD(&entry->seq);

    if (seq & 1) {
        return;
    }
#  ifdef BUFFEREXT_ACCEL_ATOMICS
    if (!__atomic_compare_exchange_n(&entry->seq, &seq, seq + 1, 0,
                                     __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        return;
    }
    __atomic_thread_fence(__ATOMIC_RELEASE);
#  else
    entry->seq = seq + 1;
#  endif
    BUFFEREXT_ACCEL_STORE(&entry->type, type);
    BUFFEREXT_ACCEL_STORE(&entry->tag, tag);
    BUFFEREXT_ACCEL_STORE(&entry->info.declared, info.declared);
    BUFFEREXT_ACCEL_STORE(&entry->info.mask, info.mask);
    BUFFEREXT_ACCEL_STORE(&entry->info.entry, info.entry);
    BUFFEREXT_ACCEL_STORE_RELEASE(&entry->seq, seq + 2);
}

/* The entry's info in *info if it holds (type, tag) and no writer
 * interfered: 1, else 0. */
static inline int BufferExtAccel_CacheLoad(
    BufferExtAccel_CacheEntry *entry, PyTypeObject *type,
    unsigned int tag, BufferExtAccel_TypeInfo *info)
{
#  ifdef BUFFEREXT_ACCEL_ONE_THREAD
    if (entry->tag != tag || entry->type != type) {
        return 0;
    }
    *info = entry->info;
    return 1;
#  else
    unsigned int seq = BUFFEREXT_ACCEL_LOAD_ACQUIRE(&entry->seq);

    if (BUFFEREXT_ACCEL_LOAD(&entry->tag) != tag ||
        BUFFEREXT_ACCEL_LOAD(&entry->type) != type) {
        return 0;
    }
    info->declared = BUFFEREXT_ACCEL_LOAD(&entry->info.declared);
    info->mask = BUFFEREXT_ACCEL_LOAD(&entry->info.mask);
    info->entry = BUFFEREXT_ACCEL_LOAD(&entry->info.entry);
    BUFFEREXT_ACCEL_FENCE(__ATOMIC_ACQUIRE);
    return (seq & 1) == 0 && BUFFEREXT_ACCEL_LOAD(&entry->seq) == seq;
#  endif
}

/* Cache miss: read what the header needs and remember it under the type's
 * (new) version tag.  Out of line: the hit path below is what consumers
 * inline. */
BUFFEREXT_INTERNAL_COLD BufferExtAccel_TypeInfo
BufferExtAccel_InfoMiss(PyTypeObject *type)
{
    BufferExtAccel_CacheEntry *entry;
    BufferExtAccel_TypeInfo info;
    unsigned int before, tag;
    int failed = 0;

    BUFFEREXT_ACCEL_COUNT(1);
    /* Mirrors: PyUnstable_Type_AssignVersionTag (3.12-3.15; before,
     * _PyType_Lookup assigns the tag).  Re-check at 3.16. */
#  if PY_VERSION_HEX >= 0x030C0000
    PyUnstable_Type_AssignVersionTag(type);
#  endif
    before = BufferExtAccel_TypeTag(type);
    info = BufferExtAccel_ReadInfo(type, &failed);
    /* On 3.9-3.11 the lookup itself may assign the tag. */
    tag = BufferExtAccel_TypeTag(type);
    /* Should the type change meanwhile (another thread, a dict key's
     * __eq__), a value is cached only under a tag that was valid for the
     * whole of one lookup. */
    if (tag != 0 && tag != before && !failed) {
        BufferExtAccel_TypeInfo again = BufferExtAccel_ReadInfo(type,
                                                                &failed);
        if (!BufferExtAccel_SameInfo(again, info) ||
            BufferExtAccel_TypeTag(type) != tag) {
            return again;
        }
    }
    /* a failed lookup (no memory) is not the type's answer */
    if (tag != 0 && !failed && BufferExtAccel_CacheOwner(tag)) {
        entry = &BufferExtAccel_Cache()[tag % BUFFEREXT_ACCEL_CACHE_SIZE];
        BufferExtAccel_CacheStore(entry, type, tag, info);
    }
    return info;
}
#endif

#ifdef BUFFEREXT_ACCEL_HAVE_CACHE
/* What the cache holds of `type`: 1 with *info filled (a hit), or 0. */
static inline int
BufferExtAccel_InfoCached(PyTypeObject *type, BufferExtAccel_TypeInfo *info)
{
    unsigned int tag = BufferExtAccel_TypeTag(type);

    if (tag != 0 && BufferExtAccel_CacheOwner(tag) &&
        BufferExtAccel_CacheLoad(
            &BufferExtAccel_Cache()[tag % BUFFEREXT_ACCEL_CACHE_SIZE], type,
            tag, info)) {
        BUFFEREXT_ACCEL_COUNT(0);
        return 1;
    }
    return 0;
}
#endif

#ifdef BUFFEREXT_ACCEL_HAVE_CACHE
/* The cached mask of `type` in *mask: 1 (a hit), or 0.  The query's path
 * reads nothing else of the entry. */
static inline int
BufferExtAccel_MaskCached(PyTypeObject *type, int *mask)
{
    unsigned int tag = BufferExtAccel_TypeTag(type);
    BufferExtAccel_CacheEntry *entry;
#  ifndef BUFFEREXT_ACCEL_ONE_THREAD
    unsigned int seq;
#  endif

    if (tag == 0 || !BufferExtAccel_CacheOwner(tag)) {
        return 0;
    }
    entry = &BufferExtAccel_Cache()[tag % BUFFEREXT_ACCEL_CACHE_SIZE];
#  ifdef BUFFEREXT_ACCEL_ONE_THREAD
    if (entry->tag != tag || entry->type != type) {
        return 0;
    }
    *mask = entry->info.mask;
#  else
    seq = BUFFEREXT_ACCEL_LOAD_ACQUIRE(&entry->seq);
    if (BUFFEREXT_ACCEL_LOAD(&entry->tag) != tag ||
        BUFFEREXT_ACCEL_LOAD(&entry->type) != type) {
        return 0;
    }
    *mask = BUFFEREXT_ACCEL_LOAD(&entry->info.mask);
    BUFFEREXT_ACCEL_FENCE(__ATOMIC_ACQUIRE);
    if ((seq & 1) != 0 || BUFFEREXT_ACCEL_LOAD(&entry->seq) != seq) {
        return 0;
    }
#  endif
    BUFFEREXT_ACCEL_COUNT(0);
    return 1;
}
#endif

/* The mask of the request flags instances of `type` honour, through the
 * cache.  Never raises. */
static inline int BufferExtAccel_Mask(PyTypeObject *type)
{
#ifdef BUFFEREXT_ACCEL_HAVE_CACHE
    int mask;

    if (BufferExtAccel_MaskCached(type, &mask)) {
        return mask;
    }
    return BufferExtAccel_InfoMiss(type).mask;
#else
    int failed = 0;

    BUFFEREXT_ACCEL_COUNT(1);
    return BufferExtAccel_ReadInfo(type, &failed).mask;
#endif
}

/* What the header knows of `type`, through the cache.  Never raises. */
static inline BufferExtAccel_TypeInfo
BufferExtAccel_Info(PyTypeObject *type)
{
#ifdef BUFFEREXT_ACCEL_HAVE_CACHE
    BufferExtAccel_TypeInfo info;

    if (BufferExtAccel_InfoCached(type, &info)) {
        return info;
    }
    return BufferExtAccel_InfoMiss(type);
#else
    int failed = 0;

    BUFFEREXT_ACCEL_COUNT(1);
    return BufferExtAccel_ReadInfo(type, &failed);
#endif
}

#endif /* BUFFEREXT_INTERNAL_ACCEL_H */
