/* freelist.h -- the memory of dead objects of one type, kept for the next
 * (BufferView in view.c, the bound methods of fastmethod.c, the DLPack
 * capsules' holders in dlpack.c). */
#ifndef BUFFEREXT_MODULES_FREELIST_H
#define BUFFEREXT_MODULES_FREELIST_H
#include "parts.h"

/* Freelists (BufferView, fastmethod's bound methods, DLPack holders): how
 * many dead objects each keeps for reuse.  Off (0) without the GIL, which
 * they would need a lock for, and under AddressSanitizer, where a reused
 * object would hide a use after free; -DBUFFEREXT_FREELIST=0 turns them
 * off. */
#ifndef BUFFEREXT_FREELIST
#  if defined(Py_GIL_DISABLED) || defined(__SANITIZE_ADDRESS__)
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
/* The memory of dead objects of one type, kept for the next; open from
 * module init until the module is cleared. */
typedef struct {
    void *items[BUFFEREXT_FREELIST];
    int count, open;
} bufferext_freelist;

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

/* Close the list and free what it keeps with `free_item` (PyObject_GC_Del
 * for GC objects, PyMem_Free for memory from PyMem_Malloc). */
static inline void
bufferext_freelist_close(bufferext_freelist *f, void (*free_item)(void *))
{
    f->open = 0;
    while (f->count > 0) {
        free_item(f->items[--f->count]);
    }
}
#endif

#endif
