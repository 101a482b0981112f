"""The parity suite: one table of outcomes, the same on every interpreter
and in every mode of the header.

The table records what the extended buffer protocol does, row by row:

* ``request/<exporter>/<flags>`` and ``plain/...``: an acquisition through
  the header's consumer (``BufferExt_GetBuffer``) and through CPython's
  ``PyObject_GetBuffer`` into an extended buffer, for every kind of exporter
  and every request flag with and without ``PyBUF_DEVICE``: the exception or
  what was exported (flags, device, device_info, layout), whether the
  exporter ran, and its live exports after the release;
* ``supports/<exporter>`` and ``mask/<exporter>``: the declarations as
  ``PyObject_CheckBufferSupports`` (bit by bit) and
  ``BufferExt_SupportedFlags`` read them, inheritance and later changes;
* ``door/<door>/<exporter>``: the paths where a flags int that Python code
  chose meets a bare ``Py_buffer`` (PEP 688 ``__buffer__``,
  ``PickleBuffer``, ``memoryview._from_flags``, ``_testbuffer.ndarray``);
* ``cpu-only/<consumer>``: the standard library's CPU-only consumers handed
  device memory;
* ``value/<name>``: layout sizes and constants.

Every run asserts what must hold in every mode (device memory never reaches
a CPU-only consumer, a refusal leaves no export behind).  With
``BUFFEREXT_PARITY_OUT=FILE`` it also writes the table, and
``tests/parity_diff.py`` compares two tables against the short, explained
allow-list ``tests/parity_allow.txt``: stock CPython in backport mode, the
patched CPython of ``cpython/`` in native mode, and the patched CPython with
``-DBUFFEREXT_FORCE_BACKPORT``.

``test_mixed_builds_interoperate`` loads a native and a backport build of
the test extension into one process (on an interpreter that implements the
draft) and crosses exporters and consumers.
"""

from __future__ import annotations

import array
import binascii
import ctypes
import hashlib
import io
import json
import marshal
import mmap
import os
import pickle
import re
import struct
import sys
import zlib
from types import ModuleType
from typing import Any, Callable, Dict, List, Tuple

import pytest

import bufferext
from _helpers import HEADER_NATIVE, NATIVE_INTERPRETER, build_native

DEVICE = 0x10000
CUDA = "bufferext.cuda"
NAMED_FLAGS: List[Tuple[str, int]] = [
    ("SIMPLE", 0x0), ("WRITABLE", 0x1), ("FORMAT", 0x4), ("ND", 0x8),
    ("STRIDES", 0x18), ("C_CONTIGUOUS", 0x38), ("F_CONTIGUOUS", 0x58),
    ("ANY_CONTIGUOUS", 0x98), ("INDIRECT", 0x118), ("FULL_RO", 0x11C),
]
REQUESTS: List[Tuple[str, int]] = [
    (name + suffix, flags | extra)
    for name, flags in NAMED_FLAGS
    for suffix, extra in (("", 0), ("|DEVICE", DEVICE))]


def _outcome(call: Callable[[], Any], counter: Any = None) -> Dict[str, Any]:
    """Run one call: the exception's type, or the fields of what it
    returned; with an exporter as `counter`, whether it ran and what it
    still exports afterwards."""
    calls = getattr(counter, "getbuffer_calls", None)
    try:
        got = call()
    except Exception as e:       # noqa: BLE001 - the table records it
        row: Dict[str, Any] = {"raises": type(e).__name__}
    else:
        if isinstance(got, dict):
            row = {k: got[k] for k in ("flags", "device", "len", "ndim",
                                       "shape", "strides", "readonly")
                   if k in got}
            row["device_info"] = got.get("device_info") is not None
        elif isinstance(got, memoryview):
            row = {"memoryview": [got.nbytes, got.ndim, list(got.shape or ())]}
            got.release()
        else:
            row = {"result": repr(got) if not isinstance(got, bool) else got}
    if calls is not None:
        row["ran"] = counter.getbuffer_calls != calls
    exports = getattr(counter, "exports", None)
    if exports is not None:
        row["exports"] = exports
    return row


class Table:
    """The outcome table of one run: {row: outcome}, JSON-ready."""

    def __init__(self) -> None:
        self.rows: Dict[str, Any] = {}

    def add(self, key: str, value: Any) -> None:
        assert key not in self.rows, f"row {key} recorded twice"
        self.rows[key] = value

    def dump(self, path: str, meta: Dict[str, Any]) -> None:
        with open(path, "w") as f:
            json.dump({"meta": meta, "rows": self.rows}, f, indent=1,
                      sort_keys=True)


def _exporters(tc: ModuleType) -> Dict[str, Callable[[], Any]]:
    """Every kind of exporter, as a factory (one fresh object per row)."""
    import numpy

    class SimpleOnly(bytearray):
        __buffer_supported_flags__ = -1

    class SimpleOnlySub(SimpleOnly):
        pass

    class Declared(bytearray):
        __buffer_supported_flags__ = 0x1FD | DEVICE   # a lie: bytearray

    class Keeping(tc.ExporterFull):      # keeps the C getbuffer
        pass

    kinds: Dict[str, Callable[[], Any]] = {
        "Undeclared": lambda: tc.ExporterUndeclared(),
        "Legacy": lambda: tc.ExporterLegacy(),
        "SimpleOnly": lambda: tc.ExporterSimpleOnly(),
        "Full": lambda: tc.ExporterFull(),
        "NoDevice": lambda: tc.ExporterNoDevice(),
        "Full(device)": lambda: tc.ExporterFull(device=CUDA),
        "Full(readonly)": lambda: tc.ExporterFull(readonly=True),
        "Full(strided)": lambda: tc.ExporterFull(strided=True),
        "Keeping(device)": lambda: Keeping(device=CUDA),
        "bytes": lambda: b"abcd",
        "bytearray": lambda: bytearray(b"abcd"),
        "memoryview": lambda: memoryview(b"abcd"),
        "array": lambda: array.array("i", [1, 2, 3]),
        "ctypes": lambda: (ctypes.c_int * 3)(),
        "numpy": lambda: numpy.arange(6, dtype="i4").reshape(2, 3),
        "CPUBuffer": lambda: bufferext.CPUBuffer((2, 3), "i4"),
        "py:SimpleOnly": lambda: SimpleOnly(b"abcd"),
        "py:SimpleOnlySub": lambda: SimpleOnlySub(b"abcd"),
        "py:Declared": lambda: Declared(b"abcd"),
    }
    if sys.version_info >= (3, 12):
        class PyBuffer:
            __buffer_supported_flags__ = 0x1FD | DEVICE

            def __buffer__(self, flags: int) -> memoryview:
                return memoryview(b"abcd")

        class Overriding(tc.ExporterFull):
            def __buffer__(self, flags: int) -> memoryview:
                return memoryview(b"abcd")

        kinds["py:__buffer__"] = PyBuffer
        kinds["Overriding(device)"] = lambda: Overriding(device=CUDA)
    return kinds


def _cpu_only_consumers() -> Dict[str, Callable[[Any], Any]]:
    """The standard library's consumers of CPU memory."""
    def os_write(x: Any) -> None:
        r, w = os.pipe()
        try:
            os.write(w, x)
        finally:
            os.close(r)
            os.close(w)

    def iadd(x: Any) -> None:
        b = bytearray()
        b += x

    def mmap_assign(x: Any) -> None:
        m = mmap.mmap(-1, 16)
        try:
            m[0:16] = x
        finally:
            m.close()

    return {
        "memoryview": memoryview, "bytes": bytes, "bytearray": bytearray,
        "bytearray+=": iadd, "join": lambda x: b"".join([x]),
        "struct.unpack_from": lambda x: struct.unpack_from("b", x),
        "struct.pack_into": lambda x: struct.pack_into("b", x, 0, 1),
        "array.frombytes": lambda x: array.array("b").frombytes(x),
        "io.BytesIO": io.BytesIO, "BytesIO.write": lambda x: io.BytesIO().write(x),
        "hashlib.sha256": hashlib.sha256, "zlib.compress": zlib.compress,
        "binascii.hexlify": binascii.hexlify, "os.write": os_write,
        "marshal.dumps": marshal.dumps, "PickleBuffer": pickle.PickleBuffer,
        "re.match": lambda x: re.match(b"0", x),
        "int.from_bytes": lambda x: int.from_bytes(x, "little"),
        "float": float, "str": lambda x: str(x, "ascii"),
        "ctypes.from_buffer": lambda x: (ctypes.c_char * 4).from_buffer(x),
        "mmap[:]=": mmap_assign,
        "startswith": lambda x: b"0123".startswith(x),
    }


def collect(tc: ModuleType) -> Table:
    """The whole table, with `tc` (a testcapi build) as the header's
    consumer and the source of the test exporters."""
    table = Table()
    kinds = _exporters(tc)
    for kind, make in kinds.items():
        for name, flags in REQUESTS:
            for path, consume in (("request", tc.get_buffer),
                                  ("plain", tc.plain_get_buffer)):
                x = make()
                table.add(f"{path}/{kind}/{name}",
                          _outcome(lambda: consume(x, flags), x))
        x = make()
        table.add(f"supports/{kind}",
                  hex(sum(1 << b for b in range(17)
                          if tc.check_supports(x, 1 << b))))
        table.add(f"mask/{kind}", _outcome(lambda: hex(tc.supported_flags(x))))

    # the doors: flags chosen in Python meet a bare Py_buffer
    try:
        import _testbuffer
    except ImportError:          # pragma: no cover - a CPython without it
        _testbuffer = None
    doors: Dict[str, Callable[[Any, int], Any]] = {
        "from_flags": lambda x, f: memoryview._from_flags(x, f),  # type: ignore[attr-defined]
    }
    if sys.version_info >= (3, 12):
        doors["__buffer__"] = lambda x, f: x.__buffer__(f)
        doors["PickleBuffer.__buffer__"] = (
            lambda x, f: pickle.PickleBuffer(x).__buffer__(f))
    if _testbuffer is not None:
        doors["_testbuffer.ndarray"] = (
            lambda x, f: _testbuffer.ndarray(x, getbuf=f).tobytes())
    for door, call in doors.items():
        for kind in ("Full", "Full(device)", "Keeping(device)", "bytes",
                     "CPUBuffer", "numpy"):
            x = kinds[kind]()
            table.add(f"door/{door}/{kind}",
                      _outcome(lambda: call(x, 0x11C | DEVICE), x))

    # CPU-only consumers and device memory
    for name, consume in _cpu_only_consumers().items():
        x = tc.ExporterFull(device=CUDA)
        table.add(f"cpu-only/{name}", _outcome(lambda: consume(x), x))

    # a declaration changed after the class was made, and inheritance
    class Changing(bytearray):
        __buffer_supported_flags__ = -1

    class ChangingSub(Changing):
        pass

    steps = [("declared -1", None), ("set 0", 0), ("set ND", 0x8),
             ("set -1", -1), ("deleted", "del")]
    for label, value in steps:
        if value == "del":
            del Changing.__buffer_supported_flags__
        elif value is not None:
            Changing.__buffer_supported_flags__ = value
        for obj_name, obj in (("Changing", Changing(b"ab")),
                              ("ChangingSub", ChangingSub(b"ab"))):
            table.add(f"change/{label}/{obj_name}",
                      [tc.check_supports(obj, 0x8),
                       _outcome(lambda: tc.get_buffer(obj, 0x8))])

    class Meta(type):
        __buffer_supported_flags__ = -1

    class WithMeta(bytearray, metaclass=Meta):
        pass

    table.add("change/metaclass", tc.check_supports(WithMeta(b"a"), 0x8))

    # layout and values
    import inspect
    values = {
        "sizeof(Py_buffer)": tc.SIZEOF_PY_BUFFER,
        "sizeof(Py_buffer_extended)": tc.SIZEOF_PY_BUFFER_EXTENDED,
        "PyBUF_DEVICE": tc.PyBUF_DEVICE,
        "PyBUF_REQUIRED_FLAGS": tc.PyBUF_REQUIRED_FLAGS,
        "LEGACY_FLAGS": tc.BUFFEREXT_LEGACY_FLAGS,
        "EXTENDED_FLAGS": tc.BUFFEREXT_EXTENDED_FLAGS,
        "ABI_VERSION": tc.BUFFEREXT_ABI_VERSION,
        "BufferFlags.DEVICE": int(bufferext.BufferFlags.DEVICE),
        "inspect.BufferFlags.DEVICE": int(getattr(
            getattr(inspect, "BufferFlags", None), "DEVICE", 0) or 0),
    }
    for name, value in values.items():
        table.add(f"value/{name}", value)
    return table


@pytest.fixture(scope="module")
def tc(capi_modules: Dict[str, ModuleType]) -> ModuleType:
    return capi_modules["c11"]


def test_parity_table(tc: ModuleType) -> None:
    table = collect(tc)
    rows = table.rows
    # what holds in every mode, on every interpreter
    for key, row in rows.items():
        if key.startswith("cpu-only/"):
            assert "raises" in row and row["exports"] == 0, (key, row)
        if key.startswith(("request/", "plain/")) and isinstance(row, dict):
            if "raises" in row and "exports" in row:
                assert row["exports"] == 0, (key, row)
            if row.get("device") is not None:
                assert key.endswith("|DEVICE"), (key, row)
                assert row["flags"] & DEVICE and row["device_info"], (key, row)
        if key.startswith("door/") and "(device)" in key:
            assert "raises" in row, (key, row)
    assert rows["request/Full(device)/FULL_RO|DEVICE"]["device"] == CUDA
    assert rows["value/PyBUF_DEVICE"] == DEVICE
    assert rows["value/sizeof(Py_buffer_extended)"] == (
        rows["value/sizeof(Py_buffer)"] + 8 + 2 * ctypes.sizeof(ctypes.c_void_p))
    out = os.environ.get("BUFFEREXT_PARITY_OUT")
    if out:
        table.dump(out, {"python": sys.version.split()[0],
                         "native_interpreter": NATIVE_INTERPRETER,
                         "header": "native" if tc.NATIVE else "backport",
                         "module": "native" if bufferext._bufferext.NATIVE
                         else "backport",
                         "rows": len(rows)})


def test_mode_is_the_interpreters(tc: ModuleType) -> None:
    """The header is native exactly where the interpreter implements the
    draft, unless the build forced the backport."""
    assert tc.NATIVE == HEADER_NATIVE


@pytest.mark.skipif(not NATIVE_INTERPRETER,
                    reason="needs a CPython that implements the draft "
                           "(cpython/ patches it into 3.13)")
def test_mixed_builds_interoperate(capi_build: ModuleType, tmp_path: Any,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A native build and a backport build of the same extension in one
    process.  A native exporter serves both: the header writes the slots and,
    for backport-mode consumers, the type attributes.  A backport-mode
    exporter declares through the type attributes only, which the
    interpreter does not read: a native consumer sees it undeclared (the
    legacy flags, no typed entry), so CPU memory is served as for a plain
    request and device memory refused by its plain getbuffer, by name."""
    build_native(monkeypatch)
    commands = [
        capi_build.module_command("c11", str(tmp_path), "testcapi_native"),
        capi_build.module_command("c11", str(tmp_path), "testcapi_backport",
                                  ["BUFFEREXT_FORCE_BACKPORT"]),
    ]
    native, backport = (capi_build.load_module(r)
                        for r in capi_build.build(commands))
    assert (native.NATIVE, backport.NATIVE) == (1, 0)
    for producer, consumer in ((native, backport), (native, native),
                               (backport, backport)):
        dev = producer.ExporterFull(device=CUDA)
        assert consumer.check_supports(dev, 0x11C | DEVICE) == 1
        assert consumer.supported_flags(dev) == 0x1FD | DEVICE
        got = consumer.get_buffer(dev, 0x11C | DEVICE)
        assert (got["device"], got["info"]["device"]) == (CUDA, 1)
        with pytest.raises(BufferError, match=CUDA):
            consumer.get_buffer(dev, 0x11C)
        assert dev.exports == 0
        simple = producer.ExporterSimpleOnly()
        assert consumer.check_supports(simple, 0x8) == 0
        with pytest.raises(BufferError, match="does not support"):
            consumer.get_buffer(simple, 0x8)
        assert simple.getbuffer_calls == 0
        # a declaration made by one build after the fact, seen by the other
        late = producer.make_exporter_type("Late", None)
        assert consumer.check_supports(late(), 0x8) == 1
        producer.set_supported_flags(late, -1)
        assert consumer.check_supports(late(), 0x8) == 0
        assert consumer.get_buffer(late(), 0)["len"] == 16
    # a backport-mode exporter, a native consumer
    dev = backport.ExporterFull(device=CUDA)
    assert native.check_supports(dev, 0x11C | DEVICE) == 0
    assert native.supported_flags(dev) == 0x1FD
    for flags in (0x11C | DEVICE, 0x11C):
        with pytest.raises(BufferError, match=CUDA):
            native.get_buffer(dev, flags)
    got = native.get_buffer(backport.ExporterFull(), 0x11C | DEVICE)
    assert (got["flags"], got["device"]) == (0, None)
    simple = backport.ExporterSimpleOnly()
    assert native.check_supports(simple, 0x8) == 1
    assert dev.exports == simple.exports == 0
    # bufferext's own module, whichever mode it was built in (a CPUBuffer
    # in backport mode is undeclared to a native consumer: served plain)
    module_native = bufferext._bufferext.NATIVE
    cpu = bufferext.CPUBuffer((4,), "i4")
    for build in (native, backport):
        got = build.get_buffer(cpu, 0x11C | DEVICE)
        answered = 0 if build is native and not module_native else DEVICE
        assert (got["flags"], got["device"], got["shape"]) == (answered, None,
                                                                (4,))
        dev = build.ExporterFull(device=CUDA)
        if build is backport and module_native:
            with pytest.raises(BufferError, match=CUDA):
                bufferext.get_buffer(dev)
        else:
            with bufferext.get_buffer(dev) as view:
                assert view.device == CUDA


def test_parity_diff_flags_unexplained_and_stale_rows(tmp_path: Any) -> None:
    """tests/parity_diff.py: a difference no entry explains fails, and so
    does an entry that explains nothing; every row, CPython's own (plain/)
    included, is held to the same row of the backport's table."""
    sys.path.insert(0, os.path.dirname(__file__))
    import parity_diff
    base = {"meta": {"header": "backport", "native_interpreter": False},
            "rows": {"request/A/ND": {"flags": 0}, "plain/A/ND": {"raises": "X"},
                     "door/d/A": {"memoryview": 1}, "value/v": 1}}
    other = {"meta": {"header": "native", "native_interpreter": True},
             "rows": {"request/A/ND": {"flags": 0}, "plain/A/ND": {"raises": "X"},
                      "door/d/A": {"raises": "BufferError"}, "value/v": 2}}
    paths = []
    for name, table in (("base", base), ("other", other)):
        paths.append(str(tmp_path / f"{name}.json"))
        with open(paths[-1], "w") as f:
            json.dump(table, f)
    allow = tmp_path / "allow.txt"
    allow.write_text("native door/d/*  # refused\nnative value/v  # new\n")
    assert parity_diff.main([*paths, "--allow", str(allow)]) == 0
    allow.write_text("native door/d/*  # refused\n")           # value/v
    assert parity_diff.main([*paths, "--allow", str(allow)]) == 1
    allow.write_text("native door/d/*  # refused\nnative value/v  # new\n"
                     "native door/e/*  # nothing\n")            # stale
    assert parity_diff.main([*paths, "--allow", str(allow)]) == 1
    allow.write_text("native door/d/*\n")                       # no reason
    with pytest.raises(SystemExit, match="needs its reason"):
        parity_diff.main([*paths, "--allow", str(allow)])


@pytest.mark.skipif(not HEADER_NATIVE,
                    reason="needs the header in native mode, on a CPython "
                           "that implements the draft (cpython/ patches it "
                           "into 3.13)")
def test_the_declaration_is_the_native_slot(tc: ModuleType) -> None:
    """Where CPython implements the draft, a type's declaration is its slot
    bf_supported_flags and its typed entry the slot bf_getbuffer_ex: written
    by the header in native mode, inherited with the getbuffer, dropped for
    a Python __buffer__.  A class attribute of the declaration's name
    declares nothing there.  CPython's own query agrees with the header's."""
    check = ctypes.pythonapi.PyObject_CheckBufferSupports
    check.argtypes = [ctypes.py_object, ctypes.c_int]
    check.restype = ctypes.c_int

    def honoured(obj: Any) -> int:
        mask = int(bufferext.supported_flags(obj))
        for bit in range(31):
            assert check(obj, 1 << bit) == bool(mask & (1 << bit)), bit
        return mask

    class Sub(tc.ExporterFull):          # the getbuffer, the slots
        pass

    class Overriding(tc.ExporterFull):   # a Python getbuffer: neither
        def __buffer__(self, flags: int) -> memoryview:
            return memoryview(b"ab")

    class Attribute(bytearray):
        __buffer_supported_flags__ = -1

    assert honoured(tc.ExporterUndeclared()) == 0x1FD
    assert honoured(tc.ExporterSimpleOnly()) == 0
    assert honoured(tc.ExporterFull()) == 0x1FD | DEVICE
    assert honoured(tc.ExporterNoDevice()) == 0x1C
    assert honoured(bufferext.CPUBuffer((1,), "u1")) == 0x1FD | DEVICE
    assert honoured(b"") == 0x1FD
    assert honoured(Sub()) == 0x1FD | DEVICE
    assert honoured(Overriding()) == 0x1FD
    assert honoured(Attribute()) == 0x1FD
    late = tc.make_exporter_type("Late", None)
    tc.set_supported_flags(late, 0x1C | DEVICE)   # no entry: no DEVICE
    assert honoured(late()) == 0x1C
