/* fastmethod.h -- method descriptors that bind without an allocation
 * (fastmethod.c). */
#ifndef BUFFEREXT_MODULES_FASTMETHOD_H
#define BUFFEREXT_MODULES_FASTMETHOD_H
#include "parts.h"

/* Replace each of `names`, methods in type's dict, by a descriptor that
 * binds without an allocation (the with statement binds __enter__ and
 * __exit__ on every use).  0 or -1 with an exception. */
int bufferext_fastmethods(PyObject *module, PyTypeObject *type,
                          const char *const *names);
/* Free the bound methods' freelist (at module clear). */
void bufferext_fastmethods_clear(void);

#endif
