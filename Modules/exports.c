/* exports.c -- the fence a change on another thread than an object's
 * owner runs before it reads the owner's count (exports.h). */
#include "parts.h"
#include "exports.h"

#ifdef Py_GIL_DISABLED
#  if defined(__linux__)
#    include <linux/membarrier.h>
#    include <sys/syscall.h>
#    include <unistd.h>
#  endif

int bufferext_exports_fenced;

#  if defined(__linux__) && defined(__NR_membarrier)
static long
membarrier(int command)
{
    return syscall(__NR_membarrier, command, 0, 0);
}
#  endif

void
bufferext_exports_setup(void)
{
#  if defined(__linux__) && defined(__NR_membarrier)
    long commands = membarrier(MEMBARRIER_CMD_QUERY);

    /* Registering is per process and may be repeated (importing the
     * module again once it left sys.modules runs its exec again): it only
     * ever turns the fence on. */
    if (commands > 0 && (commands & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
        membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0) {
        __atomic_store_n(&bufferext_exports_fenced, 1, __ATOMIC_RELAXED);
    }
#  endif
}

void
bufferext_exports_fence_all(void)
{
#  if defined(__linux__) && defined(__NR_membarrier)
    /* Registered before any owner was set, so it cannot fail: if it did,
     * an export could be missed and memory freed under it. */
    if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) {
        return;
    }
#  endif
    Py_FatalError("bufferext: membarrier(PRIVATE_EXPEDITED) failed after "
                  "its registration");
}
#else
void
bufferext_exports_setup(void)
{
}
#endif
