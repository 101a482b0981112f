"""Sort ThreadSanitizer's reports (TSAN_OPTIONS=log_path=DIR/report) of a
bufferext run and fail on any race in bufferext's own state.

    python .ci/tsan_report.py DIR

A report is one of:

* **ours** -- a frame of bufferext (its extension module, the stand-in
  drivers excepted) in either access, on memory that is not the contents of
  an exported buffer: a race on bufferext's state.  Any is a failure.
* **contents** -- both accesses copy the *contents* of a buffer (the
  racing block was allocated by ``bufferext_block_alloc``, or is a
  stand-in's device memory): two threads writing and reading one array's
  elements at once, a race of the program's data that the buffer protocol
  leaves to its users, as numpy does.  Reported, not failed.
* **elsewhere** -- no frame of ours (CPython's own, numpy's): reported.

Exit status 1 when any report is ours.
"""

from __future__ import annotations

import collections
import glob
import os
import re
import sys
from typing import Dict, List

# bufferext's frames: its extension module (inlined header code included)
# and the header compiled into a consumer (tests/capi); CPython's own files
# under Modules/ (_threadmodule.c, _pickle.c) are not ours
OURS = re.compile(r"\((?:_bufferext|testcapi_\w+)\.[^)]*\.so\+|"
                  r"Include/bufferext/")
DATA = re.compile(r"bufferext_block_alloc|standin_veo|standin_cuda|"
                  r"cuMemAlloc|veo_alloc_hmem")


def reports(directory: str) -> List[str]:
    found = []
    for path in sorted(glob.glob(os.path.join(directory, "report*"))):
        with open(path, errors="replace") as f:
            text = f.read()
        found += [r for r in text.split("==================\n")
                  if "WARNING: ThreadSanitizer" in r]
    return found


def kind(report: str) -> str:
    accesses, _, location = report.partition("Location is")
    if not OURS.search(accesses):
        return "elsewhere"
    if location and DATA.search(location.split("\n\n")[0]):
        return "contents"
    return "ours"


def top_frame(report: str) -> str:
    """The first frame of ours in the report (for the summary)."""
    for line in report.splitlines():
        if OURS.search(line):
            return re.sub(r"\s+\(.*$", "", line.strip())
    return "?"


def main(directory: str) -> int:
    found = reports(directory)
    sorted_: Dict[str, List[str]] = collections.defaultdict(list)
    for report in found:
        sorted_[kind(report)].append(report)
    print(f"ThreadSanitizer: {len(found)} report(s): "
          f"{len(sorted_['ours'])} on bufferext's state, "
          f"{len(sorted_['contents'])} on buffer contents written and read "
          f"by two threads at once (the program's data race), "
          f"{len(sorted_['elsewhere'])} without a frame of bufferext")
    for name in ("ours", "contents", "elsewhere"):
        frames = collections.Counter(top_frame(r) for r in sorted_[name])
        for frame, count in frames.most_common(10):
            print(f"  {name:9} {count:4}  {frame}")
    for report in sorted_["ours"][:3]:
        print("\n".join(report.splitlines()[:40]))
    return 1 if sorted_["ours"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
