/* ve_driver.c -- the VEO library, loaded at run time (no NEC header or
 * library needed to build): its table of entry points, one VEO process and
 * context per VE node, synchronous copies between HMEM and host memory,
 * and the status bufferext.devices() reports.
 *
 * Nodes are created on first use and shared by every VEBuffer on them;
 * each buffer counts as a user.  At interpreter exit (Py_AtExit) every node
 * without users is torn down, and a node whose buffers outlive the
 * interpreter is torn down when its last buffer goes away, so no HMEM is
 * ever freed after its process.  The node table has a mutex of its own,
 * never held while Python code runs. */
#include "state.h"
#include "ve_driver.h"

/* ---- the VEO table ----------------------------------------------------- */

/* Opaque handles of the VEO C API (ve_offload.h), our own declarations. */
struct veo_proc_handle;
struct veo_thr_ctxt;

/* The entry points the table uses, listed once: name, result, parameters.
 * The HMEM calls need veoffload-aveo 2.7.6 or later. */
#define VEO_SYMBOLS(X)                                                   \
    X(veo_proc_create, struct veo_proc_handle *, (int))                  \
    X(veo_proc_destroy, int, (struct veo_proc_handle *))                 \
    X(veo_context_open, struct veo_thr_ctxt *, (struct veo_proc_handle *)) \
    X(veo_context_close, int, (struct veo_thr_ctxt *))                   \
    X(veo_alloc_hmem, int, (struct veo_proc_handle *, void **, size_t))  \
    X(veo_free_hmem, int, (void *))                                      \
    X(veo_hmemcpy, int, (void *, const void *, size_t))                  \
    X(veo_is_ve_addr, int, (const void *))                               \
    X(veo_api_version, int, (void))                                      \
    X(veo_version_string, const char *, (void))

#define AS_NAME(name, result, params) #name,
#define AS_SLOT(name, result, params) void *name;
#define AS_TYPE(name, result, params) typedef result(*name##_fn) params;

static const char *const veo_symbols[] = {VEO_SYMBOLS(AS_NAME) NULL};
static struct { VEO_SYMBOLS(AS_SLOT) } veo_table;
VEO_SYMBOLS(AS_TYPE)

/* A typed entry of the table: VEO(veo_hmemcpy)(dst, src, n). */
#define VEO(name) ((name##_fn)veo_table.name)

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

/* ---- nodes: one VEO process and context each --------------------------- */



static bufferext_ve_node ve_nodes[BUFFEREXT_VE_MAX_NODES];
static int ve_exiting;          /* Py_AtExit ran: tear down when unused */
static int ve_atexit_registered;
BUFFEREXT_MUTEX(ve_mutex);      /* the table, without the GIL */

/* The VEO processes, their contexts and HMEM belong to the process that
 * started them: a fork() child shares their channels, so a call there (a
 * copy, a free, the exit's veo_proc_destroy) would act on the parent's
 * VE processes.  Set in the child by a pthread_atfork handler registered
 * when the first VEO process started; then nothing calls VEO. */
#ifndef _WIN32
#  include <pthread.h>
static volatile int ve_forked;
static int ve_atfork_registered;

static void
ve_atfork_child(void)
{
    ve_forked = 1;
}
#  define VE_FORKED() (ve_forked)
#else
#  define VE_FORKED() 0
#endif

/* From the first VEO call of ours on (a node started, or a copy of memory
 * another library's VEO process holds), a fork child makes none: the
 * processes, contexts and HMEM are the parent's.  Under ve_mutex. */
static void
ve_guard_fork_locked(void)
{
#ifndef _WIN32
    if (!ve_atfork_registered) {
        ve_atfork_registered =
            pthread_atfork(NULL, NULL, ve_atfork_child) == 0;
    }
#endif
}

static void
node_teardown(bufferext_ve_node *node)
{
    if (node->context != NULL) {
        (void)VEO(veo_context_close)(node->context);
        node->context = NULL;
    }
    if (node->proc != NULL) {
        (void)VEO(veo_proc_destroy)(node->proc);
        node->proc = NULL;
    }
}

/* Py_AtExit: no Python API here, only the VEO library. */
static void
ve_atexit(void)
{
    int i;

    ve_exiting = 1;
    if (veo_library.state != 1 || VE_FORKED()) {
        return;                 /* a fork child: the parent's to end */
    }
    for (i = 0; i < BUFFEREXT_VE_MAX_NODES; i++) {
        if (ve_nodes[i].users == 0) {
            node_teardown(&ve_nodes[i]);
        }
    }
}

/* Start VEO on `number` (once) and count one more user.  Returns the node,
 * or NULL with *failed naming the VEO call that failed (the caller raises,
 * once the mutex is let go: an exception is Python's memory). */
static bufferext_ve_node *
node_acquire_locked(int number, const char **failed)
{
    bufferext_ve_node *node = &ve_nodes[number];

    if (node->proc == NULL) {
        node->proc = VEO(veo_proc_create)(number);
        if (node->proc != NULL) {
            ve_guard_fork_locked();
        }
        if (node->proc == NULL) {
            *failed = "veo_proc_create";
            return NULL;
        }
        node->context = VEO(veo_context_open)(node->proc);
        if (node->context == NULL) {
            node_teardown(node);
            *failed = "veo_context_open";
            return NULL;
        }
    }
    node->users++;
    return node;
}

bufferext_ve_node *
bufferext_ve_node_acquire(bufferext_state *st, int number)
{
    bufferext_ve_node *node;
    const char *failed = NULL;
    char who[32];

    if (bufferext_library_load(st, &veo_spec, &veo_library) < 0) {
        return NULL;
    }
    if (VE_FORKED()) {
        PyOS_snprintf(who, sizeof(who), "VE node %d", number);
        bufferext_fork_error(st, who, "VEO");
        return NULL;
    }
    BUFFEREXT_MUTEX_LOCK(ve_mutex);
    node = node_acquire_locked(number, &failed);
    BUFFEREXT_MUTEX_UNLOCK(ve_mutex);
    if (node == NULL && strcmp(failed, "veo_proc_create") == 0) {
        PyErr_Format(st->DeviceUnavailableError,
                     "VE node %d: veo_proc_create(%d) failed (is the node "
                     "present and VEOS running?) using the VEO library at %s",
                     number, number, veo_library.path);
    }
    else if (node == NULL) {
        PyErr_Format(st->DeviceUnavailableError, "VE node %d: %s failed",
                     number, failed);
    }
    return node;
}

void
bufferext_ve_node_release(bufferext_ve_node *node)
{
    BUFFEREXT_MUTEX_LOCK(ve_mutex);
    if (--node->users == 0 && ve_exiting && !VE_FORKED()) {
        node_teardown(node);
    }
    BUFFEREXT_MUTEX_UNLOCK(ve_mutex);
}

/* ---- memory ------------------------------------------------------------ */

int
bufferext_ve_alloc(bufferext_ve_node *node, size_t size, void **hmem)
{
    *hmem = NULL;
    return VEO(veo_alloc_hmem)(node->proc, hmem, size) != 0 || *hmem == NULL
               ? -1 : 0;
}

void
bufferext_ve_free(void *hmem)
{
    if (!VE_FORKED()) {         /* a fork child: the parent's HMEM */
        (void)VEO(veo_free_hmem)(hmem);
    }
}

int
bufferext_ve_copy(bufferext_state *st, const char *who, void *dst,
                  const void *src, Py_ssize_t size)
{
    int rc;

    if (VE_FORKED()) {
        return bufferext_fork_error(st, who, "VEO");
    }
    if (size == 0) {
        return 0;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = VEO(veo_hmemcpy)(dst, src, (size_t)size);
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        PyErr_Format(PyExc_RuntimeError,
                     "%s: veo_hmemcpy of %zd bytes failed (returned %d)",
                     who, size, rc);
        return -1;
    }
    return 0;
}

int
bufferext_ve_hmemcpy(bufferext_state *st, const char *who, void *dst,
                     const void *src, Py_ssize_t size)
{
    if (size == 0) {
        return 0;
    }
    if (bufferext_library_load(st, &veo_spec, &veo_library) < 0) {
        return -1;
    }
    BUFFEREXT_MUTEX_LOCK(ve_mutex);
    ve_guard_fork_locked();
    BUFFEREXT_MUTEX_UNLOCK(ve_mutex);
    return bufferext_ve_copy(st, who, dst, src, size);
}

/* ---- status and exit ---------------------------------------------------- */

/* Nodes with a VEO process started by this module, and the library's
 * version, once it is loaded. */
static int
add_loaded_status(PyObject *status)
{
    PyObject *open = PyList_New(0), *value;
    int i, rc, started[BUFFEREXT_VE_MAX_NODES];

    /* read under the mutex, built after it (a collection may run a
     * finalizer that releases a node) */
    BUFFEREXT_MUTEX_LOCK(ve_mutex);
    for (i = 0; i < BUFFEREXT_VE_MAX_NODES; i++) {
        started[i] = ve_nodes[i].proc != NULL;
    }
    BUFFEREXT_MUTEX_UNLOCK(ve_mutex);
    for (i = 0; open != NULL && i < BUFFEREXT_VE_MAX_NODES; i++) {
        if (started[i]) {
            value = PyLong_FromLong(i);
            if (value == NULL || PyList_Append(open, value) < 0) {
                Py_CLEAR(open);
            }
            Py_XDECREF(value);
        }
    }
    if (open == NULL) {
        return -1;
    }
    value = Py_BuildValue("{s:N,s:i,s:z}", "open_nodes", open,
                          "api_version", VEO(veo_api_version)(),
                          "version_string", VEO(veo_version_string)());
    rc = value == NULL ? -1 : PyDict_Update(status, value);
    Py_XDECREF(value);
    return rc;
}

PyObject *
bufferext_ve_status(void)
{
    PyObject *status = bufferext_library_status(&veo_spec, &veo_library);
    PyObject *name;

    if (status == NULL) {
        return NULL;
    }
    name = PyUnicode_FromString(BUFFEREXT_DEVICE_VE);
    if (name == NULL || PyDict_SetItemString(status, "device", name) < 0 ||
        (veo_library.state == 1 && add_loaded_status(status) < 0)) {
        Py_CLEAR(status);
    }
    Py_XDECREF(name);
    return status;
}

int
bufferext_ve_register_atexit(void)
{
    if (!ve_atexit_registered) {
        if (Py_AtExit(ve_atexit) < 0) {
            PyErr_SetString(PyExc_RuntimeError,
                            "bufferext: cannot register the VEO teardown "
                            "(Py_AtExit is full)");
            return -1;
        }
        ve_atexit_registered = 1;
    }
    return 0;
}
