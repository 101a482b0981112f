/* loader.c -- lazy loading of device libraries (CUDA driver, VEO) into a
 * table of function pointers: one dlopen, one dlsym per symbol.  An
 * environment variable names another path or "none"; "not found" and
 * "found but failed to load" are distinct messages, never a crash. */
#include "loader.h"
#include "state.h"

#ifdef _WIN32
#  include <windows.h>
#  define LIB_OPEN(path) ((void *)LoadLibraryA(path))
#  define LIB_SYM(handle, name) \
    ((void *)GetProcAddress((HMODULE)(handle), (name)))
#  define LIB_CLOSE(handle) FreeLibrary((HMODULE)(handle))
#  define LIB_ERROR() "LoadLibrary failed"
#else
#  include <dlfcn.h>
#  define LIB_OPEN(path) dlopen((path), RTLD_NOW | RTLD_LOCAL)
#  define LIB_SYM(handle, name) dlsym((handle), (name))
#  define LIB_CLOSE(handle) dlclose(handle)
#  define LIB_ERROR() dlerror()
#endif

BUFFEREXT_MUTEX(load_mutex);

/* A path (not a bare name searched by the loader) naming an existing file. */
static int
file_exists(const char *path)
{
    FILE *file;

    if (strchr(path, '/') == NULL && strchr(path, '\\') == NULL) {
        return 0;
    }
    file = fopen(path, "rb");
    if (file == NULL) {
        return 0;
    }
    fclose(file);
    return 1;
}

static void
try_load(const bufferext_library_spec *spec, bufferext_library *lib)
{
    const char *env = getenv(spec->env_var);
    const char *single[2] = {NULL, NULL};
    const char *const *candidate = spec->defaults;
    char tried[512] = "";
    size_t used = 0;
    int i;

    if (env != NULL && strcmp(env, "none") == 0) {
        lib->state = -2;
        PyOS_snprintf(lib->message, sizeof(lib->message),
                      "%s disabled by %s=none", spec->label, spec->env_var);
        return;
    }
    if (env != NULL && env[0] != '\0') {
        single[0] = env;
        candidate = single;
    }
    for (; *candidate != NULL; candidate++) {
        void *handle = LIB_OPEN(*candidate);
        const char *why;
        PyOS_snprintf(lib->path, sizeof(lib->path), "%s", *candidate);
        if (handle == NULL) {
            why = LIB_ERROR();
            if (file_exists(*candidate)) {
                lib->state = -1;
                PyOS_snprintf(lib->message, sizeof(lib->message),
                              "%s found at %s but failed to load: %s",
                              spec->label, *candidate, why ? why : "?");
                return;
            }
            used += (size_t)PyOS_snprintf(tried + used, sizeof(tried) - used,
                                          "%s%s (%s)", used ? "; " : "",
                                          *candidate, why ? why : "?");
            if (used >= sizeof(tried)) {
                used = sizeof(tried) - 1;
            }
            continue;
        }
        for (i = 0; spec->symbols[i] != NULL; i++) {
            spec->table[i] = LIB_SYM(handle, spec->symbols[i]);
            if (spec->table[i] == NULL) {
                lib->state = -1;
                PyOS_snprintf(lib->message, sizeof(lib->message),
                              "%s found at %s but failed to load: it lacks "
                              "the symbol %s", spec->label, *candidate,
                              spec->symbols[i]);
                memset(spec->table, 0, sizeof(void *) * (size_t)i);
                LIB_CLOSE(handle);
                return;
            }
        }
        lib->handle = handle;
        lib->state = 1;
        lib->message[0] = '\0';
        return;
    }
    lib->state = -1;
    PyOS_snprintf(lib->message, sizeof(lib->message),
                  "%s not found: looked for %s%s%s%s", spec->label, tried,
                  single[0] == NULL ? "; set " : "",
                  single[0] == NULL ? spec->env_var : "",
                  single[0] == NULL ? " to its path" : "");
}

/* The library's state after the first try, made once per process: the
 * first caller loads, the others wait for it.  path and message are
 * written only by that try, so they may be read once this returned. */
static int
library_state(const bufferext_library_spec *spec, bufferext_library *lib)
{
    int state;

    BUFFEREXT_MUTEX_LOCK(load_mutex);
    if (lib->state == 0) {
        try_load(spec, lib);
    }
    state = lib->state;
    BUFFEREXT_MUTEX_UNLOCK(load_mutex);
    return state;
}

int
bufferext_library_load(bufferext_state *st,
                       const bufferext_library_spec *spec,
                       bufferext_library *lib)
{
    if (library_state(spec, lib) == 1) {
        return 0;
    }
    PyErr_SetString(st->DeviceUnavailableError, lib->message);
    return -1;
}

PyObject *
bufferext_library_status(const bufferext_library_spec *spec,
                         bufferext_library *lib)
{
    PyObject *looked_for;
    const char *env = getenv(spec->env_var);
    int i, state = library_state(spec, lib);

    if (state == -2) {
        looked_for = PyList_New(0);      /* disabled: nothing looked for */
    }
    else if (env != NULL && env[0] != '\0') {
        looked_for = Py_BuildValue("[s]", env);
    }
    else {
        looked_for = PyList_New(0);
        for (i = 0; looked_for != NULL && spec->defaults[i] != NULL; i++) {
            PyObject *path = PyUnicode_FromString(spec->defaults[i]);
            if (path == NULL || PyList_Append(looked_for, path) < 0) {
                Py_XDECREF(path);
                Py_CLEAR(looked_for);
                break;
            }
            Py_DECREF(path);
        }
    }
    if (looked_for == NULL) {
        return NULL;
    }
    return Py_BuildValue("{s:s,s:s,s:N,s:O,s:z,s:z}",
                         "library", spec->label, "env_var", spec->env_var,
                         "looked_for", looked_for,
                         "loaded", state == 1 ? Py_True : Py_False,
                         "path", state == 1 ? lib->path : NULL,
                         "error", state == 1 ? NULL : lib->message);
}

int
bufferext_fork_error(bufferext_state *st, const char *who,
                     const char *runtime)
{
    PyErr_Format(st != NULL ? st->DeviceUnavailableError
                            : PyExc_RuntimeError,
                 "%s: this process was forked after %s was started, and %s "
                 "cannot be used in such a child (its contexts and memory "
                 "belong to the parent); start it with multiprocessing's "
                 "'spawn' or 'forkserver' method, or start %s only after "
                 "the fork", who, runtime, runtime, runtime);
    return -1;
}
