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
 *   the mark      a consumer that passes PyBUF_DEVICE records the view it
 *                 hands over in the calling thread's slot (see
 *                 BufferExt_Extended), so an exporter tells an extended view
 *                 from a bare Py_buffer whatever path the request took,
 *                 without reading memory the path may not have initialised.
 *   PEP 688       on 3.12+, which request paths can carry an extended view:
 *                 BufferExt_SetSupportedFlags guards a type's __buffer__,
 *                 and the cache also records which getbuffer a device
 *                 request may call (docs/capi.rst, "The PEP 688 rule").
 *   limited API   with Py_LIMITED_API >= 0x030B0000 the same API through
 *                 the stable ABI only (internal/limited.h instead of the
 *                 accelerator; PEP 688 decided at run time from Py_Version;
 *                 docs/capi.rst, "Limited API").  Below 3.11: #error.
 *   native mode   a CPython that implements the draft itself (the patched
 *                 interpreter of cpython/; BUFFEREXT_NATIVE, below): the
 *                 declaration is the slot bf_supported_flags, the functions
 *                 here call CPython's, and the accelerator, its cache and
 *                 the PEP 688 guard are not compiled (internal/native.h).
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
 * headers define the type slot Py_bf_supported_flags and
 * PyBUF_EXTENDED_FLAGS, which no released CPython does (a version test
 * cannot tell: the patched 3.13 of cpython/ still says 3.13).  There the
 * header maps onto CPython: BufferExt_SetSupportedFlags writes the slot,
 * BufferExt_GetBuffer/BufferExt_Release call PyObject_GetBuffer and
 * PyBuffer_Release, which refuse undeclared required flags and check the
 * extension themselves, and an exporter trusts PyBUF_DEVICE (CPython's
 * __buffer__, memoryview._from_flags and Python __buffer__ paths never pass
 * it into a bare Py_buffer).  With Py_LIMITED_API the slot is visible only
 * to a limited version that has it, so an abi3 build for older releases
 * stays in backport mode, as it must to load there.  Define
 * BUFFEREXT_FORCE_BACKPORT to build backport mode on such a CPython (the
 * parity suite builds both and loads them into one process). */
#if !defined(BUFFEREXT_FORCE_BACKPORT) && defined(Py_bf_supported_flags) && \
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

/* PEP 688 (CPython 3.12) gave every buffer type a __buffer__ method, which
 * calls the type's getbuffer with a bare Py_buffer and whatever flags its
 * caller chose, and made a Python class with __buffer__ an exporter.  Where
 * it exists, the header keeps PyBUF_DEVICE off both paths (see
 * BufferExt_SetSupportedFlags and BufferExt_GetBuffer). */
#if (PY_VERSION_HEX >= 0x030C0000 || defined(Py_LIMITED_API)) && \
    !defined(BUFFEREXT_NATIVE)
#  define BUFFEREXT_INTERNAL_PEP688 1   /* limited API: decided at run time */
#endif

/* The docstring that marks the PEP 688 guard of __buffer__ (see
 * BufferExt_SetSupportedFlags): shared by every extension that includes
 * this header, so it never changes. */
#define BUFFEREXT_INTERNAL_GUARD_DOC                                         \
    "__buffer__($wrapper, self, flags, /)\n--\n\n"                          \
    "Return a memoryview of the buffer.  A request that includes\n"         \
    "PyBUF_DEVICE raises BufferError: a memoryview carries CPU memory\n"    \
    "only (bufferext guard, see bufferext.h)."

/* The name of `type` for messages: tp_name, or with the limited API (no
 * tp_name) "module.qualname" written into `buf` ("qualname" for builtins). */
#define BUFFEREXT_INTERNAL_NAME_SIZE 208
static inline const char *
BufferExtInternal_TypeName(PyTypeObject *type, char *buf, size_t size)
{
#ifdef Py_LIMITED_API
    PyObject *qualname = PyType_GetQualName(type);
    PyObject *module = PyObject_GetAttrString((PyObject *)type, "__module__");
    const char *q = qualname ? PyUnicode_AsUTF8AndSize(qualname, NULL) : NULL;
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
 * where CPython's is the one.  Where CPython declares it but backport mode
 * is forced, the header's takes that name in this translation unit. */
#ifndef BUFFEREXT_NATIVE
#  define BUFFEREXT_BACKPORT_CHECK_SUPPORTS 1
#  ifdef PyBUF_EXTENDED_FLAGS
#    undef PyObject_CheckBufferSupports   /* CPython's inline spelling */
#    define PyObject_CheckBufferSupports BufferExtBackport_CheckBufferSupports
#  endif
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

/* The mark of an extended view.  A request flag is no proof of the struct
 * behind it: PyBUF_DEVICE reaches a getbuffer with a bare Py_buffer
 * through any path that forwards its caller's flags (CPython's __buffer__
 * wrapper, pickle.PickleBuffer, memoryview._from_flags, an exporter that
 * forwards to another, a consumer that ignores this header).  Nor is
 * anything in the view: on those paths CPython hands over fresh memory
 * that no one initialised, whose old contents Python code can arrange.
 * So the proof travels beside the view, on the calling thread: every
 * consumer that passes PyBUF_DEVICE records the address of its view in
 * the thread's slot before it calls the exporter and puts back what was
 * there after (requests nest), and an exporter writes the extension only
 * when its `view` is the one recorded (BufferExt_Extended).  The slot is a
 * capsule named BUFFEREXT_MARK_CAPSULE in the thread state's dict, under
 * the key &PyCapsule_Type (an object every build of every extension
 * shares, in every interpreter), the view in its context; made on a
 * thread's first extended request, so no request allocates.  Part of the
 * ABI (BUFFEREXT_ABI_VERSION 3). */
#define BUFFEREXT_MARK_CAPSULE "bufferext.extended_view"

/* The calling thread's slot (borrowed), made if there is none, or NULL
 * with an exception (the key taken by something else, no memory).  Runs
 * no Python code but a first allocation's. */
static inline PyObject *BufferExtInternal_MarkSlot(void)
{
    PyObject *dict = PyThreadState_GetDict();
    PyObject *key = (PyObject *)&PyCapsule_Type, *slot;

    if (dict == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError,
                            "bufferext: the thread has no state dict");
        }
        return NULL;
    }
    slot = PyDict_GetItemWithError(dict, key);
    if (slot != NULL) {
        if (PyCapsule_IsValid(slot, BUFFEREXT_MARK_CAPSULE)) {
            return slot;
        }
        PyErr_SetString(PyExc_RuntimeError,
                        "bufferext: the thread state's dict holds something "
                        "else under the extended-view key");
        return NULL;
    }
    if (PyErr_Occurred()) {
        return NULL;
    }
    /* the pointer is a token (a capsule's may not be NULL); the view is
     * the context */
    slot = PyCapsule_New((void *)key, BUFFEREXT_MARK_CAPSULE, NULL);
    if (slot == NULL || PyDict_SetItem(dict, key, slot) < 0) {
        Py_XDECREF(slot);
        return NULL;
    }
    Py_DECREF(slot);            /* the dict holds it */
    return slot;
}

/* The calling thread's slot if something is stored under its key (borrowed;
 * the caller checks what it is), or NULL; never an exception, and nothing
 * made or allocated: outside the limited API the thread state's dict is
 * read as it is (PyThreadState_GetDict would make one; no dict, no slot).
 * Mirrors: PyThreadState.dict (Include/cpython/pystate.h, 3.9-3.15; check
 * again at 3.16).  The lookup compares the key with a stored one of the
 * same hash; only C code stores keys in that dict. */
static inline PyObject *BufferExtInternal_ExistingSlot(void)
{
#ifdef Py_LIMITED_API
    PyObject *dict = PyThreadState_GetDict(), *slot;
#else
    PyObject *dict = PyThreadState_Get()->dict, *slot;
#endif

    if (dict == NULL) {
        return NULL;
    }
    slot = PyDict_GetItemWithError(dict, (PyObject *)&PyCapsule_Type);
    if (slot == NULL && PyErr_Occurred()) {
        PyErr_Clear();          /* a lookup of a type key cannot fail */
    }
    return slot;
}

/* Whether the running interpreter implements the draft itself (the
 * patched CPython 3.13 of cpython/), asked once per process, for code
 * built in backport mode: there the flag is the proof, as in native mode,
 * since CPython passes no extended flag into a bare Py_buffer of its own;
 * exporters trust it and consumers do not mark.  Asked of 3.13 alone (the
 * patch's vehicle; a later CPython may give slot 84 another meaning):
 * PyType_GetSlot answers Py_bf_supported_flags (84) there, and raises
 * SystemError on a stock 3.13.  Never with an exception pending. */
static inline int BufferExtInternal_NativeRuntime(void)
{
#if defined(Py_LIMITED_API) || \
    (PY_VERSION_HEX >= 0x030D0000 && PY_VERSION_HEX < 0x030E0000)
    static int answer;          /* 0 not asked, 1 native, 2 not */
#  if defined(__GNUC__) || defined(__clang__)
    int known = __atomic_load_n(&answer, __ATOMIC_RELAXED);
#  else
    int known = answer;
#  endif
    if (known == 0) {
        if (PyErr_Occurred()) {
            return 0;           /* asked again next time */
        }
        known = 1;
#  ifdef Py_LIMITED_API
        if ((Py_Version >> 16) != 0x030D) {
            known = 2;          /* an abi3 build, on another CPython */
        }
        else
#  endif
        if (PyType_GetSlot(&PyBytes_Type, 84) == NULL && PyErr_Occurred()) {
            PyErr_Clear();
            known = 2;
        }
#  if defined(__GNUC__) || defined(__clang__)
        __atomic_store_n(&answer, known, __ATOMIC_RELAXED);
#  else
        answer = known;
#  endif
    }
    return known == 1;
#else
    return 0;
#endif
}

/* A consumer's mark: the slot (a strong reference while marked, NULL for a
 * request without PyBUF_DEVICE) and what it held before. */
typedef struct {
    PyObject *slot;
    void *previous;
} BufferExtInternal_Marking;

/* Record `view` in the thread's `slot`, keeping what it held in `m`. */
static inline void BufferExtInternal_Record(BufferExtInternal_Marking *m,
                                            PyObject *slot,
                                            Py_buffer_extended *view)
{
    m->slot = Py_NewRef(slot);
    m->previous = PyCapsule_GetContext(slot);
    PyCapsule_SetContext(slot, &view->view);
}

/* Consumer side: mark `view` for a request of `flags`, before calling the
 * exporter.  0, or -1 with an exception (no slot could be made). */
static inline int BufferExtInternal_SetMark(BufferExtInternal_Marking *m,
                                            Py_buffer_extended *view,
                                            int flags)
{
    PyObject *slot;

    m->slot = NULL;
    if (!(flags & PyBUF_DEVICE) || BufferExtInternal_NativeRuntime()) {
        return 0;               /* nothing to prove, or the flag proves it */
    }
    slot = BufferExtInternal_MarkSlot();
    if (slot == NULL) {
        return -1;
    }
    BufferExtInternal_Record(m, slot, view);
    return 0;
}

/* The same where the thread's slot exists already (a lookup, which makes
 * nothing): 1, or 0 with nothing marked and no exception when it does not.
 * For the header's inline path. */
static inline int BufferExtInternal_SetMarkInSlot(BufferExtInternal_Marking *m,
                                                  Py_buffer_extended *view)
{
    PyObject *slot = BufferExtInternal_ExistingSlot();

    if (slot == NULL || !PyCapsule_IsValid(slot, BUFFEREXT_MARK_CAPSULE)) {
        return 0;
    }
    BufferExtInternal_Record(m, slot, view);
    return 1;
}

/* Consumer side, after the call: the slot holds what it held before. */
static inline void BufferExtInternal_ClearMark(BufferExtInternal_Marking *m)
{
    if (m->slot != NULL) {
        PyCapsule_SetContext(m->slot, m->previous);
        Py_DECREF(m->slot);
        m->slot = NULL;
    }
}

/* Exporter side: whether `view` is the view a consumer marked on this
 * thread.  Reads nothing of the view, makes nothing.  A capsule under the
 * key whose context is this very view is the slot (no name check
 * needed). */
static inline int BufferExtInternal_Marked(const Py_buffer *view)
{
    PyObject *slot = BufferExtInternal_ExistingSlot();

    return slot != NULL && Py_IS_TYPE(slot, &PyCapsule_Type) &&
           PyCapsule_GetContext(slot) == (const void *)view;
}

/* The ABI between extensions built separately, against any release of this
 * header.  BUFFEREXT_ABI_VERSION names the layout of Py_buffer_extended and
 * the meaning of its fields; it changes (a major, incompatible change) only
 * if either ever does, never for a new extended flag (a bit in
 * BUFFEREXT_EXTENDED_FLAGS) or a new device name.  Version 2 added the mark
 * of an extended view, in view->internal; version 3 moved it beside the
 * view, into the thread's slot (above): an exporter of one version trusts
 * no PyBUF_DEVICE request from a consumer of another.  Beside it,
 * extensions share: the type attribute __buffer_supported_flags__ (its
 * values as above), the docstring that marks the PEP 688 guard of
 * __buffer__ (internal/accel.h), and the device-info layouts, versioned on their own
 * (cuda.h, ve.h: a major number for incompatible changes, a minor one for
 * fields added in the reserved space).  Nothing else (the cache, internal
 * names) crosses an extension's boundary. */
#define BUFFEREXT_ABI_VERSION 3

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

/* The declaration lookup, its per-type cache and the PEP 688 routing read
 * CPython internals; they live apart, in bufferext/internal/accel.h, with
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
    mask = BufferExtAccel_Info(Py_TYPE(obj)).mask;
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
        PyObject *value = BufferExtAccel_LookupMRO(
            Py_TYPE(obj), BUFFEREXT_SUPPORTED_FLAGS_ATTR);
        if (value != NULL) {
            char name[BUFFEREXT_INTERNAL_NAME_SIZE];
            PyErr_Format(PyExc_TypeError,
                         "%.200s." BUFFEREXT_SUPPORTED_FLAGS_ATTR " = %R is "
                         "invalid: expected an int, -1 or a flag mask >= 0",
                         BufferExtInternal_TypeName(Py_TYPE(obj), name,
                                                    sizeof(name)), value);
            Py_DECREF(value);
        }
        return -1;
    }
    return info.mask;
#endif
}

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
    char name[BUFFEREXT_INTERNAL_NAME_SIZE];
    PyObject *value;
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
#ifdef Py_LIMITED_API
    /* No type dict in the limited API: set the attribute, which immutable
     * types refuse. */
    if (PyType_GetFlags(type) & Py_TPFLAGS_IMMUTABLETYPE) {
        PyErr_Format(PyExc_TypeError,
                     "%.200s: with Py_LIMITED_API the declaration is set "
                     "as a type attribute, which an immutable type refuses: "
                     "create the type without Py_TPFLAGS_IMMUTABLETYPE",
                     BufferExtInternal_TypeName(type, name, sizeof(name)));
        return -1;
    }
    value = PyLong_FromLong(flags);
    rc = value == NULL ? -1 : PyObject_SetAttrString(
        (PyObject *)type, BUFFEREXT_SUPPORTED_FLAGS_ATTR, value);
    Py_XDECREF(value);
    return rc;
#else
    dict = BufferExtCompat_TypeGetDict(type);
    if (dict == NULL) {
        PyErr_Format(PyExc_SystemError, "%.200s: type is not ready",
                     BufferExtInternal_TypeName(type, name, sizeof(name)));
        return -1;
    }
#  ifdef BUFFEREXT_NATIVE
    /* the slot; the attribute below, which CPython reads into the slot
     * (PyType_Modified), is for extensions in backport mode beside this */
    BufferExtNative_SetSlot(type, flags);
#  endif
    value = PyLong_FromLong(flags);
    rc = value == NULL ? -1 : PyDict_SetItemString(
        dict, BUFFEREXT_SUPPORTED_FLAGS_ATTR, value);
    Py_XDECREF(value);
#  ifdef BUFFEREXT_INTERNAL_PEP688
    if (rc == 0 && type->tp_as_buffer != NULL &&
        type->tp_as_buffer->bf_getbuffer != NULL) {
        rc = BufferExtAccel_Guard(type, dict);
    }
#  endif
    Py_DECREF(dict);
    PyType_Modified(type);   /* new version tag: cached values go stale */
    return rc;
#endif
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
 * for a request of `flags` made through `view` (its mark cleared): on
 * failure the extension cleared (an exporter may have written it before
 * failing), on success checked.  0 or -1, as the request. */
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
/* BufferExt_GetBuffer (below), native mode: CPython zeroes the extension of
 * an extended request, refuses undeclared required flags and checks what
 * the exporter wrote; what it cannot see (the extension written for a
 * request without an extended flag, whose struct may be a bare Py_buffer)
 * is checked here.  No mark: on this interpreter an exporter built in
 * backport mode takes the flag for the proof too
 * (BufferExtInternal_NativeRuntime). */
BUFFEREXT_INTERNAL_HOT int
BufferExt_GetBuffer(PyObject *obj, Py_buffer_extended *view, int flags)
{
    if (!(flags & BUFFEREXT_EXTENDED_FLAGS)) {
        /* CPython zeroes the extension of an extended request only */
        BufferExtInternal_ClearExtension(view);
    }
    return BufferExtInternal_Answered(obj, view, flags,
                                      PyObject_GetBuffer(obj, &view->view,
                                                         flags));
}
#else
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
    int required = flags & PyBUF_REQUIRED_FLAGS, rc;
    BufferExtAccel_GetBufferProc slot, direct = NULL;
    BufferExtInternal_Marking mark;

    BufferExtInternal_ClearExtension(view);
    /* first, before anything of obj or its type is read: a thread's first
     * extended request makes its slot, an allocation, which may run the
     * garbage collector's finalizers */
    if (BufferExtInternal_SetMark(&mark, view, flags) < 0) {
        return -1;
    }
    /* the exporter's getbuffer, read once (NULL: not known here), and the
     * one to call instead of PyObject_GetBuffer (NULL: none) */
    slot = BufferExtAccel_BufferSlot(obj);
    if ((required || (flags & PyBUF_DEVICE)) &&
        BufferExtAccel_Exports(obj, slot)) {
        BufferExtAccel_TypeInfo info = BufferExtAccel_Info(Py_TYPE(obj));
        int unsupported = required & ~info.mask;
        if (unsupported) {
            BufferExtInternal_ClearMark(&mark);
            return BufferExtInternal_RaiseUnsupported(obj, unsupported,
                                                      info.declared);
        }
        /* An extended flag goes only to a getbuffer whose type declares
         * it (an exporter that never heard of it may forward its flags
         * into a Py_buffer of its own), as PyObject_GetBuffer does where
         * CPython implements the draft; the mask is without PyBUF_DEVICE
         * where a device request cannot reach the getbuffer with this
         * view (a Python __buffer__). */
        if ((flags & PyBUF_DEVICE) && !(info.mask & PyBUF_DEVICE)) {
            flags &= ~PyBUF_DEVICE;
            /* what is left may equal PyBUF_READ or PyBUF_WRITE (0x10100
             * leaves PyBUF_INDIRECT's own bit), which CPython 3.13+ takes
             * for a bad argument: it goes to the getbuffer itself, as
             * where CPython implements the draft */
            if (flags == PyBUF_READ || flags == PyBUF_WRITE) {
                direct = BufferExtAccel_Slot(obj, &info, slot);
            }
        }
#ifdef BUFFEREXT_INTERNAL_PEP688
        /* ... and to the getbuffer that gets this view */
        if ((flags & PyBUF_DEVICE) &&
            info.device_getbuffer != BufferExtAccel_Slot(obj, &info, slot)) {
            direct = info.device_getbuffer;
        }
#endif
    }
    rc = direct != NULL ? direct(obj, &view->view, flags)
                        : BufferExtAccel_CallSlot(slot, obj, &view->view,
                                                  flags);
    BufferExtInternal_ClearMark(&mark);
    return BufferExtInternal_Answered(obj, view, flags, rc);
}

/* BufferExt_GetBuffer: what the draft makes PyObject_GetBuffer do.  Zeroes
 * the extension, raises BufferError up front (without calling the exporter)
 * if `flags & PyBUF_REQUIRED_FLAGS` is not supported, calls the exporter,
 * and raises BufferError (after releasing) if the exporter wrote extension
 * fields it was not asked for.  Returns 0 / -1 like PyObject_GetBuffer.
 * On success the caller must call BufferExt_Release(view) once; on failure
 * nothing is held and the extension fields are zero. */
BUFFEREXT_INTERNAL_HOT int
BufferExt_GetBuffer(PyObject *obj, Py_buffer_extended *view, int flags)
{
#ifdef BUFFEREXT_ACCEL_FAST_GETBUFFER
    /* The common case, inline: an exporter whose type is in the cache and
     * supports the request, its getbuffer called directly; anything else
     * (an error to raise, a cache miss, PEP 688 routing, no getbuffer, a
     * device request on a thread without its slot yet) goes to the whole
     * function. */
    BufferExtAccel_GetBufferProc slot = BufferExtAccel_BufferSlot(obj);
    BufferExtAccel_TypeInfo info;
    BufferExtInternal_Marking mark = {NULL, NULL};
    int general = slot == NULL;

    if (flags & (PyBUF_REQUIRED_FLAGS | PyBUF_DEVICE)) {
        general = general || !BufferExtAccel_InfoCached(Py_TYPE(obj), &info);
        if (!general) {
            /* an undeclared extended flag is not passed on */
            flags &= ~(PyBUF_DEVICE & ~info.mask);
            general = (flags & PyBUF_REQUIRED_FLAGS & ~info.mask)
#  ifdef BUFFEREXT_INTERNAL_PEP688
                      || ((flags & PyBUF_DEVICE) &&
                          info.device_getbuffer != slot)
#  endif
                ;
        }
        /* a device request passed on is marked in the thread's slot, if
         * it has one: a lookup, nothing allocated, nothing decided above
         * undone (making the slot is the whole function's first step) */
        general = general || ((flags & PyBUF_DEVICE) &&
                              !BufferExtInternal_NativeRuntime() &&
                              !BufferExtInternal_SetMarkInSlot(&mark, view));
    }
#  if PY_VERSION_HEX >= 0x030C0000
    else {
        general = general || flags == PyBUF_READ || flags == PyBUF_WRITE;
    }
#  endif
    if (!general) {
        int rc;

        BufferExtInternal_ClearExtension(view);
        rc = slot(obj, &view->view, flags);
        BufferExtInternal_ClearMark(&mark);
        return BufferExtInternal_Answered(obj, view, flags, rc);
    }
#endif
    return BufferExtInternal_GetBuffer(obj, view, flags);
}
#endif /* BUFFEREXT_NATIVE */

/* BufferExt_Release: PyBuffer_Release plus clearing the extension.  Safe to
 * call twice (the second call does nothing). */
static inline void BufferExt_Release(Py_buffer_extended *view)
{
    BufferExtAccel_CallRelease(&view->view);
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
 * `view`, or NULL when the consumer did not request PyBUF_DEVICE through an
 * extended view (then the memory after the Py_buffer is not the consumer's
 * to write, and the request is served as if PyBUF_DEVICE were absent).  The
 * proof is the consumer's mark in the thread's slot (see
 * BUFFEREXT_MARK_CAPSULE), not anything in the view, which on some paths
 * nobody initialised; it holds for the whole getbuffer call.  Call it on
 * entry, before reading the exporter's own state: its lookup compares
 * keys (and with Py_LIMITED_API a thread's first one allocates). */
static inline Py_buffer_extended *BufferExt_Extended(Py_buffer *view,
                                                     int flags)
{
#ifdef BUFFEREXT_NATIVE
    /* CPython passes PyBUF_DEVICE into no bare Py_buffer of its own: the
     * flag is the proof, as the draft says */
    return (flags & PyBUF_DEVICE) ? (Py_buffer_extended *)view : NULL;
#else
    return (flags & PyBUF_DEVICE) && (BufferExtInternal_NativeRuntime() ||
                                      BufferExtInternal_Marked(view))
               ? (Py_buffer_extended *)view : NULL;
#endif
}

/* The refusal of BufferExt_SetDevice: device memory for a request without
 * PyBUF_DEVICE, or with it but through a view not marked as extended.  -1. */
BUFFEREXT_INTERNAL_COLD int
BufferExtInternal_RefuseDevice(PyObject *exporter, const char *device,
                               int flags)
{
    char name[BUFFEREXT_INTERNAL_NAME_SIZE];
    const char *type = BufferExtInternal_TypeName(Py_TYPE(exporter), name,
                                                  sizeof(name));

    if (flags & PyBUF_DEVICE) {
        PyErr_Format(PyExc_BufferError,
                     "%.200s: cannot export memory on device '%s': the "
                     "request includes PyBUF_DEVICE, but its view is a plain "
                     "Py_buffer, not one marked as extended (request device "
                     "memory with BufferExt_GetBuffer or "
                     "bufferext.get_buffer(); an exporter calls "
                     "BufferExt_SetDevice before it fills the view)",
                     type, device);
    }
    else {
        PyErr_Format(PyExc_BufferError,
                     "%.200s: memory on device '%s' can only be exported to "
                     "consumers that request PyBUF_DEVICE (memoryview, "
                     "bytes() and numpy read CPU memory only)", type, device);
    }
    return -1;
}

/* BufferExt_SetDevice: inside a getbuffer function, say where the memory is.
 * device == NULL (CPU memory): answers a PyBUF_DEVICE request explicitly
 * (flags gets PyBUF_DEVICE, device stays NULL); does nothing otherwise.
 * device != NULL: fills device, device_info and flags if PyBUF_DEVICE was
 * requested through an extended view (BufferExt_Extended); otherwise
 * raises BufferError naming the exporter's type and the device, so device
 * memory never reaches a CPU-only consumer.
 * Call it first, before reading the exporter's own state (the mark's
 * lookup may compare keys, and with Py_LIMITED_API a thread's first one
 * allocates) and before taking any reference or counting the export.
 * Returns 0, or -1 with BufferError.  BufferExtInternal_SetDeviceOn is the
 * same for an `ext` that BufferExt_Extended gave on entry. */
static inline int BufferExtInternal_SetDeviceOn(Py_buffer_extended *ext,
                                                PyObject *exporter, int flags,
                                                const char *device,
                                                void *device_info)
{
    if (ext != NULL) {
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

static inline int BufferExt_SetDevice(PyObject *exporter, Py_buffer *view,
                                      int flags, const char *device,
                                      void *device_info)
{
    return BufferExtInternal_SetDeviceOn(BufferExt_Extended(view, flags),
                                         exporter, flags, device,
                                         device_info);
}

#ifdef __cplusplus
}
#endif
#endif /* !Py_LIMITED_API */
#endif /* BUFFEREXT_CORE_H */
