"""The C-API builds: every standard warning-free, the layout frozen, the
headers taken from the installed package, the constants as specified."""

from __future__ import annotations

import os
import subprocess
import sysconfig

import pytest

import bufferext

SOURCE_INCLUDE = os.path.normpath(
    os.path.join(os.path.dirname(__file__), "..", "Include"))


@pytest.mark.parametrize("key", ["c99", "c11", "cxx11", "cxx17",
                                 "layout_c11", "layout_cxx11",
                                 "layout_cxx17"])
def test_builds_without_any_warning(capi_builds, key):
    result = capi_builds[key]
    assert result.returncode == 0, result.output
    assert result.output.strip() == "", result.output
    for flag in ("-Wall", "-Wextra", "-Werror"):
        assert flag in result.command


@pytest.mark.parametrize("std, expected", [
    ("c99", "c199901L"), ("c11", "c201112L"),
    ("cxx11", "c++201103L"), ("cxx17", "c++201703L")])
def test_each_module_is_built_as_its_standard(capi_modules, std, expected):
    assert capi_modules[std].STANDARD == expected
    assert capi_modules[std].__name__ == f"testcapi_{std}"


def test_headers_come_from_the_installed_package(capi_build, capi_builds):
    dirs = capi_build.include_dirs()
    assert dirs[1] == os.path.normpath(bufferext.get_include())
    assert os.path.normpath(dirs[1]) != SOURCE_INCLUDE
    assert "-I" + SOURCE_INCLUDE not in capi_builds["c99"].command


@pytest.mark.parametrize("std", ["c11", "cxx11", "cxx17"])
def test_broken_layout_fails_to_compile(capi_build, tmp_path, std):
    """The freeze can fail: one false assertion stops the compile."""
    result = capi_build.build(
        [capi_build.layout_command(std, str(tmp_path),
                                   ["LAYOUT_SELFTEST_BREAK"])])[0]
    assert result.returncode != 0
    assert "sizeof(Py_buffer_extended) == sizeof(Py_buffer)" in result.output


def check_syntax(capi_build, source, text: str) -> subprocess.CompletedProcess:
    """Write ``text`` to ``source`` and compile it as C, syntax only, with
    the test build's include directories; stdout holds the diagnostics."""
    source.write_text(text)
    cmd = capi_build.compilers()["c"] + [
        "-fsyntax-only", *("-I" + d for d in capi_build.include_dirs()),
        str(source)]
    return subprocess.run(cmd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True)


@pytest.mark.parametrize("part", ["core.h", "cuda.h", "ve.h",
                                  "internal/accel.h"])
def test_part_headers_refuse_direct_include(capi_build, tmp_path, part):
    proc = check_syntax(capi_build, tmp_path / "direct.c",
                        f"#include <Python.h>\n#include <bufferext/{part}>\n")
    assert proc.returncode != 0
    assert "include <bufferext.h>" in proc.stdout


def test_flag_values(capi):
    assert capi.PyBUF_DEVICE == 0x10000
    assert capi.PyBUF_REQUIRED_FLAGS == 0xFD
    assert capi.BUFFEREXT_LEGACY_FLAGS == 0x1FD
    assert capi.BUFFEREXT_EXTENDED_FLAGS == 0x7FFF0000
    assert capi.PyBUF_DEVICE not in (capi.PyBUF_READ, capi.PyBUF_WRITE)
    assert capi.PyBUF_DEVICE | capi.PyBUF_SIMPLE not in (capi.PyBUF_READ,
                                                         capi.PyBUF_WRITE)
    assert capi.BUFFEREXT_ABI_VERSION == 4
    assert capi.SIZEOF_PY_BUFFER_EXTENDED == capi.SIZEOF_PY_BUFFER + 24


def test_header_and_python_api_agree(capi):
    flags = bufferext.BufferFlags
    assert flags.DEVICE == capi.PyBUF_DEVICE
    assert flags.REQUIRED == capi.PyBUF_REQUIRED_FLAGS
    for name in ("SIMPLE", "WRITABLE", "FORMAT", "ND", "STRIDES",
                 "C_CONTIGUOUS", "F_CONTIGUOUS", "ANY_CONTIGUOUS",
                 "INDIRECT", "FULL", "FULL_RO", "RECORDS", "RECORDS_RO",
                 "STRIDED", "STRIDED_RO", "CONTIG", "CONTIG_RO"):
        assert getattr(flags, name) == getattr(capi, "PyBUF_" + name), name


@pytest.mark.skipif(bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
                    reason="a free-threaded CPython before 3.15 refuses "
                           "Py_LIMITED_API in Python.h itself, before the "
                           "header's own #error")
def test_limited_api_below_3_11_is_refused_clearly(capi_build, tmp_path):
    """Py_buffer joined the limited API in 3.11: below, one clear #error
    (3.11 and later: tests/test_limited_api.py)."""
    proc = check_syntax(capi_build, tmp_path / "limited.c",
                        "#define Py_LIMITED_API 0x030A0000\n"
                        "#include <Python.h>\n#include <bufferext.h>\n")
    assert proc.returncode != 0
    assert "bufferext.h needs Py_LIMITED_API >= 0x030B0000 (3.11)" \
        in proc.stdout
    assert proc.stdout.count("error:") == 1, proc.stdout
