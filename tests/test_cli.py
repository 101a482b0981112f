"""``python -m bufferext``: the info command and its JSON form."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import bufferext
from bufferext import BufferFlags as F
from bufferext.__main__ import collect_info, format_info, main
from _helpers import run_installed


def run_cli(*args: str, **env_overrides: str) -> subprocess.CompletedProcess:
    return run_installed("-m", "bufferext", *args, **env_overrides)


def check_report(text: str) -> None:
    assert f"bufferext {bufferext.__version__}" in text
    assert bufferext.get_include() in text
    assert "DEVICE" in text and "0x10000" in text
    assert "REQUIRED" in text and "0x000fd" in text
    assert "LEGACY" in text and "0x001fd" in text
    assert "FULL_RO" in text
    assert f"python:           {sys.version.split()[0]}" in text
    from bufferext._bufferext import NATIVE
    assert (f"protocol:         {'native' if NATIVE else 'backport'} ("
            in text)
    import numpy
    assert numpy.__version__ in text
    assert "device libraries:" in text
    assert "bufferext.cuda" in text and "bufferext.ve" in text
    assert "BUFFEREXT_CUDA_DRIVER" in text
    assert "BUFFEREXT_VEO_LIBRARY" in text


@pytest.mark.parametrize("args", [(), ("info",)], ids=["default", "info"])
def test_info_text(args):
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    check_report(proc.stdout)


@pytest.mark.parametrize("args", [("--json",), ("info", "--json"),
                                  ("--json", "info")],
                         ids=["default", "info", "before-the-command"])
def test_info_json(args):
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["version"] == bufferext.__version__
    assert info["include"] == bufferext.get_include()
    assert info["abi_version"] == 4
    from bufferext._bufferext import NATIVE
    assert info["mode"] == ("native" if NATIVE else "backport")
    assert info["flags"]["DEVICE"] == 0x10000
    assert info["flags"]["REQUIRED"] == 0xFD
    assert info["flags"]["LEGACY"] == 0x1FD
    for name, value in info["flags"].items():
        assert F[name] == value
    assert info["python"] == sys.version.split()[0]
    import numpy
    assert info["numpy"] == numpy.__version__
    assert isinstance(info["platform"], str) and info["platform"]
    assert [d["device"] for d in info["devices"]] == ["bufferext.cuda",
                                                      "bufferext.ve"]


def test_json_before_check_is_checks_option():
    # it was read as `info --json check ...`: "unrecognized arguments:
    # check bytearray(2)", blaming the command rather than the option
    proc = run_cli("--json", "check", "bytearray(2)")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["protocols"]["buffer"] is True


def test_info_reports_where_it_looked():
    path = "/nonexistent/cli/libcuda.so"
    proc = run_cli("info", BUFFEREXT_CUDA_DRIVER=path,
                   BUFFEREXT_VEO_LIBRARY="none")
    assert proc.returncode == 0, proc.stderr
    assert "not loaded" in proc.stdout
    assert f"looked for: {path}" in proc.stdout
    assert "not found" in proc.stdout
    assert "disabled by BUFFEREXT_VEO_LIBRARY=none" in proc.stdout
    info = json.loads(run_cli("--json", BUFFEREXT_CUDA_DRIVER=path).stdout)
    assert info["devices"][0]["looked_for"] == [path]
    assert info["devices"][0]["loaded"] is False


@pytest.mark.parametrize("args", [("bogus",), ("info", "--bogus"),
                                  ("--bogus",), ("check",),
                                  ("demo", "--device", "tpu")],
                         ids=["subcommand", "info-option", "option",
                              "check-without-target", "demo-bad-device"])
def test_usage_errors_exit_2(args):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert "usage:" in proc.stderr
    assert proc.stdout == ""


def test_help_exits_0():
    proc = run_cli("--help")
    assert proc.returncode == 0
    assert "info" in proc.stdout


def test_main_in_process(capsys):
    assert main([]) == 0
    check_report(capsys.readouterr().out)
    assert main(["info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == \
        bufferext.__version__
    assert main(["nope"]) == 2
    assert "invalid choice" in capsys.readouterr().err


def test_collect_and_format():
    info = collect_info()
    json.dumps(info)                      # serialisable
    text = format_info(info)
    check_report(text)
    assert text.endswith("\n")


def test_console_script():
    script = shutil.which("bufferext",
                          path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip("the console script is not installed next to python")
    proc = subprocess.run([script, "info", "--json"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["version"] == bufferext.__version__


def test_console_script_checks_a_module_of_the_current_directory(tmp_path):
    # python -m puts the current directory first on sys.path, the console
    # script its bin directory: "bufferext check mine:buf" found no "mine"
    script = shutil.which("bufferext",
                          path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip("the console script is not installed next to python")
    (tmp_path / "mine_here.py").write_text(
        "import bufferext\nbuf = bufferext.CPUBuffer((4,), 'f4')\n")
    proc = subprocess.run([script, "check", "mine_here:buf"],
                          capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.endswith("result: conformant\n")


def test_version():
    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"bufferext {bufferext.__version__}\n"


def test_info_reports_the_optional_parts():
    """mpi4py and its MPI library, ml_dtypes (bfloat16 and float8 arrays)
    and matplotlib (plot_distribution): a version, or how to install them."""
    from importlib import metadata
    info = collect_info()
    text = format_info(info)
    for dist, label, hint in (("mpi4py", "mpi4py:           ", "pip install mpi4py mpich"),
                              ("ml_dtypes", "ml_dtypes:        ", "pip install ml_dtypes"),
                              ("matplotlib", "matplotlib:       ", "pip install matplotlib")):
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            assert info[dist] is None
            assert label + "not installed" in text and hint in text
        else:
            assert info[dist] == version
            assert label + version in text
    if info["mpi4py"] is None:
        assert info["mpi"] is None and "MPI library:      -" in text
    else:
        assert info["mpi"] and "MPI library:      " + info["mpi"] in text
    # asked in a child: the caller's process neither starts MPI nor
    # imports mpi4py.MPI told not to start it (which would be for good)
    child = run_installed("-c", "import sys; from bufferext.__main__ import "
                          "collect_info; collect_info(); print('mpi4py.MPI' in sys.modules)")
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "False"


def test_usage_names_the_command_it_was_started_as():
    assert run_cli("--help").stdout.startswith("usage: python -m bufferext ")
    script = shutil.which("bufferext", path=os.path.dirname(sys.executable))
    if script is None:
        pytest.skip("the console script is not installed next to python")
    proc = subprocess.run([script, "bogus"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: bufferext ")
    assert "bufferext: error: argument COMMAND: invalid choice: 'bogus'" in proc.stderr


def test_demo_help_says_what_it_does():
    proc = run_cli("demo", "--help")
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "Solve the 2-D heat equation (Jacobi iteration)" in out
    assert "compared with a serial numpy run" in out
    for option in ("--size SIZE", "--steps STEPS", "--device {cpu,cuda,ve}"):
        assert option in out


def test_usage_error_prints_once_under_mpiexec():
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable))
    if mpiexec is None:
        pytest.skip("no mpiexec next to python (pip install mpi4py mpich)")
    proc = subprocess.run([mpiexec, "-n", "3", sys.executable, "-m", "bufferext",
                           "bogus"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert (proc.stdout + proc.stderr).count("invalid choice: 'bogus'") == 1


def test_closed_output_pipe_ends_quietly() -> None:
    # `python -m bufferext info --json | head -c 300`: the reader is gone
    # before the report is written: no BrokenPipeError traceback, exit
    # status 1.  The pipe's read end is closed before the child starts, so
    # the child meets a closed pipe however fast it runs (closed just after
    # the start, a child that got to write first, the test process being
    # descheduled meanwhile, wrote into the pipe and exited 0)
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bufferext", "info", "--json"],
            stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert err == b"", err
