/* bufferext/internal/native.h -- what bufferext/core.h uses in place of the
 * accelerator (internal/accel.h) when the running CPython implements the
 * draft itself (BUFFEREXT_NATIVE): there is nothing to cache, route or
 * guard, because the declaration is a slot CPython reads and CPython keeps
 * PyBUF_DEVICE off every path that would meet a bare Py_buffer.  Internal:
 * included by core.h only; every name here may change in any release.
 *
 * It reads of CPython: the slot through PyType_GetSlot (the limited API
 * too), and, without Py_LIMITED_API, writes bf_supported_flags of a type
 * that owns PyBufferProcs with the field (Py_TPFLAGS_HAVE_BF_SUPPORTED_FLAGS).
 * Mirrors: cpython/patches (the draft as implemented there); re-check when a
 * CPython release implements it.
 */
#ifndef BUFFEREXT_INTERNAL_NATIVE_H
#define BUFFEREXT_INTERNAL_NATIVE_H
#ifndef BUFFEREXT_ACCEL_INSIDE
#  error "include <bufferext.h>, not <bufferext/internal/native.h>"
#endif

static inline void BufferExtAccel_CallRelease(Py_buffer *view)
{
    PyBuffer_Release(view);
}

/* The request flags `obj` (an exporter) honours: its type's declaration
 * translated (0: legacy, -1: none), less the extended flags CPython says it
 * cannot serve (a getbuffer that runs a Python __buffer__). */
static inline int BufferExtNative_Mask(PyObject *obj)
{
    int declared = (int)(intptr_t)PyType_GetSlot(Py_TYPE(obj),
                                                 Py_bf_supported_flags);
    int mask = declared == BUFFEREXT_SUPPORTS_LEGACY
                   ? BUFFEREXT_LEGACY_FLAGS
                   : (declared < 0 ? 0 : declared);

    if ((mask & BUFFEREXT_EXTENDED_FLAGS) &&
        !PyObject_CheckBufferSupports(obj, mask & BUFFEREXT_EXTENDED_FLAGS)) {
        mask &= ~BUFFEREXT_EXTENDED_FLAGS;
    }
    return mask;
}

#ifndef Py_LIMITED_API
/* Declare `flags` in the slot of `type`, where the type owns PyBufferProcs
 * that have the field: a static type that took its base's procs shares its
 * base's declaration, which is not this type's to change.  Mirrors:
 * buffer_procs_owned (cpython/patches, Objects/typeobject.c). */
static inline void BufferExtNative_SetSlot(PyTypeObject *type, int flags)
{
    PyBufferProcs *procs = type->tp_as_buffer;
    int owned;

    if (procs == NULL ||
        !(type->tp_flags & Py_TPFLAGS_HAVE_BF_SUPPORTED_FLAGS)) {
        return;
    }
    owned = (type->tp_flags & Py_TPFLAGS_HEAPTYPE)
                ? procs == &((PyHeapTypeObject *)type)->as_buffer
                : type->tp_base == NULL ||
                      procs != type->tp_base->tp_as_buffer;
    if (owned) {
        procs->bf_supported_flags = flags;
    }
}
#endif

#endif /* BUFFEREXT_INTERNAL_NATIVE_H */
