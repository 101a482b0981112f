/* exports.h -- the export count of an object whose close() or resize()
 * must refuse while it is exported: on free-threaded builds, counted and
 * checked by its exporters without the object's lock.
 *
 * With the GIL the count is a plain integer, as it always was.  Without
 * it, every export and release would otherwise take the object's critical
 * section (two compare-and-swaps each, 25.8 ns for a CPUBuffer's get and
 * release on 3.13t against 4.3 ns for `bytes`).  Instead:
 *
 * - An exporter counts its export first, then reads `changing`: 0 means no
 *   change (close, resize) is under way and none can start until the
 *   export is released: it may read the object's layout without the lock.
 *   1 means one is: it takes the count back and goes the locked way.
 * - A change, in the object's critical section (which orders it after
 *   every other change and every locked reader), sets `changing`, then
 *   reads the count: 0 lets it go on, more refuses it.  Either the
 *   exporter sees `changing` or the change sees the export: both sides
 *   store first and load second, with a full fence between (Dekker's
 *   pattern).
 * - Counting costs one atomic add, except on the thread that made the
 *   object (`owner`, where nearly every export of a CPUBuffer is made):
 *   there it is a plain store to `owned`, which no other thread writes.
 *   The fence the owner's side needs comes from the changing thread: when
 *   that is another thread, it makes every thread of the process run a
 *   full barrier (Linux's membarrier, registered at module init) before
 *   it reads `owned`.  Where that cannot be had (another system, a kernel
 *   or sandbox that refuses it) `owner` stays 0 and every thread uses the
 *   atomic add.
 *
 * A change and an export that meet may both back off: the change is
 * refused (naming the export it saw) and the export goes the locked way,
 * where it waits for the change's section and then succeeds, as if it had
 * come first and the close been refused while it was held.  An exporter
 * on the locked way that finds `changing` set (a change whose section was
 * suspended while its thread waited) refuses by name rather than read a
 * layout in the middle of a change. */
#ifndef BUFFEREXT_MODULES_EXPORTS_H
#define BUFFEREXT_MODULES_EXPORTS_H
#include <Python.h>

typedef struct {
    Py_ssize_t n;               /* the count (without the GIL: atomic, by
                                   any thread but the owner) */
#ifdef Py_GIL_DISABLED
    Py_ssize_t owned;           /* counted by `owner`, its stores only */
    uintptr_t owner;            /* _Py_ThreadId() of the maker, or 0 */
    int changing;               /* a change is under way */
#endif
} bufferext_exports;

#ifdef Py_GIL_DISABLED
/* Whether a changing thread can make the others run a full barrier (set at
 * module init by bufferext_exports_setup; read before any object exists). */
extern int bufferext_exports_fenced;
/* Make every thread of the process run a full memory barrier. */
void bufferext_exports_fence_all(void);
#endif
/* At module init: learn whether the fence above can be had.  Never fails
 * (without it, owners count atomically like every other thread). */
void bufferext_exports_setup(void);

/* A new object's count (its memory is zeroed): remember its maker. */
static inline void
bufferext_exports_init(bufferext_exports *e)
{
#ifdef Py_GIL_DISABLED
    e->owner = __atomic_load_n(&bufferext_exports_fenced, __ATOMIC_RELAXED)
                   ? _Py_ThreadId() : 0;
#else
    (void)e;
#endif
}

/* Count one export, in or out of the object's critical section. */
static inline void
bufferext_exports_add(bufferext_exports *e)
{
#ifdef Py_GIL_DISABLED
    if (e->owner == _Py_ThreadId()) {
        __atomic_store_n(&e->owned, e->owned + 1, __ATOMIC_RELAXED);
        /* the store stays before the caller's load of `changing` in the
         * instruction stream; the changing thread's fence orders it */
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
    }
    else {
        __atomic_fetch_add(&e->n, 1, __ATOMIC_SEQ_CST);
    }
#else
    e->n++;
#endif
}

/* Take one export back (releasebuffer, unpin), from any thread. */
static inline void
bufferext_exports_remove(bufferext_exports *e)
{
#ifdef Py_GIL_DISABLED
    if (e->owner == _Py_ThreadId()) {
        __atomic_store_n(&e->owned, e->owned - 1, __ATOMIC_RELEASE);
    }
    else {
        __atomic_fetch_sub(&e->n, 1, __ATOMIC_RELEASE);
    }
#else
    e->n--;
#endif
}

/* Without the object's lock: count one export and return 1 when the
 * object may be read (no change is under way, none starts before the
 * export is removed); else 0 with nothing counted: take the lock. */
static inline int
bufferext_exports_enter(bufferext_exports *e)
{
    bufferext_exports_add(e);
#ifdef Py_GIL_DISABLED
    if (__atomic_load_n(&e->changing, __ATOMIC_SEQ_CST) != 0) {
        bufferext_exports_remove(e);
        return 0;
    }
#endif
    return 1;
}

/* A read of what an export would read (the open flag, the layout) that
 * keeps nothing: 1, read it and end with bufferext_exports_read_end; 0,
 * take the lock.  With the GIL nothing can change meanwhile, so nothing is
 * counted; without it, an export count is held for the read. */
static inline int
bufferext_exports_read_begin(bufferext_exports *e)
{
#ifdef Py_GIL_DISABLED
    return bufferext_exports_enter(e);
#else
    (void)e;
    return 1;
#endif
}

static inline void
bufferext_exports_read_end(bufferext_exports *e)
{
#ifdef Py_GIL_DISABLED
    bufferext_exports_remove(e);
#else
    (void)e;
#endif
}

#ifdef Py_GIL_DISABLED
/* The two counts' sum: an export the owner counted may be removed by
 * another thread, from `n`. */
static inline Py_ssize_t
bufferext_exports_sum(bufferext_exports *e)
{
    return __atomic_load_n(&e->owned, __ATOMIC_ACQUIRE) +
           __atomic_load_n(&e->n, __ATOMIC_ACQUIRE);
}
#endif

/* The live exports now: exact with the GIL, or where every counter holds
 * the object's lock (a BufferView's re-exports); elsewhere a getter's
 * figure, the two counts read one after the other (never below 0). */
static inline Py_ssize_t
bufferext_exports_count(bufferext_exports *e)
{
#ifdef Py_GIL_DISABLED
    Py_ssize_t live = bufferext_exports_sum(e);
    return live < 0 ? 0 : live;
#else
    return e->n;
#endif
}

/* In the object's critical section: start a change that no export may see.
 * Returns the live exports: 0, the change may go on and must end with
 * bufferext_exports_end_change before the section ends (a wait meanwhile
 * suspends the section: the locked ways refuse while `changing` is set);
 * more, it must not (nothing to end). */
static inline Py_ssize_t
bufferext_exports_begin_change(bufferext_exports *e)
{
#ifdef Py_GIL_DISABLED
    Py_ssize_t live;

    __atomic_store_n(&e->changing, 1, __ATOMIC_SEQ_CST);
    /* the store before the loads below, on every architecture */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (e->owner != 0 && e->owner != _Py_ThreadId()) {
        bufferext_exports_fence_all();
    }
    live = bufferext_exports_sum(e);
    if (live != 0) {
        __atomic_store_n(&e->changing, 0, __ATOMIC_RELEASE);
    }
    return live;
#else
    return e->n;
#endif
}

static inline void
bufferext_exports_end_change(bufferext_exports *e)
{
#ifdef Py_GIL_DISABLED
    __atomic_store_n(&e->changing, 0, __ATOMIC_RELEASE);
#else
    (void)e;
#endif
}

/* In the object's critical section: whether a change is under way (one
 * that let the section go while it waited). */
static inline int
bufferext_exports_changing(bufferext_exports *e)
{
#ifdef Py_GIL_DISABLED
    return __atomic_load_n(&e->changing, __ATOMIC_ACQUIRE);
#else
    (void)e;
    return 0;
#endif
}

#endif
