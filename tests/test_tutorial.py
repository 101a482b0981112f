"""docs/tutorial.rst and the Usage block of docs/distarray.rst, run as the
pages show them: each tutorial step prints what the page shows under it
(docs/examples/tutorial/*.out); the distribution steps run on one process
and, with mpi4py, under ``mpiexec -n 2`` and ``-n 3``, as one program on
every process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from _helpers import mpiexec

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"
TUTORIAL = EXAMPLES / "tutorial"

pytestmark = pytest.mark.skipif(not TUTORIAL.is_dir(), reason="docs/ is not "
                                "beside the tests (a copy of tests/)")


def _env() -> dict:
    """No launcher's variables (this test may run under one), and Python's
    output buffered, so that each line a rank prints is one write that
    mpiexec does not cut."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_"))
            and k != "PYTHONUNBUFFERED"}


def _run(script: Path, processes: int) -> List[str]:
    """The lines ``script`` prints on ``processes`` processes (plain python
    for one), each process's lines in order, the processes' sorted."""
    cmd = [sys.executable, str(script)]
    if processes > 1:
        pytest.importorskip("mpi4py", reason="mpiexec comes with mpi4py mpich")
        cmd = [mpiexec(), "-n", str(processes)] + cmd
    done = subprocess.run(cmd, capture_output=True, text=True, env=_env(),
                          timeout=300, cwd=script.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    return sorted(done.stdout.splitlines())


@pytest.mark.parametrize("step", ["check", "get", "bridge"])
def test_a_tutorial_step_prints_what_the_page_shows(step: str) -> None:
    shown = (TUTORIAL / f"{step}.out").read_text().splitlines()
    assert _run(TUTORIAL / f"{step}.py", 1) == sorted(shown)


@pytest.mark.parametrize("processes", [1, 2, 3])
def test_distribute_spreads_and_gathers_on_n_processes(processes: int) -> None:
    """A numpy array's rows over N processes, then its columns, then
    gathered (tests/test_docs_examples.py compares the page's commands,
    for 1 and 3 processes, with what they print)."""
    columns = {1: [4], 2: [2, 2], 3: [2, 1, 1]}[processes]
    rows = {1: [6], 2: [3, 3], 3: [2, 2, 2]}[processes]
    expected = [f"process {r} of {processes}: rows ({rows[r]}, 4), columns "
                f"(6, {columns[r]})" for r in range(processes)]
    expected.append("gathered on process 0, equal to a: True")
    assert _run(TUTORIAL / "distribute.py", processes) == sorted(expected)


@pytest.mark.parametrize("processes", [1, 2, 3])
def test_the_distarray_usage_block_runs_on_n_processes(processes: int) -> None:
    """docs/distarray.rst's Usage (it named grid (2, 2), rank 3, and failed
    under mpiexec -n 2 with a ValueError)."""
    sections = {1: ["(1, 1): section (5, 9)"],
                2: ["(2, 1): section (3, 9)", "(2, 1): section (2, 9)"],
                3: ["(3, 1): section (2, 9)", "(3, 1): section (2, 9)",
                    "(3, 1): section (1, 9)"]}[processes]
    assert _run(EXAMPLES / "distarray_usage.py", processes) == sorted(
        f"process {r} of grid {s}" for r, s in enumerate(sections))
