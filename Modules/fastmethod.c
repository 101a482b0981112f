/* fastmethod.c -- methods that bind without an allocation, for the with
 * statement.  `with view:` looks __enter__ and __exit__ up on the type and
 * binds each (3.9-3.13 have no unbound path for it): with an ordinary
 * method descriptor that is a new GC-tracked builtin-method object per
 * lookup, two per with statement, which cost about as much as get_buffer()
 * itself.  A fastmethod wraps the method descriptor made from the type's
 * PyMethodDef and binds from a small freelist.  A call runs the method's C
 * function directly when its arguments need no check, and otherwise calls
 * the wrapped descriptor with self prepended, as CPython's own bound
 * methods do, so errors are CPython's.  Every other attribute (__doc__,
 * __name__, __text_signature__, __self__, ...) and the repr are those of
 * the wrapped method; __wrapped__ is the wrapped method itself (so
 * inspect.signature reads its text signature). */
#include "fastmethod.h"
#include "freelist.h"
#include "state.h"

#if BUFFEREXT_FASTMETHOD

typedef struct {
    PyObject_HEAD
    PyObject *method;           /* the wrapped method descriptor */
    PyMethodDef *def;           /* ... and its definition */
    PyTypeObject *objclass;     /* the type it is a method of */
    PyTypeObject *bound_type;   /* the type of what __get__ returns */
} FastMethodObject;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *descr;            /* our FastMethodObject */
    PyObject *self;
} BoundObject;

#if BUFFEREXT_FREELIST > 0
/* Memory of dead bound methods, for the next; open while the module is. */
static bufferext_freelist bound_freelist = {.kind = BUFFEREXT_FREELIST_BOUND};
#endif

/* ---- the bound method --------------------------------------------------- */

/* A call: the method's C function at once when the arguments are what its
 * calling convention takes without a check (no arguments for METH_NOARGS,
 * positional ones for METH_FASTCALL); any other call goes through the
 * method descriptor with self prepended, as method_vectorcall
 * (classobject.c) does, so CPython checks and refuses it as before. */
static PyObject *
bound_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf,
                 PyObject *kwnames)
{
    BoundObject *b = (BoundObject *)op;
    PyObject *method = ((FastMethodObject *)b->descr)->method;
    PyMethodDef *def = ((FastMethodObject *)b->descr)->def;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject *small[8], **stack, *saved, *result;

    if (def->ml_flags == METH_NOARGS && total == 0) {
        return def->ml_meth(b->self, NULL);
    }
    if (def->ml_flags == METH_FASTCALL && total == nargs) {
        PyObject *(*fast)(PyObject *, PyObject *const *, Py_ssize_t) =
            (PyObject *(*)(PyObject *, PyObject *const *, Py_ssize_t))(
                void (*)(void))def->ml_meth;
        return fast(b->self, args, nargs);
    }
    if (nargsf & PY_VECTORCALL_ARGUMENTS_OFFSET) {
        stack = (PyObject **)args - 1;
        saved = stack[0];
        stack[0] = b->self;
        result = PyObject_Vectorcall(method, stack, nargs + 1, kwnames);
        stack[0] = saved;
        return result;
    }
    if (total + 1 <= (Py_ssize_t)Py_ARRAY_LENGTH(small)) {
        stack = small;
    }
    else {
        stack = PyMem_Malloc(sizeof(PyObject *) * (size_t)(total + 1));
        if (stack == NULL) {
            return PyErr_NoMemory();
        }
    }
    stack[0] = b->self;
    if (total > 0) {
        memcpy(stack + 1, args, sizeof(PyObject *) * (size_t)total);
    }
    result = PyObject_Vectorcall(method, stack, nargs + 1, kwnames);
    if (stack != small) {
        PyMem_Free(stack);
    }
    return result;
}

static PyObject *
bound_new(FastMethodObject *descr, PyObject *self)
{
    BoundObject *b;

#if BUFFEREXT_FREELIST > 0
    b = bufferext_freelist_pop(&bound_freelist);
    if (b != NULL) {
        (void)PyObject_Init((PyObject *)b, descr->bound_type);
    }
    else
#endif
    {
        b = PyObject_GC_New(BoundObject, descr->bound_type);
        if (b == NULL) {
            return NULL;
        }
    }
    b->vectorcall = bound_vectorcall;
    b->descr = Py_NewRef(descr);
    b->self = Py_NewRef(self);
    PyObject_GC_Track(b);
    return (PyObject *)b;
}

static void
bound_dealloc(PyObject *op)
{
    BoundObject *b = (BoundObject *)op;
    PyTypeObject *type = Py_TYPE(op);

    PyObject_GC_UnTrack(op);
    Py_CLEAR(b->descr);
    Py_CLEAR(b->self);
#if BUFFEREXT_FREELIST > 0
    if (bufferext_freelist_push(&bound_freelist, b)) {
        Py_DECREF(type);
        return;
    }
#endif
    PyObject_GC_Del(op);
    Py_DECREF(type);
}

static int
bound_traverse(PyObject *op, visitproc visit, void *arg)
{
    BoundObject *b = (BoundObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(b->descr);
    Py_VISIT(b->self);
    return 0;
}

/* The ordinary bound method, made when something asks more than a call. */
static PyObject *
bound_unwrap(BoundObject *b)
{
    PyObject *method = ((FastMethodObject *)b->descr)->method;
    return Py_TYPE(method)->tp_descr_get(method, b->self,
                                         (PyObject *)Py_TYPE(b->self));
}

static PyObject *
bound_getattro(PyObject *op, PyObject *name)
{
    PyObject *real, *result;

    if (PyUnicode_CompareWithASCIIString(name, "__class__") == 0) {
        return PyObject_GenericGetAttr(op, name);
    }
    real = bound_unwrap((BoundObject *)op);
    if (real == NULL ||
        PyUnicode_CompareWithASCIIString(name, "__wrapped__") == 0) {
        return real;
    }
    result = PyObject_GetAttr(real, name);
    Py_DECREF(real);
    return result;
}

static PyObject *
bound_repr(PyObject *op)
{
    PyObject *real = bound_unwrap((BoundObject *)op), *result;

    if (real == NULL) {
        return NULL;
    }
    result = PyObject_Repr(real);
    Py_DECREF(real);
    return result;
}

/* Two bindings of one method to one object are equal, as builtin methods
 * are. */
static PyObject *
bound_richcompare(PyObject *a, PyObject *b, int op)
{
    BoundObject *x = (BoundObject *)a, *y = (BoundObject *)b;
    int same;

    if ((op != Py_EQ && op != Py_NE) || Py_TYPE(a) != Py_TYPE(b)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    same = x->descr == y->descr && x->self == y->self;
    return PyBool_FromLong(op == Py_EQ ? same : !same);
}

static Py_hash_t
bound_hash(PyObject *op)
{
    BoundObject *b = (BoundObject *)op;
    /* the addresses, rotated past their alignment bits (as CPython's
     * pointer hash) */
    size_t h = (size_t)(uintptr_t)b->self ^ (size_t)(uintptr_t)b->descr;
    h = (h >> 4) | (h << (8 * sizeof(size_t) - 4));
    return (Py_hash_t)h == -1 ? -2 : (Py_hash_t)h;
}

static PyMemberDef bound_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(BoundObject, vectorcall),
     READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot bound_slots[] = {
    {Py_tp_dealloc, bound_dealloc},
    {Py_tp_traverse, bound_traverse},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_getattro, bound_getattro},
    {Py_tp_repr, bound_repr},
    {Py_tp_richcompare, bound_richcompare},
    {Py_tp_hash, bound_hash},
    {Py_tp_members, bound_members},
    {Py_tp_doc, "A method bound without an allocation (see __wrapped__)."},
    {0, NULL},
};

static PyType_Spec bound_spec = {
    "bufferext._FastBoundMethod",
    sizeof(BoundObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
        Py_TPFLAGS_DISALLOW_INSTANTIATION,
    bound_slots,
};

/* ---- the descriptor ----------------------------------------------------- */

static PyObject *
fastmethod_get(PyObject *op, PyObject *obj, PyObject *type)
{
    FastMethodObject *self = (FastMethodObject *)op;

    if (obj == NULL) {              /* looked up on the class */
        return Py_NewRef(op);
    }
    if (!PyObject_TypeCheck(obj, self->objclass)) {
        /* the method descriptor's own answer (a TypeError) */
        return Py_TYPE(self->method)->tp_descr_get(self->method, obj, type);
    }
    return bound_new(self, obj);
}

static PyObject *
fastmethod_call(PyObject *op, PyObject *args, PyObject *kwargs)
{
    return PyObject_Call(((FastMethodObject *)op)->method, args, kwargs);
}

static PyObject *
fastmethod_getattro(PyObject *op, PyObject *name)
{
    PyObject *method = ((FastMethodObject *)op)->method;

    if (PyUnicode_CompareWithASCIIString(name, "__class__") == 0) {
        return PyObject_GenericGetAttr(op, name);
    }
    if (PyUnicode_CompareWithASCIIString(name, "__wrapped__") == 0) {
        return Py_NewRef(method);
    }
    return PyObject_GetAttr(method, name);
}

static PyObject *
fastmethod_repr(PyObject *op)
{
    return PyObject_Repr(((FastMethodObject *)op)->method);
}

static void
fastmethod_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);

    FastMethodObject *self = (FastMethodObject *)op;

    PyObject_GC_UnTrack(op);
    Py_CLEAR(self->method);
    Py_CLEAR(self->objclass);
    Py_CLEAR(self->bound_type);
    PyObject_GC_Del(op);
    Py_DECREF(type);
}

static int
fastmethod_traverse(PyObject *op, visitproc visit, void *arg)
{
    FastMethodObject *self = (FastMethodObject *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->method);
    Py_VISIT(self->objclass);
    Py_VISIT(self->bound_type);
    return 0;
}

static PyType_Slot fastmethod_slots[] = {
    {Py_tp_dealloc, fastmethod_dealloc},
    {Py_tp_traverse, fastmethod_traverse},
    {Py_tp_descr_get, fastmethod_get},
    {Py_tp_call, fastmethod_call},
    {Py_tp_getattro, fastmethod_getattro},
    {Py_tp_repr, fastmethod_repr},
    {Py_tp_doc, "A method descriptor that binds without an allocation "
                "(see __wrapped__)."},
    {0, NULL},
};

static PyType_Spec fastmethod_spec = {
    "bufferext._FastMethod",
    sizeof(FastMethodObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
        Py_TPFLAGS_DISALLOW_INSTANTIATION,
    fastmethod_slots,
};

/* ---- setup -------------------------------------------------------------- */

int
bufferext_fastmethods(PyObject *module, PyTypeObject *type,
                      const char *const *names)
{
    bufferext_state *st = bufferext_get_state(module);

    if (st->FastMethod_Type == NULL) {
        st->FastMethod_Type = (PyTypeObject *)PyType_FromModuleAndSpec(
            module, &fastmethod_spec, NULL);
        if (st->FastMethod_Type == NULL ||
            (st->FastBound_Type = (PyTypeObject *)PyType_FromModuleAndSpec(
                 module, &bound_spec, NULL)) == NULL) {
            return -1;
        }
        bufferext_disallow_instantiation(st->FastMethod_Type);
        bufferext_disallow_instantiation(st->FastBound_Type);
#if BUFFEREXT_FREELIST > 0
        bufferext_freelist_open(&bound_freelist, PyObject_GC_Del);
#endif
    }
    for (; *names != NULL; names++) {
        /* not PyDict_GetItemString, which hides a failure (no memory for
         * the key) as a missing method */
        PyObject *key = PyUnicode_FromString(*names), *method;
        FastMethodObject *fast;
        int rc;

        method = key == NULL ? NULL
                             : PyDict_GetItemWithError(type->tp_dict, key);
        Py_XDECREF(key);
        if (PyErr_Occurred()) {
            return -1;
        }
        if (method == NULL ||
            !PyObject_TypeCheck(method, &PyMethodDescr_Type)) {
            PyErr_Format(PyExc_SystemError, "%s.%s is not a method",
                         type->tp_name, *names);
            return -1;
        }
        fast = PyObject_GC_New(FastMethodObject, st->FastMethod_Type);
        if (fast == NULL) {
            return -1;
        }
        fast->method = Py_NewRef(method);
        fast->def = ((PyMethodDescrObject *)method)->d_method;
        fast->objclass = (PyTypeObject *)Py_NewRef(type);
        fast->bound_type = (PyTypeObject *)Py_NewRef(st->FastBound_Type);
        PyObject_GC_Track(fast);
        rc = PyDict_SetItemString(type->tp_dict, *names, (PyObject *)fast);
        Py_DECREF(fast);
        if (rc < 0) {
            return -1;
        }
    }
    PyType_Modified(type);
    return 0;
}

void
bufferext_fastmethods_clear(void)
{
#if BUFFEREXT_FREELIST > 0
    bufferext_freelist_close(&bound_freelist);
#endif
}

#else
/* ISO C wants something in a translation unit */
typedef int bufferext_fastmethod_not_installed;
#endif
