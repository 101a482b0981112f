"""``python -m bufferext demo``: a 2-D heat equation (Jacobi iteration) on a
block-distributed, padded array with halo exchange, checked against a
serial numpy run.

One process by default (mpi4py is not needed); under ``mpiexec -n N`` the
grid is spread over the N processes.  The global array is ``(N+2) x (N+2)``:
its outer ring is boundary padding holding fixed boundary values (1.0 on
the top edge, 0.0 elsewhere), the inner ``N x N`` cells start at 0.0.  Each
step fills the communication padding (``update_halos``), then replaces
every interior cell by the mean of its four neighbours.  With
``--device cuda`` or ``ve`` the local sections live in device buffers and
halos are exchanged through them (staged through host memory unless MPI is
CUDA-aware); the stencil itself runs on the host, since this package ships
no device kernels.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable, List, Optional, Tuple

import numpy as np

__all__ = ["add_arguments", "run"]

TOLERANCE = 1e-12


#: What ``demo --help`` says.
DESCRIPTION = """\
Solve the 2-D heat equation (Jacobi iteration) on a block-distributed
(N+2) x (N+2) array: its outer ring holds fixed boundary values (1.0 on the
top edge), the N x N interior starts at 0.0, and the sections are padded by
one cell towards their neighbours.  Each step fills that padding from the
neighbours (DistArray.update_halos) and replaces every interior cell by the
mean of its four neighbours.  At the end the result is gathered on rank 0
and compared with a serial numpy run (exit status 1 if they differ by more
than 1e-12); the report shows each rank's section, the time per step and
update_halos against raw mpi4py calls moving the same bytes.

One process by default (mpi4py not needed); `mpiexec -n N python -m
bufferext demo` spreads the grid over N processes.  With --device cuda or
ve the sections live in device buffers (the stencil itself runs on the
host)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the demo's options to ``parser``."""
    parser.add_argument("--size", type=int, default=256,
                        help="interior cells per side (default 256)")
    parser.add_argument("--steps", type=int, default=50,
                        help="Jacobi steps (default 50)")
    parser.add_argument("--device", choices=("cpu", "cuda", "ve"), default="cpu",
                        help="where the local sections live (default cpu)")


def _world() -> Any:
    """What ``comm=None`` means: COMM_WORLD under ``mpiexec -n N`` (N > 1),
    else None (one process, mpi4py not imported)."""
    from .distarray._comm import resolve
    return resolve(None)


def initial(size: int) -> np.ndarray:
    """The global starting array: hot top edge, everything else 0."""
    grid = np.zeros((size + 2, size + 2))
    grid[0, :] = 1.0
    return grid


def jacobi(array: np.ndarray, rows: Tuple[int, int], cols: Tuple[int, int]) -> None:
    """One Jacobi step in place on ``array[rows, cols]`` (its neighbours must
    be inside ``array``)."""
    (r0, r1), (c0, c1) = rows, cols
    if r1 <= r0 or c1 <= c0:
        return
    new = array[r0 - 1:r1 - 1, c0:c1] + array[r0 + 1:r1 + 1, c0:c1]
    new += array[r0:r1, c0 - 1:c1 - 1]
    new += array[r0:r1, c0 + 1:c1 + 1]
    new *= 0.25
    array[r0:r1, c0:c1] = new


def serial(size: int, steps: int) -> np.ndarray:
    """The reference: ``steps`` Jacobi steps on the whole array."""
    grid = initial(size)
    for _ in range(steps):
        jacobi(grid, (1, size + 1), (1, size + 1))
    return grid


def _interior(d: Any) -> Tuple[Tuple[int, int], ...]:
    """Local rows/columns this process updates: owned, not global boundary."""
    out = []
    for m in d.maps:
        lo, hi = m.owned_range
        lo, hi = max(lo, 1), min(hi, m.size - 1)
        out.append((lo - m.start, max(hi, lo) - m.start))
    return tuple(out)


def _summary(d: Any) -> str:
    return " x ".join(f"[{m.start}:{m.stop}) pad {m.padding[0]},{m.padding[1]}"
                      for m in d.maps)


def simulate(size: int, steps: int, device: str, comm: Any
             ) -> Tuple[Optional[np.ndarray], Any, float, float]:
    """Run the distributed solver; ``(global result on rank 0 or None,
    the DistArray, seconds per step, halo seconds per step)``."""
    from .distarray import DistArray
    from .distarray import dims_create
    nprocs = 1 if comm is None else comm.Get_size()
    grid = dims_create(nprocs, [None, None])
    pads = [[(1, 1)] * p for p in grid]
    start = initial(size) if comm is None or comm.Get_rank() == 0 else None
    d = DistArray.scatter(start, dist="bb", grid_shape=grid, padding=pads,
                          device=device, comm=comm)
    rows, cols = _interior(d)
    halo = 0.0
    if comm is not None:
        comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        t = time.perf_counter()
        d.update_halos()
        halo += time.perf_counter() - t
        if device == "cpu":
            jacobi(d.local, rows, cols)
        else:
            host = np.asarray(d.buffer.to_host()).reshape(d.local_shape)
            jacobi(host, rows, cols)
            d.buffer.copy_from_host(host)
    elapsed = time.perf_counter() - t0
    result = d.gather(0)
    steps = max(steps, 1)
    return result, d, elapsed / steps, halo / steps


def _halo_vs_raw(d: Any, repeats: int) -> Tuple[float, float, int]:
    """Back-to-back timings: ``(update_halos seconds, raw mpi4py seconds for
    the same bytes, bytes this process sends)``."""
    exchange, nbytes = raw_halo_exchange(d)
    times = []
    for fn in (d.update_halos, exchange):
        fn()
        if d.comm is not None:
            d.comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(repeats):
            fn()
        times.append((time.perf_counter() - t0) / max(repeats, 1))
    return times[0], times[1], nbytes


def raw_halo_exchange(darr: Any) -> Tuple[Callable[[], None], int]:
    """The raw-MPI baseline of ``darr.update_halos()`` (demo, benchmarks):
    ``(exchange, nbytes)``, a function moving the same bytes between the
    same processes with plain mpi4py calls on contiguous numpy buffers
    (``Sendrecv`` where a stage has one peer each way, ``Isend``/``Irecv``
    otherwise), and the bytes this process sends."""
    from .distarray._datatypes import count
    from .distarray._halo import call_sequence
    halo = darr._halo_plan()
    comm = darr.comm
    itemsize = darr.dtype.itemsize
    stages = []
    nbytes = 0
    for sends, recvs, _ in halo.stages:
        sb = [(peer, tag, np.zeros(count(sel) * itemsize, np.uint8))
              for peer, tag, sel in sends]
        rb = [(peer, tag, np.zeros(count(sel) * itemsize, np.uint8))
              for peer, tag, sel in recvs]
        nbytes += sum(b.size for _, _, b in sb)
        stages.append((sb, rb))
    if comm is None or comm.Get_size() == 1:
        return (lambda: None), nbytes
    from mpi4py import MPI
    sendrecv, waitall = comm.Sendrecv, MPI.Request.Waitall

    def pairwise(sb: List[Any], rb: List[Any]) -> bool:
        return len(sb) == 1 and len(rb) == 1 and sb[0][0] == rb[0][0]

    if all(pairwise(sb, rb) or not (sb or rb) for sb, rb in stages):
        calls = [(sb[0][2], sb[0][0], sb[0][1], rb[0][2], rb[0][0], rb[0][1])
                 for sb, rb in stages if sb]
        return call_sequence(sendrecv, calls), nbytes

    def exchange() -> None:
        for sb, rb in stages:
            if pairwise(sb, rb):
                sendrecv(sb[0][2], sb[0][0], sb[0][1], rb[0][2], rb[0][0], rb[0][1])
                continue
            reqs = [comm.Irecv(b, peer, tag) for peer, tag, b in rb]
            reqs += [comm.Isend(b, peer, tag) for peer, tag, b in sb]
            waitall(reqs)

    return exchange, nbytes


def _max(comm: Any, value: float) -> float:
    if comm is None:
        return value
    from mpi4py import MPI
    return float(comm.allreduce(value, op=MPI.MAX))


def _usage_error(message: str) -> int:
    """A usage error of the demo's options, said as argparse's are (once,
    by rank 0, under a launcher): 2."""
    from .__main__ import _quiet_unless_first_rank
    with _quiet_unless_first_rank():
        print(message, file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """Run the demo; 0 if the distributed result equals the serial one."""
    if args.size < 1 or args.steps < 0:
        return _usage_error(f"demo: --size must be >= 1 and --steps >= 0 (got "
                            f"{args.size}, {args.steps})")
    nbytes = (args.size + 2) ** 2 * 8
    if nbytes > sys.maxsize:
        return _usage_error(f"demo: --size {args.size}: its grid of float64 "
                            f"would take {nbytes} bytes, more than this process "
                            "can address")
    try:
        comm = _world()
    except ImportError as exc:     # under mpiexec without mpi4py: no MPI to agree
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    rank = 0 if comm is None else comm.Get_rank()
    try:
        result, d, per_step, halo = simulate(args.size, args.steps, args.device, comm)
    except Exception as exc:       # noqa: BLE001 - reported, same on every rank
        if rank == 0:
            print(f"demo: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    alone, raw, nbytes = _halo_vs_raw(d, max(args.steps, 10))
    per_step, halo, alone, raw = (_max(comm, v) for v in (per_step, halo, alone, raw))
    rows: List[Any] = [(rank, d.device, d.grid_coords, _summary(d), nbytes)]
    if comm is not None:
        rows = [r for part in comm.gather(rows, root=0) or [] for r in part]
    if rank != 0:
        return int(comm.bcast(None, root=0))
    expect = serial(args.size, args.steps)
    assert result is not None
    error = float(np.max(np.abs(result - expect)))
    ok = error <= TOLERANCE
    nprocs = 1 if comm is None else comm.Get_size()
    print(f"heat equation: {args.size}x{args.size} interior, {args.steps} steps, "
          f"{nprocs} rank(s), grid {d.grid_shape}, device {args.device}")
    print(f"{'rank':>4}  {'device':<6} {'coords':<8} {'dim_data (start:stop, padding)':<44}"
          f" {'halo bytes':>10}")
    for r, dev, coords, summary, nb in rows:
        print(f"{r:>4}  {dev:<6} {str(coords):<8} {summary:<44} {nb:>10}")
    print(f"time per step      {per_step * 1e3:10.3f} ms")
    print(f"halo per step      {halo * 1e3:10.3f} ms  (update_halos in the loop, "
          "waits for neighbours included)")
    print(f"update_halos alone {alone * 1e3:10.3f} ms  (back to back)")
    if nprocs > 1:
        print(f"raw MPI            {raw * 1e3:10.3f} ms  (mpi4py, same bytes, "
              "back to back)")
        if raw > 0:
            print(f"halo / raw         {alone / raw:10.2f}")
    else:
        print("raw MPI                   -     (one process: no halo crosses "
              "processes; run under mpiexec -n N)")
    print(f"max abs error vs serial numpy: {error:.3e} "
          f"({'OK' if ok else 'FAILED'}, tolerance {TOLERANCE:g})")
    status = 0 if ok else 1
    if comm is not None:
        comm.bcast(status, root=0)
    return status
