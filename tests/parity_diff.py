"""Compare two parity tables (tests/test_parity.py, BUFFEREXT_PARITY_OUT)
against the explained allow-list tests/parity_allow.txt.

    python tests/parity_diff.py BASE.json OTHER.json [--allow FILE]

BASE is the table of stock CPython in backport mode; OTHER the table of
the patched CPython (cpython/) in native mode or with the backport forced
(its ``meta`` says which).  Every row is compared with the same row of
BASE: the header's own paths (``request/``, ``supports/``, ``mask/``,
``change/``, ``cpu-only/``, ``value/``), CPython's ``PyObject_GetBuffer``
(``plain/``: it keeps its meaning, a request into a ``Py_buffer``, the
extended one being ``PyObject_GetBufferEx``, which the header's requests
reach in native mode) and the doors (``door/``).

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


def differences(base: Dict[str, Any], other: Dict[str, Any]
                ) -> Dict[str, Tuple[Any, Any]]:
    """{row: (expected, found)} for every row where OTHER departs from
    BASE."""
    return {key: (base.get(key), other.get(key))
            for key in sorted(set(base) | set(other))
            if other.get(key) != base.get(key)}


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
    diffs = differences(base["rows"], other["rows"])
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
