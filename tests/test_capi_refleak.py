"""Reference counts and exports do not drift over repeated acquire/release,
on success and on every error path."""

from __future__ import annotations

import sys

import numpy as np
import pytest

N = 10_000
DEVICE = 0x10000
FULL_RO = 0x11C


def _total():
    return getattr(sys, "gettotalrefcount", lambda: 0)()


def _assert_stable(obj, run):
    run()                                   # warm caches and free lists
    before, total = sys.getrefcount(obj), _total()
    run()
    assert sys.getrefcount(obj) == before
    if hasattr(sys, "gettotalrefcount"):
        assert abs(_total() - total) < 10


@pytest.mark.parametrize("kind", ["host", "device", "strided", "bytes",
                                  "ndarray"])
def test_acquire_release_loop(capi, kind):
    obj = {
        "host": lambda: capi.ExporterFull(8),
        "device": lambda: capi.ExporterFull(8, device="bufferext.cuda"),
        "strided": lambda: capi.ExporterFull(8, strided=True),
        "bytes": lambda: b"abcdefgh",
        "ndarray": lambda: np.zeros((4, 4))[:, ::2],
    }[kind]()
    _assert_stable(obj, lambda: capi.acquire_loop(obj, FULL_RO | DEVICE, N))
    if hasattr(obj, "exports"):
        assert obj.exports == 0
        assert obj.getbuffer_calls == 2 * N


@pytest.mark.parametrize("case", ["refused_up_front", "exporter_fails",
                                  "device_to_cpu", "unasked", "noflag",
                                  "extra_flags", "fail_late", "readonly"])
def test_error_path_loop(capi, case):
    make, flags = {
        "refused_up_front": (lambda: capi.ExporterSimpleOnly(), FULL_RO),
        "exporter_fails": (lambda: capi.ExporterFull(fail=True), FULL_RO),
        "device_to_cpu": (lambda: capi.ExporterFull(device="d"), FULL_RO),
        "unasked": (lambda: capi.ExporterFull(liar="unasked"), FULL_RO),
        "noflag": (lambda: capi.ExporterFull(liar="device_noflag"), DEVICE),
        "extra_flags": (lambda: capi.ExporterFull(liar="extra_flags"),
                        DEVICE),
        "fail_late": (lambda: capi.ExporterFull(liar="fail_late"), DEVICE),
        "readonly": (lambda: capi.ExporterFull(readonly=True), 0x1),
    }[case]
    x = make()
    counts = []
    _assert_stable(x, lambda: counts.append(capi.failing_loop(x, flags, N)))
    assert counts == [N, N]
    assert x.exports == 0
    expected_calls = 0 if case == "refused_up_front" else 2 * N
    assert x.getbuffer_calls == expected_calls


@pytest.mark.thread_unsafe(reason="it compares reference counts of objects the other threads' copies hold too")
def test_check_loop_is_stable(capi):
    x = capi.ExporterFull()
    _assert_stable(x, lambda: capi.check_loop(x, 0x8, N))
    tp = type(x)
    _assert_stable(tp, lambda: capi.check_loop(x, 0x8, N))


def test_python_class_loop(capi):
    class Declared(bytearray):
        __buffer_supported_flags__ = 0x101FD

    x = Declared(b"abc")
    _assert_stable(x, lambda: capi.acquire_loop(x, FULL_RO | DEVICE, N))
    _assert_stable(Declared, lambda: capi.acquire_loop(x, FULL_RO, N))
