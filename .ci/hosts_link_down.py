"""A collective that goes on while .ci/hosts.sh takes one host's link down.

Copied into the tests folder (beside tests/conftest.py, which loads the MPI
guard) and run by .ci/hosts.sh under mpiexec across the namespace hosts.
Rank 0 creates the file BUFFEREXT_HOSTS_READY once every rank has taken
part in an Allreduce; the script then takes a link down and creates
BUFFEREXT_HOSTS_DOWN.  Rank 0 folds "that file exists" into the reduced
data, so every rank learns it in the same step; the ranks then run 20 more
Allreduces, which cannot finish without the link.  The expected end is
the MPI guard's watchdog (TIMEOUT ... test_allreduce_after_a_link_went_down,
then the job aborts); a pass means the traffic never used the link.
"""

import os
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

pytestmark = pytest.mark.mpi(min_size=2)

STEPS_AFTER = 20


def test_allreduce_after_a_link_went_down() -> None:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    ready = Path(os.environ["BUFFEREXT_HOSTS_READY"])
    down = Path(os.environ["BUFFEREXT_HOSTS_DOWN"])
    mine = np.ones(1 << 17)
    total = np.empty_like(mine)
    after = 0
    while after < STEPS_AFTER:
        mine[0] = float(rank == 0 and down.exists())
        comm.Allreduce(mine, total)
        if rank == 0 and not ready.exists():
            ready.touch()
        if total[0]:
            after += 1
