"""The Usage block of docs/distarray.rst, as it runs: on one process and
under ``mpiexec -n N`` alike (each process cuts its own section)."""

import numpy as np

from bufferext.distarray import DistArray, validate

a = np.arange(45.0).reshape(5, 9)
d = DistArray.from_global(a, dist="bc")  # this process's section of a
d.local            # numpy view of the local buffer (padding included)
d.owned            # the same memory without communication padding
data = d.__distarray__()     # {'__version__': '0.10.0', 'buffer': ..., 'dim_data': ...}
validate(data)               # raises ProtocolError if anything is wrong
e = DistArray.from_distarray(data)      # zero-copy import (on every process)
assert np.shares_memory(e.local, d.local)
print(f"process {d.rank} of grid {d.grid_shape}: section {d.local_shape}")
