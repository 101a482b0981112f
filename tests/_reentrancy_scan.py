"""Find the points of Modules/ and Include/ where Python code can run inside
one of our operations (grep-level), for docs/reentrancy.rst's re-entrancy
table and its test (tests/test_internals.py).

A *hook call* is a call of a C API function that can run Python code:

========  ==============================================================
index     ``__index__``/``__int__``/``__float__``/``__bool__`` of a foreign
          object: PyNumber_*, PyLong_As*, PyFloat_AsDouble,
          PyObject_IsTrue, PyArg_Parse*
attr      attribute and dict lookups (descriptors, ``__getattr__``, a
          key's ``__eq__``): PyObject_GetAttr*, PyDict_GetItem*, ...
call      calls of Python objects, imports, rich comparisons
seq       iteration and sequence protocol: PySequence_*, PyIter_Next
repr      ``__repr__``/``__str__``: PyObject_Repr/Str, ``%R``/``%S``/``%A``
          in PyErr_Format / PyUnicode_FromFormat
buffer    a foreign getbuffer/releasebuffer (``__buffer__``,
          ``__release_buffer__``): PyObject_GetBuffer, PyBuffer_Release,
          BufferExt_GetBuffer/Release, memoryview and PickleBuffer
alloc     an allocation of a GC object, which may run the collector and
          its finalizers (and ``gc.callbacks``): tp_alloc, PyTuple_New,
          Py_BuildValue, PyObject_GC_New, ...
warn      PyErr_Warn*
========  ==============================================================

and a call of one of our own functions that makes one (transitively).
``Py_DECREF`` of a foreign object also runs Python code (its finalizer);
it is not scanned, and the rule for it is written beside the table.
"""

from __future__ import annotations

import os
import re
from typing import Dict, Iterator, List, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HOOKS: Dict[str, str] = {
    "index": r"PyNumber_\w+|PyLong_As\w+|PyFloat_AsDouble|PyObject_IsTrue|"
             r"PyArg_Parse\w*|PyObject_Not",
    "attr": r"PyObject_GetAttr\w*|PyObject_GetOptionalAttr\w*|"
            r"PyObject_SetAttr\w*|PyObject_HasAttr\w*|PyDict_GetItem\w*|"
            r"PyDict_SetItem\w*|PyDict_Update|PyObject_GetItem|PyMapping_\w+",
    "call": r"PyObject_Call\w*|PyObject_Vectorcall\w*|PyVectorcall_Call|"
            r"PyImport_\w+|PyObject_RichCompare\w*",
    "seq": r"PySequence_\w+|PyIter_Next|PyObject_GetIter",
    "repr": r"PyObject_Repr|PyObject_Str|PyObject_ASCII",
    "buffer": r"PyObject_GetBuffer|PyBuffer_Release|BufferExt_GetBuffer|"
              r"BufferExt_Release|BufferExtInternal_GetBuffer|"
              r"BufferExtAccel_Call\w+|PyMemoryView_\w+|"
              r"PyPickleBuffer_FromObject|PyBytes_FromObject",
    "alloc": r"tp_alloc|PyObject_GC_New\w*|PyType_GenericAlloc|PyTuple_New|"
             r"PyTuple_Pack|PyList_New|PyList_Append|PyDict_New|Py_BuildValue|"
             r"PyCFunction_New\w*|PyInstanceMethod_New|PyStructSequence_New|"
             r"PyStructSequence_NewType|PyErr_NewException\w*|"
             r"PyType_FromModuleAndSpec|PyType_FromSpec\w*",
    "warn": r"PyErr_Warn\w*",
}
_HOOK_RE = {kind: re.compile(r"\b(?:" + pattern + r")\s*\(")
            for kind, pattern in HOOKS.items()}
_FORMAT_RE = re.compile(r"\b(?:PyErr_Format|PyUnicode_FromFormat)\s*\("
                        r"[^;]*?%[-0-9.]*[RSA]", re.S)
# a function definition: the name at column 0 (or after its return type on
# the same line), its parameter list, then "{" alone on a line
_DEF_RE = re.compile(
    r"^(?:[A-Za-z_][\w \t\*]*?[\s\*])?(?P<name>[A-Za-z_]\w*)\((?P<params>(?:[^;{}\n]|\n[ \t])*?)\)"
    r"[ \t]*\n\{\n(?P<body>.*?)^\}", re.S | re.M)
_CALL_RE = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_COMMENT_RE = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_NOT_FUNCTIONS = {"if", "for", "while", "switch", "return", "sizeof",
                  "defined"}


def sources() -> List[str]:
    """The C sources and headers scanned, relative to the root."""
    found = []
    for folder in ("Modules", "Include"):
        for base, _, files in os.walk(os.path.join(ROOT, folder)):
            found += [os.path.relpath(os.path.join(base, f), ROOT)
                      for f in files if f.endswith((".c", ".h"))]
    return sorted(found)


def _full_api(text: str) -> str:
    """``text`` without its Py_LIMITED_API branches: internal/limited.h is
    the limited API's own file, scanned on its own."""
    out, stack = [], []          # stack: (is_limited_test, in_else)
    for line in text.splitlines():
        directive = line.strip()
        if directive.startswith(("#if", "#ifdef", "#ifndef")):
            limited = re.fullmatch(
                r"#\s*(ifdef\s+Py_LIMITED_API|if\s+defined\(Py_LIMITED_API\)"
                r"|ifndef\s+Py_LIMITED_API)", directive)
            stack.append([None if limited is None
                          else "ifndef" not in directive, False])
        elif directive.startswith(("#else", "#elif")) and stack:
            stack[-1][1] = True
        elif directive.startswith("#endif") and stack:
            stack.pop()
        dropped = any(test is not None and test != in_else
                      for test, in_else in stack)
        out.append("" if dropped else line)
    return "\n".join(out) + "\n"


def functions() -> Iterator[Tuple[str, str, str]]:
    """(file, function, body without comments) of every definition."""
    for path in sources():
        with open(os.path.join(ROOT, path)) as f:
            text = _COMMENT_RE.sub(lambda m: " " * len(m.group()), f.read())
        if not path.endswith("limited.h"):
            text = _full_api(text)
        for match in _DEF_RE.finditer(text):
            name = match.group("name")
            if name in _NOT_FUNCTIONS or name.isupper():
                continue
            yield path, name, match.group("body")
        yield from _macro_functions(path, text)


_MACRO_RE = re.compile(r"^#\s*define\s+([A-Z_][A-Z0-9_]*)\(([^)]*)\)"
                       r"((?:.*\\\n)*.*)$", re.M)


def _macro_functions(path: str, text: str) -> Iterator[Tuple[str, str, str]]:
    """Functions that a macro defines (a getter table, a locked method):
    ``NAME(first_argument)`` with the macro's body and its arguments."""
    for macro in _MACRO_RE.finditer(text):
        name, body = macro.group(1), macro.group(3)
        if "{" not in body:
            continue
        for use in re.finditer(r"^(?:static\s+)?" + name + r"\(", text, re.M):
            depth, i = 1, use.end()
            while depth and i < len(text):
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            args = text[use.end():i - 1]
            first = args.split(",")[0].strip()
            yield path, f"{name}({first})", body + "\n" + args


def points() -> Dict[Tuple[str, str], Set[str]]:
    """{(file, function): kinds of hook it reaches} for every function that
    can run Python code, directly or through another of ours."""
    defs = list(functions())
    direct: Dict[Tuple[str, str], Set[str]] = {}
    calls: Dict[Tuple[str, str], Set[str]] = {}
    by_name: Dict[str, List[Tuple[str, str]]] = {}
    for path, name, body in defs:
        key = (path, name)
        kinds = {kind for kind, rx in _HOOK_RE.items() if rx.search(body)}
        if _FORMAT_RE.search(body):
            kinds.add("repr")
        direct[key] = kinds
        calls[key] = set(_CALL_RE.findall(body))
        by_name.setdefault(name, []).append(key)
    def resolve(caller: Tuple[str, str], name: str) -> List[Tuple[str, str]]:
        # a name defined in the caller's own file is that one; limited.h
        # stands in for accel.h only for its own callers
        found = by_name.get(name, [])
        same = [k for k in found if k[0] == caller[0]]
        if same:
            return same
        return [k for k in found if not k[0].endswith("limited.h")]

    reach = {key: set(kinds) for key, kinds in direct.items()}
    changed = True
    while changed:
        changed = False
        for key, called in calls.items():
            for name in called:
                for callee in resolve(key, name):
                    if callee != key and not reach[callee] <= reach[key]:
                        reach[key] |= reach[callee]
                        changed = True
    return {key: kinds for key, kinds in reach.items() if kinds}


if __name__ == "__main__":
    for (path, name), kinds in sorted(points().items()):
        print(f"{path:40} {name:45} {' '.join(sorted(kinds))}")
