/* arrow.c -- the Arrow C Data and C Device interfaces, both ways, for
 * one-dimensional arrays of fixed-width numbers without nulls.
 *
 * Out: __arrow_c_array__ / __arrow_c_device_array__ hand out two capsules.
 * The array's private data holds one extended-buffer export of the exporter
 * (so export counting, and refusing close() meanwhile, come for free) until
 * its release callback runs: on whatever thread the consumer chooses, on
 * whatever copy the struct was moved to (Arrow's move semantics: the
 * callback reads only private_data), or from the capsule's destructor when
 * nobody imported it.  Every allocation here is raw (PyMem_Raw*): the
 * callback takes the GIL only to give the export back.
 *
 * In: bufferext_arrow_take moves the array out of its capsule (in the
 * capsule's critical section: one importer of it wins) and validates both;
 * bufferext_adapter_from_arrow hands what it refuses back
 * (bufferext_arrow_give_back) and the rest to a BufferAdapter, whose
 * dealloc (adapter.c) calls its release exactly once
 * (bufferext_arrow_release). */
#include "adapterobject.h"
#include "arrow.h"
#include "dlpack.h"
#include "dlpack_abi.h"
#include "export.h"
#include "producer.h"

/* Arrow's primitive formats beside the struct-module formats of the same
 * items (the index is the DLPack code * 4 + log2(bytes); floats have no
 * 8-bit type). */
static const char *const arrow_formats[] = {
    "c", "s", "i", "l",         /* int8..int64 */
    "C", "S", "I", "L",         /* uint8..uint64 */
    NULL, "e", "f", "g",        /* float16..float64 */
};
static const char *const struct_formats[] = {
    "b", "h", "i", "q", "B", "H", "I", "Q", NULL, "e", "f", "d",
};

/* The names of the other Arrow types, for refusals (prefixes of formats). */
static const char *const arrow_names[][2] = {
    {"n", "null"}, {"b", "boolean (bit-packed)"}, {"u", "utf8 string"},
    {"U", "large utf8 string"}, {"vu", "utf8 string view"},
    {"z", "binary"}, {"Z", "large binary"}, {"vz", "binary view"},
    {"d:", "decimal"}, {"w:", "fixed-size binary"}, {"tdD", "date32"},
    {"tdm", "date64"}, {"tt", "time"}, {"ts", "timestamp"},
    {"tD", "duration"}, {"ti", "interval"}, {"+l", "list"},
    {"+L", "large list"}, {"+vl", "list view"}, {"+vL", "large list view"},
    {"+w:", "fixed-size list"}, {"+s", "struct"}, {"+m", "map"},
    {"+u", "union"}, {"+r", "run-end encoded"},
};

static const char *
arrow_type_name(const char *format)
{
    size_t i;

    for (i = 0; i < Py_ARRAY_LENGTH(arrow_names); i++) {
        if (strncmp(format, arrow_names[i][0],
                    strlen(arrow_names[i][0])) == 0) {
            return arrow_names[i][1];
        }
    }
    return "unknown";
}

/* Whether an Arrow temporal type is one integer underneath (dates, times,
 * timestamps, durations, the months interval), which Array.view reaches;
 * the day-time and month-day-nano intervals are several numbers. */
static int
arrow_has_integer_storage(const char *format)
{
    return format[0] == 't' &&
           !(format[1] == 'i' && strcmp(format, "tiM") != 0);
}

/* ---- export ------------------------------------------------------------- */

typedef struct {
    Py_buffer_extended ext;     /* the held export */
    const void *buffers[2];     /* no validity bitmap, the values */
    void *event;                /* CUDA: the CUevent sync_event points at */
} arrow_holder;

static void
array_release(BxArrowArray *array)
{
    arrow_holder *holder = array->private_data;

    array->release = NULL;
    if (Py_IsInitialized()) {   /* at shutdown: leak, as dlpack.c does */
        PyGILState_STATE gil = PyGILState_Ensure();
        BufferExt_Release(&holder->ext);
        PyGILState_Release(gil);
        PyMem_RawFree(holder);
    }
}

static void
schema_release(BxArrowSchema *schema)
{
    schema->release = NULL;     /* its strings are static */
}

/* The struct a capsule of ours holds, whatever its name is now. */
static void *
capsule_struct(PyObject *capsule)
{
    void *p = PyCapsule_GetPointer(capsule, PyCapsule_GetName(capsule));

    if (p == NULL) {
        PyErr_Clear();          /* cannot happen: the pointer is never NULL */
    }
    return p;
}

/* The capsules' destructors: release the struct unless a consumer moved it
 * out, then free it.  An array capsule holds an ArrowDeviceArray (its
 * ArrowArray is the first member). */
static void
schema_capsule_destructor(PyObject *capsule)
{
    BxArrowSchema *schema = capsule_struct(capsule);

    if (schema != NULL && schema->release != NULL) {
        schema->release(schema);
    }
    PyMem_RawFree(schema);
}

static void
array_capsule_destructor(PyObject *capsule)
{
    BxArrowArray *array = capsule_struct(capsule);

    if (array != NULL && array->release != NULL) {
        array->release(array);
    }
    PyMem_RawFree(array);
}

/* The longest requested format kept (ours are one character). */
#define REQUEST_MAX 16

/* requested_schema (None, or a capsule of the same format) and, for the
 * device method, keyword arguments that are all None.  0 or -1.  The
 * requested format is copied into requested (empty: none): the consumer's
 * string may be released by Python code that runs before it is compared
 * (a GC finalizer), and is read no further than REQUEST_MAX bytes. */
static int
parse_request(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
              int device, char requested[REQUEST_MAX])
{
    const char *end;
    Py_ssize_t i, nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    const char *fname = device ? "__arrow_c_device_array__"
                               : "__arrow_c_array__";
    PyObject *schema = nargs > 0 ? args[0] : Py_None;

    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most 1 positional "
                     "argument (%zd given)", fname, nargs);
        return -1;
    }
    for (i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(name, "requested_schema") == 0) {
            if (nargs != 0) {
                PyErr_Format(PyExc_TypeError, "%s() got multiple values for "
                             "argument 'requested_schema'", fname);
                return -1;
            }
            schema = args[i];           /* nargs == 0: keywords from 0 */
        }
        else if (!device) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword "
                         "argument %R", fname, name);
            return -1;
        }
        else if (args[nargs + i] != Py_None) {
            /* the PyCapsule interface: unknown keywords are accepted only
             * with their default, None */
            PyErr_Format(PyExc_NotImplementedError, "%s: keyword argument "
                         "%R = %R is not supported", fname, name,
                         args[nargs + i]);
            return -1;
        }
    }
    requested[0] = '\0';
    if (schema != Py_None) {
        BxArrowSchema *s = PyCapsule_IsValid(schema, BX_ARROW_SCHEMA_CAPSULE)
            ? PyCapsule_GetPointer(schema, BX_ARROW_SCHEMA_CAPSULE) : NULL;
        if (s == NULL) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: requested_schema must be None "
                         "or an 'arrow_schema' capsule, not %R", fname,
                         schema);
            return -1;
        }
        if (s->release == NULL || s->format == NULL) {
            PyErr_Format(PyExc_BufferError, "%s: requested_schema %s",
                         fname, s->release == NULL
                                    ? "holds a released schema (release = "
                                      "NULL)"
                                    : "has format = NULL");
            return -1;
        }
        end = memchr(s->format, '\0', REQUEST_MAX);
        if (end == NULL || end == s->format) {
            PyErr_Format(PyExc_BufferError, "%s: requested_schema has format "
                         "'%.16s%s', which names no fixed-width primitive "
                         "type", fname, s->format, end == NULL ? "..." : "");
            return -1;
        }
        memcpy(requested, s->format, (size_t)(end - s->format) + 1);
    }
    return 0;
}

/* The Arrow format of an acquired buffer, or BufferError. */
static const char *
export_format(PyObject *exporter, const Py_buffer *v)
{
    uint32_t packed;
    int code, log2, rc;

    if (v->ndim != 1) {
        PyErr_Format(PyExc_BufferError, "%.200s: an Arrow array is "
                     "one-dimensional; this buffer has ndim = %d",
                     Py_TYPE(exporter)->tp_name, v->ndim);
        return NULL;
    }
    if (v->shape[0] > 1 && v->strides[0] != v->itemsize) {
        PyErr_Format(PyExc_BufferError, "%.200s: an Arrow array is "
                     "contiguous; this buffer's stride is %zd bytes for "
                     "items of %zd", Py_TYPE(exporter)->tp_name,
                     v->strides[0], v->itemsize);
        return NULL;
    }
    rc = bufferext_format_dlpack(v->format, v->itemsize, &packed);
    if (rc == 1) {
        PyErr_Format(PyExc_BufferError, "%.200s: format '%s' is not in "
                     "native byte order; Arrow's C Data Interface holds "
                     "native-order values", Py_TYPE(exporter)->tp_name,
                     v->format);
        return NULL;
    }
    if (rc == 0) {
        int bits = (int)(packed >> 8 & 0xFF);
        code = (int)(packed & 0xFF);
        log2 = bits == 8 ? 0 : bits == 16 ? 1 : bits == 32 ? 2
             : bits == 64 ? 3 : -1;
        if (code <= BX_kDLFloat && log2 >= 0 && (packed >> 16) == 1 &&
            arrow_formats[code * 4 + log2] != NULL) {
            return arrow_formats[code * 4 + log2];
        }
    }
    PyErr_Format(PyExc_BufferError, "%.200s: format '%s' has no Arrow "
                 "fixed-width primitive type (int8..int64, uint8..uint64 "
                 "and float16/32/64 have; Arrow's booleans are bit-packed)",
                 Py_TYPE(exporter)->tp_name, v->format);
    return NULL;
}

/* The device fields of an export: CPU, or CUDA with its event. */
static int
export_device(PyObject *exporter, const Py_buffer_extended *ext,
              BxArrowDeviceArray *out, arrow_holder *holder)
{
    const BufferExt_CUDADeviceInfo *info = ext->device_info;

    if (!BufferExt_IsDevice(ext)) {
        out->device_type = BX_kDLCPU;
        out->device_id = -1;    /* the spec's "no device id" for the CPU */
        return 0;
    }
    if (strcmp(ext->device, BUFFEREXT_DEVICE_CUDA) == 0 && info != NULL &&
        info->version >> 16 == BUFFEREXT_CUDA_INFO_MAJOR) {
        out->device_type = BX_kDLCUDA;
        out->device_id = info->device;
        /* loaded once: synchronize() may clear it meanwhile (the event
         * itself lives as long as the buffer, which the export pins) */
        holder->event = BUFFEREXT_LOAD(
            ((BufferExt_CUDADeviceInfo *)ext->device_info)->event);
        out->sync_event = holder->event != NULL ? &holder->event : NULL;
        return 0;
    }
    PyErr_Format(PyExc_BufferError, "%.200s: memory on device '%s' has no "
                 "Arrow device type", Py_TYPE(exporter)->tp_name,
                 ext->device);
    return -1;
}

static PyObject *
arrow_export(PyObject *exporter, PyObject *const *args, Py_ssize_t nargs,
             PyObject *kwnames, int device)
{
    char requested[REQUEST_MAX];
    const char *format;
    BxArrowSchema *schema;
    BxArrowDeviceArray *array;
    arrow_holder *holder;
    PyObject *schema_capsule = NULL, *array_capsule = NULL;

    if (parse_request(args, nargs, kwnames, device, requested) < 0) {
        return NULL;
    }
    /* the capsules first, empty (released): any failure below frees all */
    schema = PyMem_RawCalloc(1, sizeof(*schema));
    array = PyMem_RawCalloc(1, sizeof(*array));
    holder = PyMem_RawCalloc(1, sizeof(*holder));
    if (schema == NULL || array == NULL || holder == NULL) {
        PyMem_RawFree(schema);
        PyMem_RawFree(array);
        PyMem_RawFree(holder);
        return PyErr_NoMemory();
    }
    schema_capsule = PyCapsule_New(schema, BX_ARROW_SCHEMA_CAPSULE,
                                   schema_capsule_destructor);
    if (schema_capsule == NULL) {
        PyMem_RawFree(schema);
        PyMem_RawFree(array);
        PyMem_RawFree(holder);
        return NULL;
    }
    array_capsule = PyCapsule_New(array, device
                                  ? BX_ARROW_DEVICE_ARRAY_CAPSULE
                                  : BX_ARROW_ARRAY_CAPSULE,
                                  array_capsule_destructor);
    if (array_capsule == NULL) {
        PyMem_RawFree(array);
        goto error;
    }
    if (bufferext_acquire_own(exporter, &holder->ext) < 0) {
        goto error;
    }
    if ((format = export_format(exporter, &holder->ext.view)) == NULL ||
        export_device(exporter, &holder->ext, array, holder) < 0) {
        BufferExt_Release(&holder->ext);
        goto error;
    }
    if (!device && array->device_type != BX_kDLCPU) {
        PyErr_Format(PyExc_BufferError, "%.200s: __arrow_c_array__ is for "
                     "CPU memory; this memory is on device '%s': use "
                     "__arrow_c_device_array__", Py_TYPE(exporter)->tp_name,
                     holder->ext.device);
        BufferExt_Release(&holder->ext);
        goto error;
    }
    if (requested[0] != '\0' && strcmp(requested, format) != 0) {
        PyErr_Format(PyExc_BufferError, "%.200s: requested_schema has "
                     "format '%s' but the buffer holds '%s' (%s): bufferext "
                     "exports only the type it holds, zero-copy",
                     Py_TYPE(exporter)->tp_name, requested, format,
                     holder->ext.view.format);
        BufferExt_Release(&holder->ext);
        goto error;
    }
    schema->format = format;
    schema->name = "";
    schema->release = schema_release;
    holder->buffers[1] = holder->ext.view.buf;
    array->array.length = holder->ext.view.shape[0];
    array->array.n_buffers = 2;
    array->array.buffers = holder->buffers;
    array->array.private_data = holder;
    array->array.release = array_release;   /* owns the holder from here */
    return Py_BuildValue("(NN)", schema_capsule, array_capsule);
error:
    PyMem_RawFree(holder);
    Py_DECREF(schema_capsule);
    Py_XDECREF(array_capsule);
    return NULL;
}

PyObject *
bufferext_arrow_c_array(PyObject *exporter, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *kwnames)
{
    return arrow_export(exporter, args, nargs, kwnames, 0);
}

PyObject *
bufferext_arrow_c_device_array(PyObject *exporter, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    return arrow_export(exporter, args, nargs, kwnames, 1);
}

PyObject *
bufferext_producer_arrow_c_array(PyObject *op, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    if (bufferext_producer_check_open(BufferExtProducer_CAST(op)) < 0) {
        return NULL;
    }
    return arrow_export(op, args, nargs, kwnames, 0);
}

PyObject *
bufferext_producer_arrow_c_device_array(PyObject *op, PyObject *const *args,
                                        Py_ssize_t nargs, PyObject *kwnames)
{
    if (bufferext_producer_check_open(BufferExtProducer_CAST(op)) < 0) {
        return NULL;
    }
    return arrow_export(op, args, nargs, kwnames, 1);
}

/* ---- import ------------------------------------------------------------- */

/* The schema's metadata may give its storage another meaning: the key
 * ARROW:extension:name names an extension type (arrow.bool8 over int8, a
 * user's timestamp over int64), whose numbers are not what it means.  The
 * encoding (the C Data Interface's "metadata"): an int32 count of pairs,
 * then each key and value as an int32 length and its bytes, native order,
 * unaligned.  0, or -1 with BufferError naming the extension (or saying
 * the metadata is malformed). */
static int
read_metadata(const BxArrowSchema *s)
{
    static const char key[] = "ARROW:extension:name";
    const char *p = s->metadata;
    int32_t pairs, klen, vlen, i;

    if (p == NULL) {
        return 0;
    }
    memcpy(&pairs, p, sizeof(pairs));
    p += sizeof(pairs);
    for (i = 0; pairs >= 0 && i < pairs; i++) {
        memcpy(&klen, p, sizeof(klen));
        if (klen < 0) {
            break;
        }
        p += sizeof(klen);
        memcpy(&vlen, p + klen, sizeof(vlen));
        if (vlen < 0) {
            break;
        }
        if (klen == (int32_t)(sizeof(key) - 1) &&
            memcmp(p, key, sizeof(key) - 1) == 0) {
            PyObject *name = PyUnicode_DecodeUTF8(
                p + klen + sizeof(vlen), vlen > 200 ? 200 : vlen, "replace");
            if (name != NULL) {
                PyErr_Format(PyExc_BufferError, "arrow: type '%.64s' is the "
                             "storage of the extension type %R "
                             "(ARROW:extension:name), which means more than "
                             "its numbers; import its storage "
                             "(ExtensionArray.storage) to take them as they "
                             "are", s->format, name);
                Py_DECREF(name);
            }
            return -1;
        }
        p += klen + sizeof(vlen) + vlen;
    }
    if (i < pairs || pairs < 0) {
        PyErr_Format(PyExc_BufferError, "arrow: the schema's metadata is "
                     "malformed (a negative count or length at pair %d)",
                     (int)i);
        return -1;
    }
    return 0;
}

/* The struct-module format of a schema, or BufferError naming its type. */
static int
read_schema(const BxArrowSchema *s, bufferext_arrow_import *out)
{
    size_t i;

    if (s->release == NULL) {
        PyErr_SetString(PyExc_BufferError,
                        "arrow: the schema capsule holds a released schema");
        return -1;
    }
    if (s->format == NULL) {
        PyErr_SetString(PyExc_BufferError,
                        "arrow: the schema's format is NULL");
        return -1;
    }
    if (s->dictionary != NULL) {
        PyErr_Format(PyExc_BufferError, "arrow: the array is "
                     "dictionary-encoded (indices '%.64s'); decode it first",
                     s->format);
        return -1;
    }
    if (read_metadata(s) < 0) {
        return -1;
    }
    if (s->n_children != 0) {
        PyErr_Format(PyExc_BufferError, "arrow: type '%.64s' (%s) has %lld "
                     "children; only flat arrays of fixed-width numbers "
                     "come in", s->format, arrow_type_name(s->format),
                     (long long)s->n_children);
        return -1;
    }
    for (i = 0; i < Py_ARRAY_LENGTH(arrow_formats); i++) {
        if (arrow_formats[i] != NULL &&
            strcmp(s->format, arrow_formats[i]) == 0) {
            out->format = struct_formats[i];
            out->itemsize = (Py_ssize_t)1 << (i % 4);
            return 0;
        }
    }
    PyErr_Format(PyExc_BufferError, "arrow: type '%.64s' (%s) is not a "
                 "fixed-width primitive number (int8..int64, uint8..uint64, "
                 "float16/32/64)%s", s->format, arrow_type_name(s->format),
                 arrow_has_integer_storage(s->format)
                     ? "; view it as its integer storage first (Array.view)"
                     : "");
    return -1;
}

static int
read_array(const BxArrowArray *a, bufferext_arrow_import *out)
{
    if (a->null_count < -1) {
        PyErr_Format(PyExc_BufferError, "arrow: null_count = %lld (a count, "
                     "or -1: not counted)", (long long)a->null_count);
        return -1;
    }
    if (a->dictionary != NULL) {
        PyErr_SetString(PyExc_BufferError, "arrow: the array has a "
                        "dictionary although its schema has none");
        return -1;
    }
    if (a->n_buffers != 2 || a->n_children != 0) {
        PyErr_Format(PyExc_BufferError, "arrow: the array has %lld buffers "
                     "and %lld children; a fixed-width array has 2 and 0",
                     (long long)a->n_buffers, (long long)a->n_children);
        return -1;
    }
    if (a->buffers == NULL) {
        PyErr_SetString(PyExc_BufferError, "arrow: the array's buffers "
                        "pointer is NULL");
        return -1;
    }
    if (a->null_count > 0 || (a->null_count < 0 && a->buffers[0] != NULL)) {
        PyErr_Format(PyExc_BufferError, "arrow: the array has %lld nulls%s; "
                     "the buffer protocol has no validity bitmap (fill "
                     "them first, e.g. Array.fill_null)",
                     (long long)a->null_count,
                     a->null_count < 0 ? " (-1: not counted) and a "
                                         "validity bitmap" : "");
        return -1;
    }
    if (a->length < 0 || a->offset < 0 ||
        a->length > PY_SSIZE_T_MAX / out->itemsize - a->offset) {
        PyErr_Format(PyExc_BufferError, "arrow: length = %lld and offset = "
                     "%lld are out of range", (long long)a->length,
                     (long long)a->offset);
        return -1;
    }
    if (a->buffers[1] == NULL && a->length > 0) {
        PyErr_Format(PyExc_BufferError, "arrow: the values buffer is NULL "
                     "for length = %lld", (long long)a->length);
        return -1;
    }
    if (a->buffers[1] != NULL &&
        (uintptr_t)(a->offset + a->length) * (uintptr_t)out->itemsize >
            UINTPTR_MAX - (uintptr_t)a->buffers[1]) {
        PyErr_Format(PyExc_BufferError, "arrow: length = %lld and offset = "
                     "%lld reach past the end of the address space from the "
                     "values buffer %p", (long long)a->length,
                     (long long)a->offset, a->buffers[1]);
        return -1;
    }
    out->length = (Py_ssize_t)a->length;
    /* in integers: a pointer may not be moved out of its object */
    out->data = a->buffers[1] == NULL ? NULL
        : (void *)((uintptr_t)a->buffers[1] +
                   (uintptr_t)a->offset * (uintptr_t)out->itemsize);
    return 0;
}

/* The error of an array capsule whose array was moved out (imported). */
static void
array_released(void)
{
    PyErr_SetString(PyExc_BufferError, "arrow: the array capsule holds "
                    "a released array (a capsule can be imported once)");
}

/* Move the capsule's array into `taken` and mark the capsule's copy
 * released, if nobody did before: 1, or 0 (already released).  In the
 * capsule's critical section (free-threaded builds), so of two threads
 * importing it at once exactly one moves it; no Python code runs. */
static int
array_move(PyObject *array, const char *name, int device,
           BxArrowDeviceArray *taken)
{
    BxArrowArray *a;
    int moved = 0;

    BUFFEREXT_LOCKED_BEGIN(array);
    a = PyCapsule_GetPointer(array, name);
    if (a != NULL && a->release != NULL) {
        if (device) {
            *taken = *(BxArrowDeviceArray *)a;
        }
        else {
            taken->array = *a;
        }
        a->release = NULL;                              /* moved */
        moved = 1;
    }
    BUFFEREXT_LOCKED_END();
    if (a == NULL) {
        PyErr_Clear();          /* cannot happen: the name was checked */
    }
    return moved;
}

int
bufferext_arrow_take(PyObject *schema, PyObject *array, int device,
                     bufferext_arrow_import *out)
{
    const char *name = device ? BX_ARROW_DEVICE_ARRAY_CAPSULE
                              : BX_ARROW_ARRAY_CAPSULE;
    const BxArrowSchema *s;
    BxArrowDeviceArray *taken;

    memset(out, 0, sizeof(*out));
    if (!PyCapsule_IsValid(schema, BX_ARROW_SCHEMA_CAPSULE) ||
        !PyCapsule_IsValid(array, name)) {
        PyErr_Format(PyExc_BufferError, "arrow: expected capsules named "
                     "'arrow_schema' and '%s', got %R and %R", name, schema,
                     array);
        return -1;
    }
    /* the schema is only read (no consumer of ours moves it) */
    s = PyCapsule_GetPointer(schema, BX_ARROW_SCHEMA_CAPSULE);
    if (s == NULL || read_schema(s, out) < 0) {
        return -1;
    }
    taken = PyMem_RawCalloc(1, sizeof(*taken));
    if (taken == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    /* Moved first, then read: another thread's import of the same capsule
     * could otherwise move it, and release what this one reads. */
    if (!array_move(array, name, device, taken)) {
        PyMem_RawFree(taken);
        array_released();
        return -1;
    }
    out->source = taken;
    out->device = device;
    if (read_array(&taken->array, out) < 0) {
        bufferext_arrow_give_back(array, out);
        return -1;
    }
    out->device_type = BX_kDLCPU;
    if (device) {
        out->device_type = taken->device_type;
        out->device_id = taken->device_id;
        /* CUDA, CUDA host and managed memory: sync_event points at a
         * CUevent (the spec's cudaEvent_t *, the same handle), alive until
         * the array is released */
        if ((taken->device_type == BX_kDLCUDA ||
             taken->device_type == BX_kDLCUDAHost ||
             taken->device_type == BX_kDLCUDAManaged) &&
            taken->sync_event != NULL) {
            out->event = *(void **)taken->sync_event;
        }
    }
    return 0;
}

void
bufferext_arrow_give_back(PyObject *array, bufferext_arrow_import *in)
{
    BxArrowDeviceArray *taken = in->source;
    BxArrowArray *a;

    BUFFEREXT_LOCKED_BEGIN(array);
    a = capsule_struct(array);  /* alive: the caller holds it */
    if (a != NULL) {
        if (in->device) {
            *(BxArrowDeviceArray *)a = *taken;
        }
        else {
            *a = taken->array;
        }
    }
    BUFFEREXT_LOCKED_END();
    if (a == NULL) {            /* cannot happen: released here if it did */
        bufferext_arrow_release(taken);
    }
    else {
        PyMem_RawFree(taken);
    }
    in->source = NULL;
}

void
bufferext_arrow_release(void *taken)
{
    BxArrowArray *array = taken;

    if (array->release != NULL) {
        array->release(array);
    }
    PyMem_RawFree(taken);
}

/* _adapter_from_arrow(source, schema, array, device, readonly): import the
 * capsules of __arrow_c_array__ (device False) or __arrow_c_device_array__
 * (True).  Arrow data is immutable: readonly=False is refused. */
PyObject *
bufferext_adapter_from_arrow(PyObject *module, PyObject *const *args,
                             Py_ssize_t nargs)
{
    bufferext_state *st = bufferext_get_state(module);
    bufferext_arrow_import in;
    bufferext_export_layout *l;
    AdapterObject *self;
    BxDLDevice where;
    int device;

    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "_adapter_from_arrow(source, "
                        "schema, array, device, readonly)");
        return NULL;
    }
    if ((device = PyObject_IsTrue(args[3])) < 0) {
        return NULL;
    }
    if (args[4] == Py_False) {
        PyErr_SetString(PyExc_BufferError, "arrow: Arrow arrays are "
                        "immutable; readonly=False cannot be honoured");
        return NULL;
    }
    /* As for DLPack: everything that can run Python code (the GC of this
     * allocation) comes before the capsules are read; the array is moved
     * out of its capsule first (given back if it is refused below). */
    self = adapter_new(st, args[0]);
    if (self == NULL || bufferext_arrow_take(args[1], args[2], device,
                                             &in) < 0) {
        goto error;
    }
    if (in.device_type != BX_kDLCUDA && in.event != NULL &&
        bufferext_cuda_host_wait(st, "arrow", in.event, 0) < 0) {
        /* memory the CPU reads at once (CUDA host or managed): the
         * producer's pending work is waited for here, without the GIL (the
         * array is ours meanwhile: another import refuses it) */
        goto give_back;
    }
    if (adapter_set_dims(self, device ? "arrow_device" : "arrow", 1) < 0 ||
        adapter_set_format(self, in.format) < 0) {
        goto give_back;
    }
    l = &self->layout;
    l->shape[0] = in.length;
    l->strides[0] = in.itemsize;
    l->itemsize = in.itemsize;
    l->buf = in.data;
    l->readonly = 1;
    where.device_type = in.device_type;
    where.device_id = (int32_t)in.device_id;
    if (in.device_id != (int64_t)where.device_id && in.device_type != BX_kDLCPU) {
        PyErr_Format(PyExc_BufferError, "arrow: device_id = %lld is out of "
                     "range", (long long)in.device_id);
        goto give_back;
    }
    if (adapter_dl_device(self, &where, "arrow") < 0 ||
        adapter_finish_layout(self, "arrow") < 0 ||
        adapter_check_host(st, self, where.device_type, "arrow") < 0) {
        goto give_back;
    }
    if (self->device != NULL) {
        /* the producer's event (alive until its release), not ours */
        if (bufferext_cuda_import(st, (uintptr_t)l->buf, 0,
                                  self->info.cuda.device,
                                  &self->info.cuda) < 0) {
            goto give_back;
        }
        self->info.cuda.event = in.event;
    }

    /* Taken: from here on the adapter releases the array. */
    self->arrow = in.source;
    return adapter_done(self);
give_back:
    bufferext_arrow_give_back(args[2], &in);
error:
    Py_XDECREF(self);
    return NULL;
}
