"""Bridges: today's array-exchange protocols into the extended buffer protocol.

:func:`as_buffer` turns anything that speaks DLPack, the CUDA Array
Interface v3, the VE Array Interface v1, NumPy's array interface v3 or the
buffer protocol into an exporter of the extended buffer protocol, zero-copy.
An object that speaks several is read in this order (the rows of
:data:`_STEPS`):

1. the extended buffer protocol itself (its type declares ``DEVICE``), or
   a type whose buffer is always CPU memory: passed through (numpy's array
   only with a builtin dtype);
2. a numpy array of an ml_dtypes low-precision float: an exporter of its
   memory with the format ``[name]`` (numpy exports such items neither
   through the buffer protocol nor DLPack, and its array interface calls
   them ``'V2'``);
3. the Arrow C Device interface (``__arrow_c_device_array__``), else the
   Arrow C Data interface (``__arrow_c_array__``): before DLPack, because
   Arrow says more (the null count, the producer's own ``sync_event``
   instead of a stream handshake; the slice offset both carry);
4. DLPack, when ``__dlpack_device__`` names a non-CPU device (a plain buffer
   export could not say where the memory is);
5. the buffer protocol: passed through;
6. DLPack (CPU memory);
7. ``__cuda_array_interface__``;
8. ``__ve_array_interface__``;
9. ``__array_interface__``.
"""

from __future__ import annotations

import array
import mmap
import operator
import re
from typing import Any, Callable, Dict, Optional, Tuple, Union

import numpy as np

from . import _bufferext
from ._bufferext import BufferAdapter
from ._dtypes import _is_lowp, resolve, resolve_format
from ._flags import BufferFlags

__all__ = ["as_buffer", "format_to_typestr"]

_DLPACK_CPU_TYPES = (1, 3, 13)          # kDLCPU, kDLCUDAHost, kDLCUDAManaged
#: Types whose memory is always CPU memory: their buffer is the answer
#: (as_buffer's pass-through step, _bufferext._pass_through, reads this
#: tuple by name; numpy's array first: only its builtin dtypes pass).
_CPU_TYPES = (np.ndarray, bytes, bytearray, memoryview, array.array,
              mmap.mmap)
#: What as_buffer bridges besides the buffer protocol, in the order it reads
#: them: (attribute, the protocol's name).  check's
#: hint (_check.py) names them from here; get_buffer's (Modules/view.c,
#: in C) holds the same table, which tests/test_view.py keeps equal.
BRIDGED = (("__arrow_c_device_array__", "the Arrow C Device interface"),
           ("__arrow_c_array__", "the Arrow C Data interface"),
           ("__dlpack__", "DLPack"),
           ("__cuda_array_interface__", "the CUDA Array Interface"),
           ("__ve_array_interface__", "the VE Array Interface"),
           ("__array_interface__", "the NumPy array interface"))
_DLPACK_MAX_VERSION = (1, 3)
_CAI_MAX_VERSION = 3
_VAI_VERSION = 1
_ARRAY_INTERFACE_VERSION = 3

#: A step of as_buffer: step(obj, type(obj), readonly) is the exporter
#: ``obj`` becomes, or NotImplemented when the step's protocol does not
#: apply (the next step is tried); what it raises is as_buffer's error.
_Step = Callable[[Any, type, Optional[bool]], Any]


# ---- the steps (their order is _STEPS, below) -------------------------------
# The pass-through is _bufferext._pass_through (C).  The steps of a
# protocol's method ask the class for it (one set on the instance is not
# the protocol); those of an interface read the object's attribute.

def _lowp_ndarray(obj: Any, cls: type, readonly: Optional[bool]) -> Any:
    """numpy's array of ml_dtypes' low-precision float (the pass-through
    takes numpy's arrays of builtin dtypes only)."""
    if isinstance(obj, np.ndarray):
        # numpy's own view of a real array's memory: a subclass's dtype,
        # shape, strides or __array_interface__ (a property) is not the
        # layout numpy keeps.  A proxy whose __class__ says ndarray (as
        # wrapt's) answers through its attributes, as an array interface.
        arr = (np.ndarray.view(obj, np.ndarray)
               if issubclass(cls, np.ndarray) else obj)
        if _is_lowp(arr.dtype):
            return _from_lowp_ndarray(obj, arr, readonly)
    return NotImplemented


def _arrow(obj: Any, cls: type, readonly: Optional[bool]) -> Any:
    """The Arrow C Device interface, else the C Data interface."""
    if hasattr(cls, "__arrow_c_device_array__"):
        return _from_arrow(obj, obj.__arrow_c_device_array__(), True,
                           readonly)
    if hasattr(cls, "__arrow_c_array__"):
        return _from_arrow(obj, obj.__arrow_c_array__(), False, readonly)
    return NotImplemented


def _dlpack_of_a_device(obj: Any, cls: type, readonly: Optional[bool]) -> Any:
    """DLPack of device memory (a buffer export could only say CPU)."""
    if hasattr(cls, "__dlpack__"):
        named = _dlpack_device(obj)
        if named is not None and named[0] not in _DLPACK_CPU_TYPES:
            return _from_dlpack(obj, readonly)
    return NotImplemented


def _dlpack(obj: Any, cls: type, readonly: Optional[bool]) -> Any:
    """DLPack of CPU memory."""
    if hasattr(cls, "__dlpack__"):
        return _from_dlpack(obj, readonly)
    return NotImplemented


def _cuda_array_interface(obj: Any, cls: type,
                          readonly: Optional[bool]) -> Any:
    """``__cuda_array_interface__`` (v3)."""
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is None:
        return NotImplemented
    return _from_cai(obj, interface, readonly)


def _ve_array_interface(obj: Any, cls: type, readonly: Optional[bool]) -> Any:
    """``__ve_array_interface__`` (v1)."""
    interface = getattr(obj, "__ve_array_interface__", None)
    if interface is None:
        return NotImplemented
    return _from_vai(obj, interface, readonly)


def _array_interface(obj: Any, cls: type, readonly: Optional[bool]) -> Any:
    """``__array_interface__`` (v3)."""
    interface = getattr(obj, "__array_interface__", None)
    if interface is None:
        return NotImplemented
    return _from_array_interface(obj, interface, readonly)


#: as_buffer's order, written once: (name, step, needs) rows, tried in turn
#: until one answers.  ``needs`` is the row's guard: attribute names of
#: which the object's type must have one (``hasattr(cls, name)``, the type
#: read through its MRO and metaclass) or types of which the object must be
#: an instance (``isinstance(obj, t)``) for the step to be called; empty,
#: the step is always called.  A guard asks only what its step itself asks
#: first, so it skips only calls that would answer NotImplemented: the array
#: interfaces' steps read the instance (getattr, which an instance attribute
#: answers -- numpy's own DummyArray sets one) and the buffer protocol has
#: nothing to ask, so they have none.
#: bufferext.as_buffer (C, Modules/adapter.c) reads this table at its first
#: use and keeps it; the pass-through's and the buffer protocol's rows hold
#: its own C functions (_bufferext._pass_through, _bufferext._buffer_protocol:
#: the buffer protocol, unless the type speaks DLPack too and the object
#: refuses a plain export, as JAX's bfloat16 arrays do), which it runs
#: without a call.  _dispatch walks it in Python, with the same guards.
#: The names are what each step reads (Arrow's by the C Device interface it
#: tries first); this module's docstring and docs/bridges.rst list the same
#: steps, and tests/test_bridges_order.py holds both lists and BRIDGED to
#: the names.
_STEPS: Tuple[Tuple[str, _Step, Tuple[Union[str, type], ...]], ...] = (
    ("passes through", _bufferext._pass_through, ()),
    ("numpy's low-precision floats", _lowp_ndarray, (np.ndarray,)),
    ("__arrow_c_device_array__", _arrow,
     ("__arrow_c_device_array__", "__arrow_c_array__")),
    ("DLPack of a device", _dlpack_of_a_device, ("__dlpack__",)),
    ("the buffer protocol", _bufferext._buffer_protocol, ()),
    ("DLPack", _dlpack, ("__dlpack__",)),
    ("__cuda_array_interface__", _cuda_array_interface, ()),
    ("__ve_array_interface__", _ve_array_interface, ()),
    ("__array_interface__", _array_interface, ()),
)
_ORDER = tuple(row[0] for row in _STEPS)


def _dispatch(obj: Any, readonly: Optional[bool]) -> Any:
    """:func:`as_buffer` in Python (``readonly`` is None or a bool): the
    first answer of the steps of :data:`_STEPS` whose guard holds that is
    not NotImplemented.  ``bufferext.as_buffer`` walks the same rows in
    C."""
    cls = type(obj)
    for _, step, needs in _STEPS:
        if needs and not _guard_holds(obj, cls, needs):
            continue
        result = step(obj, cls, readonly)
        if result is not NotImplemented:
            return result
    raise _speaks_none(cls)


def _guard_holds(obj: Any, cls: type,
                 needs: Tuple[Union[str, type], ...]) -> bool:
    """A row's guard: whether ``cls`` has one of the attributes ``needs``
    names or ``obj`` is an instance of one of its types (a lookup's error
    other than AttributeError propagates)."""
    for need in needs:
        if (isinstance(obj, need) if isinstance(need, type)
                else hasattr(cls, need)):
            return True
    return False


def _speaks_none(cls: type) -> TypeError:
    """The error of an object no step took (as_buffer's C walk raises the
    same text)."""
    return TypeError(
        f"as_buffer: {cls.__name__!r} object speaks none of the buffer "
        "protocol, the Arrow PyCapsule interface, DLPack, "
        "__cuda_array_interface__, __ve_array_interface__ or "
        "__array_interface__")


def _from_lowp_ndarray(obj: Any, arr: Any,
                       readonly: Optional[bool]) -> BufferAdapter:
    """A numpy array ``obj`` of ml_dtypes' bfloat16 or float8 kinds, read
    as ``arr``: its memory, items named by their buffer format
    (``[bfloat16]``); a byte-swapped one is refused by name."""
    fmt, itemsize = resolve(arr.dtype)[:2]
    ptr, ro = arr.__array_interface__["data"]
    return _bufferext._adapter_from_layout(
        obj, "numpy", ptr, arr.shape, arr.strides, fmt, itemsize,
        _policy("numpy", ro, readonly), None, 0, None)


# ---- DLPack ----------------------------------------------------------------

def _dlpack_device(obj: Any) -> Optional[Tuple[int, int]]:
    """What ``__dlpack_device__()`` names, or None: the producer has none
    (then it is asked for CPU memory)."""
    query = getattr(obj, "__dlpack_device__", None)
    if query is None:
        return None
    device = query()
    try:
        kind, ident = device
        named = (_as_int(kind, -2**31, 2**31 - 1),
                 _as_int(ident, -2**31, 2**31 - 1))
    except (TypeError, ValueError):
        named = (None, None)
    if None in named:
        raise BufferError(f"dlpack: __dlpack_device__() returned {device!r}, "
                          "expected a tuple (device_type, device_id) of "
                          "32-bit ints")
    return named  # type: ignore[return-value]


def _from_dlpack(obj: Any, readonly: Optional[bool]) -> BufferAdapter:
    named = _dlpack_device(obj)
    device_type, device_id = (1, 0) if named is None else named
    kwargs: Dict[str, Any] = {}
    stream = None
    if device_type in (2, 3, 13):
        # kDLCUDA: ready on our stream; kDLCUDAHost, kDLCUDAManaged: the
        # same, then waited for on the host before the CPU reads it (with
        # None the producer orders its work before the legacy stream only)
        stream = _bufferext._cuda_bridge_stream(device_id)
        kwargs["stream"] = stream
    elif device_type not in _DLPACK_CPU_TYPES:
        raise BufferError(f"dlpack: device type {device_type} is not "
                          "supported (CPU, CUDA, CUDA host and CUDA managed "
                          "memory are)")
    try:
        capsule = obj.__dlpack__(max_version=_DLPACK_MAX_VERSION, copy=False,
                                 **kwargs)
    except TypeError:
        capsule = obj.__dlpack__(**kwargs)  # a producer older than DLPack 1.0
    return _bufferext._adapter_from_dlpack(obj, capsule, readonly, stream,
                                           named)


# ---- Arrow -----------------------------------------------------------------

def _from_arrow(obj: Any, capsules: Any, device: bool,
                readonly: Optional[bool]) -> BufferAdapter:
    method = "__arrow_c_device_array__" if device else "__arrow_c_array__"
    if not isinstance(capsules, tuple) or len(capsules) != 2:
        raise BufferError(f"arrow: {type(obj).__name__}.{method}() returned "
                          f"{capsules!r}, expected a tuple (schema capsule, "
                          "array capsule)")
    return _bufferext._adapter_from_arrow(obj, capsules[0], capsules[1],
                                          device, readonly)


# ---- interface dicts --------------------------------------------------------

def _fail(protocol: str, field: str, value: Any, expected: str) -> BufferError:
    return BufferError(f"{protocol}: {field!r} is {value!r}; expected "
                       f"{expected}")


def _get_dict(protocol: str, interface: Any) -> Dict[str, Any]:
    """The dict, or a dict subclass's contents copied once (as NumPy reads
    them: no __getitem__, get or __contains__ of the subclass runs)."""
    if not isinstance(interface, dict):
        raise TypeError(f"{protocol} must be a dict, not "
                        f"{type(interface).__name__!r}")
    return interface if type(interface) is dict else dict.copy(interface)


def _require(protocol: str, d: Dict[str, Any], key: str) -> Any:
    if key not in d:
        raise BufferError(f"{protocol}: required key {key!r} is missing")
    return d[key]


_SSIZE_MAX = 2**63 - 1 if np.intp(0).itemsize == 8 else 2**31 - 1
_POINTER_LIMIT = 2**64 if np.intp(0).itemsize == 8 else 2**32


def _as_int(value: Any, low: int = -_SSIZE_MAX,
            high: int = _SSIZE_MAX) -> Optional[int]:
    """``value``, an integer but not a bool, as an exact int in [low, high],
    or None.  Read once: an int subclass's own __index__, __int__ or
    __bool__ cannot make what is used differ from what was checked."""
    if (not isinstance(value, (int, np.integer))
            or isinstance(value, (bool, np.bool_))):
        return None
    number = int.__index__(operator.index(value))
    return number if low <= number <= high else None


def _as_ints(value: Any, low: int = -_SSIZE_MAX) -> Optional[Tuple[int, ...]]:
    """The items of a tuple of at most 64 as exact ints >= low (each read
    once), or None."""
    items = tuple(value) if isinstance(value, tuple) else None
    if items is None or len(items) > 64:
        return None
    numbers = tuple(_as_int(n, low) for n in items)
    return None if None in numbers else numbers  # type: ignore[return-value]


def _shape(protocol: str, d: Dict[str, Any]) -> Tuple[int, ...]:
    shape = _require(protocol, d, "shape")
    dims = _as_ints(shape, 0)
    if dims is None:
        raise _fail(protocol, "shape", shape,
                    "a tuple of at most 64 non-negative ints")
    return dims


_BOOL = re.compile(r"[<>|=]?b([0-9]{1,4})")


def _typestr(protocol: str, d: Dict[str, Any]
             ) -> Tuple[str, int, Tuple[int, ...]]:
    """(format, itemsize, sub-array shape) of the 'typestr' key.  A sub-array
    type such as '(2,3)<f4' describes items of its base type, its shape
    appended to the array's (as NumPy reads it); the fields of a void type
    such as '|V8' are those 'descr' gives."""
    typestr = _require(protocol, d, "typestr")
    if not isinstance(typestr, str):
        raise _fail(protocol, "typestr", typestr, "a str such as '<f8'")
    try:
        dtype = np.dtype(typestr)
    except (TypeError, ValueError, SyntaxError, OverflowError):
        # NumPy's parser raises any of these for malformed strings
        wide = _BOOL.fullmatch(typestr)
        if wide is not None and int(wide.group(1)) > 1:
            # NLCPy's bool is 4 bytes ('|b4'): read as an int it would be a
            # silently different type, and no format describes it
            raise _fail(protocol, "typestr", typestr,
                        "a bool of 1 byte ('|b1'): a wider bool, as NLCPy's "
                        "4-byte one, has no buffer-protocol format (convert "
                        "it to '|b1' or to an int type first)") from None
        raise _fail(protocol, "typestr", typestr,
                    "a NumPy type string such as '<f8'") from None
    described_by: Tuple[str, Any] = ("typestr", typestr)
    if dtype.names is None and dtype.subdtype is None and dtype.kind == "V":
        raw, dtype = dtype, _descr(protocol, d, typestr, dtype)
        if dtype is not raw:
            described_by = ("descr", d["descr"])
    if dtype.itemsize == 0 or dtype.hasobject:
        raise _fail(protocol, "typestr", typestr,
                    "a fixed-size type without Python objects")
    subshape: Tuple[int, ...] = ()
    if dtype.subdtype is not None:
        dtype, subshape = dtype.subdtype
    try:
        fmt = resolve(dtype)[0]
    except TypeError:
        # Structured and other types: NumPy's own PEP 3118 format.
        try:
            fmt = np.empty((0,), dtype).data.format
        except (ValueError, TypeError, BufferError, NotImplementedError):
            raise _fail(protocol, *described_by, "a type the buffer "
                        "protocol can describe (not datetime/timedelta)"
                        ) from None
    return fmt, dtype.itemsize, subshape


def _descr(protocol: str, d: Dict[str, Any], typestr: str,
           raw: np.dtype[Any]) -> np.dtype[Any]:
    """The type 'descr' describes for the void ``typestr`` (its fields, as
    NumPy reads them), or the typestr's raw bytes where 'descr' is absent
    or the default ``[('', typestr)]``."""
    descr = d.get("descr")
    if descr is None or descr == [("", typestr)]:
        return raw
    try:
        described: np.dtype[Any] = np.dtype(descr)
    except (TypeError, ValueError, SyntaxError, OverflowError, KeyError):
        raise _fail(protocol, "descr", descr, "a list of (name, type) "
                    "tuples such as [('x', '<f4'), ('y', '<i4')]") from None
    if described.hasobject:
        raise _fail(protocol, "descr", descr, "a type without Python "
                    "objects")
    if described.itemsize != raw.itemsize:
        raise _fail(protocol, "descr", descr, f"a type of {raw.itemsize} "
                    f"bytes, as 'typestr' {typestr!r} says (it describes "
                    f"{described.itemsize})")
    return described


def _strides(protocol: str, d: Dict[str, Any], shape: Tuple[int, ...],
             itemsize: int) -> Tuple[int, ...]:
    strides = d.get("strides")
    if strides is None:
        out = []
        step = itemsize
        for n in reversed(shape):
            if step > _SSIZE_MAX:
                # only with a zero-size dimension: the size check passed
                raise _fail(protocol, "shape", shape, "C-contiguous strides "
                            "that fit a Py_ssize_t")
            out.append(step)
            step *= max(n, 1)
        return tuple(reversed(out))
    steps = _as_ints(strides)
    if steps is None or len(steps) != len(shape):
        raise _fail(protocol, "strides", strides,
                    f"None or a tuple of {len(shape)} ints")
    return steps


def _data_pair(protocol: str, data: Any) -> Tuple[int, bool]:
    pair = tuple(data) if isinstance(data, tuple) else ()
    ptr = _as_int(pair[0], 0, _POINTER_LIMIT - 1) if len(pair) == 2 else None
    if ptr is None or not isinstance(pair[1], (bool, np.bool_)):
        raise _fail(protocol, "data", data, "a tuple (pointer: int >= 0, "
                    "readonly: bool)")
    return ptr, bool(pair[1])


def _handle(protocol: str, d: Dict[str, Any], key: str, low: int,
            expected: str) -> int:
    """The optional int under ``key`` (a stream, a context): 0 for None."""
    value = d.get(key)
    if value is None:
        return 0
    handle = _as_int(value, low, _POINTER_LIMIT - 1)
    if handle is None:
        raise _fail(protocol, key, value, expected)
    return handle


def _version(protocol: str, d: Dict[str, Any], low: int, high: int) -> int:
    version = _require(protocol, d, "version")
    number = _as_int(version, low, high)
    if number is None:
        raise _fail(protocol, "version", version,
                    f"an int from {low} to {high}" if low != high
                    else f"{high}")
    return number


def _no_mask(protocol: str, d: Dict[str, Any]) -> None:
    if d.get("mask") is not None:
        raise BufferError(f"{protocol}: 'mask' is not supported (got "
                          f"{type(d['mask']).__name__!r})")


def _policy(protocol: str, source_readonly: bool,
            readonly: Optional[bool]) -> bool:
    if readonly is False and source_readonly:
        raise BufferError(f"{protocol}: the memory is read-only but "
                          "readonly=False was requested")
    return source_readonly if readonly is None else readonly


def _common(protocol: str, interface: Any, low: int, high: int
            ) -> Tuple[Dict[str, Any], Tuple[int, ...], Tuple[int, ...], str,
                       int]:
    """What every interface dict has: (dict, shape, strides, format,
    itemsize), with the version in [low, high] and no mask."""
    d = _get_dict(protocol, interface)
    _version(protocol, d, low, high)
    shape = _shape(protocol, d)
    fmt, itemsize, subshape = _typestr(protocol, d)
    strides = _strides(protocol, d, shape, itemsize * _product(subshape))
    _no_mask(protocol, d)
    if subshape:
        if len(shape) + len(subshape) > 64:
            raise _fail(protocol, "typestr", d["typestr"], "a sub-array "
                        "that keeps the array within 64 dimensions")
        shape += subshape
        strides += _strides(protocol, {}, subshape, itemsize)
    return d, shape, strides, fmt, itemsize


def _product(values: Tuple[int, ...]) -> int:
    result = 1
    for v in values:
        result *= v
    return result


def _extent(shape: Tuple[int, ...], strides: Tuple[int, ...],
            itemsize: int) -> Tuple[int, int]:
    """The bytes a strided layout touches, as [low, high) offsets from its
    first element ((0, 0) when it has no element)."""
    if 0 in shape:
        return 0, 0
    low = sum(s * (n - 1) for n, s in zip(shape, strides) if s < 0)
    high = sum(s * (n - 1) for n, s in zip(shape, strides) if s > 0)
    return low, high + itemsize


def _from_cai(obj: Any, interface: Any,
              readonly: Optional[bool]) -> BufferAdapter:
    protocol = "__cuda_array_interface__"
    d, shape, strides, fmt, itemsize = _common(protocol, interface, 0,
                                               _CAI_MAX_VERSION)
    ptr, ro = _data_pair(protocol, _require(protocol, d, "data"))
    stream = _handle(protocol, d, "stream", 1, "None or a positive int (0 "
                     "is disallowed by CAI v3)")
    return _bufferext._adapter_from_layout(
        obj, "cuda_array_interface", ptr, shape, strides, fmt, itemsize,
        _policy(protocol, ro, readonly), "bufferext.cuda", stream, None)


def _from_vai(obj: Any, interface: Any,
              readonly: Optional[bool]) -> BufferAdapter:
    protocol = "__ve_array_interface__"
    d, shape, strides, fmt, itemsize = _common(protocol, interface,
                                               _VAI_VERSION, _VAI_VERSION)
    ptr, ro = _data_pair(protocol, _require(protocol, d, "data"))
    ctxt = _handle(protocol, d, "veo_ctxt", 0, "None or an int >= 0")
    return _bufferext._adapter_from_layout(
        obj, "ve_array_interface", ptr, shape, strides, fmt, itemsize,
        _policy(protocol, ro, readonly), "bufferext.ve", ctxt, None)


def _from_array_interface(obj: Any, interface: Any,
                          readonly: Optional[bool]) -> BufferAdapter:
    protocol = "__array_interface__"
    d, shape, strides, fmt, itemsize = _common(
        protocol, interface, _ARRAY_INTERFACE_VERSION,
        _ARRAY_INTERFACE_VERSION)
    offset = _as_int(d.get("offset", 0), 0)
    if offset is None:
        raise _fail(protocol, "offset", d["offset"], "an int >= 0")
    data = d.get("data")
    pin = None
    if isinstance(data, tuple):
        ptr, ro = _data_pair(protocol, data)
        if ptr + offset >= _POINTER_LIMIT:
            raise _fail(protocol, "offset", offset, "an offset inside the "
                        "address space")
    elif data is not None and _bufferext.check_buffer_supports(data):
        # one block of bytes, as NumPy asks for it (PyBUF_SIMPLE): shape,
        # strides and offset say where the items are in it
        try:
            pin = _bufferext.get_buffer(data, BufferFlags.SIMPLE)
        except (BufferError, ValueError) as exc:
            raise BufferError(f"{protocol}: 'data', a "
                              f"{type(data).__name__!r}, is not one "
                              f"contiguous block of memory: {exc}") from exc
        ptr, ro = pin.ptr, pin.readonly
    else:
        raise _fail(protocol, "data", data,
                    "a tuple (pointer, readonly) or a buffer object")
    try:
        if pin is not None:
            low, high = _extent(shape, strides, itemsize)
            if offset + low < 0 or offset + high > pin.nbytes:
                raise BufferError(
                    f"{protocol}: shape {shape}, strides {strides} and offset "
                    f"{offset} reach bytes [{offset + low}, {offset + high}) "
                    f"of 'data', a buffer of {pin.nbytes} bytes")
        return _bufferext._adapter_from_layout(
            obj, "array_interface", ptr + offset, shape, strides, fmt,
            itemsize, _policy(protocol, ro, readonly), None, 0, pin)
    except BaseException:
        # refused: the export of 'data' ends now, not with the traceback
        if pin is not None:
            pin.release()
        raise



def format_to_typestr(fmt: str) -> str:
    """The array-interface typestr of a struct-module format."""
    return resolve_format(fmt)[3]


as_buffer = _bufferext.as_buffer
