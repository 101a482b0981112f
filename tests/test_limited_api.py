"""bufferext.h in an extension built for the stable ABI
(``Py_LIMITED_API=0x030B0000``, abi3): tests/capi/testlimited.c, built here
as C99, C11 and C++11 with -Wall -Wextra -Werror against the INSTALLED
headers, uses only the stable ABI (abi3audit) and interoperates with the
full-API producers and consumers (bufferext's own, testcapi's).

Below 3.11 the limited API has no Py_buffer: the header refuses it with an
#error (tests/test_capi_build.py) and these tests are skipped."""

from __future__ import annotations

import gc
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import warnings
from types import ModuleType
from typing import Any, Dict

import pytest

import bufferext
from _helpers import (ATTRIBUTE_DECLARES, NATIVE_DOOR_REFUSAL,
                      NATIVE_INTERPRETER, NEEDS_ATTRIBUTE, build_native,
                      run_child)
from bufferext import BufferFlags

pytestmark = [
    pytest.mark.skipif(
        sys.version_info < (3, 11),
        reason="Py_buffer joined the limited API in CPython 3.11; below, "
               "bufferext.h refuses Py_LIMITED_API with an #error"),
    pytest.mark.skipif(
        bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
        reason="a free-threaded CPython before 3.15 has no limited API "
               "(its Python.h refuses Py_LIMITED_API; PEP 803 adds an "
               "abi3t for 3.15)"),
]

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "capi", "testlimited.c")
LIMITED = "0x030B0000"
STANDARDS = {"c99": ("c", "-std=c99"), "c11": ("c", "-std=c11"),
             "cxx11": ("c++", "-std=c++11")}
DEVICE = int(BufferFlags.DEVICE)
FULL_RO = int(BufferFlags.FULL_RO)
STRIDED_RO_DEVICE = int(BufferFlags.STRIDED_RO | BufferFlags.FORMAT
                        | BufferFlags.DEVICE)
PEP688 = sys.version_info >= (3, 12)


def limited_build(capi_build: ModuleType, standard: str, outdir: str,
                  limited: str = LIMITED):
    """How to build testlimited.c as ``testlimited_<standard>.abi3.so``
    (``CFLAGS`` and ``LDFLAGS`` appended, as tests/capi/build.py does), for
    the limited API of version `limited`."""
    language, std = STANDARDS[standard]
    name = f"testlimited_{standard}" + ("" if limited == LIMITED else
                                        f"_{limited[2:6]}")
    path = os.path.join(outdir, name + ".abi3.so")
    link = (["-bundle", "-undefined", "dynamic_lookup"]
            if sys.platform == "darwin" else ["-shared"])
    command = (capi_build.compilers()[language]
               + ["-x", language, std, "-Wall", "-Wextra", "-Werror", "-O1",
                  "-fPIC", f"-DPy_LIMITED_API={limited}", f"-DMODNAME={name}",
                  "-DBUFFEREXT_ENABLE_CACHE_STATS",
                  *("-I" + d for d in capi_build.include_dirs()),
                  *shlex.split(os.environ.get("CFLAGS", "")),
                  SOURCE, *link, *shlex.split(os.environ.get("LDFLAGS", "")),
                  "-o", path])
    return capi_build.BuildResult(name, standard, path, command, -1, "",
                                  module_name=name)


@pytest.fixture(scope="module")
def builds(capi_build: ModuleType, tmp_path_factory: pytest.TempPathFactory
           ) -> Dict[str, object]:
    if sys.platform == "win32":
        pytest.skip("tests/capi/build.py drives gcc/clang only")
    try:
        capi_build.compilers()
    except capi_build.CompilerNotFound as exc:
        pytest.skip(f"the limited-API tests need a C and C++ compiler: {exc}")
    outdir = str(tmp_path_factory.mktemp("limited"))
    results = capi_build.build([limited_build(capi_build, s, outdir)
                                for s in STANDARDS])
    return {r.standard: r for r in results}


@pytest.fixture(scope="module")
def modules(capi_build, builds) -> Dict[str, ModuleType]:
    return {s: capi_build.load_module(builds[s]) for s in STANDARDS}


@pytest.fixture(params=list(STANDARDS))
def lim(request, modules) -> ModuleType:
    return modules[request.param]


# ---- the build -------------------------------------------------------------

@pytest.mark.parametrize("standard", list(STANDARDS))
def test_builds_without_any_warning(builds, standard) -> None:
    result = builds[standard]
    assert result.returncode == 0, result.output
    assert result.output.strip() == "", result.output
    assert f"-DPy_LIMITED_API={LIMITED}" in result.command
    assert result.path.endswith(".abi3.so")


def test_module_is_the_limited_build(modules) -> None:
    for standard, module in modules.items():
        assert module.LIMITED_API == 0x030B0000
        assert module.NATIVE == 0      # the slot is not in 3.11's limited API
        assert module.__file__.endswith(".abi3.so")
        assert module.DECLARED == (BufferFlags.FORMAT | BufferFlags.ND
                                   | BufferFlags.STRIDES | DEVICE)


def abi3audit_command():
    found = shutil.which("abi3audit", path=os.path.dirname(sys.executable))
    found = found or shutil.which("abi3audit")
    if found is None:
        pytest.skip("abi3audit is not installed (pip install abi3audit, or "
                    "the 'test' extra)")
    return [found]


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="abi3audit is run on the Linux (ELF) build")
@pytest.mark.parametrize("standard", list(STANDARDS))
def test_abi3audit_finds_only_the_stable_abi(builds, standard) -> None:
    proc = subprocess.run(
        abi3audit_command() + ["--strict", "--verbose", "--assume-minimum-abi3",
                               "3.11", builds[standard].path],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        universal_newlines=True)
    assert proc.returncode == 0, proc.stdout
    assert "non-ABI3" not in proc.stdout.replace("no non-ABI3", "")


def test_the_full_api_build_is_caught_by_abi3audit(capi_builds) -> None:
    """The audit can fail: the full-API test extension, renamed abi3, uses
    symbols outside the stable ABI (e.g. _PyType_Lookup or PyType_GetDict)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("abi3audit is run on the Linux (ELF) build")
    source = capi_builds["c11"].path
    target = os.path.join(os.path.dirname(source), "full_as.abi3.so")
    shutil.copyfile(source, target)
    proc = subprocess.run(
        abi3audit_command() + ["--strict", "--assume-minimum-abi3", "3.11",
                               target],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        universal_newlines=True)
    assert proc.returncode != 0, proc.stdout


def test_limited_part_refuses_direct_include(capi_build, tmp_path) -> None:
    source = tmp_path / "direct.c"
    source.write_text("#define Py_LIMITED_API 0x030B0000\n#include <Python.h>\n"
                      "#include <bufferext/internal/limited.h>\n")
    proc = subprocess.run(
        capi_build.compilers()["c"] + [
            "-fsyntax-only", *("-I" + d for d in capi_build.include_dirs()),
            str(source)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        universal_newlines=True)
    assert proc.returncode != 0
    assert "include <bufferext.h>" in proc.stdout


# ---- a limited-API consumer, full-API producers -----------------------------

def objects(capi: ModuleType) -> Dict[str, object]:
    import numpy as np

    class Sub(capi.ExporterFull):
        pass

    found = {
        "bytes": b"abc", "bytearray": bytearray(b"abc"),
        "ndarray": np.arange(4.0), "memoryview": memoryview(b"ab"),
        "CPUBuffer": bufferext.CPUBuffer((3,), "uint8"),
        "ExporterFull": capi.ExporterFull(4),
        "ExporterFull(cuda)": capi.ExporterFull(4, device="bufferext.cuda"),
        "ExporterSimpleOnly": capi.ExporterSimpleOnly(4),
        "ExporterNoDevice": capi.ExporterNoDevice(4),
        "ExporterUndeclared": capi.ExporterUndeclared(4),
        "Sub(ExporterFull)": Sub(4),
        "object": object(), "int": 3,
    }
    if PEP688 and ATTRIBUTE_DECLARES:     # native mode reads no attribute
        class PyExporter:
            __buffer_supported_flags__ = int(BufferFlags.DEVICE)

            def __buffer__(self, flags):
                return memoryview(b"py")

        found["PyExporter"] = PyExporter()
    return found


FLAG_CASES = [0, DEVICE, FULL_RO, int(BufferFlags.WRITABLE),
              int(BufferFlags.C_CONTIGUOUS), int(BufferFlags.FORMAT) | DEVICE,
              int(BufferFlags.INDIRECT)]


def test_queries_agree_with_the_full_api(lim, c99) -> None:
    for name, obj in objects(c99).items():
        for flags in FLAG_CASES:
            assert bool(lim.check_supports(obj, flags)) == \
                bool(c99.check_supports(obj, flags)) == \
                bufferext.check_buffer_supports(obj, flags), (name, flags)
        try:
            expected = int(bufferext.supported_flags(obj))
        except TypeError:
            with pytest.raises(TypeError):
                lim.supported_flags(obj)
        else:
            assert lim.supported_flags(obj) == expected, name


def test_reads_a_cpubuffer(lim) -> None:
    import numpy as np
    buf = bufferext.CPUBuffer((6,), "uint8")
    buf.copy_from_host(np.frombuffer(b"abcdef", np.uint8))
    flags, device, length, readonly, data, ordinal = lim.get(
        buf, FULL_RO | DEVICE)
    assert flags == DEVICE and device is None and ordinal is None
    assert (length, readonly, data) == (6, 0, b"abcdef")
    assert lim.get(b"xyz", FULL_RO | DEVICE) == (0, None, 3, 1, b"xyz", None)
    before = sys.getrefcount(buf)
    lim.get_release(buf, FULL_RO | DEVICE, 1000)
    lim.get_release(b"xyz", FULL_RO | DEVICE, 1000)
    gc.collect()
    assert sys.getrefcount(buf) == before


def test_reads_a_guarded_device_producer(lim, c99) -> None:
    """testcapi's device double: CPU memory labelled "bufferext.cuda"; on
    3.12+ its __buffer__ is guarded, and the limited build recognises the
    guard (also on a Python subclass, routed to the base's getbuffer)."""
    exporter = c99.ExporterFull(4, device="bufferext.cuda")

    class Sub(c99.ExporterFull):
        pass

    for obj in (exporter, Sub(4, device="bufferext.cuda")):
        flags, device, length, _, data, ordinal = lim.get(
            obj, STRIDED_RO_DEVICE)
        assert (flags, device, data) == (DEVICE, "bufferext.cuda", None)
        assert ordinal is not None and length == 16
        with bufferext.get_buffer(obj) as view:
            assert view.device == "bufferext.cuda"
        assert obj.exports == 0
        lim.get_release(obj, STRIDED_RO_DEVICE, 100)
        assert obj.exports == 0
    with pytest.raises(BufferError, match="bufferext.cuda"):
        lim.get(exporter, FULL_RO)          # device memory, no PyBUF_DEVICE


@pytest.mark.skipif(not PEP688, reason="PEP 688 is 3.12+")
def test_python_buffer_method_gets_no_device_request(lim) -> None:
    class PyExporter:
        __buffer_supported_flags__ = int(BufferFlags.DEVICE)

        def __buffer__(self, flags):
            assert not flags & DEVICE
            return memoryview(b"py")

    assert lim.get(PyExporter(), DEVICE) == (0, None, 2, 1, b"py", None)
    assert not lim.check_supports(PyExporter(), DEVICE)


def test_refusals_name_the_type_and_flags(lim) -> None:
    exporter = lim.LimitedExporter(b"ab")
    with pytest.raises(BufferError, match=(
            rf"{lim.__name__}\.LimitedExporter does not support the buffer "
            r"request flags WRITABLE \(declared __buffer_supported_flags__ = "
            r"0x1001c\)")):
        lim.get(exporter, int(BufferFlags.WRITABLE) | DEVICE)
    assert exporter.exports == 0
    with pytest.raises(TypeError, match="a buffer exporter is required, "
                                        "not 'object'"):
        lim.supported_flags(object())


def test_cache(lim) -> None:
    """Immutable types (bytes, CPython's own) are served from the cache as
    they are; mutable ones (CPUBuffer, Python classes) while their
    declaration and __buffer__ are the same objects."""
    buf = bufferext.CPUBuffer((1,), "uint8")
    for obj in (b"", buf):
        lim.check_supports(obj, FULL_RO)
        hits, misses = lim.cache_stats()
        lim.check_supports(obj, FULL_RO)
        assert lim.cache_stats() == (hits + 1, misses)


def test_cache_sees_a_changed_declaration(lim) -> None:
    class Sub(bufferext.CPUBuffer):
        pass

    obj = Sub((2,), "uint8")
    assert lim.check_supports(obj, FULL_RO | DEVICE)
    Sub.__buffer_supported_flags__ = -1
    assert not lim.check_supports(obj, FULL_RO)
    assert lim.supported_flags(obj) == 0
    with pytest.raises(BufferError, match="PyBUF_SIMPLE only"):
        lim.get(obj, FULL_RO)
    Sub.__buffer_supported_flags__ = int(BufferFlags.ND)
    assert lim.supported_flags(obj) == BufferFlags.ND
    del Sub.__buffer_supported_flags__
    assert lim.supported_flags(obj) == bufferext.supported_flags(obj)
    assert lim.check_supports(obj, FULL_RO | DEVICE)


@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
@pytest.mark.thread_unsafe(
    reason="_testcapi.set_nomemory makes every thread's allocations fail")
def test_a_failed_lookup_is_not_cached_for_an_immutable_type(
        builds, capi_builds, tmp_path) -> None:
    """An immutable type's cache entry is trusted for good, so it must hold
    what the type declares.  The lookups of the declaration allocate; with
    allocation i failing during a fresh consumer's first query of an
    immutable exporter that declares DEVICE, and every one after it (memory
    stays short), the query may fail, but the next one must answer True.
    Each i loads a fresh copy of each consumer's .so (a fresh cache): this
    limited build (internal/limited.h) and testcapi (internal/accel.h).
    Before the fix the limited build read a failed lookup as "nothing
    declared" and cached it: the type then supported no DEVICE request in
    that extension until the process ended."""
    pytest.importorskip("_testcapi", reason="set_nomemory is CPython's "
                        "test module's, absent from some builds")
    lim, tc = builds["c11"], capi_builds["c11"]
    out = run_child(f"""
        import importlib.util, os, shutil
        import _testcapi

        def load(build, i):
            copy = os.path.join({str(tmp_path)!r}, build[0] + str(i))
            os.mkdir(copy)
            spec = importlib.util.spec_from_file_location(
                build[0], shutil.copy(build[1], copy))
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module

        builds = [{(lim.module_name, lim.path)!r},
                  {(tc.module_name, tc.path)!r}]
        obj = load(builds[1], "exporter").ExporterFullImmutable()
        fail, clear = _testcapi.set_nomemory, _testcapi.remove_mem_hooks
        failed = {{name: 0 for name, _ in builds}}
        for i in range(40):
            for build in builds:
                consumer = load(build, i)
                fail(i)
                try:
                    first = consumer.check_supports(obj, {DEVICE})
                except MemoryError:
                    first = False
                finally:
                    clear()
                failed[build[0]] += not first
                assert consumer.check_supports(obj, {DEVICE}), (build, i)
        print(*failed.values())
        """)
    # the sweep reached the lookups of both: some first queries did fail
    assert all(int(n) > 0 for n in out.split()), out


@pytest.mark.skipif(not PEP688, reason="PEP 688 is 3.12+")
def test_a_release_method_ends_the_typed_entrys_trust(lim) -> None:
    # CPython's slot for __release_buffer__ hands the view to Python code
    # as a memoryview: an extended view must not reach it, also when the
    # method comes after the type's first request (the cache)
    class Sub(bufferext.CPUBuffer):
        pass

    obj = Sub((2,), "uint8")
    assert lim.check_supports(obj, FULL_RO | DEVICE)
    Sub.__release_buffer__ = lambda self, view: None
    assert not lim.check_supports(obj, FULL_RO | DEVICE)
    del Sub.__release_buffer__
    assert lim.check_supports(obj, FULL_RO | DEVICE)


def test_a_device_view_is_released_with_its_object_set(lim, c99) -> None:
    # The limited build releases every device view through the header's
    # fallback (it keeps no cache of entries): the exporter's releasebuffer
    # was called with view->obj already NULL (a crash for one that reads
    # it); PyBuffer_Release leaves it set during the call
    exporter = c99.ExporterFull(4, device="bufferext.cuda")
    lim.get_release(exporter, STRIDED_RO_DEVICE, 3)
    assert exporter.exports == 0 and exporter.released_astray == 0


@pytest.mark.skipif(not PEP688, reason="PEP 688 is 3.12+")
def test_a_release_method_assigned_to_the_owner_ends_its_trust(lim,
                                                              c99) -> None:
    # The entry was trusted while the type's releasebuffer was its owner's
    # *current* one: a Python __release_buffer__ assigned to the owner
    # itself changed both, and the device view went to Python code as a
    # memoryview (device memory read as host memory).  The entry pairs with
    # the releasebuffer it was published with.
    owner = c99.make_exporter_type("Owner", FULL_RO | DEVICE)
    obj = owner(4, device="bufferext.cuda")
    assert lim.check_supports(obj, FULL_RO | DEVICE)
    assert c99.check_supports(obj, FULL_RO | DEVICE)
    seen = []
    owner.__release_buffer__ = lambda self, view: seen.append(view.tobytes())
    assert not lim.check_supports(obj, FULL_RO | DEVICE)
    assert not c99.check_supports(obj, FULL_RO | DEVICE)
    for consumer in (lim.get, c99.get_buffer):
        with pytest.raises(BufferError, match="bufferext.cuda"):
            consumer(obj, FULL_RO | DEVICE)
    assert seen == [] and obj.exports == 0


def test_a_metaclass_does_not_decide_the_declaration(lim) -> None:
    # the limited lookup read __mro__ through the metaclass: a property
    # there hid the class's own "PyBUF_SIMPLE only" and ran on every
    # request (the full API read the declaration)
    ran = []

    class Meta(type):
        @property
        def __mro__(cls):
            ran.append(1)
            return (object,)

    class Sub(bufferext.CPUBuffer, metaclass=Meta):
        __buffer_supported_flags__ = -1

    obj = Sub((2,), "uint8")
    assert lim.supported_flags(obj) == 0
    with pytest.raises(BufferError, match="PyBUF_SIMPLE only"):
        lim.get(obj, int(BufferFlags.ND))
    assert not ran


def agree(lim, capi, obj, flags):
    """The limited consumer's, testcapi's and bufferext's answers to
    check_supports(obj, flags), all three."""
    return (bool(lim.check_supports(obj, flags)),
            bool(capi.check_supports(obj, flags)),
            bufferext.check_buffer_supports(obj, flags))


@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
def test_a_descriptor_is_no_declaration_or_entry(lim, c99) -> None:
    # the declaration's lookup (PyObject_GetAttr) calls a descriptor's
    # __get__: the limited build read what it returned as the declaration
    # (or as the typed entry) and served DEVICE where the full API, which
    # reads what the class holds, finds an invalid declaration (or none)
    class Declares(bufferext.CPUBuffer):
        __buffer_supported_flags__ = staticmethod(FULL_RO | DEVICE)

    class Entry(bufferext.CPUBuffer):
        __buffer_extended__ = staticmethod(
            bufferext.CPUBuffer.__dict__["__buffer_extended__"])

    for cls in (Declares, Entry):
        obj = cls((2,), "uint8")
        for flags in (FULL_RO | DEVICE, DEVICE, FULL_RO, 0):
            assert len(set(agree(lim, c99, obj, flags))) == 1, (cls, flags)
        assert not lim.check_supports(obj, DEVICE)
    with pytest.raises(TypeError, match=r"= <staticmethod.* is invalid"):
        lim.supported_flags(Declares((2,), "uint8"))
    with pytest.raises(BufferError):
        lim.get(Declares((2,), "uint8"), FULL_RO)
    assert lim.get(Entry((2,), "uint8"), DEVICE)[:2] == (0, None)
    # such a class is not cached: a hit compares what the lookups give,
    # which here is not what the answer was made of, so a plain value put
    # in the descriptor's place (giving the same lookup) must still count
    class Same:
        def __get__(self, obj: Any, owner: Any = None) -> int:
            return FULL_RO

    class Later(bufferext.CPUBuffer):
        __buffer_supported_flags__ = Same()

    for _ in range(2):
        with pytest.raises(TypeError, match=r"= <.*Same object.* is invalid"):
            lim.supported_flags(Later((2,), "uint8"))
    Later.__buffer_supported_flags__ = FULL_RO
    assert lim.supported_flags(Later((2,), "uint8")) == FULL_RO
    assert len(set(agree(lim, c99, Later((2,), "uint8"), FULL_RO))) == 1


@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
def test_an_immutable_type_with_a_mutable_base_is_read_again(lim, c99
                                                              ) -> None:
    # an immutable type's cache entry was trusted for good, but one made
    # of a mutable (Python) class inherits that class's attributes, which
    # change: the limited build kept serving DEVICE after the base
    # declared "PyBUF_SIMPLE only"
    class Base(c99.ExporterFull):
        pass

    with warnings.catch_warnings():
        # deprecated from 3.12 on (gh-95388), to be refused
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            Imm = c99.make_immutable_subclass(Base)
        except TypeError as exc:
            pytest.skip(f"this CPython refuses it: {exc}")
    assert Imm.__flags__ & (1 << 8)          # Py_TPFLAGS_IMMUTABLETYPE
    obj = Imm(4)
    assert agree(lim, c99, obj, FULL_RO | DEVICE) == (True,) * 3
    Base.__buffer_supported_flags__ = -1
    assert agree(lim, c99, obj, FULL_RO | DEVICE) == (False,) * 3
    assert agree(lim, c99, obj, 0) == (True,) * 3
    del Base.__buffer_supported_flags__
    assert agree(lim, c99, obj, FULL_RO | DEVICE) == (True,) * 3
    # an immutable type whose whole MRO is immutable is still a plain hit
    exporter = c99.ExporterFullImmutable()
    lim.check_supports(exporter, DEVICE)
    hits, misses = lim.cache_stats()
    assert lim.check_supports(exporter, DEVICE)
    assert lim.cache_stats() == (hits + 1, misses)


def test_set_supported_flags_refuses_an_immutable_type(lim) -> None:
    with pytest.raises(TypeError, match="Py_TPFLAGS_IMMUTABLETYPE"):
        lim.set_supported_flags_immutable()


# ---- a limited-API producer, full-API consumers -----------------------------
# The producer is in backport mode (built for 3.11): it declares through the
# type attributes.  Natively the declaration is the interpreter's slot, which
# such a type does not have: a native consumer sees it undeclared (the
# legacy flags, no typed entry), so CPU memory is served as for a plain
# request and device memory refused by the plain getbuffer, by name.

def test_producer_declares_through_the_type_attribute(lim, c99) -> None:
    exporter = lim.LimitedExporter(b"hello")
    assert lim.LimitedExporter.__buffer_supported_flags__ == lim.DECLARED
    expected = lim.DECLARED if ATTRIBUTE_DECLARES else int(BufferFlags.LEGACY)
    assert bufferext.supported_flags(exporter) == expected
    assert c99.supported_flags(exporter) == expected
    assert bufferext.check_buffer_supports(exporter, DEVICE) == \
        ATTRIBUTE_DECLARES
    assert bufferext.check_buffer_supports(exporter, BufferFlags.WRITABLE) \
        != ATTRIBUTE_DECLARES
    assert bytes(memoryview(exporter)) == b"hello"


def test_producer_answers_device_requests_with_cpu_memory(lim) -> None:
    exporter = lim.LimitedExporter(b"hello")
    with bufferext.get_buffer(exporter, STRIDED_RO_DEVICE) as view:
        assert view.device is None and view.tobytes() == b"hello"
        assert exporter.exports == 1
    assert exporter.exports == 0
    assert exporter.device_requests == (1 if ATTRIBUTE_DECLARES else 0)
    flags, device, _, _, data, _ = lim.get(exporter, STRIDED_RO_DEVICE)
    assert device is None and data == b"hello"
    # the answer is explicit on every version: the limited consumer calls
    # the typed entry (found through the type attribute)
    assert flags == DEVICE
    # refused up front where the declaration is read, else by the exporter
    with pytest.raises(BufferError, match="WRITABLE|read-only"):
        bufferext.get_buffer(exporter, BufferFlags.WRITABLE | DEVICE)


def test_producer_device_memory(lim) -> None:
    exporter = lim.LimitedExporter(b"abcd", device="bufferext.cuda")
    with pytest.raises(BufferError, match="bufferext.cuda"):
        memoryview(exporter)
    # served through the typed entry where the consumer reads the type
    # attributes; CPython's __buffer__ (3.12+) reaches the plain getbuffer,
    # which refuses device memory
    flags, device, _, _, _, ordinal = lim.get(exporter, FULL_RO | DEVICE)
    assert (flags, device, ordinal) == (DEVICE, "bufferext.cuda", 3)
    if ATTRIBUTE_DECLARES:
        with bufferext.get_buffer(exporter) as view:
            assert view.device == "bufferext.cuda"
            assert view.device_info.device == 3
    else:
        with pytest.raises(BufferError, match="bufferext.cuda"):
            bufferext.get_buffer(exporter)
    if PEP688:
        with pytest.raises(BufferError, match=NATIVE_DOOR_REFUSAL
                           if NATIVE_INTERPRETER
                           else "through a plain Py_buffer"):
            exporter.__buffer__(DEVICE)
    assert exporter.exports == 0


@pytest.mark.skipif(not NATIVE_INTERPRETER,
                    reason="needs a CPython that implements the draft "
                           "(cpython/ patches it into 3.13)")
def test_limited_build_for_the_native_release_is_native(
        capi_build: ModuleType, tmp_path, monkeypatch) -> None:
    """Built for the limited API of the release that has the slots (3.16 in
    the patch series), the header is in native mode with the stable ABI
    alone: the declaration and the typed entry are in the type's spec, and
    device memory is served to every consumer that makes an extended
    request, CPython's own PyObject_GetBufferEx included."""
    build_native(monkeypatch)
    result = capi_build.build([limited_build(capi_build, "c11", str(tmp_path),
                                             "0x03100000")])[0]
    assert result.ok, result.output
    lim = capi_build.load_module(result)
    assert (lim.LIMITED_API, lim.NATIVE) == (0x03100000, 1)
    exporter = lim.LimitedExporter(b"abcd", device="bufferext.cuda")
    assert lim.check_supports(exporter, DEVICE) == 1
    assert bufferext.check_buffer_supports(exporter, DEVICE | 0x1C)
    with bufferext.get_buffer(exporter) as view:
        assert view.device == "bufferext.cuda"
    with pytest.raises(BufferError, match=NATIVE_DOOR_REFUSAL):
        exporter.__buffer__(DEVICE)
    with pytest.raises(BufferError, match="bufferext.cuda"):
        memoryview(exporter)
    assert exporter.exports == 0
