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
 *   the entry     an exporter that fills the extension publishes a typed
 *                 entry, a function taking a Py_buffer_extended *, beside
 *                 its declaration (the type attribute __buffer_extended__),
 *                 and BufferExt_GetBuffer calls it for an extended request,
 *                 found through the same per-type cache: the C type of the
 *                 call proves the struct is extended, so nothing is marked
 *                 or looked up per request, and a plain getbuffer never
 *                 writes past a Py_buffer whatever flags reach it (CPython's
 *                 __buffer__ wrapper of PEP 688, memoryview._from_flags,
 *                 PickleBuffer, forwarders).
 *   limited API   with Py_LIMITED_API >= 0x030B0000 the same API through
 *                 the stable ABI only (internal/limited.h instead of the
 *                 accelerator; docs/capi.rst, "Limited API").  Below 3.11:
 *                 #error.
 *   native mode   a CPython that implements the draft itself (the patched
 *                 interpreter of cpython/; BUFFEREXT_NATIVE, below): the
 *                 declaration is the slot bf_supported_flags, the functions
 *                 here call CPython's (PyObject_GetBufferEx and the typed
 *                 slot bf_getbuffer_ex), and the accelerator and its cache
 *                 are not compiled (internal/native.h).
 *
 * Every function here is static inline: an extension that includes this
 * header needs nothing from the bufferext package at run time, and two
 * extensions built separately interoperate through the type attributes.
 * The normative text is docs/capi.rst.
 */
#ifndef BUFFEREXT_CORE_H
#define BUFFEREXT_CORE_H
#ifndef BUFFEREXT_H_INSIDE
#  error "include <bufferext.h>, not <bufferext/core.h>"
#endif

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Limited API (stable ABI, abi3): supported from 3.11, the first release
 * whose limited API has Py_buffer and PyObject_GetBuffer.  There the
 * accelerator, which reads type internals, is replaced by
 * bufferext/internal/limited.h (docs/capi.rst, "Limited API"). */
#if defined(Py_LIMITED_API) && Py_LIMITED_API + 0 < 0x030B0000
#  error "bufferext.h needs Py_LIMITED_API >= 0x030B0000 (3.11): Py_buffer and PyObject_GetBuffer joined the limited API in CPython 3.11"
#else /* the rest of this file */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- mode ------------------------------------------------------------- */

/* BUFFEREXT_NATIVE: the running CPython implements the draft itself.  Its
 * headers define the typed slot Py_bf_getbuffer_ex and
 * PyBUF_EXTENDED_FLAGS, which no released CPython does (a version test
 * cannot tell: the patched 3.13 of cpython/ still says 3.13).  There the
 * header maps onto CPython: BufferExt_SetSupportedFlags and
 * BufferExt_SetExtendedGetBuffer write the slots bf_supported_flags and
 * bf_getbuffer_ex, BufferExt_GetBuffer/BufferExt_Release call
 * PyObject_GetBufferEx and PyBuffer_Release, which refuse undeclared
 * required flags, call the typed entry and check the extension themselves.
 * With Py_LIMITED_API the slots are visible only to a limited version that
 * has them, so an abi3 build for older releases stays in backport mode, as
 * it must to load there; a limited build for the release that has them
 * declares through its PyType_Spec (internal/native.h).  Define
 * BUFFEREXT_FORCE_BACKPORT to build backport mode on such a CPython (the
 * parity suite builds both and loads them into one process). */
#if !defined(BUFFEREXT_FORCE_BACKPORT) && defined(Py_bf_getbuffer_ex) && \
    defined(PyBUF_EXTENDED_FLAGS)
#  define BUFFEREXT_NATIVE 1
#endif

/* ---- compat shims ----------------------------------------------------- */

/* Py_NewRef: added in CPython 3.10.  Mirrors: Py_NewRef (Include/object.h,
 * 3.10).  Goes when 3.9 support does. */
#if PY_VERSION_HEX < 0x030A00A3 && !defined(Py_NewRef)
static inline PyObject *BufferExtCompat_NewRef(PyObject *obj)
{
    Py_INCREF(obj);
    return obj;
}
#  define Py_NewRef(obj) BufferExtCompat_NewRef((PyObject *)(obj))
#endif

/* PyType_GetDict: added in CPython 3.12 (before, tp_dict is the dict).
 * Not in the limited API, which uses no type dict.  Mirrors: PyType_GetDict
 * (Objects/typeobject.c, 3.12: a new reference to tp_dict, or to the
 * interpreter's dict of a static builtin type).  Goes when 3.11 support
 * does. */
#if defined(Py_LIMITED_API)
#elif PY_VERSION_HEX < 0x030C0000
static inline PyObject *BufferExtCompat_TypeGetDict(PyTypeObject *type)
{
    Py_XINCREF(type->tp_dict);
    return type->tp_dict;
}
#else
#  define BufferExtCompat_TypeGetDict PyType_GetDict
#endif

/* The name of `type` for messages: tp_name, or with the limited API (no
 * tp_name) "module.qualname" written into `buf` ("qualname" for builtins). */
#define BUFFEREXT_INTERNAL_NAME_SIZE 208
static inline const char *
BufferExtInternal_TypeName(PyTypeObject *type, char *buf, size_t size)
{
#ifdef Py_LIMITED_API
    /* each call only while no exception is pending (no memory) */
    PyObject *qualname = PyType_GetQualName(type);
    const char *q = qualname ? PyUnicode_AsUTF8AndSize(qualname, NULL) : NULL;
    PyObject *module = q ? PyObject_GetAttrString((PyObject *)type,
                                                  "__module__")
                         : NULL;
    const char *m = module && PyUnicode_Check(module)
                        ? PyUnicode_AsUTF8AndSize(module, NULL) : NULL;

    PyErr_Clear();
    if (m != NULL && strcmp(m, "builtins") != 0) {
        PyOS_snprintf(buf, size, "%.100s.%.100s", m, q ? q : "?");
    }
    else {
        PyOS_snprintf(buf, size, "%.200s", q ? q : "?");
    }
    Py_XDECREF(qualname);
    Py_XDECREF(module);
    return buf;
#else
    (void)buf;
    (void)size;
    return type->tp_name;
#endif
}

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
 * PyBUF_INDIRECT that is its own (0x100) and PyBUF_DEVICE are soft. */
#ifndef PyBUF_REQUIRED_FLAGS
#  define PyBUF_REQUIRED_FLAGS                                         \
    (PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_ND | PyBUF_STRIDES |         \
     PyBUF_C_CONTIGUOUS | PyBUF_F_CONTIGUOUS | PyBUF_ANY_CONTIGUOUS)
#endif

/* The header supplies PyObject_CheckBufferSupports, except in native mode,
 * where it answers as CPython's does (internal/native.h).  Where CPython
 * declares it but backport mode is forced, the header's takes that name in
 * this translation unit. */
#ifndef BUFFEREXT_NATIVE
#  define BUFFEREXT_BACKPORT_CHECK_SUPPORTS 1
#  ifdef PyBUF_EXTENDED_FLAGS
#    define PyObject_CheckBufferSupports BufferExtBackport_CheckBufferSupports
#  endif
#endif

/* Every request bit that existed before the draft (0x1FD): what a declared
 * value of 0, or no declaration at all, means. */
#define BUFFEREXT_LEGACY_FLAGS (PyBUF_REQUIRED_FLAGS | PyBUF_INDIRECT)

/* The extended request flags: the family of bits 16 to 30 that the draft
 * reserves for them, PyBUF_DEVICE the first (docs/flag-value.rst).  An
 * exporter receives one only through its typed entry, and only the ones its
 * type declares. */
#define BUFFEREXT_EXTENDED_FLAGS 0x7FFF0000

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
 * but only when PyBUF_DEVICE was requested.  The tag lets other headers
 * forward-declare it: `struct Py_buffer_extended;`.  Layout: ABI 1.  A
 * CPython whose headers define PyBUF_EXTENDED_FLAGS defines it, with the
 * same layout and tag (tests/capi/layout.c asserts both). */
#ifndef PyBUF_EXTENDED_FLAGS
typedef struct Py_buffer_extended {
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
#endif

/* ---- the typed entry ---------------------------------------------------- */

/* A request flag is no proof of the struct behind a view: PyBUF_DEVICE
 * reaches a getbuffer with a bare Py_buffer through any path that forwards
 * its caller's flags (CPython's __buffer__ wrapper, pickle.PickleBuffer,
 * memoryview._from_flags, an exporter that forwards to another, a consumer
 * that ignores this header), and nothing in the view is either (on those
 * paths it is memory no one initialised).  The C type of the call is the
 * proof: an exporter that fills the extension publishes a typed entry,
 * which receives a Py_buffer_extended *, and which only BufferExt_GetBuffer
 * calls, always with a real one.  Its plain getbuffer (bf_getbuffer) never
 * writes the extension, whatever flags it is handed: CPU memory is served
 * as for a plain request, device memory refused.
 *
 * The exporter writes one function, `impl(obj, view, flags, ext)`, where
 * `ext` is NULL for a plain request and otherwise the extended struct whose
 * `view` is `view`; BUFFEREXT_DEFINE_GETBUFFER derives the plain getbuffer
 * and the entry from it, and BufferExt_SetExtendedGetBuffer publishes the
 * entry with the type's declaration, paired with the type's getbuffer. */
typedef int (*BufferExt_GetBufferExProc)(PyObject *obj,
                                         Py_buffer_extended *view,
                                         int flags);

/* What a type publishes: the typed entry, and the plain getbuffer it
 * extends and the releasebuffer it pairs with, as the type had them when
 * it published (the entry is trusted only for types whose slots are still
 * those: a Python __release_buffer__ assigned since, to the type itself or
 * a subclass, would be handed its device views as memoryviews).  Part of
 * the ABI (BUFFEREXT_ABI_VERSION). */
typedef struct BufferExt_GetBufferEntry {
    int version;                /* BUFFEREXT_ABI_VERSION of the publisher */
    int (*getbuffer)(PyObject *, Py_buffer *, int);    /* bf_getbuffer */
    BufferExt_GetBufferExProc getbuffer_ex;            /* the entry */
    void (*releasebuffer)(PyObject *, Py_buffer *);    /* or NULL: none */
} BufferExt_GetBufferEntry;

/* The type attribute that carries the entry: a capsule of this name whose
 * pointer is a BufferExt_GetBufferEntry (owned by the capsule) and whose
 * context is the type that published it (the owner). */
#define BUFFEREXT_ENTRY_ATTR "__buffer_extended__"
#define BUFFEREXT_ENTRY_CAPSULE "bufferext.getbuffer_entry"

/* BUFFEREXT_DEFINE_GETBUFFER(NAME, IMPL): from the exporter's one function
 *     static int IMPL(PyObject *obj, Py_buffer *view, int flags,
 *                     Py_buffer_extended *ext);
 * define NAME, the plain getbuffer (for Py_bf_getbuffer / tp_as_buffer;
 * IMPL gets ext == NULL), and NAME##_ex, the typed entry (IMPL gets the
 * consumer's extended struct), which BufferExt_SetExtendedGetBuffer
 * publishes.  Use it at file scope.  Bindings whose framework writes the
 * plain getbuffer (Cython's __getbuffer__, pybind11, nanobind) write the
 * two wrappers of their one function by hand (docs/capi.rst). */
#define BUFFEREXT_DEFINE_GETBUFFER(NAME, IMPL)                              \
    static int NAME(PyObject *obj, Py_buffer *view, int flags)               \
    {                                                                        \
        return IMPL(obj, view, flags, NULL);                                 \
    }                                                                        \
    static int NAME##_ex(PyObject *obj, Py_buffer_extended *view, int flags) \
    {                                                                        \
        return IMPL(obj, &view->view, flags, view);                          \
    }                                                                        \
    /* a declaration, so that the `;` after the macro ends it */             \
    static int NAME##_ex(PyObject *obj, Py_buffer_extended *view, int flags)

/* The ABI between extensions built separately, against any release of this
 * header.  BUFFEREXT_ABI_VERSION names the layout of Py_buffer_extended,
 * the meaning of its fields and how an extended request reaches an
 * exporter; it changes (a major, incompatible change) only if one of them
 * ever does, never for a new extended flag (a bit of
 * BUFFEREXT_EXTENDED_FLAGS) or a new device name.  Version 2 marked an
 * extended view in view->internal, version 3 in the calling thread's state;
 * version 4 calls the exporter's typed entry (above) and marks nothing.
 * Versions fail safe against each other: an exporter of one trusts no
 * extended request of a consumer of another, which gets CPU memory as for
 * a plain request and a BufferError for device memory (docs/capi.rst, "ABI
 * versions").  Beside it, extensions share: the type attributes
 * __buffer_supported_flags__ (its values as above) and __buffer_extended__
 * (the entry), and the device-info layouts, versioned on their own (cuda.h,
 * ve.h: a major number for incompatible changes, a minor one for fields
 * added in the reserved space).  Nothing else (the cache, internal names)
 * crosses an extension's boundary. */
#define BUFFEREXT_ABI_VERSION 4

/* Declares the error paths of the inline functions below: kept out of line
 * (where the compiler allows saying so) so that the hot path a consumer
 * inlines stays small. */
#if defined(__GNUC__) || defined(__clang__)
#  define BUFFEREXT_INTERNAL_COLD static __attribute__((noinline, cold, unused))
#else
#  define BUFFEREXT_INTERNAL_COLD static inline
#endif

/* Declares the few functions whose hot path is small but whose inline
 * size, counting the paths that leave it, exceeds what compilers inline
 * on their own (gcc -O2 keeps BufferExt_GetBuffer out of line, which costs
 * a call, a stack frame and register moves per export). */
#if defined(__GNUC__) || defined(__clang__)
#  define BUFFEREXT_INTERNAL_HOT static inline __attribute__((always_inline))
#else
#  define BUFFEREXT_INTERNAL_HOT static inline
#endif

/* ---- the accelerator --------------------------------------------------- */

/* The lookup of the declaration and the typed entry and their per-type
 * cache read CPython internals; they live apart, in bufferext/internal/accel.h, with
 * the CPython versions and fields they depend on.  With Py_LIMITED_API the
 * accelerator is off: bufferext/internal/limited.h gives the same
 * interface through the stable ABI. */
#ifdef BUFFEREXT_ENABLE_CACHE_STATS
/* Test hook: hits and misses of this translation unit's cache. */
static inline Py_ssize_t *BufferExtAccel_CacheStats(void)
{
    static Py_ssize_t stats[2];
    return stats;
}
#  define BUFFEREXT_ACCEL_COUNT(i) (BufferExtAccel_CacheStats()[i]++)
#else
#  define BUFFEREXT_ACCEL_COUNT(i) ((void)0)
#endif

#ifdef Py_LIMITED_API
/* A function slot of `type` (NULL: none), for a caller that converts it to
 * the slot's type (a conversion C defines between function pointers).
 * PyType_GetSlot gives a function as a void *; the union converts it
 * without the cast ISO C does not define (the platforms CPython runs on
 * give both the same representation). */
typedef void (*BufferExtInternal_Func)(void);
static inline BufferExtInternal_Func
BufferExtInternal_TypeFunc(PyTypeObject *type, int slot)
{
    union {
        void *data;
        BufferExtInternal_Func func;
    } value;

    value.data = PyType_GetSlot(type, slot);
    return value.func;
}
#endif

#define BUFFEREXT_ACCEL_INSIDE
#if defined(BUFFEREXT_NATIVE)
#  include "internal/native.h"
#elif defined(Py_LIMITED_API)
#  include "internal/limited.h"
#else
#  include "internal/accel.h"
#endif
#undef BUFFEREXT_ACCEL_INSIDE


/* ---- public functions ------------------------------------------------- */

#ifdef BUFFEREXT_BACKPORT_CHECK_SUPPORTS
/* PyObject_CheckBufferSupports (draft PEP): 1 if `obj` exports buffers and
 * its type declares support for every bit of `flags`, else 0.  Never raises;
 * an invalid declaration supports PyBUF_SIMPLE only.  Call it without an
 * exception set, like most of the C API. */
static inline int PyObject_CheckBufferSupports(PyObject *obj, int flags)
{
    int mask;

    if (!BufferExtAccel_CheckBuffer(obj)) {
        return 0;
    }
    if (flags == 0) {
        return 1;
    }
    mask = BufferExtAccel_Mask(Py_TYPE(obj));
    return (flags & ~mask) == 0;
}
#endif

/* BufferExt_SupportedFlags: the mask of request flags `obj` honours, with
 * the declared values 0 and -1 translated (so the result is >= 0).
 * Returns -1 with TypeError if `obj` does not export buffers, and with
 * TypeError naming the type and the value if its declaration is invalid. */
static inline int BufferExt_SupportedFlags(PyObject *obj)
{
#ifndef BUFFEREXT_NATIVE
    BufferExtAccel_TypeInfo info;
#endif

    if (!PyObject_CheckBuffer(obj)) {
        char name[BUFFEREXT_INTERNAL_NAME_SIZE];
        PyErr_Format(PyExc_TypeError,
                     "a buffer exporter is required, not '%.200s'",
                     BufferExtInternal_TypeName(Py_TYPE(obj), name,
                                                sizeof(name)));
        return -1;
    }
#ifdef BUFFEREXT_NATIVE
    /* CPython refuses an invalid declaration when it is made */
    return BufferExtNative_Mask(obj);
#else
    info = BufferExtAccel_Info(Py_TYPE(obj));
    if (info.declared == BUFFEREXT_ACCEL_INVALID_DECLARATION) {
        char name[BUFFEREXT_INTERNAL_NAME_SIZE],
             name2[BUFFEREXT_INTERNAL_NAME_SIZE];
        /* read again for the message: a lookup that fails (no memory)
         * gives none, and the refusal goes without the value */
        PyObject *value = BufferExtAccel_LookupMRO(
            Py_TYPE(obj), BUFFEREXT_SUPPORTED_FLAGS_ATTR);
        const char *type_name = BufferExtInternal_TypeName(
            Py_TYPE(obj), name, sizeof(name));
        /* its repr may fail (an int past the digit limit, a __repr__
         * that raises): then its type is named */
        PyObject *text = value != NULL ? PyObject_Repr(value) : NULL;
        if (text != NULL) {
            PyErr_Format(PyExc_TypeError,
                         "%.200s." BUFFEREXT_SUPPORTED_FLAGS_ATTR " = %U is "
                         "invalid: expected an int, -1 or a flag mask >= 0",
                         type_name, text);
            Py_DECREF(text);
        }
        else if (value != NULL) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "%.200s." BUFFEREXT_SUPPORTED_FLAGS_ATTR " (a "
                         "'%.100s', whose repr failed) is invalid: expected "
                         "an int, -1 or a flag mask >= 0", type_name,
                         BufferExtInternal_TypeName(Py_TYPE(value), name2,
                                                    sizeof(name2)));
        }
        else {
            PyErr_Format(PyExc_TypeError,
                         "%.200s." BUFFEREXT_SUPPORTED_FLAGS_ATTR " is "
                         "invalid: expected an int, -1 or a flag mask >= 0",
                         type_name);
        }
        Py_XDECREF(value);
        return -1;
    }
    return info.mask;
#endif
}

/* The destructor of an entry's capsule: the entry is the capsule's. */
static inline void BufferExtInternal_FreeEntry(PyObject *capsule)
{
    free(PyCapsule_GetPointer(capsule, BUFFEREXT_ENTRY_CAPSULE));
}

/* A new capsule of the typed entry `getbuffer_ex` of `type`, paired with
 * the type's getbuffer, or NULL with an exception. */
static inline PyObject *
BufferExtInternal_EntryCapsule(PyTypeObject *type,
                               BufferExt_GetBufferExProc getbuffer_ex)
{
    char name[BUFFEREXT_INTERNAL_NAME_SIZE];
    BufferExt_GetBufferEntry *entry;
    PyObject *capsule;

    if (getbuffer_ex == NULL || BufferExtAccel_TypeSlot(type) == NULL) {
        PyErr_Format(PyExc_ValueError,
                     "%.200s: an extended getbuffer needs %s",
                     BufferExtInternal_TypeName(type, name, sizeof(name)),
                     getbuffer_ex == NULL ? "a typed entry (not NULL)"
                                          : "the type's own getbuffer");
        return NULL;
    }
    /* the C allocator: the capsule may die in another interpreter than the
     * one that made it (a static type's dict is every interpreter's), and
     * PyMem_RawMalloc joined the limited API only in 3.13 */
    entry = (BufferExt_GetBufferEntry *)malloc(sizeof(*entry));
    if (entry == NULL) {
        return PyErr_NoMemory();
    }
    entry->version = BUFFEREXT_ABI_VERSION;
    entry->getbuffer = BufferExtAccel_TypeSlot(type);
    entry->getbuffer_ex = getbuffer_ex;
    entry->releasebuffer = (void (*)(PyObject *, Py_buffer *))
        BufferExtAccel_ReleaseSlot(type);
    capsule = PyCapsule_New(entry, BUFFEREXT_ENTRY_CAPSULE,
                            BufferExtInternal_FreeEntry);
    if (capsule == NULL) {
        free(entry);
        return NULL;
    }
    if (PyCapsule_SetContext(capsule, type) < 0) {
        Py_DECREF(capsule);
        return NULL;
    }
    return capsule;
}

/* Publish the declaration `flags` of `type` and, if `getbuffer_ex` is not
 * NULL, its typed entry (BufferExt_SetSupportedFlags and
 * BufferExt_SetExtendedGetBuffer, below).  0, or -1 with an exception. */
static inline int
BufferExtInternal_Declare(PyTypeObject *type, int flags,
                          BufferExt_GetBufferExProc getbuffer_ex,
                          int with_entry)
{
    char name[BUFFEREXT_INTERNAL_NAME_SIZE];
    PyObject *value, *capsule = NULL;
    int rc;
#ifndef Py_LIMITED_API
    PyObject *dict;
#endif

    if (flags < -1) {
        PyErr_Format(PyExc_ValueError,
                     "%.200s: supported flags must be -1 or a mask >= 0, "
                     "not %d", BufferExtInternal_TypeName(type, name,
                                                          sizeof(name)),
                     flags);
        return -1;
    }
    if (with_entry) {
        capsule = BufferExtInternal_EntryCapsule(type, getbuffer_ex);
        if (capsule == NULL) {
            return -1;
        }
    }
    value = PyLong_FromLong(flags);
    if (value == NULL) {
        Py_XDECREF(capsule);
        return -1;
    }
#ifdef Py_LIMITED_API
#  ifdef BUFFEREXT_NATIVE
    /* the limited API cannot write a type's slots once it is made */
    if (with_entry && BufferExtNative_Entry(type) != getbuffer_ex) {
        PyErr_Format(PyExc_ValueError,
                     "%.200s: with Py_LIMITED_API the typed entry and the "
                     "declaration go into the type's PyType_Spec (the slots "
                     "Py_bf_getbuffer_ex and Py_bf_supported_flags), which "
                     "CPython reads; the type attributes set here are for "
                     "extensions built in backport mode",
                     BufferExtInternal_TypeName(type, name, sizeof(name)));
        Py_DECREF(value);
        Py_XDECREF(capsule);
        return -1;
    }
#  endif
    /* No type dict in the limited API: set the attributes, which immutable
     * types refuse. */
    if (PyType_GetFlags(type) & Py_TPFLAGS_IMMUTABLETYPE) {
        PyErr_Format(PyExc_TypeError,
                     "%.200s: with Py_LIMITED_API the declaration is set "
                     "as a type attribute, which an immutable type refuses: "
                     "create the type without Py_TPFLAGS_IMMUTABLETYPE",
                     BufferExtInternal_TypeName(type, name, sizeof(name)));
        rc = -1;
    }
    else {
        rc = PyObject_SetAttrString((PyObject *)type,
                                    BUFFEREXT_SUPPORTED_FLAGS_ATTR, value);
        if (rc == 0 && capsule != NULL) {
            rc = PyObject_SetAttrString((PyObject *)type,
                                        BUFFEREXT_ENTRY_ATTR, capsule);
        }
    }
#else
    dict = BufferExtCompat_TypeGetDict(type);
    if (dict == NULL) {
        PyErr_Format(PyExc_SystemError, "%.200s: type is not ready",
                     BufferExtInternal_TypeName(type, name, sizeof(name)));
        rc = -1;
    }
    else {
#  ifdef BUFFEREXT_NATIVE
        /* the slots; the attributes below are for extensions built in
         * backport mode beside this one */
        BufferExtNative_SetSlots(type, flags, getbuffer_ex);
#  endif
        rc = PyDict_SetItemString(dict, BUFFEREXT_SUPPORTED_FLAGS_ATTR,
                                  value);
        if (rc == 0 && capsule != NULL) {
            rc = PyDict_SetItemString(dict, BUFFEREXT_ENTRY_ATTR, capsule);
        }
        Py_DECREF(dict);
        PyType_Modified(type);   /* new version tag: cached values go stale */
    }
#endif
    Py_DECREF(value);
    Py_XDECREF(capsule);
    return rc;
}

/* BufferExt_SetSupportedFlags: declare the request flags instances of `type`
 * honour (0 = the legacy flags, -1 = PyBUF_SIMPLE only, else a mask).  For
 * a type whose getbuffer writes no extension; an extended flag (such as
 * PyBUF_DEVICE) is honoured only where a typed entry serves it
 * (BufferExt_SetExtendedGetBuffer, here or in a base class).  Call it once
 * after the type is created (PyType_FromSpec / PyType_Ready).  Works for
 * static, heap and immutable types.  Returns 0, or -1 with an exception. */
static inline int BufferExt_SetSupportedFlags(PyTypeObject *type, int flags)
{
    return BufferExtInternal_Declare(type, flags, NULL, 0);
}

/* BufferExt_SetExtendedGetBuffer: declare `flags` (as above; include
 * PyBUF_DEVICE to answer device requests) and publish `getbuffer_ex`, the
 * type's typed entry (NAME##_ex of BUFFEREXT_DEFINE_GETBUFFER), paired with
 * the type's getbuffer as it is now: the entry serves instances of `type`
 * and of subclasses that keep that getbuffer.  Call it once after the type
 * is created.  Returns 0, or -1 with an exception (ValueError for a NULL
 * entry or a type without a getbuffer). */
static inline int
BufferExt_SetExtendedGetBuffer(PyTypeObject *type, int flags,
                               BufferExt_GetBufferExProc getbuffer_ex)
{
    return BufferExtInternal_Declare(type, flags, getbuffer_ex, 1);
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
BUFFEREXT_INTERNAL_COLD int
BufferExtInternal_RaiseUnsupported(PyObject *obj, int unsupported,
                                   int declared)
{
    char names[128], what[48], name[BUFFEREXT_INTERNAL_NAME_SIZE];

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
                 BufferExtInternal_TypeName(Py_TYPE(obj), name, sizeof(name)),
                 names, what);
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
BUFFEREXT_INTERNAL_COLD int
BufferExtInternal_RejectExport(PyObject *obj, Py_buffer_extended *view,
                               const char *problem)
{
    char name[BUFFEREXT_INTERNAL_NAME_SIZE];

    PyBuffer_Release(&view->view);
    BufferExtInternal_ClearExtension(view);
    PyErr_Format(PyExc_BufferError, "%.200s %s",
                 BufferExtInternal_TypeName(Py_TYPE(obj), name, sizeof(name)),
                 problem);
    return -1;
}

/* Whether the extension fields an exporter left in `view` for a request of
 * `flags` are as they must be: BufferExtInternal_ExtensionProblem(view,
 * flags) == NULL, in fewer tests. */
static inline int
BufferExtInternal_ExtensionClean(const Py_buffer_extended *view, int flags)
{
    int written = view->flags;

    if (written & ~(flags & BUFFEREXT_EXTENDED_FLAGS)) {
        return 0;
    }
    if (written & PyBUF_DEVICE) {
        return 1;
    }
    return view->ext_flags == 0 && view->device == NULL &&
           view->device_info == NULL;
}

/* BufferExtInternal_RejectExport with the problem of an unclean `view`. */
BUFFEREXT_INTERNAL_COLD int
BufferExtInternal_RejectUnclean(PyObject *obj, Py_buffer_extended *view,
                                int flags)
{
    return BufferExtInternal_RejectExport(
        obj, view, BufferExtInternal_ExtensionProblem(view, flags));
}

/* The end of every BufferExt_GetBuffer, once the exporter returned `rc`
 * for a request of `flags` made through `view`: on failure the extension
 * cleared (an exporter may have written it before failing), on success
 * checked.  0 or -1, as the request. */
BUFFEREXT_INTERNAL_HOT int
BufferExtInternal_Answered(PyObject *obj, Py_buffer_extended *view,
                           int flags, int rc)
{
    if (rc < 0) {
        BufferExtInternal_ClearExtension(view);
        return -1;
    }
    if (BufferExtInternal_ExtensionClean(view, flags)) {
        return 0;
    }
    return BufferExtInternal_RejectUnclean(obj, view, flags);
}

#ifdef BUFFEREXT_NATIVE
/* BufferExt_GetBuffer (below), native mode: CPython's typed entry point,
 * which zeroes the extension, refuses undeclared required flags, calls the
 * type's bf_getbuffer_ex for a declared extended flag and checks what the
 * exporter wrote.  Its two common cases are inline here, read from the
 * same slots and checked the same way: a type that declares nothing (every
 * exporter written before the draft: bytes, ndarray), whose getbuffer gets
 * the request without its extended flags; and an extended request every
 * bit of which (the required and the extended ones) the type declares,
 * served by its typed entry.  PyObject_GetBufferEx checks the answer after
 * the call, which therefore cannot be a tail call: its frame costs a
 * request about a quarter of a plain one (docs/performance.rst); inline,
 * the checks cost the caller a few tests in a frame it has anyway.
 * Mirrors: PyObject_GetBufferEx (cpython/patches 0001, 0005). */
BUFFEREXT_INTERNAL_HOT int
BufferExt_GetBuffer(PyObject *obj, Py_buffer_extended *view, int flags)
{
#  ifndef Py_LIMITED_API
    PyBufferProcs *procs = BufferExtNative_Procs(Py_TYPE(obj));

    if (procs != NULL && procs->bf_getbuffer != NULL) {
        int declared = procs->bf_supported_flags;
        int plain = flags & ~BUFFEREXT_EXTENDED_FLAGS;

        /* PyBUF_READ and PyBUF_WRITE, asked or left once the extended flags
         * are gone, are CPython's to answer: it refuses them asked (a
         * caller's mistake), serves them left as PyBUF_SIMPLE */
        if (declared == BUFFEREXT_SUPPORTS_LEGACY && plain != PyBUF_READ &&
            plain != PyBUF_WRITE) {
            BufferExtInternal_ClearExtension(view);
            return BufferExtInternal_Answered(
                obj, view, plain,
                procs->bf_getbuffer(obj, &view->view, plain));
        }
        if (declared > 0 && (flags & BUFFEREXT_EXTENDED_FLAGS) &&
            !(flags & (PyBUF_REQUIRED_FLAGS | BUFFEREXT_EXTENDED_FLAGS) &
              ~declared) &&
            procs->bf_getbuffer_ex != NULL) {
            BufferExtInternal_ClearExtension(view);
            return BufferExtInternal_Answered(
                obj, view, flags, procs->bf_getbuffer_ex(obj, view, flags));
        }
    }
#  endif
    return PyObject_GetBufferEx(obj, view, flags);
}
#else
/* BufferError: the type of `obj` changed (its __class__ was assigned) while
 * BufferExt_GetBuffer read what it knows of the type, which ran Python code
 * (a dict key's __eq__, a finalizer): the entry read belongs to the old
 * type, the object may no longer be its instance.  -1. */
BUFFEREXT_INTERNAL_COLD int
BufferExtInternal_RaiseRetyped(PyObject *obj)
{
    char name[BUFFEREXT_INTERNAL_NAME_SIZE];

    PyErr_Format(PyExc_BufferError,
                 "%.200s: the exporter's type changed (its __class__ was "
                 "assigned) during the buffer request",
                 BufferExtInternal_TypeName(Py_TYPE(obj), name, sizeof(name)));
    return -1;
}

/* Call the plain getbuffer of `obj` for `flags`: the caller's request
 * `asked` less the extended flags the type does not honour (`slot`: the
 * type's getbuffer as read, or NULL).  CPython 3.13+ refuses the bare
 * values PyBUF_READ and PyBUF_WRITE as a caller's mistake, and so does its
 * PyBuffer_FillInfo, which most exporters call (bytearray's getbuffer even
 * keeps an export it failed to fill).  A request that only became one of
 * them by losing an extended flag (0x10100 leaves PyBUF_INDIRECT's own
 * bit, 0x10200 a bit that requests nothing) is no mistake, and asks
 * nothing PyBUF_SIMPLE does not (the bit of INDIRECT means suboffsets,
 * which need strides): it is served as PyBUF_SIMPLE, as CPython does where
 * it implements the draft. */
static inline int
BufferExtInternal_CallPlain(PyObject *obj, Py_buffer *view, int flags,
                            int asked, BufferExtAccel_GetBufferProc slot)
{
    if (flags != asked && (flags == PyBUF_READ || flags == PyBUF_WRITE)) {
        flags = PyBUF_SIMPLE;
    }
    return BufferExtAccel_CallSlot(slot, obj, view, flags);
}

/* The whole of BufferExt_GetBuffer (below).  Where the header inlines the
 * common case (BUFFEREXT_ACCEL_FAST_GETBUFFER), this is the out-of-line
 * rest: a request that case does not cover starts over here. */
#ifdef BUFFEREXT_ACCEL_FAST_GETBUFFER
BUFFEREXT_INTERNAL_COLD int
#else
static inline int
#endif
BufferExtInternal_GetBuffer(PyObject *obj, Py_buffer_extended *view,
                            int flags)
{
    int required = flags & PyBUF_REQUIRED_FLAGS, asked = flags;

    BufferExtInternal_ClearExtension(view);
    if ((required || (flags & BUFFEREXT_EXTENDED_FLAGS)) &&
        BufferExtAccel_CheckBuffer(obj)) {
        PyTypeObject *type = Py_TYPE(obj);
        /* on a miss, the lookup may run Python code */
        BufferExtAccel_TypeInfo info = BufferExtAccel_Info(type);
        int unsupported = required & ~info.mask;

        if (Py_TYPE(obj) != type) {
            return BufferExtInternal_RaiseRetyped(obj);
        }
        if (unsupported) {
            return BufferExtInternal_RaiseUnsupported(obj, unsupported,
                                                      info.declared);
        }
        /* An extended flag goes only to a typed entry whose type declares
         * it; anything else gets the request without it, as every exporter
         * on a released CPython ignores it. */
        flags &= ~(BUFFEREXT_EXTENDED_FLAGS & ~info.mask);
        if (flags & BUFFEREXT_EXTENDED_FLAGS) {
            return BufferExtInternal_Answered(obj, view, flags,
                                              info.entry(obj, view, flags));
        }
    }
    return BufferExtInternal_Answered(
        obj, view, flags,
        BufferExtInternal_CallPlain(obj, &view->view, flags, asked, NULL));
}

/* BufferExt_GetBuffer: what the draft makes PyObject_GetBuffer do.  Zeroes
 * the extension, raises BufferError up front (without calling the exporter)
 * if `flags & PyBUF_REQUIRED_FLAGS` is not supported, passes an extended
 * flag (PyBUF_DEVICE) only to the typed entry of a type that declares it
 * (to any other exporter the request goes without it), and raises
 * BufferError (after releasing) if the exporter wrote extension fields it
 * was not asked for.  Returns 0 / -1 like PyObject_GetBuffer.  On success
 * the caller must call BufferExt_Release(view) once; on failure nothing is
 * held and the extension fields are zero. */
BUFFEREXT_INTERNAL_HOT int
BufferExt_GetBuffer(PyObject *obj, Py_buffer_extended *view, int flags)
{
#ifdef BUFFEREXT_ACCEL_FAST_GETBUFFER
    /* The common cases, inline: a request that needs nothing of the type,
     * or an exporter whose type is in the cache and supports the request,
     * called directly (its typed entry for an extended flag it declares:
     * the cache holds one only for a type whose getbuffer it extends);
     * anything else (an error to raise, a cache miss, no getbuffer) goes to
     * the whole function. */
    BufferExtAccel_TypeInfo info;
    BufferExtAccel_GetBufferProc slot;
    int asked = flags;

    info.mask = 0;              /* a request that needs nothing of the type */
    info.entry = NULL;
    if (!(flags & (PyBUF_REQUIRED_FLAGS | BUFFEREXT_EXTENDED_FLAGS)) ||
        (BufferExtAccel_InfoCached(Py_TYPE(obj), &info) &&
         !(flags & PyBUF_REQUIRED_FLAGS & ~info.mask))) {
        /* without the extended flags the type does not honour */
        flags &= ~(BUFFEREXT_EXTENDED_FLAGS & ~info.mask);
        if (flags & BUFFEREXT_EXTENDED_FLAGS) {
            BufferExtInternal_ClearExtension(view);
            return BufferExtInternal_Answered(obj, view, flags,
                                              info.entry(obj, view, flags));
        }
        slot = BufferExtAccel_BufferSlot(obj);
        if (slot != NULL) {
            BufferExtInternal_ClearExtension(view);
            return BufferExtInternal_Answered(
                obj, view, flags,
                BufferExtInternal_CallPlain(obj, &view->view, flags, asked,
                                            slot));
        }
    }
#endif
    return BufferExtInternal_GetBuffer(obj, view, flags);
}
#endif /* BUFFEREXT_NATIVE */

/* PyErr_GetRaisedException and PyErr_SetRaisedException: CPython 3.12 on,
 * the limited API's 3.12 on. */
#if defined(Py_LIMITED_API) ? Py_LIMITED_API + 0 >= 0x030C0000 \
                            : PY_VERSION_HEX >= 0x030C0000
#  define BUFFEREXT_INTERNAL_RAISED_EXCEPTION 1
#else
#  define BUFFEREXT_INTERNAL_RAISED_EXCEPTION 0
#endif

/* A releasebuffer (CPython's releasebufferproc, which the limited API
 * declares from 3.12 only). */
typedef void (*BufferExtInternal_ReleaseProc)(PyObject *, Py_buffer *);

/* 1 if `type` serves its typed entry, read without running any code (a
 * slot, a cache hit): a device view of one of its instances may go to its
 * releasebuffer.  0: BufferExtInternal_ReleaseDevice decides. */
static inline int BufferExtInternal_EntryKnown(PyTypeObject *type)
{
#if defined(BUFFEREXT_NATIVE)
    return BufferExtNative_Entry(type) != NULL;
#elif !defined(Py_LIMITED_API) && defined(BUFFEREXT_ACCEL_HAVE_CACHE)
    BufferExtAccel_TypeInfo info;
    return BufferExtAccel_InfoCached(type, &info) && info.entry != NULL;
#else
    (void)type;
    return 0;
#endif
}

/* 1 if `type` serves its typed entry (its releasebuffer is the one the
 * entry pairs with).  Never raises; may run a dict key's __eq__. */
static inline int BufferExtInternal_ServesEntry(PyTypeObject *type)
{
#if defined(BUFFEREXT_NATIVE)
    return BufferExtNative_Entry(type) != NULL;
#else
    return BufferExtAccel_Info(type).entry != NULL;
#endif
}

/* The release of a device view whose object's class does not serve a typed
 * entry (any more): the class was assigned since (`__class__`), to a
 * sibling whose releasebuffer runs a Python __release_buffer__, which would
 * be handed the device memory as a memoryview to read.  The view goes to
 * the releasebuffer of the nearest base (tp_base: the classes that carry
 * the object's layout) that serves an entry: the one the view's exporter
 * pairs with its entry.  With none (the entry's capsule hidden since), the
 * reference is dropped alone and the leaked export said as unraisable. */
BUFFEREXT_INTERNAL_COLD void
BufferExtInternal_ReleaseDevice(Py_buffer *view)
{
    PyObject *obj = view->obj;
    PyTypeObject *base = Py_TYPE(obj), *next;
    char name[BUFFEREXT_INTERNAL_NAME_SIZE];
    /* any exception pending, kept out of the way and put back (with the
     * functions of 3.12 on, which deprecate PyErr_Fetch) */
#if BUFFEREXT_INTERNAL_RAISED_EXCEPTION
    PyObject *pending = PyErr_GetRaisedException();
#else
    PyObject *exc_type, *exc_value, *exc_tb;

    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
#endif

    Py_INCREF((PyObject *)base);    /* an __eq__ may assign __bases__ */
    while (base != NULL && !BufferExtInternal_ServesEntry(base)) {
#ifdef Py_LIMITED_API
        next = (PyTypeObject *)PyType_GetSlot(base, Py_tp_base);
        PyErr_Clear();
#else
        next = base->tp_base;
#endif
        Py_XINCREF((PyObject *)next);
        Py_DECREF((PyObject *)base);
        base = next;
    }
    if (base != NULL) {
        BufferExtInternal_ReleaseProc release =
            (BufferExtInternal_ReleaseProc)BufferExtAccel_ReleaseSlot(base);
        if (release != NULL) {
            release(obj, view);         /* view->obj set, as CPython's */
        }
        Py_DECREF((PyObject *)base);
    }
    else {
        PyErr_Format(PyExc_BufferError, "a device export of a %.200s object "
                     "is not released: no class of it serves the typed "
                     "entry that made it, and its releasebuffer would hand "
                     "the device memory to Python code",
                     BufferExtInternal_TypeName(Py_TYPE(obj), name,
                                                sizeof(name)));
        PyErr_WriteUnraisable(obj);
    }
    view->obj = NULL;
    Py_DECREF(obj);
#if BUFFEREXT_INTERNAL_RAISED_EXCEPTION
    PyErr_SetRaisedException(pending);
#else
    PyErr_Restore(exc_type, exc_value, exc_tb);
#endif
}

/* BufferExt_Release: PyBuffer_Release plus clearing the extension.  Safe to
 * call twice (the second call does nothing).  A device view goes to the
 * releasebuffer its typed entry pairs with, whatever class its object has
 * now (BufferExtInternal_ReleaseDevice). */
static inline void BufferExt_Release(Py_buffer_extended *view)
{
    if (view->device != NULL && view->view.obj != NULL &&
        !BufferExtInternal_EntryKnown(Py_TYPE(view->view.obj))) {
        BufferExtInternal_ReleaseDevice(&view->view);
    }
    else {
        BufferExtAccel_CallRelease(&view->view);
    }
    BufferExtInternal_ClearExtension(view);
}

/* BufferExt_IsDevice: 1 if the exporter described non-CPU memory (it set
 * PyBUF_DEVICE in flags and a non-NULL device), else 0. */
static inline int BufferExt_IsDevice(const Py_buffer_extended *view)
{
    return (view->flags & PyBUF_DEVICE) && view->device != NULL;
}

/* ---- exporter helpers ------------------------------------------------- */

/* The refusal of BufferExt_SetDevice: device memory for a request without
 * PyBUF_DEVICE, or with it but through a plain getbuffer.  -1. */
BUFFEREXT_INTERNAL_COLD int
BufferExtInternal_RefuseDevice(PyObject *exporter, const char *device,
                               int flags)
{
    char name[BUFFEREXT_INTERNAL_NAME_SIZE];
    const char *type = BufferExtInternal_TypeName(Py_TYPE(exporter), name,
                                                  sizeof(name));

    if (flags & PyBUF_DEVICE) {
        PyErr_Format(PyExc_BufferError,
                     "%.200s: cannot export memory on device '%s' through a "
                     "plain Py_buffer: the request includes PyBUF_DEVICE, "
                     "but it came through the type's getbuffer (memoryview, "
                     "__buffer__, PickleBuffer or a consumer without "
                     "bufferext.h), which cannot describe a device; request "
                     "device memory with BufferExt_GetBuffer or "
                     "bufferext.get_buffer()", type, device);
    }
    else {
        PyErr_Format(PyExc_BufferError,
                     "%.200s: memory on device '%s' can only be exported to "
                     "consumers that request PyBUF_DEVICE (memoryview, "
                     "bytes() and numpy read CPU memory only)", type, device);
    }
    return -1;
}

/* BufferExt_SetDevice: inside an exporter's function (the IMPL of
 * BUFFEREXT_DEFINE_GETBUFFER), say where the memory is.  `ext` is the
 * extended struct IMPL received (NULL for a plain request).
 * device == NULL (CPU memory): answers a PyBUF_DEVICE request explicitly
 * (flags gets PyBUF_DEVICE, device stays NULL); does nothing otherwise.
 * device != NULL: fills device, device_info and flags if PyBUF_DEVICE was
 * requested through the typed entry (ext != NULL); otherwise raises
 * BufferError naming the exporter's type and the device, so device memory
 * never reaches a CPU-only consumer.  Call it before taking any reference
 * or counting the export.  Returns 0, or -1 with BufferError. */
static inline int BufferExt_SetDevice(Py_buffer_extended *ext,
                                      PyObject *exporter, int flags,
                                      const char *device, void *device_info)
{
    if (ext != NULL && (flags & PyBUF_DEVICE)) {
        ext->flags |= PyBUF_DEVICE;
        ext->device = device;
        ext->device_info = device_info;
        return 0;
    }
    if (device == NULL) {
        return 0;
    }
    return BufferExtInternal_RefuseDevice(exporter, device, flags);
}

#ifdef __cplusplus
}
#endif
#endif /* !Py_LIMITED_API */
#endif /* BUFFEREXT_CORE_H */
