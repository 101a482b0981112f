"""Extensions built against different ABI versions of bufferext.h, in one
process (docs/capi.rst, "ABI versions").

ABI 3 proved an extended view with a mark in the calling thread's state;
ABI 4 proves it with the C type of the call (the typed entry) and marks
nothing.  Neither trusts the other's proof, and that fails safe both ways:
a consumer of one version gets CPU memory from an exporter of the other as
for a plain request (PyBUF_DEVICE ignored: ``flags`` without it) and a
BufferError for device memory, never a view written past or device memory
taken for host memory.  Within one version the extended request works.

tests/capi/abimix.c is one exporter and one consumer written for both
headers; it is built against the header of ABI 3 as released (kept in
tests/abi3/) and against the installed one.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any, Dict, Tuple

import pytest

import bufferext
from bufferext import BufferFlags

DEVICE = int(BufferFlags.DEVICE)
REQUEST = int(BufferFlags.FULL_RO | BufferFlags.DEVICE)
CUDA = "bufferext.cuda"


@pytest.fixture(scope="module")
def mix(capi_build: ModuleType, tmp_path_factory: pytest.TempPathFactory
        ) -> Dict[int, ModuleType]:
    """{3: the ABI 3 build, 4: the installed header's build}."""
    try:
        capi_build.compilers()
    except capi_build.CompilerNotFound as exc:
        pytest.skip(f"needs a C compiler: {exc}")
    outdir = str(tmp_path_factory.mktemp("abimix"))
    builds = capi_build.build([capi_build.abimix_command(abi, outdir)
                               for abi in (3, 4)])
    return {abi: capi_build.load_module(result)
            for abi, result in zip((3, 4), builds)}


def test_the_builds_are_of_both_versions(mix: Dict[int, ModuleType]) -> None:
    assert mix[3].ABI_VERSION == 3
    assert mix[4].ABI_VERSION == 4 == bufferext._bufferext.ABI_VERSION


def _outcome(consumer: ModuleType, exporter: Any) -> Tuple[Any, ...]:
    try:
        return ("served",) + consumer.get(exporter, REQUEST)
    except BufferError as exc:
        return ("refused", str(exc))


@pytest.mark.parametrize("consumer_abi", [3, 4])
@pytest.mark.parametrize("exporter_abi", [3, 4])
def test_cpu_memory(mix: Dict[int, ModuleType], consumer_abi: int,
                    exporter_abi: int) -> None:
    exporter = mix[exporter_abi].Mix()
    got = _outcome(mix[consumer_abi], exporter)
    if consumer_abi == exporter_abi:       # answered explicitly
        assert got == ("served", None, DEVICE)
    else:                                  # as a plain request
        assert got == ("served", None, 0)
    assert exporter.exports == 0


@pytest.mark.parametrize("consumer_abi", [3, 4])
@pytest.mark.parametrize("exporter_abi", [3, 4])
def test_device_memory(mix: Dict[int, ModuleType], consumer_abi: int,
                       exporter_abi: int) -> None:
    exporter = mix[exporter_abi].Mix(device=True)
    got = _outcome(mix[consumer_abi], exporter)
    if consumer_abi == exporter_abi:
        assert got == ("served", CUDA, DEVICE)
    else:
        assert got[0] == "refused" and "bufferext.cuda" in got[1], got
    assert exporter.exports == 0


@pytest.mark.parametrize("exporter_abi", [3, 4])
def test_bufferext_itself_is_an_abi4_consumer(mix: Dict[int, ModuleType],
                                              exporter_abi: int) -> None:
    cpu, device = mix[exporter_abi].Mix(), mix[exporter_abi].Mix(device=True)
    assert bufferext.check_buffer_supports(cpu, DEVICE) is (exporter_abi == 4)
    with bufferext.get_buffer(cpu) as view:
        assert view.device is None and view.nbytes == 16
        assert bool(view.flags & DEVICE) is (exporter_abi == 4)
    if exporter_abi == 4:
        with bufferext.get_buffer(device) as view:
            assert view.device == CUDA
    else:
        with pytest.raises(BufferError, match="request PyBUF_DEVICE"):
            bufferext.get_buffer(device)
    assert cpu.exports == device.exports == 0


@pytest.mark.parametrize("exporter_abi", [3, 4])
def test_plain_consumers_of_either(mix: Dict[int, ModuleType],
                                   exporter_abi: int) -> None:
    cpu, device = mix[exporter_abi].Mix(), mix[exporter_abi].Mix(device=True)
    with memoryview(cpu) as m:
        assert m.nbytes == 16
    with pytest.raises(BufferError, match="bufferext.cuda"):
        memoryview(device)
    if sys.version_info >= (3, 12):        # ABI 3's guard says it sooner
        with pytest.raises(BufferError, match="Mix"):
            device.__buffer__(REQUEST)
    assert cpu.exports == device.exports == 0
