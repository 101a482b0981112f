"""DLPack structs in ctypes, to read capsules we produce and to craft the
malformed ones a fuzzer or a buggy producer would hand us."""

from __future__ import annotations

import ctypes
from typing import Any, List, Optional, Sequence

PyCapsule_New = ctypes.pythonapi.PyCapsule_New
PyCapsule_New.restype = ctypes.py_object
PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
PyCapsule_GetPointer.restype = ctypes.c_void_p
PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
PyCapsule_GetName = ctypes.pythonapi.PyCapsule_GetName
PyCapsule_GetName.restype = ctypes.c_char_p
PyCapsule_GetName.argtypes = [ctypes.py_object]


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice),
                ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DELETER_V = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))
DLManagedTensorVersioned._fields_ = [
    ("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
    ("deleter", DELETER_V), ("flags", ctypes.c_uint64),
    ("dl_tensor", DLTensor)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor),
                            ("manager_ctx", ctypes.c_void_p),
                            ("deleter", DELETER)]


def read_versioned(capsule: Any) -> DLManagedTensorVersioned:
    ptr = PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    return DLManagedTensorVersioned.from_address(ptr)


def read_legacy(capsule: Any) -> DLManagedTensor:
    ptr = PyCapsule_GetPointer(capsule, b"dltensor")
    return DLManagedTensor.from_address(ptr)


class Crafted:
    """A hand-made DLPack tensor over memory it owns; counts deleter calls."""

    def __init__(self, *, data: Optional[int] = None, nbytes: int = 64,
                 ndim: int = 1, shape: Optional[Sequence[int]] = (8,),
                 strides: Optional[Sequence[int]] = None,
                 code: int = 1, bits: int = 8, lanes: int = 1,
                 device: Sequence[int] = (1, 0), version: Sequence[int] = (1, 0),
                 flags: int = 0, versioned: bool = True,
                 byte_offset: int = 0) -> None:
        self.deleted = 0
        self.memory = (ctypes.c_uint8 * max(nbytes, 1))()
        self._keep: List[Any] = []
        tensor = DLTensor()
        tensor.data = (ctypes.addressof(self.memory) if data is None
                       else data)
        tensor.device = DLDevice(*device)
        tensor.ndim = ndim
        tensor.dtype = DLDataType(code, bits, lanes)
        tensor.byte_offset = byte_offset
        if shape is not None:
            arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
            self._keep.append(arr)
            tensor.shape = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int64))
        if strides is not None:
            arr = (ctypes.c_int64 * max(len(strides), 1))(*strides)
            self._keep.append(arr)
            tensor.strides = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int64))
        if versioned:
            self.managed: Any = DLManagedTensorVersioned()
            self.managed.version = DLPackVersion(*version)
            self.managed.flags = flags
            self.deleter: Any = DELETER_V(self._on_delete)
        else:
            self.managed = DLManagedTensor()
            self.deleter = DELETER(self._on_delete)
        self.managed.dl_tensor = tensor
        self.managed.deleter = self.deleter
        self.name = b"dltensor_versioned" if versioned else b"dltensor"

    def _on_delete(self, _: Any) -> None:
        self.deleted += 1

    def capsule(self, name: Optional[bytes] = None) -> Any:
        # No destructor: an unconsumed crafted capsule frees nothing.
        return PyCapsule_New(ctypes.addressof(self.managed),
                             name or self.name, None)
