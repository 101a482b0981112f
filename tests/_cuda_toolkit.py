"""Where the CUDA toolkit is, for the tests that compile against it
(test_cuda_headers.py: cuda.h; test_cuda_example.py: nvcc).

Without the toolkit those tests skip with the reason, unless
``BUFFEREXT_REQUIRE_CUDA_HEADERS=1`` (CI on this project's machines, which
all have the CUDA toolkit): then they fail.
"""

from __future__ import annotations

import os
import shutil
from typing import List, NoReturn, Optional, Tuple

import pytest

REQUIRED = os.environ.get("BUFFEREXT_REQUIRE_CUDA_HEADERS") == "1"
USUAL_PREFIX = "/usr/local/cuda"


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
    if REQUIRED:
        pytest.fail(f"{why}; BUFFEREXT_REQUIRE_CUDA_HEADERS=1 requires the "
                    "CUDA toolkit")
    pytest.skip(why)
