"""The Cython declarations (bufferext/__init__.pxd): a Cython consumer and
a Cython producer, built here with Cython and the C compiler against the
INSTALLED package, interoperate with bufferext's own producers and
consumers.  Skipped only when Cython is not installed."""

from __future__ import annotations

import gc
import importlib.machinery
import os
import shlex
import subprocess
import sys
from types import ModuleType
from typing import Dict

import pytest

import bufferext
from bufferext import BufferFlags
from _helpers import NATIVE_DOOR_REFUSAL, NATIVE_INTERPRETER, editable_source

Cython = pytest.importorskip(
    "Cython", reason="Cython is not installed (pip install cython, or the "
                     "'test' extra)")

SOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cython")
FULL_RO_DEVICE = BufferFlags.FULL_RO | BufferFlags.DEVICE


def cythonize(capi_build: ModuleType, name: str, outdir: str) -> ModuleType:
    """tests/cython/<name>.pyx -> C (Cython finds bufferext/__init__.pxd on
    sys.path, in the installed package) -> an extension module, imported."""
    pyx = os.path.join(SOURCES, name + ".pyx")
    c_file = os.path.join(outdir, name + ".c")
    proc = subprocess.run(
        [sys.executable, "-m", "cython", "-3", "-o", c_file, pyx],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        universal_newlines=True, cwd=outdir)
    assert proc.returncode == 0, proc.stdout
    path = os.path.join(outdir,
                        name + importlib.machinery.EXTENSION_SUFFIXES[0])
    command = (
        capi_build.compilers()["c"]
        + ["-std=c11", "-O1", "-fPIC", "-Wall", "-Werror",
           # Cython's own generated code is not ours to keep warning-free
           "-Wno-unused-function", "-Wno-unreachable-code",
           *("-I" + d for d in capi_build.include_dirs()),
           *shlex.split(os.environ.get("CFLAGS", "")), c_file, "-shared",
           *shlex.split(os.environ.get("LDFLAGS", "")), "-o", path])
    result = capi_build.BuildResult(name, "c11", path, command, -1, "",
                                    module_name=name)
    capi_build.build([result])
    return capi_build.load_module(result)


@pytest.fixture(scope="module")
def cy(capi_build: ModuleType, tmp_path_factory: pytest.TempPathFactory
       ) -> Dict[str, ModuleType]:
    try:
        capi_build.compilers()
    except capi_build.CompilerNotFound as exc:
        pytest.skip(f"the Cython tests need a C compiler: {exc}")
    outdir = str(tmp_path_factory.mktemp("cython"))
    return {name: cythonize(capi_build, name, outdir)
            for name in ("consumer", "producer")}


def test_pxd_ships_in_the_installed_package() -> None:
    pxd = os.path.join(os.path.dirname(bufferext.__file__), "__init__.pxd")
    assert os.path.isfile(pxd)
    if editable_source() is None:   # an editable install is the source tree
        assert os.path.normpath(os.path.dirname(pxd)) != os.path.normpath(
            os.path.join(SOURCES, "..", "..", "Lib", "bufferext"))


def test_constants_agree_with_python(cy) -> None:
    consumer = cy["consumer"]
    assert consumer.DEVICE == BufferFlags.DEVICE == 0x10000
    assert consumer.REQUIRED == BufferFlags.REQUIRED == 0xFD
    assert consumer.LEGACY == 0x1FD
    assert consumer.ABI_VERSION == 4
    assert cy["producer"].DECLARED == (BufferFlags.FORMAT | BufferFlags.ND
                                       | BufferFlags.STRIDES
                                       | BufferFlags.DEVICE)


# ---- the Cython consumer ---------------------------------------------------

def test_consumer_reads_a_cpubuffer(cy) -> None:
    import numpy as np
    buf = bufferext.CPUBuffer((8,), "uint8")
    buf.copy_from_host(np.frombuffer(b"abcdefgh", np.uint8))
    before = sys.getrefcount(buf)
    got = cy["consumer"].acquire(buf)
    assert got["device"] is None and got["device_info"] is None
    assert got["flags"] & BufferFlags.DEVICE     # answered explicitly
    assert got["data"] == b"abcdefgh" and got["len"] == 8
    with bufferext.get_buffer(buf) as view:
        assert view.ptr == got["ptr"]
    cy["consumer"].acquire_many(buf, 1000)
    gc.collect()
    assert sys.getrefcount(buf) == before


def test_consumer_checks_and_supported_flags(cy) -> None:
    import numpy as np
    consumer = cy["consumer"]
    buf = bufferext.CPUBuffer((4,), np.float64)
    for flags in (0, BufferFlags.DEVICE, BufferFlags.FULL, BufferFlags.ND):
        assert bool(consumer.check_supports(buf, flags)) == \
            bufferext.check_buffer_supports(buf, flags)
    assert consumer.supported_flags(buf) == bufferext.supported_flags(buf)
    assert consumer.supported_flags(b"x") == 0x1FD
    assert consumer.check_supports(b"x", BufferFlags.DEVICE) == 0
    assert consumer.check_supports(object(), 0) == 0
    with pytest.raises(TypeError):
        consumer.supported_flags(object())


def test_consumer_gets_cpu_memory_from_a_plain_exporter(cy) -> None:
    got = cy["consumer"].acquire(bytearray(b"xyz"))
    assert got["flags"] == 0 and got["device"] is None
    assert got["data"] == b"xyz"
    with pytest.raises(BufferError, match="does not support"):
        # a contiguity request that the Cython producer does not declare
        # is refused before its getbuffer runs
        cy["consumer"].acquire(cy["producer"].Bytes(b"ab"),
                               BufferFlags.FULL_RO | BufferFlags.DEVICE
                               | BufferFlags.C_CONTIGUOUS)


def test_consumer_reads_a_device_producer(cy, capi_modules) -> None:
    """The device producer is the C-API test exporter's device double:
    host memory labelled "bufferext.cuda" / "bufferext.ve" with a real
    device_info struct (tests/capi/testcapi.c)."""
    capi = capi_modules["c11"]
    for device, key in (("cuda", "device"), ("ve", "node")):
        exporter = capi.ExporterFull(4, device="bufferext." + device)
        got = cy["consumer"].acquire(exporter)
        assert got["device"] == "bufferext." + device
        assert got["device_info"] is not None and key in got["device_info"]
        assert got["len"] == 16 and "data" not in got
        with bufferext.get_buffer(exporter) as view:
            assert view.device == got["device"]
            assert view.ptr == got["ptr"]
        assert exporter.exports == 0


# ---- the Cython producer ---------------------------------------------------

def test_producer_declares_its_flags(cy) -> None:
    Bytes = cy["producer"].Bytes
    b = Bytes(b"hello")
    assert Bytes.__buffer_supported_flags__ == cy["producer"].DECLARED
    assert bufferext.supported_flags(b) == cy["producer"].DECLARED
    assert bufferext.check_buffer_supports(b, BufferFlags.DEVICE)
    assert bufferext.check_buffer_supports(b, BufferFlags.STRIDED_RO)
    assert not bufferext.check_buffer_supports(b, BufferFlags.WRITABLE)
    assert not bufferext.check_buffer_supports(b, BufferFlags.C_CONTIGUOUS)


def test_producer_answers_device_requests_with_cpu_memory(cy) -> None:
    b = cy["producer"].Bytes(b"hello")
    with bufferext.get_buffer(b, BufferFlags.STRIDED_RO | BufferFlags.DEVICE
                              | BufferFlags.FORMAT) as view:
        assert view.device is None and view.device_info is None
        assert view.tobytes() == b"hello" and view.readonly
        assert view.shape == (5,) and view.format == "B"
        assert b.exports == 1
    assert b.exports == 0 and b.device_requests == 1
    # refused up front: WRITABLE is not declared, getbuffer never runs
    with pytest.raises(BufferError, match="WRITABLE"):
        bufferext.get_buffer(b, BufferFlags.WRITABLE | BufferFlags.DEVICE)
    assert b.device_requests == 1 and b.exports == 0


def test_producer_serves_plain_consumers(cy) -> None:
    b = cy["producer"].Bytes(b"abc")
    assert bytes(memoryview(b)) == b"abc"
    assert b.device_requests == 0 and b.exports == 0
    if sys.version_info >= (3, 12):
        # PEP 688: __buffer__ reaches the plain getbuffer (ext NULL), which
        # serves CPU memory as for a plain request (where CPython implements
        # the draft, its own wrapper refuses the extended request)
        if NATIVE_INTERPRETER:
            with pytest.raises(BufferError, match=NATIVE_DOOR_REFUSAL):
                b.__buffer__(BufferFlags.DEVICE)
        else:
            assert bytes(b.__buffer__(BufferFlags.DEVICE)) == b"abc"
        assert bytes(b.__buffer__(0)) == b"abc"
        assert b.device_requests == 0 and b.exports == 0


def test_cython_to_cython(cy) -> None:
    b = cy["producer"].Bytes(b"xy")
    got = cy["consumer"].acquire(
        b, BufferFlags.STRIDES | BufferFlags.FORMAT | BufferFlags.DEVICE)
    assert got["flags"] == BufferFlags.DEVICE and got["device"] is None
    assert got["data"] == b"xy" and got["readonly"] == 1
    before = sys.getrefcount(b)
    cy["consumer"].acquire_many(b, 1000)
    assert sys.getrefcount(b) == before and b.exports == 0
    assert b.device_requests == 1001
