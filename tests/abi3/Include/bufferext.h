/* bufferext.h -- the extended buffer protocol for device memory, backported
 * to CPython 3.9 and later.  The only header C extensions include:
 *
 *     #define PY_SSIZE_T_CLEAN
 *     #include <Python.h>
 *     #include <bufferext.h>      // -I bufferext.get_include()
 *
 * Parts: bufferext/core.h (flags, Py_buffer_extended, supported flags, the
 * consumer and exporter helpers; it includes bufferext/internal/accel.h, the
 * internal accelerator that reads CPython's type internals, or with
 * Py_LIMITED_API >= 3.11 bufferext/internal/limited.h, its stable-ABI
 * stand-in), bufferext/cuda.h and bufferext/ve.h (the device_info layouts
 * of "bufferext.cuda" and "bufferext.ve").
 * Header-only: nothing from the bufferext package is needed at run time.
 * Specification: docs/capi.rst and docs/devices.rst.
 */
#ifndef BUFFEREXT_H
#define BUFFEREXT_H

#include <Python.h>
#include <stdint.h>

#define BUFFEREXT_VERSION_MAJOR 0
#define BUFFEREXT_VERSION_MINOR 1
#define BUFFEREXT_VERSION_MICRO 0
/* 0xMMmmuu00, like PY_VERSION_HEX */
#define BUFFEREXT_VERSION_HEX                                          \
    ((BUFFEREXT_VERSION_MAJOR << 24) | (BUFFEREXT_VERSION_MINOR << 16) | \
     (BUFFEREXT_VERSION_MICRO << 8))

#define BUFFEREXT_H_INSIDE
#include "bufferext/core.h"
#include "bufferext/cuda.h"
#include "bufferext/ve.h"
#undef BUFFEREXT_H_INSIDE

#endif /* BUFFEREXT_H */
