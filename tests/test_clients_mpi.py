"""mpi4py as a real client: Send/Recv of CPUBuffer and as_buffer objects
between two ranks, zero-copy (mpi4py's view of each object has the
object's own address).  Runs `mpiexec -n 2` in a subprocess."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from _helpers import mpiexec

pytest.importorskip("mpi4py")

SCRIPT = textwrap.dedent("""
    import numpy as np
    from mpi4py import MPI
    import bufferext

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    assert comm.Get_size() == 2

    class DLPackOnly:
        def __init__(self, array):
            self.array = array
        def __dlpack__(self, **kw):
            return self.array.__dlpack__(**kw)
        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

    if rank == 0:
        buf = bufferext.CPUBuffer((4, 5), "float64")
        buf.copy_from_host(np.arange(20.0).reshape(4, 5))
        assert MPI.buffer(buf).address == buf.ptr
        comm.Send(buf, dest=1, tag=1)
        source = np.arange(8, dtype=np.int32) * 3
        adapter = bufferext.as_buffer(DLPackOnly(source))
        assert MPI.buffer(adapter).address == source.ctypes.data
        comm.Send(adapter, dest=1, tag=2)
    else:
        buf = bufferext.CPUBuffer((4, 5), "float64")
        comm.Recv(buf, source=0, tag=1)
        np.testing.assert_array_equal(buf.to_host(),
                                      np.arange(20.0).reshape(4, 5))
        target = np.zeros(8, dtype=np.int32)
        adapter = bufferext.as_buffer(DLPackOnly(target), readonly=False)
        assert MPI.buffer(adapter).address == target.ctypes.data
        comm.Recv(adapter, source=0, tag=2)
        np.testing.assert_array_equal(target, np.arange(8) * 3)
        # a read-only export cannot be a receive buffer
        frozen = bufferext.CPUBuffer(8, "int32", readonly=True)
        try:
            comm.Recv(frozen, source=0, tag=3)
        except BufferError:
            pass
        else:
            raise AssertionError("received into a read-only buffer")
    print(f"rank {rank} OK", flush=True)
""")


def test_send_recv_between_two_ranks(tmp_path) -> None:
    script = tmp_path / "sendrecv.py"
    script.write_text(SCRIPT)
    result = subprocess.run([mpiexec(), "-n", "2", sys.executable, str(script)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rank 0 OK" in result.stdout and "rank 1 OK" in result.stdout
