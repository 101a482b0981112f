"""pytest plugin loaded by .ci/run (``-p bufferext_ci_guard``).

Makes "no tests collected" (exit 5) a failure, and appends one JSON line
per pytest session to $BUFFEREXT_CI_REPORT: exit status, outcome counts and
where ``bufferext`` was imported from, so .ci/run can check that tests ran
at all and ran against the installed package.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict

import pytest

_KEYS = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


def _counts(session: pytest.Session) -> Dict[str, int]:
    """Outcome counts so far, as the terminal summary will show them."""
    reporter: Any = session.config.pluginmanager.get_plugin(
        "terminalreporter")
    stats = getattr(reporter, "stats", {})
    return {key: len(stats.get(key, [])) for key in _KEYS}


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Turn exit 5 into a failure and write the report line."""
    if int(exitstatus) == int(pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        sys.stderr.write("bufferext CI: no tests were collected: FAIL\n")
    path = os.environ.get("BUFFEREXT_CI_REPORT")
    if not path:
        return
    module = sys.modules.get("bufferext")
    record = {
        "exitstatus": int(session.exitstatus),
        "collected": session.testscollected,
        "python": sys.version.split()[0],
        "bufferext": getattr(module, "__file__", None),
        "rank": os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK")),
    }
    record.update(_counts(session))
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(json.dumps(record) + "\n")
