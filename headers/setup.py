"""bufferext-headers: copies its files from the bufferext checkout around it.

Run from headers/ of a checkout (``pip wheel headers/``, ``python -m build
headers/``), this copies Include/, the Cython declarations, bufferext's
_paths.py, bufferext.pc, the CMake package files and the LICENSE into this
directory (git-ignored), so
the headers are kept in one place, Include/.  From an unpacked sdist of
bufferext-headers there is no checkout around it: the copies are already
inside, and are used as they are.
"""

import os
import shutil

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PACKAGE = os.path.join(HERE, "bufferext_headers")

#: (in the checkout, in this directory): the files bufferext-headers ships
COPIES = (
    ("Include", "bufferext_headers/include"),
    # Cython's declarations, where `cimport bufferext` finds them with
    # include_path=[get_include()] (a package directory of .pxd files)
    ("Lib/bufferext/__init__.pxd", "bufferext_headers/include/bufferext/__init__.pxd"),
    ("Lib/bufferext/_paths.py", "bufferext_headers/_paths.py"),
    ("Lib/bufferext/lib/pkgconfig", "bufferext_headers/lib/pkgconfig"),
    ("Lib/bufferext/share/cmake", "bufferext_headers/share/cmake"),
    ("LICENSE", "LICENSE"),
)


def _in_checkout():
    return all(os.path.exists(os.path.join(ROOT, source))
               for source, _ in COPIES)


def _copy_from_checkout():
    for source, dest in COPIES:
        source = os.path.join(ROOT, source)
        dest = os.path.join(HERE, dest)
        if os.path.isdir(dest) and not os.path.islink(dest):
            shutil.rmtree(dest)
        elif os.path.lexists(dest):
            os.unlink(dest)
        if os.path.isdir(source):
            shutil.copytree(source, dest)
        else:
            shutil.copyfile(source, dest)


if _in_checkout():
    _copy_from_checkout()
elif not os.path.isfile(os.path.join(PACKAGE, "include", "bufferext.h")):
    raise SystemExit(
        "bufferext-headers: neither a bufferext checkout around "
        f"{HERE} (Include/, Lib/bufferext/) nor the copied headers in "
        f"{os.path.join(PACKAGE, 'include')}: build it from headers/ of a "
        "bufferext checkout, or from its sdist")

setup()
