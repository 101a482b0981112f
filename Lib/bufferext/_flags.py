"""Buffer request flags: every PEP 3118 flag plus the extended-protocol ones."""

from __future__ import annotations

import enum

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
