"""Tutorial, step 1: ask an object what it honours before you request."""

import numpy as np

import bufferext
from bufferext import BufferFlags

array = np.arange(6.0).reshape(2, 3)          # numpy: a buffer exporter
buf = bufferext.CPUBuffer((2, 3), "float64")  # bufferext's own CPU producer

# Every exporter honours the flags that existed before the draft, unless
# its type declares otherwise; a producer of the extended protocol also
# declares DEVICE (it answers an extended request, saying where its memory is).
print(bufferext.supported_flags(array))
print(bufferext.supported_flags(buf))
print(bufferext.check_buffer_supports(array, BufferFlags.DEVICE))
print(bufferext.check_buffer_supports(buf, BufferFlags.DEVICE | BufferFlags.WRITABLE))
