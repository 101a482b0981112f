"""The gate (Modules/gate.c): the one validation of an export another
exporter filled, before any of our code reads it, and the request rules
our own re-exports apply in turn (Modules/export.h)."""

from __future__ import annotations

from types import ModuleType

import pytest

import bufferext
from bufferext import BufferFlags as F

WITHOUT_INDIRECT = ["RECORDS_RO", "RECORDS", "STRIDED_RO", "STRIDED",
                    "CONTIG_RO", "ND", "SIMPLE", "FORMAT"]


def pil_style(capi: ModuleType) -> object:
    """An exporter of two float64 behind suboffsets, whatever is asked."""
    return capi.Configurable(64, 16, 8, 1, "d", shape=(2,), strides=(8,),
                             suboffsets=(0,))


@pytest.mark.parametrize("request_name", WITHOUT_INDIRECT)
def test_suboffsets_need_an_indirect_request(c99: ModuleType,
                                             request_name: str) -> None:
    # every request without PyBUF_INDIRECT, not the default one only: a
    # consumer that did not ask for suboffsets would follow the pointers
    # as data
    x = pil_style(c99)
    flags = getattr(F, request_name) | F.DEVICE
    with pytest.raises(BufferError, match="suboffsets is set although "
                                          "PyBUF_INDIRECT was not requested"):
        bufferext.get_buffer(x, flags)
    assert x.exports == 0


@pytest.mark.parametrize("request_name", WITHOUT_INDIRECT)
def test_a_view_with_suboffsets_is_reexported_only_indirectly(
        c99: ModuleType, request_name: str) -> None:
    x = pil_style(c99)
    with bufferext.get_buffer(x, F.FULL_RO | F.DEVICE) as view:
        assert view.suboffsets == (0,)
        with pytest.raises(BufferError, match="buffer has suboffsets: "
                                              "request PyBUF_INDIRECT"):
            bufferext.get_buffer(view, getattr(F, request_name))
        with bufferext.get_buffer(view, F.FULL_RO) as again:
            assert again.suboffsets == (0,)
    assert x.exports == 0
