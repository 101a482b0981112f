/* vebuffer.c -- the VEO library table (loaded lazily, no NEC header
 * needed).  The VEBuffer producer is added by the VE work. */
#include "parts.h"

/* The driver entry points the table uses, listed once. */
#define VEO_SYMBOLS(X) \
    X(veo_proc_create) \
    X(veo_proc_destroy)

#define AS_NAME(name) #name,
#define AS_SLOT(name) void *name;

static const char *const veo_symbols[] = {VEO_SYMBOLS(AS_NAME) NULL};
static struct { VEO_SYMBOLS(AS_SLOT) } veo_table;

static const char *const veo_defaults[] = {
#ifdef _WIN32
    "veo.dll",
#else
    "/opt/nec/ve/veos/lib64/libveo.so.1",
    "libveo.so.1",
#endif
    NULL,
};

static const bufferext_library_spec veo_spec = {
    "VEO library", "BUFFEREXT_VEO_LIBRARY", veo_defaults, veo_symbols,
    (void **)&veo_table,
};

static bufferext_library veo_library;

PyObject *
bufferext_ve_status(void)
{
    PyObject *status = bufferext_library_status(&veo_spec, &veo_library);
    if (status != NULL &&
        PyDict_SetItemString(status, "device", Py_None) == 0) {
        PyObject *name = PyUnicode_FromString(BUFFEREXT_DEVICE_VE);
        if (name == NULL || PyDict_SetItemString(status, "device", name)) {
            Py_CLEAR(status);
        }
        Py_XDECREF(name);
    }
    return status;
}

int
bufferext_init_ve(PyObject *module)
{
    (void)module;
    return 0;
}
