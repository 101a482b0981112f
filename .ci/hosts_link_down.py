"""A collective that goes on while .ci/hosts.sh takes one host's link down.

Copied into the tests folder (beside tests/conftest.py, which loads the MPI
guard) and run by .ci/hosts.sh under mpiexec across the namespace hosts.
While pytest collects this file, every rank takes part in an Allreduce
(every link carries it), rank 0 then creates the file
BUFFEREXT_HOSTS_READY, the script takes host 1's link down and creates
BUFFEREXT_HOSTS_DOWN, and every rank waits for that file (on the one file
system the namespaces share: no message crosses a link).  So the link is
down before the test, and the guard's clock for it, start on any rank,
however slowly a loaded machine runs the script or the ranks.  The test's
Allreduces cannot finish without the link: the expected end is the MPI
guard's watchdog (TIMEOUT ... test_allreduce_after_a_link_went_down, then
the job aborts); a pass means the traffic never used the link.
"""

import os
import time
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

pytestmark = pytest.mark.mpi(min_size=2)

STEPS = 20
COMM = MPI.COMM_WORLD
MINE = np.ones(1 << 17)
TOTAL = np.empty_like(MINE)

COMM.Allreduce(MINE, TOTAL)
if COMM.Get_rank() == 0:
    Path(os.environ["BUFFEREXT_HOSTS_READY"]).touch()
while not Path(os.environ["BUFFEREXT_HOSTS_DOWN"]).exists():
    time.sleep(0.01)        # polls a file the script creates: no deadline


def test_allreduce_after_a_link_went_down() -> None:
    for _ in range(STEPS):
        COMM.Allreduce(MINE, TOTAL)
