"""Two extensions built separately interoperate through the header alone:
the producer in the C99 module, the consumer in the C++17 one (and back)."""

from __future__ import annotations

import pytest

DEVICE = 0x10000


@pytest.mark.parametrize("producer, consumer", [("c99", "cxx17"),
                                                ("cxx17", "c99"),
                                                ("c11", "cxx11")])
def test_device_export_across_modules(capi_modules, producer, consumer):
    prod, cons = capi_modules[producer], capi_modules[consumer]
    x = prod.ExporterFull(4, device=cons.DEVICE_CUDA)
    assert cons.check_supports(x, DEVICE | cons.PyBUF_FULL_RO) == 1
    d = cons.get_buffer(x, cons.PyBUF_FULL_RO | DEVICE)
    assert d["device"] == "bufferext.cuda" and d["is_device"] is True
    assert d["info"]["version"] == cons.BUFFEREXT_CUDA_INFO_VERSION
    assert d["device_info"] == x.info_address
    with pytest.raises(BufferError, match=f"{producer}.ExporterFull"):
        cons.get_buffer(x, cons.PyBUF_FULL_RO)
    assert x.exports == 0


def test_declaration_and_refusal_across_modules(c99, cxx17):
    x = c99.ExporterSimpleOnly()
    assert cxx17.supported_flags(x) == 0
    with pytest.raises(BufferError, match="testcapi_c99.ExporterSimpleOnly"):
        cxx17.get_buffer(x, cxx17.PyBUF_ND)
    assert x.getbuffer_calls == 0
    assert cxx17.supported_flags(c99.ExporterFull()) == c99.MASK_FULL


@pytest.mark.parametrize("liar", ["unasked", "device_noflag", "extra_flags",
                                  "fail_late"])
def test_liar_from_c_caught_by_cxx(c99, cxx17, liar):
    x = c99.ExporterFull(liar=liar)
    flags = 0 if liar == "unasked" else DEVICE
    with pytest.raises(BufferError):
        cxx17.get_buffer(x, flags)
    assert x.exports == 0


def test_host_export_across_modules(c99, cxx17):
    x = cxx17.ExporterFull(5, strided=True)
    d = c99.get_buffer(x, c99.PyBUF_RECORDS_RO | DEVICE)
    assert d["items"] == [0, 1, 2, 3, 4]
    assert d["flags"] == DEVICE and d["device"] is None
    assert x.exports == 0


def test_with_the_bufferext_package(c99):
    """The package's own consumer and producer speak to the test module."""
    import bufferext

    x = c99.ExporterFull(3, device="bufferext.cuda")
    with bufferext.get_buffer(x) as view:
        assert view.device == "bufferext.cuda"
        assert x.exports == 1
    assert x.exports == 0
    buf = bufferext.CPUBuffer((2, 3), "int32")
    d = c99.get_buffer(buf, c99.PyBUF_FULL_RO | DEVICE)
    assert d["flags"] == DEVICE and d["device"] is None
    assert d["shape"] == (2, 3)
    assert c99.check_supports(buf, DEVICE) == 1
    assert bufferext.check_buffer_supports(c99.ExporterNoDevice(),
                                           DEVICE) is False
