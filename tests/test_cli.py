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


@pytest.mark.parametrize("args", [("--json",), ("info", "--json")],
                         ids=["default", "info"])
def test_info_json(args):
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["version"] == bufferext.__version__
    assert info["include"] == bufferext.get_include()
    assert info["abi_version"] == 1
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
