"""The 2-D heat equation on a block-distributed array with halo exchange.

    python heat_mpi.py                  # one process
    mpiexec -n 4 python heat_mpi.py     # four processes (pip install mpi4py mpich)

No ``comm=`` anywhere: under ``mpiexec -n N`` every call runs on all N
processes (mpi4py's COMM_WORLD), without it on this one process.
``--save FILE`` writes the final global array (``numpy.save``, rank 0).
"""

import sys

import numpy as np

from bufferext.distarray import DistArray

N, STEPS = 64, 100

# The global array: an N x N interior inside a ring of fixed boundary
# values (hot top edge).  The ring is the edge padding of the distribution.
start = np.zeros((N + 2, N + 2))
start[0, :] = 1.0

# Every process passes the same global array and keeps its own block (the
# process grid is chosen like MPI_Dims_create), with one cell of padding on
# each side: at the edges it holds the boundary ring, between processes a
# copy of the neighbour's cells (the halo).
d = DistArray.from_global(start, dist="bb", padding=[(1, 1), (1, 1)])

# The cells this process updates: owned, and not on the boundary ring.
(r0, r1), (c0, c1) = [(max(m.owned_range[0], 1) - m.start,
                       min(m.owned_range[1], m.size - 1) - m.start) for m in d.maps]

u = d.local                      # a numpy view of the local block, padding included
for _ in range(STEPS):
    d.update_halos()             # fill the padding from the neighbours
    if r1 > r0 and c1 > c0:      # one Jacobi step on this process's cells
        u[r0:r1, c0:c1] = 0.25 * (u[r0 - 1:r1 - 1, c0:c1] + u[r0 + 1:r1 + 1, c0:c1]
                                  + u[r0:r1, c0 - 1:c1 - 1] + u[r0:r1, c0 + 1:c1 + 1])

result = d.gather(root=0)        # the global array on rank 0, None elsewhere
if result is not None:
    print(f"{d.grid_shape[0]} x {d.grid_shape[1]} processes, {STEPS} steps: "
          f"mean temperature {result[1:-1, 1:-1].mean():.6f}")
    if sys.argv[1:2] == ["--save"]:
        np.save(sys.argv[2], result)
