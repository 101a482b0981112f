"""The distributed package is layered: its modules import each other
without cycles, only the package ``__init__`` and the plotting helper import
``_array`` (the ``DistArray`` class sits on top of the MPI layer), no module
hides an import of a sibling inside a function (the old way of keeping a
cycle alive), and no module calls back up at run time: it reads no private
field of a higher module's class and builds no object of a type it was
handed."""

from __future__ import annotations

import ast
import os
import textwrap
from typing import Dict, List, Set

import bufferext.distarray
from _helpers import PARSES_PYTHON

pytestmark = PARSES_PYTHON
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


def _below(graph: Dict[str, Set[str]]) -> Dict[str, Set[str]]:
    """Every module's transitive imports (its floor and those under it)."""
    out: Dict[str, Set[str]] = {}

    def visit(name: str) -> Set[str]:
        if name not in out:
            out[name] = set()       # (a cycle is test_no_import_cycles' to report)
            for dep in graph.get(name, ()):
                out[name] |= {dep} | visit(dep)
        return out[name]

    for name in graph:
        visit(name)
    return out


def _private_fields(tree: ast.AST) -> Dict[str, Set[str]]:
    """Per class of a module, the private names (``_x``, not dunders) it
    defines: methods, class attributes, and attributes assigned in its body."""
    def private(name: str) -> bool:
        return name.startswith("_") and not name.endswith("__")

    out: Dict[str, Set[str]] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        names = out.setdefault(cls.name, set())
        for node in cls.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
        out[cls.name] = {n for n in names if private(n)}
    return out


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def callbacks(modules: Dict[str, ast.AST]) -> List[str]:
    """Run-time calls back into a higher floor, found statically: a read of
    a private field that only a higher module's class defines (``x._mpi``,
    ``x._mpi_layout()``, ``getattr(x, "_mpi")``) other than through
    ``self``/``cls``, and building an object of a type the code was handed
    (``type(x)(...)``, ``x.__class__(...)`` of anything but ``self``, a
    module-level function calling its ``cls`` argument).  Private fields of
    the module's own floor and those under it are its own business."""
    graph = {name: _siblings(tree, True) for name, tree in modules.items()}
    below = _below(graph)
    fields = {name: _private_fields(tree) for name, tree in modules.items()}
    found: List[str] = []
    for name, tree in modules.items():
        own = {f for m in below[name] | {name} for names in fields.get(m, {}).values()
               for f in names}
        higher: Dict[str, str] = {}
        for m in sorted(modules):
            if name in below[m]:
                for cls, names in fields[m].items():
                    for f in names - own:
                        higher.setdefault(f, f"{m}.{cls}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr in higher
                    and not _is_self(node.value)):
                found.append(f"{name}:{node.lineno}: .{node.attr} of {higher[node.attr]}")
            elif isinstance(node, ast.Call):
                f = node.func
                if (isinstance(f, ast.Name) and f.id in ("getattr", "hasattr", "setattr")
                        and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                        and node.args[1].value in higher):
                    found.append(f"{name}:{node.lineno}: {f.id} {node.args[1].value!r} "
                                 f"of {higher[node.args[1].value]}")
                elif ((isinstance(f, ast.Call) and isinstance(f.func, ast.Name)
                       and f.func.id == "type" and len(f.args) == 1
                       and not _is_self(f.args[0]))
                      or (isinstance(f, ast.Attribute) and f.attr == "__class__"
                          and not _is_self(f.value))):
                    found.append(f"{name}:{node.lineno}: builds an object of a type "
                                 "it was handed")
        for fn in tree.body:                # module-level functions, not methods
            params = [] if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                else fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
            if "cls" in {a.arg for a in params}:
                found.extend(f"{name}:{n.lineno}: builds an object of its cls argument"
                             for n in ast.walk(fn) if isinstance(n, ast.Call)
                             and isinstance(n.func, ast.Name) and n.func.id == "cls")
    return sorted(found, key=lambda f: (f.split(":")[0], int(f.split(":")[1]), f))


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


def test_no_calls_back_into_a_higher_floor() -> None:
    assert callbacks(_modules()) == []


def test_a_planted_call_back_is_reported() -> None:
    """The checker on a small package whose engine reaches into the class
    above it (the shape of the engines before issue 32)."""
    top = """
        from . import _engine

        class Array:
            def __init__(self):
                self._state = None
                self._buffer = None

            def _layout(self):
                return self._state

            def move(self):
                return _engine.move(self)

            def make(self):
                return _engine.make(type(self))
    """
    engine = """
        class Plan:
            def __init__(self):
                self._buffer = None
                self._cache = {}

        def move(arr):
            plan = Plan()
            plan._cache.clear()
            plan._buffer = arr.buffer
            layout = arr._layout()
            state = getattr(arr, "_state", None)
            return type(arr)(layout, state)

        def make(cls):
            return cls()
    """
    modules = {"_top": ast.parse(textwrap.dedent(top)),
               "_engine": ast.parse(textwrap.dedent(engine))}
    assert callbacks(modules) == [
        "_engine:11: ._layout of _top.Array",
        "_engine:12: getattr '_state' of _top.Array",
        "_engine:13: builds an object of a type it was handed",
        "_engine:16: builds an object of its cls argument",
    ]
    # the engine's own Plan._buffer and Plan._cache, and the top's own fields, pass
    assert callbacks({"_top": modules["_top"]}) == []
