"""Benchmark on a real GPU: the extended exchange against today's protocols,
and host<->device copy bandwidth against CuPy.

Targets (issue 3), ratios measured in one run:

* the extended exchange of a ``CUDABuffer`` (C ``BufferExt_GetBuffer`` +
  ``BufferExt_Release`` with ``RECORDS_RO | DEVICE``, as a C consumer does
  it) is >= 10x faster than ``torch.from_dlpack(tensor)`` and >= 30x faster
  than reading and parsing a CuPy array's ``__cuda_array_interface__``;
* ``CUDABuffer.copy_from_host`` / ``BufferView.copy_to_host`` bandwidth
  is >= 0.9x CuPy's (``cupy.ndarray.set`` / ``get(out=)``, cudaMemcpy) for
  the same sizes, from and into pageable (numpy) and pinned
  (``cupyx.empty_pinned``) host memory.

Figures without a target: ``fill`` then ``synchronize`` (an event recorded
and waited for) against CuPy's ``fill`` and stream synchronisation; the
example consumer docs/examples/cuda/scale.cu (built with nvcc by its
build.sh) scaling a ``CUDABuffer`` in place, per call (export, event wait,
kernel, synchronisation), against torch's in-place multiply of a CUDA
tensor of the same size.

Needs the real CUDA driver and a GPU, plus torch (CUDA build) and CuPy for
their rows; what is missing is reported as skipped.  ``--out DIR`` also
writes ``gpu-<card>.json`` and ``.txt`` there (benchmarks/results holds the
runs; each row's ``figures`` are the measurements its ratio is made of).
Usage::

    python benchmarks/bench_cuda_gpu.py [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import sys
import tempfile
import time
import timeit
from typing import Any, Callable, Dict, List, Optional

import numpy as np

import bufferext
from bufferext import BufferFlags

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from bench_cuda import HELPER, _compile  # noqa: E402
import _cuda_toolkit as toolkit  # noqa: E402

EXCHANGE_VS_TORCH = 10.0
EXCHANGE_VS_CAI = 30.0
BANDWIDTH = 0.9


def gpu_available() -> Optional[str]:
    """None when a real CUDA device can be used, else why not."""
    status = next(d for d in bufferext.devices()
                  if d["device"] == "bufferext.cuda")
    if not status["loaded"]:
        return status["error"]
    if "standin" in str(status["path"]):
        return "the stand-in driver is loaded, not a real one"
    if not status.get("devices"):
        return status.get("error") or "no CUDA device"
    return None


def python_ns(func: Callable[[], Any], number: int) -> float:
    best = min(timeit.repeat(func, number=number, repeat=7))
    return best / number * 1e9


def exchange_rows(quick: bool) -> List[Dict[str, Any]]:
    rows: List[Dict[str, Any]] = []
    n = 20000 if quick else 200000
    with tempfile.TemporaryDirectory(prefix="bench_cuda_gpu_") as tmp:
        path = os.path.join(tmp, "_bench_cuda.so")
        _compile(HELPER, path)
        helper = ctypes.PyDLL(path)
        helper.bench_extended.restype = ctypes.c_double
        helper.bench_extended.argtypes = [ctypes.py_object, ctypes.c_long,
                                          ctypes.c_int]
        buf = bufferext.CUDABuffer((256, 256), "float32")
        buf.synchronize()
        flags = int(BufferFlags.RECORDS_RO | BufferFlags.DEVICE)
        ours = min(helper.bench_extended(buf, n, flags) for _ in range(7))
    rows.append({"name": "extended exchange of a CUDABuffer (C)",
                 "value": ours, "unit": "ns"})
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("torch without CUDA")
        tensor = torch.zeros((256, 256), device="cuda")
        theirs = python_ns(lambda: torch.from_dlpack(tensor), n // 10)
        rows.append(_ratio_row("torch.from_dlpack(tensor) / ours", theirs,
                               ours, EXCHANGE_VS_TORCH))
    except ImportError as exc:
        rows.append({"name": "vs torch.from_dlpack", "skipped": str(exc)})
    try:
        import cupy
        array = cupy.zeros((256, 256), dtype=cupy.float32)

        def read_cai() -> Any:
            cai = array.__cuda_array_interface__
            ptr, readonly = cai["data"]
            shape, typestr = tuple(cai["shape"]), np.dtype(cai["typestr"])
            return ptr, readonly, shape, typestr, cai.get("strides"), \
                cai.get("stream")

        theirs = python_ns(read_cai, n // 10)
        rows.append(_ratio_row("CuPy __cuda_array_interface__ read+parse "
                               "/ ours", theirs, ours, EXCHANGE_VS_CAI))
    except ImportError as exc:
        rows.append({"name": "vs CuPy CAI", "skipped": str(exc)})
    return rows


def _ratio_row(name: str, theirs: float, ours: float,
               target: float) -> Dict[str, Any]:
    ratio = theirs / ours
    return {"name": name, "value": ratio, "unit": "x", "target": target,
            "ok": ratio >= target, "note": f"{theirs:.0f} ns vs {ours:.1f} ns",
            "figures": {"theirs": [theirs, "ns"], "ours": [ours, "ns"]}}


def _bandwidth(copy: Callable[[], Any], nbytes: int, sync: Callable[[], Any],
               repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        copy()
        sync()
        best = min(best, time.perf_counter() - start)
    return nbytes / best / 1e9


def bandwidth_rows(quick: bool) -> List[Dict[str, Any]]:
    try:
        import cupy
        import cupyx
    except ImportError as exc:
        return [{"name": "copy bandwidth vs CuPy", "skipped": str(exc)}]
    rows: List[Dict[str, Any]] = []
    sizes = [1 << 20, 64 << 20] if quick else [1 << 20, 16 << 20, 256 << 20]
    repeats = 5 if quick else 15
    sync = cupy.cuda.runtime.deviceSynchronize
    for nbytes in sizes:
        count = nbytes // 4
        hosts = {"pageable": np.ones(count, np.float32),
                 "pinned": cupyx.empty_pinned((count,), np.float32)}
        ours_buf = bufferext.CUDABuffer(count, "float32")
        theirs_arr = cupy.empty(count, cupy.float32)
        for kind, host in hosts.items():
            host[...] = 1

            def ours_to_host() -> None:
                with bufferext.get_buffer(ours_buf) as view:
                    view.copy_to_host(host)

            # both directions from and into the same host array of the kind
            # (to_host() and CuPy's get() without out= both allocate a new,
            # pageable array: their first touch of its pages is timed too)
            cases = [
                ("host->device", lambda: ours_buf.copy_from_host(host),
                 lambda: theirs_arr.set(host)),
                ("device->host", ours_to_host,
                 lambda: theirs_arr.get(out=host)),
            ]
            for direction, ours, theirs in cases:
                a = _bandwidth(ours, nbytes, sync, repeats)
                b = _bandwidth(theirs, nbytes, sync, repeats)
                rows.append({
                    "name": f"{direction} {nbytes >> 20} MiB {kind}: "
                            "ours / CuPy",
                    "value": a / b, "unit": "x", "target": BANDWIDTH,
                    "ok": a / b >= BANDWIDTH,
                    "note": f"{a:.2f} vs {b:.2f} GB/s",
                    "figures": {"ours": [a, "GB/s"], "theirs": [b, "GB/s"]}})
    return rows


def _seconds_per_call(call: Callable[[], Any], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def example_rows(quick: bool) -> List[Dict[str, Any]]:
    """docs/examples/cuda/scale.cu on a CUDABuffer; torch's mul_ beside."""
    nvcc, why = toolkit.nvcc()
    if nvcc is None:
        return [{"name": "example scale.cu", "skipped": why}]
    rows: List[Dict[str, Any]] = []
    torch: Any = None
    try:
        import torch
        if not torch.cuda.is_available():
            raise ImportError("torch without CUDA")
    except ImportError as exc:
        torch = None
        rows.append({"name": "example scale.cu vs torch mul_",
                     "skipped": str(exc)})
    sizes = [1 << 20, 64 << 20] if quick else [1 << 20, 16 << 20, 256 << 20]
    repeats = 10 if quick else 50
    with tempfile.TemporaryDirectory(prefix="bench_cuda_example_") as tmp:
        scale = toolkit.load_example(toolkit.build_example(nvcc, tmp)).scale
        for nbytes in sizes:
            buf = bufferext.CUDABuffer(nbytes // 4, "float32")
            buf.synchronize()
            ours = _seconds_per_call(lambda: scale(buf, 1.0), repeats)
            rows.append({"name": f"example scale.cu {nbytes >> 20} MiB",
                         "value": 2 * nbytes / ours / 1e9, "unit": "GB/s",
                         "note": f"{ours * 1e6:.1f} us per call",
                         "figures": {"ours": [ours * 1e6, "us"]}})
            buf.close()
            if torch is None:
                continue
            tensor = torch.zeros(nbytes // 4, device="cuda")

            def mul() -> None:
                tensor.mul_(1.0)
                torch.cuda.synchronize()

            theirs = _seconds_per_call(mul, repeats)
            rows.append({"name": f"example scale.cu / torch mul_ "
                                 f"{nbytes >> 20} MiB (time)",
                         "value": ours / theirs, "unit": "x",
                         "note": f"{theirs * 1e6:.1f} us per torch call",
                         "figures": {"theirs": [theirs * 1e6, "us"]}})
    return rows


def sync_rows(quick: bool) -> List[Dict[str, Any]]:
    """What a queued write and the wait for it cost: ``fill`` then
    ``synchronize`` on a small buffer (the event recorded and waited on),
    against CuPy's ``fill`` then its stream's ``synchronize``."""
    repeats = 200 if quick else 2000
    buf = bufferext.CUDABuffer(1024, "float32")

    def ours() -> None:
        buf.fill(1.0)
        buf.synchronize()

    rows: List[Dict[str, Any]] = []
    ours_s = _seconds_per_call(ours, repeats)
    rows.append({"name": "fill + synchronize, 4 KiB (ours)",
                 "value": ours_s * 1e6, "unit": "us"})
    try:
        import cupy
    except ImportError as exc:
        rows.append({"name": "fill + synchronize vs CuPy",
                     "skipped": str(exc)})
        return rows
    array = cupy.empty(1024, cupy.float32)
    stream = cupy.cuda.get_current_stream()

    def theirs() -> None:
        array.fill(1.0)
        stream.synchronize()

    theirs_s = _seconds_per_call(theirs, repeats)
    rows.append({"name": "fill + synchronize, 4 KiB: ours / CuPy (time)",
                 "value": ours_s / theirs_s, "unit": "x",
                 "note": f"{theirs_s * 1e6:.1f} us per CuPy call",
                 "figures": {"theirs": [theirs_s * 1e6, "us"]}})
    buf.close()
    return rows


def environment() -> Dict[str, Any]:
    """The card, driver and versions the figures were measured with."""
    status = next(d for d in bufferext.devices()
                  if d["device"] == "bufferext.cuda")
    env: Dict[str, Any] = {"python": sys.version.split()[0],
                           "numpy": np.__version__,
                           "cuda_devices": status.get("devices"),
                           "cuda_driver": status.get("path")}
    for name in ("torch", "cupy"):
        try:
            env[name] = __import__(name).__version__
        except ImportError:
            env[name] = None
    return env


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", metavar="DIR",
                        help="also write gpu-<card>.json and .txt there")
    args = parser.parse_args(argv)
    why = gpu_available()
    if why is not None:
        print(f"skipped: no real GPU ({why})")
        return 0
    rows = (exchange_rows(args.quick) + bandwidth_rows(args.quick) +
            sync_rows(args.quick) + example_rows(args.quick))
    env = environment()
    lines = [f"bufferext GPU benchmarks: {env}"]
    for row in rows:
        if "skipped" in row:
            lines.append(f"{row['name']:55s} skipped: {row['skipped']}")
            continue
        verdict = "" if "ok" not in row else ("ok" if row["ok"] else "MISSED")
        target = f">= {row['target']}" if "target" in row else ""
        lines.append(f"{row['name']:55s} {row['value']:10.2f} "
                     f"{row['unit']:5s} {target:8s} {verdict:6s} "
                     f"{row.get('note', '')}")
    print("\n".join(lines))
    if args.out:
        card = str((env["cuda_devices"] or ["0: gpu"])[0]).split(": ", 1)[-1]
        stem = os.path.join(args.out, "gpu-" + "-".join(re.findall(
            "[a-z0-9]+", card.lower().replace("nvidia", ""))))
        with open(stem + ".json", "w") as f:
            json.dump({"environment": env, "quick": args.quick,
                       "rows": rows}, f, indent=1)
        with open(stem + ".txt", "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0 if all(row.get("ok", True) for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
