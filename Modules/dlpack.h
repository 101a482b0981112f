/* dlpack.h -- DLPack export of any extended-buffer exporter and the
 * import of consumed tensors into a BufferAdapter (dlpack.c). */
#ifndef BUFFEREXT_MODULES_DLPACK_H
#define BUFFEREXT_MODULES_DLPACK_H
#include "parts.h"

/* An extended export (PyBUF_RECORDS_RO | PyBUF_DEVICE) of one of our own
 * types, through that type's own typed entry (not the instance's slot: a
 * subclass may override __buffer__), so that view->internal is our layout
 * (export.h).  0 or -1 with an exception. */
int bufferext_acquire_own(PyObject *exporter, Py_buffer_extended *ext);
/* DLPack export of any extended-buffer exporter.  The capsule
 * holds one extended-buffer export of `exporter` for its lifetime. */
PyObject *bufferext_dlpack(PyObject *exporter, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames);
PyObject *bufferext_dlpack_device(PyObject *exporter);
/* For the C exchange API: an owning versioned tensor (CUDA work ordered
 * before the legacy default stream), or a non-owning fill of `out` whose
 * shape and strides point into the exporter.  NULL / -1 with an exception. */
struct BxDLManagedTensorVersioned *bufferext_dlpack_managed(PyObject *exporter);
struct BxDLTensor;
/* The exchange API's dltensor_from_py_object_no_sync itself (its table
 * points here: no call in between). */
int bufferext_dlpack_fill(void *py_object, struct BxDLTensor *out);
/* Free a consumed managed tensor (`versioned` says which struct) with the
 * GIL held: one made by dlpack.c is released directly, so also while the
 * interpreter finalizes; any other producer's deleter is called. */
void bufferext_dlpack_delete_locked(void *managed, int versioned);
/* The freelist of the capsules' holders (freelist.h): opened at module
 * exec, closed and emptied at module clear. */
void bufferext_dlpack_freelist_open(void);
void bufferext_dlpack_freelist_clear(void);
/* __dlpack__ of an open producer (producer.h's types): ValueError when it
 * is closed, else bufferext_dlpack. */
PyObject *bufferext_producer_dlpack(PyObject *op, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames);

/* _adapter_from_dlpack(source, capsule, readonly[, stream]) and
 * _cuda_bridge_stream(ordinal), for _bridges (adapter.c lists them). */
PyObject *bufferext_adapter_from_dlpack(PyObject *module,
                                        PyObject *const *args,
                                        Py_ssize_t nargs);
PyObject *bufferext_dlpack_bridge_stream(PyObject *module, PyObject *arg);

#endif
