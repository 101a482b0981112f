"""as_buffer's order is written once, as _bridges._ORDER: the numbered
lists of docs/bridges.rst and of _bridges' docstring, the order of BRIDGED
(check's hint, and get_buffer's C table through tests/test_view.py) and
_dispatch's numbered step comments must all say the same."""

from __future__ import annotations

import inspect
import os
import re
from typing import List

import pytest

from bufferext import _bridges

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "bridges.rst")


def step(item: str) -> str:
    """The step a numbered item describes: what it reads first."""
    if "extended buffer protocol itself" in item:
        return "passes through"
    if item.lstrip().startswith("DLPack,"):
        return "DLPack of a device"
    if item.lstrip().startswith("the buffer protocol"):
        return "the buffer protocol"
    if item.lstrip().startswith("DLPack"):
        return "DLPack"
    found = re.search(r"``(__\w+__)", item)
    return found.group(1) if found else item.strip()[:40]


def numbered(text: str) -> List[str]:
    """The steps of the numbered list 1., 2., ... that `text` starts."""
    text = text[text.index("1. "):]
    text = text[:text.find("\n\n", text.index("8. "))]
    return [step(item) for item in re.split(r"(?:^|\n)\s*\d\. ", text)[1:]]


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
             if name != "__arrow_c_array__"]       # step 2's second try
    assert attrs == [name if name.startswith("__") else "__dlpack__"
                     for name in _bridges._ORDER
                     if name.startswith("__") or name == "DLPack"]


def test_dispatch_comments_follow_the_order() -> None:
    source = inspect.getsource(_bridges._dispatch)
    steps = [int(n) for n in re.findall(r"# (\d)\.", source)]
    assert steps == sorted(steps) and steps[-1] <= len(_bridges._ORDER)
