"""The C headers of bufferext, alone: ``bufferext.h`` and its parts, the
Cython declarations, the pkg-config file and the CMake package files, with
no dependencies.

For building C extensions that produce or consume extended buffers (name
``bufferext-headers`` in ``[build-system] requires``); the header is
header-only, so such an extension needs nothing from bufferext at run
time.  ``get_include()`` is the directory to pass as ``-I`` (and as
Cython's ``include_path``: ``bufferext/__init__.pxd`` is there too);
``python -m bufferext_headers --includes|--cflags|--cmakedir|--pkgconfigdir``
prints the same paths as ``python -m bufferext`` does for its own copy.
"""

from ._paths import get_include

__version__ = "0.1.0"

__all__ = ["get_include"]
