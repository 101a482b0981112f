"""The CUDA C++ example consumer (docs/examples/cuda/scale.cu), built by
nvcc against bufferext.h with its build.sh, once per module.

Here it is built, imported and shown to refuse what it cannot scale; the
stand-in driver gives it a CUDABuffer whose kernel launch must fail
cleanly (the CUDA runtime finds no driver).  tests/test_cuda_gpu.py runs
it on a real GPU.  Without nvcc the tests skip, unless
``BUFFEREXT_REQUIRE_CUDA_HEADERS=1`` (CI): then they fail.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

import bufferext
from bufferext import CUDABuffer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "cuda_standin"))
import _cuda_toolkit as toolkit  # noqa: E402
import standin_harness as harness  # noqa: E402

pytestmark = pytest.mark.skipif(
    not os.path.isfile(os.path.join(toolkit.EXAMPLE, "scale.cu")),
    reason="docs/examples/cuda is not beside the tests")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The example module's path (one nvcc run for this file)."""
    return toolkit.build_example_or_skip(str(tmp_path_factory.mktemp("scale")))


@pytest.fixture(scope="module")
def example(built: str) -> ModuleType:
    return toolkit.load_example(built)


def test_example_builds_and_imports(example: ModuleType) -> None:
    """nvcc compiled and linked it; it imports without a CUDA driver (the
    runtime is linked statically and finds the driver only when used)."""
    assert example.__name__ == "bufferext_cuda_scale"
    assert example.scale.__doc__.startswith("scale(obj, factor)")


def test_example_refuses_cpu_memory(example: ModuleType) -> None:
    with pytest.raises(BufferError, match=r'scale: needs CUDA memory '
                       r'\(device "bufferext.cuda"\), got CPU memory'):
        example.scale(bufferext.CPUBuffer((4,), "float32"), 2.0)
    with pytest.raises(TypeError, match="must be real number"):
        example.scale(bufferext.CPUBuffer((4,), "float32"), "2")


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None,
                    reason="a CUDA driver is installed: the CUDA runtime "
                    "would use it on the stand-in's context")
def test_example_on_the_standin(built: str, tmp_path: Path) -> None:
    """CUDA memory of the wrong kind is refused before any CUDA call; the
    right kind reaches the kernel launch, which fails cleanly: the CUDA
    runtime finds no driver (the stand-in is no libcuda.so.1).  Nothing is
    left exported or allocated (the harness checks)."""
    driver = harness.build(str(tmp_path))
    harness.check(driver, f"""
        import importlib.util
        spec = importlib.util.spec_from_file_location(
            "bufferext_cuda_scale", {built!r})
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        with raises(TypeError, match="needs float32 items .* got "
                           "format 'd'"):
            m.scale(CUDABuffer((4,), "float64"), 2.0)
        with raises(BufferError):
            m.scale(CUDABuffer((4,), "float32", readonly=True), 2.0)
        b = CUDABuffer((4,), "float32")
        with raises(RuntimeError, match="scale: "
                           "cudaGetDriverEntryPointByVersion failed: "
                           "cudaErrorInsufficientDriver"):
            m.scale(b, 2.0)
        assert b.exports == 0 and (b.to_host() == 0).all()
        b.close()
        """)
