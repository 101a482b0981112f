"""The C++ recipes of docs/examples/recipes, compiled directly.

pybind11/ and nanobind/ each hold one module of two files: describe.cpp, a
consumer (over extended_buffer.hpp), and matrix.cpp, a producer (Matrix,
over host_matrix.hpp).  They are compiled with the C++ compiler against the
installed headers, with no build system and no package index, with
-Wall -Wextra -Werror, and run through check_describe.py and
check_producer.py.  pybind11 is a test requirement; nanobind (Python 3.10+)
is not, so its test runs where nanobind is installed.  tests/test_recipes.py
builds both projects with pip from a fresh virtual environment.  CI runs
this file in its recipes step, with both libraries installed (.ci/lib.sh).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import List

import pytest

import bufferext

RECIPES = (Path(__file__).resolve().parent.parent / "docs" / "examples" /
           "recipes")
# the test-only modules over the recipes
TESTS = Path(__file__).resolve().parent / "recipes"


def _cxx() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    return cxx


def _cxx_command(cxx: str, std: str, out: Path, sources: List[Path],
                 includes: List[str], *options: str) -> List[str]:
    """``cxx`` compiling ``sources`` against bufferext.h, Python.h and the
    recipes' extended_buffer.hpp and host_matrix.hpp; ``includes`` are a
    binding library's headers, as system headers (their warnings are not
    ours)."""
    command = [cxx, f"-std={std}", "-O1", "-fPIC", "-fvisibility=hidden",
               "-Wall", "-Wextra", *options, "-o", str(out),
               *map(str, sources), f"-I{RECIPES}",
               f"-I{bufferext.get_include()}",
               f"-I{sysconfig.get_path('include')}"]
    for directory in includes:
        command += ["-isystem", directory]
    return command


def _run(command: List[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stderr[-6000:]}"


def _check(module: str, directory: Path) -> None:
    """check_describe.py and check_producer.py on ``module``, found in
    ``directory``."""
    for script, ok in (("check_describe.py", f"{module}: ok"),
                       ("check_producer.py", f"{module}: producer ok")):
        done = subprocess.run(
            [sys.executable, str(RECIPES / script), module],
            capture_output=True, text=True, timeout=180,
            env=dict(os.environ, PYTHONPATH=str(directory)))
        assert done.returncode == 0, done.stdout + done.stderr
        assert ok in done.stdout


def test_pybind11_recipe_compiles_and_runs(tmp_path: Path) -> None:
    """describe.cpp and matrix.cpp as C++11 with -Werror against the
    installed pybind11 and bufferext headers: describe() acquires, reports
    and releases; Matrix, whose slots come from py::custom_type_setup,
    passes the conformance report and exports its items."""
    pybind11 = pytest.importorskip("pybind11")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    module = tmp_path / f"bufferext_pybind11{suffix}"
    _run(_cxx_command(_cxx(), "c++11", module,
                      [RECIPES / "pybind11" / "describe.cpp",
                       RECIPES / "pybind11" / "matrix.cpp"],
                      [pybind11.get_include()], "-shared", "-Werror"))
    _check("bufferext_pybind11", tmp_path)


def test_pybind11_matrix_handed_out_by_reference_exports(
        tmp_path: Path) -> None:
    """matrix.cpp as shipped, in a module (tests/recipes/
    borrowed_pybind11.cpp) whose Owner.matrix returns its HostMatrix member
    with reference_internal: pybind11 wraps it without constructing a
    holder, and the recipe's export must still serve it (it used to refuse
    it as "not initialized"), while still refusing Matrix.__new__(Matrix);
    the export keeps the owner alive."""
    pybind11 = pytest.importorskip("pybind11")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    module = tmp_path / f"borrowed_pybind11{suffix}"
    _run(_cxx_command(_cxx(), "c++11", module,
                      [TESTS / "borrowed_pybind11.cpp"],
                      [pybind11.get_include()], "-shared", "-Werror"))
    done = subprocess.run(
        [sys.executable, str(TESTS / "check_borrowed.py"),
         "borrowed_pybind11"],
        capture_output=True, text=True, timeout=180,
        env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "borrowed_pybind11: borrowed ok" in done.stdout


def _build_nanobind(tmp_path: Path, options: List[str]) -> None:
    """nanobind/describe.cpp and matrix.cpp as C++17 with -Werror and
    `options`, linked with nanobind's own sources (nb_combined.cpp, what
    nanobind_add_module builds) into tmp_path/bufferext_nanobind."""
    nanobind = pytest.importorskip("nanobind")
    root = Path(nanobind.__file__).resolve().parent
    includes = [nanobind.include_dir(),
                str(root / "ext" / "robin_map" / "include")]
    cxx, suffix = _cxx(), sysconfig.get_config_var("EXT_SUFFIX")
    objects = []
    for source in (RECIPES / "nanobind" / "describe.cpp",
                   RECIPES / "nanobind" / "matrix.cpp",
                   Path(nanobind.source_dir()) / "nb_combined.cpp"):
        objects.append(str(tmp_path / f"{source.stem}.o"))
        ours = source.parent.parent == RECIPES
        _run(_cxx_command(cxx, "c++17", Path(objects[-1]), [source],
                          includes, "-c",
                          *(options + ["-Werror"] if ours else [])))
    _run([cxx, "-shared", "-o", str(tmp_path / f"bufferext_nanobind{suffix}"),
          *objects])


def test_nanobind_recipe_compiles_and_runs(tmp_path: Path) -> None:
    """The nanobind recipes built as nanobind_add_module would build them
    (_build_nanobind), checked as the pybind11 one."""
    _build_nanobind(tmp_path, [])
    _check("bufferext_nanobind", tmp_path)


# ---- the recipes adapted to device memory ------------------------------
#
# The producer recipes pass NULL (CPU memory) to BufferExt_SetDevice; a
# device exporter adapts them by passing its device name, which makes the
# call refuse a plain request.  tests/recipes/device_adapted.h, forced
# ahead of the recipe's source, makes exactly that change; the recipe must
# then refuse every plain consumer before it counts the export or takes a
# reference (check_device_adapted.py).

ADAPTED = ["-include", str(TESTS / "device_adapted.h")]


def _check_device_adapted(module: str, cls: str, directory: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(TESTS / "check_device_adapted.py"), module, cls],
        capture_output=True, text=True, timeout=180,
        env=dict(os.environ, PYTHONPATH=str(directory)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{module}: device adapted ok" in done.stdout


def test_pybind11_recipe_adapted_to_a_device_refuses_plain(
        tmp_path: Path) -> None:
    """pybind11/matrix.cpp with a device name: memoryview, bytes() and
    memoryview._from_flags(DEVICE) get BufferError, nothing counted."""
    pybind11 = pytest.importorskip("pybind11")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    _run(_cxx_command(_cxx(), "c++11",
                      tmp_path / f"bufferext_pybind11{suffix}",
                      [RECIPES / "pybind11" / "describe.cpp",
                       RECIPES / "pybind11" / "matrix.cpp"],
                      [pybind11.get_include()], "-shared", "-Werror",
                      *ADAPTED))
    _check_device_adapted("bufferext_pybind11", "Matrix", tmp_path)


def test_nanobind_recipe_adapted_to_a_device_refuses_plain(
        tmp_path: Path) -> None:
    """nanobind/matrix.cpp with a device name, as the pybind11 one."""
    _build_nanobind(tmp_path, ADAPTED)
    _check_device_adapted("bufferext_nanobind", "Matrix", tmp_path)


def test_example_c_producer_adapted_to_a_device_refuses_plain(
        tmp_path: Path) -> None:
    """docs/examples/example.c's HostArray (the README's producer, which
    says "a device exporter passes its device name instead") with a device
    name: as the C++ recipes."""
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    example = RECIPES.parent / "example.c"
    _run([cc, "-std=c99", "-O1", "-fPIC", "-shared", "-Wall", "-Werror",
          *ADAPTED, f"-I{bufferext.get_include()}",
          f"-I{sysconfig.get_path('include')}", "-o",
          str(tmp_path / f"bufferext_example{suffix}"), str(example)])
    _check_device_adapted("bufferext_example", "HostArray", tmp_path)
