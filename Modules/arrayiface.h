/* arrayiface.h -- the array-interface imports (arrayiface.c). */
#ifndef BUFFEREXT_MODULES_ARRAYIFACE_H
#define BUFFEREXT_MODULES_ARRAYIFACE_H
#include "parts.h"

/* _adapter_from_layout(source, protocol, ptr, shape, strides, format,
 * itemsize, readonly, device, handle, pin), for _bridges. */
PyObject *bufferext_adapter_from_layout(PyObject *module, PyObject *args);

#endif
