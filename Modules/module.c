/* module.c -- the _bufferext module assembled: its definition, the init
 * of every file (parts.h lists them), traverse and clear of its state, and
 * the module-level functions check_buffer_supports(), supported_flags(),
 * _device_of() and _device_libraries().  Nothing calls back into this file. */
#include "cuda_driver.h"
#include "dlpack.h"
#include "exports.h"
#include "fastmethod.h"
#include "state.h"
#include "ve_driver.h"
#include "view.h"

static struct PyModuleDef bufferext_module;

/* The value of an int (or int subclass, such as a BufferFlags member) of at
 * most one digit, read without a call; 0 when `obj` is something else, to
 * take the general path.  Flag masks always fit one digit (>= 2**30). */
static inline int
small_int_value(PyObject *obj, long *out)
{
    if (!PyLong_Check(obj)) {
        return 0;
    }
#if PY_VERSION_HEX >= 0x030C0000
    if (!PyUnstable_Long_IsCompact((PyLongObject *)obj)) {
        return 0;
    }
    *out = (long)PyUnstable_Long_CompactValue((PyLongObject *)obj);
#else
    {
        Py_ssize_t size = Py_SIZE(obj);
        long digit0;
        if (size < -1 || size > 1) {
            return 0;
        }
        /* a zero may have no digit allocated */
        digit0 = size == 0 ? 0 : (long)((PyLongObject *)obj)->ob_digit[0];
        *out = size < 0 ? -digit0 : digit0;
    }
#endif
    return 1;
}

static PyObject *
check_buffer_supports(PyObject *module, PyObject *const *args,
                      Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *obj;
    int flags = 0;
    long value;
    (void)module;

    if (nargs == 2 && kwnames == NULL && small_int_value(args[1], &value) &&
        value >= INT_MIN && value <= INT_MAX) {
        /* fast path: check_buffer_supports(obj, int) */
        return Py_NewRef(PyObject_CheckBufferSupports(args[0], (int)value)
                             ? Py_True : Py_False);
    }
    if (bufferext_parse_obj_flags("check_buffer_supports", args, nargs,
                                  kwnames, &obj, &flags) < 0) {
        return NULL;
    }
    return PyBool_FromLong(PyObject_CheckBufferSupports(obj, flags));
}

static PyObject *
supported_flags(PyObject *module, PyObject *obj)
{
    int mask = BufferExt_SupportedFlags(obj);
    (void)module;
    if (mask < 0) {
        bufferext_hint_as_buffer("supported_flags", obj);
        return NULL;
    }
    return PyLong_FromLong(mask);
}

/* The typed entry BufferExt_GetBuffer trusts for instances of `type`
 * (NULL: none), whatever the type declares.  May run Python code (the
 * lookup's). */
static BufferExt_GetBufferExProc
typed_entry(PyTypeObject *type)
{
#ifdef BUFFEREXT_NATIVE
    return BufferExtNative_Entry(type);
#else
    int failed = 0;

    return BufferExtAccel_ReadEntry(type, &failed);
#endif
}

/* 1 if cls is a class, else 0 with TypeError naming `function`. */
static int
is_class(PyObject *cls, const char *function)
{
    if (!PyType_Check(cls)) {
        PyErr_Format(PyExc_TypeError, "%s: a class is required, not "
                     "'%.200s'", function, Py_TYPE(cls)->tp_name);
        return 0;
    }
    return 1;
}

/* _has_typed_entry(cls): whether extended requests to instances of the
 * class cls can reach a typed entry (declared or not): for the checker. */
static PyObject *
has_typed_entry(PyObject *module, PyObject *cls)
{
    (void)module;
    if (!is_class(cls, "_has_typed_entry")) {
        return NULL;
    }
    return PyBool_FromLong(typed_entry((PyTypeObject *)cls) != NULL);
}

/* _native_declaration(cls): the declaration of the class cls where the
 * interpreter implements the draft (its slot bf_supported_flags, 0 where it
 * says nothing), None in backport mode (where it is the type attribute):
 * for the checker. */
static PyObject *
native_declaration(PyObject *module, PyObject *cls)
{
    (void)module;
    if (!is_class(cls, "_native_declaration")) {
        return NULL;
    }
#ifdef BUFFEREXT_NATIVE
    return PyLong_FromLong(BufferExtNative_Declared((PyTypeObject *)cls));
#else
    Py_RETURN_NONE;
#endif
}

/* _device_of(obj): where the memory of obj's getbuffer is, asked directly
 * (its typed entry called with FULL_RO | DEVICE whatever its type declares,
 * or, without one, its plain getbuffer): the device name, or None for CPU
 * memory.  For the checker: BufferExt_GetBuffer passes PyBUF_DEVICE only to
 * the entries of types that declare it, so an exporter of device memory
 * that does not is refused by every consumer, and only this call shows
 * why. */
static PyObject *
device_of(PyObject *module, PyObject *obj)
{
    PyTypeObject *type = Py_TYPE(obj);
    Py_buffer_extended ext;
    BufferExt_GetBufferExProc entry;
    const int flags = PyBUF_FULL_RO | PyBUF_DEVICE;
    PyObject *result;
    int rc;
    (void)module;

    if (type->tp_as_buffer == NULL || type->tp_as_buffer->bf_getbuffer == NULL) {
        PyErr_Format(PyExc_TypeError, "a buffer exporter is required, not "
                     "'%.200s'", type->tp_name);
        return NULL;
    }
    entry = typed_entry(type);
#ifndef BUFFEREXT_NATIVE
    if (Py_TYPE(obj) != type) {         /* the lookup ran Python code */
        BufferExtInternal_RaiseRetyped(obj);
        return NULL;
    }
#endif
    BufferExtInternal_ClearExtension(&ext);
    rc = entry != NULL ? entry(obj, &ext, flags)
                       : type->tp_as_buffer->bf_getbuffer(obj, &ext.view,
                                                          flags);
    if (rc < 0) {
        BufferExtInternal_ClearExtension(&ext);
        return NULL;
    }
    result = BufferExt_IsDevice(&ext) ? PyUnicode_FromString(ext.device)
                                      : Py_NewRef(Py_None);
    BufferExt_Release(&ext);
    return result;
}

/* _exports_buffers(cls): whether the instances of the class cls export
 * buffers (it has a buffer slot), asked of the class alone: for the
 * checker's report of a class, which makes no instance. */
static PyObject *
exports_buffers(PyObject *module, PyObject *cls)
{
    PyBufferProcs *procs;
    (void)module;

    if (!is_class(cls, "_exports_buffers")) {
        return NULL;
    }
    procs = ((PyTypeObject *)cls)->tp_as_buffer;
    return PyBool_FromLong(procs != NULL && procs->bf_getbuffer != NULL);
}

static PyObject *
device_libraries(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return Py_BuildValue("[NN]", bufferext_cuda_status(),
                         bufferext_ve_status());
}

/* get_buffer's default, FULL_RO | DEVICE, spelled in its text signature
 * so that inspect.signature() reads back that very value: from 3.10 on,
 * inspect folds `|` between names (a BufferFlags member, whose repr names
 * the flags); 3.9's parser takes only single names and literals, so there
 * it is the number, and the docstring names the flags. */
#if (PyBUF_FULL_RO | PyBUF_DEVICE) != 0x1011C
#  error "get_buffer's text signature spells FULL_RO | DEVICE as 0x1011C"
#endif
#if PY_VERSION_HEX >= 0x030A0000
#  define GET_BUFFER_DEFAULT_FLAGS \
       "bufferext.BufferFlags.FULL_RO|bufferext.BufferFlags.DEVICE"
#else
#  define GET_BUFFER_DEFAULT_FLAGS "0x1011C"
#endif

static PyMethodDef module_methods[] = {
    {"check_buffer_supports", (PyCFunction)(void (*)(void))check_buffer_supports,
     METH_FASTCALL | METH_KEYWORDS,
     "check_buffer_supports($module, obj, /, flags=0)\n--\n\n"
     "True if obj exports buffers and declares support for every request\n"
     "flag in flags.  Supported means honoured: a request with those flags\n"
     "is served or properly refused (a WRITABLE request of read-only memory,\n"
     "a contiguity the memory does not have), not that it will succeed.\n"
     "Never raises for any obj."},
    {"supported_flags", supported_flags, METH_O,
     "supported_flags($module, obj, /)\n--\n\n"
     "The mask of request flags obj honours (declared 0 and -1 translated)."},
    {"get_buffer", (PyCFunction)(void (*)(void))bufferext_get_buffer,
     METH_FASTCALL | METH_KEYWORDS,
     "get_buffer($module, obj, /, flags=" GET_BUFFER_DEFAULT_FLAGS ")\n--\n\n"
     "Acquire an extended buffer of obj as a BufferView.\n\n"
     "flags defaults to BufferFlags.FULL_RO | BufferFlags.DEVICE (0x1011C):\n"
     "any layout, read-only, CPU or device memory.  BufferError when obj\n"
     "cannot honour the request."},
    {"_device_of", device_of, METH_O,
     "_device_of($module, obj, /)\n--\n\n"
     "The device of the memory obj's getbuffer exports when asked directly\n"
     "with FULL_RO | DEVICE, or None for CPU memory (for the checker)."},
    {"_has_typed_entry", has_typed_entry, METH_O,
     "_has_typed_entry($module, cls, /)\n--\n\n"
     "Whether extended requests to instances of the class cls reach a typed\n"
     "entry (for the checker)."},
    {"_native_declaration", native_declaration, METH_O,
     "_native_declaration($module, cls, /)\n--\n\n"
     "The declaration of the class cls where the interpreter implements the\n"
     "draft (its slot, 0 where it says nothing), None in backport mode (for\n"
     "the checker)."},
    {"_exports_buffers", exports_buffers, METH_O,
     "_exports_buffers($module, cls, /)\n--\n\n"
     "Whether the instances of the class cls export buffers (its buffer\n"
     "slot), for the checker's report of a class."},
    {"_device_libraries", device_libraries, METH_NOARGS,
     "_device_libraries($module, /)\n--\n\n"
     "One dict per device library: what was looked for and found."},
    {NULL, NULL, 0, NULL},
};

static int
add_int(PyObject *module, const char *name, long value)
{
    return PyModule_AddIntConstant(module, name, value);
}

static int
module_exec(PyObject *module)
{
    bufferext_state *st = bufferext_get_state(module);

    bufferext_state_set_def(&bufferext_module);
    st->DeviceUnavailableError = PyErr_NewExceptionWithDoc(
        "bufferext.DeviceUnavailableError",
        "A device library (CUDA driver, VEO) or the device itself is not "
        "available.", PyExc_RuntimeError, NULL);
    if (st->DeviceUnavailableError == NULL ||
        bufferext_add_object(module, "DeviceUnavailableError",
                             st->DeviceUnavailableError) < 0) {
        return -1;
    }
    if (add_int(module, "PyBUF_DEVICE", PyBUF_DEVICE) < 0 ||
        add_int(module, "PyBUF_REQUIRED_FLAGS", PyBUF_REQUIRED_FLAGS) < 0 ||
        add_int(module, "LEGACY_FLAGS", BUFFEREXT_LEGACY_FLAGS) < 0 ||
        add_int(module, "EXTENDED_FLAGS", BUFFEREXT_EXTENDED_FLAGS) < 0 ||
        add_int(module, "ABI_VERSION", BUFFEREXT_ABI_VERSION) < 0 ||
        add_int(module, "VERSION_HEX", BUFFEREXT_VERSION_HEX) < 0 ||
#ifdef BUFFEREXT_NATIVE
        add_int(module, "NATIVE", 1) < 0) {
#else
        add_int(module, "NATIVE", 0) < 0) {
#endif
        return -1;
    }
    bufferext_exports_setup();
    bufferext_dlpack_freelist_open();
    if ((st->dtype_answers = PyDict_New()) == NULL ||
        (st->str_float64 = PyUnicode_InternFromString("float64")) == NULL) {
        return -1;
    }
    if (bufferext_init_view(module) < 0 ||
        bufferext_init_cpubuffer(module) < 0 ||
        bufferext_init_cuda(module) < 0 ||
        bufferext_init_ve(module) < 0 ||
        bufferext_init_adapter(module) < 0 ||
        bufferext_init_dlpack_exchange(module) < 0) {
        return -1;
    }
    return 0;
}

static int
module_traverse(PyObject *module, visitproc visit, void *arg)
{
    bufferext_state *st = bufferext_get_state(module);
    Py_VISIT(st->BufferView_Type);
    Py_VISIT(st->CPUBuffer_Type);
    Py_VISIT(st->CUDABuffer_Type);
    Py_VISIT(st->VEBuffer_Type);
    Py_VISIT(st->BufferAdapter_Type);
    Py_VISIT(st->CUDADeviceInfo_Type);
    Py_VISIT(st->VEDeviceInfo_Type);
    Py_VISIT(st->OpaqueDeviceInfo_Type);
    Py_VISIT(st->FastMethod_Type);
    Py_VISIT(st->FastBound_Type);
    Py_VISIT(st->DeviceUnavailableError);
    Py_VISIT(st->resolve_dtype);
    Py_VISIT(st->dtype_answers);
    Py_VISIT(st->str_float64);
    Py_VISIT(st->as_buffer_steps);
    Py_VISIT(st->cpu_types);
    Py_VISIT(st->str_isbuiltin);
    Py_VISIT(st->str_hasobject);
    Py_VISIT(st->str_dlpack);
    return 0;
}

static int
module_clear(PyObject *module)
{
    bufferext_state *st = bufferext_get_state(module);
    Py_CLEAR(st->BufferView_Type);
    Py_CLEAR(st->CPUBuffer_Type);
    Py_CLEAR(st->CUDABuffer_Type);
    Py_CLEAR(st->VEBuffer_Type);
    Py_CLEAR(st->BufferAdapter_Type);
    Py_CLEAR(st->CUDADeviceInfo_Type);
    Py_CLEAR(st->VEDeviceInfo_Type);
    Py_CLEAR(st->OpaqueDeviceInfo_Type);
    Py_CLEAR(st->FastMethod_Type);
    Py_CLEAR(st->FastBound_Type);
    Py_CLEAR(st->DeviceUnavailableError);
    Py_CLEAR(st->resolve_dtype);
    Py_CLEAR(st->dtype_answers);
    Py_CLEAR(st->str_float64);
    Py_CLEAR(st->as_buffer_steps);
    Py_CLEAR(st->cpu_types);
    Py_CLEAR(st->str_isbuiltin);
    Py_CLEAR(st->str_hasobject);
    Py_CLEAR(st->str_dlpack);
    bufferext_view_freelist_clear();
    bufferext_fastmethods_clear();
    bufferext_dlpack_freelist_clear();
    return 0;
}

static void
module_free(void *module)
{
    module_clear((PyObject *)module);
}

/* One interpreter (docs/platforms.rst, "The C core"): the C core keeps
 * process-wide state that is not isolated per interpreter (the CPU block
 * cache, the driver tables loaded once, the DLPack exchange API's module
 * reference), so CPython refuses the import in a subinterpreter.  Without
 * the GIL: every object's mutable state is read and changed in its
 * critical section (or pinned), process-wide state under its own mutex,
 * never held while Python code runs (docs/platforms.rst says which lock
 * guards what). */
static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, (void *)module_exec},
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef bufferext_module = {
    PyModuleDef_HEAD_INIT,
    "bufferext._bufferext",
    "C core of bufferext: the extended buffer protocol, BufferView and the "
    "CPU, CUDA and VE producers.",
    sizeof(bufferext_state),
    module_methods,
    module_slots,
    module_traverse,
    module_clear,
    module_free,
};

PyMODINIT_FUNC
PyInit__bufferext(void)
{
    return PyModuleDef_Init(&bufferext_module);
}
