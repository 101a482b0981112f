"""bufferext-headers: the header alone, a distribution with no dependencies.

The recipes name it as their build requirement so that an isolated build
of a C extension installs no numpy (tests/test_recipes.py builds them under
a constraint that forbids numpy and bufferext).  Here: its wheel, built
from headers/ of this checkout, holds the very files bufferext ships (byte
for byte), depends on nothing, has bufferext's version, and answers the
build options from its own files without importing numpy or bufferext.
"""

from __future__ import annotations

import ast
import email
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Dict, Iterator

import pytest

import bufferext
from _helpers import PARSES_PYTHON
from bufferext import _paths

ROOT = Path(__file__).resolve().parent.parent
HEADERS = ROOT / "headers"


@PARSES_PYTHON
def test_paths_module_needs_only_the_standard_library() -> None:
    # _paths.py is bufferext_headers' too: an import of the package
    # (relative, or numpy) would break the dependency-free distribution
    tree = ast.parse(Path(_paths.__file__).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"relative import in _paths.py: {ast.dump(node)}"
            imported.add((node.module or "").split(".")[0])
    assert imported <= {"__future__", "argparse", "os", "sysconfig", "typing"}, imported


@pytest.fixture(scope="module")
def headers_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bufferext-headers wheel, built (no isolation) from a copy of
    headers/ beside links to this checkout's Include/ and LICENSE and to the
    installed package as Lib/bufferext (a test copy may lack Lib/: the
    sanitizer runs remove it so the tests import the installed package)."""
    if not (HEADERS / "setup.py").is_file():
        pytest.skip("headers/ is not beside the tests (a copy of tests/ "
                    "outside the checkout)")
    work = tmp_path_factory.mktemp("headers")
    shutil.copytree(HEADERS, work / "headers", ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "include", "lib", "share", "_paths.py",
        "LICENSE"))
    for name in ("Include", "LICENSE"):
        (work / name).symlink_to(ROOT / name)
    (work / "Lib").mkdir()
    (work / "Lib" / "bufferext").symlink_to(Path(bufferext.__file__).parent)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
         "--no-build-isolation", "--no-index", "-w", str(work / "out"),
         str(work / "headers")],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    wheels = list((work / "out").glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _files_under(top: Path) -> Iterator[Path]:
    return (p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def test_wheel_is_pure_and_depends_on_nothing(headers_wheel: Path) -> None:
    assert headers_wheel.name == \
        f"bufferext_headers-{bufferext.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(headers_wheel) as whl:
        info = f"bufferext_headers-{bufferext.__version__}.dist-info"
        meta = email.message_from_bytes(whl.read(f"{info}/METADATA"))
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
        names = whl.namelist()
    assert meta["Name"] == "bufferext-headers"
    assert meta["Version"] == bufferext.__version__
    assert meta.get_all("Requires-Dist") is None
    assert "[pkg_config]\nbufferext = bufferext_headers.lib.pkgconfig" in entry_points
    assert not [n for n in names if n.endswith((".so", ".pyd", ".dll"))]


def test_wheel_holds_bufferexts_own_files(headers_wheel: Path) -> None:
    # the one source of each: Include/ and Lib/bufferext's build files
    package = Path(bufferext.__file__).parent
    expected: Dict[str, bytes] = {
        f"bufferext_headers/include/{p.relative_to(ROOT / 'Include').as_posix()}":
            p.read_bytes() for p in _files_under(ROOT / "Include")}
    # Cython's declarations, where include_path=[get_include()] finds them
    expected["bufferext_headers/include/bufferext/__init__.pxd"] = \
        (package / "__init__.pxd").read_bytes()
    for rel in ("_paths.py", "lib/pkgconfig/bufferext.pc",
                "share/cmake/bufferext/bufferextConfig.cmake",
                "share/cmake/bufferext/bufferextConfigVersion.cmake"):
        expected[f"bufferext_headers/{rel}"] = (package / rel).read_bytes()
    with zipfile.ZipFile(headers_wheel) as whl:
        shipped = {n: whl.read(n) for n in whl.namelist()
                   if n.startswith(("bufferext_headers/include/",
                                    "bufferext_headers/lib/",
                                    "bufferext_headers/share/"))
                   or n == "bufferext_headers/_paths.py"}
    assert sorted(shipped) == sorted(expected)
    for name, data in expected.items():
        assert shipped[name] == data, name
    # and bufferext's installed header directory is the same Include/
    for p in _files_under(ROOT / "Include"):
        installed = Path(bufferext.get_include()) / p.relative_to(ROOT / "Include")
        assert installed.read_bytes() == p.read_bytes(), installed


# run with numpy and bufferext made unimportable: the package must need
# neither (sys.modules[name] = None makes `import name` raise ImportError)
_RUN = ("import runpy, sys\n"
        "sys.modules['numpy'] = sys.modules['bufferext'] = None\n"
        "sys.argv[0] = 'bufferext_headers'\n"
        "runpy.run_module('bufferext_headers', run_name='__main__', alter_sys=True)\n")


@pytest.fixture(scope="module")
def installed(headers_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(headers_wheel) as whl:
        whl.extractall(target)
    return target


def _headers_cli(site: Path, *args: str) -> "subprocess.CompletedProcess[str]":
    env = dict(os.environ, PYTHONPATH=str(site))
    return subprocess.run([sys.executable, "-c", _RUN, *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_build_options_answer_from_its_own_files(installed: Path) -> None:
    package = installed / "bufferext_headers"
    answers = {}
    for option in ("--cflags", "--includes", "--cmakedir", "--pkgconfigdir"):
        done = _headers_cli(installed, option)
        assert done.returncode == 0, done.stderr
        answers[option] = done.stdout.strip()
    include = package / "include"
    assert answers["--cflags"] == f"-I{include}"
    assert answers["--includes"].split()[0] == f"-I{include}"
    assert (include / "bufferext.h").is_file()
    cmakedir = Path(answers["--cmakedir"])
    assert cmakedir == package / "share" / "cmake" / "bufferext"
    assert (cmakedir / "../../../include/bufferext.h").resolve().is_file()
    pcdir = Path(answers["--pkgconfigdir"])
    assert (pcdir / "bufferext.pc").is_file()
    assert (pcdir / "../../include/bufferext.h").resolve().is_file()
    # the header compiles from there, without bufferext's copy
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is not None:
        compiled = subprocess.run(
            [cc, "-fsyntax-only", *answers["--includes"].split(),
             str(ROOT / "docs" / "examples" / "recipes" / "shape.c")],
            capture_output=True, text=True, timeout=120)
        assert compiled.returncode == 0, compiled.stderr


def test_get_include_and_version_without_numpy(installed: Path) -> None:
    code = ("import sys; sys.modules['numpy'] = sys.modules['bufferext'] = None\n"
            "import bufferext_headers as h; print(h.__version__); print(h.get_include())")
    done = subprocess.run([sys.executable, "-c", code],
                          env=dict(os.environ, PYTHONPATH=str(installed)),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    version, include = done.stdout.split()
    assert version == bufferext.__version__
    assert Path(include) == installed / "bufferext_headers" / "include"


def test_cli_usage_errors(installed: Path) -> None:
    done = _headers_cli(installed)
    assert done.returncode == 2
    assert "name one option, e.g. --includes" in done.stderr
    done = _headers_cli(installed, "--bogus")
    assert done.returncode == 2
    assert "unrecognized arguments: --bogus" in done.stderr
    done = _headers_cli(installed, "--version")
    assert (done.returncode, done.stdout.strip()) == \
        (0, f"bufferext-headers {bufferext.__version__}")


def test_cython_cimports_from_its_include_directory(installed: Path,
                                                    tmp_path: Path) -> None:
    """``cimport bufferext`` with include_path=[get_include()]: a decoy
    bufferext/__init__.pxd that is not Cython sits in the next include
    directory (a control shows Cython reads it when it comes first), so the
    build passes only if Cython takes the declarations from the headers'
    include directory."""
    pytest.importorskip("Cython", reason="Cython is not installed (the "
                                         "'test' extra has it)")
    decoy = tmp_path / "decoy"
    (decoy / "bufferext").mkdir(parents=True)
    (decoy / "bufferext" / "__init__.pxd").write_text("this is not Cython\n")
    include = installed / "bufferext_headers" / "include"
    consumer = ROOT / "tests" / "cython" / "consumer.pyx"

    def cythonize(*include_path: Path) -> "subprocess.CompletedProcess[str]":
        options = [arg for d in include_path for arg in ("-I", str(d))]
        return subprocess.run(
            [sys.executable, "-m", "cython", "-3", *options,
             "-o", str(tmp_path / "consumer.c"), str(consumer)],
            capture_output=True, text=True, timeout=300)

    assert cythonize(decoy).returncode != 0     # the decoy, when it is read
    done = cythonize(include, decoy)
    assert done.returncode == 0, done.stdout + done.stderr
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is not None:                          # and the C compiles with it
        flags = _headers_cli(installed, "--includes").stdout.split()
        compiled = subprocess.run(
            [cc, "-fsyntax-only", *flags, str(tmp_path / "consumer.c")],
            capture_output=True, text=True, timeout=300)
        assert compiled.returncode == 0, compiled.stderr[-3000:]
