"""The MPI guard of the test suite (tests/_mpi_guard.py), end to end.

Each test writes a small test file next to a copy of tests/conftest.py (so
the guard is loaded the way the real MPI tests get it) and runs ``mpiexec
-n 2 python -m pytest --with-mpi`` on it: a failure on one rank ends the
job at once and names the test, a deadlock ends after the per-test timeout
with each rank's stack, and a passing run is left as it was.

Named test_guard_mpi.py, not test_mpi_*.py: the files matching that run
under mpiexec, and this one starts mpiexec itself.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Tuple

import pytest

from _helpers import mpiexec

pytest.importorskip("mpi4py")
pytest.importorskip("pytest_mpi")

TESTS_DIR = Path(__file__).resolve().parent
# The subprocess's timeout, seconds: reached only by a job that hangs (the
# bug these tests catch), never the verdict of one that ends; how each job
# ended is read from its output.
LIMIT = 300

# Inside an MPI job this file would start one nested job per rank.
pytestmark = pytest.mark.skipif(
    any(name in os.environ for name in
        ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE")),
    reason="starts mpiexec itself; run it without mpiexec")

HEADER = """
    import pytest
    from mpi4py import MPI

    COMM = MPI.COMM_WORLD
    RANK = COMM.Get_rank()
    pytestmark = pytest.mark.mpi(min_size=2)
    # the ranks leave collection together, so their tests (and watchdogs)
    # start together however unevenly a loaded machine started them
    COMM.Barrier()


    def test_in_step():
        COMM.Barrier()
"""

# Without the guard: rank 1 fails before the Barrier that rank 0 waits in,
# meets it with the next test's Barrier, and rank 0 then waits for ever.
ONE_RANK_FAILS = HEADER + """

    def test_fails_on_rank_1():
        assert RANK != 1, "rank 1 disagrees"
        COMM.Barrier()


    def test_next():
        COMM.Barrier()
"""

EVERY_RANK_BLOCKS = HEADER + """

    def test_blocks_forever():
        COMM.Recv([bytearray(1), MPI.BYTE], source=1 - RANK)
"""

PASSES = HEADER + """

    def test_allreduce():
        assert COMM.allreduce(1) == COMM.Get_size()
"""


def run_guarded(tmp_path: Path, source: str, test_timeout: str = ""
                ) -> Tuple[int, str]:
    """``mpiexec -n 2 python -m pytest --with-mpi`` on ``source`` with the
    suite's conftest.py beside it: (exit status, output)."""
    shutil.copy(TESTS_DIR / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_guarded.py").write_text(textwrap.dedent(source))
    env = dict(os.environ, PYTHONPATH=str(TESTS_DIR),
               BUFFEREXT_MPI_TEST_TIMEOUT=test_timeout)
    for name in ("PYTEST_ADDOPTS", "BUFFEREXT_CI_REPORT"):
        env.pop(name, None)     # .ci/run's report must not see this run
    argv = [mpiexec(), "-n", "2", sys.executable, "-m", "pytest", "-q",
            "-p", "no:cacheprovider", "--with-mpi", "test_guarded.py"]
    with subprocess.Popen(argv, cwd=tmp_path, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          start_new_session=True) as job:
        try:
            output, _ = job.communicate(timeout=LIMIT)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)     # mpiexec and its ranks
            output, _ = job.communicate()
            pytest.fail(f"the job still ran after {LIMIT} s:\n{output}")
    return job.returncode, output


def test_a_failure_on_one_rank_ends_the_job_and_names_the_test(
        tmp_path: Path) -> None:
    status, output = run_guarded(tmp_path, ONE_RANK_FAILS)
    assert status != 0, output
    assert "TIMEOUT" not in output, output      # ended by the failure
    assert ("bufferext MPI: rank 1 of 2: FAILED "
            "test_guarded.py::test_fails_on_rank_1") in output, output
    assert "AssertionError: rank 1 disagrees" in output, output


def test_a_deadlock_ends_after_the_timeout_with_each_ranks_stack(
        tmp_path: Path) -> None:
    status, output = run_guarded(tmp_path, EVERY_RANK_BLOCKS, "3")
    assert status != 0, output
    for rank in (0, 1):
        assert (f"bufferext MPI: rank {rank} of 2: TIMEOUT after 3 s in "
                f"test_guarded.py::test_blocks_forever") in output, output
    assert output.count("in test_blocks_forever\n") == 2, output


def test_a_passing_run_is_unchanged(tmp_path: Path) -> None:
    status, output = run_guarded(tmp_path, PASSES)
    assert status == 0, output
    assert output.count("2 passed") == 2, output
    assert "bufferext MPI" not in output, output
