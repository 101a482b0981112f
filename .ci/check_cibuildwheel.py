"""Check pyproject.toml's [tool.cibuildwheel] table against what the module
declares, with cibuildwheel's own reading of it.

    python .ci/check_cibuildwheel.py SRC

Runs ``cibuildwheel --print-build-identifiers --platform linux`` in SRC and
requires: CPython 3.9 to 3.15 on x86_64 and aarch64 (manylinux and
musllinux), and free-threaded identifiers (``cp3XXt``) exactly when
Modules/module.c declares ``Py_MOD_GIL_NOT_USED``.  Exit status 1 with the
differences otherwise.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

MINORS = range(9, 16)
ARCHS = ("x86_64", "aarch64")
LIBCS = ("manylinux", "musllinux")


def main(src: Path) -> int:
    module = (src / "Modules" / "module.c").read_text()
    gil_free = re.search(r"\{\s*Py_mod_gil\s*,\s*Py_MOD_GIL_NOT_USED\s*\}",
                         module) is not None
    out = subprocess.run(["cibuildwheel", "--print-build-identifiers",
                          "--platform", "linux"], cwd=src, check=True,
                         capture_output=True, text=True).stdout
    got = set(out.split())
    # cibuildwheel 4 builds free-threaded wheels from 3.14 on
    tags = [f"cp3{m}" for m in MINORS]
    tags += [f"cp3{m}t" for m in MINORS if gil_free and m >= 14]
    want = {f"{tag}-{libc}_{arch}" for tag in tags for arch in ARCHS
            for libc in LIBCS}
    missing, extra = sorted(want - got), sorted(got - want)
    print(f"cibuildwheel: {len(got)} linux identifiers; module declares "
          f"{'Py_MOD_GIL_NOT_USED' if gil_free else 'Py_MOD_GIL_USED'}")
    for name in missing:
        print(f"  missing: {name}")
    for name in extra:
        print(f"  not wanted: {name}")
    return 1 if missing or extra else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
