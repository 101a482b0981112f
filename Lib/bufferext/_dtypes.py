"""Element types of the producers: numpy-style dtypes and struct formats.

A producer's element type is one of the fixed-size numeric types that the
buffer protocol, DLPack and the array interfaces all express: bool, signed
and unsigned integers of 1-8 bytes, float16/32/64 and complex64/128, in
either byte order.  Numpy-style spellings win; struct-module spellings that
numpy does not accept (``'@d'``, ``'!i'``, ``'Zd'``, ``'n'``) are read with
struct's standard sizes.
"""

from __future__ import annotations

import re
import struct
import sys
from typing import Any, Dict, Literal, Tuple

import numpy as np

__all__ = ["resolve"]

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
_TYPES = "bool, int8..int64, uint8..uint64, float16/32/64 or complex64/128"
_SUPPORTED = "expected " + _TYPES
#: How to spell one, for a dtype that is not understood at all.
_SPELLINGS = ("give a numpy dtype (e.g. 'float32', numpy.int16, '<i4') or a "
              "struct format of one item (e.g. 'd', '<h', 'Zf') of a supported "
              "type: " + _TYPES)

_STRUCT_FORMAT = re.compile(r"^([@=<>!]?)(\?|[bBhHiIlLqQnNefd]|Z[efd])$")
_NATIVE = "<" if sys.byteorder == "little" else ">"
# struct byte-order prefix -> numpy byte order
_ORDERS: Dict[str, Literal["=", "<", ">"]] = {
    "": "=", "@": "=", "=": "=", "!": ">", "<": "<", ">": ">",
}


def _from_struct(fmt: str) -> np.dtype[Any]:
    match = _STRUCT_FORMAT.fullmatch(fmt)
    if match is None:
        raise TypeError(f"dtype {fmt!r} is not understood: {_SPELLINGS}")
    order, code = match.groups()
    try:
        size = struct.calcsize((order or "@") + code[-1])
    except struct.error:            # 'n' and 'N' exist in native order only
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


def resolve(dtype: Any) -> Tuple[str, int, np.dtype[Any], str]:
    """``(struct format, itemsize, numpy dtype, typestr)`` of ``dtype``.

    Raises TypeError naming the value for anything that is not a supported
    fixed-size numeric type.
    """
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError, SyntaxError, OverflowError):
        # NumPy's parser raises any of these for a malformed spelling
        if not isinstance(dtype, str):
            raise TypeError(f"dtype {dtype!r} is not understood: "
                            f"{_SPELLINGS}") from None
        dt = _from_struct(dtype)
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
