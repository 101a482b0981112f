/* loader.h -- lazy loading of device libraries (the CUDA driver, VEO)
 * into a table of function pointers (loader.c). */
#ifndef BUFFEREXT_MODULES_LOADER_H
#define BUFFEREXT_MODULES_LOADER_H
#include "parts.h"

typedef struct {
    const char *label;          /* "CUDA driver" */
    const char *env_var;        /* "BUFFEREXT_CUDA_DRIVER" */
    const char *const *defaults;/* NULL-terminated candidate paths */
    const char *const *symbols; /* NULL-terminated symbol names */
    void **table;               /* filled in symbol order */
} bufferext_library_spec;

typedef struct {
    int state;                  /* 0 untried, 1 loaded, -1 failed, -2 off */
    void *handle;
    char path[512];             /* what was loaded, or the last candidate */
    char message[1024];         /* why it failed, naming what was tried */
} bufferext_library;

/* Load once (thread-safe under the GIL).  Returns 0 when loaded; -1 with
 * DeviceUnavailableError (of `st`) otherwise, its message from lib->message. */
int bufferext_library_load(bufferext_state *st,
                           const bufferext_library_spec *spec,
                           bufferext_library *lib);
/* A dict describing the library for bufferext.devices() (tries to load). */
PyObject *bufferext_library_status(const bufferext_library_spec *spec,
                                   bufferext_library *lib);
/* In a child forked after `runtime` ("CUDA", "VEO") was started in the
 * parent: raise DeviceUnavailableError (of `st`; RuntimeError when NULL)
 * naming `who` and saying why the runtime cannot be used there.  Each
 * driver keeps its own flag, set by its own pthread_atfork handler when
 * that runtime starts.  Returns -1. */
int bufferext_fork_error(bufferext_state *st, const char *who,
                         const char *runtime);

#endif
