"""Every public callable has a signature inspect can read, and a docstring.

The walk covers ``bufferext.__all__`` and ``bufferext.distarray.__all__``:
functions, each class as a constructor, the public methods a class defines
itself, and the dunder methods users call (the with statement, DLPack,
pickling and copying, numpy's ``__array__``, ``__distarray__``).

Exempt, as CPython's own are: exception classes (``inspect.signature`` of
``RuntimeError`` fails too; their constructors take anything), and the
methods CPython gives every struct sequence (``CUDADeviceInfo.__reduce__``):
the walk takes only the dunders below, and those of the struct sequences
come from CPython.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from typing import Any, Iterator, List, Tuple

import pytest

import bufferext
import bufferext.distarray
from bufferext import BufferFlags

#: Dunder methods users call (directly or through a protocol).
CALLED_DUNDERS = ("__enter__", "__exit__", "__dlpack__", "__dlpack_device__",
                  "__reduce_ex__", "__copy__", "__deepcopy__", "__array__",
                  "__distarray__")

#: Classes Python cannot instantiate: get_buffer() and as_buffer() make
#: them, so they have no constructor signature to check.
NOT_CONSTRUCTIBLE = ("BufferView", "BufferAdapter")


def _public(module: Any) -> Iterator[Tuple[str, Any]]:
    for name in module.__all__:
        obj = getattr(module, name)
        if callable(obj) and not (isinstance(obj, type) and
                                  issubclass(obj, BaseException)):
            yield f"{module.__name__}.{name}", obj


def _members(cls: type) -> Iterator[Tuple[str, Any]]:
    for name in vars(cls):
        if name.startswith("_") and name not in CALLED_DUNDERS:
            continue
        value = getattr(cls, name)
        if callable(value) and not isinstance(value, type):
            yield name, value


def _callables() -> List[Tuple[str, Any]]:
    found = []
    for module in (bufferext, bufferext.distarray):
        for qualname, obj in _public(module):
            if not (isinstance(obj, type) and
                    obj.__name__ in NOT_CONSTRUCTIBLE):
                found.append((qualname, obj))
            if isinstance(obj, type):
                found += [(f"{qualname}.{name}", member)
                          for name, member in _members(obj)]
    return found


#: Docstrings written in Modules/view.c on another branch; strict, so the
#: marks fail (XPASS) once that lands and must then be removed.
CALLABLES = _callables()
WALK = [pytest.param(name, obj, id=name) for name, obj in CALLABLES]


def test_the_walk_finds_what_it_is_meant_to() -> None:
    names = {name for name, _ in CALLABLES}
    for expected in ("bufferext.get_buffer", "bufferext.as_buffer",
                     "bufferext.CPUBuffer", "bufferext.CPUBuffer.__exit__",
                     "bufferext.CPUBuffer.__reduce_ex__",
                     "bufferext.CPUBuffer.__deepcopy__",
                     "bufferext.CPUBuffer.copy", "bufferext.CPUBuffer.empty",
                     "bufferext.CUDABuffer.__enter__",
                     "bufferext.VEBuffer.__exit__",
                     "bufferext.BufferView.__enter__",
                     "bufferext.BufferView.__exit__",
                     "bufferext.BufferView.__dlpack__",
                     "bufferext.BufferAdapter.__dlpack_device__",
                     "bufferext.BufferFlags.names",
                     "bufferext.distarray.DistArray",
                     "bufferext.distarray.DistArray.__distarray__",
                     "bufferext.distarray.DistArray.from_global",
                     "bufferext.distarray.validate"):
        assert expected in names
    assert "bufferext.DeviceUnavailableError" not in names
    assert "bufferext.distarray.ProtocolError" not in names   # exception
    assert "bufferext.CUDADeviceInfo.__reduce__" not in names


@pytest.mark.parametrize("name", NOT_CONSTRUCTIBLE)
def test_exempt_constructors_really_refuse(name: str) -> None:
    with pytest.raises(TypeError, match="cannot create"):
        getattr(bufferext, name)()


@pytest.mark.parametrize("qualname, obj", WALK)
def test_signature_and_docstring(qualname: str, obj: Any) -> None:
    inspect.signature(obj)          # raises if there is none or it is bad
    doc = inspect.getdoc(obj) or ""     # an override shares its base's
    assert doc, f"{qualname} has no docstring"
    first = doc.splitlines()[0]
    name = qualname.rsplit(".", 1)[-1]
    assert not re.match(rf"\s*{re.escape(name)}\s*\(", first), \
        f"{qualname}: the docstring starts with a signature: {first!r}"


# ---- the documented signatures of the key functions -------------------------

def _shape(obj: Any) -> List[Tuple[str, Any, Any]]:
    """(name, kind, default) of each parameter: annotations left out."""
    return [(p.name, p.kind, p.default)
            for p in inspect.signature(obj).parameters.values()]


P = inspect.Parameter
EMPTY = P.empty


def test_get_buffer_signature() -> None:
    assert _shape(bufferext.get_buffer) == [
        ("obj", P.POSITIONAL_ONLY, EMPTY),
        ("flags", P.POSITIONAL_OR_KEYWORD,
         BufferFlags.FULL_RO | BufferFlags.DEVICE)]
    default = inspect.signature(
        bufferext.get_buffer).parameters["flags"].default
    if sys.version_info >= (3, 10):
        # folded from "bufferext.BufferFlags.FULL_RO|...DEVICE": a member
        assert type(default) is BufferFlags
        assert default.names() == ["FULL_RO", "DEVICE"]
    else:
        # 3.9's inspect folds no `|`: the number, the flags in the docstring
        assert type(default) is int
    assert "BufferFlags.FULL_RO | BufferFlags.DEVICE" in \
        bufferext.get_buffer.__doc__


def test_get_buffer_default_is_what_it_requests() -> None:
    view = bufferext.get_buffer(bufferext.CPUBuffer(3))
    with view:
        assert view.request_flags == \
            inspect.signature(bufferext.get_buffer).parameters["flags"].default


def test_check_buffer_supports_signature() -> None:
    assert _shape(bufferext.check_buffer_supports) == [
        ("obj", P.POSITIONAL_ONLY, EMPTY),
        ("flags", P.POSITIONAL_OR_KEYWORD, 0)]


def test_supported_flags_signature() -> None:
    assert _shape(bufferext.supported_flags) == [
        ("obj", P.POSITIONAL_OR_KEYWORD, EMPTY)]
    assert inspect.signature(bufferext.supported_flags).return_annotation \
        == "BufferFlags"


def test_as_buffer_signature() -> None:
    assert _shape(bufferext.as_buffer) == [
        ("obj", P.POSITIONAL_OR_KEYWORD, EMPTY),
        ("readonly", P.KEYWORD_ONLY, None)]


@pytest.mark.parametrize("cls, extra", [
    (bufferext.CPUBuffer, []),
    (bufferext.CUDABuffer, [("device", P.KEYWORD_ONLY, 0)]),
    (bufferext.VEBuffer, [("node", P.KEYWORD_ONLY, 0)]),
], ids=["CPUBuffer", "CUDABuffer", "VEBuffer"])
def test_producer_constructor_signatures(cls: type, extra: List[Any]) -> None:
    assert _shape(cls) == [
        ("shape", P.POSITIONAL_OR_KEYWORD, EMPTY),
        ("dtype", P.POSITIONAL_OR_KEYWORD, "float64"),
        *extra,
        ("readonly", P.KEYWORD_ONLY, False)]


def test_cpubuffer_defaults_are_the_signatures() -> None:
    buf = bufferext.CPUBuffer(2)
    assert buf.dtype.name == _shape(bufferext.CPUBuffer)[1][2]
    assert buf.readonly is _shape(bufferext.CPUBuffer)[2][2]


@pytest.mark.parametrize("cls", [bufferext.CPUBuffer, bufferext.CUDABuffer,
                                 bufferext.VEBuffer],
                         ids=["CPUBuffer", "CUDABuffer", "VEBuffer"])
def test_producer_with_statement_signatures(cls: type) -> None:
    assert _shape(cls.__enter__) == [("self", P.POSITIONAL_ONLY, EMPTY)]
    # varargs, like memoryview.__exit__: the exception triple is ignored
    assert _shape(cls.__exit__) == [("self", P.POSITIONAL_ONLY, EMPTY),
                                    ("exc_info", P.VAR_POSITIONAL, EMPTY)]


def test_cpubuffer_exit_takes_what_its_signature_says() -> None:
    buf = bufferext.CPUBuffer(2)
    assert buf.__exit__() is None and buf.closed
    buf = bufferext.CPUBuffer(2)
    assert buf.__exit__(ValueError, ValueError("x"), None) is None
    assert buf.closed


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="the stand-in CUDA driver is built for Linux")
def test_device_reduce_ex_is_a_bound_method_with_a_signature(
        tmp_path: Any) -> None:
    # CUDABuffer/VEBuffer hand out __reduce_ex__ per instance (a getset over
    # one PyMethodDef, producer.c): checked on a CUDABuffer of the stand-in.
    sys.path.insert(0, os.path.join(os.path.dirname(__file__),
                                    "cuda_standin"))
    try:
        import standin_harness as harness
    finally:
        sys.path.pop(0)
    harness.check(harness.build(str(tmp_path)), """
        import inspect
        reduce_ex = CUDABuffer(4).__reduce_ex__
        assert str(inspect.signature(reduce_ex)) == "(protocol, /)"
        assert reduce_ex.__doc__.startswith("Raises TypeError")
        assert CUDABuffer.__dict__["__reduce_ex__"].__doc__
    """)
