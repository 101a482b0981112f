"""Buffer request flags: every PEP 3118 flag plus the extended-protocol ones."""

from __future__ import annotations

import enum
from typing import List

from . import _bufferext

__all__ = ["BufferFlags"]


class BufferFlags(enum.IntFlag):
    """Request flags of the buffer protocol (``PyBUF_*``), extended.

    The values are CPython's ``PyBUF_*`` constants (``inspect.BufferFlags``
    on 3.12+), plus :attr:`DEVICE` from the draft PEP and :attr:`REQUIRED`,
    the flags an exporter must never ignore.
    """

    SIMPLE = 0x0
    WRITABLE = 0x1
    FORMAT = 0x4
    ND = 0x8
    STRIDES = 0x10 | ND
    C_CONTIGUOUS = 0x20 | STRIDES
    F_CONTIGUOUS = 0x40 | STRIDES
    ANY_CONTIGUOUS = 0x80 | STRIDES
    INDIRECT = 0x100 | STRIDES
    CONTIG = ND | WRITABLE
    CONTIG_RO = ND
    STRIDED = STRIDES | WRITABLE
    STRIDED_RO = STRIDES
    RECORDS = STRIDES | WRITABLE | FORMAT
    RECORDS_RO = STRIDES | FORMAT
    FULL = INDIRECT | WRITABLE | FORMAT
    FULL_RO = INDIRECT | FORMAT
    #: Extended request: the consumer accepts non-CPU memory (draft PEP).
    DEVICE = _bufferext.PyBUF_DEVICE
    #: The flags an exporter must not ignore (``PyBUF_REQUIRED_FLAGS``).
    REQUIRED = _bufferext.PyBUF_REQUIRED_FLAGS
    #: Every request bit that existed before the draft: what a declared
    #: ``__buffer_supported_flags__`` of 0 (or none) means.
    LEGACY = _bufferext.LEGACY_FLAGS

    # One readable form on every Python: enum's repr and str of an IntFlag
    # changed in 3.11 (str became the decimal int) and 3.12 (aliases left
    # the decomposition), and listed every overlapping member.
    def names(self) -> List[str]:
        """The fewest member names whose union is this value, largest
        first (``FULL``, ``DEVICE``); bits no member has are given in hex;
        ``["SIMPLE"]`` for 0."""
        value = int(self)
        if value == 0:
            return ["SIMPLE"]
        left, names = value, []
        while left:
            best, best_bits = None, 0
            for name, member in type(self).__members__.items():
                bits = int(member)
                if bits and bits & ~value == 0 and name == member.name:
                    covered = bin(bits & left).count("1")
                    if covered > best_bits:
                        best, best_bits = name, covered
            if best is None:
                names.append(hex(left))
                break
            names.append(best)
            left &= ~int(type(self)[best])
        return names

    def __repr__(self) -> str:
        if int(self) < 0:
            return f"{type(self).__name__}({int(self):#x})"
        return f"{type(self).__name__}.{'|'.join(self.names())} " \
               f"({int(self):#x})"

    __str__ = __repr__

    def __format__(self, format_spec: str) -> str:
        # Format specs stay numeric ("{:x}", "{:d}"); an empty one gives
        # str(), as int's own does (3.9 and 3.10 would format the str).
        return int.__format__(self, format_spec)
