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
    names = [name for name, _ in _bridges._STEPS]
    assert list(_bridges._ORDER) == names
    assert len(set(names)) == len(names)
    assert all(callable(function) for _, function in _bridges._STEPS)


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
    return [function.__code__ for _, function in rows]


class Exporter:
    """The buffer protocol (step 5) and an array interface (step 9)."""

    def __init__(self) -> None:
        self.data = bytearray(8)
        self.__array_interface__ = np.frombuffer(
            self.data, np.uint8).__array_interface__

    def __buffer__(self, flags: int) -> memoryview:
        return memoryview(self.data)


def test_as_buffer_calls_the_rows_of_the_table_in_order() -> None:
    # If as_buffer kept an order of its own, or called one dispatch
    # function, it would not call exactly the table's functions, in turn,
    # stopping at the first answer.
    rows = _bridges._STEPS
    seen, result = calls_of_as_buffer(object())
    assert seen == codes(rows[1:])
    assert isinstance(result, TypeError)
    if sys.version_info >= (3, 12):        # __buffer__ in Python
        seen, result = calls_of_as_buffer(Exporter())
        assert seen == codes(rows[1:5])    # the buffer protocol answered
        assert isinstance(result, Exporter)
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

    original = _bridges._STEPS
    for bad in (None, [("x", print)], (("x",),), ((1, print),),
                (("x", 1),)):
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

    _bridges._STEPS = (("tagged", tagged), ("boom", boom), ("shift", shift),
                       ("seen", seen)) + original[::-1]
    a = np.arange(3.0)
    print("extended:", bufferext.as_buffer(Tagged()))
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
    assert lines[:5] == [
        "refused: bufferext._bridges._STEPS must be a tuple of (name, "
        "function) rows, not NoneType",
        "refused: bufferext._bridges._STEPS must be a tuple of (name, "
        "function) rows, not list",
        "refused: bufferext._bridges._STEPS[0] must be a row (name: str, "
        "function), not a malformed tuple",
        "refused: bufferext._bridges._STEPS[0] must be a row (name: str, "
        "function), not a malformed tuple",
        "refused: bufferext._bridges._STEPS[0] must be a row (name: str, "
        "function), not a malformed tuple"]
    assert lines[5:] == ["extended: tagged", "held: Shifty, now Plain",
                         "raised: boom",
                         "reordered: False BufferAdapter", "kept: False"]
