/* view.h -- BufferView and get_buffer() (view.c). */
#ifndef BUFFEREXT_MODULES_VIEW_H
#define BUFFEREXT_MODULES_VIEW_H
#include "parts.h"

/* get_buffer(obj, flags=FULL_RO|DEVICE): a BufferView. */
PyObject *bufferext_get_buffer(PyObject *module, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames);
/* Free BufferView's freelist (at module clear). */
void bufferext_view_freelist_clear(void);

#endif
