"""pytest plugin for a debug CPython: each passing test is run again
WARMUP + RUNS times in place, and sys.gettotalrefcount() measured around
each of the last RUNS; a test whose count grows on every one of them leaks
(CPython's own ``-R`` rule).  Tests that cannot run twice in place (they
fail on the repeat) are reported as not repeatable, not as leaks.

    python -m pytest -p refleak_plugin tests/test_capi_*.py

Environment: REFLEAK_WARMUP (2), REFLEAK_RUNS (3).  Needs
sys.gettotalrefcount (a --with-pydebug build, e.g. Debian's python3.11-dbg).
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any, Dict, List

import pytest

WARMUP = int(os.environ.get("REFLEAK_WARMUP", "2"))
RUNS = int(os.environ.get("REFLEAK_RUNS", "3"))
_leaks: Dict[str, List[int]] = {}
_unrepeatable: Dict[str, str] = {}
_checked: List[str] = []


def _total() -> int:
    gc.collect()
    return sys.gettotalrefcount()  # type: ignore[attr-defined]


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(sys, "gettotalrefcount"):
        raise pytest.UsageError("refleak_plugin needs a debug CPython "
                                "(sys.gettotalrefcount)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    outcome = yield
    if outcome.excinfo is not None:
        return
    deltas = []
    try:
        for i in range(WARMUP + RUNS):
            before = _total()
            item.runtest()
            after = _total()
            if i >= WARMUP:
                deltas.append(after - before)
    except BaseException as exc:     # noqa: BLE001 - reported below
        _unrepeatable[item.nodeid] = f"{type(exc).__name__}: {exc}"[:160]
        return
    _checked.append(item.nodeid)
    if all(d > 0 for d in deltas):
        _leaks[item.nodeid] = deltas
        raise AssertionError(f"reference leak: sys.gettotalrefcount() grew "
                             f"by {deltas} over {RUNS} repeated runs")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    tr = terminalreporter
    tr.section("refleak")
    tr.write_line(f"{len(_checked)} tests run {WARMUP}+{RUNS} extra times; "
                  f"{len(_leaks)} leak(s); {len(_unrepeatable)} not "
                  f"repeatable in place")
    for nodeid, deltas in _leaks.items():
        tr.write_line(f"LEAK {nodeid}: {deltas}")
    for nodeid, why in _unrepeatable.items():
        tr.write_line(f"not repeatable: {nodeid}: {why}")
