"""Tutorial, step 4: a numpy array spread over N processes, redistributed.

    python distribute.py                 # one process
    mpiexec -n 4 python distribute.py    # four (pip install mpi4py mpich)
"""

import numpy as np

from bufferext.distarray import DistArray

a = np.arange(6 * 4.0).reshape(6, 4)       # the same global array everywhere
rows = DistArray.from_global(a, dist="bn")  # each process keeps a block of rows
cols = rows.redistribute(dist="nb")         # now a block of columns each
print(f"process {rows.rank} of {rows.grid_shape[0]}: rows {rows.local_shape}, "
      f"columns {cols.local_shape}", flush=True)
whole = cols.gather()                       # the global array on process 0
if rows.rank == 0:
    print("gathered on process 0, equal to a:", np.array_equal(whole, a))
