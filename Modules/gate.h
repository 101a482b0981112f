/* gate.h -- the one validation of an export another exporter filled
 * (gate.c). */
#ifndef BUFFEREXT_MODULES_GATE_H
#define BUFFEREXT_MODULES_GATE_H
#include "parts.h"

/* BufferExt_GetBuffer(obj, ext, flags) and the one validation of
 * the export another exporter filled, before anything reads it: the C
 * conventions (an exception iff it failed), ndim, itemsize, len, readonly,
 * format, shape, strides, suboffsets, the extent and our device names'
 * device_info.  0 with `ext` held, or -1 with an exception and nothing held
 * (a refusal is BufferError "Type: exported an invalid buffer: field = value
 * ..."). */
int bufferext_gate_acquire(PyObject *exporter, Py_buffer_extended *ext,
                           int flags);
/* Its format rule alone (printable, and the item size of a format it can
 * size equal to `itemsize`), for layouts read from other protocols; `who`
 * names the source in the BufferError. */
int bufferext_gate_format(const char *who, const char *format,
                          Py_ssize_t itemsize);
/* Its span rule alone: the first dimension whose stride, with those before
 * it, reaches past PY_SSIZE_T_MAX bytes, or -1 (none, or an empty array). */
int bufferext_span_overflow(int ndim, const Py_ssize_t *shape,
                            const Py_ssize_t *strides, Py_ssize_t itemsize);
/* The bytes a non-empty layout's items lie in, whose spans passed
 * bufferext_span_overflow: [buf + *low, buf + *high), *low <= 0 (negative
 * strides reach below buf). */
void bufferext_span_bounds(int ndim, const Py_ssize_t *shape,
                           const Py_ssize_t *strides, Py_ssize_t itemsize,
                           Py_ssize_t *low, Py_ssize_t *high);
/* C-order strides for a layout that passed the gate (sizes of 0 count as 1;
 * the outer strides of an empty array too large to multiply are 0). */
void bufferext_c_strides(int ndim, const Py_ssize_t *shape,
                         Py_ssize_t itemsize, Py_ssize_t *strides);

#endif
