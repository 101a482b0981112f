"""Compare two parity tables (tests/test_parity.py, BUFFEREXT_PARITY_OUT)
against the explained allow-list tests/parity_allow.txt.

    python tests/parity_diff.py BASE.json OTHER.json [--allow FILE]

BASE is the table of stock CPython in backport mode; OTHER the table of
the patched CPython (cpython/) in native mode or with the backport forced
(its ``meta`` says which).  A row of the header's own paths (``request/``,
``supports/``, ``mask/``, ``change/``, ``cpu-only/``, ``value/``) must be
the same in both.  A row of CPython's own consumer, ``plain/X`` (what
``PyObject_GetBuffer`` does), is compared with the backport's
``request/X`` of BASE: implementing the draft moves what the header did
into CPython.  Doors (``door/``) are compared row by row.

Every difference must match an allow-list entry for the mode of OTHER,
and every entry must match at least one difference (a stale entry fails
too, so the list stays short and true).  Exit status 0 when both hold.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
CPYTHON_PATHS = ("plain/",)


def mode_of(meta: Dict[str, Any]) -> str:
    """'native', 'forced' (backport on a native interpreter) or
    'backport'."""
    if meta.get("header") == "native":
        return "native"
    return "forced" if meta.get("native_interpreter") else "backport"


def read_allow(path: str) -> List[Tuple[str, str, str]]:
    """[(mode, pattern, reason)]: lines ``MODE PATTERN  # reason``; lines
    that start with # are comments."""
    entries = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            rule, _, reason = text.partition("#")
            parts = rule.split()
            if len(parts) != 2 or parts[0] not in ("native", "forced"):
                raise SystemExit(f"{path}:{number}: expected 'MODE PATTERN "
                                 f"# reason', got {text!r}")
            if not reason.strip():
                raise SystemExit(f"{path}:{number}: an entry needs its "
                                 f"reason after '#'")
            entries.append((parts[0], parts[1], reason.strip()))
    return entries


def differences(base: Dict[str, Any], other: Dict[str, Any], mode: str
                ) -> Dict[str, Tuple[Any, Any]]:
    """{row: (expected, found)} for every row where OTHER departs from
    what BASE says it should be."""
    found: Dict[str, Tuple[Any, Any]] = {}
    for key in sorted(set(base) | set(other)):
        expected: Optional[Any] = base.get(key)
        if mode != "backport" and key.startswith(CPYTHON_PATHS):
            expected = base.get("request/" + key.split("/", 1)[1])
        if other.get(key) != expected:
            found[key] = (expected, other.get(key))
    return found


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base")
    parser.add_argument("other")
    parser.add_argument("--allow", default=os.path.join(HERE,
                                                        "parity_allow.txt"))
    args = parser.parse_args(argv)
    with open(args.base) as f:
        base = json.load(f)
    with open(args.other) as f:
        other = json.load(f)
    mode = mode_of(other["meta"])
    if mode_of(base["meta"]) != "backport":
        print(f"parity: {args.base} is not a backport table "
              f"({base['meta']})")
        return 2
    entries = [e for e in read_allow(args.allow) if e[0] == mode]
    diffs = differences(base["rows"], other["rows"], mode)
    used = [0] * len(entries)
    unexplained = []
    for key, (expected, got) in diffs.items():
        hits = [i for i, (_, pattern, _) in enumerate(entries)
                if fnmatch.fnmatchcase(key, pattern)]
        for i in hits:
            used[i] += 1
        if not hits:
            unexplained.append((key, expected, got))
    print(f"parity: {mode} ({other['meta'].get('python')}) against backport "
          f"({base['meta'].get('python')}): {len(other['rows'])} rows, "
          f"{len(diffs)} differ, {len(diffs) - len(unexplained)} allowed "
          f"by {len(entries)} entries")
    for (_, pattern, reason), count in zip(entries, used):
        print(f"  {count:4d}  {pattern}  ({reason})")
    stale = [entries[i][1] for i, count in enumerate(used) if count == 0]
    for key, expected, got in unexplained:
        print(f"UNEXPLAINED {key}\n    expected: {expected}\n    found:    {got}")
    for pattern in stale:
        print(f"STALE allow-list entry for {mode}: {pattern} matches no "
              f"difference")
    return 1 if unexplained or stale else 0


if __name__ == "__main__":
    sys.exit(main())
