"""The header in interpreters that run in parallel, and bufferext's own
refusal of subinterpreters.

PEP 684 (3.12) lets each subinterpreter have a GIL of its own, so threads of
different interpreters run at once; an extension that declares
``Py_MOD_PER_INTERPRETER_GIL_SUPPORTED`` must not keep unsynchronised shared
state.  The header's per-type cache is one table per translation unit: its
entries are guarded by a sequence lock (docs/capi.rst, "The per-type
cache").  The compiled test extension (tests/capi/testcapi.c) declares
per-interpreter GIL support; here several isolated interpreters and the main
one hammer it at once and every answer must stay right.

bufferext's own C core keeps process-wide state and refuses subinterpreters
with a message that says why (docs/platforms.rst).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from types import ModuleType

import pytest

from _helpers import ATTRIBUTE_DECLARES, NEEDS_ATTRIBUTE

pytestmark = pytest.mark.skipif(sys.version_info < (3, 12),
                                reason="per-interpreter GIL is 3.12+")

# Run `code` in a new isolated interpreter (its own GIL), from a thread of
# the main one; works on 3.12 (_xxsubinterpreters), 3.13 (_interpreters)
# and 3.14+ (concurrent.interpreters).
RUNNER = '''
import sys, threading
def run_isolated(code):
    if sys.version_info >= (3, 14):
        from concurrent import interpreters
        interp = interpreters.create()
        try:
            interp.exec(code)
        finally:
            interp.close()
    elif sys.version_info >= (3, 13):
        import _interpreters
        iid = _interpreters.create("isolated")
        try:
            failed = _interpreters.exec(iid, code)
            if failed is not None:
                raise RuntimeError(failed)
        finally:
            _interpreters.destroy(iid)
    else:
        import _xxsubinterpreters as _interpreters
        iid = _interpreters.create(isolated=True)
        try:
            _interpreters.run_string(iid, code)
        finally:
            _interpreters.destroy(iid)
'''

# What every interpreter does: load the test extension, then ask about
# shared static types and classes of its own, many times, checking each
# answer (legacy types: the legacy mask; declared classes: their value).
WORK = '''
import importlib.util
spec = importlib.util.spec_from_file_location({name!r}, {path!r})
capi = importlib.util.module_from_spec(spec)
spec.loader.exec_module(capi)
LEGACY = capi.BUFFEREXT_LEGACY_FLAGS
DEVICE = capi.PyBUF_DEVICE
READ_ONLY = LEGACY & ~capi.PyBUF_WRITABLE
classes = [type("D%d" % i, (bytearray,),
                {{"__buffer_supported_flags__": READ_ONLY if i % 2 else -1}})
           for i in range(80)]            # more than the table's 64 entries
objects = [c(b"ab") for c in classes]
for round_ in range({rounds}):
    for obj in (b"x", bytearray(b"y"), memoryview(b"z")):
        assert capi.supported_flags(obj) == LEGACY, obj
        assert capi.check_supports(obj, capi.PyBUF_ND) == 1
        assert capi.check_supports(obj, DEVICE) == 0
    for i, obj in enumerate(objects):
        expected = READ_ONLY if i % 2 else 0
        assert capi.supported_flags(obj) == expected, (i, expected)
        assert capi.check_supports(obj, capi.PyBUF_ND) == (1 if i % 2 else 0)
        assert capi.check_supports(obj, capi.PyBUF_WRITABLE) == 0
    if round_ % 7 == 0:                   # new version tags, new entries
        for c in classes[::5]:
            c.__buffer_supported_flags__ = c.__buffer_supported_flags__
'''


def run_child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
def test_header_cache_in_parallel_interpreters(capi: ModuleType) -> None:
    work = WORK.format(name=capi.__name__, path=capi.__file__, rounds=60)
    code = RUNNER + textwrap.dedent(f'''
        errors = []
        def guarded(fn, *args):
            try:
                fn(*args)
            except BaseException as e:
                errors.append(repr(e))
        work = {work!r}
        threads = [threading.Thread(target=guarded, args=(run_isolated, work))
                   for _ in range(3)]
        threads.append(threading.Thread(target=guarded, args=(exec, work, {{}})))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        print("OK", len(threads))
    ''')
    result = run_child(code)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split() == ["OK", "4"]


def test_bufferext_refuses_subinterpreters_saying_why(tmp_path) -> None:
    out = tmp_path / "message"
    child = ("try:\n    import bufferext\nexcept ImportError as e:\n"
             f"    open({str(out)!r}, 'w').write(str(e))\n")
    code = RUNNER + f"run_isolated({child!r})\n"
    result = run_child(code)
    assert result.returncode == 0, result.stdout + result.stderr
    message = out.read_text()
    assert message.startswith("bufferext cannot be imported in a "
                              "subinterpreter: its C core keeps process-wide "
                              "state"), message


@pytest.mark.skipif(not ATTRIBUTE_DECLARES, reason=NEEDS_ATTRIBUTE)
def test_an_interpreters_own_tags_stay_out_of_the_shared_table(
        capi: ModuleType) -> None:
    """Each interpreter numbers its classes' version tags from the same
    start, and a class freed in one may leave its address to a class of
    another: a (type, tag) entry made by one interpreter could then answer
    for a stranger in the next.  So a class's tag is the main interpreter's
    alone to cache; static and immutable types (tags of the process) are
    shared."""
    probe = textwrap.dedent(f'''
        import importlib.util
        spec = importlib.util.spec_from_file_location({capi.__name__!r},
                                                      {capi.__file__!r})
        capi = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(capi)
        class K(bytearray):
            __buffer_supported_flags__ = capi.PyBUF_ND
        for obj in (K(b"ab"), b"x"):
            capi.reset_cache_stats()
            for _ in range(3):
                assert capi.supported_flags(obj) == (
                    capi.PyBUF_ND if type(obj) is K else
                    capi.BUFFEREXT_LEGACY_FLAGS)
            # flushed: an interpreter's stdout is its own (3.14 writes the
            # subinterpreter's buffer first, at its close)
            print(type(obj).__name__, *capi.cache_stats(), flush=True)
    ''')
    code = RUNNER + textwrap.dedent(f'''
        probe = {probe!r}
        exec(probe, {{}})                   # main: both cached
        t = threading.Thread(target=run_isolated, args=(probe,))
        t.start()
        t.join()
    ''')
    result = run_child(code)
    assert result.returncode == 0, result.stdout + result.stderr
    # (hits, misses) of three queries: the main interpreter's class misses
    # once; the subinterpreter's misses every time; bytes hits in both
    assert result.stdout.split() == ["K", "2", "1", "bytes", "2", "1",
                                     "K", "0", "3", "bytes", "3", "0"]
