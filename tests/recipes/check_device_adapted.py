"""Run by tests/test_recipes_cpp.py: python check_device_adapted.py MODULE
CLASS, where MODULE.CLASS is a producer recipe built with device_adapted.h
(its memory announced as on the device bufferext_tests.recipe_device).
Device memory must reach no plain consumer, and a refused request must
leave nothing counted; an extended one gets the device."""

import importlib
import inspect
import sys

import bufferext
from bufferext import BufferFlags as F

DEVICE = "bufferext_tests.recipe_device"
# Where CPython implements the draft (cpython/), its plain doors refuse the
# extended flags themselves, before any exporter runs, naming the function
# that takes them; elsewhere the exporter refuses, naming its device.
NATIVE = "DEVICE" in getattr(getattr(inspect, "BufferFlags", None),
                             "__members__", {})
name, cls = sys.argv[1], sys.argv[2]
Type = getattr(importlib.import_module(name), cls)
obj = Type()
references = sys.getrefcount(obj)
refusals = [(lambda: memoryview(obj), DEVICE), (lambda: bytes(obj), DEVICE)]
if hasattr(memoryview, "_from_flags"):      # 3.12+: DEVICE, plain door
    refusals.append((lambda: memoryview._from_flags(
        obj, int(F.FULL_RO | F.DEVICE)),
        "PyObject_GetBufferEx" if NATIVE else DEVICE))
for refused, named in refusals:
    try:
        refused()
    except BufferError as exc:
        assert named in str(exc), exc
    else:
        raise AssertionError("device memory reached a plain consumer")
assert obj.exports == 0, obj.exports
# no reference taken by a refused export
assert sys.getrefcount(obj) == references, (sys.getrefcount(obj), references)
with bufferext.get_buffer(obj, F.FULL_RO | F.DEVICE) as view:
    assert view.device == DEVICE, view
    assert obj.exports == 1, obj.exports
assert obj.exports == 0, obj.exports
print(f"{name}: device adapted ok")
