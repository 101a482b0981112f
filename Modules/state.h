/* state.h -- the module state and how to reach it from any object or
 * type, our types' registration, the own-getbuffer registry, argument
 * parsing every function shares, and releases that keep a pending
 * exception (state.c). */
#ifndef BUFFEREXT_MODULES_STATE_H
#define BUFFEREXT_MODULES_STATE_H
#include "parts.h"

/* Module state.  Types are heap types made from specs. */
struct bufferext_state {
    PyTypeObject *BufferView_Type;
    PyTypeObject *CPUBuffer_Type;
    PyTypeObject *CUDABuffer_Type;
    PyTypeObject *VEBuffer_Type;
    PyTypeObject *BufferAdapter_Type;
    PyTypeObject *CUDADeviceInfo_Type;
    PyTypeObject *VEDeviceInfo_Type;
    PyTypeObject *OpaqueDeviceInfo_Type;
    PyTypeObject *FastMethod_Type;      /* fastmethod.c */
    PyTypeObject *FastBound_Type;
    PyObject *DeviceUnavailableError;
    PyObject *resolve_dtype;   /* bufferext._dtypes.resolve, fetched lazily */
    PyObject *dtype_answers;   /* its answers by dtype spelled as a str (export.c) */
    PyObject *str_float64;     /* "float64", the producers' default dtype */
    PyObject *as_buffer_steps; /* the functions of _bridges._STEPS, lazily */
    int as_buffer_in_place;    /* its first is our pass-through (adapter.c) */
    PyObject *cpu_types;       /* bufferext._bridges._CPU_TYPES (a tuple) */
    PyObject *str_isbuiltin;   /* "isbuiltin" and "hasobject", interned */
    PyObject *str_hasobject;   /* (adapter.c) */
    PyObject *str_dlpack;      /* "__dlpack__", interned (adapter.c) */
};

/* The module's definition, for bufferext_state_from_type (module.c, before
 * the files' inits). */
void bufferext_state_set_def(PyModuleDef *def);

/* The state of the module object (inline: every module function reads
 * it first). */
static inline bufferext_state *
bufferext_get_state(PyObject *module)
{
    return (bufferext_state *)PyModule_GetState(module);
}
/* The state of the module that defined `type` (or a base of it); NULL with
 * TypeError for a type that is not ours. */
bufferext_state *bufferext_state_from_type(PyTypeObject *type);

/* Add `value` to `module` as `name`; the caller keeps its reference
 * (PyModule_AddObjectRef, which 3.9 lacks).  0 or -1 with an exception. */
int bufferext_add_object(PyObject *module, const char *name, PyObject *value);

/* Make a heap type of `module` from `spec`, store it in *slot, declare its
 * supported request flags and publish its typed entry `getbuffer_ex`,
 * register the entry (with `layout`, the offset of the layout its exports
 * point view->internal at) and add the type to the module under the last
 * part of spec->name.  0 or -1 with an exception. */
int bufferext_add_type(PyObject *module, PyType_Spec *spec,
                       int supported_flags,
                       BufferExt_GetBufferExProc getbuffer_ex,
                       Py_ssize_t layout, PyTypeObject **slot);

/* Our own types' getbuffer functions and typed entries (process
 * constants, recorded at init; the registered pair is returned).
 * bufferext_own_entry finds the one of the bufferext type `obj` is an
 * instance of (its type or a base): the only exports that carry our layout
 * in view->internal (a Python subclass may override __buffer__, and then
 * its getbuffer is CPython's generic one).  NULL with TypeError if `obj`
 * is not one of ours. */
const BufferExt_GetBufferEntry *
bufferext_own_register(getbufferproc getbuffer,
                       BufferExt_GetBufferExProc getbuffer_ex,
                       Py_ssize_t layout);
const BufferExt_GetBufferEntry *bufferext_own_entry(PyObject *obj);
/* Whether `view` is an export our own code made of `exporter`: its type's
 * getbuffer is one of ours, and the view is of `exporter` and points at
 * its layout.  The type's slot is read after the call, and a Python
 * __buffer__ may have deleted itself meanwhile (its slot then ours again):
 * CPython's slot for it stores a wrapper in view->obj (3.12-3.15), and the
 * layout test holds should one store the object itself.  Such an export
 * needs no gate (gate.c). */
int bufferext_own_export(PyObject *exporter, const Py_buffer *view);
/* CPUBuffer's entry, registered by cpubuffer.c: a type whose getbuffer is
 * its `getbuffer` is CPUBuffer or a subclass that keeps its export, whose
 * layout dlpack.c may read directly. */
extern const BufferExt_GetBufferEntry *bufferext_cpubuffer_entry;

/* Parse (obj[, flags]) with `flags` also accepted by keyword: a Python int
 * that fits a C int.  0 or -1 with TypeError/OverflowError naming `fname`. */
int bufferext_parse_obj_flags(const char *fname, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames,
                              PyObject **obj, int *flags);

/* PyBuffer_Release of an export of a foreign exporter while an exception is
 * set: its releasebuffer may run Python code (a __release_buffer__), which
 * must not run with an exception pending; the exception is kept. */
static inline void
bufferext_release_raised(Py_buffer *view)
{
    PyObject *type, *value, *tb;

    PyErr_Fetch(&type, &value, &tb);
    PyBuffer_Release(view);
    PyErr_Restore(type, value, tb);
}

/* The same for an extended view (BufferExt_Release). */
static inline void
bufferext_release_ext_raised(Py_buffer_extended *view)
{
    PyObject *type, *value, *tb;

    PyErr_Fetch(&type, &value, &tb);
    BufferExt_Release(view);
    PyErr_Restore(type, value, tb);
}

/* The exporter types are immutable, as CPython's own types are (3.10+):
 * no attribute of theirs changes after module init, and from 3.12 an
 * immutable type's version tag is one of the process, which the header's
 * cache may share between interpreters (internal/accel.h).  3.9 has no
 * such flag, and one counter of tags for the whole process. */
#ifndef Py_TPFLAGS_IMMUTABLETYPE
#  define Py_TPFLAGS_IMMUTABLETYPE 0
#endif
#define BUFFEREXT_TYPE_FLAGS (Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |    \
                              Py_TPFLAGS_IMMUTABLETYPE)

/* Types only bufferext makes (BufferView, BufferAdapter): the flag, and on
 * 3.9, which lacks it, no tp_new (Type() -> TypeError). */
#ifndef Py_TPFLAGS_DISALLOW_INSTANTIATION
#  define Py_TPFLAGS_DISALLOW_INSTANTIATION 0
#endif
static inline void
bufferext_disallow_instantiation(PyTypeObject *type)
{
#if PY_VERSION_HEX < 0x030A0000
    type->tp_new = NULL;
#else
    (void)type;
#endif
}

#endif
