import numpy as np

import bufferext
from bufferext import BufferFlags


class SimpleOnly(bytearray):
    """A Python class can declare its supported flags too."""

    __buffer_supported_flags__ = -1     # PyBUF_SIMPLE requests only


for obj in (b"bytes", np.zeros(3), bufferext.CPUBuffer(3), SimpleOnly(3)):
    print(f"{type(obj).__name__:11}",
          bufferext.check_buffer_supports(obj, BufferFlags.DEVICE),
          bufferext.check_buffer_supports(obj, BufferFlags.ND),
          hex(bufferext.supported_flags(obj)))
# bytes       False True 0x1fd
# ndarray     False True 0x1fd
# CPUBuffer   True True 0x101fd
# SimpleOnly  False False 0x0

# Required flags are checked before the exporter is called:
try:
    bufferext.get_buffer(SimpleOnly(3), BufferFlags.ND)
except BufferError as exc:
    print(exc)
# SimpleOnly does not support the buffer request flags ND (declared
# __buffer_supported_flags__ = -1, PyBUF_SIMPLE only)

# PyBUF_DEVICE is a soft request: legacy exporters answer with CPU memory.
with bufferext.get_buffer(b"abc") as view:
    print(view.device, view.flags)    # None 0  (bytes ignored the request)
