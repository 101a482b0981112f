"""Check the JSON lines bufferext_ci_guard wrote for one CI step.

usage: check_report.py REPORT [--installed-under DIR]

Fails unless at least one pytest session ran, every session exited 0 and
collected tests, and at least one test passed.  With --installed-under,
bufferext must have been imported from under DIR (the installed wheel, not
the source tree).  Prints a one-line summary for the CI table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("report")
    parser.add_argument("--installed-under")
    args = parser.parse_args()
    if not os.path.exists(args.report):
        print("FAIL: pytest never ran (no report written)")
        return 1
    with open(args.report, encoding="utf-8") as stream:
        sessions = [json.loads(line) for line in stream if line.strip()]
    problems = []
    for s in sessions:
        if s["exitstatus"] != 0:
            problems.append(f"a pytest session exited {s['exitstatus']}")
        if not s["collected"]:
            problems.append("a pytest session collected no tests")
        if args.installed_under:
            where = s.get("bufferext") or "(not imported)"
            root = os.path.realpath(args.installed_under)
            if not os.path.realpath(where).startswith(root + os.sep):
                problems.append(f"bufferext imported from {where}, "
                                f"not from under {root}")
    passed = sum(s.get("passed", 0) for s in sessions)
    if not sessions:
        problems.append("no pytest session recorded")
    elif passed == 0:
        problems.append("no test passed")
    keys = ("passed", "failed", "error", "skipped", "xfailed")
    totals = {k: sum(s.get(k, 0) for s in sessions) for k in keys}
    summary = ", ".join(f"{n} {k}" for k, n in totals.items()
                        if n or k == "passed")
    print(f"{len(sessions)} session(s): {summary}")
    for problem in dict.fromkeys(problems):
        print(f"FAIL: {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
