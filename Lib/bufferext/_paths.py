"""Where the C headers and the build files are, and the build options.

Stdlib only, and every path relative to this file: the same file is the
``_paths`` module of both distributions, ``bufferext`` and the
dependency-free ``bufferext-headers`` (headers/setup.py copies it there),
so ``get_include()`` and ``--includes``/``--cflags``/``--cmakedir``/
``--pkgconfigdir`` answer alike from either package's own files.
"""

from __future__ import annotations

import argparse
import os
import sysconfig
from typing import Any, Dict, Optional

__all__ = ["add_build_options", "build_paths", "get_include"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def get_include() -> str:
    """The directory holding ``bufferext.h``, for ``-I`` when building C
    extensions (like ``numpy.get_include()``)."""
    return os.path.join(_PACKAGE, "include")


def build_paths() -> Dict[str, str]:
    """What each build option prints (see :func:`add_build_options`)."""
    python = [sysconfig.get_path("include"), sysconfig.get_path("platinclude")]
    dirs = [get_include()] + [d for i, d in enumerate(python)
                              if d and d not in python[:i]]
    return {
        "includes": " ".join(f"-I{d}" for d in dirs),
        "cflags": f"-I{get_include()}",
        "cmakedir": os.path.join(_PACKAGE, "share", "cmake", "bufferext"),
        "pkgconfigdir": os.path.join(_PACKAGE, "lib", "pkgconfig"),
    }


class _PrintPath(argparse.Action):
    """A flag that prints one of :func:`build_paths` and exits 0."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any,
                 values: Any, option_string: Optional[str] = None) -> None:
        print(build_paths()[self.dest])
        parser.exit(0)


def add_build_options(parser: argparse.ArgumentParser) -> None:
    """``--includes``, ``--cflags``, ``--cmakedir``, ``--pkgconfigdir``:
    for Makefiles, CMake and pkg-config (docs/guide.rst, "Building")."""
    group = parser.add_argument_group("building C extensions")
    for flag, text in (
            ("--includes", "print -I flags for bufferext.h and Python.h"),
            ("--cflags", "print the -I flag for bufferext.h"),
            ("--cmakedir", "print the directory of bufferextConfig.cmake"),
            ("--pkgconfigdir", "print the directory of bufferext.pc")):
        group.add_argument(flag, nargs=0, action=_PrintPath, help=text)
