/* view.h -- BufferView and get_buffer() (view.c). */
#ifndef BUFFEREXT_MODULES_VIEW_H
#define BUFFEREXT_MODULES_VIEW_H
#include "parts.h"

/* get_buffer(obj, flags=FULL_RO|DEVICE): a BufferView. */
PyObject *bufferext_get_buffer(PyObject *module, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames);
/* With a TypeError set by a failed request for obj's buffer: where obj
 * speaks no buffer protocol but one that as_buffer() bridges, replace it
 * by a TypeError of `who` (the function) saying so (the most common first
 * mistake is get_buffer(tensor)); else leave it.  Nothing of the caller's
 * may be held: the lookups on obj's type may run a metaclass's Python
 * code. */
void bufferext_hint_as_buffer(const char *who, PyObject *obj);
/* Free BufferView's freelist (at module clear). */
void bufferext_view_freelist_clear(void);

#endif
