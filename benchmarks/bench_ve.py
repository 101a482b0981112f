"""Benchmark: extended get/release on VEBuffer against plain get/release on
bytes, and heap allocations per export.

Without VE hardware the VEBuffer runs on the stand-in VEO library of
tests/ve_standin/ (a test double); an export never calls VEO, so the figure
measures bufferext's own path.  A tiny C helper, compiled here, times the
loops in C (no Python call overhead) and counts allocations by hooking
PyMem_SetAllocator for the RAW, MEM and OBJ domains.

    python benchmarks/bench_ve.py [--quick]

Targets: ratio <= 1.5, zero allocations per export.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGET_RATIO = 1.5

HELPER_C = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <bufferext.h>
#include <time.h>

static PyMemAllocatorEx orig[3];
static Py_ssize_t n_alloc;

static void *c_malloc(void *ctx, size_t n)
{ n_alloc++; PyMemAllocatorEx *a = ctx; return a->malloc(a->ctx, n); }
static void *c_calloc(void *ctx, size_t m, size_t n)
{ n_alloc++; PyMemAllocatorEx *a = ctx; return a->calloc(a->ctx, m, n); }
static void *c_realloc(void *ctx, void *p, size_t n)
{ n_alloc++; PyMemAllocatorEx *a = ctx; return a->realloc(a->ctx, p, n); }
static void c_free(void *ctx, void *p)
{ PyMemAllocatorEx *a = ctx; a->free(a->ctx, p); }

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One get/release pair: extended when flags has PyBUF_DEVICE. */
static int once(PyObject *obj, int flags)
{
    Py_buffer_extended ext;
    if (flags & PyBUF_DEVICE) {
        if (BufferExt_GetBuffer(obj, &ext, flags) < 0) return -1;
        BufferExt_Release(&ext);
    }
    else {
        if (PyObject_GetBuffer(obj, &ext.view, flags) < 0) return -1;
        PyBuffer_Release(&ext.view);
    }
    return 0;
}

/* The exporter alone: PyObject_GetBuffer with the caller's flags into an
 * extended view, without BufferExt_GetBuffer's checks. */
static int once_raw(PyObject *obj, int flags)
{
    Py_buffer_extended ext;
    memset(&ext, 0, sizeof(ext));
    if (PyObject_GetBuffer(obj, &ext.view, flags) < 0) return -1;
    PyBuffer_Release(&ext.view);
    return 0;
}

/* time_raw(obj, flags, n) -> seconds for n exporter-only pairs */
static PyObject *time_raw(PyObject *m, PyObject *args)
{
    PyObject *obj; int flags; Py_ssize_t n, i; double t0;
    (void)m;
    if (!PyArg_ParseTuple(args, "Oin", &obj, &flags, &n)) return NULL;
    t0 = now();
    for (i = 0; i < n; i++) if (once_raw(obj, flags) < 0) return NULL;
    return PyFloat_FromDouble(now() - t0);
}

/* time_pairs(obj, flags, n) -> seconds for n get/release pairs */
static PyObject *time_pairs(PyObject *m, PyObject *args)
{
    PyObject *obj; int flags; Py_ssize_t n, i; double t0;
    (void)m;
    if (!PyArg_ParseTuple(args, "Oin", &obj, &flags, &n)) return NULL;
    t0 = now();
    for (i = 0; i < n; i++) if (once(obj, flags) < 0) return NULL;
    return PyFloat_FromDouble(now() - t0);
}

/* count_allocs(obj, flags, n) -> PyMem allocations during n pairs */
static PyObject *count_allocs(PyObject *m, PyObject *args)
{
    PyObject *obj; int flags; Py_ssize_t n, i; int d, rc = 0;
    PyMemAllocatorDomain dom[3] = {PYMEM_DOMAIN_RAW, PYMEM_DOMAIN_MEM,
                                   PYMEM_DOMAIN_OBJ};
    (void)m;
    if (!PyArg_ParseTuple(args, "Oin", &obj, &flags, &n)) return NULL;
    if (once(obj, flags) < 0) return NULL;           /* warm caches */
    for (d = 0; d < 3; d++) {
        PyMemAllocatorEx hook = {&orig[d], c_malloc, c_calloc, c_realloc,
                                 c_free};
        PyMem_GetAllocator(dom[d], &orig[d]);
        PyMem_SetAllocator(dom[d], &hook);
    }
    n_alloc = 0;
    for (i = 0; i < n && rc == 0; i++) rc = once(obj, flags);
    for (d = 0; d < 3; d++) PyMem_SetAllocator(dom[d], &orig[d]);
    if (rc < 0) return NULL;
    return PyLong_FromSsize_t(n_alloc);
}

static PyMethodDef methods[] = {
    {"time_pairs", time_pairs, METH_VARARGS, NULL},
    {"time_raw", time_raw, METH_VARARGS, NULL},
    {"count_allocs", count_allocs, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_bench_ve_helper",
                                 NULL, -1, methods, NULL, NULL, NULL, NULL};
PyMODINIT_FUNC PyInit__bench_ve_helper(void) { return PyModule_Create(&def); }
"""


def _build_helper(directory: str) -> str:
    """Compile the timing helper; return the directory that holds it."""
    import bufferext
    src = os.path.join(directory, "_bench_ve_helper.c")
    with open(src, "w") as f:
        f.write(HELPER_C)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    out = os.path.join(directory, "_bench_ve_helper" + suffix)
    subprocess.run(
        ["gcc", "-O2", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
         "-I", sysconfig.get_paths()["include"],
         "-I", bufferext.get_include(), "-o", out, src], check=True)
    return directory


def _measure(quick: bool) -> List[Dict[str, Any]]:
    """In a process whose BUFFEREXT_VEO_LIBRARY is set: the measurements."""
    import bufferext
    from bufferext import BufferFlags

    tmp = tempfile.mkdtemp(prefix="bench_ve_")
    sys.path.insert(0, _build_helper(tmp))
    import _bench_ve_helper as helper  # type: ignore[import-not-found]

    n = 200_000 if quick else 2_000_000
    repeats = 3 if quick else 7
    ve = bufferext.VEBuffer((64, 64), "float64")
    data = bytes(ve.nbytes)
    ext_flags = int(BufferFlags.FULL_RO | BufferFlags.DEVICE)
    plain_flags = int(BufferFlags.FULL_RO)
    # interleaved, best of `repeats`: the machine may be shared and noisy
    t_ve = t_bytes = t_bext = float("inf")
    for _ in range(repeats):
        t_bytes = min(t_bytes, helper.time_pairs(data, plain_flags, n))
        t_ve = min(t_ve, helper.time_pairs(ve, ext_flags, n))
        t_bext = min(t_bext, helper.time_pairs(data, ext_flags, n))
    allocs = helper.count_allocs(ve, ext_flags, 10_000)
    ratio = t_ve / t_bytes
    ve.close()
    return [
        {"name": "VEBuffer extended get/release", "ns_per_pair":
         t_ve / n * 1e9, "iterations": n},
        {"name": "bytes plain get/release", "ns_per_pair":
         t_bytes / n * 1e9, "iterations": n},
        {"name": "bytes through BufferExt_GetBuffer (DEVICE asked)",
         "ns_per_pair": t_bext / n * 1e9, "iterations": n},
        {"name": "ratio VEBuffer/bytes", "value": ratio,
         "target": TARGET_RATIO, "ok": ratio <= TARGET_RATIO},
        {"name": "allocations per VEBuffer export", "value": allocs / 10_000,
         "target": 0, "ok": allocs == 0},
    ]


def run(quick: bool) -> List[Dict[str, Any]]:
    """Run the benchmark; one dict per figure.  Uses the real VEO library if
    BUFFEREXT_VEO_LIBRARY names one, else builds the stand-in (a test
    double) and measures in a subprocess."""
    environ = dict(os.environ)
    if not environ.get("BUFFEREXT_VEO_LIBRARY"):
        sys.path.insert(0, os.path.join(ROOT, "tests", "ve_standin"))
        import standin  # type: ignore[import-not-found]
        environ["BUFFEREXT_VEO_LIBRARY"] = standin.build(
            tempfile.mkdtemp(prefix="bench_ve_standin_"))
    cmd = [sys.executable, os.path.abspath(__file__), "--child"]
    if quick:
        cmd.append("--quick")
    proc = subprocess.run(cmd, env=environ, capture_output=True, text=True,
                          check=True)
    rows: List[Dict[str, Any]] = json.loads(proc.stdout)
    for row in rows:
        row["veo_library"] = environ["BUFFEREXT_VEO_LIBRARY"]
    return rows


def main() -> None:
    """Command line: print the figures (JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", action="store_true",
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_measure(args.quick)))
        return
    rows = run(args.quick)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        if "ns_per_pair" in row:
            print(f"{row['name']:56s} {row['ns_per_pair']:8.1f} ns")
        else:
            print(f"{row['name']:56s} {row['value']:8.3f}  (target "
                  f"{row['target']}: {'ok' if row['ok'] else 'MISSED'})")


if __name__ == "__main__":
    main()
