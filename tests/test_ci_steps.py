"""docs/ci.rst kept current: its table names exactly the steps of .ci/run."""

from __future__ import annotations

import os
import re

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)
RUN = os.path.join(ROOT, ".ci", "run")
DOC = os.path.join(ROOT, "docs", "ci.rst")

pytestmark = pytest.mark.skipif(
    not (os.path.isfile(RUN) and os.path.isfile(DOC)),
    reason=".ci/ and docs/ are not beside the tests (a test copy of an "
           "installed wheel): the source tree's run checks the table")


def run_steps() -> list:
    with open(RUN) as f:
        match = re.search(r"^STEPS=\(([^)]*)\)", f.read(), re.M)
    assert match, ".ci/run has no STEPS=(...) line"
    return match.group(1).split()


def table_steps() -> list:
    with open(DOC) as f:
        text = f.read()
    table = text[text.index(".. list-table::"):]
    return re.findall(r"^   \* - ``([a-z]+)``$", table, re.M)


def test_the_table_lists_every_step_of_the_ci_in_its_order() -> None:
    assert run_steps() == table_steps()
