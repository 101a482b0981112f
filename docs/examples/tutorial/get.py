"""Tutorial, step 2: acquire an extended buffer and read what it says."""

import numpy as np

import bufferext

buf = bufferext.CPUBuffer((2, 3), "float32")
np.asarray(buf)[...] = [[0, 1, 2], [3, 4, 5]]   # numpy writes into it: no copy

with bufferext.get_buffer(buf) as view:          # FULL_RO | DEVICE by default
    print(view.device)                           # None: the memory is on the CPU
    print(view.shape, view.strides, view.format, view.itemsize)
    print(np.frombuffer(view.tobytes(), np.float32))
    print(buf.exports)                           # 1: the view holds an export
print(buf.exports)                               # 0: released with the block
