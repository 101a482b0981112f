"""Build the compiled C-API tests of ``bufferext.h`` with the running
interpreter.

The headers come from the INSTALLED package (``bufferext.get_include()``),
never from the source tree's ``Include/``, so the tests check what users
get.  Every build uses ``-Wall -Wextra -Werror``.

    python tests/capi/build.py --matrix     # build every standard; exit 1
                                            # on any warning or error

Library use (tests/conftest.py)::

    results = build_all(outdir)             # {"c99": BuildResult, ...}
    module = load_module(results["c99"])

``CFLAGS`` and ``LDFLAGS`` from the environment are appended (e.g. the
AddressSanitizer flags); ``CC`` and ``CXX`` override the compilers.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.machinery
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from types import ModuleType
from typing import Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_INCLUDE = os.path.normpath(os.path.join(HERE, "..", "..", "Include"))
#: the header as released at ABI 3 (the per-thread mark), for
#: tests/test_abi_mixing.py
ABI3_INCLUDE = os.path.normpath(os.path.join(HERE, "..", "abi3", "Include"))

#: standard -> (language, -std flag).  C++ builds compile the C source with
#: ``-x c++``: testcapi.c is written to be valid C and C++.
STANDARDS: Dict[str, Tuple[str, str]] = {
    "c99": ("c", "-std=c99"),
    "c11": ("c", "-std=c11"),
    "cxx11": ("c++", "-std=c++11"),
    "cxx17": ("c++", "-std=c++17"),
}
#: the compile-only layout test needs static assertions (C11 / C++11)
LAYOUT_STANDARDS: Tuple[str, ...] = ("c11", "cxx11", "cxx17")
WARNINGS: Tuple[str, ...] = ("-Wall", "-Wextra", "-Werror")


class CompilerNotFound(RuntimeError):
    """No C or C++ compiler is available."""


@dataclass
class BuildResult:
    """One compiler run: what was built, how, and what it printed."""

    name: str
    standard: str
    path: str
    command: List[str]
    returncode: int
    output: str
    module_name: str = ""
    extra: Dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Compiled, and printed no warning at all."""
        return self.returncode == 0 and not self.output.strip()


def _compiler(env_var: str, config_var: str, fallbacks: Sequence[str]
              ) -> List[str]:
    """The compiler command for a language, as an argument list."""
    candidates = [os.environ.get(env_var), sysconfig.get_config_var(
        config_var)] + list(fallbacks)
    for candidate in candidates:
        if not candidate:
            continue
        argv = shlex.split(candidate)
        if argv and shutil.which(argv[0]):
            return argv
    raise CompilerNotFound(
        f"no {env_var} compiler found (tried ${env_var}, sysconfig "
        f"{config_var!r}, {', '.join(fallbacks)})")


def compilers() -> Dict[str, List[str]]:
    """{"c": [...], "c++": [...]}; raises CompilerNotFound."""
    return {
        "c": _compiler("CC", "CC", ["cc", "gcc", "clang"]),
        "c++": _compiler("CXX", "CXX", ["c++", "g++", "clang++"]),
    }


def include_dirs() -> List[str]:
    """Python's include directory and the installed bufferext headers."""
    import bufferext

    header_dir = os.path.normpath(bufferext.get_include())
    if not os.path.isfile(os.path.join(header_dir, "bufferext.h")):
        raise RuntimeError(f"bufferext.h not found in {header_dir}: is the "
                           f"package installed (pip install .)?")
    if header_dir == SOURCE_INCLUDE:
        raise RuntimeError("bufferext was imported from the source tree; "
                           "the C-API tests must build against the "
                           "installed package")
    return [sysconfig.get_paths()["include"], header_dir]


def _env_flags(name: str) -> List[str]:
    return shlex.split(os.environ.get(name, ""))


def _run(result: BuildResult) -> BuildResult:
    proc = subprocess.run(result.command, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True)
    result.returncode = proc.returncode
    result.output = proc.stdout
    return result


def _base_command(standard: str) -> List[str]:
    language, std = STANDARDS[standard]
    cmd = compilers()[language] + ["-x", language, std, *WARNINGS,
                                   "-O1", "-g", "-fPIC"]
    for directory in include_dirs():
        cmd.append("-I" + directory)
    return cmd


def module_command(standard: str, outdir: str, name: str = "",
                   defines: Sequence[str] = ()) -> BuildResult:
    """How to build testcapi.c as the module `name` (default
    ``testcapi_<standard>``), with extra macros `defines`."""
    name = name or f"testcapi_{standard}"
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    path = os.path.join(outdir, name + suffix)
    link = (["-bundle", "-undefined", "dynamic_lookup"]
            if sys.platform == "darwin" else ["-shared"])
    cmd = (_base_command(standard) + [f"-D{d}" for d in defines]
           + [f"-DMODNAME={name}", "-DBUFFEREXT_ENABLE_CACHE_STATS",
              *_env_flags("CFLAGS"), os.path.join(HERE, "testcapi.c"),
              *link, *_env_flags("LDFLAGS"), "-o", path])
    return BuildResult(name, standard, path, cmd, -1, "", module_name=name)


def abimix_command(abi: int, outdir: str) -> BuildResult:
    """How to build abimix.c as C11 against the header of ABI `abi` (3: the
    one kept in tests/abi3, in backport mode whatever the interpreter; 4:
    the installed one), as the module ``abimix_v<abi>``."""
    name = f"abimix_v{abi}"
    path = os.path.join(outdir, name + importlib.machinery.EXTENSION_SUFFIXES[0])
    cmd = _base_command("c11")
    if abi == 3:
        cmd = [arg for arg in cmd if not arg.startswith("-I")] + [
            "-I" + sysconfig.get_paths()["include"], "-I" + ABI3_INCLUDE,
            "-DBUFFEREXT_FORCE_BACKPORT"]
    link = (["-bundle", "-undefined", "dynamic_lookup"]
            if sys.platform == "darwin" else ["-shared"])
    cmd += [f"-DMODNAME={name}", *_env_flags("CFLAGS"),
            os.path.join(HERE, "abimix.c"), *link, *_env_flags("LDFLAGS"),
            "-o", path]
    return BuildResult(name, "c11", path, cmd, -1, "", module_name=name)


def layout_command(standard: str, outdir: str,
                   defines: Sequence[str] = ()) -> BuildResult:
    """How to compile (only) layout.c as ``standard``."""
    tag = "_".join(d.lower() for d in defines)
    path = os.path.join(outdir, f"layout_{standard}{tag}.o")
    # -Wpedantic: the header is as clean as Python.h (the test extension
    # itself is not: PyType_Slot makes it cast functions to void *)
    cmd = (_base_command(standard) + ["-Wpedantic"]
           + [f"-D{d}" for d in defines]
           + [*_env_flags("CFLAGS"), "-c", os.path.join(HERE, "layout.c"),
              "-o", path])
    return BuildResult(f"layout_{standard}", standard, path, cmd, -1, "")


def build(commands: Sequence[BuildResult], jobs: int = 2
          ) -> List[BuildResult]:
    """Run the compiler commands, `jobs` at a time."""
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(_run, commands))


def build_all(outdir: str, jobs: int = 2) -> Dict[str, BuildResult]:
    """Build the module for every standard and the layout test for every
    standard that has static assertions.  Keys: "c99", ..., "layout_c11"."""
    if sys.platform == "win32":
        raise CompilerNotFound("tests/capi/build.py drives gcc/clang only")
    commands = [module_command(s, outdir) for s in STANDARDS]
    commands += [layout_command(s, outdir) for s in LAYOUT_STANDARDS]
    return {(r.standard if r.module_name else r.name): r
            for r in build(commands, jobs)}


def load_module(result: BuildResult) -> ModuleType:
    """Import a built test module from its path."""
    if not result.ok:
        raise ImportError(f"{result.name} did not build cleanly:\n"
                          f"{result.output}")
    spec = importlib.util.spec_from_file_location(result.module_name,
                                                  result.path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI: build the matrix, print one line per build, 1 on any problem."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--matrix", action="store_true",
                        help="build every standard (the default action)")
    parser.add_argument("--outdir", help="keep the builds here")
    args = parser.parse_args(argv)
    outdir = args.outdir or tempfile.mkdtemp(prefix="bufferext-capi-")
    os.makedirs(outdir, exist_ok=True)
    try:
        results = build_all(outdir)
        failed = 0
        for key, result in results.items():
            print(f"{'ok  ' if result.ok else 'FAIL'} {key:12} "
                  f"{sys.implementation.cache_tag} {result.path}")
            if not result.ok:
                failed += 1
                print("    " + " ".join(result.command))
                print(result.output)
        if not failed:
            for key, result in results.items():
                if result.module_name:
                    load_module(result)     # it must import, too
        return 1 if failed else 0
    finally:
        if not args.outdir:
            shutil.rmtree(outdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
