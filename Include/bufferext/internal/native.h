/* bufferext/internal/native.h -- what bufferext/core.h uses in place of the
 * accelerator (internal/accel.h) when the running CPython implements the
 * draft itself (BUFFEREXT_NATIVE): the declaration is the slot
 * bf_supported_flags, the typed entry the slot bf_getbuffer_ex, and
 * PyObject_GetBufferEx the extended request, so there is nothing to look
 * up, cache or guard.  Internal: included by core.h only; every name here
 * may change in any release.
 *
 * It reads of CPython, without Py_LIMITED_API: tp_as_buffer's
 * bf_getbuffer, bf_getbuffer_ex and bf_supported_flags, where tp_flags has
 * Py_TPFLAGS_HAVE_EXTENDED_BUFFER (the 3.13 vehicle's bit: a static type
 * compiled against stock headers has procs without the fields), to answer
 * PyObject_CheckBufferSupports inline (CPython's is a call); and it writes
 * the two fields of a type that owns its procs.  With Py_LIMITED_API
 * (3.16): PyType_GetSlot for the getbuffer and the entry, and CPython's
 * PyObject_CheckBufferSupports; a type's declaration cannot be written
 * after it is created there, so it comes from its PyType_Spec
 * (Py_bf_supported_flags, Py_bf_getbuffer_ex).
 * Mirrors: buffer_supported_mask and PyObject_CheckBufferSupports
 * (cpython/patches 0001 and 0005, Objects/abstract.c).  Re-check when a
 * CPython release implements the draft.
 */
#ifndef BUFFEREXT_INTERNAL_NATIVE_H
#define BUFFEREXT_INTERNAL_NATIVE_H
#ifndef BUFFEREXT_ACCEL_INSIDE
#  error "include <bufferext.h>, not <bufferext/internal/native.h>"
#endif

typedef int (*BufferExtAccel_GetBufferProc)(PyObject *, Py_buffer *, int);

static inline void BufferExtAccel_CallRelease(Py_buffer *view)
{
    PyBuffer_Release(view);
}

#ifdef Py_LIMITED_API

/* The getbuffer of `type` (NULL: none). */
static inline BufferExtAccel_GetBufferProc
BufferExtAccel_TypeSlot(PyTypeObject *type)
{
    return (BufferExtAccel_GetBufferProc)BufferExtInternal_TypeFunc(
        type, Py_bf_getbuffer);
}

/* The typed entry of `type` (NULL: none). */
static inline BufferExt_GetBufferExProc BufferExtNative_Entry(PyTypeObject *type)
{
    return (BufferExt_GetBufferExProc)BufferExtInternal_TypeFunc(
        type, Py_bf_getbuffer_ex);
}

/* The releasebuffer of `type` (NULL: none). */
static inline BufferExtInternal_Func
BufferExtAccel_ReleaseSlot(PyTypeObject *type)
{
    return BufferExtInternal_TypeFunc(type, Py_bf_releasebuffer);
}

/* The request flags `obj` (an exporter) honours.  The limited API reads no
 * declaration (CPython gives no getter of an int slot): each request bit
 * is asked of CPython. */
static inline int BufferExtNative_Mask(PyObject *obj)
{
    int bit, mask = 0;

    for (bit = 0; bit < 31; bit++) {
        if (PyObject_CheckBufferSupports(obj, 1 << bit)) {
            mask |= 1 << bit;
        }
    }
    return mask;
}

#else /* !Py_LIMITED_API */

/* The procs of `type` where they have the fields of extended requests,
 * else NULL. */
static inline PyBufferProcs *BufferExtNative_Procs(PyTypeObject *type)
{
#  ifdef Py_TPFLAGS_HAVE_EXTENDED_BUFFER
    if (!(type->tp_flags & Py_TPFLAGS_HAVE_EXTENDED_BUFFER)) {
        return NULL;
    }
#  endif
    return type->tp_as_buffer;
}

static inline BufferExtAccel_GetBufferProc
BufferExtAccel_TypeSlot(PyTypeObject *type)
{
    PyBufferProcs *procs = type->tp_as_buffer;
    return procs != NULL ? procs->bf_getbuffer : NULL;
}

static inline BufferExt_GetBufferExProc BufferExtNative_Entry(PyTypeObject *type)
{
    PyBufferProcs *procs = BufferExtNative_Procs(type);
    return procs != NULL ? procs->bf_getbuffer_ex : NULL;
}

static inline releasebufferproc BufferExtAccel_ReleaseSlot(PyTypeObject *type)
{
    PyBufferProcs *procs = type->tp_as_buffer;
    return procs != NULL ? procs->bf_releasebuffer : NULL;
}

/* The declaration of `type` as written (0: none). */
static inline int BufferExtNative_Declared(PyTypeObject *type)
{
    PyBufferProcs *procs = BufferExtNative_Procs(type);
    return procs != NULL ? procs->bf_supported_flags : 0;
}

/* The request flags instances of `type` honour: the declaration translated
 * (0: legacy, negative: none), the extended flags only with an entry. */
static inline int BufferExtNative_TypeMask(PyTypeObject *type)
{
    PyBufferProcs *procs = BufferExtNative_Procs(type);
    int declared = BufferExtNative_Declared(type), mask;

    mask = declared == BUFFEREXT_SUPPORTS_LEGACY
               ? BUFFEREXT_LEGACY_FLAGS
               : (declared < 0 ? 0 : declared);
    if (procs == NULL || procs->bf_getbuffer_ex == NULL) {
        mask &= ~BUFFEREXT_EXTENDED_FLAGS;
    }
    return mask;
}

static inline int BufferExtNative_Mask(PyObject *obj)
{
    return BufferExtNative_TypeMask(Py_TYPE(obj));
}

/* PyObject_CheckBufferSupports, read inline: a query is a few loads from
 * the type, where CPython's is a call. */
static inline int BufferExtNative_CheckBufferSupports(PyObject *obj, int flags)
{
    PyBufferProcs *procs = Py_TYPE(obj)->tp_as_buffer;

    if (procs == NULL || procs->bf_getbuffer == NULL) {
        return 0;
    }
    return (flags & ~BufferExtNative_TypeMask(Py_TYPE(obj))) == 0;
}
#  define PyObject_CheckBufferSupports BufferExtNative_CheckBufferSupports

/* Write the declaration `flags` and, if not NULL, the typed entry
 * `getbuffer_ex` into the slots of `type`, where the type owns procs that
 * have the fields: a static type that took its base's procs shares its
 * base's declaration, which is not this type's to change.  Subclasses made
 * before inherited the old values (declare right after creating the
 * type).  Mirrors: inherit_slots (cpython/patches 0001). */
static inline void
BufferExtNative_SetSlots(PyTypeObject *type, int flags,
                         BufferExt_GetBufferExProc getbuffer_ex)
{
    PyBufferProcs *procs = BufferExtNative_Procs(type);
    int owned;

    if (procs == NULL) {
        return;
    }
    owned = (type->tp_flags & Py_TPFLAGS_HEAPTYPE)
                ? procs == &((PyHeapTypeObject *)type)->as_buffer
                : type->tp_base == NULL ||
                      procs != type->tp_base->tp_as_buffer;
    if (owned) {
        procs->bf_supported_flags = flags;
        if (getbuffer_ex != NULL) {
            procs->bf_getbuffer_ex = getbuffer_ex;
        }
    }
}
#endif /* Py_LIMITED_API */

#endif /* BUFFEREXT_INTERNAL_NATIVE_H */
