"""``python -m bufferext_headers --includes|--cflags|--cmakedir|--pkgconfigdir``."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from . import __version__, _paths


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Print the path a build option asks for; exit status 0, 2 on a
    usage error (argparse's)."""
    parser = argparse.ArgumentParser(
        prog="python -m bufferext_headers",
        description="Where bufferext.h and its pkg-config and CMake files "
                    "are (bufferext-headers: the headers alone).")
    parser.add_argument("--version", action="version",
                        version=f"bufferext-headers {__version__}")
    _paths.add_build_options(parser)
    try:
        parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: name one option, e.g. --includes",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
