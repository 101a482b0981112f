"""The build recipes of README "Build" and docs/guide.rst "Building".

The fast tests check what the recipes rely on in the installed package: the
``--includes``/``--cflags``/``--cmakedir``/``--pkgconfigdir`` options and the
pkg-config and CMake files (relative paths, the package's version).

The recipe tests build docs/examples/recipes/shape.c (a consumer of
bufferext.h) with each recipe, each in a fresh virtual environment, and run
check_shape.py against bufferext.CPUBuffer.  They need a package index (or
pip's configured mirrors) for setuptools, meson-python, scikit-build-core
and friends, and a directory holding a bufferext wheel for this interpreter
and a bufferext-headers wheel (the recipes' build requirement, headers/ of
the checkout; isolated builds must install neither numpy nor bufferext),
so they run only with BUFFEREXT_RECIPES_WHEELHOUSE=DIR (.ci/run's
``recipes`` step sets it).

The C++ recipes (pybind11 with setuptools, nanobind with scikit-build-core)
build one module each holding a consumer, describe(obj), and a producer,
Matrix, checked by check_describe.py and check_producer.py.
tests/test_recipes_cpp.py compiles the same sources directly, in every run.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest

import bufferext

HERE = Path(__file__).resolve().parent
RECIPES = HERE.parent / "docs" / "examples" / "recipes"
WHEELHOUSE = os.environ.get("BUFFEREXT_RECIPES_WHEELHOUSE", "")


README = HERE.parent / "README.md"
RECIPE_BLOCK = re.compile(r"<!-- recipe: (\S+) -->\n```[a-z]*\n(.*?)```",
                          re.S)


@pytest.mark.skipif(not README.is_file(), reason="README.md is not beside "
                    "the tests (a copy of tests/ outside the checkout)")
def test_readme_build_snippets_are_the_tested_recipe_files() -> None:
    # README "Build" shows whole recipe files, each marked with the file it
    # is; the recipes step builds those files, so what a reader pastes
    # into an empty folder is what CI built (a snippet that lost its
    # install() line once built an empty wheel and reported success)
    shown = {path: body for path, body
             in RECIPE_BLOCK.findall(README.read_text(encoding="utf-8"))}
    assert set(shown) == {
        f"docs/examples/recipes/{name}" for name in (
            "setuptools/pyproject.toml", "setuptools/setup.py",
            "meson/pyproject.toml", "meson/meson.build",
            "cmake/pyproject.toml", "cmake/CMakeLists.txt")}
    for path, body in shown.items():
        assert body == (HERE.parent / path).read_text(encoding="utf-8"), path


# ---- bufferext-headers is required at bufferext's own version ---------------

#: A quoted requirement (TOML, Python): ``"bufferext-headers==0.1.0"``.
QUOTED = re.compile(r"""(["'])bufferext-headers([^"'\n]*)\1""")
#: A shell requirement: a word of a ``pip install`` line.
PIP_WORD = re.compile(r"""(?<![\w"'/.@-])bufferext-headers(\S*)""")


def unpinned(text: str, version: str) -> List[str]:
    """The requirements of ``bufferext-headers`` in ``text`` that are not
    pinned to ``version``: ``==VERSION``, or a file URL of that version's
    wheel.  Unpinned, pip takes the highest version any index offers, and
    the name is not yet claimed on the public one."""
    def pinned(spec: str) -> bool:
        return spec == f"=={version}" or (spec.lstrip().startswith("@")
                                          and f"-{version}-" in spec)

    found = [m.group(0) for m in QUOTED.finditer(text)
             if m.group(2)[:1] in ("", "=", "<", ">", "!", "~", ";", "[", ",", " ")
             and not pinned(m.group(2))]
    for line in text.splitlines():
        if re.search(r"\bpip\b.*\binstall\b", line):
            found += [m.group(0) for m in PIP_WORD.finditer(line)
                      if not pinned(m.group(1))]
    return found


def test_the_unpinned_requirement_finder_sees_one() -> None:
    assert unpinned('requires = ["setuptools>=64", "bufferext-headers"]\n'
                    "python -m pip install wheel bufferext-headers>=0.1\n"
                    "'bufferext-headers==0.0.9' 'bufferext-headers @ file:///b.whl'",
                    "0.1.0") == ['"bufferext-headers"', "'bufferext-headers==0.0.9'",
                                 "'bufferext-headers @ file:///b.whl'",
                                 "bufferext-headers>=0.1"]
    assert unpinned('["bufferext-headers==0.1.0"] pip install bufferext-headers==0.1.0 '
                    '"bufferext-headers @ file:///x/bufferext_headers-0.1.0-py3-none-any.whl"'
                    "\nprose: bufferext-headers' entry point; bufferext-headers is "
                    "the header", "0.1.0") == []


@pytest.mark.skipif(not (HERE.parent / "headers" / "README.md").is_file(),
                    reason="the checkout's README.md, headers/ and docs/ are "
                           "not beside the tests (a copy of tests/ outside "
                           "it)")
def test_every_bufferext_headers_requirement_is_pinned() -> None:
    """Wherever a reader copies a requirement of bufferext-headers from (the
    README, the docs' pages, the recipes' pyproject.toml), it names
    bufferext's own version (the history page, changes.rst, is not copied
    from; headers/pyproject.toml is the distribution itself)."""
    root = HERE.parent
    sources = [README, root / "headers" / "README.md",
               *sorted((root / "docs").glob("*.rst")),
               *sorted((root / "docs" / "examples").rglob("pyproject.toml"))]
    found = {str(p.relative_to(root)): unpinned(p.read_text(encoding="utf-8"),
                                                bufferext.__version__)
             for p in sources if p.name != "changes.rst"}
    assert {k: v for k, v in found.items() if v} == {}
    assert len(found) > 10


def _cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "bufferext", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


# ---- what the recipes rely on, in the installed package --------------------

def test_cflags_and_includes() -> None:
    include = bufferext.get_include()
    assert os.path.isfile(os.path.join(include, "bufferext.h"))
    assert _cli("--cflags") == f"-I{include}"
    flags = _cli("--includes").split()
    assert flags[0] == f"-I{include}"
    assert f"-I{sysconfig.get_path('include')}" in flags
    assert any(os.path.isfile(os.path.join(f[2:], "Python.h")) for f in flags)


def test_cmake_config() -> None:
    cmakedir = Path(_cli("--cmakedir"))
    config = (cmakedir / "bufferextConfig.cmake").read_text()
    assert "bufferext::headers" in config
    assert "${CMAKE_CURRENT_LIST_DIR}/../../.." in config     # relative
    assert (cmakedir / "../../../include/bufferext.h").resolve().is_file()
    version = (cmakedir / "bufferextConfigVersion.cmake").read_text()
    assert f'set(PACKAGE_VERSION "{bufferext.__version__}")' in version


def test_pkgconfig_file() -> None:
    pcdir = Path(_cli("--pkgconfigdir"))
    text = (pcdir / "bufferext.pc").read_text()
    assert re.search(r"^prefix=\$\{pcfiledir\}/\.\./\.\.$", text, re.M)
    assert f"\nVersion: {bufferext.__version__}\n" in text
    assert (pcdir / "../../include/bufferext.h").resolve().is_file()
    if shutil.which("pkg-config") is None:
        return
    env = dict(os.environ, PKG_CONFIG_PATH=str(pcdir))

    def pkg_config(option: str) -> str:
        return subprocess.run(["pkg-config", option, "bufferext"],
                              capture_output=True, text=True, env=env,
                              check=True).stdout.strip()

    assert os.path.samefile(pkg_config("--cflags")[2:], bufferext.get_include())
    assert pkg_config("--modversion") == bufferext.__version__


# ---- the recipes, each from a fresh virtual environment --------------------

needs_wheelhouse = pytest.mark.skipif(
    not WHEELHOUSE, reason="set BUFFEREXT_RECIPES_WHEELHOUSE=DIR (a bufferext "
                           "wheel for this Python and a bufferext-headers "
                           "wheel) to build the recipes")


class Venv:
    """A fresh ``python -m venv`` with bufferext from the wheelhouse."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.env = dict(os.environ)
        for name in ("PYTHONPATH", "PYTHONHOME", "PYTEST_ADDOPTS"):
            self.env.pop(name, None)
        self.env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        base = getattr(sys, "_base_executable", sys.executable)
        self.run(base, "-m", "venv", str(root))
        self.python = str(root / "bin" / "python")
        self.env["PATH"] = f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}"
        self.env["VIRTUAL_ENV"] = str(root)

    def run(self, *cmd: str, cwd: Optional[Path] = None,
            env: Optional[Dict[str, str]] = None) -> str:
        done = subprocess.run(list(cmd), cwd=cwd, env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=540)
        out = done.stdout + done.stderr
        assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{out[-6000:]}"
        return out

    def pip(self, *args: str, cwd: Optional[Path] = None,
            env: Optional[Dict[str, str]] = None) -> str:
        return self.run(self.python, "-m", "pip", "install", "-q",
                        "--find-links", WHEELHOUSE, *args, cwd=cwd, env=env)

    def check(self, cwd: Path, pythonpath: Optional[Path] = None) -> None:
        env = {"PYTHONPATH": str(pythonpath)} if pythonpath else None
        out = self.run(self.python, str(RECIPES / "check_shape.py"),
                       cwd=cwd, env=env)
        assert "bufferext_recipe: ok" in out


def _project(tmp_path: Path, recipe: str, *sources: str) -> Path:
    """A copy of docs/examples/recipes/RECIPE with ``sources`` (default:
    shape.c) beside it."""
    dest = tmp_path / recipe
    shutil.copytree(RECIPES / recipe, dest)
    for source in sources or ("shape.c",):
        shutil.copy(RECIPES / source, dest)
    return dest


def _headers_wheel() -> str:
    found = sorted(glob.glob(os.path.join(
        WHEELHOUSE, "bufferext_headers-*-py3-none-any.whl")))
    assert found, f"no bufferext-headers wheel in {WHEELHOUSE}"
    return found[-1]


def _forbid_runtime(tmp_path: Path,
                    names: Sequence[str] = ("numpy", "bufferext")
                    ) -> Dict[str, str]:
    """pip's environment for an isolated build that must not install
    numpy, nor bufferext itself: a constraint no version meets (pip hands
    PIP_CONSTRAINT to the build environment's pip; PIP_BUILD_CONSTRAINT is
    newer pips' name for the same).  Were one a build requirement, or a
    requirement's dependency, the build would fail to resolve."""
    constraints = tmp_path / "forbidden.txt"
    constraints.write_text("".join(f"{name}<0\n" for name in names))
    return {"PIP_CONSTRAINT": str(constraints),
            "PIP_BUILD_CONSTRAINT": str(constraints)}


@needs_wheelhouse
def test_isolated_build_installs_no_numpy(tmp_path: Path) -> None:
    """The constraint of :func:`_forbid_runtime` holds: the recipe as it
    was, requiring bufferext (which depends on numpy), fails under a
    constraint on numpy alone, naming it; the recipes below build under
    it."""
    project = _project(tmp_path, "setuptools")
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        '"bufferext-headers==0.1.0"]', '"bufferext-headers", "bufferext"]'))
    venv = Venv(tmp_path / "venv")
    done = subprocess.run(
        [venv.python, "-m", "pip", "install", "--find-links", WHEELHOUSE, "."],
        cwd=project, env={**venv.env, **_forbid_runtime(tmp_path, ["numpy"])},
        capture_output=True, text=True, timeout=540)
    assert done.returncode != 0
    assert "numpy<0" in done.stdout + done.stderr, \
        (done.stdout + done.stderr)[-3000:]


@needs_wheelhouse
def test_setuptools_as_the_c_api_page_builds_it(tmp_path: Path) -> None:
    """docs/capi.rst's build: ``PIP_FIND_LINKS=DIR python -m pip install .``
    in a fresh venv, bufferext-headers from a local wheelhouse into the
    isolated build environment (``--find-links DIR`` works the same), and
    nothing of bufferext's runtime."""
    project = _project(tmp_path, "setuptools")
    venv = Venv(tmp_path / "venv")
    venv.run(venv.python, "-m", "pip", "install", ".", cwd=project,
             env={"PIP_FIND_LINKS": WHEELHOUSE, **_forbid_runtime(tmp_path)})
    venv.pip("bufferext")                 # at run time, for the check only
    venv.check(tmp_path)


@needs_wheelhouse
def test_setuptools_isolated_file_url(tmp_path: Path) -> None:
    """``requires = [..., "bufferext-headers @ file:///...whl"]``."""
    project = _project(tmp_path, "setuptools")
    pyproject = project / "pyproject.toml"
    url = Path(_headers_wheel()).as_uri()
    pyproject.write_text(pyproject.read_text().replace(
        '"bufferext-headers==0.1.0"]', f'"bufferext-headers @ {url}"]'))
    venv = Venv(tmp_path / "venv")
    venv.run(venv.python, "-m", "pip", "install", "-q", ".", cwd=project,
             env=_forbid_runtime(tmp_path))
    venv.pip("bufferext")
    venv.check(tmp_path)


@needs_wheelhouse
def test_setuptools_no_isolation(tmp_path: Path) -> None:
    """``pip install "setuptools>=64" wheel bufferext-headers==0.1.0`` then
    ``pip install --no-build-isolation .`` (a fresh venv's setuptools may
    predate bdist_wheel in setuptools itself: upgrade it first)."""
    project = _project(tmp_path, "setuptools")
    venv = Venv(tmp_path / "venv")
    venv.pip("--upgrade", "setuptools>=64", "wheel", "bufferext-headers==0.1.0",
             env=_forbid_runtime(tmp_path))
    venv.pip("--no-build-isolation", ".", cwd=project)
    venv.pip("bufferext")
    venv.check(tmp_path)


@needs_wheelhouse
def test_meson_python(tmp_path: Path) -> None:
    """meson-python, isolated: ``dependency('bufferext')`` through
    bufferext.pc, found by the `pkgconf` build requirement."""
    project = _project(tmp_path, "meson")
    venv = Venv(tmp_path / "venv")
    venv.pip(".", cwd=project, env={"FORCE_PKGCONF_PYPI": "1",
                                    **_forbid_runtime(tmp_path)})
    venv.pip("bufferext")
    venv.check(tmp_path)


@needs_wheelhouse
def test_scikit_build_core(tmp_path: Path) -> None:
    """scikit-build-core, isolated: ``find_package(bufferext CONFIG)`` with
    bufferext_DIR from ``python -m bufferext_headers --cmakedir``."""
    project = _project(tmp_path, "cmake")
    venv = Venv(tmp_path / "venv")
    venv.pip(".", cwd=project, env=_forbid_runtime(tmp_path))
    venv.pip("bufferext")
    venv.check(tmp_path)


@needs_wheelhouse
def test_makefile(tmp_path: Path) -> None:
    """``make PYTHON=python``: ``python -m bufferext_headers --includes``."""
    if shutil.which("make") is None:
        pytest.skip("no make")
    project = _project(tmp_path, "make")
    venv = Venv(tmp_path / "venv")
    venv.pip("bufferext-headers==0.1.0", env=_forbid_runtime(tmp_path))
    venv.run("make", f"PYTHON={venv.python}", cwd=project)
    venv.pip("bufferext")
    venv.check(tmp_path, pythonpath=project)


@needs_wheelhouse
@pytest.mark.skipif(not README.is_file(), reason="README.md is not beside "
                    "the tests (a copy of tests/ outside the checkout)")
def test_readme_compiler_command(tmp_path: Path) -> None:
    """README's one-command build (``cc ... $(python -m bufferext_headers
    --includes) shape.c``), run as shown in a folder holding shape.c."""
    if shutil.which("cc") is None:
        pytest.skip("no cc")
    blocks = re.findall(r"<!-- recipe-command: shape\.c -->\n```sh\n(.*?)```",
                        README.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 1, blocks
    project = tmp_path / "cc"
    project.mkdir()
    shutil.copy(RECIPES / "shape.c", project)
    venv = Venv(tmp_path / "venv")
    venv.pip("bufferext-headers==0.1.0", env=_forbid_runtime(tmp_path))
    venv.run("bash", "-e", "-o", "pipefail", "-c", blocks[0], cwd=project)
    venv.pip("bufferext")
    venv.check(tmp_path, pythonpath=project)


#: What the C++ projects include from beside them.
CXX_HEADERS = ("extended_buffer.hpp", "host_matrix.hpp")


def _check_cxx(venv: Venv, module: str, cwd: Path) -> None:
    """The consumer (check_describe.py) and the producer (check_producer.py,
    whose conformance report runs ``python -m bufferext check``) of one
    C++ module installed in ``venv``."""
    out = venv.run(venv.python, str(RECIPES / "check_describe.py"), module,
                   cwd=cwd)
    assert f"{module}: ok" in out
    out = venv.run(venv.python, str(RECIPES / "check_producer.py"), module,
                   cwd=cwd)
    assert f"{module}: producer ok" in out


@needs_wheelhouse
def test_pybind11_setuptools(tmp_path: Path) -> None:
    """pybind11's setup helpers, isolated: ``requires = ["setuptools>=64",
    "pybind11>=2.13", "bufferext-headers==0.1.0"]``; describe.cpp holds the buffer
    in the RAII ExtendedBuffer of extended_buffer.hpp, and matrix.cpp's
    Matrix (host_matrix.hpp) exports one through py::custom_type_setup."""
    project = _project(tmp_path, "pybind11", *CXX_HEADERS)
    venv = Venv(tmp_path / "venv")
    venv.pip(".", cwd=project, env=_forbid_runtime(tmp_path))
    venv.pip("bufferext")
    _check_cxx(venv, "bufferext_pybind11", tmp_path)


@needs_wheelhouse
def test_nanobind_scikit_build_core(tmp_path: Path) -> None:
    """nanobind through scikit-build-core, isolated: ``requires =
    ["scikit-build-core", "nanobind>=2", "bufferext-headers==0.1.0"]`` and
    ``nanobind_add_module`` linked with ``bufferext::headers``; the twins of
    the pybind11 module, Matrix's slots given as nb::type_slots."""
    project = _project(tmp_path, "nanobind", *CXX_HEADERS)
    venv = Venv(tmp_path / "venv")
    venv.pip(".", cwd=project, env=_forbid_runtime(tmp_path))
    venv.pip("bufferext")
    _check_cxx(venv, "bufferext_nanobind", tmp_path)
