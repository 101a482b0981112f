"""Run the documentation's C examples (example.c) against bufferext."""

import sys

import numpy as np

import bufferext
import bufferext_example as ex
from bufferext import BufferFlags

# The producer: a CPU exporter that answers PyBUF_DEVICE explicitly.
host = ex.HostArray()
assert bufferext.check_buffer_supports(host, BufferFlags.DEVICE)
assert bytes(host) == bytes(64)
with bufferext.get_buffer(host) as view:
    assert view.device is None and view.flags == BufferFlags.DEVICE
    assert host.exports == 1
assert host.exports == 0

# The device producer: refuses every CPU-only consumer.
dev = ex.DemoDevice()
for cpu_only in (memoryview, bytes):
    try:
        cpu_only(dev)
    except BufferError as exc:
        assert "bufferext_example.demo" in str(exc), exc
    else:
        raise AssertionError(f"{cpu_only} read device memory")
# numpy swallows the BufferError and wraps the object in a 0-d object
# array: it never sees the device pointer either.
assert np.asarray(dev).dtype == object
with bufferext.get_buffer(dev) as view:
    assert view.device == "bufferext_example.demo"
    assert type(view.device_info).__name__ == "OpaqueDeviceInfo"
    try:
        view.tobytes()
    except BufferError:
        pass
    else:
        raise AssertionError("tobytes() read device memory")
try:
    bufferext.get_buffer(dev, BufferFlags.WRITABLE | BufferFlags.DEVICE)
except BufferError as exc:
    assert "WRITABLE" in str(exc), exc
else:
    raise AssertionError("a read-only device buffer exported writable")

# The consumer: any exporter, CPU or device.
assert ex.describe(b"abc") == ("cpu", 3)
assert ex.describe(np.zeros((2, 3))) == ("cpu", 48)
assert ex.describe(bufferext.CPUBuffer((4,), "int32")) == ("cpu", 16)
assert ex.describe(host) == ("cpu", 64)
assert ex.describe(dev) == ("bufferext_example.demo", 16)
try:
    ex.describe(1)
except TypeError:
    pass
else:
    raise AssertionError("describe(1) did not raise TypeError")
print("example.c: all checks passed on Python", sys.version.split()[0])
