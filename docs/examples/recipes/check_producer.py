"""Run by the C++ recipes' tests: python check_producer.py MODULE, where
MODULE (bufferext_pybind11, bufferext_nanobind) exposes Matrix(rows=2,
cols=3), the producer recipe (host_matrix.hpp), beside describe(obj).
Only the standard library and bufferext: the recipes' builds have no
numpy."""

import importlib
import json
import struct
import subprocess
import sys

import bufferext
from bufferext import BufferFlags as F

name = sys.argv[1]
module = importlib.import_module(name)
Matrix = module.Matrix


def pattern(rows, cols):
    """The items of Matrix(rows, cols): (i, j) is i * cols + j."""
    return tuple(float(k) for k in range(rows * cols))


# The conformance report of `python -m bufferext check MODULE:Matrix
# --call` (a Matrix() made by calling the class): conformant, and nothing
# it even warns about.
done = subprocess.run(
    [sys.executable, "-m", "bufferext", "check", f"{name}:Matrix", "--call",
     "--json"], capture_output=True, text=True, timeout=120)
assert done.returncode == 0, done.stdout + done.stderr
report = json.loads(done.stdout)
assert report["conformant"], report
assert report["protocols"]["buffer"], report
assert report["protocols"]["declared_supported_flags"] == F.LEGACY | F.DEVICE
flagged = [f for f in report["findings"]
           if f["level"] in ("violation", "warning")]
assert not flagged, flagged
assert {"level": "ok", "subject": "extended request",
        "message": "CPU memory, answered explicitly (flags has DEVICE)"} \
    in report["findings"], report["findings"]

m = Matrix()
assert m.shape == (2, 3) and m.exports == 0
assert bufferext.check_buffer_supports(m, F.DEVICE)
assert bufferext.check_buffer_supports(m, F.FULL | F.DEVICE)

# an extended request, answered explicitly as CPU memory
with bufferext.get_buffer(m, F.FULL_RO | F.DEVICE) as view:
    assert view.device is None and view.flags & F.DEVICE, view
    assert view.shape == (2, 3) and view.strides == (12, 4), view
    assert view.format == "f" and view.itemsize == 4, view
    assert not view.readonly and view.c_contiguous, view
    assert struct.unpack("6f", view.tobytes()) == pattern(2, 3)
    assert m.exports == 1, m.exports
assert m.exports == 0, "the export was not released"

# the request flags honoured: no format or strides unless asked for, the
# bytes alone for PyBUF_SIMPLE, Fortran order refused for a 2-D layout
with bufferext.get_buffer(m, F.ND) as view:
    raw = view._raw()
    assert raw["format"] is None and raw["strides"] is None, raw
    assert view.shape == (2, 3), view
with bufferext.get_buffer(m, F.SIMPLE) as view:
    raw = view._raw()
    assert raw["shape"] is None and raw["ndim"] == 1, raw
    assert view.nbytes == 24, view
try:
    bufferext.get_buffer(m, F.F_CONTIGUOUS)
except BufferError as exc:
    assert "Fortran" in str(exc), exc
else:
    raise AssertionError("a 2x3 Matrix served F_CONTIGUOUS")
with bufferext.get_buffer(Matrix(1, 3), F.F_CONTIGUOUS) as view:
    assert view.f_contiguous and view.c_contiguous, view
assert m.exports == 0, m.exports

# a plain consumer, writing through the export: the memory is the object's
with memoryview(m) as mv:
    assert mv.shape == (2, 3) and mv.format == "f", mv
    assert mv.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], mv.tolist()
    mv[1, 2] = 50.0
    assert m.exports == 1, m.exports
assert m.exports == 0, m.exports
assert memoryview(m).tolist()[1] == [3.0, 4.0, 50.0]

big = Matrix(3, 4)
with memoryview(big) as mv:
    assert mv.shape == (3, 4) and mv.strides == (16, 4), mv
    assert struct.unpack("12f", mv.tobytes()) == pattern(3, 4)

# the consumer recipe of the same module, on the producer recipe
assert module.describe(Matrix()) == {"device": None, "shape": (2, 3),
                                     "format": "f", "readonly": False}
assert m.exports == 0

# bad input: clear Python exceptions
for rows, cols in ((0, 3), (2, -1)):
    try:
        Matrix(rows, cols)
    except ValueError as exc:
        assert "positive" in str(exc), exc
    else:
        raise AssertionError(f"Matrix({rows}, {cols}) did not raise")
try:
    memoryview(Matrix.__new__(Matrix))      # __init__ never ran
except BufferError as exc:
    assert "not initialized" in str(exc), exc
else:
    raise AssertionError("an uninitialized Matrix exported a buffer")
print(f"{name}: producer ok")
