"""The distributed package is layered: its modules import each other
without cycles, only the package ``__init__`` and the plotting helper import
``_array`` (the ``DistArray`` class sits on top of the MPI layer), and no module hides an import of a
sibling inside a function (the old way of keeping a cycle alive)."""

from __future__ import annotations

import ast
import os
from typing import Dict, List, Set

import bufferext.distarray

PACKAGE = os.path.dirname(os.path.abspath(bufferext.distarray.__file__))


def _siblings(tree: ast.AST, top_level_only: bool) -> Set[str]:
    """The ``from .x import`` / ``from . import x`` targets of a module
    (those at module level only, or those inside functions only)."""
    found: Set[str] = set()
    body = tree.body if top_level_only else [  # type: ignore[attr-defined]
        n for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        for n in ast.walk(f)]
    for node in body:
        if isinstance(node, ast.If):        # TYPE_CHECKING blocks: types only
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module)
            else:
                found.update(alias.name for alias in node.names)
    return found


def _modules() -> Dict[str, ast.AST]:
    return {name[:-3]: ast.parse(open(os.path.join(PACKAGE, name)).read())
            for name in sorted(os.listdir(PACKAGE)) if name.endswith(".py")}


def test_no_import_cycles() -> None:
    graph = {name: _siblings(tree, True) for name, tree in _modules().items()}
    order: List[str] = []
    state: Dict[str, int] = {}

    def visit(name: str, path: List[str]) -> None:
        if state.get(name) == 2:
            return
        assert state.get(name) != 1, f"import cycle: {' -> '.join(path + [name])}"
        state[name] = 1
        for dep in sorted(graph.get(name, ())):
            visit(dep, path + [name])
        state[name] = 2
        order.append(name)

    for name in graph:
        visit(name, [])
    assert order.index("_array") > order.index("_redistribute") > order.index("_buffers")


def test_only_the_top_imports_array() -> None:
    users = {name for name, tree in _modules().items() if "_array" in _siblings(tree, True)}
    assert users == {"__init__", "_plot"}


def test_no_sibling_imports_inside_functions() -> None:
    hidden = {name: deps for name, tree in _modules().items()
              if (deps := _siblings(tree, False))}
    assert hidden == {}
