"""The examples of the pages, run as a newcomer pastes them.

Every example a reader can copy from README.md, headers/README.md and
docs/**/*.rst is found here and run in a fresh interpreter, outside the
source tree (so the installed package answers), with the stand-in CUDA
driver and VEO library the tests build (test doubles: no GPU or VE is
needed):

* a ``>>>`` session (a ``::`` literal block, a ``python``/``pycon`` code
  block or a bare doctest block) runs as doctest runs it (``...`` elides
  output) and must print what the page shows; it starts from nothing, as
  a pasted one does, so it makes its own imports;
* a ``python`` code block without prompts runs whole and must not raise;
* a ``cython`` code block is compiled by Cython and the C compiler against
  the installed package's declarations, and imported;
* a ``console`` block's command, ``$ python -m bufferext ...`` or a script
  of ``docs/`` (under ``mpiexec -n N`` as the page says, where mpi4py is
  installed: the processes' lines in any order), must exit 0 and print
  what the page shows under it (``...`` elides);
* the ``>>>`` examples of the docstrings the API pages render (the public
  names of ``bufferext`` and ``bufferext.distarray``) run in the namespace
  of their public module, with numpy as ``np``.

An example that cannot run here is listed in NOT_RUN with the reason (a
build it needs, a package index, several processes): a new example that is
not listed runs, so one that breaks fails, naming its page and line.
Shell blocks (``sh``: the build commands) are left to the tests that build
the recipes and to CI's newcomer step, which runs the README's commands.
"""

from __future__ import annotations

import doctest
import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Dict, Iterator, List, Tuple

import pytest

import bufferext
import bufferext.distarray
from _helpers import mpiexec, run_installed

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

pytestmark = pytest.mark.skipif(not DOCS.is_dir(), reason="docs/ is not "
                                "beside the tests (a copy of tests/)")

#: Examples that are not run here, by page and the start of their text (a
#: console example is its command), with the reason.
NOT_RUN: Dict[Tuple[str, str], str] = {
    ("README.md", "import bufferext_headers\nfrom setuptools"):
        "the recipe's setup.py: tests/test_recipes.py builds it",
    ("headers/README.md", "import bufferext_headers"):
        "needs the bufferext-headers wheel, which tests/test_headers_dist.py "
        "builds and asks get_include()",
    ("docs/cuda.rst", "import numpy as np, bufferext, bufferext_cuda_scale"):
        "needs docs/examples/cuda/scale.cu built by nvcc: "
        "tests/test_cuda_example.py runs it where nvcc is",
    ("docs/index.rst", "python -m pip install ."):
        "installs: CI's newcomer step runs the README's commands",
    ("docs/tutorial.rst", "python -m pip install "):
        "installs: CI installs bufferext with its [mpi] extra for its MPI steps",
}

EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")

PAGES = sorted([ROOT / "README.md", ROOT / "headers" / "README.md",
                *DOCS.rglob("*.rst")])


@dataclass
class Example:
    """One example: ``kind`` is ``session``, ``python``, ``cython``,
    ``console`` or ``docstring``; ``page:line`` is where its first line is (for a
    docstring, its file in the package and ``name`` its object)."""
    kind: str
    page: str
    line: int
    text: str
    name: str = ""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _rst_block(lines: List[str], start: int) -> Tuple[int, List[str]]:
    """The literal content after the line ``start`` (a ``::`` line or a
    directive): its first line's index and its lines, dedented."""
    base = _indent(lines[start])
    i = start + 1
    while i < len(lines) and lines[i].strip().startswith(":") and \
            _indent(lines[i]) > base:             # a directive's options
        i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    first = i
    while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > base):
        i += 1
    body = textwrap.dedent("\n".join(lines[first:i])).strip("\n")
    return first, body.splitlines()


CODE_BLOCK = re.compile(r"\.\. (?:code-block|code|sourcecode)::\s*(\S+)")


def _rst_examples(page: str, text: str) -> Iterator[Example]:
    lines = text.splitlines()
    covered = set()
    for i, line in enumerate(lines):
        stripped = line.strip()
        match = CODE_BLOCK.match(stripped)
        if match:
            language = match.group(1)
        elif stripped.endswith("::") and not stripped.startswith(".. "):
            language = "literal"
        else:
            continue
        first, body = _rst_block(lines, i)
        covered.update(range(first, first + len(body)))
        yield from _classify(page, first + 1, language, body)
    for i, line in enumerate(lines):          # doctest blocks: bare >>>
        if line.lstrip().startswith(">>>") and i not in covered and \
                (i == 0 or not lines[i - 1].strip()):
            end = i
            while end < len(lines) and lines[end].strip():
                end += 1
            yield Example("session", page, i + 1,
                          textwrap.dedent("\n".join(lines[i:end])))


FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def _md_examples(page: str, text: str) -> Iterator[Example]:
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start(2)) + 1
        yield from _classify(page, line, match.group(1),
                             match.group(2).rstrip("\n").splitlines())


def _classify(page: str, line: int, language: str,
              body: List[str]) -> Iterator[Example]:
    if not body:
        return
    if body[0].startswith(">>>"):
        yield Example("session", page, line, "\n".join(body))
    elif language in ("python", "cython"):
        yield Example(language, page, line, "\n".join(body))
    elif language == "console":
        for n, text in enumerate(body):
            if text.startswith("$ "):
                output = []
                for shown in body[n + 1:]:
                    if shown.startswith("$ "):
                        break
                    output.append(shown)
                yield Example("console", page, line + n,
                              "\n".join([text[2:], *output]))


def _page_examples() -> List[Example]:
    found = []
    for path in PAGES:
        if path.is_file():
            page = path.relative_to(ROOT).as_posix()
            text = path.read_text(encoding="utf-8")
            parse = _md_examples if path.suffix == ".md" else _rst_examples
            found.extend(parse(page, text))
    return found


def _docstring_examples() -> List[Example]:
    """The ``>>>`` examples of the docstrings of the public names (what the
    API pages render), each named by its file in the package."""
    found: Dict[Tuple[str, int], Example] = {}
    package = Path(bufferext.__file__).resolve().parent.parent
    finder = doctest.DocTestFinder()
    for module in (bufferext, bufferext.distarray):
        for obj in [module] + [getattr(module, n) for n in module.__all__]:
            for test in finder.find(obj, module.__name__):
                if test.examples and test.filename and test.lineno is not None:
                    page = Path(test.filename).resolve().relative_to(package)
                    found[(page.as_posix(), test.lineno)] = Example(
                        "docstring", page.as_posix(), test.lineno + 1,
                        test.docstring or "", module.__name__)
    return sorted(found.values(), key=lambda e: (e.page, e.line))


def _listed(example: Example) -> str:
    """The reason ``example`` is not run, or ''."""
    start = example.text.splitlines()[0] if example.kind == "console" \
        else example.text
    reasons = [why for (page, head), why in NOT_RUN.items()
               if page == example.page and start.startswith(head)]
    return reasons[0] if reasons else ""


EXAMPLES = _page_examples() if DOCS.is_dir() else []
DOCSTRINGS = _docstring_examples()


@pytest.fixture(scope="module")
def standins(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    """The stand-in CUDA driver and VEO library (test doubles), built once,
    as the environment that selects them."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the stand-in drivers are built for Linux")
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "cuda_standin"))
    sys.path.insert(0, os.path.join(here, "ve_standin"))
    try:
        import standin as ve_standin
        import standin_harness as cuda_standin
    finally:
        del sys.path[:2]
    directory = str(tmp_path_factory.mktemp("docs_examples_standins"))
    return {"BUFFEREXT_CUDA_DRIVER": cuda_standin.build(directory),
            "BUFFEREXT_VEO_LIBRARY": ve_standin.build(directory)}


#: What the child runs: the example (JSON in argv[1]) as doctest runs a
#: session (a docstring's in the names of its public module, ``name``), or
#: whole; doctest's report names the page and the line.
CHILD = r"""
import doctest, importlib, json, sys
example = json.loads(sys.argv[1])
page, line, text = example["page"], example["line"], example["text"]
if example["kind"] == "python":
    exec(compile("\n" * (line - 1) + text, page, "exec"), {"__name__": "__main__"})
    sys.exit(0)
globs = {"__name__": "__main__"}
if example["kind"] == "docstring":
    import numpy
    module = importlib.import_module(example["name"])
    globs.update({n: getattr(module, n) for n in module.__all__}, np=numpy)
test = doctest.DocTestParser().get_doctest(text, globs, page, page, line - 1)
runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
runner.run(test, out=sys.stdout.write)
sys.exit(1 if runner.failures else 0)
"""


def build_cython(example: Example, capi_build: ModuleType, outdir: Path) -> None:
    """``example`` as the module ``docs_example`` in ``outdir``: Cython (its
    messages give the page's line numbers), then the C compiler."""
    pyx = outdir / "docs_example.pyx"
    pyx.write_text("\n" * (example.line - 1) + example.text + "\n")
    done = subprocess.run([sys.executable, "-m", "cython", "-3", str(pyx)],
                          capture_output=True, text=True, cwd=outdir, timeout=120)
    if done.returncode != 0:
        pytest.fail(f"{example.where}: Cython refuses the example\n"
                    f"{done.stdout}{done.stderr}", pytrace=False)
    result = capi_build.BuildResult(
        "docs_example", "c11", str(outdir / f"docs_example{EXT_SUFFIX}"),
        capi_build.compilers()["c"] + [
            "-std=c11", "-fPIC", "-shared", "-Wno-unused-function",
            *("-I" + d for d in capi_build.include_dirs()),
            str(outdir / "docs_example.c"), "-o",
            str(outdir / f"docs_example{EXT_SUFFIX}")], -1, "")
    [built] = capi_build.build([result])
    if not built.ok:
        pytest.fail(f"{example.where}: the C compiler refuses Cython's C\n"
                    f"{built.output}", pytrace=False)


def run_example(example: Example, env: Dict[str, str]) -> None:
    """Run ``example`` in a fresh interpreter with ``env`` set; fail naming
    its page and line unless it runs and prints what the page shows.  A
    ``cython`` example is imported, from the ``PYTHONPATH`` in ``env``."""
    if example.kind == "cython":
        done = run_installed("-c", "import docs_example", **env)
        if done.returncode != 0:
            pytest.fail(f"{example.where}: the built example fails to import\n"
                        f"{done.stdout}{done.stderr}", pytrace=False)
        return
    if example.kind != "console":
        done = run_installed("-c", CHILD, json.dumps(example.__dict__), **env)
        if done.returncode != 0:
            pytest.fail(f"{example.where}: the example fails\n"
                        f"{done.stdout}{done.stderr}", pytrace=False)
        return
    command, *shown = example.text.splitlines()
    done = _run_command(example, shlex.split(command), env)
    if done.returncode != 0:
        pytest.fail(f"{example.where}: `{command}` exits {done.returncode}\n"
                    f"{done.stdout}{done.stderr}", pytrace=False)
    expected = "\n".join(shown) + "\n" if shown else done.stdout
    got = done.stdout
    if command.startswith("mpiexec "):      # the processes' lines interleave
        expected, got = ("".join(sorted(t.splitlines(True))) for t in (expected, got))
    checker = doctest.OutputChecker()
    if not checker.check_output(expected, got, doctest.ELLIPSIS):
        pytest.fail(f"{example.where}: `{command}` prints something else:\n" +
                    checker.output_difference(doctest.Example(command, expected),
                                              got, doctest.ELLIPSIS),
                    pytrace=False)


def _run_command(example: Example, argv: List[str],
                 env: Dict[str, str]) -> subprocess.CompletedProcess:
    """A console command as the page gives it: ``python -m bufferext ...``
    (outside the source tree), or ``[mpiexec -n N] python docs/...`` from
    the checkout's root, without a launcher's variables (this test may run
    under one) and with Python's output buffered, so that each line a
    process prints is one write that mpiexec does not cut."""
    if argv[:3] == ["python", "-m", "bufferext"]:
        return run_installed(*argv[1:], **env)
    launcher: List[str] = []
    if argv[:2] == ["mpiexec", "-n"]:
        pytest.importorskip("mpi4py", reason="several processes: mpiexec "
                            "comes with mpi4py and mpich (the 'mpi' extra)")
        launcher, argv = [mpiexec(), "-n", argv[2]], argv[3:]
    if argv[0] != "python" or not argv[1].startswith("docs/"):
        pytest.fail(f"{example.where}: `{shlex.join(argv)}` is neither a "
                    "bufferext command nor a script of docs/: list it in "
                    "NOT_RUN with the reason", pytrace=False)
    child_env = {k: v for k, v in os.environ.items()
                 if k not in ("PYTHONPATH", "PYTHONUNBUFFERED") and
                 not k.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_"))}
    return subprocess.run(launcher + [sys.executable, *argv[1:]], cwd=ROOT,
                          env=dict(child_env, **env), capture_output=True,
                          text=True, timeout=300)


@pytest.mark.thread_unsafe(reason="a Cython example is built into the "
                           "test's one tmp_path, and capi_build is asked for "
                           "from the test's body")
@pytest.mark.parametrize("example", EXAMPLES + DOCSTRINGS,
                         ids=lambda e: e.where)
def test_the_example_runs_as_the_page_shows(example: Example,
                                            standins: Dict[str, str],
                                            request: pytest.FixtureRequest,
                                            tmp_path: Path) -> None:
    why = _listed(example)
    if why:
        pytest.skip(f"{example.where} is not run here: {why}")
    env = dict(standins)
    if example.kind == "cython":
        pytest.importorskip("Cython", reason="Cython is not installed (the "
                            "'test' extra brings it)")
        capi_build = request.getfixturevalue("capi_build")
        try:
            capi_build.compilers()
        except capi_build.CompilerNotFound as exc:
            pytest.skip(f"a Cython example needs a C compiler: {exc}")
        build_cython(example, capi_build, tmp_path)
        env["PYTHONPATH"] = str(tmp_path)
    run_example(example, env)


def test_every_listed_example_is_on_its_page() -> None:
    """An entry of NOT_RUN names exactly one example, so none stays behind
    when its example changes or goes."""
    for (page, head), why in NOT_RUN.items():
        matches = [e.where for e in EXAMPLES if e.page == page and
                   (e.text.splitlines()[0] if e.kind == "console"
                    else e.text).startswith(head)]
        assert len(matches) == 1, f"NOT_RUN's {page!r} {head!r}: {matches}"


PLANTED_RST = """\
Title
=====

.. automethod:: f

   A session in a directive::

      >>> 1 + 1
      2

.. code-block:: python
   :caption: a script

   x = 1
   print(x)

.. code-block:: console

   $ python -m bufferext --version
   bufferext ...
   $ python -m bufferext --cflags

.. code-block:: cython

   cdef int n = 1

::

   #include <Python.h>

>>> 'a doctest block'
'a doctest block'
"""

PLANTED_MD = """\
# Title

```python
import bufferext
```

```sh
python -m pip install .
```
"""


def test_the_parser_finds_each_kind_at_its_line() -> None:
    """Every kind of example, at the line a failure would name; a C literal
    block and a shell block are none (a parser that found nothing would
    pass every page)."""
    found = [(e.kind, e.where, e.text) for e in
             _rst_examples("p.rst", PLANTED_RST)]
    assert found == [
        ("session", "p.rst:8", ">>> 1 + 1\n2"),
        ("python", "p.rst:14", "x = 1\nprint(x)"),
        ("console", "p.rst:19", "python -m bufferext --version\nbufferext ..."),
        ("console", "p.rst:21", "python -m bufferext --cflags"),
        ("cython", "p.rst:25", "cdef int n = 1"),
        ("session", "p.rst:31", ">>> 'a doctest block'\n'a doctest block'"),
    ]
    assert [(e.kind, e.where, e.text) for e in _md_examples("p.md", PLANTED_MD)] \
        == [("python", "p.md:4", "import bufferext")]
    assert EXAMPLES and DOCSTRINGS


def test_a_broken_example_fails_naming_its_page_and_line(
        tmp_path: Path, standins: Dict[str, str]) -> None:
    page = ("Title\n=====\n\nA session::\n\n   >>> import bufferext\n"
            "   >>> bufferext.BufferFlags.DEVICE.value\n   65537\n")
    [example] = _rst_examples("docs/planted.rst", page)
    assert (example.kind, example.where) == ("session", "docs/planted.rst:6")
    with pytest.raises(pytest.fail.Exception) as failed:
        run_example(example, standins)
    message = str(failed.value)
    assert "docs/planted.rst:6: the example fails" in message
    assert 'File "docs/planted.rst", line 7' in message
    assert "Expected:\n    65537\nGot:\n    65536" in message
