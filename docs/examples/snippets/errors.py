import bufferext
from bufferext import BufferFlags

buf = bufferext.CPUBuffer(4, "int32", readonly=True)

try:
    bufferext.get_buffer(42)                      # not a buffer exporter
except TypeError as exc:
    print("TypeError:", exc)

try:
    bufferext.get_buffer(buf, BufferFlags.WRITABLE)   # cannot export so
except BufferError as exc:
    print("BufferError:", exc)

try:
    bufferext.get_buffer(buf, 1 << 40)            # flags outside a C int
except OverflowError as exc:
    print("OverflowError:", exc)

view = bufferext.get_buffer(buf)
view.release()
view.release()                                    # a second release: harmless
try:
    view.shape                                    # use after release
except ValueError as exc:
    print("ValueError:", exc)

try:
    bufferext.CPUBuffer((2, -1))                  # absurd shape
except ValueError as exc:
    print("ValueError:", exc)

try:
    bufferext.CPUBuffer(3, "U10")                 # not a numeric dtype
except TypeError as exc:
    print("TypeError:", exc)

print(bufferext.check_buffer_supports(42, BufferFlags.DEVICE))  # False, never raises
