"""The children of an MPI rank, each asked what ``comm=None`` means.

Run by a rank (``mpiexec -n 2 python tests/_launch_children.py [--init]``,
or imported by an MPI test already running as one), it starts one child of
each kind a rank has and prints, as one JSON line, this rank's own answer
and each child's.  A child inherits the launcher's variables, and with
some kinds its socket too; every child must be one process (``launched()``
is ``(1, None)``, ``from_global`` keeps the whole array on ``comm`` None,
mpi4py is not imported) and end by itself: a child that took itself for a
rank hung or died in ``MPI_Init``, so each is bounded by ``LIMIT`` seconds
and a hung one reads as ``"timeout"``.

With ``--init`` the rank first joins its world (``from_global`` on
``comm=None``: MPI_Init), so the children, a fork among them, come from a
process whose MPI is running; and its own answer then comes from MPI, with
``PMI_FD`` closed too (``"socket gone"``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List

LIMIT = 60.0

#: What a child runs: its own answer, as one JSON line.
ANSWER = """
import json, sys
import numpy as np
from bufferext.distarray import DistArray
from bufferext.distarray._comm import launched
d = DistArray.from_global(np.arange(6), dist="b")
print(json.dumps([list(launched()), repr(d.comm), d.local.tolist(),
                  "mpi4py.MPI" in sys.modules]), flush=True)
"""

#: A child whose descriptor numbered as the launcher's socket is another
#: socket (its own pair), with the variables of hydra's socket mode.
REUSED = """
import os, socket
fd = int(os.environ.setdefault("PMI_FD", "9"))
os.environ.setdefault("PMI_SIZE", "2")
mine, other = socket.socketpair()
os.dup2(mine.fileno(), fd)
""" + ANSWER


def _python(code: str, **kwargs: Any) -> str:
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                              text=True, timeout=LIMIT, **kwargs)
    except subprocess.TimeoutExpired:
        return "timeout"
    return proc.stdout.strip() if proc.returncode == 0 else \
        f"exit {proc.returncode}: {proc.stderr.strip()[-400:]}"


def _fork() -> str:
    """A fork of this process (its modules and MPI state included)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                                # the child: never returns
        status = 1
        try:
            os.close(read)
            sys.stdout = os.fdopen(write, "w")  # not a test runner's capture
            exec(ANSWER, {})
            sys.stdout.flush()
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    deadline = time.monotonic() + LIMIT
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read)
            return "timeout"
        time.sleep(0.05)
    with os.fdopen(read) as out:
        return out.read().strip()


def _system() -> str:
    """``os.system``: a shell, then python, both keeping every descriptor."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        script = os.path.join(tmp, "child.py")
        with open(script, "w") as f:
            f.write(ANSWER)
        status = os.system(f"timeout {int(LIMIT)} '{sys.executable}' '{script}' > '{out}'")
        with open(out) as f:
            text = f.read().strip()
    return text if status == 0 else f"status {status}"


def _holding_socket() -> str:
    """A subprocess that keeps this rank's descriptors (PMI_FD's socket)."""
    return _python(ANSWER, close_fds=False)


CHILDREN: Dict[str, Callable[[], str]] = {
    "fork": _fork,
    "subprocess": lambda: _python(ANSWER),
    "subprocess keeping descriptors": _holding_socket,
    "os.system": _system,
    "descriptor reused by a socket": lambda: _python(REUSED),
}


def answer_with_pmi_fd(fd: str) -> List[Any]:
    """This rank's answer with ``PMI_FD`` set to ``fd``."""
    from bufferext.distarray._comm import launched
    saved = os.environ.get("PMI_FD")
    try:
        os.environ["PMI_FD"] = fd
        return list(launched())
    finally:
        if saved is None:
            del os.environ["PMI_FD"]
        else:
            os.environ["PMI_FD"] = saved


def own_socket_answer() -> List[Any]:
    """This rank's answer with ``PMI_FD`` naming a socket pair of its own
    (a descriptor number reused by another socket): hydra's socket is the
    proof, so the socket mode no longer counts."""
    mine, other = socket.socketpair()
    with mine, other:
        return answer_with_pmi_fd(str(mine.fileno()))


def report(init: bool) -> Dict[str, Any]:
    """This rank's answers and each child's (parsed where it gave one)."""
    from bufferext.distarray._comm import launched
    result: Dict[str, Any] = {"rank": list(launched()),
                              "own socket": own_socket_answer()}
    if init:
        import numpy as np
        from bufferext.distarray import DistArray
        d = DistArray.from_global(np.arange(6), dist="b")
        result["world"] = [d.comm.Get_size(), d.local.tolist()]
        # MPI is running here: its world answers, the socket is not asked
        result["socket gone"] = answer_with_pmi_fd("-1")
    for name, child in CHILDREN.items():
        text = child()
        try:
            result[name] = json.loads(text)
        except ValueError:
            result[name] = text
    return result


if __name__ == "__main__":
    print(json.dumps(report("--init" in sys.argv[1:])), flush=True)
