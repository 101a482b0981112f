"""Run by tests/test_recipes_cpp.py: python check_borrowed.py MODULE, where
MODULE is borrowed_pybind11.cpp built: a Matrix that pybind11 hands out by
reference (Owner().matrix) exports its buffer, to plain and extended
consumers, and keeps its owner alive while exported."""

import gc
import importlib
import sys

import bufferext
from bufferext import BufferFlags as F

name = sys.argv[1]
module = importlib.import_module(name)

owner = module.Owner()
matrix = owner.matrix
assert type(matrix) is module.Matrix and matrix.shape == (2, 3)
with bufferext.get_buffer(matrix, F.FULL_RO | F.DEVICE) as view:
    assert view.device is None and view.flags & F.DEVICE, view
    assert view.shape == (2, 3) and view.format == "f", view
    assert matrix.exports == 1, matrix.exports
assert matrix.exports == 0, matrix.exports
mv = memoryview(matrix)
assert mv.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], mv.tolist()
mv[0, 1] = 10.0
# the memory is the owner's member, not a copy
assert memoryview(owner.matrix).tolist()[0] == [0.0, 10.0, 2.0]
assert owner.matrix.exports == 1
# the export keeps the wrapper, and the wrapper its owner, alive
del owner, matrix
gc.collect()
assert mv.tolist() == [[0.0, 10.0, 2.0], [3.0, 4.0, 5.0]], mv.tolist()
mv.release()
# a Matrix whose __init__ never ran is still refused
try:
    memoryview(module.Matrix.__new__(module.Matrix))
except BufferError as exc:
    assert "not initialized" in str(exc), exc
else:
    raise AssertionError("an uninitialized Matrix exported a buffer")
print(f"{name}: borrowed ok")
