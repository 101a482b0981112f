"""Shared fixtures of the bufferext test suite.

The C-API fixtures build tests/capi/testcapi.c (as C99, C11, C++11, C++17)
and tests/capi/layout.c once per session against the INSTALLED bufferext
headers; tests that use them are skipped, with the reason, only when no C
or C++ compiler exists.

In a multi-process ``--with-mpi`` run, tests/_mpi_guard.py turns a failure
on one rank, or a test that hangs, into a quick end of the whole job that
names the test (see that module).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
from types import ModuleType
from typing import Dict, Generator, List

import pytest

import _mpi_guard

CAPI_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "capi")


def _load_capi_build() -> ModuleType:
    """tests/capi/build.py, imported by path (``build`` is also the name of
    a PyPI package)."""
    spec = importlib.util.spec_from_file_location(
        "bufferext_capi_build", os.path.join(CAPI_DIR, "build.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module     # dataclasses look it up there
    spec.loader.exec_module(module)
    return module


def pytest_configure(config: pytest.Config) -> None:
    """The MPI guard, in multi-process ``--with-mpi`` runs only."""
    _mpi_guard.install(config)


FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
_GIL_TURNED_ON: List[str] = []      # the test that did it, once


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """On a free-threaded interpreter, a test that turns the GIL back on
    (by importing an extension that does not declare Py_MOD_GIL_NOT_USED:
    one the tests build, say) fails: the rest of the suite would run with
    the GIL."""
    yield
    if (FREE_THREADED and not _GIL_TURNED_ON and
            sys._is_gil_enabled()):  # type: ignore[attr-defined]
        _GIL_TURNED_ON.append(item.nodeid)
        pytest.fail(f"{item.nodeid} turned the GIL back on (an extension "
                    "imported without Py_MOD_GIL_NOT_USED); the tests after "
                    "it ran with the GIL", pytrace=False)


@pytest.fixture(scope="session")
def capi_build() -> ModuleType:
    """The build helper module (tests/capi/build.py)."""
    return _load_capi_build()


@pytest.fixture(scope="session")
def capi_builds(capi_build: ModuleType, tmp_path_factory: pytest.TempPathFactory
                ) -> Dict[str, object]:
    """Every C-API build of this session: {"c99": BuildResult, ...,
    "layout_c11": BuildResult, ...}."""
    try:
        capi_build.compilers()
    except capi_build.CompilerNotFound as exc:
        pytest.skip(f"C-API tests need a C and C++ compiler: {exc}")
    return capi_build.build_all(str(tmp_path_factory.mktemp("capi")))


@pytest.fixture(scope="session")
def capi_modules(capi_build: ModuleType, capi_builds: Dict[str, object]
                 ) -> Dict[str, ModuleType]:
    """The imported test modules, by standard ("c99", "c11", "cxx11",
    "cxx17").  A build with any warning fails here, loudly."""
    return {std: capi_build.load_module(capi_builds[std])
            for std in capi_build.STANDARDS}


@pytest.fixture(params=["c99", "c11", "cxx11", "cxx17"])
def capi(request: pytest.FixtureRequest, capi_modules: Dict[str, ModuleType]
         ) -> ModuleType:
    """Each build of the test extension in turn."""
    return capi_modules[request.param]


@pytest.fixture
def c99(capi_modules: Dict[str, ModuleType]) -> ModuleType:
    """The C99 build of the test extension."""
    return capi_modules["c99"]


@pytest.fixture
def cxx17(capi_modules: Dict[str, ModuleType]) -> ModuleType:
    """The C++17 build of the test extension."""
    return capi_modules["cxx17"]
