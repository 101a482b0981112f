/* freelist.c -- opening and closing the freelists of freelist.h, and,
 * without the GIL, each thread's own lists.
 *
 * Without the GIL a list shared by threads would need a lock, which costs
 * about what it saves, so each thread keeps its own, as CPython keeps its
 * freelists in each thread's state.  Ours hang from a thread-local pointer
 * (freelist.h), and a capsule in the dict of the thread state they were
 * made under frees them when that dict goes (PyThreadState_Clear, as the
 * thread ends; or another library removing the key), so a thread leaves
 * nothing behind.  A state cleared by another thread marks them let go
 * instead, as only their own thread may touch them.  The kept objects are
 * dead memory, freed with PyObject_GC_Del or PyMem_Free; the only Python
 * code that can run here is another library's object dropped from the
 * lists' key when they are stored (bufferext_freelist_renew). */
#include "freelist.h"

#if BUFFEREXT_FREELIST > 0

/* how each kind's memory is freed, set by its open (the same each time;
 * without the GIL read by any thread's lists_destroy, so stored whole) */
typedef void (*free_function)(void *);
static free_function free_items[BUFFEREXT_FREELIST_KINDS];

/* Free the `*count` objects of `items`, leaving none. */
static void
free_kept(void **items, int *count, free_function free_item)
{
    while (*count > 0) {
        free_item(items[--*count]);
    }
}

#ifndef Py_GIL_DISABLED

void
bufferext_freelist_open(bufferext_freelist *f, void (*free_item)(void *))
{
    free_items[f->kind] = free_item;
    f->open = 1;
}

void
bufferext_freelist_close(bufferext_freelist *f)
{
    f->open = 0;
    free_kept(f->items, &f->count, free_items[f->kind]);
}

#else

BUFFEREXT_THREAD_LOCAL bufferext_thread_lists *bufferext_lists_here;

#define CAPSULE_NAME "bufferext._bufferext.freelists"

/* Free what `l` keeps, and `l`. */
static void
lists_free(bufferext_thread_lists *l)
{
    int kind;

    for (kind = 0; kind < BUFFEREXT_FREELIST_KINDS; kind++) {
        free_kept(l->items[kind], &l->count[kind],
                  BUFFEREXT_LOAD(free_items[kind]));
    }
    PyMem_RawFree(l);
}

/* The capsule's destructor: a thread state's dict let go of the lists
 * kept under it (the state is being cleared, maybe by another thread; or
 * a library removed the key).  Freed here when no other thread can be
 * using them: this is their thread, or one that has ended and whose
 * identity this one took.  Else they are marked let go, and their thread
 * frees them when it next needs lists (if it has ended without clearing
 * its own state, or this is a fork's child, where the other threads'
 * states are cleared but the threads are gone, they are lost: at most
 * BUFFEREXT_FREELIST objects of each kind, once). */
static void
lists_destroy(PyObject *capsule)
{
    bufferext_thread_lists *l = PyCapsule_GetPointer(capsule, CAPSULE_NAME);

    if (l == NULL) {
        PyErr_Clear();              /* not ours: cannot happen */
    }
    else if (l->thread == PyThread_get_thread_ident()) {
        if (bufferext_lists_here == l) {
            bufferext_lists_here = NULL;
        }
        lists_free(l);
    }
    else {
        BUFFEREXT_STORE(l->let_go, 1);
    }
}

void
bufferext_freelist_renew(bufferext_freelist *f)
{
    bufferext_thread_lists *l = bufferext_lists_here;
    PyThreadState *tstate = PyThreadState_GetUnchecked();
    PyObject *exc, *dict, *key, *capsule;

    if (l != NULL && BUFFEREXT_LOAD(l->let_go)) {
        bufferext_lists_here = NULL;
        lists_free(l);
    }
    /* none while the module is closed, nor while the state is being
     * cleared (a finalizer its clearing runs after its dict went would
     * make a dict nothing clears: PyThreadState_Clear sets `finalizing`
     * first) */
    if (!BUFFEREXT_LOAD(f->open) || tstate == NULL ||
        tstate->_status.finalizing) {
        return;
    }
    /* An error here is not reported: the allocation goes on without
     * lists, and an exception already set is kept. */
    exc = PyErr_GetRaisedException();
    l = PyMem_RawCalloc(1, sizeof(*l));
    dict = l == NULL ? NULL : PyThreadState_GetDict();
    /* A key of its own, not interned (as PyDict_SetItemString's is):
     * threads interning one new str at once race in intern_common
     * (python/cpython#129701, in 3.13.5), and threads started together
     * make their lists together. */
    key = dict == NULL ? NULL : PyUnicode_FromString(CAPSULE_NAME);
    capsule = key == NULL ? NULL
                          : PyCapsule_New(l, CAPSULE_NAME, lists_destroy);
    if (capsule == NULL) {
        PyMem_RawFree(l);
    }
    else {
        l->thread = PyThread_get_thread_ident();
        /* Published first: the store drops what the key held, which may
         * run Python code (an object another library put there), and
         * that code may allocate from the lists or remove the key.  From
         * here the capsule owns `l` (lists_destroy unpublishes it), so it
         * is not touched after. */
        bufferext_lists_here = l;
        (void)PyDict_SetItem(dict, key, capsule);
        Py_DECREF(capsule);         /* if the dict holds it no more: freed */
    }
    Py_XDECREF(key);
    PyErr_Clear();
    PyErr_SetRaisedException(exc);
}

void
bufferext_freelist_open(bufferext_freelist *f, void (*free_item)(void *))
{
    BUFFEREXT_STORE(free_items[f->kind], free_item);
    BUFFEREXT_STORE(f->open, 1);
}

void
bufferext_freelist_close(bufferext_freelist *f)
{
    bufferext_thread_lists *l = bufferext_lists_here;

    BUFFEREXT_STORE(f->open, 0);
    if (l != NULL && !BUFFEREXT_LOAD(l->let_go)) {
        free_kept(l->items[f->kind], &l->count[f->kind],
                  BUFFEREXT_LOAD(free_items[f->kind]));
    }
}

#endif
#endif
