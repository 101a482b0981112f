/* ve_driver.h -- the VEO library as the module sees it: VE nodes, HMEM
 * and copies (ve_driver.c), for VEBuffer and for BufferView's staging of
 * any exporter's VE memory. */
#ifndef BUFFEREXT_MODULES_VE_DRIVER_H
#define BUFFEREXT_MODULES_VE_DRIVER_H
#include "parts.h"
#include "loader.h"

/* Opaque handles of the VEO C API (ve_offload.h), our own declarations. */
struct veo_proc_handle;
struct veo_thr_ctxt;

/* Node numbers accepted (VEOS numbers VE nodes from 0; a host holds at
 * most 8 cards today). */
#define BUFFEREXT_VE_MAX_NODES 64

/* One VEO process and context, shared by the buffers on its node. */
typedef struct {
    struct veo_proc_handle *proc;
    struct veo_thr_ctxt *context;
    Py_ssize_t users;           /* live VEBuffers on this node */
} bufferext_ve_node;

/* Load VEO, start node `number` (once, 0 <= number < MAX_NODES) and count
 * one more user: the node, or NULL with DeviceUnavailableError. */
bufferext_ve_node *bufferext_ve_node_acquire(bufferext_state *st, int number);
/* One user less (torn down if it was the last and the interpreter exits). */
void bufferext_ve_node_release(bufferext_ve_node *node);
/* veo_alloc_hmem of `size` bytes on the node's process: 0 with *hmem, or
 * -1 (no exception set); bufferext_ve_free gives it back. */
int bufferext_ve_alloc(bufferext_ve_node *node, size_t size, void **hmem);
void bufferext_ve_free(void *hmem);
/* veo_hmemcpy of `size` bytes without the GIL (VEO copies are
 * synchronous); the library is loaded (a VEBuffer exists).  The caller
 * keeps both sides pinned.  0, or -1 with RuntimeError naming `who`, or
 * DeviceUnavailableError (of `st`) in a child forked after a VEO process
 * started, where no VEO call is made (nor by bufferext_ve_free, the
 * release of a node and the exit's teardown). */
int bufferext_ve_copy(bufferext_state *st, const char *who, void *dst,
                      const void *src, Py_ssize_t size);
/* The same, loading the VEO library first when no VEBuffer did (BufferView
 * staging of another exporter's VE memory). */
int bufferext_ve_hmemcpy(bufferext_state *st, const char *who, void *dst,
                         const void *src, Py_ssize_t size);
/* The dict of bufferext.devices() for VEO (tries to load it). */
PyObject *bufferext_ve_status(void);
/* Register the teardown at interpreter exit (once).  0 or -1. */
int bufferext_ve_register_atexit(void);

#endif
