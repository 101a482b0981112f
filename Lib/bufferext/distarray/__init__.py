"""The Distributed Array Protocol (0.10.0) over extended-buffer exporters.

``DistArray`` is one process's section of a distributed array: export it with
``__distarray__()``, import any exporter with ``DistArray.from_distarray``,
cut a section out of a global array with ``DistArray.from_global``, and
translate indices with its per-dimension ``maps``.  ``validate`` checks
``__distarray__`` data against every rule one process can check.

Across processes (mpi4py, optional): ``comm=`` on ``from_global`` and
``from_distarray``, ``DistArray.scatter``, ``gather``, ``allgather``,
``redistribute``, ``update_halos`` and ``validate_collective``.
``comm=None`` (the default) means every process of the job when an MPI
launcher started several (``mpiexec -n N``: mpi4py's ``COMM_WORLD``), else
this process alone, without mpi4py.  The local
buffer may be device memory: consumers use the extended buffer protocol
(``bufferext.get_buffer``) on ``'buffer'`` to find out.

    >>> import numpy as np
    >>> from bufferext.distarray import DistArray, validate
    >>> d = DistArray.from_global(np.arange(10), dist="c", grid_shape=(3,), rank=1)
    >>> d.local.tolist(), d.owner(5)
    ([1, 4, 7], 2)
    >>> validate(d.__distarray__())
"""

from ._array import DistArray
from ._buffers import producer_class
from ._collective import validate_collective
from ._comm import agree, cuda_aware
from ._maps import BlockMap, CyclicMap, DimMap, UnstructuredMap, split_bounds
from ._plot import plot_distribution
from ._protocol import EXPORT_VERSION, ProtocolError, owned_count, validate
from ._spec import DistSpec, dims_create

__all__ = [
    "BlockMap",
    "CyclicMap",
    "DimMap",
    "DistArray",
    "DistSpec",
    "EXPORT_VERSION",
    "ProtocolError",
    "UnstructuredMap",
    "agree",
    "cuda_aware",
    "dims_create",
    "owned_count",
    "plot_distribution",
    "producer_class",
    "split_bounds",
    "validate",
    "validate_collective",
]
