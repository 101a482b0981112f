"""The limited-API mode of bufferext.h against the full-API mode, in one
process.

Builds ``_bench_limited.c`` twice against the *installed* headers: with the
full C API (the accelerator, internal/accel.h) and with
``-DPy_LIMITED_API=0x030B0000`` (internal/limited.h), then measures the same
loops in both, interleaved as in run.py (best of the repeats).  Prints one
table in run.py's format: each limited-API figure with the full-API one as
its anchor, the ratio being the slowdown.  Needs CPython 3.11+.

    python benchmarks/bench_limited.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from types import ModuleType
from typing import Dict, List, Optional

import bufferext

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import (PyBUF_DEVICE, PyBUF_FULL_RO, Row, c_timer,  # noqa: E402
                 environment, interleaved, make_objects, print_table)

HERE = os.path.dirname(os.path.abspath(__file__))


def build(workdir: str, limited: bool) -> ModuleType:
    """_bench_limited.c as _bench_limited (abi3) or _bench_full, -O2."""
    name = "_bench_limited" if limited else "_bench_full"
    suffix = (".abi3.so" if limited
              else sysconfig.get_config_var("EXT_SUFFIX") or ".so")
    target = os.path.join(workdir, name + suffix)
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")
    cmd = cc + [
        "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", f"-DMODNAME={name}",
        *(["-DPy_LIMITED_API=0x030B0000"] if limited else []),
        "-I", sysconfig.get_paths()["include"],
        "-I", bufferext.get_include(),
        os.path.join(HERE, "_bench_limited.c"), "-o", target,
    ]
    subprocess.run(cmd, check=True)
    spec = importlib.util.spec_from_file_location(name, target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(full: ModuleType, limited: ModuleType, iterations: int,
            repeats: int) -> List[Row]:
    """One row per (operation, exporter): limited vs full."""
    objs = make_objects()

    class PySub(bufferext.CPUBuffer):     # a mutable Python subclass
        pass

    objs["Python subclass of CPUBuffer"] = PySub((16, 16), "float32")
    cases = [("PyObject_CheckBufferSupports", "OP_CHECK_SUPPORTS",
              PyBUF_FULL_RO | PyBUF_DEVICE),
             ("BufferExt_GetBuffer+Release", "OP_GET_EXTENDED",
              PyBUF_FULL_RO | PyBUF_DEVICE)]
    rows = []
    for label, op, case_flags in cases:
        for name, obj in objs.items():
            flags = case_flags
            if name == "bytes" and op == "OP_GET_EXTENDED":
                flags = PyBUF_FULL_RO      # bytes: no PyBUF_DEVICE answer
            timers = [c_timer(m, getattr(m, op), obj, flags, iterations)
                      for m in (full, limited)]
            timers.append(c_timer(full, full.OP_CHECK_BUFFER, obj, 0,
                                  iterations))
            f, lim, check = interleaved(timers, repeats)
            rows.append(Row(f"limited {label}({name}, 0x{flags:x})", lim,
                            "full API, same call", f,
                            note=f"PyObject_CheckBuffer {check:.2f} ns"))
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer iterations (for CI)")
    parser.add_argument("--json", metavar="PATH",
                        help="also write the results as JSON to PATH")
    args = parser.parse_args(argv)
    if sys.version_info < (3, 11):
        print("bench_limited: the limited API of bufferext.h needs 3.11+")
        return 0
    iterations, repeats = (20_000, 5) if args.quick else (200_000, 15)
    with tempfile.TemporaryDirectory(prefix="bufferext-bench-") as workdir:
        rows = measure(build(workdir, False), build(workdir, True),
                       iterations, repeats)
    env: Dict[str, str] = environment()
    print_table(rows, "bufferext.h, limited API vs full API: " + ", ".join(
        f"{k} {v}" for k, v in env.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "quick": args.quick,
                       "rows": [r.as_dict() for r in rows]}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
