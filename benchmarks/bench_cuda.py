"""Benchmark: extended get/release on CUDABuffer vs plain get/release on bytes.

Targets (issue 3): an extended export of a CUDABuffer
(``BufferExt_GetBuffer`` + ``BufferExt_Release`` with
``PyBUF_RECORDS_RO | PyBUF_DEVICE``) costs at most 1.5x a plain
``PyObject_GetBuffer`` + ``PyBuffer_Release`` of ``bytes`` (``PyBUF_SIMPLE``),
measured in one run, and makes zero Python-heap allocations and zero driver
calls per export.

Without a GPU the buffer lives on the stand-in driver (tests/cuda_standin/,
a test double) - the export path does not call the driver, so the figure is
the same code path as on a GPU.  Usage::

    python benchmarks/bench_cuda.py [--quick] [--driver PATH]

``run(quick)`` returns the rows (dicts) for benchmarks/run.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
HELPER = os.path.join(HERE, "_bench_cuda.c")
TARGET_RATIO = 1.5

CHILD = r'''
import ctypes, json, os, sys
import bufferext
from bufferext import BufferFlags, CUDABuffer

helper = ctypes.PyDLL(sys.argv[1])
n = int(sys.argv[2])
for name in ("bench_plain", "bench_extended"):
    fn = getattr(helper, name)
    fn.restype = ctypes.c_double
    fn.argtypes = [ctypes.py_object, ctypes.c_long, ctypes.c_int]
helper.count_extended_allocations.restype = ctypes.c_long
helper.count_extended_allocations.argtypes = [ctypes.py_object, ctypes.c_long,
                                              ctypes.c_int]
status = next(d for d in bufferext.devices() if d["device"] == "bufferext.cuda")
buf = CUDABuffer((64, 64), "float32")
buf.synchronize()
data = bytes(64 * 64 * 4)
ext_flags = int(BufferFlags.RECORDS_RO | BufferFlags.DEVICE)
cpu = bufferext.CPUBuffer((64, 64), "float32")
plain, extended, simple, cpu_ext = [], [], [], []
for _ in range(7):                      # interleaved rounds, best of each
    plain.append(helper.bench_plain(data, n, 0))
    extended.append(helper.bench_extended(buf, n, ext_flags))
    simple.append(helper.bench_extended(buf, n, int(BufferFlags.DEVICE)))
    cpu_ext.append(helper.bench_extended(cpu, n, ext_flags))
driver = None
if "standin" in str(status["path"]):
    sd = ctypes.CDLL(status["path"])
    sd.standin_reset_calls()
    sd.standin_calls.argtypes = [ctypes.c_char_p]
allocs = helper.count_extended_allocations(buf, 10000, ext_flags)
if "standin" in str(status["path"]):
    driver = sum(sd.standin_calls(s.encode()) for s in (
        "cuCtxPushCurrent_v2", "cuEventRecord", "cuStreamSynchronize",
        "cuStreamWaitEvent", "cuMemAlloc_v2"))
print(json.dumps({"plain": min(plain), "extended": min(extended),
                  "extended_simple": min(simple), "cpu_extended": min(cpu_ext),
                  "allocations": allocs, "driver_calls": driver,
                  "driver": status["path"], "python": sys.version.split()[0]}))
'''


def _compile(source: str, target: str) -> None:
    """Build a C helper that includes Python.h and bufferext.h."""
    import bufferext
    subprocess.run([os.environ.get("CC", "gcc"), "-I",
                    sysconfig.get_paths()["include"], "-I",
                    bufferext.get_include(), "-shared", "-fPIC", "-O2",
                    "-Wall", "-Wextra", "-Werror", "-o", target, source],
                   check=True)


def measure(quick: bool, driver: Optional[str] = None) -> Dict[str, Any]:
    """Build the helper (and the stand-in unless ``driver`` is given) and
    measure in a child interpreter; returns the raw figures."""
    with tempfile.TemporaryDirectory(prefix="bench_cuda_") as tmp:
        helper = os.path.join(tmp, "_bench_cuda.so")
        _compile(HELPER, helper)
        if driver is None:
            sys.path.insert(0, os.path.join(ROOT, "tests", "cuda_standin"))
            import standin_harness  # type: ignore[import-not-found]
            driver = standin_harness.build(tmp)
        env = dict(os.environ, BUFFEREXT_CUDA_DRIVER=driver)
        n = 20000 if quick else 500000
        out = subprocess.run([sys.executable, "-c", CHILD, helper, str(n)],
                             env=env, check=True, capture_output=True,
                             text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]), iterations=n)


def run(quick: bool) -> List[Dict[str, Any]]:
    """Rows for benchmarks/run.py: name, value, unit, target, ok, note."""
    m = measure(quick)
    ratio = m["extended"] / m["plain"]
    where = ("stand-in driver (no GPU)" if "standin" in m["driver"]
             else m["driver"])
    return [
        {"name": "cuda: plain get/release on bytes", "value": m["plain"],
         "unit": "ns", "target": None, "ok": True, "note": where},
        {"name": "cuda: extended get/release on CUDABuffer",
         "value": m["extended"], "unit": "ns", "target": None, "ok": True,
         "note": where},
        {"name": "cuda: extended CUDABuffer / plain bytes", "value": ratio,
         "unit": "x", "target": f"<= {TARGET_RATIO}",
         "ok": ratio <= TARGET_RATIO,
         "note": "RECORDS_RO|DEVICE; " + where},
        {"name": "cuda: same, SIMPLE|DEVICE request",
         "value": m["extended_simple"] / m["plain"], "unit": "x",
         "target": f"<= {TARGET_RATIO}",
         "ok": m["extended_simple"] / m["plain"] <= TARGET_RATIO,
         "note": "no supported-flags check on this path"},
        {"name": "cuda: CPUBuffer extended RECORDS_RO|DEVICE (reference)",
         "value": m["cpu_extended"], "unit": "ns", "target": None,
         "ok": True, "note": "same BufferExt_GetBuffer path, CPU producer"},
        {"name": "cuda: heap allocations per 10000 exports",
         "value": m["allocations"], "unit": "allocations", "target": "0",
         "ok": m["allocations"] == 0,
         "note": f"driver calls during them: {m['driver_calls']}"},
    ]


def main(argv: Optional[List[str]] = None) -> int:
    """Print the rows; exit status 1 if a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--driver", help="CUDA driver to use (default: build "
                        "the stand-in)")
    args = parser.parse_args(argv)
    if args.driver:
        m = measure(args.quick, args.driver)
        print(json.dumps(m, indent=2))
        return 0
    rows = run(args.quick)
    for row in rows:
        target = f"  (target {row['target']})" if row["target"] else ""
        print(f"{row['name']:<45} {row['value']:10.3f} {row['unit']}{target}"
              f"  {'ok' if row['ok'] else 'MISSED'}  {row['note']}")
    return 0 if all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
