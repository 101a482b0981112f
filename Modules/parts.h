/* parts.h -- what every C file of the _bufferext module shares: the module
 * state's name (its fields: state.h), one init function per file (module.c
 * calls them), and the locks of free-threaded builds (lock.h).  Each file's
 * own shared declarations live in a header beside it (docs/internals.rst,
 * "The files", gives the floors). */
#ifndef BUFFEREXT_MODULES_PARTS_H
#define BUFFEREXT_MODULES_PARTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "bufferext.h"
#include "structmember.h"   /* T_PYSSIZET, READONLY (3.9-3.11) */
#include "lock.h"

/* The module state (its fields: state.h). */
typedef struct bufferext_state bufferext_state;

/* One init per file, in the order module.c calls them; each returns 0 or
 * -1 with an exception. */
int bufferext_init_view(PyObject *module);           /* view.c */
int bufferext_init_cpubuffer(PyObject *module);      /* cpubuffer.c */
int bufferext_init_cuda(PyObject *module);           /* cudabuffer.c */
int bufferext_init_ve(PyObject *module);             /* vebuffer.c */
int bufferext_init_adapter(PyObject *module);        /* adapter.c */
int bufferext_init_dlpack_exchange(PyObject *module);   /* dlpack_exchange.c */

#endif
