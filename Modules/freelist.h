/* freelist.h -- the memory of dead objects of one type, kept for the next
 * (BufferView in view.c, the bound methods of fastmethod.c, the DLPack
 * capsules' holders in dlpack.c). */
#ifndef BUFFEREXT_MODULES_FREELIST_H
#define BUFFEREXT_MODULES_FREELIST_H
#include "parts.h"

/* Freelists (BufferView, fastmethod's bound methods, DLPack holders): how
 * many dead objects each keeps for reuse.  With the GIL, one list per
 * kind, under the GIL; without it, one per kind and thread (freelist.c),
 * as CPython keeps its own there.  Off (0) under AddressSanitizer, where a
 * reused object would hide a use after free; -DBUFFEREXT_FREELIST=0 turns
 * them off. */
#ifndef BUFFEREXT_FREELIST
#  if defined(__SANITIZE_ADDRESS__)
#    define BUFFEREXT_FREELIST 0
#  elif defined(__has_feature)
#    if __has_feature(address_sanitizer)
#      define BUFFEREXT_FREELIST 0
#    endif
#  endif
#endif
#ifndef BUFFEREXT_FREELIST
#  define BUFFEREXT_FREELIST 16
#endif

#if BUFFEREXT_FREELIST > 0
/* The kinds, each a row of a thread's lists without the GIL. */
enum {
    BUFFEREXT_FREELIST_VIEW,
    BUFFEREXT_FREELIST_BOUND,
    BUFFEREXT_FREELIST_HOLDER,
    BUFFEREXT_FREELIST_KINDS
};

/* A kind's list: open from module init until the module is cleared. */
typedef struct {
    int kind;                   /* BUFFEREXT_FREELIST_VIEW, ... */
    int open;                   /* stored whole (lock.h) without the GIL */
#ifndef Py_GIL_DISABLED
    int count;
    void *items[BUFFEREXT_FREELIST];
#endif
} bufferext_freelist;

/* Open `f`; what it keeps is freed with `free_item` (PyObject_GC_Del for
 * GC objects, PyMem_Free for memory from PyMem_Malloc). */
void bufferext_freelist_open(bufferext_freelist *f,
                             void (*free_item)(void *));
/* Close `f` and free what it keeps (this thread's, without the GIL; each
 * other thread's goes with that thread's state). */
void bufferext_freelist_close(bufferext_freelist *f);
#ifdef Py_GIL_DISABLED
/* Give this thread lists if `f` is open (freelist.c). */
void bufferext_freelist_renew(bufferext_freelist *f);
#endif

#ifndef Py_GIL_DISABLED
/* Memory for a new object, or NULL (then allocate). */
static inline void *
bufferext_freelist_pop(bufferext_freelist *f)
{
    return f->count > 0 ? f->items[--f->count] : NULL;
}

/* Keep the memory of a dead object (a GC object untracked): 1, or 0 when
 * the list is full or closed (the caller frees it then). */
static inline int
bufferext_freelist_push(bufferext_freelist *f, void *op)
{
    if (!f->open || f->count == BUFFEREXT_FREELIST) {
        return 0;
    }
    f->items[f->count++] = op;
    return 1;
}
#else
#  include "lock.h"
#  if defined(_MSC_VER)
#    define BUFFEREXT_THREAD_LOCAL __declspec(thread)
#  else
#    define BUFFEREXT_THREAD_LOCAL __thread
#  endif

/* A thread's lists (freelist.c). */
typedef struct {
    int let_go;                 /* by its thread state: another thread
                                 * cleared it; stored whole */
    unsigned long thread;       /* the thread (PyThread_get_thread_ident) */
    int count[BUFFEREXT_FREELIST_KINDS];
    void *items[BUFFEREXT_FREELIST_KINDS][BUFFEREXT_FREELIST];
} bufferext_thread_lists;

/* this thread's lists, or NULL */
extern BUFFEREXT_THREAD_LOCAL bufferext_thread_lists *bufferext_lists_here;

/* Memory for a new object from this thread's list, or NULL (then
 * allocate; the first time, or after its state let go of them, the thread
 * gets lists). */
static inline void *
bufferext_freelist_pop(bufferext_freelist *f)
{
    bufferext_thread_lists *l = bufferext_lists_here;

    if (l == NULL || BUFFEREXT_LOAD(l->let_go)) {
        bufferext_freelist_renew(f);
        return NULL;
    }
    return l->count[f->kind] > 0 ? l->items[f->kind][--l->count[f->kind]]
                                 : NULL;
}

/* Keep the memory of a dead object (a GC object untracked) in this
 * thread's list: 1, or 0 when it has none, or it is full or closed (the
 * caller frees it then). */
static inline int
bufferext_freelist_push(bufferext_freelist *f, void *op)
{
    bufferext_thread_lists *l = bufferext_lists_here;

    if (l == NULL || BUFFEREXT_LOAD(l->let_go) || !BUFFEREXT_LOAD(f->open) ||
        l->count[f->kind] == BUFFEREXT_FREELIST) {
        return 0;
    }
    l->items[f->kind][l->count[f->kind]++] = op;
    return 1;
}
#endif
#endif

#endif
