/* state.c -- what every file of the module asks of the module itself:
 * its state (from the module object or any of our types), the creation of
 * our types, the registry of our getbuffer functions (which export carries
 * our layout), and the parsing of the (obj, flags) arguments the
 * module-level functions share.  Below every other file: it calls none of
 * them (the drivers, on its floor, read the state's fields). */
#include "state.h"

/* The module's definition, set by module.c before the files' inits run. */
static PyModuleDef *module_def;

void
bufferext_state_set_def(PyModuleDef *def)
{
    module_def = def;
}

bufferext_state *
bufferext_state_from_type(PyTypeObject *type)
{
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *module = PyType_GetModuleByDef(type, module_def);
    return module == NULL ? NULL : bufferext_get_state(module);
#else
    /* PyType_GetModuleByDef is 3.11+: walk the MRO for our heap type. */
    PyObject *mro = type->tp_mro;
    Py_ssize_t i;
    for (i = 0; mro != NULL && i < PyTuple_GET_SIZE(mro); i++) {
        PyTypeObject *base = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (PyType_HasFeature(base, Py_TPFLAGS_HEAPTYPE)) {
            PyObject *module = ((PyHeapTypeObject *)base)->ht_module;
            if (module != NULL &&
                PyModule_GetDef(module) == module_def) {
                return bufferext_get_state(module);
            }
        }
    }
    PyErr_Format(PyExc_TypeError, "%.200s is not a bufferext type",
                 type->tp_name);
    return NULL;
#endif
}

/* Our getbuffer functions and typed entries, with where each type keeps
 * the layout its exports point view->internal at: process constants,
 * recorded at init (a getbuffer of NULL ends the list). */
static struct {
    BufferExt_GetBufferEntry entry;     /* first: what own_entry returns */
    Py_ssize_t layout;                  /* offset in the object */
} own_entries[8];
const BufferExt_GetBufferEntry *bufferext_cpubuffer_entry;

const BufferExt_GetBufferEntry *
bufferext_own_register(getbufferproc getbuffer,
                       BufferExt_GetBufferExProc getbuffer_ex,
                       Py_ssize_t layout)
{
    size_t i;

    for (i = 0; i < Py_ARRAY_LENGTH(own_entries) - 1; i++) {
        if (own_entries[i].entry.getbuffer == getbuffer ||
            own_entries[i].entry.getbuffer == NULL) {
            own_entries[i].entry.version = BUFFEREXT_ABI_VERSION;
            own_entries[i].entry.getbuffer = getbuffer;
            own_entries[i].entry.getbuffer_ex = getbuffer_ex;
            own_entries[i].layout = layout;
            return &own_entries[i].entry;
        }
    }
    Py_UNREACHABLE();           /* more types than the table holds */
}

int
bufferext_own_export(PyObject *exporter, const Py_buffer *view)
{
    PyBufferProcs *procs = Py_TYPE(exporter)->tp_as_buffer;
    size_t i;

    if (procs == NULL || view->obj != exporter) {
        return 0;
    }
    for (i = 0; own_entries[i].entry.getbuffer != NULL; i++) {
        if (own_entries[i].entry.getbuffer == procs->bf_getbuffer) {
            return view->internal ==
                   (void *)((char *)exporter + own_entries[i].layout);
        }
    }
    return 0;
}

const BufferExt_GetBufferEntry *
bufferext_own_entry(PyObject *obj)
{
    PyTypeObject *type;
    size_t i;

    for (type = Py_TYPE(obj); type != NULL; type = type->tp_base) {
        getbufferproc fn = type->tp_as_buffer != NULL
                               ? type->tp_as_buffer->bf_getbuffer : NULL;
        for (i = 0; fn != NULL && own_entries[i].entry.getbuffer != NULL;
             i++) {
            if (own_entries[i].entry.getbuffer == fn) {
                return &own_entries[i].entry;
            }
        }
    }
    PyErr_Format(PyExc_TypeError, "%.200s is not a bufferext exporter",
                 Py_TYPE(obj)->tp_name);
    return NULL;
}

#if PY_VERSION_HEX < 0x030A0000
/* 3.9's PyType_FromSpec keeps tp_doc without its "Name(...)\n--\n\n" text
 * signature, so inspect.signature() finds no constructor signature (3.10
 * keeps it).  Give the type the whole docstring back: tp_doc is the type's
 * own PyObject_Malloc'd copy there, freed with it; __doc__, already set
 * from the stripped text, is unchanged. */
static int
keep_text_signature(PyTypeObject *type, const PyType_Spec *spec)
{
    const PyType_Slot *slot;

    for (slot = spec->slots; slot->slot != 0; slot++) {
        if (slot->slot == Py_tp_doc && slot->pfunc != NULL) {
            size_t size = strlen((const char *)slot->pfunc) + 1;
            char *doc = PyObject_Malloc(size);
            if (doc == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            memcpy(doc, slot->pfunc, size);
            PyObject_Free((void *)type->tp_doc);
            type->tp_doc = doc;
        }
    }
    return 0;
}
#endif

int
bufferext_add_type(PyObject *module, PyType_Spec *spec, int supported_flags,
                   BufferExt_GetBufferExProc getbuffer_ex, Py_ssize_t layout,
                   PyTypeObject **slot)
{
    const char *name = strrchr(spec->name, '.');

    *slot = (PyTypeObject *)PyType_FromModuleAndSpec(module, spec, NULL);
    if (*slot == NULL ||
#if PY_VERSION_HEX < 0x030A0000
        keep_text_signature(*slot, spec) < 0 ||
#endif
        BufferExt_SetExtendedGetBuffer(*slot, supported_flags,
                                       getbuffer_ex) < 0) {
        return -1;
    }
    bufferext_own_register((*slot)->tp_as_buffer->bf_getbuffer, getbuffer_ex,
                           layout);
    return bufferext_add_object(module, name != NULL ? name + 1 : spec->name,
                                (PyObject *)*slot);
}

int
bufferext_add_object(PyObject *module, const char *name, PyObject *value)
{
    if (PyModule_AddObject(module, name, Py_NewRef(value)) < 0) {
        Py_DECREF(value);   /* not stolen on failure */
        return -1;
    }
    return 0;
}

/* flags: a Python int that fits a C int (BufferFlags members included). */
static int
parse_flags(PyObject *obj, int *out)
{
    long value;
    int overflow;

    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "flags must be an int (bufferext.BufferFlags), not "
                     "'%.200s'", Py_TYPE(obj)->tp_name);
        return -1;
    }
    value = PyLong_AsLongAndOverflow(obj, &overflow);
    if (overflow || value < INT_MIN || value > INT_MAX) {
        PyErr_Format(PyExc_OverflowError,
                     "flags = %R does not fit in a C int", obj);
        return -1;
    }
    *out = (int)value;
    return 0;
}

/* Parse (obj[, flags]) with `flags` also accepted by keyword. */
int
bufferext_parse_obj_flags(const char *fname, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames,
                          PyObject **obj, int *flags)
{
    PyObject *flags_obj = nargs > 1 ? args[1] : NULL;
    Py_ssize_t i, nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);

    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError,
                     "%s() takes 1 or 2 positional arguments (%zd given)",
                     fname, nargs);
        return -1;
    }
    for (i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if (flags_obj != NULL ||
            PyUnicode_CompareWithASCIIString(name, "flags") != 0) {
            PyErr_Format(PyExc_TypeError,
                         "%s() got an unexpected keyword argument %R",
                         fname, name);
            return -1;
        }
        flags_obj = args[nargs + i];
    }
    *obj = args[0];
    return flags_obj == NULL ? 0 : parse_flags(flags_obj, flags);
}
