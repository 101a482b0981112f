"""pytest plugin that keeps a broken MPI test run from hanging.

Installed by ``tests/conftest.py``; active only when pytest runs with
pytest-mpi's ``--with-mpi`` (or ``--only-mpi``) and ``MPI.COMM_WORLD`` has
more than one process.  Otherwise nothing is imported or registered.

* A failure on one rank (a failed test, an error in setup or teardown, a
  collection error) would leave the other ranks waiting in their next
  collective.  The failing rank writes ``bufferext MPI: rank R of N: FAILED
  <nodeid>`` and the failure to stderr, flushes, and calls
  ``COMM_WORLD.Abort(1)``: the job ends within seconds, with a non-zero exit
  status.
* A deadlock (every rank stuck) ends after a per-test timeout,
  ``BUFFEREXT_MPI_TEST_TIMEOUT`` seconds (default 120; 0 turns it off): each
  rank's watchdog thread writes ``bufferext MPI: rank R of N: TIMEOUT ...
  <nodeid>`` and the traceback of every thread, waits a few seconds for the
  other ranks' watchdogs to write theirs, then aborts.  Should the watchdog
  thread never get the GIL (C code stuck holding it), faulthandler dumps
  every thread's traceback (the test function among them, but no header)
  ``GRACE + FALLBACK_MARGIN`` seconds later and ends the process.

All output goes to a copy of the stderr file descriptor taken at start-up,
past pytest's capture, one write per message.  A passing run writes
nothing, and its summary and exit status are those it has without the guard.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
import traceback
from typing import Any, Callable, Optional, Tuple

import pytest

TIMEOUT_VARIABLE = "BUFFEREXT_MPI_TEST_TIMEOUT"
DEFAULT_TIMEOUT = 120.0
# How long a rank whose watchdog fired waits before aborting the job, so that
# the other ranks (stuck in the same test, their watchdogs due at about the
# same moment) can write their tracebacks first.
GRACE = 5.0
# The faulthandler fallback fires this long after the watchdog should have.
FALLBACK_MARGIN = 10.0


def install(config: pytest.Config) -> None:
    """Register the guard when this is a multi-process ``--with-mpi`` run."""
    if not (config.getoption("--with-mpi", default=False)
            or config.getoption("--only-mpi", default=False)):
        return
    try:
        from mpi4py import MPI
    except ImportError:
        return
    comm = MPI.COMM_WORLD
    if comm.Get_size() < 2:
        return
    timeout = _timeout_from_environment()
    fallback = float(config.getini("faulthandler_timeout") or 0) <= 0
    config.pluginmanager.register(
        MPIGuard(comm.Get_rank(), comm.Get_size(), comm.Abort, timeout,
                 fallback),
        "bufferext_mpi_guard")


def _timeout_from_environment() -> float:
    text = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        return max(float(text), 0.0)
    except ValueError:
        raise pytest.UsageError(
            f"{TIMEOUT_VARIABLE}={text!r}: expected seconds (0 turns the "
            f"per-test timeout off)") from None


class MPIGuard:
    """The plugin object: aborts the job on a failure, watches each test."""

    def __init__(self, rank: int, size: int, abort: Callable[[int], Any],
                 timeout: float, fallback: bool) -> None:
        self.rank, self.size = rank, size
        self.timeout = timeout
        self._abort = abort
        self._fallback = fallback and timeout > 0
        # The real stderr: pytest's capture is suspended in pytest_configure.
        self._stderr = os.dup(2)
        self._watchdog = (_Watchdog(timeout, self._timed_out)
                          if timeout > 0 else None)

    # ---- per-test timeout ------------------------------------------------

    def pytest_runtest_logstart(self, nodeid: str,
                                location: Tuple[str, Optional[int], str]
                                ) -> None:
        """Arm the watchdog for setup, call and teardown of one test."""
        if self._watchdog is None:
            return
        self._watchdog.arm(nodeid)
        if self._fallback:
            faulthandler.dump_traceback_later(
                self.timeout + GRACE + FALLBACK_MARGIN, exit=True,
                file=self._stderr)

    def pytest_runtest_logfinish(self, nodeid: str,
                                 location: Tuple[str, Optional[int], str]
                                 ) -> None:
        """Disarm it once the test's teardown has been reported."""
        if self._watchdog is None:
            return
        self._watchdog.disarm()
        if self._fallback:
            faulthandler.cancel_dump_traceback_later()

    def _timed_out(self, nodeid: str) -> None:
        """On the watchdog thread: name the test, show where every thread
        of this rank is, give the other ranks time to do the same, abort."""
        self._write(f"TIMEOUT after {self.timeout:g} s in {nodeid} "
                    f"({TIMEOUT_VARIABLE}); where this rank is stuck:",
                    _stacks_of_other_threads())
        time.sleep(GRACE)
        self._end()

    # ---- failures ----------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A failed or erroring test on this rank ends the whole job."""
        if not report.failed:
            return
        what = ("FAILED" if report.when == "call"
                else f"ERROR in {report.when} of")
        self._write(f"{what} {report.nodeid}; aborting all ranks",
                    _failure_text(report))
        self._end()

    @pytest.hookimpl(trylast=True)
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """So does a collection error (the ranks may have collected
        different tests, and would wait for each other)."""
        if report.failed:
            self._write(f"ERROR collecting {report.nodeid or '.'}; "
                        f"aborting all ranks", _failure_text(report))
            self._end()

    # ---- output and the end ------------------------------------------------

    def _write(self, headline: str, body: str) -> None:
        text = (f"\nbufferext MPI: rank {self.rank} of {self.size}: "
                f"{headline}\n{body.rstrip()}\n")
        os.write(self._stderr, text.encode("utf-8", "replace"))

    def _end(self) -> None:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
        for fd in (1, self._stderr):
            _wait_until_read(fd)
        try:
            self._abort(1)
        finally:
            os._exit(1)     # reached only if Abort returned or raised


def _wait_until_read(fd: int, limit: float = 10.0) -> None:
    """Return once the launcher has read what this rank wrote to ``fd``.

    Under mpiexec a rank's stdout and stderr are pipes to the launcher's
    proxy, and MPI_Abort makes the proxy end the job: what it has not read
    by then is lost (under load the failing test's name went missing).  A
    pipe counts its unread bytes (FIONREAD, on either end, Linux); anything
    else, or ``limit`` seconds, returns at once.
    """
    try:
        import fcntl
        import stat
        import struct
        import termios
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return
        end = time.monotonic() + limit
        while time.monotonic() < end:
            unread = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
            if struct.unpack("i", unread)[0] == 0:
                return
            time.sleep(0.005)
    except (ImportError, OSError):
        return


def _failure_text(report: Any) -> str:
    """The long failure representation and the captured output."""
    parts = [report.longreprtext]
    for title, content in report.sections:
        parts.append(f"{'-' * 20} {title} {'-' * 20}\n{content.rstrip()}")
    return "\n".join(parts)


def _stacks_of_other_threads() -> str:
    """The stack of every thread but the calling one, each from the first
    frame below pytest's and pluggy's (the test, a fixture, a hook)."""
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue
        stack = traceback.extract_stack(frame)
        first = next((i for i, entry in enumerate(stack)
                      if _is_runner_file(entry.filename)), len(stack))
        while first < len(stack) and _is_runner_file(stack[first].filename):
            first += 1
        if first == len(stack):     # no frame of the tested code: keep all
            first = 0
        parts.append(f"Thread {names.get(ident, hex(ident))!r} "
                     f"(most recent call last):\n"
                     + "".join(traceback.format_list(stack[first:])))
    return "\n".join(parts)


def _is_runner_file(filename: str) -> bool:
    """A frame of pytest or pluggy (the machinery that calls the test)."""
    parts = filename.replace("\\", "/").split("/")
    return "_pytest" in parts or "pluggy" in parts


class _Watchdog:
    """One daemon thread that calls ``fire(nodeid)`` when the armed test
    has run for ``timeout`` seconds."""

    def __init__(self, timeout: float, fire: Callable[[str], None]) -> None:
        self._timeout = timeout
        self._fire = fire
        self._condition = threading.Condition()
        self._nodeid: Optional[str] = None
        self._deadline = 0.0
        threading.Thread(target=self._run, name="bufferext-mpi-watchdog",
                         daemon=True).start()

    def arm(self, nodeid: str) -> None:
        """Start the clock for ``nodeid``."""
        with self._condition:
            self._nodeid = nodeid
            self._deadline = time.monotonic() + self._timeout
            self._condition.notify()

    def disarm(self) -> None:
        """Stop it: the test ended in time."""
        with self._condition:
            self._nodeid = None
            self._condition.notify()

    def _run(self) -> None:
        with self._condition:
            while True:
                if self._nodeid is None:
                    self._condition.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left <= 0:
                    nodeid = self._nodeid
                    break
                self._condition.wait(left)
        self._fire(nodeid)
