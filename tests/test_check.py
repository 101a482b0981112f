"""`python -m bufferext check`: the conformance report, on producers that
conform and on test doubles that break the rules in known ways."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import bufferext
from bufferext import BufferFlags as F
from bufferext._check import (check, check_class, flag_names, format_report,
                              legacy_requests, load_target)
from _helpers import ATTRIBUTE_DECLARES, BRIDGED_ONLY, NEEDS_ATTRIBUTE


def levels(report: Any, level: str) -> list:
    return [f for f in report.findings if f.level == level]


def test_every_distinct_legacy_request_is_probed() -> None:
    requests = legacy_requests()
    assert len(requests) == len(set(requests)) == 28
    assert 0 in requests and int(bufferext.BufferFlags.FULL) in requests


@pytest.mark.parametrize("make", [
    lambda: bufferext.CPUBuffer((3, 4), "float32"),
    lambda: bufferext.CPUBuffer(5, "int8", readonly=True),
    lambda: bufferext.as_buffer(np.arange(12.0).reshape(3, 4).T,
                                readonly=True),
    lambda: b"bytes", lambda: bytearray(4), lambda: np.arange(6.0)[::2],
])
def test_conforming_producers(make: Any) -> None:
    report = check(make())
    assert report.conformant, report.findings
    assert report.protocols["buffer"] is True


@pytest.mark.parametrize("make, what", BRIDGED_ONLY)
def test_a_bridged_object_is_pointed_at_as_buffer(make: Any, what: str) -> None:
    obj = make()
    report = check(obj)
    assert not report.conformant
    hints = [f.message for f in report.findings if f.subject == "as_buffer"]
    assert hints == [f"it speaks {what}: bufferext.as_buffer(obj) bridges it "
                     "into an extended buffer (check "
                     "'bufferext.as_buffer(...)' instead)"]
    assert check(bufferext.as_buffer(obj)).conformant   # the advice works
    assert not [f for f in check(object()).findings if f.subject == "as_buffer"]


def test_protocols_are_listed() -> None:
    report = check(bufferext.CPUBuffer(2))
    p = report.protocols
    assert p["dlpack"] and p["dlpack_device"] == (1, 0)
    assert p["dlpack_c_exchange_api"] and p["array_interface"] == 3
    assert p["declared_supported_flags"] == int(bufferext.BufferFlags.LEGACY
                                                | bufferext.BufferFlags.DEVICE)


def test_device_exporter_that_refuses_plain_requests_conforms(
        c99: ModuleType) -> None:
    report = check(c99.ExporterFull(4, device="bufferext.cuda"))
    assert report.conformant, report.findings
    assert any(f.subject == "device safety" and f.level == "ok"
               for f in report.findings)


def test_cpu_buffer_claiming_a_cuda_dlpack_device_is_caught() -> None:
    class Confused:
        __buffer_supported_flags__ = 0

        def __init__(self) -> None:
            self.data = bytearray(8)

        def __buffer__(self, flags: int) -> memoryview:
            return memoryview(self.data)

        def __dlpack_device__(self) -> tuple:
            return (2, 0)

    if sys.version_info < (3, 12):
        pytest.skip("Python classes export buffers from 3.12 (PEP 688)")
    report = check(Confused())
    assert not report.conformant
    assert any(f.subject == "device safety" for f in levels(report,
                                                            "violation"))


@pytest.mark.parametrize("liar", ["unasked", "extra_flags", "device_noflag"])
def test_exporters_writing_the_extension_wrongly_are_caught(
        c99: ModuleType, liar: str) -> None:
    report = check(c99.ExporterFull(4, liar=liar))
    assert not report.conformant, report.findings


def test_undeclared_device_support_is_a_violation(c99: ModuleType) -> None:
    # ExporterNoDevice declares a mask without PyBUF_DEVICE
    exporter = c99.ExporterNoDevice(4, device="bufferext.cuda")
    report = check(exporter)
    assert any("does not declare DEVICE" in f.message
               for f in levels(report, "violation"))


def test_device_declared_without_a_typed_entry_is_a_warning(
        c99: ModuleType) -> None:
    # ExporterNoEntry declares PyBUF_DEVICE with BufferExt_SetSupportedFlags
    report = check(c99.ExporterNoEntry(4))
    assert report.protocols["typed_entry"] is False
    assert any("publishes no typed entry" in f.message
               for f in levels(report, "warning"))
    full = check(c99.ExporterFull(4))
    assert full.protocols["typed_entry"] is True
    assert not any(f.subject == "typed entry" for f in full.findings)


def test_load_target_calls_factories_and_rejects_bad_specs(tmp_path,
                                                           monkeypatch) -> None:
    (tmp_path / "factories.py").write_text(
        "import bufferext\n"
        "def make():\n    return bufferext.CPUBuffer(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    # a factory is called only when asked (before, any callable was)
    made = load_target("factories:make", call=True)
    assert isinstance(made, bufferext.CPUBuffer) and made.shape == (3,)
    import factories
    assert load_target("factories:make") is factories.make
    with pytest.raises(TypeError, match="not callable"):
        load_target("bufferext:__version__", call=True)
    with pytest.raises(ValueError, match="MODULE:ATTR or a Python expression"):
        load_target("numpy:")
    obj = load_target("bufferext._check:Finding.__name__")
    assert obj == "Finding"
    # an expression: free names are modules, imported on first use
    made = load_target('bufferext.CPUBuffer((4,), "f4")')
    assert made.shape == (4,) and made.format == "f"
    # builtins stay builtins (a module named like one is not imported)
    made = load_target("bytearray(b'abc')")
    assert type(made) is bytearray and made == b"abc"
    assert load_target("memoryview(bytes(range(3))).tolist()") == [0, 1, 2]
    with pytest.raises(NameError, match="no_such_module_xyz"):
        load_target("no_such_module_xyz.thing")


def test_import_alias_gets_a_hint() -> None:
    # a newcomer writes np.zeros(3): the names are module names
    with pytest.raises(NameError) as info:
        load_target("np.zeros(3)")
    assert str(info.value) == ("name 'np' is not defined (nor a module); "
                               "write 'numpy': names are module names")
    with pytest.raises(NameError) as info:
        load_target("zz_not_a_module.zeros(3)")
    assert "write" not in str(info.value)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bufferext", "check", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_reports_and_exits_0_for_a_conforming_producer(tmp_path) -> None:
    (tmp_path / "producers.py").write_text(
        "import bufferext\n"
        "def cpu():\n    return bufferext.CPUBuffer((2, 2), 'int32')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "bufferext", "check", "producers:cpu",
         "--call"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(tmp_path), os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 0, proc.stderr
    assert "result: conformant" in proc.stdout
    assert "[ok] extended request: CPU memory" in proc.stdout


def test_cli_json_and_load_errors() -> None:
    proc = run_cli('bufferext.CPUBuffer((4,), "f4")', "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["conformant"] is True and report["type_name"] == "CPUBuffer"
    proc = run_cli("no_such_module_xyz:thing")
    assert proc.returncode == 2 and "cannot load" in proc.stderr


@pytest.mark.parametrize("target", ["os:path",
                                    "bufferext._check:Finding.__name__"])
def test_cli_non_exporter_is_not_conformant(target: str) -> None:
    proc = run_cli(target)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "is not a buffer exporter" in proc.stderr
    assert "[violation] buffer: not a buffer exporter" in proc.stdout
    assert "result: NOT conformant" in proc.stdout


def test_cli_a_producer_class_without_call_checks_its_declaration() -> None:
    """check bufferext:CPUBuffer (no --call) checks what the class says of
    its instances, making none: conformant, exit 0, and how to check one
    (it said "NOT conformant" and exited 1: a class is no exporter).  A
    class whose instances export no buffer is not conformant."""
    proc = run_cli("bufferext:CPUBuffer")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[ok] supported flags: declared LEGACY|DEVICE (0x101fd)" in proc.stdout
    assert "(--call checks what calling it makes, or give an expression that " \
           "makes one)" in proc.stdout
    assert proc.stdout.endswith("result: conformant (the class's declaration; no "
                                "instance was checked)\n")
    assert proc.stderr == ""
    proc = run_cli("builtins:dict", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert (report["scope"], report["conformant"]) == ("class", False)
    assert report["findings"][0]["message"] == (
        "its instances are not buffer exporters (the class dict has no buffer slot)")
    assert "its instances are not buffer exporters" in proc.stderr


@pytest.mark.parametrize("declared", [0, -1, 0x1fd, int(F.LEGACY | F.DEVICE), 2**31 - 1,
                                      -2, 2**31, True, "0x1fd", 1.0, None])
def test_a_class_declaration_is_judged_as_its_instances_are(declared: Any) -> None:
    """The class report reads __buffer_supported_flags__ as the header
    does for an instance: valid exactly where supported_flags(instance)
    answers, with the same effective mask and the same words."""
    Declares = type("Declares", (bytearray,), {"__buffer_supported_flags__": declared})
    report = check(Declares)
    assert report.scope == "class" and report.protocols["buffer"] is True
    try:
        mask = bufferext.supported_flags(Declares(4))
    except TypeError as exc:
        assert not report.conformant
        violation = levels(report, "violation")[0]
        assert violation.subject == "supported flags" and str(exc) in violation.message
    else:
        assert report.conformant, report.findings
        assert levels(report, "ok")[0].message.endswith(
            f"effective mask {'|'.join(mask.names())} ({int(mask):#x})")


@pytest.mark.parametrize("target, error", [
    ("sys:exit", "SystemExit"), ("sys.exit(0)", "SystemExit"),
    # raised by the expression itself: _thread.interrupt_main() depends on
    # the SIGINT disposition the child inherits (ignored under a
    # backgrounded CI shell)
    ("(_ for _ in ()).throw(builtins.KeyboardInterrupt)",
     "KeyboardInterrupt")])
def test_cli_target_that_exits_is_not_a_success(target: str,
                                                error: str) -> None:
    args = (target, "--call") if ":" in target else (target,)
    proc = run_cli(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"cannot load {target!r}: {error}" in proc.stderr


def test_device_fields_without_the_flag_are_a_violation(c99) -> None:
    # before: the refusal of the extended request read as "info" and the
    # exporter was reported conformant
    exporter = c99.ExporterFull(device=c99.DEVICE_CUDA, liar="device_noflag")
    report = check(exporter)
    assert not report.conformant
    assert any("without setting PyBUF_DEVICE" in f.message
               for f in levels(report, "violation"))


needs_buffer_dunder = pytest.mark.skipif(
    sys.version_info < (3, 12), reason="__buffer__ (PEP 688) needs Python 3.12")


def test_a_narrow_declaration_does_not_hide_a_device_leak(c99) -> None:
    # a type that declares SIMPLE|DEVICE refuses FULL_RO|DEVICE: check
    # looked no further, never asked the plain requests, and called an
    # exporter that hands its device memory to them conformant
    narrow = c99.make_exporter_type("NarrowLeak", int(F.DEVICE))
    report = check(narrow(4, device=c99.DEVICE_CUDA, liar="device_to_plain"))
    assert not report.conformant
    assert ("violation", "device safety",
            "device memory handed to plain requests: SIMPLE") in findings(report)
    honest = check(narrow(4, device=c99.DEVICE_CUDA))
    assert honest.conformant and ("ok", "extended request",
                                  "memory on device 'bufferext.cuda'") in \
        findings(honest)


@needs_buffer_dunder
def test_a_buffer_method_returning_no_memoryview_is_a_violation() -> None:
    # CPython's TypeError for it was counted as a refusal: "conformant"
    class Bytes:
        def __buffer__(self, flags: int) -> Any:
            return b"abcd"

    report = check(Bytes())
    assert not report.conformant
    assert any("__buffer__ returned non-memoryview object" in f.message or
               "__buffer__() must return a memoryview" in f.message  # 3.15
               for f in levels(report, "violation")), findings(report)


@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
def test_foreign_values_in_the_report_run_no_code_when_rendered() -> None:
    # the report kept the declaration object itself: copying it (as_dict)
    # or its repr (the text) raised outside the guarded check
    class ReprRaises:
        def __repr__(self) -> str:
            raise ZeroDivisionError("repr")

    for value, shown in ((staticmethod(len), "<staticmethod"),
                         (ReprRaises(), "<a 'ReprRaises' whose repr raised "
                                        "ZeroDivisionError>")):
        cls = type("D", (bytearray,), {"__buffer_supported_flags__": value})
        report = check(cls(4))
        assert report.protocols["declared_supported_flags"].startswith(shown)
        json.dumps(report.as_dict())
        assert "declared_supported_flags: " + shown in format_report(report)


def test_a_malformed_dlpack_device_is_a_violation() -> None:
    cls = type("E", (bytearray,), {"__dlpack_device__": lambda self: ()})
    report = check(cls(4))
    assert ("violation", "dlpack", "__dlpack_device__() returned (), not a "
            "tuple (device_type, device_id) of ints") in findings(report)
    assert report.protocols["dlpack_device"] is None


# ---- exact reports: every protocol key and every finding -----------------
# (what a mutation run showed unguarded: reports could lose findings, keys
# or words and every test still passed)

def findings(report: Any) -> list:
    return [(f.level, f.subject, f.message) for f in report.findings]


NO_PROTOCOLS = {"arrow_c_device_array": False, "arrow_c_array": False,
                "dlpack": False, "dlpack_device": None,
                "dlpack_c_exchange_api": False, "cuda_array_interface": None,
                "ve_array_interface": None, "array_interface": None}


def test_report_of_cpubuffer() -> None:
    report = check(bufferext.CPUBuffer((2, 2), "i4"), "cpu")
    assert (report.target, report.type_name) == ("cpu", "CPUBuffer")
    assert report.protocols == {
        "buffer": True, "declared_supported_flags": 0x101FD,
        "arrow_c_device_array": True, "arrow_c_array": True, "dlpack": True,
        "dlpack_device": (1, 0), "dlpack_c_exchange_api": True,
        "cuda_array_interface": None, "ve_array_interface": None,
        "array_interface": 3, "typed_entry": True}
    # 28 requests; the 4 that ask F_CONTIGUOUS of a 2x2 C-ordered block
    # are refused
    assert findings(report) == [
        ("ok", "extended request",
         "CPU memory, answered explicitly (flags has DEVICE)"),
        ("info", "element type", "format 'i': int32, 4-byte items"),
        ("info", "supported flags", "effective mask LEGACY|DEVICE (0x101fd)"),
        ("ok", "requests", "24 declared requests answered, 4 refused")]
    assert report.conformant and report.as_dict()["conformant"] is True


def test_report_of_a_legacy_exporter() -> None:
    report = check(b"ab")
    assert report.protocols == {"buffer": True,
                                "declared_supported_flags": None,
                                "typed_entry": False, **NO_PROTOCOLS}
    # bytes is read-only: the 14 WRITABLE requests are refused
    assert findings(report) == [
        ("info", "extended request",
         "CPU memory; PyBUF_DEVICE ignored (a legacy exporter)"),
        ("info", "element type", "format 'B': uint8, 1-byte items"),
        ("info", "supported flags", "effective mask LEGACY (0x1fd)"),
        ("ok", "requests", "14 declared requests answered, 14 refused")]


def test_report_of_device_memory(c99: Any) -> None:
    report = check(c99.ExporterFull(device=c99.DEVICE_CUDA))
    assert report.protocols["declared_supported_flags"] == 0x101FD
    assert findings(report) == [
        ("ok", "extended request", "memory on device 'bufferext.cuda'"),
        ("info", "element type", "format 'i': int32, 4-byte items"),
        ("ok", "device safety", "all 28 plain requests refused"),
        ("info", "supported flags", "effective mask LEGACY|DEVICE (0x101fd)"),
        ("ok", "requests", "28 declared requests answered, 0 refused")]
    assert report.conformant


def test_report_of_partial_declarations(c99: Any) -> None:
    report = check(c99.ExporterNoDevice())
    # FORMAT, ND and STRIDES only: the requests made of those bits and the
    # soft INDIRECT bit are checked, 8 of them; DEVICE, not declared, is not
    # passed on (the exporter would have answered it)
    assert findings(report) == [
        ("info", "extended request",
         "CPU memory; PyBUF_DEVICE ignored (a legacy exporter)"),
        ("info", "element type", "format 'i': int32, 4-byte items"),
        ("info", "supported flags", "effective mask RECORDS_RO (0x1c); "
         "not declared: WRITABLE, C_CONTIGUOUS, F_CONTIGUOUS, ANY_CONTIGUOUS"),
        ("ok", "requests", "8 declared requests answered, 0 refused")]
    # a narrow declaration: the widest request it answers says where its
    # memory is (CPU memory here, a legacy exporter's answer)
    report = check(c99.ExporterSimpleOnly())
    assert findings(report)[1:] == [
        ("info", "extended request",
         "CPU memory; PyBUF_DEVICE ignored (a legacy exporter)"),
        ("info", "element type", "format 'B': uint8, 1-byte items"),
        ("info", "supported flags", "effective mask SIMPLE (0x0); "
         "not declared: WRITABLE, FORMAT, ND, STRIDES, C_CONTIGUOUS, "
         "F_CONTIGUOUS, ANY_CONTIGUOUS, INDIRECT"),
        ("ok", "requests", "1 declared requests answered, 0 refused")]
    assert findings(report)[0][:2] == ("info", "extended request")
    assert findings(report)[0][2].startswith("FULL_RO|DEVICE refused: ")
    assert findings(report)[0][2].endswith("; SIMPLE|DEVICE answered")


def test_report_of_a_refusal_that_is_not_a_buffer_error() -> None:
    report = check(np.arange(6.0)[::2])
    refusals = [f for f in findings(report) if "refused with" in f[2]]
    assert len(refusals) == 20 and refusals[0] == (
        "info", "SIMPLE", "refused with ValueError (BufferError is the "
        "standard): ndarray is not C-contiguous")
    assert findings(report)[-1] == ("ok", "requests",
                                    "8 declared requests answered, 20 "
                                    "refused")


@pytest.mark.parametrize("config, problem", [
    # get_buffer's gate refuses this one before check reads the fields
    (dict(readonly=True), "exported an invalid buffer: readonly = 1 "
                          "although PyBUF_WRITABLE was requested"),
    (dict(format=None, itemsize=1, len=8, shape=(8,)),
     "FORMAT answered without a format"),
    # ... and each request's order (C without STRIDES, *_CONTIGUOUS)
    (dict(strides=(16,), len=32, shape=(4,), block_size=64),
     "shape = (4,), strides = (16,) are not C-contiguous, although the "
     "request was without PyBUF_STRIDES"),
    (dict(strides=(16,), len=32, shape=(4,), block_size=64),
     "are not C-contiguous, although the request was PyBUF_C_CONTIGUOUS"),
    (dict(strides=(16,), len=32, shape=(4,), block_size=64),
     "are not F-contiguous, although the request was PyBUF_F_CONTIGUOUS"),
    (dict(strides=(16,), len=32, shape=(4,), block_size=64),
     "are not C- or F-contiguous, although the request was "
     "PyBUF_ANY_CONTIGUOUS"),
])
def test_lies_about_declared_requests_are_violations(
        c99: Any, config: dict, problem: str) -> None:
    # Configurable answers every request with the same fields, whatever
    # was asked, while declaring every legacy flag and DEVICE
    base = dict(block_size=32, len=32, itemsize=8, ndim=1, format="d",
                shape=(4,))
    report = check(c99.Configurable(**{**base, **config}))
    assert not report.conformant
    assert any(f[0] == "violation" and f[2].endswith(problem)
               for f in findings(report)), findings(report)


def test_strides_missing_is_a_violation_of_each_strided_request(
        c99: Any) -> None:
    report = check(c99.Configurable(32, 32, 8, 1, "d", shape=(4,),
                                    strides=None))
    subjects = {f[1] for f in findings(report)
                if f == ("violation", f[1], "STRIDES answered without "
                                            "strides")}
    assert subjects == {flag_names(r) for r in legacy_requests()
                        if r & bufferext.BufferFlags.STRIDES ==
                        bufferext.BufferFlags.STRIDES}
    assert "ND|STRIDES" in subjects and "ND" not in subjects


@pytest.mark.skipif(sys.version_info < (3, 12),
                    reason="Python classes export buffers from 3.12")
@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
def test_invalid_declaration_is_a_violation() -> None:
    class Declared:
        __buffer_supported_flags__ = "abc"

        def __buffer__(self, flags: int) -> memoryview:
            return memoryview(b"ab")

    report = check(Declared())
    assert not report.conformant
    assert ("violation", "supported flags",
            "Declared.__buffer_supported_flags__ = 'abc' is invalid: "
            "expected an int, -1 or a flag mask >= 0") in findings(report)
    # nothing is probed against a declaration that cannot be read
    assert not any(f[1] == "requests" for f in findings(report))


def test_gate_refusals_are_violations(c99: Any) -> None:
    report = check(c99.Configurable(64, 8, 8, 65, "d", shape=(1,) * 65))
    violations = levels(report, "violation")
    assert violations and all("exported an invalid buffer: ndim = 65"
                              in f.message for f in violations)


def test_report_text_shows_flags_as_names_and_hex() -> None:
    from bufferext._check import format_report
    text = format_report(check(bufferext.CPUBuffer((2, 2), "i4"), "cpu"))
    assert text.splitlines()[:4] == [
        "cpu: CPUBuffer", "protocols:", "  buffer: True",
        "  declared_supported_flags: LEGACY|DEVICE (0x101fd)"]
    assert ("  [info] supported flags: effective mask LEGACY|DEVICE "
            "(0x101fd)") in text.splitlines()


def test_declared_flags_text() -> None:
    from bufferext._check import _plain, declared_text, mask_text
    assert mask_text(0x1011D) == "FULL|DEVICE (0x1011d)"
    assert mask_text(0) == "SIMPLE (0x0)"
    assert declared_text(0x101FD) == "LEGACY|DEVICE (0x101fd)"
    assert declared_text(0) == "0 (the default: every legacy flag)"
    assert declared_text(-1) == "-1 (SIMPLE only)"
    assert declared_text(-5) == "-5"
    # a value the report keeps (_plain: anything but an int as its repr)
    assert declared_text(_plain("abc")) == "'abc'"
    assert declared_text(_plain(True)) == "True"


def test_flag_names_of_compound_requests() -> None:
    from bufferext._check import flag_names
    F = bufferext.BufferFlags
    assert flag_names(0) == "SIMPLE"
    assert flag_names(int(F.WRITABLE | F.FORMAT | F.DEVICE)) == \
        "WRITABLE|FORMAT|DEVICE"
    assert flag_names(int(F.STRIDES)) == "ND|STRIDES"
    assert flag_names(int(F.FULL)) == "WRITABLE|FORMAT|ND|INDIRECT"
    assert flag_names(int(F.ANY_CONTIGUOUS)) == "ND|ANY_CONTIGUOUS"
    assert flag_names(int(F.F_CONTIGUOUS | F.FORMAT)) == \
        "FORMAT|ND|F_CONTIGUOUS"


class _DLPackDevice(np.ndarray):
    """A CPU array whose __dlpack_device__ says what the test sets."""

    device = (1, 0)

    def __dlpack_device__(self) -> tuple:
        return self.device


def _on(device: tuple) -> Any:
    x = np.zeros(4).view(_DLPackDevice)
    x.device = device
    return x


def test_plain_requests_answered_for_device_memory_are_a_leak() -> None:
    # __dlpack_device__ says CUDA; the buffer answers every plain request
    report = check(_on((2, 0)))
    safety = [f for f in findings(report) if f[1] == "device safety"]
    first = ", ".join(flag_names(r) for r in legacy_requests()[:6])
    assert safety == [("violation", "device safety",
                       "device memory handed to plain requests: " + first +
                       " ...")]
    assert not report.conformant


@pytest.mark.parametrize("device_type", [1, 3, 13])
def test_host_visible_dlpack_devices_are_not_device_memory(
        device_type: int) -> None:
    # kDLCPU, kDLCUDAHost and kDLCUDAManaged: CPU code may read them
    report = check(_on((device_type, 0)))
    assert not any(f[1] == "device safety" for f in findings(report))


@pytest.mark.parametrize("liar, device", [("unasked_cpu", None),
                                          ("unasked", "liar.unasked")])
def test_extension_written_for_each_plain_request_is_a_violation(
        c99: Any, liar: str, device: Any) -> None:
    # answers FULL_RO|DEVICE (CPU memory, or a device), then writes the
    # extension for every plain request too: one violation per request
    report = check(c99.ExporterFull(liar=liar))
    assert findings(report)[0][:2] == ("ok", "extended request")
    text = ("testcapi_c99.ExporterFull wrote the buffer extension although "
            "no extended flag was requested")
    violations = [f for f in findings(report) if f[0] == "violation"]
    assert violations[:len(legacy_requests())] == [
        ("violation", flag_names(r), text) for r in legacy_requests()]
    assert not report.conformant
    if device is None:
        # and the declared requests, probed again, say so once more
        assert findings(report)[-1][:2] == ("info", "requests")


def test_non_exporter_report_word_for_word() -> None:
    report = check(object())
    assert findings(report) == [
        ("violation", "buffer",
         "not a buffer exporter (a 'object' has no buffer slot)")]
    assert set(report.protocols) == {
        "buffer", "declared_supported_flags", "arrow_c_device_array",
        "arrow_c_array", "dlpack", "dlpack_device",
        "dlpack_c_exchange_api", "cuda_array_interface",
        "ve_array_interface", "array_interface", "typed_entry"}
    assert report.protocols["buffer"] is False


class _Raising(np.ndarray):
    """A CPU array whose other protocols raise when read."""

    def __dlpack_device__(self) -> tuple:
        raise ValueError("no device")

    @property
    def __cuda_array_interface__(self) -> dict:
        raise RuntimeError("boom")


def test_protocols_that_raise_are_reported_not_raised() -> None:
    report = check(np.zeros(4).view(_Raising))
    got = findings(report)
    assert ("violation", "dlpack",
            "__dlpack_device__() raised ValueError('no device')") in got
    assert ("info", "__cuda_array_interface__",
            "reading it raised RuntimeError('boom')") in got
    p = report.protocols
    assert p["dlpack_device"] is None and p["cuda_array_interface"] is None
    assert p["array_interface"] == 3 and p["ve_array_interface"] is None


@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
def test_declaration_is_read_from_the_class() -> None:
    class Declared(np.ndarray):
        __buffer_supported_flags__ = int(bufferext.BufferFlags.LEGACY)

    class Inherits(Declared):
        pass

    for cls in (Declared, Inherits):
        report = check(np.zeros(4).view(cls))
        assert report.protocols["declared_supported_flags"] == \
            int(bufferext.BufferFlags.LEGACY)
    assert check(np.zeros(4)).protocols["declared_supported_flags"] is None


def test_undeclared_device_exporter_word_for_word(c99: Any) -> None:
    # ExporterNoDevice declares 0x1c (SIMPLE, FORMAT, ND, STRIDES)
    report = check(c99.ExporterNoDevice(4, device="bufferext.cuda"))
    assert findings(report)[-1] == (
        "violation", "supported flags",
        "exports device memory but does not declare DEVICE "
        "(declared RECORDS_RO (0x1c))")



class _RaisesInGetbuffer:
    """An exporter whose every buffer request raises ``exc``."""

    exc: BaseException = RuntimeError("boom")

    def __buffer__(self, flags: int) -> memoryview:
        raise self.exc


@needs_buffer_dunder
def test_exporter_raising_in_getbuffer_is_reported_not_raised() -> None:
    report = check(_RaisesInGetbuffer())
    assert not report.conformant
    assert findings(report) == [
        ("violation", "extended request",
         "FULL_RO|DEVICE: the exporter raised RuntimeError: boom (an exporter "
         "answers a request or refuses it with BufferError)")]


@needs_buffer_dunder
def test_exporter_raising_only_for_some_requests_is_a_violation_of_each() -> None:
    class WritableBoom:
        def __buffer__(self, flags: int) -> memoryview:
            if flags & bufferext.BufferFlags.WRITABLE:
                raise KeyError("no writer")
            return memoryview(b"abcd")

    report = check(WritableBoom())
    assert not report.conformant
    # each of the 14 writable requests, in the plain and the declared probes
    writable = {flag_names(r) for r in legacy_requests()
                if r & bufferext.BufferFlags.WRITABLE}
    raised = [f for f in findings(report) if f[0] == "violation"]
    assert len(writable) == 14 and {f[1] for f in raised} == writable
    assert {f[2] for f in raised} == {
        "the exporter raised KeyError: 'no writer' (an exporter answers a "
        "request or refuses it with BufferError)"}


@needs_buffer_dunder
def test_exporter_refusing_with_buffer_error_is_reported_as_refusals() -> None:
    class Refuses(_RaisesInGetbuffer):
        exc = BufferError("not now")

    report = check(Refuses())
    assert report.conformant            # refusing every request is allowed
    assert findings(report)[0] == ("info", "extended request",
                                   "FULL_RO|DEVICE refused: not now (and "
                                   "each narrower request with DEVICE)")
    assert findings(report)[-1] == ("ok", "requests",
                                    "0 declared requests answered, 28 refused")


@needs_buffer_dunder
def test_cli_reports_an_exporter_raising_in_getbuffer(tmp_path) -> None:
    (tmp_path / "boom_exporter.py").write_text(
        "class Boom:\n"
        "    def __buffer__(self, flags):\n"
        "        raise RuntimeError('boom')\n"
        "obj = Boom()\n")
    proc = subprocess.run(
        [sys.executable, "-m", "bufferext", "check", "boom_exporter:obj"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(tmp_path), os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert ("[violation] extended request: FULL_RO|DEVICE: the exporter raised "
            "RuntimeError: boom") in proc.stdout


@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
def test_a_declared_device_without_an_entry_is_warned() -> None:
    """A naive exporter (pybind11's def_buffer, here bytearray's) whose type
    declares DEVICE by hand has no typed entry, so no extended request
    reaches it: conformant, but the report says so (it was called
    conformant silently)."""
    class Naive(bytearray):
        __buffer_supported_flags__ = int(F.LEGACY | F.DEVICE)

    report = check(Naive(8))
    assert report.conformant
    warned = levels(report, "warning")
    assert [f.subject for f in warned] == ["typed entry"], report.findings
    assert "declares DEVICE but publishes no typed entry" in warned[0].message
    assert "[warning] typed entry: its type declares DEVICE" in \
        format_report(report)
    # declared without DEVICE, the same answer is only a note
    assert not levels(check(bytearray(8)), "warning")


class Plain(bytearray):
    """An exporter class that declares nothing."""


class DLPackOnly:
    """A class whose instances speak DLPack and no buffer protocol."""

    def __dlpack__(self, **kwargs: Any) -> Any:
        raise AssertionError("never called")


def test_the_report_of_a_class() -> None:
    """A class's report as printed: its protocols, its declaration (the
    default where it makes none) and how to check an instance; a class
    whose instances export nothing, but speak DLPack, gets as_buffer's
    hint."""
    report = check(Plain)
    assert (report.target, report.type_name, report.scope) == ("Plain", "class Plain",
                                                               "class")
    assert check_class(Plain) == report
    assert report.protocols["declared_supported_flags"] is None
    assert format_report(report).splitlines()[:4] == [
        "Plain: class Plain", "protocols:", "  buffer: True",
        "  declared_supported_flags: None"]
    assert format_report(report).splitlines()[-4:-3] == ["findings:"]
    assert format_report(report).splitlines()[-3:] == [
        "  [ok] supported flags: declared 0 (the default: every legacy flag): "
        "effective mask LEGACY (0x1fd)",
        "  [info] target: Plain is a class: its declaration is checked; how its "
        "instances answer needs one (--call checks what calling it makes, or give "
        "an expression that makes one)",
        "result: conformant (the class's declaration; no instance was checked)"]

    report = check(DLPackOnly, "mod:DLPackOnly")
    assert report.target == "mod:DLPackOnly" and not report.conformant
    assert [(f.level, f.subject) for f in report.findings] == [
        ("violation", "buffer"), ("info", "as_buffer")]
    assert report.findings[1].message.startswith("it speaks DLPack (__dlpack__): ")
    assert format_report(report).endswith(
        "result: NOT conformant (the class's declaration; no instance was checked)\n")
    assert format_report(check(bytearray(2))).endswith("\nresult: conformant\n")


def test_a_class_target_is_its_declaration_and_calls_nothing() -> None:
    """check bufferext:CPUBuffer (no --call) checks the class: what it
    declares, no instance (the unbound __dlpack_device__ was once called
    and reported as the class's fault)."""
    report = check(bufferext.CPUBuffer, "bufferext:CPUBuffer")
    assert report.conformant and report.scope == "class", report.findings
    assert report.type_name == "class CPUBuffer"
    assert report.protocols["dlpack_device"] is None
    assert any("CPUBuffer is a class: its declaration is checked" in f.message
               for f in levels(report, "info"))
    assert check(bufferext.CPUBuffer(3)).protocols["dlpack_device"] == (1, 0)
