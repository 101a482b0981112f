"""The heat-equation demo: distributed result equals the serial run."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np
import pytest

from bufferext import _demo
from _helpers import mpiexec

RUN = ("import sys, argparse; from bufferext import _demo; "
       "p = argparse.ArgumentParser(); _demo.add_arguments(p); "
       "sys.exit(_demo.run(p.parse_args(sys.argv[1:])))")


def args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    _demo.add_arguments(p)
    return p.parse_args(list(argv))


def test_single_process_equals_serial(capsys: pytest.CaptureFixture) -> None:
    result, d, _, _ = _demo.simulate(20, 7, "cpu", None)
    assert np.array_equal(result, _demo.serial(20, 7))
    assert d.grid_shape == (1, 1)
    assert _demo.run(args("--size", "16", "--steps", "3")) == 0
    out = capsys.readouterr().out
    assert "max abs error vs serial numpy: 0.000e+00 (OK" in out
    assert "[0:18) pad 1,1" in out
    # one process: no raw-MPI figure to compare with (not a 0.000 ms one)
    assert "raw MPI                   -     (one process" in out
    assert "halo / raw" not in out


def test_serial_reference_diffuses() -> None:
    g = _demo.serial(8, 30)
    assert g[0].max() == 1.0 and 0 < g[1, 4] < 1 and g[-2, 4] < g[1, 4]


def test_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert _demo.run(args("--size", "0")) == 2
    assert _demo.run(args("--size", str(2**40))) == 2   # a usage error too
    assert capsys.readouterr().err.endswith(
        f"demo: --size {2**40}: its grid of float64 would take "
        f"{(2**40 + 2)**2 * 8} bytes, more than this process can address\n")


def test_under_a_launcher_without_mpi4py_says_what_to_install() -> None:
    """mpiexec -n 2 without mpi4py: each process would solve the whole grid
    alone; the demo stops and says what to install instead."""
    exe = _mpiexec()
    code = "import sys; sys.modules['mpi4py'] = None\n" + RUN
    proc = subprocess.run([exe, "-n", "2", sys.executable, "-c", code, "--size", "8",
                           "--steps", "1"], capture_output=True, text=True,
                          env=_no_launcher(), timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # both ranks' messages reach mpiexec's stderr through hydra, which may
    # join one to the other's line when they write at once (seen under
    # load): count the messages, not the lines
    messages = proc.stderr.split("demo: comm=None: ")[1:]
    assert len(messages) == 2, proc.stderr
    for message in messages:
        assert "(PMI_SIZE=2)" in message
        assert "pip install mpi4py mpich" in message


def _mpiexec() -> str:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        pytest.skip("mpi4py is not installed")
    return mpiexec()


@pytest.mark.parametrize("n", [2, 4])
def test_demo_under_mpiexec(n: int) -> None:
    if "PMI_RANK" in os.environ or "PMI_SIZE" in os.environ:
        pytest.skip("already under mpiexec")
    exe = _mpiexec()
    proc = subprocess.run([exe, "-n", str(n), sys.executable, "-c", RUN,
                           "--size", "40", "--steps", "10"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{n} rank(s)" in proc.stdout
    assert "(OK, tolerance" in proc.stdout
    assert proc.stdout.count(" cpu ") == n


# ---- docs/examples/heat_mpi.py: the MPI example of docs/mpi.rst, no comm= --

HEAT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    "docs", "examples", "heat_mpi.py")


def _heat_serial(n: int = 64, steps: int = 100) -> np.ndarray:
    """The example's computation on one numpy array, written out again."""
    u = np.zeros((n + 2, n + 2))
    u[0, :] = 1.0
    for _ in range(steps):
        u[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return u


def test_a_usage_error_under_a_launcher_is_said_once() -> None:
    # argparse's errors were said by rank 0 alone, the demo's own (a size
    # out of range) by every rank
    exe = _mpiexec()
    proc = subprocess.run([exe, "-n", "2", sys.executable, "-c", RUN,
                           "--size", "0"], capture_output=True, text=True,
                          env=_no_launcher(), timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("demo: --size must be >= 1") == 1, proc.stderr


def _no_launcher() -> dict:
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_"))}


@pytest.mark.parametrize("n", [1, 2])
def test_heat_example_without_comm_equals_serial(n: int, tmp_path) -> None:
    """The example, which passes no comm=, run as a newcomer runs it: on one
    process with plain python, on two under mpiexec (where comm=None must
    mean COMM_WORLD: each rank keeping the whole array would print a 1 x 1
    grid, or two lines).  tests/test_docs_examples.py runs the commands
    docs/mpi.rst shows and compares their lines with the page."""
    if not os.path.exists(HEAT):
        pytest.skip(f"{HEAT} is not beside the tests")
    if "PMI_RANK" in os.environ or "PMI_SIZE" in os.environ:
        pytest.skip("already under mpiexec")
    saved = tmp_path / "result.npy"
    cmd = [sys.executable, HEAT, "--save", str(saved)]
    if n > 1:
        cmd = [_mpiexec(), "-n", str(n)] + cmd
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env=_no_launcher())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    grid = {1: "1 x 1", 2: "2 x 1"}[n]
    assert proc.stdout.splitlines() == [
        f"{grid} processes, 100 steps: mean temperature {_heat_serial()[1:-1, 1:-1].mean():.6f}"]
    assert np.allclose(np.load(saved), _heat_serial(), rtol=0, atol=1e-12)
