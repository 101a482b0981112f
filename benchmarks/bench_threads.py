"""Throughput of exports from several threads at once, on a free-threaded
CPython (3.13t): does the hot path scale, or does it take a lock that all
threads share?

    python benchmarks/bench_threads.py [--quick] [--json PATH] [--check]

For each workload, N threads (1, then 2) each run a loop of exports of
objects, and the table gives operations per second and the scaling ratio
(2 threads / 1 thread).  The anchor is the same ratio for a loop of integer
additions, measured in the same run: what this interpreter on this machine
can scale at all.  The target: an ``own`` workload keeps >= 90 % of the
anchor's scaling (about 1.8 on a machine whose cores scale).  Two layouts
of the objects:

* ``own``: each thread its own exporter (what a program that shares no
  array does): only per-object locks and process-wide state can stand in
  the way of scaling;
* ``shared``: all threads one exporter (the worst case: its critical
  section, its export count and its reference count are one cache line
  that the cores pass between them): printed, no target.

With the GIL (a default build) the threads take turns: the figures are
printed for comparison and the ratio is about 1.  A machine with fewer
cores than threads cannot show the scaling: the script says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig
import threading
import time
from typing import Any, Callable, Dict, List

import numpy as np

import bufferext
from bufferext import as_buffer, get_buffer

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
TARGET = 0.9        # of the anchor's scaling


def spin(obj: Any, n: int) -> None:
    """The anchor: no object shared, nothing of ours; an operation is ten
    additions, so that it lasts as long as the workloads' (a loop too short
    measures the threads' start)."""
    x = 0
    for i in range(10 * n):
        x += i


def export_release(obj: Any, n: int) -> None:
    """The export alone: a memoryview's get and release of the buffer
    (the type is CPython's, its refcount immortal)."""
    for _ in range(n):
        memoryview(obj).release()


def get_release(obj: Any, n: int) -> None:
    for _ in range(n):
        get_buffer(obj).release()


def with_as_buffer(obj: Any, n: int) -> None:
    for _ in range(n):
        with get_buffer(as_buffer(obj)):
            pass


WORKLOADS: Dict[str, Callable[[Any, int], None]] = {
    "memoryview + release (CPUBuffer)": export_release,
    "get_buffer + release (CPUBuffer)": get_release,
    "with get_buffer(as_buffer(ndarray))": with_as_buffer,
}
MAKERS: Dict[str, Callable[[], Any]] = {
    "memoryview + release (CPUBuffer)": lambda: bufferext.CPUBuffer((16, 16)),
    "get_buffer + release (CPUBuffer)": lambda: bufferext.CPUBuffer((16, 16)),
    "with get_buffer(as_buffer(ndarray))": lambda: np.zeros((16, 16)),
}


def rate(threads: int, work: Callable[[Any, int], None],
         objects: List[Any], n: int) -> float:
    """Operations per second of `threads` threads running `work`."""
    barrier = threading.Barrier(threads + 1)

    def run(k: int) -> None:
        barrier.wait()
        work(objects[k % len(objects)], n)

    ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in ts:
        t.join()
    return threads * n / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a free-threaded own workload "
                        "scales less than 0.9 x the anchor")
    args = parser.parse_args()
    n = 50_000 if args.quick else 300_000
    repeats = 3 if args.quick else 5
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else os.cpu_count() or 1
    print(f"{sys.version.split()[0]} {'free-threaded' if FREE_THREADED else 'with the GIL'}, "
          f"{cores} core(s); best of {repeats}, {n} operations per thread")
    rows = []
    anchor = None
    plan = [("anchor: 10 integer additions", "own", spin, lambda: None)] + [
        (name, layout, work, MAKERS[name])
        for name, work in WORKLOADS.items() for layout in ("own", "shared")]
    for name, layout, work, make in plan:
        figures = {}
        for threads in (1, 2):
            objects = [make() for _ in range(threads)] \
                if layout == "own" else [make()]
            figures[threads] = max(rate(threads, work, objects, n)
                                   for _ in range(repeats))
        ratio = figures[2] / figures[1]
        if anchor is None:
            anchor = ratio
            verdict, ok = "anchor", True
        elif layout == "shared" or not FREE_THREADED:
            verdict, ok = "", True
        else:
            ok = cores < 2 or ratio >= TARGET * anchor
            verdict = (f"target >= {TARGET * anchor:4.2f} (0.9 x anchor): "
                       f"{'PASS' if ok else 'MISS'}")
        rows.append({"workload": name, "layout": layout,
                     "one": figures[1], "two": figures[2],
                     "ratio": ratio, "anchor_ratio": anchor, "pass": ok})
        print(f"{name:40} {layout:6} 1 thread {figures[1] / 1e6:6.2f} M/s  "
              f"2 threads {figures[2] / 1e6:6.2f} M/s  x{ratio:4.2f}  {verdict}")
    if FREE_THREADED and cores < 2:
        print("fewer than 2 cores: the scaling cannot show here")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"python": sys.version, "free_threaded": FREE_THREADED,
                       "cores": cores, "rows": rows}, f, indent=1)
    return 1 if args.check and not all(r["pass"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
