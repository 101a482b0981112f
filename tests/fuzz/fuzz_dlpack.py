"""Fuzz the DLPack capsule consumer (bufferext._bufferext._adapter_from_dlpack)
and, for every capsule it accepts, the adapter's own DLPack export and the
buffer requests on it.

Capsules are crafted in ctypes memory: versioned and legacy structs, right,
wrong and consumed names, absurd ndim / shape / strides / dtype / device /
version / flags / byte_offset.  A capsule whose name is valid carries the
struct that name promises (a producer that lies about the struct behind a
valid name is outside what any consumer can defend against).

Rules checked for every input:
- a rejection is BufferError, TypeError or DeviceUnavailableError;
- a rejected capsule is never consumed (deleter not called, name kept);
- an accepted one is consumed once: renamed, and its deleter runs exactly
  once when the adapter goes; a second use raises BufferError;
- memory is read only when the described extent lies inside the real block.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
from typing import Any, Callable, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import Source, main  # noqa: E402

import _dlpack_ctypes as dl  # noqa: E402

bufferext: Any = None
CLEAN: Tuple[type, ...] = ()
MEMORY = 512
NAMES_V = [b"dltensor_versioned"] * 6 + [
    b"used_dltensor_versioned", b"dltensor_", b"DLTENSOR_VERSIONED",
    b"dltensor"[:0]]
NAMES_L = [b"dltensor"] * 6 + [b"used_dltensor", b"", b"dltensorx",
                               b"dltensor_versioned"[:9]]
VALID_TYPES = [(2, 64), (0, 8), (0, 16), (0, 32), (0, 64), (1, 8), (1, 16),
               (1, 32), (1, 64), (2, 16), (2, 32), (5, 64), (5, 128), (6, 8),
               (2, 8), (5, 32), (6, 16), (4, 16), (3, 64), (0, 1), (1, 4)]
REQUESTS = [0x1011C, 0x1011D, 0x1003C, 0, 0xC]   # FULL_RO|DEVICE, FULL|...


class Tensor:
    """One crafted managed tensor, its memory, and a deleter counter."""

    def __init__(self, src: Source) -> None:
        self.deleted = 0
        self.memory = (ctypes.c_uint8 * MEMORY)()
        self.versioned = src.chance()
        t = dl.DLTensor()
        where = src.byte() % 8
        t.data = (ctypes.addressof(self.memory) if where < 5 else
                  None if where == 5 else src.uint(8) or None)
        self.real_data = where < 5
        t.device = dl.DLDevice(src.pick([1, 1, 1, 1, 1, 1, 3, 13, 2, 0, 4,
                                         10, 12, 99, -1]),
                               src.small_int() & 0x7FFFFFFF
                               if src.chance(4) else 0)
        ndim = src.pick([1, 0, 1, 2, 2, 3, 4, 1, 2, 64, 65, -1, 2**31 - 1,
                         5])
        t.ndim = ndim
        if src.chance(4):       # anything
            t.dtype = dl.DLDataType(src.byte(), src.byte(),
                                    src.pick([1, 0, 2, 4, 65535]))
        else:                   # a plausible type, mostly valid
            code, bits = src.pick(VALID_TYPES)
            t.dtype = dl.DLDataType(code, bits,
                                    src.pick([1, 1, 1, 1, 1, 1, 0, 2]))
        count = min(max(ndim, 0), 64)
        self.shape = (ctypes.c_int64 * 64)(
            *[src.byte() % 6 if not src.chance(6) else
              max(min(src.small_int(), 2**63 - 1), -2**63)
              for _ in range(count)])
        t.shape = (None if count and src.chance(16) else
                   ctypes.cast(self.shape, ctypes.POINTER(ctypes.c_int64)))
        self.strides = (ctypes.c_int64 * 64)(
            *[max(min(src.small_int(), 2**63 - 1), -2**63)
              for _ in range(count)])
        t.strides = (None if src.chance(3) else
                     ctypes.cast(self.strides, ctypes.POINTER(ctypes.c_int64)))
        t.byte_offset = src.pick([0, 0, 0, 8, 1, MEMORY, 2**63, 2**64 - 1])
        if self.versioned:
            m = dl.DLManagedTensorVersioned()
            m.version = dl.DLPackVersion(src.pick([1, 1, 1, 1, 0, 2]),
                                         src.pick([0, 1, 3, 2**32 - 1]))
            m.flags = src.pick([0, 1, 2, 3, 4, 7, 2**64 - 1])
            self.deleter = dl.DELETER_V(self._deleted)
            self.name = src.pick(NAMES_V)
        else:
            m = dl.DLManagedTensor()
            self.deleter = dl.DELETER(self._deleted)
            self.name = src.pick(NAMES_L)
        m.dl_tensor = t
        m.deleter = self.deleter
        self.managed = m
        self.tensor = t

    def _deleted(self, _: object) -> None:
        self.deleted += 1

    def capsule(self) -> object:
        return dl.PyCapsule_New(ctypes.addressof(self.managed), self.name,
                                None)


def _inside(adapter: object, base: int) -> bool:
    """True when every byte the adapter describes lies in the real block."""
    ptr, shape = adapter.ptr, adapter.shape
    strides, itemsize = adapter.strides, adapter.nbytes and (
        adapter.nbytes // max(1, _product(shape)))
    if any(n == 0 for n in shape):
        return True
    low = high = ptr - base
    for n, s in zip(shape, strides):
        if s < 0:
            low += (n - 1) * s
        else:
            high += (n - 1) * s
    return 0 <= low and high + itemsize <= MEMORY


def _product(shape: tuple) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def exercise(adapter: object, tensor: Tensor) -> None:
    """What a consumer does with an accepted adapter (no memory read unless
    the extent is inside the real block)."""
    repr(adapter)
    assert len(adapter.shape) == len(adapter.strides)
    assert adapter.nbytes >= 0
    for flags in REQUESTS:
        try:
            view = bufferext.get_buffer(adapter, flags)
        except BufferError:
            continue
        repr(view)
        view.device_info
        if (view.device is None and tensor.real_data
                and view.nbytes <= 1 << 16      # zero strides: huge copies
                and _inside(adapter, ctypes.addressof(tensor.memory))):
            view.tobytes()
        view.release()
    for kwargs in ({"max_version": (1, 3)}, {}):
        try:
            capsule = adapter.__dlpack__(**kwargs)
        except (BufferError, ValueError):
            continue
        again = bufferext._bufferext._adapter_from_dlpack(None, capsule, None)
        assert again.shape == adapter.shape
        del again
    try:
        adapter.__dlpack_device__()
    except BufferError:
        pass


def test_one_input(data: bytes) -> None:
    src = Source(data)
    tensor = Tensor(src)
    capsule = tensor.capsule()
    readonly = src.pick([None, None, True, False])
    try:
        adapter = bufferext._bufferext._adapter_from_dlpack(
            None, capsule, readonly)
    except CLEAN:
        assert tensor.deleted == 0
        assert dl.PyCapsule_GetName(capsule) == tensor.name
        return
    assert dl.PyCapsule_GetName(capsule).startswith(b"used_")
    try:
        bufferext._bufferext._adapter_from_dlpack(None, capsule, None)
    except BufferError:
        pass
    else:
        raise AssertionError("a consumed capsule was accepted twice")
    exercise(adapter, tensor)
    assert tensor.deleted == 0
    del adapter                 # no cycles: freed here, deleter runs now
    if tensor.deleted != 1:
        gc.collect()
    assert tensor.deleted == 1, tensor.deleted


def prepare() -> Callable[[bytes], None]:
    """Import bufferext (after atheris.Setup when fuzzing)."""
    global bufferext, CLEAN
    import bufferext as module
    bufferext = module
    CLEAN = (BufferError, TypeError, module.DeviceUnavailableError)
    return test_one_input


if __name__ == "__main__":
    main(prepare, lambda: [test_one_input, exercise, Tensor.__init__])
