"""docs/reentrancy.rst kept current with the code: the re-entrancy table
lists exactly the points where Python code can run inside our C code
(tests/_reentrancy_scan.py finds them, grep-level)."""

from __future__ import annotations

import os
import re
import sys
from typing import Dict, Set, Tuple

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _reentrancy_scan as scan  # noqa: E402

DOC = os.path.join(scan.ROOT, "docs", "reentrancy.rst")
pytestmark = pytest.mark.skipif(
    not os.path.isdir(os.path.join(scan.ROOT, "Modules")) or
    not os.path.isfile(DOC),
    reason="the C sources and docs/ are not beside the tests (a test copy "
           "of an installed wheel): the source tree's run checks the table")


def table_rows() -> Dict[Tuple[str, str], Tuple[Set[str], str]]:
    """{(file, function): (kinds, what holds)} of the re-entrancy table."""
    with open(DOC) as f:
        text = f.read()
    start = text.index(".. list-table:: Where Python code can run")
    rows = re.findall(r"^   \* - ``([^`]+)``\n     - ``([^`]+)``\n"
                      r"     - ([a-z ]+)\n     - (.+)$", text[start:], re.M)
    return {(path, name): (set(kinds.split()), holds.strip())
            for path, name, kinds, holds in rows}


def test_the_table_lists_every_point_where_python_can_run() -> None:
    found = scan.points()
    listed = table_rows()
    assert found, "the scan found nothing: its patterns are broken"
    missing = sorted(set(found) - set(listed))
    gone = sorted(set(listed) - set(found))
    assert not missing, f"points the table lacks (add a row): {missing}"
    assert not gone, f"rows whose point is gone (remove them): {gone}"
    changed = {key: (sorted(listed[key][0]), sorted(kinds))
               for key, kinds in found.items() if listed[key][0] != kinds}
    assert not changed, f"kinds changed (table, code): {changed}"


def test_every_row_says_what_holds_the_rule() -> None:
    for key, (_, holds) in table_rows().items():
        assert len(holds) >= 6 and "TODO" not in holds, key


def test_the_scan_sees_what_it_must() -> None:
    # a planted point of each kind is found, so a broken pattern cannot
    # pass the test above by finding nothing new
    found = scan.points()
    assert found[("Modules/export.c", "layout_dim")] >= {"index"}
    assert found[("Modules/cpubuffer.c", "cpubuffer_resize")] >= {"index",
                                                                   "seq"}
    assert "alloc" in found[("Modules/producer.c",
                             "PRODUCER_STATE_GETTER(shape)")]
    assert "buffer" in found[("Modules/gate.c", "bufferext_gate_acquire")]
    assert "call" in found[("Modules/cpubuffer.c", "cpubuffer_subclass_state")]
    # transitively: make -> parse -> dtype resolver
    assert "call" in found[("Modules/cpubuffer.c", "cpubuffer_make")]
    # a function right after a macro use with no semicolon is its own
    # definition, not the macro's tail (cudabuffer_dlpack_device once hid so)
    assert "alloc" in found[("Modules/cudabuffer.c",
                             "cudabuffer_dlpack_device")]


# ---- the headers compiled into other people's extensions -----------------

INTERNAL = os.path.join(scan.ROOT, "Include", "bufferext", "internal")
# accel.h's lines of code (comments and blank lines not counted) when it was
# declared complete: it must not grow (new work goes into the module)
ACCEL_CODE_LINES = 456


def code_lines(text: str) -> int:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return sum(1 for line in text.splitlines() if line.strip())


@pytest.mark.parametrize("name", ["accel.h", "limited.h"])
def test_every_version_test_in_the_headers_says_what_it_mirrors(name):
    # each #if on the CPython version (and each run-time Py_Version test)
    # has a "Mirrors:" line above it, within its function or comment
    with open(os.path.join(INTERNAL, name)) as f:
        lines = f.read().splitlines()
    tests = [i for i, line in enumerate(lines)
             if re.search(r"PY_VERSION_HEX|Py_LIMITED_API \+ 0|"
                          r"Py_Version >=", line)
             and not line.lstrip().startswith("*")]
    assert tests, "no version test found: the pattern broke"
    bare = [i + 1 for i in tests
            if not any("Mirrors:" in line for line in lines[max(0, i - 30):i])]
    assert not bare, f"{name}: version tests without provenance at {bare}"


def test_the_accelerator_does_not_grow():
    with open(os.path.join(INTERNAL, "accel.h")) as f:
        text = f.read()
    assert "It must not grow" in text
    assert code_lines(text) <= ACCEL_CODE_LINES
