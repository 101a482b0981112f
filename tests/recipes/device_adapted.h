/* device_adapted.h -- forced ahead of a recipe's source (-include) by
 * tests/test_recipes_cpp.py: the recipe's export function as a device
 * exporter adapts it, by passing its device name to BufferExt_SetDevice
 * where the CPU recipe passes NULL, and changing nothing else.  The
 * recipe's own #include of bufferext.h is then a no-op (include guard),
 * so only its call is redirected here. */
#ifndef BUFFEREXT_TEST_DEVICE_ADAPTED_H
#define BUFFEREXT_TEST_DEVICE_ADAPTED_H

#include <bufferext.h>

#define DEVICE_ADAPTED_NAME "bufferext_tests.recipe_device"

static char device_adapted_info;

static inline int device_adapted_set_device(Py_buffer_extended *ext,
                                            PyObject *exporter, int flags,
                                            const char *device, void *info)
{
    (void)device;
    (void)info;
    return BufferExt_SetDevice(ext, exporter, flags, DEVICE_ADAPTED_NAME,
                               &device_adapted_info);
}

#define BufferExt_SetDevice device_adapted_set_device

#endif
