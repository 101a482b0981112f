"""Check that the code blocks of README.md are tested code.

    python check_readme.py README.md docs/examples

A ``c`` or ``python`` block passes when its lines appear, in order and
contiguously (blank lines ignored), in one of the tested files under
docs/examples (example.c, snippets/*.py, recipes/*/setup.py: the
recipes step builds those).  A line ``/* ... */``
or ``# ...`` elides: the parts between elisions must each appear, in order,
in the same file.  A ``python`` block that is not found is run instead.  Shell blocks are left to CI, which
runs the README's commands itself.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
from typing import List

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def lines_of(text: str) -> List[str]:
    """Non-blank lines, trailing spaces removed."""
    return [line.rstrip() for line in text.splitlines() if line.strip()]


ELISIONS = ("/* ... */", "# ...")


def find(part: List[str], text: List[str], start: int) -> int:
    """Index after the first contiguous occurrence of ``part`` in ``text``
    at or after ``start``, or -1."""
    n = len(part)
    for i in range(start, len(text) - n + 1):
        if text[i:i + n] == part:
            return i + n
    return -1


def contained(block: List[str], text: List[str]) -> bool:
    """True if the parts of ``block`` between elisions occur, in order and
    each contiguously, in ``text``."""
    parts: List[List[str]] = [[]]
    for line in block:
        if line.strip() in ELISIONS:
            parts.append([])
        else:
            parts[-1].append(line)
    start = 0
    for part in parts:
        if part:
            start = find(part, text, start)
            if start < 0:
                return False
    return True


def main(readme: str, examples: str) -> int:
    root = pathlib.Path(examples)
    tested = [lines_of(p.read_text()) for p in
              [root / "example.c", *sorted(root.glob("snippets/*.py")),
               *sorted(root.glob("recipes/*/setup.py"))]]
    failures = 0
    for number, match in enumerate(
            FENCE.finditer(pathlib.Path(readme).read_text()), 1):
        language, code = match.groups()
        if language not in ("c", "python"):
            continue
        if any(contained(lines_of(code), text) for text in tested):
            continue
        if language == "python":
            run = subprocess.run([sys.executable, "-c", code],
                                 capture_output=True, text=True)
            if run.returncode == 0:
                continue
            print(run.stderr)
        print(f"README block {number} ({language}) is not tested code:\n"
              f"{code}")
        failures += 1
    print(f"README: {'FAILED' if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
