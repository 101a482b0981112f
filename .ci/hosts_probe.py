"""Move a known payload between the hosts of a .ci/hosts.sh run.

Run as ``mpiexec -f MACHINEFILE -n HOSTS*PPN python hosts_probe.py PPN
BYTES``: rank r sends BYTES bytes to the rank PPN places further on (its
peer on the next host) and receives as many from the rank PPN places
before.  Each host's link must then carry at least PPN*BYTES bytes out and
as many in; .ci/hosts.sh checks that on the link counters.  First it checks
that the ranks sit where the machinefile puts them: PPN consecutive ranks
per network namespace, each host in a namespace of its own.
"""

import os
import sys

import numpy as np
from mpi4py import MPI


def main() -> None:
    ppn, payload = int(sys.argv[1]), int(sys.argv[2])
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    where = comm.allgather(os.readlink("/proc/self/ns/net"))
    for other, namespace in enumerate(where):
        same_host = other // ppn == rank // ppn
        if (namespace == where[rank]) != same_host:
            sys.exit(f"rank {rank} ({where[rank]}) and rank {other} "
                     f"({namespace}): expected {ppn} consecutive ranks per "
                     f"network namespace")
    source = (rank - ppn) % size
    sent = np.full(payload, rank % 251, np.uint8)
    received = np.empty_like(sent)
    comm.Sendrecv(sent, (rank + ppn) % size, 0, received, source, 0)
    if not (received == source % 251).all():
        sys.exit(f"rank {rank}: the bytes from rank {source} arrived wrong")
    if rank == 0:
        print(f"probe: {size} ranks in {len(set(where))} network namespaces, "
              f"{payload} bytes from each rank to the next host")


main()
