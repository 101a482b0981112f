"""Rules of the specifications that had no test of their own (see
docs/conformance.rst, which names the rule each test proves)."""

from __future__ import annotations

import ctypes
import gc
import weakref
from typing import Any

import numpy as np
import pytest

import bufferext
from bufferext import BufferFlags

from _dlpack_ctypes import Crafted, read_versioned


class Speaker:
    """An object with one interface attribute."""

    def __init__(self, name: str, value: Any) -> None:
        setattr(self, name, value)


def _ve_adapter(**change: Any) -> Any:
    vai = {"shape": (2, 3), "typestr": "<f4", "data": (1 << 40, False),
           "version": 1}
    vai.update(change)
    return bufferext.as_buffer(Speaker("__ve_array_interface__", vai))


# ---- PEP draft: device names ------------------------------------------------

def test_device_names_are_package_prefixed_utf8_and_never_cpu() -> None:
    """PEP: device is NULL (CPU) or a unique NUL-terminated UTF-8 name that
    includes a PyPI package name; "cpu" is reserved."""
    with bufferext.get_buffer(_ve_adapter()) as view:
        assert view.device == "bufferext.ve"
        view.device.encode("utf-8")
    with bufferext.get_buffer(bufferext.CPUBuffer(4)) as view:
        assert view.device is None              # CPU memory: NULL, not "cpu"
    assert bufferext.devices()[0]["device"] == "bufferext.cuda"
    for entry in bufferext.devices():
        assert entry["device"].startswith("bufferext.")
        assert entry["device"] != "cpu"


def test_cpu_only_helpers_refuse_device_memory() -> None:
    """PEP: APIs that work on buffers (copies, memoryview) must check that
    the device is NULL."""
    view = bufferext.get_buffer(_ve_adapter())
    for method in (view.tobytes, view.memoryview):
        with pytest.raises(BufferError, match="device"):
            method()
    view.release()


def test_device_flag_is_soft_for_legacy_exporters() -> None:
    """PEP: PyBUF_DEVICE is not a required flag: exporters that do not know
    it ignore it, and flags stays 0 (the consumer must test it)."""
    with bufferext.get_buffer(bytearray(3), BufferFlags.SIMPLE |
                              BufferFlags.DEVICE) as view:
        assert view.device is None and view.device_info is None


# ---- VE Array Interface v1 (consumer side) -----------------------------------

@pytest.mark.parametrize("strides", ["absent", None])
def test_vai_strides_absent_or_none_mean_c_contiguous(strides: Any) -> None:
    change = {} if strides == "absent" else {"strides": None}
    adapter = _ve_adapter(**change)
    assert adapter.strides == (12, 4)


def test_vai_zero_size_array_has_data_zero() -> None:
    """VAI: for zero-size arrays the pointer is 0; a NULL pointer with a
    non-zero size is refused."""
    assert _ve_adapter(shape=(0, 3), data=(0, False)).nbytes == 0
    with pytest.raises(BufferError, match="NULL"):
        _ve_adapter(data=(0, False))


@pytest.mark.parametrize("missing", ["shape", "typestr", "data", "version"])
def test_vai_required_entries(missing: str) -> None:
    vai = {"shape": (2,), "typestr": "<f4", "data": (1 << 40, False),
           "version": 1}
    del vai[missing]
    with pytest.raises(BufferError, match=missing):
        bufferext.as_buffer(Speaker("__ve_array_interface__", vai))


def test_vai_readonly_flag_and_veo_ctxt_are_carried() -> None:
    adapter = _ve_adapter(data=(1 << 40, True), veo_ctxt=0x1234)
    assert adapter.readonly
    with bufferext.get_buffer(adapter) as view:
        assert view.device_info.context == 0x1234
    with pytest.raises(BufferError):
        _ve_adapter(data=(1 << 40, True)) and bufferext.as_buffer(
            Speaker("__ve_array_interface__",
                    {"shape": (1,), "typestr": "<f4",
                     "data": (1 << 40, True), "version": 1}),
            readonly=False)


# ---- lifetime of interface owners --------------------------------------------

def test_interface_owner_is_kept_alive_by_the_adapter() -> None:
    """CAI / VAI / array interface: reading the attribute does not keep the
    owner alive, so the consumer (the adapter) must."""
    memory = np.arange(4, dtype=np.int32)
    owner = Speaker("__array_interface__", dict(memory.__array_interface__))
    ref = weakref.ref(owner)
    adapter = bufferext.as_buffer(owner)
    del owner
    gc.collect()
    assert ref() is not None and adapter.source is ref()
    del adapter
    gc.collect()
    assert ref() is None


# ---- DLPack (consumer side) ---------------------------------------------------

def test_dlpack_major_version_mismatch_is_not_consumed() -> None:
    """DLPack: on a major-version mismatch the consumer touches nothing but
    the deleter: the capsule stays unconsumed, so its own destructor calls
    the deleter exactly once."""
    buf = bufferext.CPUBuffer(4)
    capsule = buf.__dlpack__(max_version=(1, 0))
    read_versioned(capsule).version.major = 2
    with pytest.raises(BufferError, match="major version"):
        bufferext._bufferext._adapter_from_dlpack(None, capsule, None)
    assert buf.exports == 1
    del capsule
    gc.collect()
    assert buf.exports == 0                  # the deleter ran, once


def test_dlpack_newer_minor_version_is_accepted() -> None:
    """DLPack: minor versions only add enum values; a capsule of a newer
    minor whose fields we understand is read normally."""
    crafted = Crafted(version=(1, 99), ndim=1, shape=(4,), code=1, bits=8)
    adapter = bufferext._bufferext._adapter_from_dlpack(
        None, crafted.capsule(), None)
    assert adapter.shape == (4,)
    del adapter
    gc.collect()
    assert crafted.deleted == 1


def test_dlpack_is_copied_flag_set_on_copies_only() -> None:
    """DLPack: when a copy is made, IS_COPIED must be set."""
    buf = bufferext.CPUBuffer(4)
    plain_capsule = buf.__dlpack__(max_version=(1, 0))   # kept alive: the
    plain = read_versioned(plain_capsule)                # struct is its
    copied_capsule = buf.__dlpack__(max_version=(1, 0), copy=True)
    copied = read_versioned(copied_capsule)
    assert plain.flags & 2 == 0 and copied.flags & 2 == 2
    assert ctypes.c_void_p(copied.dl_tensor.data).value != buf.ptr
