"""docs/conformance.rst cannot rot: every row names existing tests or says
why the rule does not apply, and every specification is covered.

Test names are collected by parsing the test files with ``ast`` (top-level
``test_*`` functions and ``Test*`` class methods); parametrised ids may be
omitted from the table."""

from __future__ import annotations

import ast
import os
import re
from typing import Dict, List, Set, Tuple

import pytest

from _helpers import PARSES_PYTHON

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TABLE = os.path.join(ROOT, "docs", "conformance.rst")
TEST_REF = re.compile(r"``(tests/[\w/]+\.py)::(\w+)``")
SPECS = {"PEP", "DLPack", "CAI v3", "VAI v1", "Arrow", "DAP 0.10.0"}

Row = Dict[str, str]


def parse_table(text: str) -> List[Row]:
    """The rows of the first list-table: one dict per row, keyed by the
    header cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.strip() == ".. list-table::")
    rows: List[List[str]] = []
    for line in lines[start + 1:]:
        if line.startswith("   * - "):
            rows.append([line[7:].strip()])
        elif line.startswith("     - ") or line.rstrip() == "     -":
            rows[-1].append(line[7:].strip())
        elif line.startswith("       ") and rows:
            rows[-1][-1] = (rows[-1][-1] + " " + line.strip()).strip()
        elif line.strip() and not line.startswith("   :") and rows:
            break                           # the end of the table
    header, body = rows[0], rows[1:]
    for row in body:
        assert len(row) == len(header), f"row {row[0]} has {len(row)} cells"
    return [dict(zip(header, row)) for row in body]


def collect_tests(path: str) -> Set[str]:
    """Names of the test functions defined in one test file."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    names: Set[str] = set()
    for node in tree.body:
        if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.name.startswith("test")):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names.update(f"{node.name}::{item.name}" for item in node.body
                         if isinstance(item, ast.FunctionDef)
                         and item.name.startswith("test"))
    return names


@pytest.fixture(scope="module")
def rows() -> List[Row]:
    if not os.path.isdir(os.path.join(ROOT, "docs")):
        pytest.skip("docs/ is not part of this tree")
    with open(TABLE) as f:
        return parse_table(f.read())


def refs(row: Row) -> List[Tuple[str, str]]:
    return TEST_REF.findall(row["Tests"])


def test_table_has_the_expected_columns(rows: List[Row]) -> None:
    assert list(rows[0]) == ["ID", "Spec", "Normative statement",
                             "Enforced in", "Tests",
                             "Not applicable / partly because"]


def test_every_row_says_where_it_is_enforced(rows: List[Row]) -> None:
    for row in rows:
        allowed = ({"header", "CPython", "both"} if row["Spec"] == "PEP"
                   else {"bufferext"})
        assert row["Enforced in"] in allowed, (row["ID"], row["Enforced in"])
    # the slot itself exists only where CPython implements the draft
    assert {r["ID"]: r["Enforced in"] for r in rows}["PEP-21"] == "CPython"


def rows_without_test_or_reason(rows: List[Row]) -> List[str]:
    """IDs of the rows that name no test and give no reason."""
    return [row["ID"] for row in rows
            if not refs(row)
            and not row["Not applicable / partly because"].strip()]


def missing_tests(rows: List[Row]) -> List[str]:
    """``ID: path::name`` of every named test that does not exist."""
    known: Dict[str, Set[str]] = {}
    missing = []
    for row in rows:
        for path, name in refs(row):
            full = os.path.join(ROOT, path)
            if path not in known:
                known[path] = (collect_tests(full) if os.path.isfile(full)
                               else set())
            if name not in known[path]:
                missing.append(f"{row['ID']}: {path}::{name}")
    return missing


def test_every_row_has_a_test_or_a_reason(rows: List[Row]) -> None:
    empty = rows_without_test_or_reason(rows)
    assert empty == [], f"rows with neither a test nor a reason: {empty}"


def test_tests_cell_holds_only_test_references(rows: List[Row]) -> None:
    for row in rows:
        leftover = TEST_REF.sub("", row["Tests"]).strip()
        assert leftover == "", f"{row['ID']}: unparsable {leftover!r}"


@PARSES_PYTHON
def test_every_named_test_exists(rows: List[Row]) -> None:
    missing = missing_tests(rows)
    assert missing == [], "tests named in docs/conformance.rst that do " \
        "not exist:\n" + "\n".join(missing)


def test_ids_are_unique_and_specs_known(rows: List[Row]) -> None:
    ids = [row["ID"] for row in rows]
    assert len(ids) == len(set(ids)), "duplicate IDs"
    assert {row["Spec"] for row in rows} == SPECS


def test_every_dap_checklist_item_has_a_row(rows: List[Row]) -> None:
    """The reference checklist (0.10.0, section 1.6) in full."""
    expected = ([f"T{i}" for i in range(1, 7)] + [f"D{i}" for i in range(1, 10)]
                + [f"B{i}" for i in range(1, 13)] + [f"C{i}" for i in range(1, 8)]
                + [f"U{i}" for i in range(1, 5)] + [f"E{i}" for i in range(1, 5)])
    have = {row["ID"][4:] for row in rows if row["ID"].startswith("DAP-")}
    assert set(expected) <= have, sorted(set(expected) - have)


@PARSES_PYTHON
def test_parser_catches_a_bad_row() -> None:
    """The checks above can fail: a row with no test and no reason, and a
    row naming a test that does not exist, are both seen."""
    text = ("x\n\n.. list-table::\n   :header-rows: 1\n\n"
            "   * - ID\n     - Spec\n     - Normative statement\n"
            "     - Tests\n     - Not applicable / partly because\n"
            "   * - X-1\n     - PEP\n     - a rule\n     -\n     -\n"
            "   * - X-2\n     - PEP\n     - a rule\n"
            "     - ``tests/test_flags.py::test_no_such_test``\n     -\n")
    bad = parse_table(text)
    assert [row["ID"] for row in bad] == ["X-1", "X-2"]
    # the very checks the tests above make (not a copy of their logic)
    assert rows_without_test_or_reason(bad) == ["X-1"]
    assert missing_tests(bad) == [
        "X-2: tests/test_flags.py::test_no_such_test"]
