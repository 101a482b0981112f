/* fastmethod.h -- method descriptors that bind without an allocation
 * (fastmethod.c). */
#ifndef BUFFEREXT_MODULES_FASTMETHOD_H
#define BUFFEREXT_MODULES_FASTMETHOD_H
#include "parts.h"

/* Installed where it pays (BufferView's __enter__ and __exit__): before
 * 3.14 the with statement binds both on every use; from 3.14 on it loads
 * them unbound (LOAD_SPECIAL), so there is nothing to save and the
 * wrapper only costs (`with get_buffer(b): pass`, -O3, same host: 3.14
 * 117-127 ns without it, 165-170 ns with it; 3.15 127-130 against
 * 316-506 ns).  Figures for every version: docs/performance.rst, "The with
 * statement".  -DBUFFEREXT_FASTMETHOD=0 or 1 overrides, to measure. */
#ifndef BUFFEREXT_FASTMETHOD
#  if PY_VERSION_HEX < 0x030E0000
#    define BUFFEREXT_FASTMETHOD 1
#  else
#    define BUFFEREXT_FASTMETHOD 0
#  endif
#endif

#if BUFFEREXT_FASTMETHOD
/* Replace each of `names`, methods in type's dict, by a descriptor that
 * binds without an allocation.  0 or -1 with an exception. */
int bufferext_fastmethods(PyObject *module, PyTypeObject *type,
                          const char *const *names);
/* Free the bound methods' freelist (at module clear). */
void bufferext_fastmethods_clear(void);
#else
static inline int
bufferext_fastmethods(PyObject *module, PyTypeObject *type,
                      const char *const *names)
{
    (void)module, (void)type, (void)names;
    return 0;
}

static inline void
bufferext_fastmethods_clear(void)
{
}
#endif

#endif
