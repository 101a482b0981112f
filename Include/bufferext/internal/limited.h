/* bufferext/internal/limited.h -- what bufferext/core.h uses in place of
 * the accelerator (internal/accel.h) when the extension is built with
 * Py_LIMITED_API >= 3.11: the same internal interface (BufferExtAccel_*),
 * written with the stable ABI only.  Internal: included by core.h only;
 * every name here may change in any release.
 *
 * It reads no type internals (no tp_version_tag, tp_dict, tp_as_buffer,
 * tp_name): a type's slots through PyType_GetSlot, its flags through
 * PyType_GetFlags, the declaration and the typed entry through attribute
 * lookups.
 *   declaration  what the dicts of the type's __mro__ hold, read one by
 *                one on a cache miss (the metaclass is not consulted, no
 *                descriptor is called: a descriptor is an invalid
 *                declaration, as in the full API).  A cache hit compares
 *                PyObject_GetAttr(type, "__buffer_supported_flags__"),
 *                which CPython's own lookup cache serves, with what the
 *                miss looked up (with a metaclass other than `type`, the
 *                dicts again).  Not seen by a hit: a descriptor put in
 *                place of a declaration whose __get__ returns the very
 *                object it replaced.
 *   cache        per translation unit, keyed by the type object; an entry
 *                holds strong references to the type and to the objects
 *                its info derives from (the declaration and the entry's
 *                capsule), so no key can be freed and its address reused.
 *                An immutable type's entry (Py_TPFLAGS_IMMUTABLETYPE:
 *                bytes, numpy.ndarray, ...; its attributes cannot change),
 *                where every class of its __mro__ is immutable too (a
 *                mutable base's attributes can change, and the type
 *                inherits them), is used as it is; another type's is used
 *                while the two attribute lookups give the same objects and
 *                its getbuffer slot is the same.  (Not seen: a __bases__
 *                assignment that keeps both objects and both slots -- an
 *                entry's capsule copied into a class's dict, and its owner
 *                then swapped out of the MRO for a layout-compatible class
 *                with the owner's getbuffer and releasebuffer.  The full
 *                API then refuses the entry; this cache keeps it until its
 *                keys change.  Checking the owner on a hit would cost every
 *                hit a call.)  A lookup that failed (no
 *                memory) is not cached: it answers its own query only.
 *                Main interpreter only, so one thread at a time touches it
 *                (a GIL build: the limited API has no free-threaded variant
 *                before 3.15).
 *                The references are never released: an embedder that runs
 *                Py_Finalize and Py_Initialize again in one process keeps
 *                this extension's cache (and its statics) from the first
 *                run, which the limited API gives no hook to reset.
 *   dispatch     PyObject_GetBuffer and PyBuffer_Release, never inlined.
 *
 * Its version-specific parts say what they follow (a "Mirrors:" line) and
 * when to check them again; like accel.h it must not grow.
 */
#ifndef BUFFEREXT_INTERNAL_LIMITED_H
#define BUFFEREXT_INTERNAL_LIMITED_H
#ifndef BUFFEREXT_ACCEL_INSIDE
#  error "include <bufferext.h>, not <bufferext/internal/limited.h>"
#endif

#define BUFFEREXT_ACCEL_CACHE_SIZE 64
#define BUFFEREXT_ACCEL_INVALID_DECLARATION (-2)

/* getbufferproc is not in the limited API; the slot's signature is. */
typedef int (*BufferExtAccel_GetBufferProc)(PyObject *, Py_buffer *, int);

typedef struct {
    int declared;
    int mask;
    BufferExt_GetBufferExProc entry;    /* as in accel.h */
    BufferExtAccel_GetBufferProc slot;  /* the type's getbuffer, as read */
    BufferExtInternal_Func release;     /* ... and its releasebuffer */
} BufferExtAccel_TypeInfo;

#if !defined(Py_GIL_DISABLED)
#  define BUFFEREXT_ACCEL_HAVE_CACHE 1
#endif

static inline int BufferExtAccel_CheckBuffer(PyObject *obj)
{
    return PyObject_CheckBuffer(obj);
}

/* Every export goes through PyObject_GetBuffer (accel.h's direct call of
 * the slot reads the type struct). */
static inline int
BufferExtAccel_CallSlot(BufferExtAccel_GetBufferProc slot, PyObject *obj,
                        Py_buffer *view, int flags)
{
    (void)slot;
    return PyObject_GetBuffer(obj, view, flags);
}

static inline void BufferExtAccel_CallRelease(Py_buffer *view)
{
    PyBuffer_Release(view);
}

/* The getbuffer slot of `type` (NULL: none). */
static inline BufferExtAccel_GetBufferProc
BufferExtAccel_TypeSlot(PyTypeObject *type)
{
    return (BufferExtAccel_GetBufferProc)BufferExtInternal_TypeFunc(
        type, Py_bf_getbuffer);
}

/* The releasebuffer slot of `type` (NULL: none). */
static inline BufferExtInternal_Func
BufferExtAccel_ReleaseSlot(PyTypeObject *type)
{
    return BufferExtInternal_TypeFunc(type, Py_bf_releasebuffer);
}

/* Clear a pending exception; *failed is set unless it is an instance of
 * `absent` (the lookup's "not there", or NULL), i.e. when a lookup failed
 * (no memory, Python code that raised) rather than found nothing. */
static inline void BufferExtAccel_ClearFailure(PyObject *absent, int *failed)
{
    if (PyErr_Occurred()) {
        if (absent == NULL || !PyErr_ExceptionMatches(absent)) {
            *failed = 1;
        }
        PyErr_Clear();
    }
}

/* The attribute `key` (a str) of `obj`, or NULL; never raises (*failed as
 * above).  Mirrors: PyObject_GetOptionalAttr, in the limited API from 3.13
 * (before, PyObject_GetAttr and its AttributeError).  Re-check at 3.16. */
static inline PyObject *
BufferExtAccel_GetAttrKey(PyObject *obj, PyObject *key, int *failed)
{
    PyObject *found = NULL;

#if Py_LIMITED_API + 0 >= 0x030D0000
    (void)PyObject_GetOptionalAttr(obj, key, &found);
    BufferExtAccel_ClearFailure(NULL, failed);
#else
    found = PyObject_GetAttr(obj, key);
    BufferExtAccel_ClearFailure(PyExc_AttributeError, failed);
#endif
    return found;
}

/* The attribute `name` of `obj`, or NULL; never raises. */
static inline PyObject *
BufferExtAccel_GetAttr(PyObject *obj, const char *name, int *failed)
{
    PyObject *key = PyUnicode_InternFromString(name), *found = NULL;

    if (key != NULL) {
        found = BufferExtAccel_GetAttrKey(obj, key, failed);
        Py_DECREF(key);
    }
    BufferExtAccel_ClearFailure(NULL, failed);
    return found;
}

/* What `cls` (a type) itself holds as `name` (its __mro__, its __dict__):
 * type.__dict__[name].__get__(cls), which no metaclass can override, as
 * PyObject_GetAttr lets a metaclass's property do.  A new reference, or
 * NULL (never raises; *failed as above). */
static inline PyObject *
BufferExtAccel_TypeAttr(PyObject *cls, const char *name, int *failed)
{
    PyObject *dict, *descr = NULL, *found = NULL;

    dict = BufferExtAccel_GetAttr((PyObject *)&PyType_Type, "__dict__",
                                  failed);
    if (dict != NULL) {
        descr = PyMapping_GetItemString(dict, name);
        Py_DECREF(dict);
    }
    if (descr != NULL) {
        found = PyObject_CallMethod(descr, "__get__", "OO", cls,
                                    (PyObject *)Py_TYPE(cls));
        Py_DECREF(descr);
    }
    BufferExtAccel_ClearFailure(NULL, failed);
    return found;
}

/* The value of `key` as the dicts of type's MRO hold it: a new reference,
 * or NULL (never raises); *failed is set when NULL means that the lookup
 * failed rather than that nothing was found.  The dicts are read one by
 * one, the MRO and each dict as the type holds them (the metaclass is not
 * consulted, no descriptor is called). */
static inline PyObject *
BufferExtAccel_HeldInMRO(PyTypeObject *type, PyObject *key, int *failed)
{
    PyObject *mro, *found = NULL;
    Py_ssize_t i, n;

    mro = BufferExtAccel_TypeAttr((PyObject *)type, "__mro__", failed);
    n = mro != NULL && PyTuple_Check(mro) ? PyTuple_Size(mro) : 0;
    for (i = 0; i < n && found == NULL; i++) {
        PyObject *dict = BufferExtAccel_TypeAttr(PyTuple_GetItem(mro, i),
                                                 "__dict__", failed);
        if (dict != NULL) {
            found = PyObject_GetItem(dict, key);
            Py_DECREF(dict);
        }
        BufferExtAccel_ClearFailure(PyExc_KeyError, failed);
    }
    Py_XDECREF(mro);
    return found;
}

/* The same, the way a cache hit reads it: with the metaclass `type`,
 * PyObject_GetAttr, which finds the same object through CPython's own
 * lookup cache (but gives what a descriptor's __get__ returns); with
 * another, HeldInMRO. */
static inline PyObject *
BufferExtAccel_FindKeyInMRO(PyTypeObject *type, PyObject *key, int *failed)
{
    if (Py_IS_TYPE((PyObject *)type, &PyType_Type)) {
        return BufferExtAccel_GetAttrKey((PyObject *)type, key, failed);
    }
    return BufferExtAccel_HeldInMRO(type, key, failed);
}

/* HeldInMRO for the attribute name `name` (what the info is made of). */
static inline PyObject *
BufferExtAccel_FindInMRO(PyTypeObject *type, const char *name, int *failed)
{
    PyObject *key = PyUnicode_InternFromString(name), *found = NULL;

    if (key != NULL) {
        found = BufferExtAccel_HeldInMRO(type, key, failed);
        Py_DECREF(key);
    }
    BufferExtAccel_ClearFailure(NULL, failed);
    return found;
}

/* The same, for a caller that cannot tell failure from absence. */
static inline PyObject *
BufferExtAccel_LookupMRO(PyTypeObject *type, const char *name)
{
    int failed = 0;

    return BufferExtAccel_FindInMRO(type, name, &failed);
}

/* As in accel.h: the declared value `value` (the attribute found, or NULL)
 * stands for, or BUFFEREXT_ACCEL_INVALID_DECLARATION. */
static inline int BufferExtAccel_DeclaredFrom(PyObject *value)
{
    long declared;
    int overflow;

    if (value == NULL) {
        return BUFFEREXT_SUPPORTS_LEGACY;
    }
    if (!PyLong_Check(value) || PyBool_Check(value)) {
        return BUFFEREXT_ACCEL_INVALID_DECLARATION;
    }
    declared = PyLong_AsLongAndOverflow(value, &overflow);
    if (overflow || declared < -1 || declared > INT_MAX) {
        PyErr_Clear();
        return BUFFEREXT_ACCEL_INVALID_DECLARATION;
    }
    return (int)declared;
}

/* accel.h's BufferExtAccel_ReadEntry, from `found`, the entry's capsule
 * as the lookup found it (or NULL), for a type whose getbuffer is `slot`. */
static inline BufferExt_GetBufferExProc
BufferExtAccel_EntryFrom(PyTypeObject *type, PyObject *found,
                         BufferExtAccel_GetBufferProc slot)
{
    const BufferExt_GetBufferEntry *entry;
    PyTypeObject *owner;

    if (found == NULL || !PyCapsule_IsValid(found, BUFFEREXT_ENTRY_CAPSULE)) {
        return NULL;
    }
    entry = (const BufferExt_GetBufferEntry *)PyCapsule_GetPointer(
        found, BUFFEREXT_ENTRY_CAPSULE);
    owner = (PyTypeObject *)PyCapsule_GetContext(found);
    if (entry->version != BUFFEREXT_ABI_VERSION || owner == NULL ||
        !PyType_IsSubtype(type, owner) || slot != entry->getbuffer ||
        (void (*)(PyObject *, Py_buffer *))BufferExtAccel_ReleaseSlot(type) !=
            entry->releasebuffer) {
        return NULL;
    }
    return entry->getbuffer_ex;
}

/* The objects a type's info derives from, as new references (or NULL):
 * its declaration and its entry's capsule.  As long as both lookups give
 * the same objects (and the type's getbuffer is the same), the info is
 * unchanged. */
typedef struct {
    PyObject *declared;
    PyObject *entry;
    int failed;     /* a lookup failed: these are not the type's keys */
} BufferExtAccel_Keys;

/* The keys as the dicts of type's MRO hold them (HeldInMRO): what the info
 * is made of. */
static inline BufferExtAccel_Keys BufferExtAccel_HeldKeys(PyTypeObject *type)
{
    BufferExtAccel_Keys keys;

    keys.failed = 0;
    keys.declared = BufferExtAccel_FindInMRO(
        type, BUFFEREXT_SUPPORTED_FLAGS_ATTR, &keys.failed);
    keys.entry = BufferExtAccel_FindInMRO(type, BUFFEREXT_ENTRY_ATTR,
                                          &keys.failed);
    return keys;
}

/* The keys as a cache hit compares them (FindKeyInMRO), looked up under
 * `names`, the attribute names as str objects (NULL: they could not be
 * made, and the lookup failed). */
static inline BufferExtAccel_Keys
BufferExtAccel_LookedUpKeys(PyTypeObject *type, PyObject *const *names)
{
    BufferExtAccel_Keys keys;

    keys.failed = names == NULL;
    keys.declared = keys.entry = NULL;
    if (names != NULL) {
        keys.declared = BufferExtAccel_FindKeyInMRO(type, names[0],
                                                    &keys.failed);
        keys.entry = BufferExtAccel_FindKeyInMRO(type, names[1],
                                                 &keys.failed);
    }
    return keys;
}

static inline void BufferExtAccel_ClearKeys(BufferExtAccel_Keys *keys)
{
    Py_CLEAR(keys->declared);
    Py_CLEAR(keys->entry);
}

static inline BufferExtAccel_TypeInfo
BufferExtAccel_InfoFrom(PyTypeObject *type, const BufferExtAccel_Keys *keys)
{
    BufferExtAccel_TypeInfo info;

    info.declared = BufferExtAccel_DeclaredFrom(keys->declared);
    info.mask = info.declared == BUFFEREXT_SUPPORTS_LEGACY
                    ? BUFFEREXT_LEGACY_FLAGS
                    : (info.declared < 0 ? 0 : info.declared);
    info.slot = BufferExtAccel_TypeSlot(type);
    info.release = BufferExtAccel_ReleaseSlot(type);
    info.entry = BufferExtAccel_EntryFrom(type, keys->entry, info.slot);
    if (info.entry == NULL) {
        info.mask &= ~BUFFEREXT_EXTENDED_FLAGS;
    }
    return info;
}

/* Everything the header needs to know of `type`, read afresh. */
static inline BufferExtAccel_TypeInfo
BufferExtAccel_ReadInfo(PyTypeObject *type)
{
    BufferExtAccel_Keys keys = BufferExtAccel_HeldKeys(type);
    BufferExtAccel_TypeInfo info = BufferExtAccel_InfoFrom(type, &keys);

    BufferExtAccel_ClearKeys(&keys);
    return info;
}

#ifdef BUFFEREXT_ACCEL_HAVE_CACHE
/* An entry holds strong references to the type and to its keys, so that
 * none of them can be freed and another object take its address. */
typedef struct {
    PyTypeObject *type;
    int frozen;     /* FrozenType(type): the entry is used as it is */
    BufferExtAccel_Keys keys;
    BufferExtAccel_TypeInfo info;
} BufferExtAccel_CacheEntry;

static inline BufferExtAccel_CacheEntry *BufferExtAccel_Cache(void)
{
    static BufferExtAccel_CacheEntry cache[BUFFEREXT_ACCEL_CACHE_SIZE];
    return cache;
}

/* The two attribute names as str objects, made once (by the main
 * interpreter, which alone uses them); NULL if they cannot be made. */
static inline PyObject *const *BufferExtAccel_Names(void)
{
    static PyObject *names[2];

    if (names[1] == NULL) {
        PyObject *a = PyUnicode_InternFromString(
            BUFFEREXT_SUPPORTED_FLAGS_ATTR);
        PyObject *b = PyUnicode_InternFromString(BUFFEREXT_ENTRY_ATTR);
        if (a == NULL || b == NULL) {
            Py_XDECREF(a);
            Py_XDECREF(b);
            PyErr_Clear();
            return NULL;
        }
        names[0] = a;
        names[1] = b;
    }
    return names;
}

static inline BufferExtAccel_CacheEntry *
BufferExtAccel_CacheSlot(PyTypeObject *type)
{
    size_t hash = (size_t)type >> 4;
    return &BufferExtAccel_Cache()[(hash ^ (hash >> 6)) %
                                   BUFFEREXT_ACCEL_CACHE_SIZE];
}

/* Whether nothing `type` inherits can change: it and every class of its
 * __mro__ are immutable (Py_TPFLAGS_IMMUTABLETYPE; such a type's bases and
 * MRO cannot be reassigned either).  A mutable base's attributes can
 * change, and the type inherits them.  0 when the MRO cannot be read.
 * Mirrors: PyType_FromSpecWithBases, which makes an immutable type of a
 * mutable base (3.11; deprecated from 3.12 on, gh-95388, to be refused);
 * a static type may still have one.  Re-check at 3.16. */
static inline int BufferExtAccel_FrozenType(PyTypeObject *type)
{
    int failed = 0, frozen;
    PyObject *mro;
    Py_ssize_t i, n;

    if (!(PyType_GetFlags(type) & Py_TPFLAGS_IMMUTABLETYPE)) {
        return 0;
    }
    mro = BufferExtAccel_TypeAttr((PyObject *)type, "__mro__", &failed);
    n = mro != NULL && PyTuple_Check(mro) ? PyTuple_Size(mro) : 0;
    frozen = n > 0;
    for (i = 0; i < n; i++) {
        PyObject *base = PyTuple_GetItem(mro, i);
        if (base == NULL || !PyType_Check(base) ||
            !(PyType_GetFlags((PyTypeObject *)base) &
              Py_TPFLAGS_IMMUTABLETYPE)) {
            frozen = 0;
        }
    }
    Py_XDECREF(mro);
    return frozen;
}

/* Cache miss (or stale keys): compute from what the type's dicts hold and
 * remember it under `keys` (which it takes over), unless a lookup failed
 * (no memory): that answers this query only, for it is not the type's
 * answer (and a frozen type's entry would be trusted for good). */
BUFFEREXT_INTERNAL_COLD BufferExtAccel_TypeInfo
BufferExtAccel_InfoMiss(PyTypeObject *type, BufferExtAccel_CacheEntry *entry,
                        BufferExtAccel_Keys keys)
{
    BufferExtAccel_Keys held = BufferExtAccel_HeldKeys(type), old_keys;
    BufferExtAccel_TypeInfo info = BufferExtAccel_InfoFrom(type, &held);
    PyTypeObject *old;
    int frozen;

    BUFFEREXT_ACCEL_COUNT(1);
    /* Not cached where the lookups give other objects than the dicts hold
     * (a descriptor's __get__ ran): a hit compares the lookups, and they
     * would not tell when the dicts change */
    if (keys.failed || held.failed || keys.declared != held.declared ||
        keys.entry != held.entry) {
        BufferExtAccel_ClearKeys(&keys);
        BufferExtAccel_ClearKeys(&held);
        return info;
    }
    BufferExtAccel_ClearKeys(&held);
    frozen = BufferExtAccel_FrozenType(type);
    /* read now: the lookups may have run Python code (a dict key's
     * __eq__) that used the entry */
    old = entry->type;
    old_keys = entry->keys;
    Py_INCREF((PyObject *)type);
    entry->type = type;
    entry->frozen = frozen;
    entry->keys = keys;
    entry->info = info;
    Py_XDECREF((PyObject *)old);
    BufferExtAccel_ClearKeys(&old_keys);
    return info;
}
#endif

/* What the header knows of `type`.  Never raises.  A frozen type's entry
 * (FrozenType) is trusted as it is; another type's only while the lookups
 * of its keys give the same objects (two attribute lookups, served by
 * CPython's own type cache) and its getbuffer is the same (a __buffer__
 * assigned to the class changes it). */
static inline BufferExtAccel_TypeInfo
BufferExtAccel_Info(PyTypeObject *type)
{
#ifdef BUFFEREXT_ACCEL_HAVE_CACHE
    /* the main interpreter only: one thread at a time (a GIL build) */
    if (PyInterpreterState_GetID(PyInterpreterState_Get()) == 0) {
        BufferExtAccel_CacheEntry *entry = BufferExtAccel_CacheSlot(type);
        BufferExtAccel_Keys keys;

        if (entry->type == type && entry->frozen) {
            BUFFEREXT_ACCEL_COUNT(0);
            return entry->info;
        }
        keys = BufferExtAccel_LookedUpKeys(type, BufferExtAccel_Names());
        if (!keys.failed && entry->type == type &&
            keys.declared == entry->keys.declared &&
            keys.entry == entry->keys.entry &&
            BufferExtAccel_TypeSlot(type) == entry->info.slot &&
            BufferExtAccel_ReleaseSlot(type) == entry->info.release) {
            BufferExtAccel_ClearKeys(&keys);
            BUFFEREXT_ACCEL_COUNT(0);
            return entry->info;
        }
        return BufferExtAccel_InfoMiss(type, entry, keys);
    }
#endif
    BUFFEREXT_ACCEL_COUNT(1);
    return BufferExtAccel_ReadInfo(type);
}

/* The mask of the request flags instances of `type` honour. */
static inline int BufferExtAccel_Mask(PyTypeObject *type)
{
    return BufferExtAccel_Info(type).mask;
}

#endif /* BUFFEREXT_INTERNAL_LIMITED_H */
