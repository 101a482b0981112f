/* staging.h -- waiting for and copying any exporter's memory through host
 * memory (staging.c): what BufferView's synchronize(), copy_to_host() and
 * copy_from_host() do once view.c has pinned the view. */
#ifndef BUFFEREXT_MODULES_STAGING_H
#define BUFFEREXT_MODULES_STAGING_H
#include "parts.h"
#include "cuda_driver.h"
#include "export.h"

/* CPU memory and the two devices whose device_info bufferext knows; any
 * other device has its own rules for readiness and copies.  0, or -1 with
 * BufferError naming `who`. */
int bufferext_stage_check(const Py_buffer_extended *ext, const char *who);

/* Wait until the memory `l` describes is ready, then (TO_HOST, FROM_HOST)
 * copy it to or from `host`, by the rules of its device; the export is
 * pinned and passed bufferext_stage_check.  Complete on return.  0, or
 * -1. */
int bufferext_stage_memory(bufferext_state *st, const char *who,
                           const Py_buffer_extended *ext,
                           const bufferext_export_layout *l,
                           bufferext_stage what, void *host);

/* copy_to_host (TO_HOST) and copy_from_host (FROM_HOST) of the pinned
 * export `ext` whose layout is `l` (`c_contiguous`: the layout's, which
 * the view computes lazily): `obj` is the target or the source.  0, or
 * -1. */
int bufferext_stage_copy(bufferext_state *st, const char *who,
                         const Py_buffer_extended *ext,
                         const bufferext_export_layout *l, int c_contiguous,
                         PyObject *obj, bufferext_stage what);

#endif
