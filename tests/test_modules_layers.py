"""The C module is layered (docs/internals.rst, "The files"): every file of
Modules/ sits on a floor, and its includes and its calls of functions
defined in other files go to its own floor or below, never up, with no
circle among the files.  A file and the header beside it (foo.c, foo.h)
are one unit.  The floors are read from the file map of
docs/internals.rst, so the picture there and the code cannot drift."""

from __future__ import annotations

import os
import re
import sys
from typing import Dict, List, Set, Tuple

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _reentrancy_scan as scan  # noqa: E402

MODULES = os.path.join(scan.ROOT, "Modules")
DOC = os.path.join(scan.ROOT, "docs", "internals.rst")
pytestmark = pytest.mark.skipif(
    not os.path.isdir(MODULES) or not os.path.isfile(DOC),
    reason="the C sources and docs/ are not beside the tests (a test copy "
           "of an installed wheel): the source tree's run checks them")

INCLUDE = re.compile(r'^#\s*include\s+"([\w.]+)"', re.M)
CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def unit(name: str) -> str:
    return os.path.splitext(os.path.basename(name))[0]


def floors() -> Dict[str, int]:
    """{unit: floor} from the file map of docs/internals.rst (its rows
    name the files, then ``floor N``)."""
    with open(DOC) as f:
        text = f.read()
    found: Dict[str, int] = {}
    for files, floor in re.findall(r"^((?:``[\w./]+``,? ?)+)\s+(\d)\s", text,
                                   re.M):
        for name in re.findall(r"``([\w./]+)``", files):
            found[unit(name)] = int(floor)
    return found


def sources() -> Dict[str, str]:
    """{file name: text} of Modules/, comments blanked."""
    out = {}
    for name in sorted(os.listdir(MODULES)):
        if name.endswith((".c", ".h")):
            with open(os.path.join(MODULES, name)) as f:
                out[name] = re.sub(r"/\*.*?\*/", " ", f.read(), flags=re.S)
    return out


def bodies(text: str) -> List[Tuple[str, str]]:
    """(name, body) of every function defined in `text` (the re-entrancy
    scan's reading of a definition; macros are not functions)."""
    return [(m.group("name"), m.group("body"))
            for m in scan._DEF_RE.finditer(text)
            if m.group("name") not in scan._NOT_FUNCTIONS
            and not m.group("name").isupper()]


def edges(texts: Dict[str, str]) -> Set[Tuple[str, str, str]]:
    """(from unit, to unit, why) for every include of another unit and every
    call, inside a function body, of a function another unit defines."""
    defined: Dict[str, str] = {}
    for name, text in texts.items():
        for fn, _ in bodies(text):
            defined.setdefault(fn, unit(name))
    found = set()
    for name, text in texts.items():
        me = unit(name)
        for inc in INCLUDE.findall(text):
            if unit(inc) != me and inc in texts:
                found.add((me, unit(inc), f"#include \"{inc}\""))
        for _, body in bodies(text):
            for call in set(CALL.findall(body)):
                owner = defined.get(call)
                if owner is not None and owner != me:
                    found.add((me, owner, f"{call}()"))
    return found


def problems(texts: Dict[str, str], floor_of: Dict[str, int]) -> List[str]:
    """What breaks the layering: a unit without a floor, an edge that goes
    up, a circle."""
    units = {unit(n) for n in texts}
    out = [f"{u}: no floor in docs/internals.rst" for u in sorted(units)
           if u not in floor_of]
    graph: Dict[str, Set[str]] = {u: set() for u in units}
    for a, b, why in sorted(edges(texts)):
        graph[a].add(b)
        if a in floor_of and b in floor_of and floor_of[b] > floor_of[a]:
            out.append(f"{a} (floor {floor_of[a]}) -> {b} (floor "
                       f"{floor_of[b]}): {why} goes up")
    state: Dict[str, int] = {}

    def visit(u: str, path: List[str]) -> None:
        if state.get(u) == 2:
            return
        if state.get(u) == 1:
            out.append("circle: " + " -> ".join(path[path.index(u):] + [u]))
            return
        state[u] = 1
        for v in sorted(graph[u]):
            visit(v, path + [u])
        state[u] = 2

    for u in sorted(graph):
        visit(u, [])
    return out


def test_every_file_on_a_floor_no_edge_up_no_circle() -> None:
    texts = sources()
    assert len(texts) > 20 and edges(texts), "nothing read: the scan broke"
    assert problems(texts, floors()) == []


def test_module_c_is_called_by_nobody() -> None:
    assert not [e for e in edges(sources()) if e[1] == "module"]


def test_the_view_reaches_the_runtimes_not_the_samples() -> None:
    # BufferView stages VE memory through staging and ve_driver, never
    # through VEBuffer
    found = edges(sources())
    view = {b for a, b, _ in found if a == "view"}
    staging = {b for a, b, _ in found if a == "staging"}
    assert "staging" in view
    assert {"cuda_driver", "ve_driver"} <= staging
    assert not (view | staging) & {"cpubuffer", "cudabuffer", "vebuffer"}


@pytest.mark.parametrize("plant", [
    ("state.c", '#include "view.h"\n', "#include \"view.h\" goes up"),
    ("gate.c", "void\nx(void)\n{\n    bufferext_get_buffer(0, 0, 0, 0);\n}\n",
     "bufferext_get_buffer() goes up"),
    ("producer.c", "void\ny(void)\n{\n    bufferext_view_freelist_clear();\n}\n",
     "circle"),
])
def test_a_planted_wrong_way_edge_is_found(plant: Tuple[str, str, str]
                                           ) -> None:
    name, text, expected = plant
    texts = sources()
    texts[name] += text
    if expected == "circle":        # within a floor: view -> producer too
        texts["view.c"] += ("void\nz(void)\n{\n    bufferext_producer_pin(0, 0, 0);"
                            "\n}\n")
    found = problems(texts, floors())
    assert any(expected in p for p in found), found
