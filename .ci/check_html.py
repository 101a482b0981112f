"""Fail on any error or warning box in built Sphinx HTML.

``sphinx-build -W`` turns logged warnings into errors, but some problems
are only rendered into the page: a directive the theme does not support
(under Furo, ``.. contents::`` draws a red "ERROR: Adding a table of
contents..." box), a ``problematic`` reference, a docutils system message
at INFO level.  This scans every page for those markers.

Usage: ``python .ci/check_html.py HTML_DIR``.
"""

from __future__ import annotations

import os
import re
import sys
from typing import List

#: docutils renders messages as <div class="system-message ...">, unresolved
#: references as <a class="problematic">; a literal "System Message:" is the
#: title of such a box.
MARKERS = re.compile(r'class="[^"]*\b(system-message|problematic)\b|System Message:')
#: Furo paints an element of class "contents" (what ``.. contents::``
#: makes) as a red error box from its style sheet, unless it also carries
#: the class below.
CLASSES = re.compile(r'class="([^"]*)"')
FURO_OPT_OUT = "this-will-duplicate-information-and-it-is-still-useful-here"


def _boxes(text: str) -> List[int]:
    """Offsets of the error boxes in one page."""
    found = [m.start() for m in MARKERS.finditer(text)]
    for m in CLASSES.finditer(text):
        tokens = m.group(1).split()
        if "contents" in tokens and FURO_OPT_OUT not in tokens:
            found.append(m.start())
    return sorted(found)


def problems(root: str) -> List[str]:
    found = []
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".html"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for start in _boxes(text):
                line = text.count("\n", 0, start) + 1
                snippet = re.sub(r"<[^>]+>", " ", text[start:start + 300])
                found.append(f"{os.path.relpath(path, root)}:{line}: "
                             f"{' '.join(snippet.split())[:160]}")
    return found


def main() -> int:
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        print(__doc__, file=sys.stderr)
        return 2
    found = problems(sys.argv[1])
    for p in found:
        print(f"rendered error box: {p}", file=sys.stderr)
    pages = sum(len([n for n in files if n.endswith(".html")])
                for _, _, files in os.walk(sys.argv[1]))
    if not pages:
        print(f"no HTML pages under {sys.argv[1]}", file=sys.stderr)
        return 1
    print(f"{pages} pages, {len(found)} rendered error boxes")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
