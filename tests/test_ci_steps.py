"""docs/ci.rst kept current: its table names exactly the steps of .ci/run;
the CI's build-and-test pipeline is written once, in .ci/lib.sh."""

from __future__ import annotations

import glob
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


def ci_scripts() -> dict:
    """Each CI script's text, by name (.ci/run and .ci/*.sh)."""
    folder = os.path.dirname(RUN)
    names = ["run"] + sorted(n for n in os.listdir(folder) if n.endswith(".sh"))
    texts = {}
    for name in names:
        with open(os.path.join(folder, name)) as f:
            texts[name] = f.read()
    return texts


def code(text: str) -> str:
    """A shell script without its comments (whole-line ones)."""
    return "\n".join(line for line in text.splitlines()
                     if not line.lstrip().startswith("#"))


def test_one_function_builds_a_wheel_and_runs_a_selection() -> None:
    """The build-a-wheel-then-run-a-selection pipeline is written once, in
    .ci/lib.sh: no other script repairs a wheel or runs pytest under the CI
    guard itself (the newcomer step hands the guard to the README's own
    command through the environment), and every script that builds
    bufferext for an interpreter sources lib.sh."""
    texts = {name: code(text) for name, text in ci_scripts().items()}
    assert "auditwheel repair" in texts["lib.sh"]
    assert "-p bufferext_ci_guard" in texts["lib.sh"]
    others = {name: text for name, text in texts.items() if name != "lib.sh"}
    assert [n for n, t in others.items() if "auditwheel repair" in t] == []
    assert [n for n, t in others.items()
            if re.search(r"-p bufferext_ci_guard\b(?!\")", t)] == []
    for name in ("run", "quality.sh", "freethreaded-inside.sh",
                 "native-inside.sh", "sid.sh"):
        assert "lib.sh" in others[name], name


def test_each_named_selection_names_tests_that_exist() -> None:
    """Every selection .ci/lib.sh defines names files (and test functions)
    that are in tests/: a renamed file cannot silently shrink a step."""
    text = ci_scripts()["lib.sh"]
    body = text[text.index("ci_selection() {"):text.index("\n}\n",
                                                          text.index("ci_selection() {"))]
    paths = set(re.findall(r"\b(tests/[\w/*]+\.py)(?:::(\w+))?", body))
    assert len(paths) > 20
    for path, func in paths:
        matches = glob.glob(os.path.join(ROOT, path))
        assert matches, path
        if func:
            with open(matches[0]) as f:
                assert re.search(rf"^def {func}\(", f.read(), re.M), (path, func)
