"""as_buffer's order is written once, as the rows of _bridges._STEPS
(_bridges._ORDER is their names): the numbered lists of docs/bridges.rst
and of _bridges' docstring and the order of BRIDGED (check's hint, and
get_buffer's C table through tests/test_view.py) must say the same, and
both dispatches, bufferext.as_buffer in C and _bridges._dispatch, walk the
table's rows and nothing else."""

from __future__ import annotations

import os
import re
import sys
from types import CodeType, FrameType
from typing import Any, List, Optional, Tuple

import numpy as np
import pytest

import bufferext
from bufferext import _bridges, _bufferext
from _helpers import run_child

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "bridges.rst")


def step(item: str) -> str:
    """The step a numbered item describes: what it reads first."""
    item = item.lstrip()
    if "extended buffer protocol itself" in item:
        return "passes through"
    if item.startswith("a numpy array of an ml_dtypes"):
        return "numpy's low-precision floats"
    if item.startswith("DLPack,"):
        return "DLPack of a device"
    if item.startswith("the buffer protocol"):
        return "the buffer protocol"
    if item.startswith("DLPack"):
        return "DLPack"
    found = re.search(r"``(__\w+__)", item)
    return found.group(1) if found else item.strip()[:40]


def numbered(text: str) -> List[str]:
    """The steps of the numbered list 1., 2., ... that `text` starts."""
    text = text[text.index("1. "):]
    last = f"{len(_bridges._STEPS)}. "
    text = text[:text.find("\n\n", text.index(last))]
    return [step(item) for item in re.split(r"(?:^|\n)\s*\d\. ", text)[1:]]


def test_order_is_the_names_of_the_rows() -> None:
    names = [name for name, _, _ in _bridges._STEPS]
    assert list(_bridges._ORDER) == names
    assert len(set(names)) == len(names)
    assert all(callable(function) for _, function, _ in _bridges._STEPS)
    assert all(isinstance(needs, tuple) and all(isinstance(n, (str, type))
                                                for n in needs)
               for _, _, needs in _bridges._STEPS)


def test_the_docstring_lists_the_order() -> None:
    assert numbered(_bridges.__doc__) == list(_bridges._ORDER)


@pytest.mark.skipif(not os.path.isfile(DOC), reason="docs/ not beside tests")
def test_the_docs_list_the_order() -> None:
    with open(DOC) as f:
        text = f.read()
    assert numbered(text[text.index("read in this order"):]) == list(
        _bridges._ORDER)


def test_bridged_follows_the_order() -> None:
    attrs = [name for name, _ in _bridges.BRIDGED
             if name != "__arrow_c_array__"]       # the Arrow step's 2nd try
    assert attrs == [name if name.startswith("__") else "__dlpack__"
                     for name in _bridges._ORDER
                     if name.startswith("__") or name == "DLPack"]


def test_step_one_is_the_c_function() -> None:
    # as_buffer runs step 1 in place when the row holds this very function
    assert _bridges._STEPS[0][1] is _bufferext._pass_through
    a = np.arange(3.0)
    assert _bufferext._pass_through(a, np.ndarray, None) is a
    ro = _bufferext._pass_through(a, np.ndarray, True)
    assert isinstance(ro, bufferext.BufferAdapter) and ro.readonly
    assert _bufferext._pass_through(object(), object, None) is NotImplemented
    with pytest.raises(TypeError, match="readonly must be None or a bool"):
        _bufferext._pass_through(a, np.ndarray, 1)
    with pytest.raises(TypeError, match="takes 3 positional arguments"):
        _bufferext._pass_through(a, np.ndarray)


class Refuser:
    """Speaks DLPack, and its buffer refuses a plain (memoryview's)
    request, as JAX's bfloat16 arrays do: the buffer protocol's row leaves
    it to DLPack's."""

    def __init__(self, error: type) -> None:
        self.error = error

    def __dlpack__(self, **kwargs: Any) -> Any:
        raise AssertionError("not reached")

    def __buffer__(self, flags: int) -> memoryview:
        raise self.error("refused")


def test_the_buffer_protocol_row_is_the_c_function() -> None:
    assert row("the buffer protocol")[1] is _bufferext._buffer_protocol
    step = _bufferext._buffer_protocol
    data = bytearray(4)
    assert step(data, bytearray, None) is data
    ro = step(data, bytearray, True)
    assert isinstance(ro, bufferext.BufferAdapter) and ro.readonly
    assert step(object(), object, None) is NotImplemented
    with pytest.raises(TypeError, match="readonly must be None or a bool"):
        step(data, bytearray, 1)
    with pytest.raises(TypeError, match="takes 3 positional arguments"):
        step(data, bytearray)
    if sys.version_info >= (3, 12):        # __buffer__ in Python
        # a plain refusal passes to the next row; any other error is raised
        for error in (BufferError, ValueError, TypeError,
                      NotImplementedError):
            assert step(Refuser(error), Refuser, None) is NotImplemented
        with pytest.raises(KeyError, match="refused"):
            step(Refuser(KeyError), Refuser, None)
        with pytest.raises(KeyError, match="refused"):
            bufferext.as_buffer(Refuser(KeyError))


# ---- the C dispatch walks the table ---------------------------------------

def calls_of_as_buffer(obj: Any, readonly: Optional[bool] = None
                       ) -> Tuple[List[CodeType], Any]:
    """The Python functions as_buffer(obj) calls from C (not those they
    call), in order, and its answer (or the exception it raised)."""
    here = sys._getframe()
    seen: List[CodeType] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_back is here:
            seen.append(frame.f_code)

    before = sys.getprofile()
    sys.setprofile(profile)
    try:
        result: Any = bufferext.as_buffer(obj, readonly=readonly)
    except Exception as e:          # noqa: BLE001 - handed to the caller
        result = e
    finally:
        sys.setprofile(before)
    return seen, result


def codes(rows: Any) -> List[CodeType]:
    """The code of the rows' Python functions (as_buffer runs its own C
    rows without a call)."""
    return [function.__code__ for _, function, _ in rows
            if hasattr(function, "__code__")]


def row(name: str) -> Any:
    return _bridges._STEPS[_bridges._ORDER.index(name)]


class Exporter:
    """The buffer protocol (step 5) and an array interface (step 9)."""

    def __init__(self) -> None:
        self.data = bytearray(8)
        self.__array_interface__ = np.frombuffer(
            self.data, np.uint8).__array_interface__

    def __buffer__(self, flags: int) -> memoryview:
        return memoryview(self.data)


class Speaker:
    """DLPack (its type has ``__dlpack__``), whose device query raises."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __dlpack__(self, **kwargs: Any) -> Any:
        raise AssertionError("not reached")

    def __dlpack_device__(self) -> Any:
        raise self.error


class Pretender:
    """Speaks every protocol through its instance only: attributes of its
    own and a ``__getattr__`` (its type has none of the guards' names)."""

    def __init__(self) -> None:
        self.__dlpack__ = self.__arrow_c_array__ = print
        self.__arrow_c_device_array__ = print

    def __getattr__(self, name: str) -> Any:
        if name == "__array_interface__":
            return np.arange(2.0).__array_interface__
        raise AttributeError(name)


class Proxy:
    """A ``__class__``-forwarding proxy (as wrapt's): isinstance sees the
    wrapped array's type, which the proxy's own type is not."""

    def __init__(self, wrapped: Any) -> None:
        object.__setattr__(self, "_wrapped", wrapped)

    @property                           # type: ignore[misc]
    def __class__(self) -> type:        # noqa: D401
        return type(self._wrapped)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)


def unguarded(obj: Any, readonly: Optional[bool] = None) -> Any:
    """as_buffer's walk with every row called, guards ignored: the answer
    (a summary) or the exception's type and text."""
    cls = type(obj)
    try:
        for _, function, _ in _bridges._STEPS:
            out = function(obj, cls, readonly)
            if out is not NotImplemented:
                return summary(obj, out)
        raise _bridges._speaks_none(cls)
    except Exception as e:              # noqa: BLE001 - compared
        return (type(e), str(e))


def summary(obj: Any, out: Any) -> Any:
    return (out is obj, type(out), getattr(out, "readonly", None),
            getattr(out, "format", None))


def guarded(obj: Any, readonly: Optional[bool] = None) -> Any:
    try:
        return summary(obj, bufferext.as_buffer(obj, readonly=readonly))
    except Exception as e:              # noqa: BLE001 - compared
        return (type(e), str(e))


def subjects() -> List[Any]:
    a = np.arange(6.0).reshape(2, 3)
    out: List[Any] = [a, a.T, b"xyz", bytearray(3), memoryview(a), object(),
                      3, Exporter(), Pretender(), Proxy(a),
                      Refuser(BufferError), Refuser(KeyError), Speaker(
                          ValueError("x")), bufferext.CPUBuffer((2,),
                                                               "float32")]
    try:
        import ml_dtypes
    except ImportError:
        pass
    else:
        bf = np.zeros(3, ml_dtypes.bfloat16)
        out += [bf, bf[::2], Proxy(bf)]
    return out


def test_a_guard_never_hides_an_answer() -> None:
    # Each guarded row's step asks what its guard asks first (hasattr(cls,
    # name), isinstance(obj, ndarray)) and answers NotImplemented without
    # it: for objects whose types lack them (every protocol spoken by the
    # instance, a proxy), the walk that calls every row answers as
    # as_buffer's guarded one.
    for obj in subjects():
        for readonly in (None, True):
            assert guarded(obj, readonly) == unguarded(obj, readonly), obj
    for obj in subjects():
        cls = type(obj)
        for name, function, needs in _bridges._STEPS:
            if needs and not _bridges._guard_holds(obj, cls, needs):
                assert function(obj, cls, None) is NotImplemented, (name,
                                                                    obj)


def test_the_unguarded_rows_read_the_instance() -> None:
    # Why the array interfaces' rows have no guard and the low-precision
    # row's is isinstance, not the type's attributes: an instance
    # attribute, or a __class__ property, answers them.
    assert guarded(Pretender())[1] is bufferext.BufferAdapter
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = np.zeros(3, ml_dtypes.bfloat16)
    seen, result = calls_of_as_buffer(Proxy(bf))    # and the guard's
    assert [c for c in seen if c.co_name != "__class__"] == codes(
        [row("numpy's low-precision floats")])
    assert result.format == "[bfloat16]"


def test_a_guard_lookup_that_raises_propagates() -> None:
    class Meta(type):
        def __getattribute__(cls, name: str) -> Any:
            if name == "__arrow_c_device_array__":
                raise KeyError("meta")
            return super().__getattribute__(name)

    class Hostile(metaclass=Meta):
        pass

    for dispatch in (lambda o: bufferext.as_buffer(o),
                     lambda o: _bridges._dispatch(o, None)):
        with pytest.raises(KeyError, match="meta"):
            dispatch(Hostile())
    seen, result = calls_of_as_buffer(Hostile())     # and the lookups
    assert [c for c in seen if c.co_name != "__getattribute__"] == []
    assert isinstance(result, KeyError)


def test_a_guard_lookup_that_reassigns_the_class() -> None:
    # The lookup of "__dlpack__" on the type moves the object to another
    # class and drops the only other reference to its first: the walk
    # goes on with the type it holds (the steps' cls, the refusal's name).
    import gc

    class Plain:
        pass

    victims: List[Any] = []

    class Meta(type):
        def __getattr__(cls, name: str) -> Any:
            if name == "__dlpack__" and victims:
                victims.pop().__class__ = Plain
                gc.collect()
            raise AttributeError(name)

    for dispatch in (lambda o: bufferext.as_buffer(o),
                     lambda o: _bridges._dispatch(o, None)):
        obj = Meta("Shifting", (), {})()
        victims.append(obj)
        with pytest.raises(TypeError, match="'Shifting' object speaks none"):
            dispatch(obj)
        assert type(obj) is Plain


def test_as_buffer_calls_the_rows_of_the_table_in_order() -> None:
    # If as_buffer kept an order of its own, or called one dispatch
    # function, it would not call exactly the table's functions, in turn,
    # stopping at the first answer.
    # A row whose guard fails is not called: object() reaches only the
    # unguarded rows' Python functions, an exporter of the buffer protocol
    # none (the buffer protocol's row is as_buffer's own, run in place).
    rows = _bridges._STEPS
    unguarded = [r for r in rows[1:] if not r[2]]
    seen, result = calls_of_as_buffer(object())
    assert seen == codes(unguarded)
    assert isinstance(result, TypeError)
    if sys.version_info >= (3, 12):        # __buffer__ in Python
        seen, result = calls_of_as_buffer(Exporter())
        assert seen == []
        assert isinstance(result, Exporter)
    seen, result = calls_of_as_buffer(Speaker(ValueError("dlpack read")))
    assert seen == codes([row("DLPack of a device")])   # which raised
    assert str(result) == "dlpack read"
    ml_dtypes = pytest.importorskip("ml_dtypes")
    seen, result = calls_of_as_buffer(np.zeros(2, ml_dtypes.bfloat16))
    assert seen == codes(rows[1:2])
    assert result.format == "[bfloat16]"


def test_step_one_makes_no_call() -> None:
    a = np.arange(4.0)
    assert calls_of_as_buffer(a) == ([], a)
    seen, ro = calls_of_as_buffer(a, readonly=True)
    assert seen == [] and ro.readonly


def test_the_dispatches_agree() -> None:
    a = np.arange(6.0).reshape(2, 3)
    for obj in (a, a.T, b"xyz", bytearray(3), memoryview(a), Exporter(),
                bufferext.CPUBuffer((2,), "float32"), object(), 3):
        for readonly in (None, True):
            answers = []
            for dispatch in (bufferext.as_buffer, _bridges._dispatch):
                try:
                    if dispatch is bufferext.as_buffer:
                        out: Any = dispatch(obj, readonly=readonly)
                    else:
                        out = dispatch(obj, readonly)
                except Exception as e:     # noqa: BLE001 - compared
                    answers.append((type(e), str(e)))
                    continue
                answers.append((out is obj, type(out),
                                getattr(out, "readonly", None)))
            assert answers[0] == answers[1], (obj, readonly)


def test_a_lying_class_is_read_by_its_type() -> None:
    class Liar:
        @property                       # type: ignore[misc]
        def __class__(self) -> type:    # noqa: D401
            return bytes

    with pytest.raises(TypeError, match="'Liar' object speaks none"):
        bufferext.as_buffer(Liar())


# In a process of its own: the table is read once per process, and these
# change it (a malformed table, then a reordered and extended one).
CHILD = '''
    import gc

    import numpy as np
    import bufferext
    from bufferext import _bridges

    # numpy's array type itself first: as_buffer reads its instances' fields
    # (known by the type, not by the name numpy.ndarray, which can be
    # rebound)
    original_types, real_ndarray = _bridges._CPU_TYPES, np.ndarray
    for bad in (None, (), (bytes, np.ndarray),
                (type("ndarray", (np.ndarray,), {}), bytes), "rebound"):
        if bad == "rebound":
            np.ndarray = bytes
            bad = (bytes,) + original_types[1:]
        _bridges._CPU_TYPES = bad
        try:
            bufferext.as_buffer(b"x")
        except TypeError as e:
            print("refused:", e)
        np.ndarray = real_ndarray
    _bridges._CPU_TYPES = original_types

    original = _bridges._STEPS
    for bad in (None, [("x", print, ())], (("x", print),), ((1, print, ()),),
                (("x", 1, ()),), (("x", print, None),),
                (("x", print, ("__x__", 1)),)):
        _bridges._STEPS = bad
        try:
            bufferext.as_buffer(b"x")
        except TypeError as e:
            print("refused:", e)

    class Tagged:
        pass

    class Boom:
        pass

    def tagged(obj, cls, readonly):
        return "tagged" if cls is Tagged else NotImplemented

    def boom(obj, cls, readonly):
        if cls is Boom:
            raise ValueError("boom")
        return NotImplemented

    class Plain:
        pass

    def shift(obj, cls, readonly):
        # the type as_buffer hands the next steps must outlive this
        if cls.__name__ == "Shifty":
            obj.__class__ = Plain
            gc.collect()
        return NotImplemented

    def seen(obj, cls, readonly):
        if cls.__name__ == "Shifty":
            return f"{cls.__name__}, now {type(obj).__name__}"
        return NotImplemented

    class Str(str):
        pass

    def guarded(obj, cls, readonly):
        return "guarded"

    _bridges._STEPS = (("tagged", tagged, ()), ("boom", boom, ()),
                       ("guarded", guarded, (Str("__tag__"),)),
                       ("shift", shift, ()),
                       ("seen", seen, ())) + original[::-1]
    a = np.arange(3.0)
    print("extended:", bufferext.as_buffer(Tagged()))
    print("guard:", bufferext.as_buffer(type("T", (), {"__tag__": 1})()))
    print("held:", bufferext.as_buffer(type("Shifty", (), {})()))
    try:
        bufferext.as_buffer(Boom())
    except ValueError as e:
        print("raised:", e)
    # reversed: the array interface comes before the pass-through
    print("reordered:", bufferext.as_buffer(a) is a,
          type(bufferext.as_buffer(a)).__name__)
    _bridges._STEPS = original            # read once: as_buffer keeps its
    print("kept:", bufferext.as_buffer(a) is a)
'''


def test_as_buffer_follows_a_changed_table_in_a_new_process() -> None:
    lines = run_child(CHILD).splitlines()
    malformed = ("refused: bufferext._bridges._STEPS[0] must be a row "
                 "(name: str, function, needs), not a malformed tuple")
    assert lines[:5] == ["refused: bufferext._bridges._CPU_TYPES must be a "
                         "tuple starting with numpy.ndarray"] * 5
    lines = lines[5:]
    assert lines[:7] == [
        "refused: bufferext._bridges._STEPS must be a tuple of (name, "
        "function, needs) rows, not NoneType",
        "refused: bufferext._bridges._STEPS must be a tuple of (name, "
        "function, needs) rows, not list",
        malformed, malformed, malformed,
        "refused: bufferext._bridges._STEPS[0]'s needs must be a tuple of "
        "attribute names (str) and types, not NoneType",
        "refused: bufferext._bridges._STEPS[0]'s needs must be a tuple of "
        "attribute names (str) and types, not one holding int"]
    assert lines[7:] == ["extended: tagged", "guard: guarded",
                         "held: Shifty, now Plain",
                         "raised: boom",
                         "reordered: False BufferAdapter", "kept: False"]
