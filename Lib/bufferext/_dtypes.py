"""Element types of the producers: numpy-style dtypes and struct formats.

A producer's element type is one of the fixed-size numeric types that the
buffer protocol, DLPack and the array interfaces all express: bool, signed
and unsigned integers of 1-8 bytes, float16/32/64 and complex64/128, in
either byte order.  Numpy-style spellings win; struct-module spellings that
numpy does not accept (``'@d'``, ``'!i'``, ``'Zd'``, ``'n'``) are read with
struct's standard sizes.  A torch dtype is read by its name.

Or one of the low-precision floats DLPack names (bfloat16, the float8
kinds), in native byte order: by name (``'bfloat16'``), by its buffer
format (``'[bfloat16]'``, see docs/pep/extended-buffer.rst) or as the
numpy dtype of ml_dtypes.  Its numpy dtype is ml_dtypes' when ml_dtypes
is installed, else raw bytes (``'V2'``, ``'V1'``).
"""

from __future__ import annotations

import difflib
import re
import struct
import sys
from typing import Any, Dict, Literal, Optional, Tuple

import numpy as np

__all__ = ["LOWP", "describe", "fill_item", "host_view", "lowp_dtype", "name_of",
           "resolve", "wire", "wire_dtype"]

# (kind, itemsize) -> struct code, standard sizes
_CODES = {
    ("b", 1): "?",
    ("i", 1): "b", ("u", 1): "B",
    ("i", 2): "h", ("u", 2): "H",
    ("i", 4): "i", ("u", 4): "I",
    ("i", 8): "q", ("u", 8): "Q",
    ("f", 2): "e", ("f", 4): "f", ("f", 8): "d",
    ("c", 8): "Zf", ("c", 16): "Zd",
}

#: The element types a producer can hold, for messages.
_TYPES = ("bool, int8..int64, uint8..uint64, float16/32/64, complex64/128, "
          "bfloat16 or float8_*")
_SUPPORTED = "expected " + _TYPES
#: How to spell one, for a dtype that is not understood at all.
_SPELLINGS = ("give a numpy dtype (e.g. 'float32', numpy.int16, '<i4') or a "
              "struct format of one item (e.g. 'd', '<h', 'Zf') of a supported "
              "type: " + _TYPES)

#: The low-precision floats (name -> itemsize): the DLPack 1.3 types of
#: whole bytes that have no struct code; Modules/export.c has their codes.
#: The sub-byte float6/float4 kinds have no buffer format.
LOWP = {
    "bfloat16": 2, "float8_e3m4": 1, "float8_e4m3": 1,
    "float8_e4m3b11fnuz": 1, "float8_e4m3fn": 1, "float8_e4m3fnuz": 1,
    "float8_e5m2": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
}
#: The names a misspelling is matched against (``'bf16'``: ``'bfloat16'``).
_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
          "uint64", "float16", "float32", "float64", "complex64", "complex128",
          *LOWP)
#: DLPack's sub-byte floats: several items to a byte, which no buffer has.
_SUB_BYTE = ("float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")
_LOWP_FORMAT = re.compile(r"^([@=<>!]?)\[(\w+)\]$")

_STRUCT_FORMAT = re.compile(r"^([@=<>!]?)(\?|[bBhHiIlLqQnNPefd]|Z[efd])$")
_NATIVE = "<" if sys.byteorder == "little" else ">"
# struct byte-order prefix -> numpy byte order
_ORDERS: Dict[str, Literal["=", "<", ">"]] = {
    "": "=", "@": "=", "=": "=", "!": ">", "<": "<", ">": ">",
}


def _not_understood(dtype: Any) -> TypeError:
    """The refusal of a spelling: the closest supported name when one is
    close (``'bf16'``: ``'bfloat16'``), the float8 names when it looks like
    one, then how to spell a dtype."""
    hints = []
    if isinstance(dtype, str):
        close = difflib.get_close_matches(dtype.lower(), _NAMES, n=1, cutoff=0.6)
        if close:
            hints.append(f"did you mean {close[0]!r}?")
        if "8" in dtype and ("f" in dtype.lower() or "e" in dtype.lower()):
            hints.append("the 8-bit floats are " + ", ".join(
                name for name in LOWP if name.startswith("float8")))
    hint = f" ({'; '.join(hints)})" if hints else ""
    return TypeError(f"dtype {dtype!r} is not understood{hint}: {_SPELLINGS}")


def _from_struct(fmt: str) -> np.dtype[Any]:
    match = _STRUCT_FORMAT.fullmatch(fmt)
    if match is None:
        raise _not_understood(fmt)
    order, code = match.groups()
    try:
        size = struct.calcsize((order or "@") + code[-1])
    except struct.error:            # 'n', 'N' and 'P' exist in native order only
        raise TypeError(f"dtype {fmt!r}: {code!r} needs native byte order "
                        "('@' or none)") from None
    if code == "Ze":                # numpy has no complex of two float16
        raise TypeError(f"dtype {fmt!r} (a complex of two float16) is not "
                        f"supported: {_SUPPORTED}")
    if code.startswith("Z"):
        kind, size = "c", 2 * size
    else:
        kind = ("b" if code == "?" else "f" if code in "efd"
                else "u" if code.isupper() else "i")
    return np.dtype(f"{kind}{size}").newbyteorder(_ORDERS[order])


def lowp_dtype(name: str) -> np.dtype[Any]:
    """The numpy dtype of the low-precision float ``name``: ml_dtypes' when
    ml_dtypes is installed, else raw bytes of its size."""
    try:
        import ml_dtypes
    except ImportError:
        return np.dtype(f"V{LOWP[name]}")
    scalar: type = getattr(ml_dtypes, name)
    return np.dtype(scalar)


def _is_lowp(dt: np.dtype[Any]) -> bool:
    """Whether ``dt`` is ml_dtypes' dtype of a low-precision float (their
    kinds and ``str`` vary: ``'<V2'``, ``'<f1'``; their names do not)."""
    return dt.fields is None and dt.name in LOWP


def _refuse_sub_byte(dtype: Any, name: str) -> None:
    if name in _SUB_BYTE:
        raise TypeError(f"dtype {dtype!r}: {name} packs items into less than "
                        "a byte; a buffer's items are whole bytes")


def _swapped(order: str, name: str) -> bool:
    """Whether a ``[name]`` format's byte-order prefix swaps its items: a
    foreign order on items of more than one byte (a byte has no order, so
    ``'>[float8_e4m3fn]'`` is ``'[float8_e4m3fn]'``, as ``'>b'`` is ``'b'``)."""
    return order not in ("", "@", "=", _NATIVE) and LOWP[name] > 1


def _lowp_name(dtype: str) -> Optional[str]:
    """The low-precision float a name or buffer format names, or None."""
    match = _LOWP_FORMAT.fullmatch(dtype)
    if match is None:
        _refuse_sub_byte(dtype, dtype)
        return dtype if dtype in LOWP else None
    order, name = match.groups()
    _refuse_sub_byte(dtype, name)
    if name not in LOWP:
        raise TypeError(f"dtype {dtype!r}: {name!r} is not a "
                        f"low-precision float (expected one of {', '.join(LOWP)})")
    if _swapped(order, name):
        raise TypeError(f"dtype {dtype!r}: a byte-swapped {name} is not supported")
    return name


def resolve(dtype: Any) -> Tuple[str, int, np.dtype[Any], str]:
    """``(buffer format, itemsize, numpy dtype, typestr)`` of ``dtype``.

    Raises TypeError naming the value for anything that is not a supported
    fixed-size numeric type.
    """
    if type(dtype).__name__ == "dtype" and type(dtype).__module__ == "torch":
        text = str(dtype)
        if not text.startswith("torch.") or "[" in text:
            raise TypeError(f"dtype {dtype!r}: a torch dtype is named "
                            f"'torch.<name>', not {text!r}")
        dtype = text[len("torch."):]
    if isinstance(dtype, str):
        # its characters, not a subclass's __eq__ and __hash__: the name
        # found in LOWP is written into the format
        dtype = str.__str__(dtype)
    lowp = _lowp_name(dtype) if isinstance(dtype, str) else None
    if lowp is None:
        try:
            dt = np.dtype(dtype)
        except (TypeError, ValueError, SyntaxError, OverflowError):
            # NumPy's parser raises any of these for a malformed spelling
            if not isinstance(dtype, str):
                raise _not_understood(dtype) from None
            dt = _from_struct(dtype)
        _refuse_sub_byte(dtype, dt.name)
        lowp = dt.name if _is_lowp(dt) else None
        if lowp is not None and dt.itemsize > 1 and not dt.isnative:
            raise TypeError(f"dtype {dtype!r}: a byte-swapped {lowp} is not "
                            "supported")
    if lowp is not None:
        dt = lowp_dtype(lowp)
        # no array-interface typestr names it: its format, byte order
        # explicit, which array-interface consumers refuse and pickle keeps
        order = _NATIVE if dt.itemsize > 1 else ""
        return f"[{lowp}]", dt.itemsize, dt, f"{order}[{lowp}]"
    code = _CODES.get((dt.kind, dt.itemsize))
    if code is None or dt.fields is not None or dt.subdtype is not None:
        raise TypeError(f"dtype {dtype!r} ({dt}) is not supported: {_SUPPORTED}")
    order = dt.byteorder
    if dt.itemsize == 1 or order in ("=", "|", _NATIVE):
        dt = dt.newbyteorder("=")
        fmt = code
    else:
        fmt = order + code
    return fmt, dt.itemsize, dt, dt.str


def resolve_format(fmt: str) -> Tuple[str, int, np.dtype[Any], str]:
    """:func:`resolve` of a buffer format, read by struct's rules: ``'=l'``
    is a 4-byte int, where numpy reads the spelling ``'=l'`` as its 8-byte
    ``long``.  TypeError naming the format for one bufferext does not read
    (a numpy spelling such as ``'<i4'`` is no buffer format)."""
    try:
        if _LOWP_FORMAT.fullmatch(fmt) is not None:
            return resolve(fmt)
        return resolve(_from_struct(fmt))
    except TypeError as exc:
        raise TypeError(f"buffer format {fmt!r} names no type bufferext "
                        "reads: a struct format of one bool, integer, float "
                        "or complex ('?', 'i', '<d', 'Zf', ...), or "
                        "'[name]' of a low-precision float"
                        + (f" ({exc})" if "native byte order" in str(exc)
                           else "")) from None


def describe(fmt: Optional[str], itemsize: int) -> str:
    """The element type a buffer's format names, in words, for reports."""
    fmt = "B" if fmt is None else fmt
    match = _LOWP_FORMAT.fullmatch(fmt)
    if match is not None and match.group(2) in LOWP:
        if _swapped(*match.groups()):
            return (f"format {fmt!r}: a byte-swapped {match.group(2)}, which "
                    f"bufferext does not read, {itemsize}-byte items")
        return (f"format {fmt!r}: {match.group(2)}, {itemsize}-byte items (a "
                "low-precision float: struct, numpy and memoryview.tolist() "
                "refuse them, DLPack keeps them)")
    # read as a buffer format (struct's sizes: '=l' is 4 bytes), never as a
    # numpy spelling ('float32' is no buffer format)
    try:
        name = str(_from_struct(fmt))
    except TypeError:
        name = "a type bufferext does not name"
    return f"format {fmt!r}: {name}, {itemsize}-byte items"


def name_of(dt: np.dtype[Any]) -> str:
    """A spelling of ``dt`` that :func:`resolve` and ``numpy.dtype`` read
    back: a low-precision float's name (its ``str`` is only ``'<V2'``)."""
    return dt.name if _is_lowp(dt) else dt.str


#: What a fill value of each kind fills: a bool anything, an int any
#: number, a float floats and complex, a complex only complex.
_FILLS = {"b": "biufc", "i": "iufc", "u": "iufc", "f": "fc", "c": "c"}


def fill_item(value: Any, dt: np.dtype[Any], fmt: str, who: str) -> bytes:
    """The bytes of ``value`` as one item of ``dt`` (buffer format ``fmt``),
    for a device buffer's ``fill``: a scalar of the dtype's kind (a bool
    fills anything, an int any number, a float floats and complex; a
    low-precision float is a float), converted as numpy's ``fill`` converts
    it (a value past the dtype's range is refused, never wrapped)."""
    scalar = value                      # what numpy's fill converts
    if isinstance(value, (bool, np.bool_)):
        kind, name = "b", "bool"
    elif isinstance(value, int):        # any size: numpy's fill says if it fits
        kind, name = "i", "int"
    elif isinstance(value, (float, complex)):
        kind, name = ("f", "float") if isinstance(value, float) else ("c", "complex")
    else:
        arr = np.asarray(value)
        if arr.ndim != 0:
            raise ValueError(f"{who}: value must be a scalar, not {value!r}")
        # a numpy scalar: numpy's fill checks its range (a 0-d array's it
        # wraps); a low-precision float's as a Python float (exact), which
        # converts to any of them
        kind, name, scalar = arr.dtype.kind, str(arr.dtype), arr[()]
        if _is_lowp(arr.dtype):
            kind, name, scalar = "f", name_of(arr.dtype), float(arr)
    if fmt.startswith("[") and not _is_lowp(dt):
        # the raw stand-in of a low-precision float ('V2'): no conversion
        raise ValueError(f"{who}: converting {value!r} to {fmt} needs ml_dtypes "
                         "(pip install ml_dtypes)")
    target = name_of(dt) if _is_lowp(dt) else str(dt)
    if ("f" if _is_lowp(dt) else dt.kind) not in _FILLS.get(kind, ""):
        raise ValueError(f"{who}: value {value!r} ({name}) is not a {target} "
                         "scalar")
    item = np.empty((), dt)
    try:
        item.fill(scalar)
    except OverflowError:
        raise OverflowError(f"{who}: value {value!r} does not fit {target}") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{who}: value {value!r} ({name}) cannot be converted "
                         f"to {target}: {exc}") from None
    return item.tobytes()


def wire_dtype(dt: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype MPI moves ``dt`` as: a low-precision float as the unsigned
    integer of its size, its bits (numpy cannot export ml_dtypes arrays
    through the buffer protocol, and MPI has no such type); any other dtype
    itself."""
    return np.dtype(f"u{dt.itemsize}") if _is_lowp(dt) else dt


def wire(value: Any) -> Any:
    """A numpy array of a low-precision float as a view of
    :func:`wire_dtype`; anything else as it is."""
    if isinstance(value, np.ndarray) and _is_lowp(value.dtype):
        return value.view(wire_dtype(value.dtype))
    return value


def host_view(obj: Any) -> "np.ndarray[Any, np.dtype[Any]]":
    """A numpy view (no copy) of a CPU buffer-protocol exporter; the items
    of a low-precision float format (which numpy cannot parse) are read as
    their dtype.  The whole format is read: a byte-swapped, sub-byte or
    unknown ``[name]``, or items of another size than the name's, raise
    TypeError naming the format.  Those views must be C-contiguous."""
    view = memoryview(obj)
    if _LOWP_FORMAT.fullmatch(view.format) is None:
        return np.asarray(view)
    who = f"{type(obj).__name__} exports format {view.format!r}"
    try:
        name = _lowp_name(view.format)
    except TypeError as exc:
        raise TypeError(f"{who}, which bufferext does not read ({exc})") from None
    assert name is not None         # the pattern matched
    dt = lowp_dtype(name)
    if view.itemsize != dt.itemsize:
        raise TypeError(f"{who} with {view.itemsize}-byte items; {name} has "
                        f"{dt.itemsize}")
    if not view.c_contiguous:
        raise ValueError(f"{who}: a strided view of it is not read (C-contiguous "
                         "only)")
    return np.frombuffer(view, dt).reshape(view.shape or ())
