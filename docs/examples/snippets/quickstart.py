import numpy as np

import bufferext
from bufferext import BufferFlags

# A producer: 64-byte aligned CPU memory, zero-filled.
buf = bufferext.CPUBuffer((2, 3), "float32")

# Ask before you request: which flags does each exporter honour?
print(bufferext.check_buffer_supports(buf, BufferFlags.DEVICE))      # True
print(bufferext.check_buffer_supports(b"abc", BufferFlags.DEVICE))   # False
print(bufferext.check_buffer_supports(b"abc", BufferFlags.ND))       # True

# Acquire an extended buffer: where is the memory, and how is it laid out?
with bufferext.get_buffer(buf) as view:
    print(view.device, view.shape, view.strides, view.format)
    # None (2, 3) (12, 4) f  -- device None means CPU memory

# Zero-copy both ways with numpy.
a = np.asarray(buf)          # through the buffer protocol
a[0, :] = [1, 2, 3]
print(buf.to_host()[0])      # [1. 2. 3.]
del a                        # release the export

# DLPack: any consumer that speaks it.
b = np.from_dlpack(buf)
print(b.sum())               # 6.0
del b
buf.close()                  # free now (BufferError while still exported)
