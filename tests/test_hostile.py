"""The hostile-exporter corpus: exporters bufferext did not write, lying in
every way the buffer protocol lets them, through every door bufferext (and
CPython, and numpy) opens.

Each case makes one exporter ``x``: the configurable liar of the compiled
test extension (tests/capi/testcapi.c, ``Configurable``: every field as
given, whatever was asked), ctypes and numpy oddities, Python classes with
``__buffer__`` (3.12+), subclasses of our types, metaclass and bogus
declarations.  Each runs in a child interpreter through every door:
``get_buffer`` (every attribute, ``tobytes``, ``memoryview``), ``as_buffer``
with each ``readonly`` value (then ``get_buffer``, ``__dlpack__`` and
``np.from_dlpack`` of the adapter), ``memoryview``, ``np.asarray``, the
capability queries, the C exchange API and the distributed-array import.

What must hold, door by door: no crash (the child exits 0; with
``BUFFEREXT_CORPUS_IN_PROCESS=1``, as under valgrind, the cases run in the
pytest process); a refusal is a
Python exception of the kinds named below; an acceptance never hands
device memory to a CPU-only consumer, and describes ``len`` bytes consistent
with its shape; every export is released.  The gate's refusals name the
exporter's type.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import subprocess
import sys
import textwrap
from types import ModuleType
from typing import Dict

import pytest


PEP688 = sys.version_info >= (3, 12)
# .ci/quality.sh runs the corpus in the pytest process itself under valgrind
# (a child would escape it); every case survives in-process too
IN_PROCESS = os.environ.get("BUFFEREXT_CORPUS_IN_PROCESS") == "1"

# Each case: the code that binds x (the testcapi module is `capi`).
CASES: Dict[str, str] = {
    # the configurable liar: x = capi.Configurable(block, len, itemsize, ndim, ...)
    "ndim_65": "x = capi.Configurable(64, 8, 8, 65, 'd', shape=(1,) * 65)",
    "ndim_negative": "x = capi.Configurable(64, 8, 8, -1, 'd')",
    "ndim_huge": "x = capi.Configurable(64, 8, 8, 1 << 30, 'd')",
    "itemsize_zero": "x = capi.Configurable(64, 0, 0, 1, 'd', shape=(3,))",
    "itemsize_negative": "x = capi.Configurable(64, 8, -8, 1, 'd', shape=(1,))",
    "len_negative": "x = capi.Configurable(64, -8, 8, 1, 'd', shape=(1,))",
    "len_past_shape": "x = capi.Configurable(64, 1 << 20, 8, 1, 'd', shape=(8,))",
    "len_short_of_shape": "x = capi.Configurable(64, 8, 8, 1, 'd', shape=(8,))",
    "shape_null_2d": "x = capi.Configurable(64, 64, 8, 2, 'd')",
    "shape_negative": "x = capi.Configurable(64, 8, 8, 2, 'd', shape=(-1, -8))",
    "shape_overflow": "x = capi.Configurable(64, 8, 8, 2, 'd', shape=(1 << 62, 1 << 62))",
    "strides_null_2d": ("x = capi.Configurable(48, 48, 8, 2, 'd', shape=(2, 3))"),
    "strides_overflow": ("x = capi.Configurable(64, 24, 8, 1, 'd', shape=(3,), "
                         "strides=(1 << 62,))"),
    "strides_outside": ("x = capi.Configurable(64, 16, 8, 1, 'd', shape=(2,), "
                        "strides=(1 << 40,))"),
    "strides_min": ("x = capi.Configurable(64, 16, 8, 1, 'd', shape=(2,), "
                    "strides=(-(1 << 63),))"),
    "strides_negative": ("x = capi.Configurable(64, 32, 8, 1, 'd', shape=(4,), "
                         "strides=(-8,), offset=24)"),
    "suboffsets": ("x = capi.Configurable(64, 16, 8, 1, 'd', shape=(2,), "
                   "strides=(8,), suboffsets=(0,))"),
    "format_unprintable": "x = capi.Configurable(8, 8, 8, 1, '\\x01', shape=(1,))",
    "format_long": "x = capi.Configurable(8, 8, 8, 1, 'd' * 400, shape=(1,))",
    "format_wrong_size": "x = capi.Configurable(64, 16, 4, 1, 'd', shape=(4,))",
    "format_null_wide": "x = capi.Configurable(64, 64, 8, 1, None, shape=(8,))",
    "format_struct": "x = capi.Configurable(64, 16, 8, 1, 'T{i:a:f:b:}', shape=(2,))",
    "zero_d_no_shape": "x = capi.Configurable(8, 8, 8, 0, 'd')",
    "empty": "x = capi.Configurable(0, 0, 8, 1, 'd', shape=(0,))",
    "cuda_info_null": ("x = capi.Configurable(32, 32, 8, 1, 'd', shape=(4,), "
                       "device='bufferext.cuda', info='null')"),
    "cuda_info_bad_version": ("x = capi.Configurable(32, 32, 8, 1, 'd', shape=(4,), "
                              "device='bufferext.cuda', info='bad_version')"),
    "ve_info_null": ("x = capi.Configurable(32, 32, 8, 1, 'd', shape=(4,), "
                     "device='bufferext.ve', info='null')"),
    "ve_info_bad_version": ("x = capi.Configurable(32, 32, 8, 1, 'd', shape=(4,), "
                            "device='bufferext.ve', info='bad_version')"),
    "cuda_valid": ("x = capi.Configurable(32, 32, 8, 1, 'd', shape=(4,), "
                   "device='bufferext.cuda')"),
    "ve_valid": ("x = capi.Configurable(32, 32, 8, 1, 'd', shape=(4,), "
                 "device='bufferext.ve')"),
    "foreign_device": ("x = capi.Configurable(32, 32, 8, 1, 'd', shape=(4,), "
                       "device='example.tpu', info='null')"),
    "device_unprintable": ("x = capi.Configurable(32, 32, 8, 1, 'd', shape=(4,), "
                           "device='bad\\x02name')"),
    # liars of the extension itself (tests/capi/testcapi.c)
    "unasked_extension": "x = capi.ExporterFull(liar='unasked')",
    "device_fields_no_flag": ("x = capi.ExporterFull(device=capi.DEVICE_CUDA, "
                              "liar='device_noflag')"),
    "extra_ext_flags": "x = capi.ExporterFull(liar='extra_flags')",
    "fails_after_writing": "x = capi.ExporterFull(liar='fail_late')",
    "undeclared_device": "x = capi.ExporterUndeclared(device=capi.DEVICE_CUDA)",
    # ctypes and numpy
    "ctypes_array": "x = (ctypes.c_double * 4)(1, 2, 3, 4)",
    "ctypes_2d": "x = ((ctypes.c_int16 * 3) * 2)()",
    "ctypes_scalar": "x = ctypes.c_int(5)",
    "ctypes_empty_structure": (
        "x = (type('E', (ctypes.Structure,), {'_fields_': []}) * 3)()"),
    "ctypes_structure": (
        "x = (type('P', (ctypes.Structure,), {'_fields_': "
        "[('a', ctypes.c_int8), ('b', ctypes.c_double)]}) * 2)()"),
    "numpy_zero_itemsize": "x = np.zeros(3, np.dtype([]))",
    "numpy_v0": "x = np.zeros(3, 'V0')",
    "numpy_subarray": "x = np.zeros(2, '(2,3)f4')",
    "numpy_strided": "x = np.arange(10.0)[::3]",
    "numpy_reversed": "x = np.arange(10.0)[::-1]",
    "numpy_zero_d": "x = np.array(2.5)",
    "numpy_unicode": "x = np.array(['ab', 'c'])",
    "numpy_datetime": "x = np.zeros(2, 'M8[s]')",
    # subclasses and declarations
    "cpubuffer_subclass": ("class S(bufferext.CPUBuffer): pass\n"
                           "x = S((2, 3), 'f4')"),
    "metaclass_declaration": (
        "class M(type):\n    __buffer_supported_flags__ = -1\n"
        "class X(bytearray, metaclass=M): pass\nx = X(b'abcd')"),
    "metaclass_property": (
        "class M(type):\n    @property\n"
        "    def __buffer_supported_flags__(cls): raise RuntimeError('boom')\n"
        "class X(bytearray, metaclass=M): pass\nx = X(b'abcd')"),
    "bogus_declaration": (
        "class X(bytearray):\n    __buffer_supported_flags__ = 'all'\n"
        "x = X(b'abcd')"),
    "declaration_simple_only": (
        "class X(bytearray):\n    __buffer_supported_flags__ = -1\n"
        "x = X(b'abcd')"),
}

# PEP 688: classes whose __buffer__ is Python code (3.12+)
CASES_688: Dict[str, str] = {
    "buffer_delegating_to_device": (
        "inner = capi.Configurable(32, 32, 8, 1, 'd', shape=(4,), "
        "device='bufferext.cuda')\n"
        "class W:\n    def __buffer__(self, flags):\n"
        "        return inner.__buffer__(flags)\nx = W()"),
    "buffer_raising": (
        "class W:\n    def __buffer__(self, flags):\n"
        "        raise RuntimeError('nope')\nx = W()"),
    "buffer_not_a_memoryview": (
        "class W:\n    def __buffer__(self, flags):\n"
        "        return b'abc'\nx = W()"),
    "buffer_of_a_liar": (
        "inner = capi.Configurable(64, 1 << 20, 8, 1, 'd', shape=(8,))\n"
        "class W:\n    def __buffer__(self, flags):\n"
        "        return memoryview(inner)\nx = W()"),
    "subclass_overriding_buffer": (
        "class S(bufferext.CPUBuffer):\n"
        "    def __buffer__(self, flags):\n"
        "        return memoryview(b'xy')\nx = S(3)"),
    "declaration_flips_in_buffer": (
        "class W:\n    __buffer_supported_flags__ = 0\n"
        "    def __buffer__(self, flags):\n"
        "        type(self).__buffer_supported_flags__ = -1\n"
        "        return memoryview(b'abcd')\nx = W()"),
}

# The doors, run in the child on x.  `device_memory` is what the exporter
# says of itself (None: CPU); every refusal must be one of REFUSALS.
DOORS = r'''
import gc, json
from bufferext import BufferFlags
from bufferext.distarray import ProtocolError, validate
REFUSALS = (BufferError, ValueError, TypeError, OverflowError,
            RuntimeError, NotImplementedError, ProtocolError)
log = []

def door(name, fn, refusals=REFUSALS):
    try:
        result = fn()
    except refusals as e:
        log.append((name, "refused", type(e).__name__, str(e)[:200]))
        return None
    log.append((name, "ok"))
    return result

def describe(view):
    # an acceptance: consistent, and no CPU access to device memory
    shape, itemsize, nbytes = view.shape, view.itemsize, view.nbytes
    count = 1
    for n in shape:
        assert n >= 0, shape
        count *= n
    assert 0 <= view.ndim <= 64, view.ndim
    assert itemsize > 0 and nbytes == count * itemsize, (shape, itemsize, nbytes)
    for attr in ("obj", "ptr", "format", "strides", "readonly", "device",
                 "device_info", "flags", "c_contiguous", "f_contiguous"):
        getattr(view, attr)
    repr(view)
    if view.device is not None:
        for cpu in (view.tobytes, view.memoryview, lambda: memoryview(view),
                    lambda: np.asarray(view)):
            try:
                cpu()
            except BufferError:
                pass
            else:
                raise AssertionError("device memory reached a CPU consumer")
    elif SAFE_TO_READ:
        assert len(view.tobytes()) == nbytes

def get(obj, flags=None):
    view = bufferext.get_buffer(obj) if flags is None else \
        bufferext.get_buffer(obj, flags)
    with view:
        describe(view)
    return True

for flags in (None, BufferFlags.FULL_RO, BufferFlags.RECORDS_RO | BufferFlags.DEVICE,
              BufferFlags.SIMPLE | BufferFlags.DEVICE, BufferFlags.ND):
    door(f"get_buffer({flags})", lambda: get(x, flags))
door("check_buffer_supports", lambda: bufferext.check_buffer_supports(
    x, BufferFlags.DEVICE))
door("supported_flags", lambda: bufferext.supported_flags(x))
for readonly in (True, False, None):
    adapter = door(f"as_buffer({readonly})",
                   lambda: bufferext.as_buffer(x, readonly=readonly))
    if adapter is not None and adapter is not x:
        door(f"as_buffer({readonly}).get_buffer", lambda: get(adapter))
        door(f"as_buffer({readonly}).__dlpack__",
             lambda: adapter.__dlpack__(max_version=(1, 0)))
        arr = door(f"np.from_dlpack(as_buffer({readonly}))",
                   lambda: np.from_dlpack(adapter))
        if arr is not None:
            assert DEVICE is None, "a CPU array over device memory"
            del arr
    del adapter
# CPython's and numpy's own doors (they may say SystemError)
if FOREIGN_DOORS:
    mv = door("memoryview", lambda: memoryview(x), REFUSALS + (SystemError,))
    if mv is not None:
        assert DEVICE is None, "memoryview of device memory"
        mv.release()
    arr = door("np.asarray", lambda: np.asarray(x), REFUSALS + (SystemError,))
    if arr is not None and DEVICE is not None:
        assert arr.dtype == object or arr.size == 0, "numpy read device memory"
    del arr
if hasattr(type(x), "__dlpack__"):
    door("__dlpack__", lambda: x.__dlpack__())

def distarray():
    with bufferext.get_buffer(x) as v:
        shape = v.shape
    dims = tuple({"dist_type": "b", "size": n, "proc_grid_size": 1,
                  "proc_grid_rank": 0, "start": 0, "stop": n} for n in shape)
    validate({"__version__": "0.10.0", "buffer": x, "dim_data": dims})
door("distarray.validate", distarray)
gc.collect()
if hasattr(x, "exports"):
    assert x.exports == 0, ("exports left", x.exports)
for entry in log:
    # bufferext's own refusals name the exporter (numpy's need not)
    if entry[1] == "refused" and entry[2] == "BufferError" and GATED and \
            entry[0].startswith(("get_buffer", "as_buffer")):
        assert NAME in entry[3] or "__buffer__" in entry[3] or \
            "bufferext" in entry[3] or "numpy" in entry[3], entry
print(json.dumps(log))
'''

# What each case says of itself, for the checks above.
DEVICES = {name: ("bufferext.cuda" if "cuda" in name or name in (
    "device_fields_no_flag", "undeclared_device", "buffer_delegating_to_device")
    else "bufferext.ve" if name.startswith("ve_")
    else "example.tpu" if name.startswith(("foreign", "device_"))
    else None) for name in {**CASES, **CASES_688}}
# cases whose described memory lies outside the allocation, or holds NULL
# pointers (suboffsets): no consumer can tell, so nobody reads it.  (A len
# past the shape is refused wherever a shape comes with it; a SIMPLE answer
# has only len, which no consumer can check: valgrind saw tobytes read past
# the block of buffer_of_a_liar through its memoryview's SIMPLE answer.)
UNSAFE_TO_READ = {"strides_overflow", "strides_outside", "strides_min",
                  "len_past_shape", "buffer_of_a_liar",
                  "shape_overflow", "suboffsets"}
# cases CPython's own doors cannot survive: memoryview trusts a NULL shape
# with ndim 2 (SIGSEGV in CPython), and these liars write the extension past
# the bare Py_buffer that memoryview and numpy pass (the exporter corrupts
# its caller's memory: no consumer can defend against that)
NO_FOREIGN_DOORS = {"shape_null_2d", "unasked_extension",
                    "device_fields_no_flag", "extra_ext_flags",
                    "fails_after_writing"}


# Memoized: a child costs half a second, and the gate's test reads the first
# entry of the logs the cases' tests made.
@functools.lru_cache(maxsize=None)
def run_case(capi_module: ModuleType, name: str, code: str) -> list:
    prelude = textwrap.dedent(f"""
        import ctypes, importlib.util, sys
        import numpy as np
        import bufferext
        spec = importlib.util.spec_from_file_location(
            {capi_module.__name__!r}, {capi_module.__file__!r})
        capi = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(capi)
        DEVICE = {DEVICES[name]!r}
        SAFE_TO_READ = {name not in UNSAFE_TO_READ!r}
        FOREIGN_DOORS = {name not in NO_FOREIGN_DOORS!r}
        GATED = {name.startswith(("nd", "item", "len", "shape", "strides",
                                  "format", "cuda", "ve_"))!r}
    """)
    source = prelude + code + "\nNAME = type(x).__name__\n" + DOORS
    if IN_PROCESS:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(source, f"<case {name}>", "exec"), {})
        return json.loads(out.getvalue().strip().splitlines()[-1])
    result = subprocess.run([sys.executable, "-c", source],
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise AssertionError(f"case {name}: child rc={result.returncode}\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_case(c99: ModuleType, name: str) -> None:
    log = run_case(c99, name, CASES[name])
    assert log, name


@pytest.mark.skipif(not PEP688, reason="__buffer__ is 3.12+")
@pytest.mark.parametrize("name", sorted(CASES_688))
def test_hostile_pep688_case(c99: ModuleType, name: str) -> None:
    log = run_case(c99, name, CASES_688[name])
    assert log, name


def test_gate_refuses_each_lie_with_its_field(c99: ModuleType) -> None:
    # the lies the gate must refuse at get_buffer, and the field it names
    expected = {
        "ndim_65": "ndim = 65", "ndim_negative": "ndim = -1",
        "itemsize_zero": "itemsize = 0", "itemsize_negative": "itemsize = -8",
        "len_negative": "len = -8", "len_past_shape": "len = 1048576",
        "len_short_of_shape": "len = 8", "shape_null_2d": "shape is NULL",
        "shape_negative": "shape[0] = -1", "shape_overflow": "overflows",
        "strides_overflow": "strides[0]", "strides_min": "strides[0]",
        "format_unprintable": "format is not", "format_long": "format is not",
        "format_wrong_size": "format 'd' does not describe",
        "format_null_wide": "format is NULL", "cuda_info_null": "device_info NULL",
        "cuda_info_bad_version": "device_info version 0x20000",
        "ve_info_null": "device_info NULL",
        "ve_info_bad_version": "device_info version 0x20000",
        "device_unprintable": "device name is not",
    }
    for name, text in expected.items():
        log = run_case(c99, name, CASES[name])
        first = log[0]
        assert first[1] == "refused" and first[2] == "BufferError", (name, first)
        assert "Configurable" in first[3] and text in first[3], (name, first)
