"""Producer side of bufferext.h, through the configurable test exporter
(tests/capi/testcapi.c): BufferExt_SetSupportedFlags,
BufferExt_SetExtendedGetBuffer, BufferExt_SetDevice, and the exporter's
options.  The device memory here is a test double: host memory labelled
with a device name."""

from __future__ import annotations

import pytest

ATTR = "__buffer_supported_flags__"
ENTRY = "__buffer_extended__"
EXTENDED = 0x7FFF0000


def test_declarations_are_type_attributes(capi):
    assert ATTR not in vars(capi.ExporterUndeclared)
    assert vars(capi.ExporterLegacy)[ATTR] == 0
    assert vars(capi.ExporterSimpleOnly)[ATTR] == -1
    assert vars(capi.ExporterFull)[ATTR] == capi.MASK_FULL
    assert vars(capi.ExporterNoDevice)[ATTR] == capi.MASK_NODEVICE
    assert capi.MASK_FULL & capi.PyBUF_DEVICE
    assert not capi.MASK_NODEVICE & capi.PyBUF_DEVICE
    # the typed entry beside the declaration, a capsule owned by the type
    assert ENTRY not in vars(capi.ExporterUndeclared)
    assert ENTRY not in vars(capi.ExporterNoEntry)
    for name in ("ExporterLegacy", "ExporterSimpleOnly", "ExporterFull",
                 "ExporterNoDevice"):
        assert type(vars(getattr(capi, name))[ENTRY]).__name__ == \
            "PyCapsule", name


def test_set_supported_flags_refuses_values_below_minus_one(capi):
    class Local(bytearray):
        pass

    with pytest.raises(ValueError, match=r"Local: .* not -2"):
        capi.set_supported_flags(Local, -2)
    assert ATTR not in vars(Local)


@pytest.mark.parametrize("value", [0, -1, 0x1C, 0x101FD])
def test_set_supported_flags_on_a_python_class(capi, value):
    class Local(bytearray):
        pass

    assert capi.check_supports(Local(), capi.PyBUF_ND) == 1
    capi.set_supported_flags(Local, value)
    assert vars(Local)[ATTR] == value
    # an extended flag counts only with a typed entry, which a Python
    # class (a bytearray's getbuffer) has none of
    expected = {0: 0x1FD, -1: 0}.get(value, value) & ~EXTENDED
    assert capi.supported_flags(Local()) == expected
    assert capi.check_supports(Local(), capi.PyBUF_ND) == (
        1 if expected & capi.PyBUF_ND else 0)


def test_set_extended_getbuffer_refuses_what_it_cannot_pair(capi):
    # the entry is paired with the type's getbuffer when it is published:
    # a NULL entry, or a type without a getbuffer, is named then
    Local = capi.make_exporter_type("Local", None)
    with pytest.raises(ValueError, match=r"Local: .*needs a typed entry"):
        capi.set_extended_getbuffer(Local, capi.MASK_FULL, False)

    class NoBuffer:
        pass

    with pytest.raises(ValueError, match="NoBuffer: .*the type's own "
                                         "getbuffer"):
        capi.set_extended_getbuffer(NoBuffer, capi.MASK_FULL)
    for cls in (Local, NoBuffer):
        assert ATTR not in vars(cls) and ENTRY not in vars(cls)


def test_declaration_without_entry_honours_no_extended_flag(capi):
    # ExporterNoEntry declares what ExporterFull does, with no typed entry:
    # PyBUF_DEVICE is not honoured, so it never reaches the exporter
    full, bare = capi.ExporterFull(), capi.ExporterNoEntry()
    assert capi.supported_flags(full) == capi.MASK_FULL
    assert capi.supported_flags(bare) == capi.MASK_FULL & ~EXTENDED
    assert capi.check_supports(full, capi.PyBUF_DEVICE) == 1
    assert capi.check_supports(bare, capi.PyBUF_DEVICE) == 0
    assert capi.get_buffer(full, capi.PyBUF_DEVICE)["flags"] == \
        capi.PyBUF_DEVICE                       # answered explicitly
    assert capi.get_buffer(bare, capi.PyBUF_DEVICE)["flags"] == 0
    assert full.exports == bare.exports == 0


def test_memoryview_of_host_exporter(capi):
    x = capi.ExporterFull(5)
    with memoryview(x) as m:
        assert x.exports == 1
        assert m.tolist() == [0, 1, 2, 3, 4]
        assert m.format == "i" and m.shape == (5,)
    assert x.exports == 0


def test_strided_exporter(capi):
    x = capi.ExporterFull(4, strided=True)
    with memoryview(x) as m:
        assert m.strides == (8,)
        assert not m.c_contiguous
        assert m.tolist() == [0, 1, 2, 3]
    d = capi.get_buffer(x, capi.PyBUF_RECORDS_RO)
    assert d["strides"] == (8,) and d["items"] == [0, 1, 2, 3]
    for flags in (capi.PyBUF_SIMPLE, capi.PyBUF_ND, capi.PyBUF_C_CONTIGUOUS,
                  capi.PyBUF_F_CONTIGUOUS, capi.PyBUF_ANY_CONTIGUOUS):
        with pytest.raises(BufferError, match="ExporterFull: buffer is not "
                                              "contiguous"):
            capi.get_buffer(x, flags)
    assert x.exports == 0


def test_readonly_exporter(capi):
    x = capi.ExporterFull(3, readonly=True)
    with pytest.raises(BufferError, match="ExporterFull: buffer is read-only"):
        capi.get_buffer(x, capi.PyBUF_WRITABLE)
    assert capi.get_buffer(x, capi.PyBUF_FULL_RO)["readonly"] is True
    assert memoryview(x).readonly
    assert x.exports == 0


def test_forced_failure_counts_the_call(capi):
    x = capi.ExporterFull(fail=True)
    with pytest.raises(BufferError, match="forced getbuffer failure"):
        capi.get_buffer(x, capi.PyBUF_SIMPLE)
    with pytest.raises(BufferError, match="forced getbuffer failure"):
        memoryview(x)
    assert x.getbuffer_calls == 2
    assert x.exports == 0


def test_host_exporter_answers_device_requests_explicitly(capi):
    x = capi.ExporterFull(2)
    d = capi.get_buffer(x, capi.PyBUF_FULL_RO | capi.PyBUF_DEVICE)
    assert d["flags"] == capi.PyBUF_DEVICE
    assert d["device"] is None and d["device_info"] is None
    assert d["is_device"] is False and d["items"] == [0, 1]
    d = capi.get_buffer(x, capi.PyBUF_FULL_RO)
    assert d["flags"] == 0 and d["device"] is None
    assert x.exports == 0


@pytest.mark.parametrize("device, key, value", [
    ("bufferext.cuda", "device", 1), ("bufferext.ve", "node", 3)])
def test_device_exporter(capi, device, key, value):
    x = capi.ExporterFull(4, device=device)
    d = capi.get_buffer(x, capi.PyBUF_FULL_RO | capi.PyBUF_DEVICE)
    assert d["flags"] == capi.PyBUF_DEVICE and d["ext_flags"] == 0
    assert d["device"] == device and d["is_device"] is True
    assert d["device_info"] == x.info_address
    assert d["info"]["version"] == 0x10000 and d["info"][key] == value
    assert d["buf"] == x.address and d["items"] is None
    assert d["obj_is_exporter"] is True
    assert x.exports == 0 and x.getbuffer_calls == 1


@pytest.mark.parametrize("flags_name", ["PyBUF_SIMPLE", "PyBUF_FULL_RO",
                                        "PyBUF_FULL", "PyBUF_ND"])
def test_device_exporter_refuses_cpu_requests(capi, flags_name):
    x = capi.ExporterFull(device="bufferext.cuda")
    with pytest.raises(BufferError, match=r"ExporterFull: memory on device "
                                          r"'bufferext.cuda'"):
        capi.get_buffer(x, getattr(capi, flags_name))
    assert x.exports == 0 and x.getbuffer_calls == 1


def test_device_memory_never_reaches_memoryview_or_bytes(capi):
    x = capi.ExporterFull(device="bufferext.cuda")
    with pytest.raises(BufferError, match="bufferext.cuda"):
        memoryview(x)
    with pytest.raises(BufferError, match="bufferext.cuda"):
        bytes(x)
    with pytest.raises(BufferError, match="bufferext.cuda"):
        bytearray(x)
    assert x.exports == 0


def test_bad_constructor_arguments(capi):
    with pytest.raises(ValueError, match="nitems must be in"):
        capi.ExporterFull(-1)
    with pytest.raises(ValueError, match="unknown liar mode 'fib'"):
        capi.ExporterFull(liar="fib")
    with pytest.raises(TypeError):
        capi.ExporterFull(device=3)


def test_set_device_with_device_request(capi):
    x = capi.ExporterFull()
    d = capi.set_device(x, capi.PyBUF_DEVICE, "test.dev", True)
    assert d == {"flags": capi.PyBUF_DEVICE, "ext_flags": 0,
                 "device": "test.dev", "device_info": True}
    d = capi.set_device(x, capi.PyBUF_DEVICE | capi.PyBUF_FULL_RO, None,
                        False)
    assert d == {"flags": capi.PyBUF_DEVICE, "ext_flags": 0,
                 "device": None, "device_info": False}


def test_set_device_cpu_without_device_request_writes_nothing(capi):
    d = capi.set_device(capi.ExporterFull(), capi.PyBUF_FULL_RO, None, False)
    assert d == {"flags": 0, "ext_flags": 0, "device": None,
                 "device_info": False}


def test_set_device_refuses_device_memory_to_cpu_consumer(capi):
    with pytest.raises(BufferError, match=r"^testcapi_\w+\.ExporterLegacy: "
                                          r"memory on device 'test\.dev'"):
        capi.set_device(capi.ExporterLegacy(), capi.PyBUF_FULL_RO,
                        "test.dev", True)


def test_factory_types(capi):
    t = capi.make_exporter_type("Made", None)
    assert t.__name__ == "Made" and issubclass(t, capi.ExporterUndeclared)
    assert ATTR not in vars(t)
    assert capi.supported_flags(t()) == capi.BUFFEREXT_LEGACY_FLAGS
    t = capi.make_exporter_type("MadeSimple", -1)
    assert vars(t)[ATTR] == -1
    assert capi.supported_flags(t(2)) == 0
