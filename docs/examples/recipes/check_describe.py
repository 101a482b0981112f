"""Run by the C++ recipes' tests: python check_describe.py MODULE, where
MODULE (bufferext_pybind11, bufferext_nanobind) exposes describe(obj)."""

import importlib
import sys

import bufferext

describe = importlib.import_module(sys.argv[1]).describe

buf = bufferext.CPUBuffer((2, 3), "float32")
assert describe(buf) == {"device": None, "shape": (2, 3), "format": "f",
                         "readonly": False}, describe(buf)
assert buf.exports == 0, "describe() did not release its buffer"
buf.close()                         # refused while a buffer is still exported
assert describe(b"abcd") == {"device": None, "shape": (4,), "format": "B",
                             "readonly": True}, describe(b"abcd")
try:
    describe(1)
except TypeError:
    pass
else:
    raise AssertionError("describe(1) did not raise TypeError")
try:
    describe(buf)                   # closed: the exporter refuses
except BufferError:
    pass
else:
    raise AssertionError("describe(closed buffer) did not raise")
print(f"{sys.argv[1]}: ok")
