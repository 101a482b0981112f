"""Where the CUDA toolkit is, for the tests that compile against it
(test_cuda_headers.py: cuda.h; test_cuda_example.py and test_cuda_gpu.py:
nvcc, to build the example docs/examples/cuda/scale.cu) and for
benchmarks/bench_cuda_gpu.py.

Without the toolkit those tests skip with the reason, unless
``BUFFEREXT_REQUIRE_CUDA_HEADERS=1`` (CI on this project's machines, which
all have the CUDA toolkit): then they fail.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from types import ModuleType
from typing import List, NoReturn, Optional, Tuple

REQUIRED = os.environ.get("BUFFEREXT_REQUIRE_CUDA_HEADERS") == "1"
USUAL_PREFIX = "/usr/local/cuda"
EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), "docs", "examples", "cuda")


def _prefixes() -> List[Tuple[str, str]]:
    """(where from, toolkit prefix), in the order they are tried."""
    found = []
    if os.environ.get("CUDA_HOME"):
        found.append(("CUDA_HOME", os.environ["CUDA_HOME"]))
    nvcc = shutil.which("nvcc")
    if nvcc is not None:
        found.append(("nvcc on PATH", os.path.dirname(os.path.dirname(
            os.path.realpath(nvcc)))))
    found.append(("the usual prefix", USUAL_PREFIX))
    return found


def cuda_include() -> Tuple[Optional[str], str]:
    """(the folder holding cuda.h, "") or (None, where it was looked for)."""
    looked = []
    for origin, prefix in _prefixes():
        include = os.path.join(prefix, "include")
        if os.path.isfile(os.path.join(include, "cuda.h")):
            return include, ""
        looked.append(f"{include} ({origin})")
    return None, "no cuda.h in " + ", ".join(looked)


def nvcc() -> Tuple[Optional[str], str]:
    """(the nvcc program, "") or (None, where it was looked for)."""
    looked = []
    for origin, prefix in _prefixes():
        program = os.path.join(prefix, "bin", "nvcc")
        if os.access(program, os.X_OK):
            return program, ""
        looked.append(f"{program} ({origin})")
    return None, "no nvcc at " + ", ".join(looked)


def missing(why: str) -> NoReturn:
    """Skip for an absent toolkit part, or fail where CI requires it."""
    import pytest
    if REQUIRED:
        pytest.fail(f"{why}; BUFFEREXT_REQUIRE_CUDA_HEADERS=1 requires the "
                    "CUDA toolkit")
    pytest.skip(why)


def build_example_or_skip(directory: str) -> str:
    """build_example with the nvcc found, for a test (which skips, or
    fails under BUFFEREXT_REQUIRE_CUDA_HEADERS=1, without one)."""
    program, why = nvcc()
    if program is None:
        missing(why)
    return build_example(program, directory)


def build_example(nvcc_program: str, directory: str) -> str:
    """Build docs/examples/cuda/scale.cu with its build.sh (as docs/cuda.rst
    says, warnings as errors) into ``directory``; the module's path.

    nvcc runs without LD_PRELOAD: its front end (cicc) crashes under the
    ASan runtime that the sanitizer job preloads into every process (the
    compiler is not what that job tests)."""
    wrapper = os.path.join(directory, "nvcc-without-preload")
    with open(wrapper, "w") as f:
        f.write(f'#!/bin/sh\nunset LD_PRELOAD\nexec "{nvcc_program}" "$@"\n')
    os.chmod(wrapper, 0o755)
    done = subprocess.run(
        ["sh", os.path.join(EXAMPLE, "build.sh")], cwd=directory,
        capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHON=sys.executable, NVCC=wrapper,
                 NVCCFLAGS="-Xcompiler -Wall,-Wextra,-Werror"))
    if done.returncode != 0:
        raise RuntimeError(f"build.sh failed:\n{done.stdout}{done.stderr}")
    return os.path.join(directory, "bufferext_cuda_scale" +
                        str(sysconfig.get_config_var("EXT_SUFFIX")))


def load_example(path: str) -> ModuleType:
    """Import the built example module from ``path``."""
    spec = importlib.util.spec_from_file_location("bufferext_cuda_scale",
                                                  path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
