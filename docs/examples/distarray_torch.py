"""A torch bfloat16 tensor into a DistArray, across the processes and back
into torch, with no conversion of the user's: every step reads and writes
through the extended buffer protocol (DLPack at the torch ends).

    python docs/examples/distarray_torch.py               # one process
    mpiexec -n 2 python docs/examples/distarray_torch.py  # two

It needs torch and ml_dtypes (``pip install torch "bufferext[lowp]"``, and
``bufferext[mpi]`` for mpiexec): a DistArray holds bfloat16 as ml_dtypes'
type, and refuses it, naming ml_dtypes, without it.
"""

import torch

from bufferext.distarray import DistArray

t = torch.arange(24, dtype=torch.float32).reshape(6, 4).to(torch.bfloat16)

rows = DistArray.scatter(t, dist="bn")      # rows over the processes
cols = rows.redistribute(dist="nb")         # then columns
whole = cols.allgather()                    # the global array, on every process
back = torch.from_dlpack(whole)             # into torch, zero-copy

same = torch.equal(back.view(torch.int16), t.view(torch.int16))
print(f"{rows.grid_shape[0]} process(es): rows {rows.local_shape}, columns "
      f"{cols.local_shape}; back in torch as {back.dtype}, bit-exact: {same}")
