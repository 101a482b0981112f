/* blockcache.h -- CPUBuffer's blocks (blockcache.c). */
#ifndef BUFFEREXT_MODULES_BLOCKCACHE_H
#define BUFFEREXT_MODULES_BLOCKCACHE_H
#include "parts.h"

/* Memory for `nbytes` bytes, zero-filled if `zeroed`, else with
 * unspecified contents (possibly a cached block): the block to free, its
 * aligned start in *data, its mapped size in *mapped (0 if it came from
 * the C allocator).  NULL with ValueError or MemoryError. */
void *bufferext_block_alloc(Py_ssize_t nbytes, int zeroed, char **data,
                            size_t *mapped);
/* Give back a block from bufferext_block_alloc: a mapped one to the cache
 * (which may wait for the cache's mutex). */
void bufferext_block_free(void *allocation, size_t mapped);
/* Unmap every cached block; the bytes they held. */
size_t bufferext_block_cache_clear(void);
/* Read the cache's limit from BUFFEREXT_CPU_CACHE_BYTES (module init).  0,
 * or -1 with ValueError. */
int bufferext_block_cache_configure(void);

#endif
